"""timing.measure's rule for slow calls: a call slower than the budget is not warmed up again and is timed once."""

import json
import time
from pathlib import Path

import pytest
import torch

from kda_trace.cli import main
from kda_trace.runner import reference_timing_by_calls
from kda_trace.timing import DIGEST_HORIZON, DIGESTED_REPS, TimingConfig, measure

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
BAD = str(HERE / "bad_solutions.py")

CFG = TimingConfig(warmup=3, min_reps=10, max_reps=20, budget_s=0.05)


class Counted:
    """A callable that sleeps `seconds` per call (after `first` extra seconds on its first call) and records
    which input set (x[0]) each call saw."""

    def __init__(self, seconds, first=0.0):
        self.seconds, self.first, self.seen = seconds, first, []

    def __call__(self, x):
        time.sleep(self.seconds + (self.first if not self.seen else 0.0))
        self.seen.append(float(x[0]))
        return x * 2


A, B = {"x": torch.zeros(4)}, {"x": torch.ones(4)}


def test_slow_estimate_times_once_without_warmup():
    run = Counted(0.07)
    r = measure(run, A, "cpu", CFG, final_inputs=B, estimate_s=0.07)
    assert run.seen == [1.0]  # one call, on the final input set, no warm-up
    assert len(r.times_ms) == 1 and r.times_ms[0] >= 70 and torch.equal(r.final_outputs, 2 * B["x"])
    assert "timed with 1 repetition after 0 warm-up" in r.notes[0]


def test_slow_warmup_stops_warming_up():
    run = Counted(0.07)
    r = measure(run, A, "cpu", CFG, final_inputs=B)
    assert run.seen == [0.0, 1.0]  # one warm-up showed the call is slow: one timed call
    assert len(r.times_ms) == 1 and "after 1 warm-up" in r.notes[0]


def test_estimate_inflated_by_compilation_still_gets_full_timing():
    run = Counted(0.001)
    r = measure(run, A, "cpu", CFG, final_inputs=B, estimate_s=2.0)  # e.g. a first call that autotuned
    assert len(r.times_ms) >= CFG.min_reps and not r.notes
    assert len(run.seen) == 1 + CFG.warmup + len(r.times_ms) and run.seen[-1] == 1.0


def test_fast_call_keeps_warmups_and_min_reps():
    run = Counted(0.001)
    r = measure(run, A, "cpu", CFG, final_inputs=B, estimate_s=0.001)
    assert CFG.min_reps <= len(r.times_ms) <= CFG.max_reps and not r.notes
    assert len(run.seen) == CFG.warmup + len(r.times_ms) and run.seen[-1] == 1.0


def test_reference_on_cpu_is_timed_by_its_correctness_calls():
    r = reference_timing_by_calls([5.0, 7.0], "cpu")
    assert r.times_ms == [5.0, 7.0] and r.mode == "cpu_wall" and "correctness calls" in r.notes[0]
    g = reference_timing_by_calls([7.0, 5.0], "cuda:0")  # a task that had the GPU alone throughout
    assert g.times_ms == [5.0] and g.mode == "cuda_sync_wall"
    assert "the faster of its 2 correctness calls, with the GPU alone" in g.notes[0]


def test_the_reference_is_timed_on_the_repetition_its_check_draws_and_the_check_keeps_it():
    from kda_trace.dataset import load_dataset
    from kda_trace.reference import compile_reference
    from kda_trace.runner import FreshReferences

    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    w = ds.workloads_of("toy_scan")[0]
    syncs = []
    fresh = FreshReferences(d, w, compile_reference(d.reference, d.name), "cpu", ds.root, on_host=False)
    digests = [{"x": 1}, None, {"x": 2}, None]  # repetitions 0 and 2 digested
    fresh.seed(2)  # the seeds of repetitions 0-2 given (the last, on set B, has none)
    rep = fresh.checked_repetition(digests)
    assert rep in (0, 2)
    ms = fresh.timed_reference_call(rep, lambda: syncs.append(1))
    assert ms >= 0 and len(syncs) == 2 and set(fresh.made) == {rep}
    # the check then draws the repetition the reference already ran on, for this solution and the next ones
    assert all(fresh.checked_repetition(digests) == rep for _ in range(20))
    # one timed repetition only (the last, on set B): nothing to check, and the reference is timed on inputs of its
    # own, kept nowhere
    assert fresh.checked_repetition([None]) is None
    assert fresh.timed_reference_call(None, lambda: None) >= 0 and set(fresh.made) == {rep}


