"""The solution process's own checks (integrity.py), without processes."""

import threading
import time

import torch

from kda_trace import integrity


def test_fingerprint_names_replaced_functions_methods_and_code(monkeypatch):
    import kda_trace.compare as compare

    before = integrity.HarnessFingerprint.capture()
    assert before.changes() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch.Tensor, "clone", lambda self: self)  # shadows TensorBase.clone
    monkeypatch.setattr(compare.compare_output, "__code__", (lambda *a, **k: None).__code__)
    changes = before.changes()
    assert {"kda_trace.compare.compare_output", "time.perf_counter"} <= set(changes)
    assert any(c.endswith("Tensor.clone") for c in changes)


def test_foreign_memory_allows_only_declared_inplace_outputs():
    x, pool = torch.randn(4, 8), torch.randn(3, 8)
    outputs = {"y": x[1:], "new_pool": pool}
    found = integrity.foreign_memory(outputs, {"x": x, "pool": pool}, {"new_pool": "pool"})
    assert found == ["output 'y' shares memory with input 'x'"]
    assert integrity.foreign_memory({"y": x.clone(), "new_pool": pool}, {"x": x, "pool": pool}, {"new_pool": "pool"}) == []


def test_outputs_written_after_return_and_live_threads_are_seen():
    out = {"y": torch.zeros(16)}
    copies = integrity.snapshot(out)
    before = integrity.live_threads()
    worker = threading.Thread(target=lambda: (time.sleep(0.002), out["y"].fill_(1.0), time.sleep(0.2)))
    worker.start()
    assert integrity.new_threads(before) != []
    assert integrity.changed_after_return(out, copies, sync=lambda: None) == ["y"]
    worker.join()
    assert integrity.changed_after_return(out, integrity.snapshot(out), sync=lambda: None) == []


def test_output_digests_match_honest_outputs_and_tell_wrong_ones():
    from kda_trace.integrity import digest_mismatches, output_digest

    g = torch.Generator().manual_seed(0)
    ref = {"o": torch.randn(3, 50, 16, generator=g), "s": torch.randn(2, 16, 16, generator=g)}
    want = output_digest(ref, seed=7)
    assert output_digest({k: v.clone() for k, v in ref.items()}, seed=7) == want  # same seed, same numbers
    atol = {"o": 1e-5, "s": 1e-5}
    noisy = {k: v + 1e-2 * v.std() * torch.randn(v.shape, generator=g) for k, v in ref.items()}  # 1% RMS error
    assert digest_mismatches(output_digest(noisy, 7), want, atol) == {}
    other = {k: torch.randn(v.shape, generator=g) for k, v in ref.items()}  # another input set's answer
    assert set(digest_mismatches(output_digest(other, 7), want, atol)) == {"o", "s"}
    zeros = {k: torch.zeros_like(v) for k, v in ref.items()}
    assert set(digest_mismatches(output_digest(zeros, 7), want, atol)) == {"o", "s"}
    half = {"o": torch.cat([ref["o"][:, :25], torch.zeros(3, 25, 16)], 1), "s": ref["s"]}  # half the tokens
    assert set(digest_mismatches(output_digest(half, 7), want, atol)) == {"o"}
    nan = {"o": ref["o"].clone(), "s": ref["s"]}
    nan["o"][0, 0, 0] = float("nan")
    assert digest_mismatches(output_digest(nan, 7), want, atol) == {"o": float("inf")}
    # the same NaN twice (a timed and an untimed call of one deterministic solution) is no difference
    assert digest_mismatches(output_digest(nan, 7), output_digest(nan, 7), atol) == {}
    assert digest_mismatches({"o": want["o"]}, want, atol) == {"s": float("inf")}  # a missing output


