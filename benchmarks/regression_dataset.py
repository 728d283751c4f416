"""Write a dataset root holding only the workloads tagged `regression:<source>` (and their definitions), so that
`kda-trace run --dataset DIR` evaluates just those (`kda-trace run` selects definitions, not workloads).

    python3 benchmarks/regression_dataset.py OUT_DIR [--root REPO]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--root", type=Path, default=REPO)
    args = parser.parse_args()
    n_defs = n_wls = 0
    for wl_file in sorted((args.root / "workloads").glob("*/*.jsonl")):
        lines = [line for line in wl_file.read_text().splitlines()
                 if any(t.startswith("regression:") for t in json.loads(line).get("tags", []))]
        if not lines:
            continue
        op_type, name = wl_file.parent.name, wl_file.stem
        for sub, suffix, text in (("workloads", ".jsonl", "\n".join(lines) + "\n"), ("definitions", ".json", None)):
            dst = args.out / sub / op_type / f"{name}{suffix}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            if text is None:
                shutil.copyfile(args.root / sub / op_type / f"{name}{suffix}", dst)
            else:
                dst.write_text(text)
        n_defs += 1
        n_wls += len(lines)
    print(f"wrote {n_defs} definitions and {n_wls} regression workloads under {args.out}")


if __name__ == "__main__":
    main()