@pytest.mark.slow  # a `kda-trace run` of its own
def test_runner_times_a_slow_solution_once_and_says_so(tmp_path):
    # asked for 2 warm-ups and 3 reps; each call takes 1.1 s > the 1 s budget: timed once, no warm-up
    assert main(["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--solution",
                 f"{BAD}::slow_good", "--warmup", "2", "--reps", "3", "--out", str(tmp_path)]) == 0
    line = (tmp_path / "traces" / "toy" / "toy_scan.jsonl").read_text().splitlines()[0]
    ev = json.loads(line)["evaluation"]
    assert ev["status"] == "PASSED" and ev["performance"]["repetitions"] == 1
    assert ev["performance"]["latency_ms"] >= 1100
    assert "timing budget: timed with 1 repetition after 0 warm-up" in ev["log"]
    assert "reference timing: its 2 correctness calls" in ev["log"]
    assert json.loads((tmp_path / "summary.json").read_text())["totals"]["passed"] == 1


def test_mutable_inputs_are_restored_before_every_repetition_and_the_last_sees_the_final_set():
    """With `mutable`, only those inputs are copied back between repetitions (the runner has already checked
    that a solution leaves the others alone); the last repetition gets the whole final set."""
    seen = []

    def run(state, x):
        seen.append((float(state[0]), float(x[0])))
        state += 1  # in place, as a state pool is written
        x += 10  # a mutation the runner would have rejected before timing: not undone between repetitions
        return state.clone()

    cfg = TimingConfig(warmup=1, min_reps=3, max_reps=3, budget_s=1.0)
    inputs = {"state": torch.zeros(2), "x": torch.zeros(2)}
    final = {"state": torch.full((2,), 5.0), "x": torch.full((2,), 7.0)}
    r = measure(run, inputs, "cpu", cfg, final_inputs=final, mutable={"state"})
    assert [s for s, _ in seen] == [0.0, 0.0, 0.0, 5.0]  # every call starts from a restored state
    assert [x for _, x in seen] == [0.0, 10.0, 20.0, 7.0]
    assert torch.equal(r.final_outputs, torch.full((2,), 6.0))
    assert torch.equal(inputs["state"], torch.zeros(2)) and torch.equal(final["x"], torch.full((2,), 7.0))


def test_every_timed_repetition_gets_inputs_of_its_own_and_a_digest():
    run = Counted(0.0)
    made = []

    def rep_inputs(i):
        made.append(i)
        return {"x": torch.full((4,), 10.0 + i)}

    digest = lambda out, inputs: (float(out.sum()), float(inputs["x"][0]))  # noqa: E731
    r = measure(run, A, "cpu", CFG, final_inputs=B, rep_inputs=rep_inputs, digest=digest)
    timed = run.seen[-len(r.times_ms):]
    assert run.seen[:CFG.warmup] == [0.0] * CFG.warmup  # warm-ups on A
    assert timed[:-1] == [10.0 + i for i in range(len(timed) - 1)] and timed[-1] == 1.0  # fresh sets, then B
    assert made == list(range(len(timed) - 1))
    # about DIGESTED_REPS repetitions drawn among all but the last, each the digest of its own outputs and inputs
    assert len(r.digests) == len(timed) and r.digests[-1] is None
    drawn = [i for i, g in enumerate(r.digests) if g is not None]
    assert drawn and all(r.digests[i] == (8.0 * timed[i], timed[i]) for i in drawn)