def test_the_digest_bound_follows_the_outputs_tolerance():
    """Without a tolerance, digests may differ by 20% of the norm (DIGEST_RELATIVE); with the output's
    RMS-relative tolerance rel, by 2 x rel: an output 3% off (cheats.py::off_by_percent_when_timed) is told
    from the reference at rel 1e-2 (KDA's o), while honest outputs at a third of the tolerance never are."""
    from kda_trace.integrity import DIGEST_TOLERANCE_FACTOR, digest_mismatches, output_digest

    assert DIGEST_TOLERANCE_FACTOR == 2.0
    g = torch.Generator().manual_seed(2)
    ref = {"o": torch.randn(4, 64, 32, generator=g)}
    want = output_digest(ref, seed=11)
    off = output_digest({"o": ref["o"] * 1.03}, seed=11)
    assert digest_mismatches(off, want, {"o": 0.0}) == {}  # the old bound alone lets 3% through
    got = digest_mismatches(off, want, {"o": 0.0}, rms_rel={"o": 1e-2})
    assert set(got) == {"o"} and got["o"] > 1  # the norm alone is off by 3% > 2 x 1%
    assert digest_mismatches(off, want, {"o": 0.0}, rms_rel={"o": None}) == {}  # no tolerance: the old bound
    for seed in range(50):  # honest: RMS error a third of the tolerance, 4 projections and the norm each time
        noise = torch.randn(ref["o"].shape, generator=torch.Generator().manual_seed(100 + seed))
        honest = ref["o"] + 1e-2 / 3 * noise * ref["o"].norm() / noise.norm()
        assert digest_mismatches(output_digest({"o": honest}, 11), want, {"o": 0.0}, rms_rel={"o": 1e-2}) == {}


def test_an_inplace_pools_tolerance_bound_uses_the_whole_pool():
    """An in-place pool is digested by what the call wrote, but an honest pool is within rel of the reference
    as a whole: the tolerance bound takes the whole pool's norm (`full_norm`) from the judge's digest."""
    from kda_trace.integrity import digest_mismatches, output_digest

    g = torch.Generator().manual_seed(3)
    pool = torch.randn(64, 8, 8, generator=g)
    written = pool.clone()
    written[5] = 0.5 * pool[5] + torch.randn(8, 8, generator=g)
    want = output_digest({"pool": written}, 5, base={"pool": pool})
    assert abs(want["pool"]["full_norm"] - float(written.double().norm())) < 1e-9
    noise = torch.randn(written.shape, generator=g)
    honest = written + 3e-4 * noise * written.norm() / noise.norm()  # RMS-relative 3e-4 over the whole pool
    got = output_digest({"pool": honest}, 5, base={"pool": pool})
    assert digest_mismatches(got, want, {"pool": 0.0}, rms_rel={"pool": 1e-3}) == {}
    skipped = output_digest({"pool": pool}, 5, base={"pool": pool})
    assert "pool" in digest_mismatches(skipped, want, {"pool": 0.0}, rms_rel={"pool": 1e-3})


def test_outputs_must_be_plain_tensors_on_the_solutions_device():
    from kda_trace.integrity import unusual_outputs

    class Sub(torch.Tensor):
        pass

    outputs = {"ok": torch.zeros(2), "sub": torch.zeros(2).as_subclass(Sub), "meta": torch.zeros(2, device="meta"),
               "scalar": 3}
    found = unusual_outputs(outputs, "cpu")
    assert len(found) == 2 and "'sub' is a" in found[0] and "Sub, not a plain" in found[0]
    assert "'meta' is on meta, not on cpu" in found[1]


def test_an_inplace_pool_is_digested_as_what_the_call_wrote():
    """One written slot among 512 is lost in the pool's norm; as a difference from the input pool it is all
    there is, so a call that skips the write is told from one that makes it."""
    from kda_trace.integrity import digest_mismatches, output_digest

    g = torch.Generator().manual_seed(1)
    pool = torch.randn(512, 8, 8, generator=g)
    written = pool.clone()
    written[3] = 0.9 * pool[3] + torch.randn(8, 8, generator=g)
    want = output_digest({"pool": written}, 5, base={"pool": pool})
    assert want["pool"]["norm"] > 0
    skipped = output_digest({"pool": pool}, 5, base={"pool": pool})  # the call did not write slot 3
    assert "pool" in digest_mismatches(skipped, want, {"pool": 0.0})
    assert digest_mismatches(output_digest({"pool": written.clone()}, 5, base={"pool": pool}), want, {"pool": 0.0}) == {}
    # without the base, the skipped write hides in the untouched slots
    assert digest_mismatches(output_digest({"pool": pool}, 5), output_digest({"pool": written}, 5), {"pool": 0.0}) == {}


