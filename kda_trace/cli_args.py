"""Command-line arguments that several commands share (defined once, imported by the command modules)."""

from __future__ import annotations

import argparse


def add_dataset_argument(parser: argparse.ArgumentParser) -> None:
    """`--dataset`: a local directory or hf://ORG/NAME[@rev]; default: this repository's dataset."""
    parser.add_argument("--dataset", metavar="DIR|hf://ORG/NAME[@REV]", default=None,
                        help="dataset root (default: the dataset in this repository)")


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """`--op-type`, `--name`/`--definition` and `--tag`: which definitions a command works on."""
    parser.add_argument("--op-type", default=None, help="only definitions of this op_type")
    parser.add_argument("--name", "--definition", dest="names", action="append", default=[],
                        help="only definitions whose name contains this (repeatable)")
    parser.add_argument("--tag", dest="tags", action="append", default=[], help="only definitions with this tag (repeatable)")