def test_digested_repetitions_are_drawn_after_they_return_about_eight_of_many():
    from kda_trace.timing import _digested

    assert not _digested(4, 5, object(), []) and all(_digested(i, 5, object(), []) for i in range(4))
    assert not _digested(0, 5, None, [])
    assert _digested(198, 200, object(), [None] * 198)  # none drawn so far: the one before the last is

    def loop(reps):
        so_far = []
        for i in range(reps):
            so_far.append(1 if _digested(i, reps, object(), so_far) else None)
        return sum(1 for g in so_far if g is not None)

    counts = [loop(DIGEST_HORIZON) for _ in range(200)]
    assert 7 <= sum(counts) / len(counts) <= 9 and min(counts) >= 1 and min(counts) < max(counts)
    assert DIGESTED_REPS == 8
    # a longer loop digests more (the chance does not fall below DIGESTED_REPS in DIGEST_HORIZON)
    counts = [loop(200) for _ in range(50)]
    assert sum(counts) / len(counts) >= 30


def test_a_settled_median_ends_the_loop_early_and_it_still_ends_on_set_b_with_a_digest(monkeypatch):
    import itertools

    from kda_trace import timing
    from kda_trace.timing import median_settled

    ticks = itertools.count()
    monkeypatch.setattr(timing, "_perf_counter", lambda: next(ticks) * 1e-3)  # every interval 1 ms: settled

    assert median_settled([1.0] * 10, 0.02) and not median_settled([1.0, 2.0] * 5, 0.02)
    assert median_settled([1.0] * 9 + [5.0], 0.02)  # one outlier leaves the median where it is
    assert not median_settled([1.0] * 10, 0.0)
    jitter = [0.0500, 0.0512, 0.0494, 0.0507, 0.0491, 0.0503, 0.0509, 0.0497, 0.0502, 0.0499]  # ms, a 50 us call
    assert not median_settled(jitter, 0.02) and median_settled(jitter, 0.02, floor_ms=0.002)
    assert not median_settled(jitter, 0.02, floor_ms=0.0005)
    run = Counted(0.0)
    cfg = TimingConfig(warmup=1, min_reps=5, max_reps=200, budget_s=10.0, settle=0.5)
    digest = lambda out, inputs: float(out.sum())  # noqa: E731
    r = measure(run, A, "cpu", cfg, final_inputs=B, digest=digest)
    assert len(r.times_ms) == cfg.min_reps + 1  # settled after min_reps: one more, the last
    assert run.seen[-1] == 1.0  # the last repetition ran on input set B
    assert r.digests[-1] is None and any(g is not None for g in r.digests)
    r = measure(Counted(0.0), A, "cpu", TimingConfig(warmup=1, min_reps=5, max_reps=30, budget_s=10.0, settle=0.0))
    assert len(r.times_ms) == 30  # settle 0: every repetition the budget allows


def test_a_swapped_l2_flush_buffer_is_tampering(monkeypatch):
    """redteam.py::keeps_l2_warm swaps the timing loop's flush buffer for a 1-byte tensor (warm-cache times on
    a GPU). The flush made the buffer itself, so a buffer found changed is a solution's doing: TimingTampered,
    which the solution's host reports as REWARD_HACK. (Raised before any CUDA call, so it shows on the CPU.)"""
    from kda_trace import timing

    monkeypatch.setattr(timing, "_flush_buffers", {"cuda:0": torch.empty(1, dtype=torch.int8)})
    with pytest.raises(timing.TimingTampered, match="replaced by a Tensor of 1 torch.int8 elements on cpu"):
        timing.flush_l2("cuda:0")
    assert "cuda:0" not in timing._flush_buffers  # dropped: a later workload makes its own again
    timing.flush_l2("cpu")  # nothing to flush on the CPU, nothing checked


