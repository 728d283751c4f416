"""`kda-trace` command line: thin, each command lives in the module that does its job."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

# command -> module defining `configure(parser)` and `command(args) -> int`
COMMANDS = {
    "list": "kda_trace.commands",
    "validate": "kda_trace.commands",
    "schemas": "kda_trace.commands",
    "coverage": "kda_trace.commands",
    "run": "kda_trace.run_command",
    "report": "kda_trace.run_command",
    "compare": "kda_trace.compare_runs",
    "export": "kda_trace.hub",
    "publish": "kda_trace.hub",
    "import-flashinfer": "kda_trace.import_flashinfer",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kda-trace", description="KDA kernel definitions, workloads and a runner that judges implementations.")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue  # a command whose module is not there yet
        attr = name.replace("-", "_")  # import-flashinfer -> configure_import_flashinfer
        configure = getattr(module, f"configure_{attr}", None)
        if configure is None:
            continue
        help_text = (getattr(module, f"command_{attr}").__doc__ or "").strip().splitlines()[0]
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(func=getattr(module, f"command_{attr}"))
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .hub_download import HubError

    try:
        return int(args.func(args) or 0)
    except HubError as e:  # e.g. --dataset hf://... that cannot be downloaded: one message, no traceback
        print(f"kda-trace {args.cmd}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
