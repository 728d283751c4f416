"""Workload -> input tensors: seeded generators, scalars, safetensors files, packed sequence lengths.

Every random input is drawn in float32 on the target device from its own generator, seeded from
(run seed, workload uuid, input name), then cast to its dtype: the same seed gives bit-identical inputs
on the same device, and adding an input to a definition does not change the values of the others.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

import torch

from .dataset import generator_problem
from .schema import Definition, Generator, RandomInput, SafetensorsInput, ScalarInput, TensorSpec, Workload

DEFAULT_SEED = 20261122

TORCH_DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "bool": torch.bool,
}


class InputError(Exception):
    """A workload whose inputs cannot be made; the message names the workload and the input."""


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a schema dtype (enum or string)."""
    return TORCH_DTYPES[getattr(dtype, "value", dtype)]


def input_seed(seed: int, uuid: str, name: str) -> int:
    """A 63-bit seed for one input of one workload."""
    digest = hashlib.sha256(f"{seed}:{uuid}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _draw(gen: Generator, shape: list[int], rng: torch.Generator, device: str) -> torch.Tensor:
    """Values of a float generator, in float32."""
    def randn() -> torch.Tensor:
        """N(mean, std): the normal that randn draws, and that logsigmoid and sigmoid map."""
        x = torch.randn(shape, generator=rng, device=device, dtype=torch.float32)
        return x * (1.0 if gen.std is None else gen.std) + (gen.mean or 0.0)

    if gen.kind == "randn":
        return randn()
    if gen.kind == "uniform":
        low, high = gen.low or 0.0, 1.0 if gen.high is None else gen.high
        return torch.rand(shape, generator=rng, device=device, dtype=torch.float32) * (high - low) + low
    if gen.kind == "l2_normalized":
        x = randn()
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    if gen.kind == "logsigmoid":
        g = torch.nn.functional.logsigmoid(randn())
        return g.clamp(min=gen.lower_bound) if gen.lower_bound is not None else g
    if gen.kind == "sigmoid":
        return torch.sigmoid(randn())
    if gen.kind == "constant":
        return torch.full(shape, float(gen.value), device=device, dtype=torch.float32)
    raise InputError(f"generator {gen.kind!r} cannot make float values")


def _cu_seqlens(spec: TensorSpec, workload: Workload, device: str) -> torch.Tensor:
    offsets = [0]
    for n in workload.seq_lens:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch_dtype(spec.dtype), device=device)


def _slot_indices(spec: TensorSpec, gen: Generator, shape: list[int], axes: Dict[str, int],
                  rng: torch.Generator, device: str) -> torch.Tensor:
    per_row = 1
    for d in shape[1:]:
        per_row *= d
    pad = gen.pad_rows or 0  # the last `pad` rows are PAD_SLOT_ID (-1, or pad_value); the others draw distinct slots
    count = per_row * (shape[0] - pad)
    first = gen.first_slot or 0  # slots below first_slot are reserved (a null slot 0)
    perm = torch.randperm(axes[gen.pool_axis] - first, generator=rng, device=device)[:count] + first
    pad_value = -1 if gen.pad_value is None else gen.pad_value
    padding = torch.full((per_row * pad,), pad_value, dtype=perm.dtype, device=device)
    return torch.cat([perm, padding]).reshape(shape).to(torch_dtype(spec.dtype))


def make_input(definition: Definition, workload: Workload, name: str, axes: Dict[str, int], seed: int,
               device: str, root: Optional[Path]) -> Any:
    """One input of a workload (tensor, Python scalar, or None)."""
    spec = definition.inputs[name]
    source = workload.inputs.get(name, RandomInput())
    if isinstance(source, ScalarInput):
        if spec.shape is not None:
            raise InputError(f"input {name!r}: a scalar value was given for a tensor of shape {spec.shape}")
        return source.value
    if isinstance(source, SafetensorsInput):
        return _load_safetensors(name, spec, source, definition, axes, root, device)
    gen = source.generator or spec.generator or Generator(kind="randn")
    if gen.kind == "none":
        if not spec.optional:
            raise InputError(f"input {name!r}: generator 'none' for an input that is not optional")
        return None
    shape = definition.shape_of(spec, axes)
    if shape is None:
        raise InputError(f"input {name!r}: scalar inputs need {{'type': 'scalar', 'value': ...}} in the workload")
    rng = torch.Generator(device=device)
    rng.manual_seed(input_seed(seed, workload.uuid, name))
    problem = generator_problem(name, gen, shape, workload, axes)
    if problem is not None:
        raise InputError(problem[1])
    if gen.kind == "cu_seqlens":
        return _cu_seqlens(spec, workload, device)
    if gen.kind == "slot_indices":
        return _slot_indices(spec, gen, shape, axes, rng, device)
    return _draw(gen, shape, rng, device).to(torch_dtype(spec.dtype))


