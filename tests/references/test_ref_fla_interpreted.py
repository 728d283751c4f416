"""fla's Triton fused_recurrent_kda, run by Triton's interpreter on the CPU, against one definition per
family (slow tier; with a GPU, the test_fla_triton tests of each family file run the same comparison at
scale, chunk_kda included). Inputs are the workload's values upcast to float32, judged with
TOLERANCES["fp32"]: the interpreter stores bf16 by truncation, not rounding, so bf16 outputs from it
would carry an error of its own."""

from __future__ import annotations

import pytest
from conftest import check_against_fla, custom_workload, definitions
from coverage_cells import covers, representative

from kda_trace.platform import has_cuda

WORKLOADS = {
    "prefill": ({"total_seq_len": 7, "num_seqs": 3, "len_cu_seqlens": 4}, [3, 1, 3]),
    "forward": ({"batch_size": 1, "seq_len": 3}, None),
    "decode": ({"batch_size": 2, "pool_size": 4}, None),
    "mtp": ({"batch_size": 2, "num_tokens": 3, "pool_size": 4}, None),
}


def params():
    out = []
    for family in WORKLOADS:
        defs = definitions(family)
        # the representative, plus (forward) every GVA or K != V definition
        chosen = {representative(defs).name: representative(defs)}
        chosen.update({d.name: d for d in defs if family == "forward"})
        out += [pytest.param(family, d, id=d.name) for d in chosen.values()]
    return out


@pytest.mark.slow
@covers("prefill", batch=("varlen",), gate=("unbounded",), beta=("logits",), qk_norm=("l2",), state_layout=("vk",))
@covers("forward", batch=("dense",), gate=("precomputed",), gva=("on", "off"), kv_dims=("equal", "differ"))
@covers("decode", batch=("pool",), beta=("logits",), qk_norm=("l2",), state_layout=("vk",))
@covers("mtp", batch=("pool",), beta=("logits",), qk_norm=("l2",), state_layout=("vk",))
@pytest.mark.parametrize("family,d", params())
def test_fused_recurrent_interpreted(family, d):
    if has_cuda():
        pytest.skip("a CUDA device is present: the gpu tier runs fla's kernels compiled")
    axes, seq_lens = WORKLOADS[family]
    check_against_fla(d, custom_workload(d, axes, seq_lens=seq_lens), "recurrent", "cpu", fp32=True)