def test_fingerprint_names_changed_settings_of_the_checks(monkeypatch):
    from kda_trace import solution_host, timing
    from kda_trace.integrity import HarnessFingerprint

    before = HarnessFingerprint.capture()
    monkeypatch.setattr(solution_host, "GATE_CYCLES", 0)
    monkeypatch.setattr(timing, "OUTSIDE_STREAM_FACTOR", 1e9)
    assert {"kda_trace.solution_host.GATE_CYCLES", "kda_trace.timing.OUTSIDE_STREAM_FACTOR"} <= set(before.changes())


def test_bit_checksums_tell_any_changed_element_and_agree_on_copies():
    from kda_trace.integrity import bit_checksum

    g = torch.Generator().manual_seed(3)
    for x in (torch.randn(300, 7, generator=g).to(torch.bfloat16), torch.randn(50, generator=g).double(),
              torch.randint(0, 9, (40,), generator=g, dtype=torch.int32), torch.rand(20, generator=g) > 0.5):
        assert bit_checksum(x) == bit_checksum(x.clone()) == bit_checksum(x.t().contiguous().t())
        y = x.clone().reshape(-1)
        y[len(y) // 2] = y[len(y) // 2] + 1 if y.dtype != torch.bool else ~y[len(y) // 2]
        assert bit_checksum(y.reshape(x.shape)) != bit_checksum(x)
    z = torch.zeros(8)
    assert bit_checksum(z) != bit_checksum(-z)  # -0.0 has other bits


def test_the_tolerance_bound_falls_back_to_atol_for_a_tiny_reference():
    """compare_output judges an output whose reference RMS is below atol by RMS error <= atol, not relatively:
    an honest output there may be off by atol, and its digest must not be told from the reference's (else an
    untimed call that passes could not settle the mismatch). A zero reference included."""
    from kda_trace.integrity import digest_mismatches, output_digest

    g = torch.Generator().manual_seed(4)
    for scale in (0.0, 1e-4):
        ref = {"o": scale * torch.randn(8, 64, generator=g)}
        noise = torch.randn(8, 64, generator=g)
        honest = {"o": ref["o"] + 3e-4 * noise / noise.pow(2).mean().sqrt()}  # RMS error a third of atol
        want = output_digest(ref, 9)
        assert digest_mismatches(output_digest(honest, 9), want, {"o": 1e-3}, relative=None, rms_rel={"o": 5e-3}) == {}
        off = {"o": ref["o"] + 1e-1 * noise / noise.pow(2).mean().sqrt()}  # 100 x atol
        assert set(digest_mismatches(output_digest(off, 9), want, {"o": 1e-3}, relative=None, rms_rel={"o": 5e-3})) == {"o"}


def test_a_calls_outputs_are_overwritten_once_copied(tmp_path):
    """Freed output blocks can come back from torch's caching allocator as the next call's outputs; holding the same
    results, they would hide a side stream's work from the held-back call. The solution's process overwrites a
    call's outputs once it has their copies."""
    from pathlib import Path

    from kda_trace.dataset import load_dataset
    from kda_trace.solution_host import _Host

    d = load_dataset(Path(__file__).parent / "fixtures" / "ds").definitions["toy_scan"]
    host = _Host(None, "x", "cpu", False, tmp_path, tmp_path, integrity.HarnessFingerprint.capture(), None)
    kept = {}

    def run(x, state_pool, state_indices, scale):
        kept["y"] = x * scale
        state_pool[state_indices] += 1
        return kept["y"], state_pool

    args = {"x": torch.ones(2, 3, 4), "state_pool": torch.zeros(5, 4), "state_indices": torch.tensor([1, 3]),
            "scale": 2.0}
    copies, _ = host.call("the first call", "here", d, run, args)
    assert torch.equal(copies["y"], torch.full((2, 3, 4), 2.0)) and copies["new_state_pool"].sum() == 8
    assert kept["y"].isnan().all() and args["state_pool"].isnan().all()