_PINNED_FILES: Dict[str, Tuple[int, int, int]] = {}
"""Resolved path -> file_identity when the run started (pin_input_files), checked before each load."""


def file_identity(path: Path) -> Tuple[int, int, int]:
    """(inode, size, change time in ns): any write to the file, or replacing it, changes one of them, and
    no unprivileged process can set a file's change time back."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_ctime_ns


def stored_input_paths(workload: Workload, root: Path) -> Iterable[str]:
    """The resolved paths of the safetensors files a workload names (as _load_safetensors resolves them)."""
    for source in workload.inputs.values():
        if isinstance(source, SafetensorsInput):
            yield str((Path(root) / source.path).resolve())


def input_files(workloads: Iterable[Workload], root: Path) -> Dict[str, Tuple[int, int, int]]:
    """file_identity of every safetensors file that these workloads name (and that exists), by resolved path."""
    found = {}
    for w in workloads:
        for path in stored_input_paths(w, root):
            if path not in found and Path(path).is_file():
                found[path] = file_identity(Path(path))
    return found


def pin_input_files(pins: Dict[str, Tuple[int, int, int]]) -> None:
    """Remember the input files as they were when the run started: a solution runs as the same user and could
    rewrite a later workload's stored inputs (zeros in, zeros out); such a file is refused when loaded."""
    _PINNED_FILES.update(pins)


def _load_safetensors(name, spec, source: SafetensorsInput, definition, axes, root, device):
    from safetensors.torch import load_file

    if root is None:
        raise InputError(f"input {name!r}: safetensors inputs need a dataset root")
    root = Path(root).resolve()
    path = (root / source.path).resolve()
    if root not in path.parents:
        raise InputError(f"input {name!r}: path {source.path!r} leaves the dataset root")
    if not path.is_file():
        raise InputError(f"input {name!r}: file {source.path!r} does not exist")
    pinned = _PINNED_FILES.get(str(path))
    if pinned is not None and file_identity(path) != pinned:
        raise InputError(f"input {name!r}: file {source.path!r} was written or replaced after this run started "
                         "(its inode, size or change time differ): its inputs can no longer be trusted")
    tensors = load_file(str(path), device="cpu")
    if source.tensor_key not in tensors:
        raise InputError(f"input {name!r}: {source.path!r} has no tensor {source.tensor_key!r}")
    t = tensors[source.tensor_key]
    want = definition.shape_of(spec, axes)
    if want is not None and list(t.shape) != want:
        raise InputError(f"input {name!r}: stored shape {list(t.shape)} != definition shape {want}")
    if t.dtype != torch_dtype(spec.dtype):
        raise InputError(f"input {name!r}: stored dtype {t.dtype} != definition dtype {spec.dtype.value}")
    return t.to(device)


def make_inputs(definition: Definition, workload: Workload, seed: int = DEFAULT_SEED, device: str = "cpu",
                root: Optional[Path] = None) -> Dict[str, Any]:
    """All inputs of a workload, in the definition's order. Raises InputError naming the workload."""
    return dict(RemadeInputs(definition, workload, seed, device, root))


class RemadeInputs(Mapping):
    """A workload's input set that is never kept: reading an input makes it again from the seed (make_input),
    on the device, one input at a time. For the workloads kept off the GPU (runner.keeps_on_host): a stress
    workload's set does not fit on the GPU beside a second one, and copies of it to host memory and back took
    minutes per evaluation at pageable-copy speed (an H200 machine, 26 GB sets at about 2 GB/s). The same seed
    gives bit-identical values each time (module docstring)."""

    def __init__(self, definition: Definition, workload: Workload, seed: int, device: str,
                 root: Optional[Path] = None):
        self.definition, self.workload, self.seed, self.device, self.root = definition, workload, seed, device, root
        self.axes = {**definition.const_axes, **workload.axes}

    def __getitem__(self, name: str) -> Any:
        if name not in self.definition.inputs:
            raise KeyError(name)
        try:
            return make_input(self.definition, self.workload, name, self.axes, self.seed, self.device, self.root)
        except InputError as e:
            raise InputError(f"workload {self.workload.uuid} of {self.definition.name}: {e}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.definition.inputs)

    def __len__(self) -> int:
        return len(self.definition.inputs)


def clone_inputs(inputs: Dict[str, Any], device: Optional[str] = None) -> Dict[str, Any]:
    """A fresh copy of every tensor (on `device`, default where it is), so a solution can never change
    another's inputs. A RemadeInputs set is made again instead: its tensors are already nobody else's."""
    if isinstance(inputs, RemadeInputs):
        return {k: v.to(device) if device and isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    return {k: (v.to(device, copy=True) if device else v.clone()) if isinstance(v, torch.Tensor) else v
            for k, v in inputs.items()}