def test_the_flush_buffer_check_accepts_only_its_own_kind_of_buffer():
    from kda_trace.timing import L2_FLUSH_BYTES, _is_flush_buffer

    meta = torch.device("meta")
    assert _is_flush_buffer(torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=meta), meta)
    assert not _is_flush_buffer(torch.empty(L2_FLUSH_BYTES - 1, dtype=torch.int8, device=meta), meta)
    assert not _is_flush_buffer(torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=meta), meta)
    assert not _is_flush_buffer(torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=meta), torch.device("cpu"))
    assert not _is_flush_buffer(torch.empty(2, L2_FLUSH_BYTES, dtype=torch.int8, device=meta)[:, 0], meta)
    assert not _is_flush_buffer(None, meta)


def test_an_unchanged_integer_input_keeps_its_version_between_repetitions():
    """cu_seqlens is the same in every input set of a workload: copying it again would bump its version and
    void a solution's per-tensor cache of derived tables (fla's, ours) in every timed repetition. Changed
    integer values (slot indices drawn per seed) and float inputs are copied as before."""
    versions = []

    def run(cu, idx, x):
        versions.append((cu._version, idx._version, x._version, int(idx[0])))
        return x * 2

    cfg = TimingConfig(warmup=1, min_reps=3, max_reps=3, budget_s=1.0)
    inputs = {"cu": torch.tensor([0, 3, 7]), "idx": torch.tensor([1, 2]), "x": torch.zeros(4)}
    final = {"cu": torch.tensor([0, 3, 7]), "idx": torch.tensor([5, 6]), "x": torch.ones(4)}
    per_rep = lambda i: {"cu": torch.tensor([0, 3, 7]), "idx": torch.tensor([10 + i, 2]), "x": torch.full((4,), 2.0 + i)}  # noqa: E731
    measure(run, inputs, "cpu", cfg, final_inputs=final, rep_inputs=per_rep)
    cu_versions = {v[0] for v in versions}
    assert len(cu_versions) == 1, versions  # never copied: the same values throughout
    assert [v[3] for v in versions] == [1, 10, 11, 5]  # the warm-up, two timed repetitions, the last on set B
    assert len({v[1] for v in versions}) > 1 and len({v[2] for v in versions}) > 1  # the others were copied


def test_the_host_clock_bounds_what_the_events_may_miss():
    """A GPU repetition's events must cover its device-synchronised host time but 10% + 0.05 ms: at 2x (the bound
    before this one) a call could hide 40% of its work on a side stream behind a sleep on the caller's stream
    (tests/runner/cheats.py's side_stream_when_timed). Honest calls differ by the synchronisation latency."""
    from kda_trace.timing import _result

    def outside(events_ms, wall_ms):
        return _result([events_ms] * 5, "cuda_events", None, [], None, [wall_ms] * 5, []).outside_stream_ms

    assert outside(1.0, 1.0 + 0.02) is None and outside(0.05, 0.05 + 0.04) is None  # sync latency
    assert outside(0.6, 1.0) == 1.0  # the fixture's 0.6 of the time: passed at 2x
    assert outside(10.0, 11.2) == 11.2 and outside(10.0, 11.0) is None


def test_only_a_repetition_whose_seed_was_given_is_checked():
    """A harness that reports a digest for a repetition it never asked a seed for does not make the judge draw that
    repetition (and its reference on inputs no solution got)."""
    from kda_trace.dataset import load_dataset
    from kda_trace.reference import compile_reference
    from kda_trace.runner import FreshReferences

    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    fresh = FreshReferences(d, ds.workloads_of("toy_scan")[0], compile_reference(d.reference, d.name), "cpu",
                            ds.root, on_host=False)
    fresh.seed(0)  # one seed given: repetition 0's
    assert all(fresh.checked_repetition([{"x": 1}, {"x": 2}, {"x": 3}]) == 0 for _ in range(20))
    assert fresh.checked_repetition([None, {"x": 2}]) is None
