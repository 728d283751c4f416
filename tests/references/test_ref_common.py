"""Every definition, whatever its family: its reference runs on the dataset's smallest smoke workload,
returns the definition's shapes and dtypes, finite values, and the same bits for the same seed
(one definition per family in the fast tier, all of them with -m slow)."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICE,
    assert_bits_equal,
    check_output_specs,
    dataset,
    inputs_of,
    run_reference,
    smoke_workloads,
    workload_size,
)
from coverage_cells import family_of


def all_definitions():
    """Every definition; in the fast tier one per family (the others are marked slow)."""
    defs = dataset().select(op_type="kda")
    fast = {}
    for d in sorted(defs, key=lambda d: (d.const_axes.get("num_v_heads", 0), d.name)):
        fast.setdefault(family_of(d), d)
    return [pytest.param(d, id=d.name, marks=() if d in fast.values() else pytest.mark.slow) for d in defs]


def test_dataset_loads_cleanly():
    ds = dataset()
    assert not ds.problems, "dataset problems:\n" + "\n".join(map(str, ds.problems))
    assert ds.select(op_type="kda"), "no kda definitions in the dataset"


@pytest.mark.parametrize("d", all_definitions())
def test_smoke_workload_is_deterministic(d):
    smoke = smoke_workloads(d)
    assert smoke, f"{d.name} has no smoke workload"
    w = min(smoke, key=lambda w: workload_size(d, w))
    first = run_reference(d, inputs_of(d, w, DEVICE))
    check_output_specs(d, w, first)
    for name, t in first.items():
        assert bool(torch.isfinite(t).all()), f"{d.name}: output {name} has non-finite values on workload {w.uuid}"
    second = run_reference(d, inputs_of(d, w, DEVICE))
    for name, t in first.items():
        assert_bits_equal(second[name], t, f"{d.name} {name}: second run with the same seed")
