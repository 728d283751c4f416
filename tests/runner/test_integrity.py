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
