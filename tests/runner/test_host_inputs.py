"""Which workloads the runner keeps in host memory by default (runner.keeps_on_host), by the dataset's shapes."""

from kda_trace.dataset import load_dataset
from kda_trace.runner import declared_bytes, keeps_on_host

H100_BYTES = 81559 * 2**20  # torch.cuda.get_device_properties(0).total_memory on the H100 80GB HBM3
H200_BYTES = 143771 * 2**20  # and on the H200


def _footprints():
    ds = load_dataset()
    for name, d in ds.definitions.items():
        for w in ds.workloads_of(name):
            yield name, w, declared_bytes(d, d.inputs, w), declared_bytes(d, d.outputs, w)


def test_every_stress_workload_is_kept_in_host_memory_even_on_an_h200():
    stress = [(n, w.uuid, i, o) for n, w, i, o in _footprints() if "stress" in w.tags]
    assert len(stress) >= 10
    # decode's pools: the input alone (8.7 GB) is under a tenth of an H200; with the output pool it is not
    assert any(n.startswith("kda_decode") and i < H200_BYTES / 10 for n, _, i, _ in stress)
    assert [(n, u) for n, u, i, o in stress if not keeps_on_host(i, o, H200_BYTES)] == []


def test_the_largest_prefill_workloads_stay_on_an_h100():
    prefill = [(i, o) for n, w, i, o in _footprints()
               if n == "kda_prefill_h96_d128_k_last_safe_gate" and "stress" not in w.tags]
    largest = max(prefill, key=sum)
    assert sum(largest) > 8e9
    assert not keeps_on_host(*largest, H100_BYTES)


def test_declared_bytes_counts_shapes_and_dtypes():
    ds = load_dataset()
    d = ds.definitions["kda_decode_h32_d128_k_last"]
    w = next(w for w in ds.workloads_of(d.name) if "stress" in w.tags)
    pool = w.axes["pool_size"] * 32 * 128 * 128 * 4  # float32 state pool, 32 heads, K = V = 128
    o = w.axes["batch_size"] * 32 * 128 * 2  # bf16, one token per sequence
    assert declared_bytes(d, d.outputs, w) == pool + o
