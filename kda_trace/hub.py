"""Share the dataset on the Hugging Face Hub and read it back from there.

- `export_dataset` writes a dataset root in Hub layout: the dataset files as they are
  (`definitions/<op_type>/*.json`, `workloads/<op_type>/*.jsonl`, any safetensors files the workloads
  name, optionally `traces/<op_type>/*.jsonl` from a run), `schemas/`, flat tables under `tables/` for
  the Hub viewer and `datasets.load_dataset`, and a `README.md` dataset card generated from the
  definitions. Only a dataset without problems is exported.
- `publish` exports to a temporary directory and uploads it with `huggingface_hub`.
- `download_dataset` (from `hub_download`) turns `hf://ORG/NAME[@REV]` into a local snapshot in the Hugging
  Face cache.

Why the tables: definitions and workloads are nested JSON whose keys differ from one definition to the
next (axes, inputs), which a columnar loader cannot unify into one schema. Each table row keeps the
plain fields as columns and the nested parts as JSON text, so every config loads with one fixed schema.

Every failure a user can cause (invalid dataset, bad spec, no token, no network, repository not found)
is raised as `HubError` with one clear message; the commands print it and exit 1.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .cli_args import add_dataset_argument
from .dataset import Dataset, load_dataset, pydantic_problems, resolve_root
# HubError and the hf:// download live in hub_download (the dataset loader imports it); re-exported here
from .hub_download import HF_PREFIX, HubError, HubSpec, check_repo_id, download_dataset, first_line, parse_spec  # noqa: F401
from .schema_files import schema_texts

TABLES_DIR = "tables"
# Directories of the Hub repository that `publish` manages: remote files in them that the export
# does not contain any more are deleted, so the repository mirrors the export.
MANAGED_DIRS = ("definitions", "workloads", "traces", "schemas", TABLES_DIR)
LICENSE = "apache-2.0"
PLACEHOLDER_REPO = "ORG/NAME"


# --------------------------------------------------------------------------- export


@dataclass
class TraceFile:
    """One trace file of a run: its path below `traces/` and its records."""

    rel: str
    source: Path
    records: List[tuple] = field(default_factory=list)
    """(line number, raw dict, Trace) for every record."""


@dataclass
class Export:
    """What `export_dataset` wrote."""

    out_dir: Path
    files: List[str]
    """Every file written, relative to out_dir, sorted."""
    definitions: int
    workloads: int
    traces: int


def export_dataset(root: Path | str, out_dir: Path | str, traces_dir: Optional[Path | str] = None,
                   repo_id: Optional[str] = None) -> Export:
    """Write the dataset at `root` (and the traces of the run at `traces_dir`) to `out_dir` in Hub layout.

    `out_dir` must not exist or be empty. `repo_id` names the Hub repository in the card's examples.
    Raises HubError (listing the problems) when the dataset or the traces are not valid.
    """
    ds = load_dataset(root)
    if ds.problems:
        shown = "\n".join(f"  {p}" for p in ds.problems[:20])
        more = f"\n  ... and {len(ds.problems) - 20} more" if len(ds.problems) > 20 else ""
        raise HubError(f"the dataset at {ds.root} has {len(ds.problems)} problems (see `kda-trace validate`); "
                       f"nothing was exported:\n{shown}{more}")
    if not ds.definitions:
        raise HubError(f"the dataset at {ds.root} has no definitions; nothing was exported")
    blobs = _safetensors_files(ds)
    traces = _load_traces(Path(traces_dir), ds) if traces_dir is not None else []
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HubError(f"{out}: exists and is not an empty directory; choose a new one")
    out.mkdir(parents=True, exist_ok=True)

    def copy(source: Path, rel: str) -> None:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / rel)

    for name in sorted(ds.definitions):
        copy(ds.root / ds.definition_files[name], ds.definition_files[name])
    for rel in sorted({e.file for entries in ds.workloads.values() for e in entries}):
        copy(ds.root / rel, rel)
    for rel in blobs:
        copy(ds.root / rel, rel)
    for tf in traces:
        copy(tf.source, f"traces/{tf.rel}")
    for name, text in schema_texts().items():
        _write(out / "schemas" / name, text)

    tables = {"definitions": definition_rows(ds), "workloads": workload_rows(ds)}
    if traces:
        tables["traces"] = trace_rows(traces)
    for config, rows in tables.items():
        columns = [name for name, _ in TABLE_COLUMNS[config]]
        assert all(list(r) == columns for r in rows), f"{config} rows do not have the declared columns"
        _write(out / TABLES_DIR / f"{config}.jsonl",
               "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows))
    _write(out / "README.md", dataset_card(ds, list(tables), repo_id or PLACEHOLDER_REPO))

    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    n_workloads = sum(len(v) for v in ds.workloads.values())
    return Export(out, files, len(ds.definitions), n_workloads, sum(len(t.records) for t in traces))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _safetensors_files(ds: Dataset) -> List[str]:
    """The safetensors files the workloads read (relative paths); HubError when one is missing."""
    from .schema import SafetensorsInput

    paths, missing = set(), []
    for entries in ds.workloads.values():
        for e in entries:
            for input_name, source in e.workload.inputs.items():
                if isinstance(source, SafetensorsInput):
                    if (ds.root / source.path).is_file():
                        paths.add(Path(source.path).as_posix())
                    else:
                        missing.append(f"  {e.file}: line {e.line}, field inputs.{input_name}.path: "
                                       f"file {source.path!r} does not exist")
    if missing:
        raise HubError("workloads name safetensors files that do not exist; nothing was exported:\n" + "\n".join(missing))
    return sorted(paths)


def _load_traces(run_dir: Path, ds: Dataset) -> List[TraceFile]:
    """Read and check `<run_dir>/traces/<op_type>/*.jsonl` (or `run_dir` itself when it is the traces
    directory). Every record must be a valid Trace of a definition and workload in the dataset."""
    from pydantic import ValidationError

    from .schema import Trace

    base = run_dir / "traces" if (run_dir / "traces").is_dir() else run_dir
    if not base.is_dir():
        raise HubError(f"{run_dir}: not a run directory (no traces/ in it)")
    files = sorted(base.glob("*/*.jsonl"))
    if not files:
        raise HubError(f"{base}: no trace files (<op_type>/<definition>.jsonl) in it")
    uuids = {e.workload.uuid for entries in ds.workloads.values() for e in entries}
    problems, out = [], []
    for path in files:
        tf = TraceFile(path.relative_to(base).as_posix(), path)
        shown = f"{run_dir.name}/{path.relative_to(run_dir).as_posix()}" if base != run_dir else str(path)
        for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not text.strip():
                continue
            where = f"{shown}: line {lineno}"
            try:
                raw = json.loads(text)
                trace = Trace.model_validate(raw)
            except json.JSONDecodeError as e:
                problems.append(f"{where}: not valid JSON: {e.msg} (column {e.colno})")
                continue
            except ValidationError as e:
                problems += [f"{where}, {p}" for p in pydantic_problems(e)]
                continue
            if trace.definition not in ds.definitions:
                problems.append(f"{where}, field definition: {trace.definition!r} is not a definition of the dataset")
            elif trace.workload.uuid not in uuids:
                problems.append(f"{where}, field workload.uuid: {trace.workload.uuid!r} is not a workload of the dataset")
            else:
                tf.records.append((lineno, raw, trace))
        out.append(tf)
    if problems:
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise HubError(f"the traces in {run_dir} have {len(problems)} problems; nothing was exported:\n{shown}{more}")
    return out


# --------------------------------------------------------------------------- tables

# The columns of each table and their types (declared in the card, so a column that is null in every
# row still has its type): "string", "int64", "float64", or ["string"] for a list of strings.
TABLE_COLUMNS: Dict[str, List[tuple]] = {
    "definitions": [
        ("name", "string"), ("op_type", "string"), ("description", "string"), ("stage", "string"),
        ("models", ["string"]), ("tags", ["string"]), ("axes", "string"), ("inputs", "string"),
        ("outputs", "string"), ("constraints", ["string"]), ("inplace", "string"), ("cost", "string"),
        ("reference", "string"), ("num_workloads", "int64"), ("num_smoke_workloads", "int64"), ("file", "string"),
    ],
    "workloads": [
        ("definition", "string"), ("op_type", "string"), ("uuid", "string"), ("axes", "string"),
        ("inputs", "string"), ("seq_lens", ["int64"]), ("tags", ["string"]), ("description", "string"),
        ("file", "string"), ("line", "int64"),
    ],
    "traces": [
        ("definition", "string"), ("solution", "string"), ("workload_uuid", "string"), ("status", "string"),
        ("hardware", "string"), ("timestamp", "string"), ("latency_ms", "float64"),
        ("reference_latency_ms", "float64"), ("speedup_factor", "float64"), ("timing_mode", "string"),
        ("max_absolute_error", "float64"), ("max_relative_error", "float64"), ("workload", "string"),
        ("evaluation", "string"), ("file", "string"), ("line", "int64"),
    ],
}


def table_features(config: str) -> List[Dict[str, str]]:
    """The `features` of a table in the dataset card's `dataset_info` (the `datasets` YAML form; lists
    as `sequence`, which datasets 2.x reads and 4.x and later read as a list)."""
    return [{"name": name, "sequence": kind[0]} if isinstance(kind, list) else {"name": name, "dtype": kind}
            for name, kind in TABLE_COLUMNS[config]]


def _json(value: Any) -> Optional[str]:
    """Nested JSON as text (key order kept), None stays None."""
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _float(value: Any) -> Optional[float]:
    """A finite float, or None (NaN and infinities have no JSON form; the full record keeps them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _raw_definition(ds: Dataset, name: str) -> Dict[str, Any]:
    return json.loads((ds.root / ds.definition_files[name]).read_text(encoding="utf-8"))


def definition_rows(ds: Dataset) -> List[Dict[str, Any]]:
    """One row per definition: the plain fields as columns, axes/inputs/outputs/inplace/cost as JSON text,
    plus `stage` and `models` taken from the tags and the workload counts."""
    rows = []
    for name in sorted(ds.definitions):
        d, raw = ds.definitions[name], _raw_definition(ds, name)
        workloads = ds.workloads_of(name)
        rows.append({
            "name": d.name, "op_type": d.op_type, "description": d.description,
            "stage": d.tag("stage"), "models": d.tag_values.get("model", []), "tags": list(d.tags),
            "axes": _json(raw["axes"]), "inputs": _json(raw["inputs"]), "outputs": _json(raw["outputs"]),
            "constraints": list(d.constraints), "inplace": _json(raw.get("inplace")), "cost": _json(raw.get("cost")),
            "reference": d.reference, "num_workloads": len(workloads),
            "num_smoke_workloads": sum("smoke" in w.tags for w in workloads),
            "file": ds.definition_files[name],
        })
    return rows


def workload_rows(ds: Dataset) -> List[Dict[str, Any]]:
    """One row per workload, in file order; axes and inputs as JSON text."""
    rows = []
    for name in sorted(ds.workloads):
        lines: Dict[str, List[str]] = {}
        for e in ds.workloads[name]:
            text = lines.setdefault(e.file, (ds.root / e.file).read_text(encoding="utf-8").splitlines())
            raw = json.loads(text[e.line - 1])
            rows.append({
                "definition": name, "op_type": ds.definitions[name].op_type, "uuid": raw["uuid"],
                "axes": _json(raw["axes"]), "inputs": _json(raw["inputs"]), "seq_lens": raw.get("seq_lens"),
                "tags": list(raw.get("tags", [])), "description": raw.get("description"),
                "file": e.file, "line": e.line,
            })
    return rows


def trace_rows(traces: List[TraceFile]) -> List[Dict[str, Any]]:
    """One row per trace record: the headline numbers as columns, the workload and the full evaluation as
    JSON text (which keeps NaN and infinities as the strings the trace format uses)."""
    rows = []
    for tf in traces:
        for lineno, raw, trace in tf.records:
            ev = trace.evaluation
            perf = ev.performance if ev else None
            corr = ev.correctness if ev else None
            rows.append({
                "definition": trace.definition, "solution": trace.solution, "workload_uuid": trace.workload.uuid,
                "status": ev.status.value if ev else None,
                "hardware": ev.environment.hardware if ev else None,
                "timestamp": ev.timestamp if ev else None,
                "latency_ms": _float(perf.latency_ms) if perf else None,
                "reference_latency_ms": _float(perf.reference_latency_ms) if perf else None,
                "speedup_factor": _float(perf.speedup_factor) if perf else None,
                "timing_mode": perf.mode if perf else None,
                "max_absolute_error": _float(corr.max_absolute_error) if corr else None,
                "max_relative_error": _float(corr.max_relative_error) if corr else None,
                "workload": _json(raw.get("workload")), "evaluation": _json(raw.get("evaluation")),
                "file": f"traces/{tf.rel}", "line": lineno,
            })
    return rows


# --------------------------------------------------------------------------- dataset card


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def card_metadata(configs: List[str]) -> Dict[str, Any]:
    """The card's YAML front matter: license, tags, and per table a `configs` entry (its file) and a
    `dataset_info` entry (its column types)."""
    return {
        "license": LICENSE,
        "pretty_name": "kda-trace: Kimi Delta Attention kernel definitions and workloads",
        "tags": ["kda", "kimi-delta-attention", "linear-attention", "gpu-kernels", "triton", "benchmark"],
        "configs": [
            {"config_name": name, "data_files": [{"split": "train", "path": f"{TABLES_DIR}/{name}.jsonl"}],
             **({"default": True} if name == "definitions" else {})}
            for name in configs
        ],
        "dataset_info": [{"config_name": name, "features": table_features(name)} for name in configs],
    }


def dataset_card(ds: Dataset, configs: List[str], repo_id: str = PLACEHOLDER_REPO) -> str:
    """The README.md of the exported dataset, generated from its definitions."""
    import yaml

    front = yaml.safe_dump(card_metadata(configs), sort_keys=False, allow_unicode=True)
    n_workloads = sum(len(v) for v in ds.workloads.values())
    table = ["| definition | op_type | stage | models | tags | workloads (smoke) |", "|---|---|---|---|---|---|"]
    for row in definition_rows(ds):
        others = [t for t in row["tags"] if not t.startswith(("stage:", "model:"))]
        table.append("| " + " | ".join(_cell(c) for c in (
            f"`{row['name']}`", row["op_type"], row["stage"] or "", ", ".join(row["models"]),
            " ".join(f"`{t}`" for t in others), f"{row['num_workloads']} ({row['num_smoke_workloads']})")) + " |")
    trace_note = ("\n- `traces` (`tables/traces.jsonl`): one row per evaluated (solution, workload), from the "
                  "run files under `traces/`." if "traces" in configs else "")
    return f"""---
{front}---

# kda-trace: KDA kernel definitions and workloads

{len(ds.definitions)} kernel definitions and {n_workloads} workloads for **KDA (Kimi Delta Attention)**, in the
FlashInfer-Trace layout, with the reference code that defines each kernel's math. Generated by
`kda-trace export`; the kda-trace runner checks any implementation against these definitions and
reports, per workload, how right and how fast it is.

## What KDA is

KDA is a gated delta rule with a per-channel decay, the linear-attention layer of Kimi Linear and later
models. For each sequence and value head it keeps a state `S` of shape `[K, V]` in float32 and, for every
token `t`:

```
S   = diag(exp(g_t)) @ S                     # decay each key channel (g_t <= 0)
S   = S + beta_t * k_t (v_t - S^T k_t)^T     # delta-rule write
o_t = S^T (scale * q_t)                      # read
```

Variants differ in where the gate and beta are computed, q/k L2 normalisation, the state layout
(`[K, V]` or `[V, K]`), dense or packed variable-length batches, and decode against a state pool. Each
definition's `reference` field holds the plain PyTorch code that is its specification; its tags
(`stage:`, `model:`, `gate:`, `state_layout:`, ...) say which variant it is.

## Definitions

{chr(10).join(table)}

## Run them

```bash
pip install kda-trace            # from the kda-trace repository
kda-trace list --dataset hf://{repo_id}
kda-trace run --dataset hf://{repo_id}
```

`--dataset hf://{repo_id}@REVISION` pins a branch, tag or commit. The files are downloaded into the
Hugging Face cache (later runs work offline). Reference code from the Hub is treated as untrusted: it is
checked against an allowlist before it runs.

## Read the tables

```python
from datasets import load_dataset

definitions = load_dataset("{repo_id}", "definitions", split="train")
workloads = load_dataset("{repo_id}", "workloads", split="train")
```

- `definitions` (`tables/definitions.jsonl`, default): one row per definition; `axes`, `inputs`, `outputs`,
  `inplace` and `cost` are JSON text (their keys differ between definitions), `stage` and `models` come
  from the tags.
- `workloads` (`tables/workloads.jsonl`): one row per workload; `axes` and `inputs` are JSON text.{trace_note}

The tables are derived from the files below, which are what `kda-trace` reads.

## Files

- `definitions/<op_type>/<name>.json`: one definition per file (FlashInfer-Trace fields plus optional
  kda-trace fields: generators, tolerances, in-place outputs, cost).
- `workloads/<op_type>/<name>.jsonl`: the workloads of a definition, one JSON object per line.
- `schemas/`: JSON Schemas of definitions, workloads, traces and solutions.{chr(10) + "- `traces/<op_type>/<name>.jsonl`: evaluation records of a run." if "traces" in configs else ""}

## License

Apache-2.0.

## Citation

```bibtex
@misc{{kda_trace,
  title        = {{kda-trace: an open dataset and runner for Kimi Delta Attention kernels}},
  author       = {{kda-trace contributors}},
  year         = {{2026}},
  howpublished = {{\\url{{https://huggingface.co/datasets/{repo_id}}}}}
}}
```
"""


# --------------------------------------------------------------------------- publish


def publish(root: Path | str, repo_id: str, *, revision: Optional[str] = None, create_pr: bool = False,
            private: bool = False, traces_dir: Optional[Path | str] = None, dry_run: bool = False,
            api: Any = None, out=print) -> int:
    """Export the dataset to a temporary directory and upload it to the dataset repository `repo_id`.

    The repository mirrors the export: files under the managed directories (definitions/, workloads/,
    traces/, schemas/, tables/) that the export does not contain are deleted; README.md is replaced.
    With `dry_run`, `out` gets every file that would be uploaded (one path a line) and nothing is sent.
    `api` replaces `huggingface_hub.HfApi()` (tests). Raises HubError with one clear message.
    """
    check_repo_id(repo_id, f"--repo-id {repo_id!r}")
    if create_pr and revision not in (None, "main"):
        raise HubError("--create-pr opens a pull request against the default branch; leave out --revision")
    with tempfile.TemporaryDirectory(prefix="kda-trace-publish-") as tmp:
        export = export_dataset(root, Path(tmp) / "export", traces_dir=traces_dir, repo_id=repo_id)
        target = f"https://huggingface.co/datasets/{repo_id}" + (f" (revision {revision})" if revision else "")
        if dry_run:
            print(f"dry run: would upload {len(export.files)} files ({export.definitions} definitions, "
                  f"{export.workloads} workloads, {export.traces} traces) to {target}"
                  f"{' as a pull request' if create_pr else ''}; files under "
                  f"{', '.join(d + '/' for d in MANAGED_DIRS)} that are not listed would be deleted there",
                  file=sys.stderr)
            for rel in export.files:
                out(rel)
            return 0
        commit = _upload(export, repo_id, revision, create_pr, private, api)
    url = getattr(commit, "pr_url", None) or getattr(commit, "commit_url", None) or target
    out(f"uploaded {len(export.files)} files ({export.definitions} definitions, {export.workloads} workloads, "
        f"{export.traces} traces) to {target}: {url}")
    return 0


def _upload(export: Export, repo_id: str, revision: Optional[str], create_pr: bool, private: bool, api: Any):
    """create_repo + upload_folder, with every failure turned into a HubError."""
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if api is None:
        token = huggingface_hub.get_token()
        if not token:
            raise HubError("no Hugging Face token: set HF_TOKEN or run `hf auth login`, then publish again")
        api = huggingface_hub.HfApi(token=token)
    endpoint = getattr(api, "endpoint", "the Hub")
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private or None)
        if revision and revision != "main":
            api.create_branch(repo_id, repo_type="dataset", branch=revision, exist_ok=True)
        return api.upload_folder(
            repo_id=repo_id, repo_type="dataset", folder_path=str(export.out_dir), revision=revision,
            create_pr=create_pr, delete_patterns=[f"{d}/*" for d in MANAGED_DIRS],
            commit_message=f"kda-trace publish: {export.definitions} definitions, {export.workloads} workloads, "
                           f"{export.traces} traces")
    except RevisionNotFoundError:
        raise HubError(f"{repo_id}: revision {revision!r} does not exist") from None
    except RepositoryNotFoundError:
        raise HubError(f"{repo_id}: repository not found or not writable with this token") from None
    except HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            raise HubError(f"{repo_id}: the Hub refused the token (HTTP {status}): check HF_TOKEN or "
                           "`hf auth login`, and write access to the organisation") from None
        raise HubError(f"{repo_id}: the Hub refused the upload: {first_line(e)}") from None
    except (OSError, ValueError, *_transport_errors()) as e:
        # connection errors, offline mode (a ConnectionError), timeouts, arguments the Hub refuses
        raise HubError(f"{repo_id}: cannot reach {endpoint} to upload ({type(e).__name__}: {first_line(e)}); "
                       "check the network, or use --dry-run") from None


