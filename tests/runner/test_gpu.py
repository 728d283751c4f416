"""The runner on a GPU: CUDA-event and CUDA-graph timing, fla against the reference (pytest -m gpu)."""

import json
import statistics

import pytest

from kda_trace import platform
from kda_trace.cli import main

from cheats import _event_ms  # GPU time of a call by CUDA events, from an idle device (the fixture's own timer)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def compiled_triton(monkeypatch):
    """Workers inherit the environment: another test module of the same pytest run (test_fla_adapters) sets
    TRITON_INTERPRET=1 at import, which would run these GPU runs through the interpreter."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
@pytest.mark.parametrize("graph", [False, True])
def test_fla_decode_on_gpu(tmp_path, graph):
    argv = ["run", "--definition", "kda_decode_h32_d128_k_last", "--solution", "fla", "--solution", "reference",
            "--size", "smoke", "--out", str(tmp_path)] + (["--cuda-graph"] if graph else [])
    assert main(argv) == 0
    lines = (tmp_path / "traces" / "kda" / "kda_decode_h32_d128_k_last.jsonl").read_text().splitlines()
    for rec in map(json.loads, lines):
        perf = rec["evaluation"]["performance"]
        if graph and rec["solution"] == "reference":
            # the decode reference checks its slots on the host (state_indices.tolist()), which a capture
            # cannot record: it is timed with events, and its record says why
            assert perf["mode"] == "cuda_events", perf
            assert "CUDA graph capture failed" in rec["evaluation"]["log"]
        else:
            assert perf["mode"] == ("cuda_graph" if graph else "cuda_events")
        assert perf["repetitions"] >= 10 and perf["latency_ms"] > 0 and perf["reference_latency_ms"] > 0
        log = rec["evaluation"]["log"]
        assert "reference timing: " in log and "with the GPU alone" in log, log
        assert rec["evaluation"]["environment"]["libs"].get("driver")


@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
def test_inputs_on_host_gives_the_same_verdicts(tmp_path):
    """--inputs-on-host (automatic for the stress workloads) makes each call's inputs again from their seeds: the
    records must match a run that keeps everything on the GPU, error for error."""
    runs = {}
    for label, extra in (("gpu", []), ("host", ["--inputs-on-host"])):
        out = tmp_path / label
        argv = ["run", "--definition", "kda_prefill_h8_d128_k_last", "--definition", "kda_decode_h8_d128_k_last",
                "--solution", "triton", "--size", "smoke", "--max-reps", "3", "--out", str(out)] + extra
        assert main(argv) == 0
        runs[label] = {}
        for path in sorted((out / "traces" / "kda").glob("*.jsonl")):
            for rec in map(json.loads, path.read_text().splitlines()):
                ev = rec["evaluation"]
                assert ev["status"] == "PASSED", (label, rec["workload"]["uuid"], ev["log"])
                outputs = ev["correctness"]["outputs"]
                runs[label][(rec["definition"], rec["workload"]["uuid"])] = {
                    name: (m["rms_rel_error"], m["max_abs_error"]) for name, m in outputs.items()}
    assert runs["gpu"] and runs["gpu"] == runs["host"]


@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
@pytest.mark.parametrize("side_stream", [False, True])
def test_one_repetition_with_a_large_output_is_not_called_a_side_stream(side_stream):
    """The last repetition's snapshot of its outputs (a state pool's copy: milliseconds) ran inside the host
    clock's span: one repetition of a fast decode call on the stress pools read as work the events missed
    (honest triton and fla were called REWARD_HACK). Work really left on another stream is still seen."""
    import torch

    from kda_trace.timing import TimingConfig, measure

    pool = torch.zeros(2 * 2**30 // 4, device="cuda")  # 2 GiB: its copy takes about a millisecond on an H100
    side = torch.cuda.Stream()
    busy = torch.empty(4096, 4096, device="cuda")

    def run(pool):
        pool[:1024].add_(1.0)
        if side_stream:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(20):
                    busy.copy_(busy @ busy)
        return pool

    r = measure(run, {"pool": pool}, "cuda", TimingConfig(warmup=0, min_reps=1, max_reps=1), estimate_s=2.0)
    assert len(r.times_ms) == 1
    assert (r.outside_stream_ms is not None) == side_stream, (r.times_ms, r.wall_ms)


@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
def test_work_behind_a_shorter_sleep_on_the_callers_stream_is_seen():
    """The caller's stream sleeps for 0.6 of the work, which runs on a side stream: the events see the sleep, the
    host clock the work (tests/runner/cheats.py's side_stream_when_timed, without the runner)."""
    import torch

    from kda_trace.timing import TimingConfig, measure

    side = torch.cuda.Stream()
    busy = torch.randn(4096, 4096, device="cuda")

    def work():
        for _ in range(20):
            busy.copy_(busy @ busy / 64)

    work()
    work_ms = _event_ms(work)
    cycles = int(0.6 * work_ms / (_event_ms(lambda: torch.cuda._sleep(10_000_000)) / 10_000_000))

    def run(x):
        side.wait_stream(torch.cuda.current_stream())
        torch.cuda._sleep(cycles)
        with torch.cuda.stream(side):
            work()
        return x

    r = measure(run, {"x": torch.zeros(4, device="cuda")}, "cuda", TimingConfig(warmup=1, min_reps=5, max_reps=5),
                estimate_s=0.01)
    assert r.outside_stream_ms is not None, (work_ms, r.times_ms, r.wall_ms)
    assert statistics.median(r.times_ms) < 0.8 * work_ms  # what the events alone would have reported


@pytest.mark.skipif(not platform.has_cuda(), reason="needs a CUDA device")
def test_workers_sharing_one_gpu_time_as_one_worker_does(tmp_path):
    """Three workers on one GPU (the default) give the same verdicts as one, and medians within the noise of one
    worker's: their timing loops take the GPU one at a time (kda_trace/gpu_turns.py)."""
    medians = {}
    for workers in (1, 3):
        out = tmp_path / str(workers)
        argv = ["run", "--name", "kda_decode_h32_d128_k_last", "--name", "kda_prefill_h32_d128_k_last",
                "--solution", "triton", "--size", "all", "--shard", "0/3", "--workers", str(workers),
                "--workers-per-gpu", str(workers), "--out", str(out)]
        assert main(argv) == 0
        for path in (out / "traces" / "kda").glob("*.jsonl"):
            for rec in map(json.loads, path.read_text().splitlines()):
                assert rec["evaluation"]["status"] == "PASSED", rec["evaluation"]["log"]
                medians.setdefault(rec["workload"]["uuid"], {})[workers] = rec["evaluation"]["performance"]["latency_ms"]
        profile = json.loads((out / "profile.json").read_text())
        assert profile["workers"] == workers
    ratios = [m[3] / m[1] for m in medians.values() if len(m) == 2]
    assert ratios and 0.85 < statistics.median(ratios) < 1.15, ratios
