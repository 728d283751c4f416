"""How a solution's process hands its outputs to the judge: safetensors files (solution_host.write_safetensors),
in a memory-backed folder when there is room (solution_host.ram_dir)."""

import os
from pathlib import Path

import pytest
import safetensors.torch
import torch

from kda_trace import solution_host
from kda_trace.solution_host import write_safetensors


def test_every_output_dtype_reads_back_bit_for_bit(tmp_path):
    tensors = {"bf16": torch.randn(3, 5).to(torch.bfloat16), "f32": torch.randn(7), "i64": torch.arange(5),
               "flag": torch.tensor(True), "empty": torch.randn(0, 3), "f64": torch.randn(2, 3, dtype=torch.float64),
               "fp8": torch.randn(3).to(torch.float8_e4m3fn), "scalar": torch.tensor(2.5),
               "strided_then_contiguous": torch.randn(4, 6).t().contiguous()}
    path = tmp_path / "out.safetensors"
    write_safetensors(path, tensors)
    back = safetensors.torch.load(path.read_bytes())
    assert set(back) == set(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, name
        assert torch.equal(back[name].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), name


def test_a_dtype_safetensors_cannot_hold_is_refused(tmp_path):
    with pytest.raises(TypeError, match="complex"):
        write_safetensors(tmp_path / "out.safetensors", {"z": torch.randn(2, dtype=torch.complex64)})


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm")
def test_outputs_go_to_a_memory_backed_folder_when_it_has_room(monkeypatch, tmp_path):
    made = solution_host.ram_dir()
    try:
        assert made is not None and made.parent == Path("/dev/shm")
    finally:
        if made is not None:
            made.rmdir()
    monkeypatch.setattr(solution_host, "RAM_DIR_PARENT", str(tmp_path / "missing"))
    assert solution_host.ram_dir() is None
