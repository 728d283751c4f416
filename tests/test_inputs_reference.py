"""Seeded inputs and the reference compiler's safety check."""

import pytest
import torch

from kda_trace.inputs import InputError, make_inputs
from kda_trace.reference import ReferenceError, compile_reference
from kda_trace.schema import Definition, Workload


def _definition(**inputs):
    return Definition(
        name="toy", op_type="toy",
        axes={"n": {"type": "var"}, "d": {"type": "const", "value": 8}, "p": {"type": "var"},
              "s": {"type": "var"}, "t": {"type": "var"}},
        inputs=inputs or {
            "x": {"shape": ["n", "d"], "dtype": "bfloat16", "generator": {"kind": "l2_normalized"}},
            "g": {"shape": ["n", "d"], "dtype": "float32", "generator": {"kind": "logsigmoid", "lower_bound": -5}},
            "beta": {"shape": ["n"], "dtype": "float32", "generator": {"kind": "sigmoid"}},
            "a": {"shape": ["d"], "dtype": "float32", "generator": {"kind": "uniform", "low": 1, "high": 2}},
            "h0": {"shape": ["n", "d"], "dtype": "float32", "optional": True},
            "cu": {"shape": ["s"], "dtype": "int64", "generator": {"kind": "cu_seqlens", "total_axis": "t"}},
            "idx": {"shape": ["n"], "dtype": "int64", "generator": {"kind": "slot_indices", "pool_axis": "p"}},
            "scale": {"shape": None, "dtype": "float32"},
        },
        outputs={"y": {"shape": ["n", "d"], "dtype": "float32"}},
        reference="def run(**kw):\n    return kw['x']\n",
    )


def _workload(uuid="w1", h0=None):
    inputs = {k: {"type": "random"} for k in ("x", "g", "beta", "a", "cu", "idx")}
    inputs["h0"] = h0 or {"type": "random"}
    inputs["scale"] = {"type": "scalar", "value": 0.25}
    return Workload(uuid=uuid, axes={"n": 5, "p": 9, "s": 4, "t": 10}, inputs=inputs, seq_lens=[1, 6, 3])


def test_generators_respect_their_ranges_and_dtypes():
    x = make_inputs(_definition(), _workload())
    assert x["x"].dtype == torch.bfloat16 and x["x"].shape == (5, 8)
    assert torch.allclose(x["x"].float().norm(dim=-1), torch.ones(5), atol=1e-2)
    assert (x["g"] <= 0).all() and (x["g"] >= -5).all()
    assert ((x["beta"] > 0) & (x["beta"] < 1)).all()
    assert ((x["a"] >= 1) & (x["a"] < 2)).all()
    assert x["cu"].tolist() == [0, 1, 7, 10]
    assert len(set(x["idx"].tolist())) == 5 and max(x["idx"].tolist()) < 9
    assert x["scale"] == 0.25


def test_logsigmoid_and_sigmoid_take_the_mean_and_std_of_their_normal():
    """logsigmoid(N(mean, std)) and sigmoid(N(mean, std)): the same seed and draws, mapped."""
    base = make_inputs(_definition(), _workload(), seed=3)
    d = _definition()
    d.inputs["g"].generator.mean, d.inputs["g"].generator.std = -4.0, 0.5
    d.inputs["beta"].generator.mean, d.inputs["beta"].generator.std = 3.0, 2.0
    x = make_inputs(d, _workload(), seed=3)
    z = torch.logit(base["beta"].double())  # the standard normal drawn for beta
    assert torch.allclose(x["beta"].double(), torch.sigmoid(z * 2.0 + 3.0), atol=1e-6)
    assert (x["g"] < base["g"].clamp(max=-0.01)).float().mean() > 0.9  # mean -4: stronger decays
    assert (x["g"] >= -5).all()  # lower_bound still clamps


def test_same_seed_same_bits_other_seed_other_values():
    a = make_inputs(_definition(), _workload(), seed=1)
    b = make_inputs(_definition(), _workload(), seed=1)
    c = make_inputs(_definition(), _workload(), seed=2)
    for k in ("x", "g", "beta", "h0", "idx"):
        assert torch.equal(a[k], b[k]), k
    assert not torch.equal(a["g"], c["g"])
    # inputs are seeded per name: another workload uuid gives other values
    d = make_inputs(_definition(), _workload(uuid="w2"), seed=1)
    assert not torch.equal(a["g"], d["g"])


def test_optional_input_can_be_none():
    x = make_inputs(_definition(), _workload(h0={"type": "random", "generator": {"kind": "none"}}))
    assert x["h0"] is None


def test_bad_seq_lens_name_the_workload():
    w = _workload()
    w.seq_lens = [1, 2, 3]  # sums to 6, axis t is 10
    with pytest.raises(InputError, match="workload w1 of toy: input 'cu': seq_lens sum to 6"):
        make_inputs(_definition(), w)


@pytest.mark.parametrize("source,words", [
    ("import os\ndef run(x):\n    return x\n", "import of 'os'"),
    ("from subprocess import run as r\ndef run(x):\n    return x\n", "import from 'subprocess'"),
    ("def run(x):\n    return x.__class__\n", "dunder attribute '__class__'"),
    ("def run(x):\n    return __import__('os')\n", "'__import__'"),
    ("def run(x):\n    return eval('1')\n", "'eval'"),
    ("def run(x):\n    return open('/etc/passwd')\n", "'open'"),
])
def test_unsafe_reference_is_refused_unless_trusted(source, words):
    with pytest.raises(ReferenceError, match="refused") as e:
        compile_reference(source, "toy")
    assert words in str(e.value) and "--trust-code" in str(e.value)


def test_trusted_reference_runs_and_safe_one_compiles():
    run = compile_reference("import math\nimport torch\ndef run(x):\n    return x * math.pi\n", "toy")
    assert run(torch.ones(1)).item() == pytest.approx(3.14159, rel=1e-5)
    run = compile_reference("import os\ndef run(x):\n    return os.sep\n", "toy", trust_code=True)
    assert run(1) == "/"


def test_reference_without_run_or_failing_at_load():
    with pytest.raises(ReferenceError, match="no top-level function 'run'"):
        compile_reference("x = 1\n", "toy")
    with pytest.raises(ReferenceError, match="failed to load: ZeroDivisionError"):
        compile_reference("x = 1 / 0\ndef run():\n    pass\n", "toy")
