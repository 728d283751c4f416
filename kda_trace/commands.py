"""Dataset commands: `list`, `validate`, `schemas`, `coverage`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cli_args import add_dataset_argument, add_filter_arguments
from .dataset import load_dataset, resolve_root
from .schema_files import schema_texts


def configure_list(parser: argparse.ArgumentParser) -> None:
    add_dataset_argument(parser)
    add_filter_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def command_list(args) -> int:
    """List definitions with their op_type, tags and workload counts."""
    ds = load_dataset(resolve_root(args.dataset))
    rows = []
    for d in ds.select(args.op_type, args.names, args.tags):
        wls = ds.workloads_of(d.name)
        rows.append({"name": d.name, "op_type": d.op_type, "workloads": len(wls),
                     "smoke": sum("smoke" in w.tags for w in wls), "tags": d.tags})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{len(rows)} definitions in {ds.root}")
        for col in ("name", "op_type", "workloads", "smoke", "tags"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r["name"], r["op_type"], str(r["workloads"]), str(r["smoke"]), " ".join(r["tags"]))
        Console(width=max(160, Console().width)).print(table)
    if ds.problems:
        print(f"{len(ds.problems)} problems in the dataset: run `kda-trace validate`", file=sys.stderr)
    return 0


def configure_validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", nargs="?", default=None, help="dataset root (default: this repository's)")
    add_dataset_argument(parser)


def command_validate(args) -> int:
    """Validate every definition and workload; report every problem, exit 1 if any."""
    ds = load_dataset(resolve_root(args.root or args.dataset))
    for p in ds.problems:
        print(p)
    n_wl = sum(len(v) for v in ds.workloads.values())
    summary = f"{len(ds.definitions)} definitions, {n_wl} workloads, {len(ds.problems)} problems in {ds.root}"
    print(summary, file=sys.stderr if ds.problems else sys.stdout)
    return 1 if ds.problems else 0


def configure_schemas(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", nargs="?", default=str(Path(__file__).resolve().parent.parent / "schemas"),
                        help="directory to write the schema files to (default: schemas/ in this repository)")


def command_schemas(args) -> int:
    """Write the JSON Schema files generated from the models."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in schema_texts().items():
        (out / name).write_text(text)
        print(out / name)
    return 0


def configure_coverage(parser: argparse.ArgumentParser) -> None:
    add_dataset_argument(parser)
    add_filter_arguments(parser)


def command_coverage(args) -> int:
    """Print the coverage matrix of the dataset over the KDA option axes."""
    from . import coverage

    ds = load_dataset(resolve_root(args.dataset))
    definitions = ds.select(args.op_type or "kda", args.names, args.tags)
    status = int(coverage.print_coverage(ds, definitions) or 0)
    tests = _reference_test_coverage()
    if tests is not None:
        print("\nWhich tests in tests/references cover which cells (fast / slow / gpu tier):")
        print(tests.render_text(tests.coverage_rows(definitions)))
    return status


def _reference_test_coverage():
    """tests/references/coverage_cells.py of this checkout, loaded by path (None outside a checkout)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "references" / "coverage_cells.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("kda_reference_coverage", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module
