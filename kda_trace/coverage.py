"""Coverage of the KDA dataset: which (model, tensor-parallel degree) x stage cells have definitions and
workloads, and which cells that real engines run are missing.

Rows are `model:<name>` x `tp:<n>` tags (with the heads per GPU), columns are `stage:<...>` tags; a cell
lists the definitions there and counts their workloads (all / smoke / stress). `REQUIRED` names the
cells that shipping models and engines use (WORKLOADS.md); any of them without a definition and a
non-stress workload is reported as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

STAGES = ["prefill", "prefill_chunk_states", "decode", "fused_decode", "mtp", "spec_verify", "forward", "backward",
          "gate"]

# (model tag, tp, stage): the cells a real engine or training run uses.
REQUIRED: List[Tuple[str, int, str]] = [
    *[(model, tp, stage)
      for model in ("kimi-linear", "kimi-k3", "glm-5.3-flash")
      for tp in (1, 4)
      for stage in ("prefill", "decode", "mtp")],
    *[("kimi-k3", tp, stage) for tp in (8, 2) for stage in ("prefill", "decode", "mtp")],  # 12 / 48 heads
    ("kimi-linear", 1, "forward"),   # training: chunked forward + backward
    ("kimi-linear", 1, "backward"),
    ("kimi-linear", 1, "gate"),      # gate computed outside the kernel (unbounded)
    ("kimi-k3", 1, "gate"),          # and the safe gate
]


@dataclass
class Cell:
    """One (model, tp) x stage cell."""

    definitions: List[str] = field(default_factory=list)
    workloads: int = 0
    smoke: int = 0
    stress: int = 0
    required: bool = False

    @property
    def covered(self) -> bool:
        """A definition with at least one workload that runs by default (not stress-only)."""
        return bool(self.definitions) and self.workloads - self.stress > 0


@dataclass
class CoverageMatrix:
    rows: List[Tuple[str, int]]
    """(model, tp) pairs, sorted."""
    columns: List[str]
    """Stages."""
    cells: Dict[Tuple[Tuple[str, int], str], Cell]
    """(row, column) -> cell; only cells with definitions or required ones are present."""
    heads: Dict[Tuple[str, int], List[int]]
    """Heads per GPU seen in each row (the num_v_heads axis)."""
    features: Dict[str, Dict[str, int]]
    """Tag key (gate, state_layout, batch, beta, qk_norm, feature) -> value -> number of definitions."""
    untagged: List[str]
    """Definitions without a stage, model or tp tag (not placed in the matrix)."""

    @property
    def missing(self) -> List[Tuple[str, int, str]]:
        """Required cells that are not covered."""
        return [(row[0], row[1], col) for (row, col), c in sorted(self.cells.items()) if c.required and not c.covered]


def _get(obj, name, default=None):
    """Attribute of a pydantic model, or key of a plain dict (both are accepted)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _tag(tags: Iterable[str], key: str) -> Optional[str]:
    for t in tags:
        k, _, v = t.partition(":")
        if k == key:
            return v
    return None


def _heads(definition) -> Optional[int]:
    axes = _get(definition, "axes", {}) or {}
    for name in ("num_v_heads", "num_heads"):
        axis = axes.get(name)
        if axis is not None and _get(axis, "type") == "const":
            return _get(axis, "value")
    return None


def coverage_matrix(definitions, workloads: Mapping[str, list]) -> CoverageMatrix:
    """Build the matrix. `definitions`: Definition models or dicts (an iterable, or a name -> definition
    mapping); `workloads`: definition name -> list of Workload models, WorkloadEntry records or dicts."""
    if isinstance(definitions, Mapping):
        definitions = definitions.values()
    cells: Dict[Tuple[Tuple[str, int], str], Cell] = {}
    heads: Dict[Tuple[str, int], set] = {}
    features: Dict[str, Dict[str, int]] = {k: {} for k in ("gate", "state_layout", "batch", "beta", "qk_norm", "feature")}
    untagged = []
    for model, tp, stage in REQUIRED:
        cells[((model, tp), stage)] = Cell(required=True)
    for d in definitions:
        tags = _get(d, "tags", []) or []
        for key, counts in features.items():
            value = _tag(tags, key)
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
        model, tp, stage = _tag(tags, "model"), _tag(tags, "tp"), _tag(tags, "stage")
        if model is None or tp is None or stage is None:
            untagged.append(_get(d, "name"))
            continue
        row = (model, int(tp))
        cell = cells.setdefault((row, stage), Cell())
        cell.definitions.append(_get(d, "name"))
        for w in workloads.get(_get(d, "name"), []):
            w = _get(w, "workload", w)  # a WorkloadEntry wraps the workload
            wtags = _get(w, "tags", []) or []
            cell.workloads += 1
            cell.smoke += "smoke" in wtags
            cell.stress += "stress" in wtags
        if _heads(d) is not None:
            heads.setdefault(row, set()).add(_heads(d))
    rows = sorted({row for row, _ in cells})
    columns = [s for s in STAGES if any(col == s for _, col in cells)]
    columns += sorted({col for _, col in cells} - set(columns))
    return CoverageMatrix(rows=rows, columns=columns, cells=cells,
                          heads={r: sorted(heads.get(r, ())) for r in rows}, features=features, untagged=untagged)


def render_coverage(matrix: CoverageMatrix) -> str:
    """Plain-text table: one row per (model, tp), one column per stage. A cell reads
    `D def / W wl (S smoke)`; `MISSING` marks a required cell without coverage, `-` an empty one."""
    def cell_text(row, col) -> str:
        c = matrix.cells.get((row, col))
        if c is None or (not c.definitions and not c.required):
            return "-"
        if not c.covered:
            return "MISSING" if c.required else f"{len(c.definitions)} def / {c.workloads} wl (stress only)"
        return f"{len(c.definitions)} def / {c.workloads} wl ({c.smoke} smoke)"

    header = ["model / tp (heads)"] + matrix.columns
    body = []
    for row in matrix.rows:
        heads = ",".join(str(h) for h in matrix.heads.get(row, [])) or "?"
        body.append([f"{row[0]} tp{row[1]} (h{heads})"] + [cell_text(row, col) for col in matrix.columns])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in [header] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for key, counts in matrix.features.items():
        if counts:
            lines.append(f"{key}: " + ", ".join(f"{v} ({n})" for v, n in sorted(counts.items())))
    if matrix.untagged:
        lines.append("not placed (no stage/model/tp tag): " + ", ".join(sorted(matrix.untagged)))
    missing = matrix.missing
    lines.append("required cells missing: " + (", ".join(f"{m} tp{t} {s}" for m, t, s in missing) if missing else "none"))
    return "\n".join(lines)


def print_coverage(dataset, definitions=None) -> int:
    """Print the matrix of `definitions` (default: every definition of `dataset`). Returns 1 when a
    required cell is missing and no filter narrowed the definitions, else 0. Used by `kda-trace coverage`."""
    all_kda = [d for d in dataset.definitions.values() if _get(d, "op_type") == "kda"]
    definitions = all_kda if definitions is None else list(definitions)
    matrix = coverage_matrix(definitions, dataset.workloads)
    print(render_coverage(matrix))
    filtered = {_get(d, "name") for d in definitions} != {_get(d, "name") for d in all_kda}
    return 1 if matrix.missing and not filtered else 0
