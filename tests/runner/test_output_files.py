"""How a solution's process hands its outputs to the judge: safetensors files (solution_host.write_safetensors),
in a memory-backed folder when there is room (solution_host.ram_dir), read back and checked by the judge
(solution_host.read_safetensors)."""

import io
import json
import os
from pathlib import Path

import pytest
import safetensors.torch
import torch

from kda_trace import solution_host
from kda_trace.solution_host import BadOutputFile, SolutionHost, load_checked, read_safetensors, write_safetensors


def _every_dtype():
    return {"bf16": torch.randn(3, 5).to(torch.bfloat16), "f32": torch.randn(7), "i64": torch.arange(5),
            "flag": torch.tensor(True), "empty": torch.randn(0, 3), "f64": torch.randn(2, 3, dtype=torch.float64),
            "fp8": torch.randn(3).to(torch.float8_e4m3fn), "fp8_e5m2": torch.randn(4).to(torch.float8_e5m2),
            "f16": torch.randn(2, 2, 2).half(), "i32": torch.arange(-3, 6, dtype=torch.int32).reshape(3, 3),
            "i16": torch.tensor([-2, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
            "u8": torch.arange(256, dtype=torch.uint8), "bools": torch.rand(11) > 0.5, "scalar": torch.tensor(2.5),
            "empty_0d_like": torch.zeros(0, dtype=torch.int64), "big": torch.randn(1000),
            "strided_then_contiguous": torch.randn(4, 6).t().contiguous()}


def _same(a, b, name):
    assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, name
    assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), name


@pytest.mark.parametrize("staging", [solution_host.STAGING_BYTES, 8, 7])
def test_every_output_dtype_reads_back_bit_for_bit(tmp_path, monkeypatch, staging):
    # a 7- or 8-byte chunk splits most tensors into many chunks, and some chunks end inside an element
    monkeypatch.setattr(solution_host, "STAGING_BYTES", staging)
    tensors = _every_dtype()
    path = tmp_path / "out.safetensors"
    write_safetensors(path, tensors)
    theirs = safetensors.torch.load(path.read_bytes())
    ours = read_safetensors(path, "cpu")
    assert set(theirs) == set(ours) == set(tensors)
    for name, t in tensors.items():
        _same(theirs[name], t, name)
        _same(ours[name], t, name)


def test_a_file_safetensors_wrote_reads_as_safetensors_reads_it(tmp_path):
    tensors = {k: v for k, v in _every_dtype().items() if k not in ("fp8", "fp8_e5m2")}  # not in every version
    path = tmp_path / "theirs.safetensors"
    safetensors.torch.save_file(tensors, str(path), metadata={"format": "pt"})  # its own order, and metadata
    theirs, ours = safetensors.torch.load_file(str(path)), read_safetensors(path, "cpu")
    assert set(theirs) == set(ours) == set(tensors)
    for name in tensors:
        _same(ours[name], theirs[name], name)


@pytest.mark.parametrize("staged", [True, False])
def test_the_staged_and_parallel_paths_move_every_chunk_to_its_place(tmp_path, monkeypatch, staged):
    """_write_staged and _read_parallel (a GPU's paths when staged) run here on host tensors, through unpinned
    buffers: the chunking, the threads taking chunks and each reusing its buffer, without the CUDA copies."""
    monkeypatch.setattr(solution_host, "STAGING_BYTES", 16)
    tensors = [torch.randn(13), torch.zeros(0), torch.arange(40, dtype=torch.int64), torch.tensor([True])]
    flats = [t.reshape(-1).view(torch.uint8) for t in tensors]
    f = io.BytesIO()
    solution_host._write_staged(f, flats)
    assert f.getvalue() == b"".join(bytes(flat.numpy()) for flat in flats)
    path = tmp_path / "data"
    path.write_bytes(b"head" + f.getvalue())
    back = [torch.full_like(flat, 0xAB) for flat in flats]
    fd = os.open(path, os.O_RDONLY)
    try:
        solution_host._read_parallel(fd, 4, back, staged=staged)
    finally:
        os.close(fd)
    for flat, got in zip(flats, back):
        assert torch.equal(flat, got)
    assert [b.numel() for b in solution_host._staging_buffers(pinned=False)] == [16, 16]
    monkeypatch.setattr(solution_host, "STAGING_BYTES", 32)
    solution_host._staging_buffers(pinned=False, count=solution_host.READ_THREADS)
    assert len(solution_host._STAGING) == 1  # one kind and size of buffers at a time


def test_a_read_short_of_its_chunks_is_a_bad_file(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(BadOutputFile, match="ended early"):
            solution_host._read_parallel(fd, 0, [torch.zeros(20, dtype=torch.uint8)])
    finally:
        os.close(fd)


def test_outputs_written_over_the_spare_file_read_back_exactly(tmp_path):
    """The judge keeps a file it read as the folder's spare; the next outputs are written over it (renamed to
    their own name) and cut to their length, whether larger or smaller than what it held."""
    first = tmp_path / "first-aa.safetensors"
    write_safetensors(first, {"big": torch.randn(5000)})
    read_safetensors(first, "cpu")
    solution_host.keep_as_spare(first)
    spare = tmp_path / solution_host.SPARE_FILE
    assert spare.exists() and not first.exists()
    for i, tensors in enumerate([{"small": torch.arange(7)}, {"o": torch.randn(9000), "s": torch.randn(3, 4)}]):
        path = tmp_path / f"final-{i}.safetensors"
        os.rename(spare, path)
        write_safetensors(path, tensors)
        ours = read_safetensors(path, "cpu")
        assert set(ours) == set(tensors) and path.stat().st_size == len(path.read_bytes())
        for name, t in tensors.items():
            _same(ours[name], t, name)
        solution_host.keep_as_spare(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_gpu_outputs_round_trip_through_the_staging_buffers(tmp_path, monkeypatch):
    monkeypatch.setattr(solution_host, "STAGING_BYTES", 1 << 10)
    tensors = {name: t.cuda() for name, t in _every_dtype().items()}
    tensors["several_chunks"] = torch.randn(3000, device="cuda")
    path = tmp_path / "out.safetensors"
    write_safetensors(path, tensors)
    theirs = safetensors.torch.load(path.read_bytes())
    ours = read_safetensors(path, "cuda")
    for name, t in tensors.items():
        _same(theirs[name], t.cpu(), name)
        _same(ours[name], t, name)


def test_a_dtype_safetensors_cannot_hold_is_refused(tmp_path):
    with pytest.raises(TypeError, match="complex"):
        write_safetensors(tmp_path / "out.safetensors", {"z": torch.randn(2, dtype=torch.complex64)})


# ---------------------------------------------------------------- files the judge refuses


def _raw(path: Path, header, data: bytes = b"", head_len=None, tail: bytes = b"") -> Path:
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes((len(head) if head_len is None else head_len).to_bytes(8, "little") + head + data + tail)
    return path


def _entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def test_a_well_formed_hand_made_file_is_accepted(tmp_path):
    """The baseline of the refusals below: the same helper, a correct header; __metadata__ ignored."""
    data = torch.tensor([1.5, -2.0]).numpy().tobytes() + bytes([7])
    path = _raw(tmp_path / "ok", {"__metadata__": {"x": "y"}, "a": _entry(),
                                  "b": _entry("U8", (1,), (8, 9)), "e": _entry("I64", (0, 4), (9, 9))}, data)
    out = read_safetensors(path, "cpu")
    assert out["a"].tolist() == [1.5, -2.0] and out["b"].tolist() == [7] and out["e"].shape == (0, 4)
    assert set(out) == {"a", "b", "e"}


BAD = {
    "truncated file": (lambda p: _raw(p, {"a": _entry()}, b"\0" * 5), "truncated"),
    "shorter than the length field": (lambda p: p.write_bytes(b"\1\0\0"), "truncated: 3 bytes"),
    "header longer than the file": (lambda p: _raw(p, {"a": _entry()}, b"\0" * 8, head_len=10_000),
                                    "header's length .10000 bytes. is more than the file holds"),
    "overlapping offsets": (lambda p: _raw(p, {"a": _entry(), "b": _entry(offsets=(4, 12))}, b"\0" * 12),
                            "overlapping"),
    "a gap between tensors": (lambda p: _raw(p, {"a": _entry(), "b": _entry(offsets=(12, 20))}, b"\0" * 20),
                              "a gap between"),
    "data not from offset 0": (lambda p: _raw(p, {"a": _entry(offsets=(4, 12))}, b"\0" * 12), "a gap between"),
    "offsets past the end": (lambda p: _raw(p, {"a": _entry(shape=(4,), offsets=(0, 16))}, b"\0" * 8),
                             "the file has .* bytes where its header says .*truncated"),
    "wrong byte count for the shape": (lambda p: _raw(p, {"a": _entry(shape=(3,))}, b"\0" * 8),
                                       r"hold 8 bytes, where shape \[3\] of F32 needs 12"),
    "unknown dtype": (lambda p: _raw(p, {"a": _entry(dtype="C64")}, b"\0" * 8), "unknown dtype 'C64'"),
    "dtype not a string": (lambda p: _raw(p, {"a": _entry(dtype=4)}, b"\0" * 8), "unknown dtype"),
    "non-JSON header": (lambda p: _raw(p, b"{'a': 1}  ", b""), "not JSON"),
    "header not UTF-8": (lambda p: _raw(p, b'{"\xff": 1}', b""), "not JSON"),
    "header a JSON list": (lambda p: _raw(p, [1, 2], b""), "a JSON list, not an object"),
    "trailing garbage": (lambda p: _raw(p, {"a": _entry()}, b"\0" * 8, tail=b"junk"), "bytes after the last tensor"),
    "negative dimension": (lambda p: _raw(p, {"a": _entry(shape=(-2,))}, b"\0" * 8), "non-negative ints"),
    "bool dimension": (lambda p: _raw(p, {"a": _entry(shape=(True,), offsets=(0, 4))}, b"\0" * 4),
                       "non-negative ints"),
    "float offsets": (lambda p: _raw(p, {"a": _entry(offsets=(0.0, 8.0))}, b"\0" * 8), "data_offsets"),
    "offsets backwards": (lambda p: _raw(p, {"a": _entry(shape=(0,), offsets=(8, 0))}, b"\0" * 8), "data_offsets"),
    "three offsets": (lambda p: _raw(p, {"a": _entry(offsets=(0, 8, 8))}, b"\0" * 8), "data_offsets"),
    "an entry without a shape": (lambda p: _raw(p, {"a": {"dtype": "F32", "data_offsets": [0, 8]}}, b"\0" * 8),
                                 "exactly dtype, shape and data_offsets"),
    "a name given twice": (lambda p: _raw(p, b'{"a": %s, "a": %s}' % ((json.dumps(_entry()).encode(),) * 2),
                                          b"\0" * 8), "names a key twice: .'a'."),
    "an int of 5000 digits": (lambda p: _raw(p, b'{"a": %s}' % (b"9" * 5000), b""), "not JSON"),
    "an empty shape too large to allocate": (lambda p: _raw(p, {"a": _entry(shape=(0, 2**61, 2**61), offsets=(0, 0))}),
                                             "cannot be allocated"),
    "too many tensors": (lambda p: _raw(p, {f"t{i}": _entry(shape=(0,), offsets=(0, 0)) for i in range(4097)}),
                         "4097 entries, over the limit of 4096"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_file_is_refused_with_a_clear_message(tmp_path, case):
    make, message = BAD[case]
    path = tmp_path / "bad.safetensors"
    make(path)
    with pytest.raises(BadOutputFile, match=message):
        read_safetensors(path, "cpu")


def test_a_header_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(solution_host, "MAX_HEADER_BYTES", 64)
    path = _raw(tmp_path / "big", {"a": _entry(), "pad": "x" * 100}, b"\0" * 8)
    with pytest.raises(BadOutputFile, match="over the limit of 64"):
        read_safetensors(path, "cpu")


def test_links_and_fifos_are_not_read(tmp_path):
    good = tmp_path / "good"
    write_safetensors(good, {"a": torch.ones(2)})
    (tmp_path / "link").symlink_to(good)
    with pytest.raises(BadOutputFile, match="cannot open link"):
        read_safetensors(tmp_path / "link", "cpu")
    os.mkfifo(tmp_path / "fifo")  # nobody writes it: a blocking open would hang here
    with pytest.raises(BadOutputFile, match="not a regular file"):
        read_safetensors(tmp_path / "fifo", "cpu")


def test_the_judge_turns_an_unreadable_output_file_into_a_reason_and_deletes_it():
    host = SolutionHost(None, "s", "cpu", False, Path("."), notify=None)
    try:
        host.nonce = "n1"
        path = host.workdir / solution_host._file_name("first", host.nonce)
        _raw(path, {"a": _entry()}, b"\0" * 8, tail=b"x")
        outputs, why = load_checked(host, "first", "cpu")
        assert outputs is None and "BadOutputFile" in why and "bytes after the last tensor" in why
        assert not path.exists()
        write_safetensors(path, {"a": torch.arange(3)})
        outputs, why = load_checked(host, "first", "cpu")
        assert why == "" and outputs["a"].tolist() == [0, 1, 2] and not path.exists()
    finally:
        host.close()


def test_the_judge_running_out_of_memory_is_raised_and_the_file_kept_for_another_try(monkeypatch):
    """Not the solution's fault: raised for runner.WorkerContext.with_room, which makes room and reads it again."""
    host = SolutionHost(None, "s", "cpu", False, Path("."), notify=None)
    try:
        host.nonce = "n2"
        path = host.workdir / solution_host._file_name("final", host.nonce)
        write_safetensors(path, {"a": torch.arange(3)})
        real = solution_host.read_safetensors

        def out_of_memory(*args):
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")

        monkeypatch.setattr(solution_host, "read_safetensors", out_of_memory)
        with pytest.raises(torch.OutOfMemoryError):
            load_checked(host, "final", "cpu")
        assert path.exists()
        monkeypatch.setattr(solution_host, "read_safetensors", real)
        outputs, why = load_checked(host, "final", "cpu")
        assert why == "" and outputs["a"].tolist() == [0, 1, 2] and not path.exists()
    finally:
        host.close()


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


def test_a_write_that_writes_less_is_continued():
    """One write(2) writes at most 2 GiB on Linux (and may write less): every byte is written all the same."""

    class Short(io.BytesIO):
        def write(self, data):
            return super().write(bytes(memoryview(data)[:3]))  # at most 3 bytes a call

    f = Short()
    solution_host._write_all(f, b"0123456789")
    assert f.getvalue() == b"0123456789"

    class Stuck(io.BytesIO):
        def write(self, data):
            return 0

    with pytest.raises(OSError, match="wrote nothing"):
        solution_host._write_all(Stuck(), b"x")


def test_a_stopped_process_gives_its_spare_back(tmp_path):
    host = SolutionHost.__new__(SolutionHost)
    host.workdir, host.ramdir, host.process, host.conn = tmp_path / "work", tmp_path / "ram", None, None
    for folder in (host.workdir, host.ramdir):
        folder.mkdir()
        (folder / solution_host.SPARE_FILE).write_bytes(b"x" * 10)
    host.stop()
    assert not any((folder / solution_host.SPARE_FILE).exists() for folder in (host.workdir, host.ramdir))
