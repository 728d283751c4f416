"""The data model of the dataset: Definition, Workload, Solution and Trace.

Field names follow the FlashInfer Trace schema (FlashInfer-Bench's `flashinfer_bench.data` models read
our definition and workload files). Our additions are optional fields that FlashInfer-Bench ignores;
docs/FORMAT.md lists them.
"""

from __future__ import annotations

import ast
from enum import Enum
from functools import cached_property
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NonEmptyString = Annotated[str, Field(min_length=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Model(BaseModel):
    """Base: attribute docstrings become JSON-schema descriptions; unknown fields are refused so typos
    surface (FlashInfer-Bench's own models ignore our extra fields, so files stay readable there)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


# --------------------------------------------------------------------------- definitions


class AxisConst(Model):
    """An axis with a fixed value (heads, head dims)."""

    type: Literal["const"] = "const"
    """Constant axis."""
    value: NonNegativeInt
    """Its value."""
    description: Optional[str] = None
    """What the axis means."""


class AxisVar(Model):
    """An axis whose value each workload gives (tokens, batch)."""

    type: Literal["var"] = "var"
    """Variable axis."""
    description: Optional[str] = None
    """What the axis means."""


Axis = Annotated[Union[AxisConst, AxisVar], Field(discriminator="type")]


class DType(str, Enum):
    """Element types (the FlashInfer set)."""

    FLOAT64 = "float64"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E5M2 = "float8_e5m2"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    BOOL = "bool"

    @property
    def is_floating(self) -> bool:
        return self.value.startswith(("float", "bfloat"))


GeneratorKind = Literal[
    "randn", "uniform", "l2_normalized", "logsigmoid", "sigmoid", "constant",
    "cu_seqlens", "slot_indices", "none",
]


class Generator(Model):
    """How random values for one input are drawn (ours; docs/FORMAT.md has the table)."""

    kind: GeneratorKind
    """Distribution or construction."""
    mean: Optional[float] = None
    """randn, logsigmoid, sigmoid: mean of the normal drawn (default 0)."""
    std: Optional[float] = None
    """randn, logsigmoid, sigmoid: standard deviation of the normal drawn (default 1)."""
    low: Optional[float] = None
    """uniform: lower end (default 0)."""
    high: Optional[float] = None
    """uniform: upper end, exclusive (default 1)."""
    lower_bound: Optional[float] = None
    """logsigmoid: clamp values to [lower_bound, 0]."""
    value: Optional[float] = None
    """constant: the value of every element."""
    pool_axis: Optional[str] = None
    """slot_indices: the axis whose size is the number of slots."""
    pad_rows: Optional[int] = Field(default=None, ge=0)
    """slot_indices: the last pad_rows rows (first axis) are -1, PAD_SLOT_ID (padding entries of an
    engine's CUDA-graph batch); the other rows hold distinct slots."""
    first_slot: Optional[int] = Field(default=None, ge=0)
    """slot_indices: the distinct slots are drawn from [first_slot, pool) (default 0; 1 where slot 0 is a
    reserved null slot that no request owns)."""
    pad_value: Optional[int] = Field(default=None, le=0)
    """slot_indices: the value of the padding rows (default -1, PAD_SLOT_ID; 0 pads with the null slot)."""
    total_axis: Optional[str] = None
    """cu_seqlens: the token axis that the sequence lengths must sum to."""

    @model_validator(mode="after")
    def _validate_params(self) -> "Generator":
        if self.kind == "constant" and self.value is None:
            raise ValueError("generator 'constant' needs 'value'")
        if self.kind == "slot_indices" and not self.pool_axis:
            raise ValueError("generator 'slot_indices' needs 'pool_axis'")
        if self.kind == "uniform" and (self.low or 0.0) >= (1.0 if self.high is None else self.high):
            raise ValueError("generator 'uniform' needs low < high")
        if self.std is not None and self.std < 0:
            raise ValueError("generator 'randn' needs std >= 0")
        return self


class Tolerance(Model):
    """When an output counts as correct (ours). Unset fields take the defaults for the output dtype."""

    atol: Optional[float] = Field(default=None, ge=0)
    """Absolute part of the element-wise bound atol + rtol * |ref|."""
    rtol: Optional[float] = Field(default=None, ge=0)
    """Relative part of the element-wise bound."""
    min_matched_ratio: Optional[float] = Field(default=None, ge=0, le=1)
    """Fraction of elements that must be within the element-wise bound."""
    max_rms_rel_error: Optional[float] = Field(default=None, ge=0)
    """Largest allowed RMS(ref - out) / RMS(ref)."""
    min_cosine: Optional[float] = Field(default=None, ge=-1, le=1)
    """Smallest allowed cosine similarity of the flattened tensors."""
    max_row_rel_error: Optional[float] = Field(default=None, ge=0)
    """Largest allowed error of any one row (a row: the output's trailing `head_dim*` axes, or its last axis when
    it has none; e.g. one (token, head) of o, one (sequence, head) of a state): RMS(ref_row - out_row) /
    max(RMS(ref_row), row_atol). One wrong, zeroed or stale row fails it at any output size."""
    row_atol: Optional[float] = Field(default=None, ge=0)
    """Absolute floor of the per-row bound's denominator, for rows near zero (default: atol)."""


class TensorSpec(Model):
    """An input or output: symbolic shape (None for a scalar) and dtype."""

    shape: Optional[List[NonEmptyString]]
    """Axis names, or null for a scalar."""
    dtype: DType
    """Element type."""
    description: Optional[str] = None
    """What the tensor holds."""
    generator: Optional[Generator] = None
    """Inputs (ours): how random values are drawn; default randn."""
    optional: bool = False
    """Inputs (ours): the input may be None."""
    tolerance: Optional[Tolerance] = None
    """Outputs (ours): correctness bounds."""
    sequence_axis: Optional[str] = None
    """Outputs (ours): the token axis, for error-vs-position plots."""


class Cost(Model):
    """Work of one call as Python expressions over the axes (ours), for TFLOP/s and TB/s."""

    flops: Optional[str] = None
    """Floating-point operations."""
    bytes: Optional[str] = None
    """Fewest bytes moved through device memory."""


class Definition(Model):
    """A kernel variant: axes, inputs, outputs and the reference `run()` that defines the math."""

    name: NonEmptyString
    """Unique name; equals the file name without `.json`."""
    op_type: NonEmptyString
    """Family of operators, e.g. `kda`."""
    axes: Dict[NonEmptyString, Axis]
    """Symbolic dimensions used in shapes."""
    inputs: Dict[NonEmptyString, TensorSpec]
    """Inputs in call order."""
    outputs: Dict[NonEmptyString, TensorSpec]
    """Outputs in return order."""
    reference: NonEmptyString
    """Python source with a top-level `run` taking the inputs by name."""
    tags: List[NonEmptyString] = Field(default_factory=list)
    """Labels, `key:value` for the KDA vocabulary (docs/FORMAT.md)."""
    description: Optional[str] = None
    """What the kernel is and which model and engine path it stands for."""
    constraints: List[NonEmptyString] = Field(default_factory=list)
    """Python expressions over axes and scalar inputs that every workload satisfies."""
    inplace: Dict[NonEmptyString, NonEmptyString] = Field(default_factory=dict)
    """Ours: output -> input whose storage the solution may reuse for that output."""
    cost: Optional[Cost] = None
    """Ours: flop and byte counts."""

    @model_validator(mode="after")
    def _validate_reference(self) -> "Definition":
        try:
            module = ast.parse(self.reference, mode="exec")
        except SyntaxError as e:
            raise ValueError(f"reference: syntax error at line {e.lineno}: {e.msg}") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in module.body):
            raise ValueError("reference: no top-level function named 'run'")
        return self

    @model_validator(mode="after")
    def _validate_names(self) -> "Definition":
        both = set(self.inputs) & set(self.outputs)
        if both:
            raise ValueError(f"inputs and outputs share names: {sorted(both)}")
        for out, inp in self.inplace.items():
            if out not in self.outputs:
                raise ValueError(f"inplace: {out!r} is not an output")
            if inp not in self.inputs:
                raise ValueError(f"inplace: {inp!r} is not an input")
        return self

    @model_validator(mode="after")
    def _validate_shapes(self) -> "Definition":
        for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            for tname, spec in specs.items():
                for axis in spec.shape or []:
                    if axis not in self.axes:
                        raise ValueError(f"{kind}.{tname}.shape: axis {axis!r} is not declared in axes")
                if spec.sequence_axis and spec.sequence_axis not in (spec.shape or []):
                    raise ValueError(f"{kind}.{tname}.sequence_axis: {spec.sequence_axis!r} is not in its shape")
                gen = spec.generator
                if gen and gen.kind == "none" and not spec.optional:
                    raise ValueError(f"{kind}.{tname}.generator: 'none' needs the input to be optional")
                if gen and gen.pool_axis and gen.pool_axis not in self.axes:
                    raise ValueError(f"{kind}.{tname}.generator.pool_axis: {gen.pool_axis!r} is not an axis")
        return self

    @model_validator(mode="after")
    def _validate_expressions(self) -> "Definition":
        exprs = [(f"constraints[{i}]", c) for i, c in enumerate(self.constraints)]
        if self.cost:
            exprs += [("cost.flops", self.cost.flops), ("cost.bytes", self.cost.bytes)]
        for where, expr in exprs:
            if expr is None:
                continue
            try:
                ast.parse(expr, mode="eval")
            except SyntaxError as e:
                raise ValueError(f"{where}: not a valid Python expression: {expr!r} ({e.msg})") from None
        return self

    @cached_property
    def const_axes(self) -> Dict[str, int]:
        """Constant axes and their values."""
        return {n: a.value for n, a in self.axes.items() if isinstance(a, AxisConst)}

    @cached_property
    def var_axes(self) -> List[str]:
        """Names of the variable axes, in declaration order."""
        return [n for n, a in self.axes.items() if isinstance(a, AxisVar)]

    @cached_property
    def tag_values(self) -> Dict[str, List[str]]:
        """`key:value` tags grouped by key (a tag without ':' maps to [''])."""
        out: Dict[str, List[str]] = {}
        for tag in self.tags:
            key, _, value = tag.partition(":")
            out.setdefault(key, []).append(value)
        return out

    def tag(self, key: str, default: Optional[str] = None) -> Optional[str]:
        """The value of the first `key:value` tag, or `default`."""
        return self.tag_values.get(key, [default])[0]

    def shape_of(self, spec: TensorSpec, axes: Dict[str, int]) -> Optional[List[int]]:
        """Concrete shape of a tensor spec for the given var-axis values."""
        if spec.shape is None:
            return None
        values = {**self.const_axes, **axes}
        return [values[a] for a in spec.shape]


# --------------------------------------------------------------------------- workloads


class RandomInput(Model):
    """Random values from the definition's generator (or this one)."""

    type: Literal["random"] = "random"
    """Random input."""
    generator: Optional[Generator] = None
    """Ours: overrides the definition's generator for this workload."""


class ScalarInput(Model):
    """A literal scalar."""

    type: Literal["scalar"] = "scalar"
    """Scalar input."""
    value: Union[bool, int, float]
    """The value."""


class SafetensorsInput(Model):
    """A tensor stored in a safetensors file inside the dataset root."""

    type: Literal["safetensors"] = "safetensors"
    """Stored input."""
    path: NonEmptyString
    """Path relative to the dataset root (no `..`, not absolute)."""
    tensor_key: NonEmptyString
    """Key of the tensor in the file."""

    @field_validator("path")
    @classmethod
    def _validate_path(cls, path: str) -> str:
        if path.startswith(("/", "\\")) or ":" in path.split("/")[0]:
            raise ValueError(f"path must be relative to the dataset root: {path!r}")
        if ".." in path.replace("\\", "/").split("/"):
            raise ValueError(f"path must not leave the dataset root: {path!r}")
        return path


InputSpec = Annotated[Union[RandomInput, ScalarInput, SafetensorsInput], Field(discriminator="type")]


class Workload(Model):
    """One concrete call of a definition: values of its var axes and where each input comes from."""

    uuid: NonEmptyString
    """Unique identifier within the dataset."""
    axes: Dict[str, NonNegativeInt]
    """A value for every var axis of the definition."""
    inputs: Dict[str, InputSpec]
    """One entry per definition input."""
    seq_lens: Optional[List[int]] = None
    """Ours: lengths of the sequences of a packed batch (for the `cu_seqlens` generator)."""
    tags: List[str] = Field(default_factory=list)
    """Ours: `smoke`, `stress`, `edge`, ..."""
    description: Optional[str] = None
    """Ours: why this workload exists."""

    @field_validator("seq_lens")
    @classmethod
    def _validate_seq_lens(cls, seq_lens: Optional[List[int]]) -> Optional[List[int]]:
        if seq_lens is not None:
            if not seq_lens:
                raise ValueError("seq_lens must name at least one sequence")
            bad = [i for i, n in enumerate(seq_lens) if n <= 0]
            if bad:
                raise ValueError(f"seq_lens: sequence {bad[0]} has length {seq_lens[bad[0]]}; every sequence needs >= 1 token")
        return seq_lens


# --------------------------------------------------------------------------- solutions


class SourceFile(Model):
    """One source file of a solution."""

    path: NonEmptyString
    """Relative path."""
    content: str
    """File text."""


class BuildSpec(Model):
    """How to build and call a solution (FlashInfer's fields)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    language: NonEmptyString
    """`python`, `triton`, `cuda`, ..."""
    target_hardware: List[str] = Field(default_factory=list)
    """Hardware the solution is meant for."""
    entry_point: NonEmptyString
    """`file.py::function`."""
    dependencies: List[str] = Field(default_factory=list)
    """Packages it needs."""
    destination_passing_style: bool = False
    """True when the function takes the outputs as trailing arguments and fills them."""


class SolutionSpec(Model):
    """A FlashInfer-style Solution JSON file."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    name: NonEmptyString
    """Solution name."""
    definition: NonEmptyString
    """The definition it implements."""
    author: str = ""
    """Who wrote it."""
    spec: BuildSpec
    """Build and call information."""
    sources: List[SourceFile] = Field(min_length=1)
    """Its source files."""
    description: Optional[str] = None
    """What it is."""


# --------------------------------------------------------------------------- traces


class EvaluationStatus(str, Enum):
    """Outcome of one solution on one workload."""

    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    INVALID_REFERENCE = "INVALID_REFERENCE"
    """Ours: the reference output holds NaN/Inf, or the reference failed: nobody can pass."""
    INPUT_MUTATED = "INPUT_MUTATED"
    """Ours: the solution changed an input it may not write."""
    INVALID_WORKLOAD = "INVALID_WORKLOAD"
    """Ours: the workload's inputs could not be made."""
    UNSUPPORTED = "UNSUPPORTED"
    """Ours: the solution does not support this definition (listed as skipped)."""
    REWARD_HACK = "REWARD_HACK"
    """Ours (SOL-ExecBench's name): the solution reached around the runner: it changed the harness, torch or the
    timer, left work running after it returned (another stream or thread), returned memory it does not own, or
    was timed below the workload's physical floor. The log says what was seen. Never a pass, whatever its outputs."""


class WorstElement(Model):
    """One of the worst elements of an output."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", ser_json_inf_nan="strings")

    index: List[int]
    """Coordinates."""
    where: str
    """Coordinates named by axis, e.g. 'token 417 of sequence 3, head 12, dim 77'."""
    reference: float
    """Reference value."""
    value: float
    """Solution value."""
    abs_error: float
    """|reference - value|."""


class WorstRow(Model):
    """The worst row of an output under the per-row bound."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", ser_json_inf_nan="strings")

    index: List[int]
    """Coordinates of the row along the output's leading (non-row) axes."""
    where: str
    """Coordinates named by axis, e.g. 'token 4 of sequence 2, head 12'."""
    row_rel_error: float
    """RMS(ref_row - out_row) / max(RMS(ref_row), row_atol)."""
    reference_rms: float
    """RMS of the reference row."""
    error_rms: float
    """RMS of the error over the row."""


class OutputMetrics(Model):
    """Ours: full metrics of one output tensor."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", ser_json_inf_nan="strings")

    passed: bool
    """Whether this output met its tolerance."""
    reason: str = ""
    """Why it failed, when it did."""
    max_abs_error: float
    mean_abs_error: float
    max_rel_error: float
    mean_rel_error: float
    rms_rel_error: float
    """RMS(ref - out) / RMS(ref)."""
    cosine: float
    """Cosine similarity of the flattened tensors."""
    mse: float
    matched_ratio: float
    """Fraction of elements within atol + rtol * |ref|."""
    nan_count: int
    inf_count: int
    tolerance: Tolerance
    """The tolerance applied."""
    worst: List[WorstElement] = Field(default_factory=list)
    """The top-5 worst elements."""
    error_by_position: Optional[List[float]] = None
    """RMS-relative error per bucket of the sequence axis (for plots)."""
    bit_identical_violations: Optional[int] = None
    """For in-place outputs: elements the reference left unchanged that the solution changed."""
    max_row_rel_error: Optional[float] = None
    """The largest per-row error (see Tolerance.max_row_rel_error); NaN rows count as Inf."""
    rows_over_bound: Optional[int] = None
    """How many rows exceed Tolerance.max_row_rel_error."""
    worst_row: Optional["WorstRow"] = None
    """The row with the largest per-row error."""


class Correctness(Model):
    """Correctness metrics (FlashInfer's two plus ours per output)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", ser_json_inf_nan="strings")

    max_relative_error: float = 0.0
    """Largest over all outputs."""
    max_absolute_error: float = 0.0
    """Largest over all outputs."""
    extra: Optional[Dict[str, Any]] = None
    """Anything else."""
    outputs: Dict[str, OutputMetrics] = Field(default_factory=dict)
    """Ours: per-output metrics."""


class Performance(Model):
    """Timing (FlashInfer's three plus ours)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", ser_json_inf_nan="strings")

    latency_ms: float = 0.0
    """Median solution time."""
    reference_latency_ms: float = 0.0
    """Median reference time."""
    speedup_factor: float = 0.0
    """reference / solution."""
    min_ms: Optional[float] = None
    max_ms: Optional[float] = None
    repetitions: Optional[int] = None
    mode: Optional[str] = None
    """`cuda_events`, `cuda_graph`, `cuda_sync_wall` (the reference: one device-synchronised call with the
    GPU alone) or `cpu_wall` (interpreter timing: not a speed figure)."""
    tflops: Optional[float] = None
    """Achieved TFLOP/s from the definition's cost."""
    tbps: Optional[float] = None
    """Achieved TB/s from the definition's cost."""
    sol_fraction: Optional[float] = None
    """Ours: speed-of-light fraction, max(tbps / peak TB/s, tflops / peak TFLOP/s) with the peaks in the
    environment (kda_trace/roofline.py); absent without peaks (the CPU, an unknown GPU) or without a cost."""
    sol_bound: Optional[Literal["memory", "compute"]] = None
    """Ours: the term that gave sol_fraction: memory bandwidth or compute throughput."""
    wall_ms: Optional[float] = None
    """Ours: the median host-clock time of a timed repetition, between device-wide synchronisations (GPU only):
    what the CUDA events are checked against (kda_trace/timing.py's OUTSIDE_STREAM_FACTOR)."""


class DevicePeaks(Model):
    """Ours: the roofline a record's speed-of-light fraction is measured against."""

    model: str
    """Device model the values are for, e.g. 'H100 SXM5 80GB'."""
    tbps: Optional[float] = None
    """Peak memory bandwidth, TB/s."""
    tflops: Optional[float] = None
    """Peak dense bf16 tensor throughput, TFLOP/s."""
    source: str
    """'datasheet: <document>', or 'user' for values given with --peak-tbps / --peak-tflops."""


class Environment(Model):
    """Where an evaluation ran."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    hardware: NonEmptyString
    """Device name, e.g. 'NVIDIA H100 80GB HBM3' or 'cpu'."""
    libs: Dict[str, str] = Field(default_factory=dict)
    """Library versions (torch, triton, python, driver, ...)."""
    seed: Optional[int] = None
    """Input seed."""
    dataset_revision: Optional[str] = None
    """Git revision of the dataset root, when it is a repository."""
    dataset_digest: Optional[str] = None
    """sha256 of the dataset's definition JSON and workload JSONL files (first 16 hex digits): the dataset that ran, even
    where the git state is missing or stale (a copy of a working tree)."""
    code_digest: Optional[str] = None
    """sha256 of kda_trace's Python source (first 16 hex digits): which runner and kernels ran."""
    device: Optional[str] = None
    """Ours: the device that ran it, `cuda:<index>` or `cpu`."""
    device_uuid: Optional[str] = None
    """Ours: the GPU's UUID (as nvidia-smi prints it), where torch reports one."""
    project_version: Optional[str] = None
    """Ours: the kda-trace version that ran (kda_trace.__version__)."""
    project_commit: Optional[str] = None
    """Ours: git commit of the kda-trace checkout that ran (`-dirty` with local changes to the package);
    absent when the package is not the top level of its own checkout (an installed or copied package)."""
    peaks: Optional[DevicePeaks] = None
    """Ours: the device's peaks used for sol_fraction; absent on the CPU or an unknown GPU."""
    isolation: Optional[str] = None
    """Ours: how solution processes were kept apart from the judge and each other: starting 'sandbox: user+pid+mount+net
    namespaces' (kda_trace/sandbox.py's enter_sandbox; then '+seccomp(...)' or why there is no filter), or 'none: <why>'
    where the machine allows no sandbox (each solution still runs in a process of its own); absent in records made
    before it was recorded."""


class Evaluation(Model):
    """Result of one solution on one workload."""

    status: EvaluationStatus
    """Outcome."""
    environment: Environment
    """Where it ran."""
    timestamp: NonEmptyString
    """ISO time."""
    log: str = ""
    """Error text or notes."""
    correctness: Optional[Correctness] = None
    """Present when outputs were compared."""
    performance: Optional[Performance] = None
    """Present when timed (PASSED only)."""


class Trace(Model):
    """One record of the trace files: definition x workload x solution -> evaluation."""

    definition: NonEmptyString
    """Definition name."""
    workload: Workload
    """The workload as evaluated."""
    solution: Optional[str] = None
    """Solution name."""
    evaluation: Optional[Evaluation] = None
    """The result."""