def _transport_errors() -> tuple:
    """Base classes of the HTTP client's errors (huggingface_hub uses httpx2 or httpx, neither an OSError)."""
    import importlib

    errors = []
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


# --------------------------------------------------------------------------- commands


def configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write to (new or empty)")
    add_dataset_argument(parser)
    parser.add_argument("--traces", metavar="RUN_DIR", default=None,
                        help="also export the traces of this run (RUN_DIR/traces/<op_type>/<definition>.jsonl)")
    parser.add_argument("--repo-id", default=None, metavar="ORG/NAME",
                        help="Hub repository named in the dataset card's examples (default: ORG/NAME)")


def command_export(args) -> int:
    """Write the dataset in Hugging Face Hub layout, with tables and a dataset card."""
    try:
        export = export_dataset(resolve_root(args.dataset), args.out_dir, traces_dir=args.traces, repo_id=args.repo_id)
    except HubError as e:
        print(f"kda-trace export: {e}", file=sys.stderr)
        return 1
    print(f"exported {export.definitions} definitions, {export.workloads} workloads, {export.traces} traces "
          f"({len(export.files)} files) to {export.out_dir}")
    return 0


def configure_publish(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="Hub dataset repository")
    add_dataset_argument(parser)
    parser.add_argument("--revision", default=None, help="branch to upload to (created when missing; default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--private", action="store_true", help="create the repository as private (when it is new)")
    parser.add_argument("--traces", metavar="RUN_DIR", default=None, help="also publish the traces of this run")
    parser.add_argument("--dry-run", action="store_true", help="print the files that would be uploaded; upload nothing")


def command_publish(args) -> int:
    """Export the dataset and upload it to a Hugging Face Hub dataset repository."""
    try:
        return publish(resolve_root(args.dataset), args.repo_id, revision=args.revision, create_pr=args.create_pr,
                       private=args.private, traces_dir=args.traces, dry_run=args.dry_run)
    except HubError as e:
        print(f"kda-trace publish: {e}", file=sys.stderr)
        return 1
