"""Where an evaluation ran: device (name, index, uuid, peaks), driver, library versions, the project's version and
commit, dataset revision and digests, seed, and how solutions were isolated."""

from __future__ import annotations

import hashlib
import platform as _platform
import re
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional

from . import platform
from .schema import DevicePeaks, Environment


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _driver_version() -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def _git(cwd: Path | str, *args: str) -> Optional[str]:
    """stdout of `git -C cwd args...` (stripped), None when git fails or is missing."""
    try:
        out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@lru_cache(maxsize=None)
def dataset_revision(root: str) -> Optional[str]:
    """`git rev-parse HEAD` of the dataset root (with `-dirty` when its dataset files have changes); None
    when the dataset files are not tracked there (a copy inside some other repository is not its commit)."""
    if not _git(root, "ls-files", "--", "definitions", "workloads"):
        return None
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "definitions", "workloads"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = head.stdout.strip()
    return rev + ("-dirty" if dirty.stdout.strip() else "")


@lru_cache(maxsize=None)
def _libs(device: str) -> tuple:
    libs: Dict[str, str] = {"python": _platform.python_version()}
    for package in ("torch", "triton", "fla-core", "flashinfer-python", "kda-trace"):
        v = _version(package)
        if v:
            libs[package] = v
    if device.startswith("cuda"):
        import torch

        libs["cuda"] = str(torch.version.cuda)
        driver = _driver_version()
        if driver:
            libs["driver"] = driver
    else:
        libs["triton_interpret"] = "1" if platform.triton_interpreted() else "0"
    return tuple(sorted(libs.items()))


def _files(root: Path, patterns: tuple[str, ...]) -> List[Path]:
    """The files under `root` matching `patterns`, in path order."""
    return sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})


def _digest(root: Path, patterns: tuple[str, ...]) -> Optional[str]:
    """sha256 over the files under `root` matching `patterns` (relative path and bytes, in path order), first
    16 hex digits; None when there is no such file."""
    files = _files(root, patterns)
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


DATASET_FILES = ("definitions/**/*.json", "workloads/**/*.jsonl")
"""What dataset_digest covers: not the safetensors files that workloads may name (they can be gigabytes, read
at every run)."""


@lru_cache(maxsize=None)
def dataset_digest(root: str) -> Optional[str]:
    """Digest of the dataset's DATASET_FILES under `root`."""
    return _digest(Path(root), DATASET_FILES)


def dataset_fingerprint(root: str) -> Dict[str, str]:
    """{relative path: sha256 (16 hex digits)} of the dataset's DATASET_FILES under `root`, for `dataset_changes`."""
    base = Path(root)
    return {p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in _files(base, DATASET_FILES)}


def dataset_changes(before: Dict[str, str], root: str) -> List[str]:
    """The dataset files under `root` that differ from the `before` fingerprint: 'changed / added / removed
    PATH'. A run judges every workload by the definitions it loaded at its start; a file rewritten during the
    run (a solution's process can write there) would change later runs, so `kda-trace run` reports it."""
    after = dataset_fingerprint(root)
    return ([f"changed {p}" for p in sorted(before) if p in after and after[p] != before[p]]
            + [f"added {p}" for p in sorted(set(after) - set(before))]
            + [f"removed {p}" for p in sorted(set(before) - set(after))])


@lru_cache(maxsize=None)
def code_digest() -> Optional[str]:
    """Digest of this kda_trace package's Python source."""
    return _digest(Path(__file__).resolve().parent, ("**/*.py",))


class SourceChanged(RuntimeError):
    """kda_trace's source on disk is not the one the run started with."""


def check_code_digest(expected: Optional[str]) -> None:
    """Raise SourceChanged when kda_trace's source on disk no longer has digest `expected` (None: no check)."""
    if expected is None:
        return
    code_digest.cache_clear()
    now = code_digest()
    if now != expected:
        raise SourceChanged(f"kda_trace's source on disk changed during the run (digest {now}, the run started "
                            f"with {expected}): a solution may have edited the runner; stopping")


PROJECT_NAME = re.compile(r'^name\s*=\s*"kda-trace"\s*$', re.MULTILINE)


@lru_cache(maxsize=None)
def project_commit(package_dir: Optional[str] = None) -> Optional[str]:
    """The git commit of this kda_trace package's own checkout (`-dirty` when the package has changes).

    Only when the package directory sits at the top level of a git checkout whose pyproject.toml is
    kda-trace's: a package installed or copied into some other repository gets None, never that
    repository's commit."""
    package = Path(package_dir or Path(__file__).resolve().parent).resolve()
    top = _git(package, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != package.parent:
        return None
    pyproject = package.parent / "pyproject.toml"
    if not pyproject.is_file() or not PROJECT_NAME.search(pyproject.read_text(encoding="utf-8")):
        return None
    head = _git(package, "rev-parse", "HEAD")
    if head is None:
        return None
    dirty = _git(package.parent, "status", "--porcelain", "--", package.name)
    return head + ("-dirty" if dirty else "")


def capture(device: str, seed: Optional[int], dataset_root: Optional[Path | str]) -> Environment:
    """The environment of this process for `device`. Peaks for the speed of light come from
    roofline.device_peak (its overrides are environment variables, so worker processes see them)."""
    from . import __version__, roofline
    from .sandbox import sandbox_support

    hardware = platform.device_name(device)
    where, uuid = platform.device_identity(device)
    peak = roofline.device_peak(hardware)
    return Environment(
        hardware=hardware,
        libs=dict(_libs(device)),
        seed=seed,
        dataset_revision=dataset_revision(str(dataset_root)) if dataset_root is not None else None,
        dataset_digest=dataset_digest(str(dataset_root)) if dataset_root is not None else None,
        code_digest=code_digest(),
        device=where,
        device_uuid=uuid,
        project_version=__version__,
        project_commit=project_commit(),
        peaks=DevicePeaks(model=peak.model, tbps=peak.tbps, tflops=peak.tflops, source=peak.source) if peak else None,
        isolation=sandbox_support(),
    )
