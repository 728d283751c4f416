"""The coverage matrix: every cell a definition claims is exercised by some reference test, and the fast
tier alone covers the cells the dataset claims."""

from __future__ import annotations

import coverage_cells as cc
from conftest import dataset


def kda_definitions():
    return dataset().select(op_type="kda")


def test_every_claimed_cell_is_covered():
    rows = cc.coverage_rows(kda_definitions())
    assert rows, "no coverage rows: no definitions?"
    missing = [f"{r.definition}: {r.axis}={r.value} (family {r.family})" for r in rows if not r.covered]
    assert not missing, "cells claimed by definitions that no test in tests/references covers:\n" + "\n".join(missing)


def test_declarations_are_well_formed():
    decls = cc.declarations()
    assert decls, "no @covers declarations found"
    families = {cc.family_of(d) for d in kda_definitions()}
    for x in decls:
        assert x.family in families | {"prefill", "forward", "decode", "mtp", "backward", "gate"}, x
        for axis, values in x.cells.items():
            assert axis in cc.AXES and values <= set(cc.AXES[axis]), f"{x.test}: {axis}={values}"


def test_fast_tier_covers_what_ci_needs():
    """Dense and varlen, a backward, an in-op gate, GVA, K != V and both state layouts, whenever the
    dataset has them, by tests that run in the default (fast) tier."""
    rows = cc.coverage_rows(kda_definitions())
    claimed = {(r.axis, r.value) for r in rows}
    covered = {(r.axis, r.value) for r in rows if any(tier == "fast" for _, tier in r.tests)}
    needed = [("batch", "dense"), ("batch", "varlen"), ("direction", "backward"), ("gate", "safe"),
              ("gate", "unbounded"), ("gva", "on"), ("kv_dims", "differ"), ("state_layout", "kv"),
              ("state_layout", "vk")]
    lacking = [c for c in needed if c in claimed and c not in covered]
    assert not lacking, f"the fast tier does not cover {lacking}"


def test_claims_follow_tags_and_shapes():
    """The matrix reads tags; the shapes must agree with them (a [V, K] state is tagged vk)."""
    for d in kda_definitions():
        layout = d.tag("state_layout")
        state = next((d.inputs[n] for n in ("initial_state", "state_pool") if n in d.inputs), None)
        if layout is None or state is None:
            continue
        last_two = state.shape[-2:]
        want = ["head_dim_k", "head_dim_v"] if layout == "kv" else ["head_dim_v", "head_dim_k"]
        assert last_two == want, f"{d.name}: tag state_layout:{layout} but state shape {state.shape}"


def test_render_text_lists_every_row():
    rows = cc.coverage_rows(kda_definitions())
    text = cc.render_text(rows)
    assert len(text.splitlines()) == len(rows)
    assert "test_ref_prefill.py::test_matches_ground_truth [fast]" in text


def test_guard_reports_unexercised_cells():
    """The run-time guard's rule: a declared axis whose claimed value the run did not exercise is missing."""
    d = next(d for d in kda_definitions() if d.inputs.get("initial_state") is not None
             and d.inputs["initial_state"].optional)
    declared = {"initial_state": {"given", "absent"}, "gva": {"on", "off"}}
    claimed_gva = cc.claimed_cells(d)["gva"]
    observed = {"initial_state": {"given"}, "gva": set(claimed_gva)}
    assert cc.missing_cells(d, declared, observed) == ["initial_state=absent"]
    observed["initial_state"].add("absent")
    assert cc.missing_cells(d, declared, observed) == []


def test_loads_by_path_outside_pytest():
    """How `kda-trace coverage` would use it: load the file by path and build the rows."""
    module = cc.load_module()
    assert module is not cc and module.__file__ == cc.__file__
    rows = module.coverage_rows(kda_definitions())
    assert rows and all(r.covered for r in rows)
