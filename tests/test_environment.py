"""What a record says about where it ran: the dataset and code digests."""

import shutil
from pathlib import Path

from kda_trace import environment

ROOT = Path(__file__).resolve().parent.parent


def test_dataset_digest_follows_the_dataset_files(tmp_path):
    """Same files, same digest; a changed workload line changes it; files outside the dataset do not."""
    for sub in ("definitions", "workloads"):
        shutil.copytree(ROOT / sub / "kda", tmp_path / sub / "kda", dirs_exist_ok=True)
    first = environment._digest(tmp_path, environment.DATASET_FILES)
    assert first == environment.dataset_digest(str(ROOT))
    (tmp_path / "notes.txt").write_text("not part of the dataset")
    assert environment._digest(tmp_path, environment.DATASET_FILES) == first
    wl = sorted((tmp_path / "workloads" / "kda").glob("*.jsonl"))[0]
    wl.write_text(wl.read_text().replace('"uuid"', '"uuid" ', 1))
    assert environment._digest(tmp_path, environment.DATASET_FILES) != first


def test_capture_records_both_digests():
    env = environment.capture("cpu", 7, ROOT)
    assert env.seed == 7 and env.hardware
    assert len(env.dataset_digest) == 16 and len(env.code_digest) == 16
    assert env.code_digest == environment.code_digest()
    assert environment.capture("cpu", 7, None).dataset_digest is None
