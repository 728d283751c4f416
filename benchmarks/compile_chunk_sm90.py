"""Compile the chunked forward's kernels (kernels/chunk.py) for sm_90 without a GPU, with the default launch
settings and with each speed variant of chunk.LAUNCH, and print ptxas's register / spill report per kernel,
with the programs per SM its registers allow and its shared memory.

    python benchmarks/compile_chunk_sm90.py [--heads N] [--precomputed] [--only gate,wu,...] [KEY=VALUE ...]

KEY=VALUE: launch settings of chunk.LAUNCH (as bench_chunk.py --ab takes them), all applied together; none: the
defaults.
--only: compile only these kernels (gate, intra, solve, wu, state, output). --heads: the number of (sequence,
head) pairs (default 96; it picks the state pass's V-tile and stages, e.g. 8 for 8 heads x 131072). The shape
is the K3 safe-gate one of bench_chunk.py (96 heads, K = V = 128, safe gate, L2 norm in the kernel, beta as a
probability, initial and final state); --precomputed: its "pre" shapes instead (a precomputed gate, no L2 norm in the
op: kda_chunk's choices for them, e.g. --heads 32 for 32 heads x 16384). Catches what the interpreter accepts but the compiler refuses; a spill
here costs time on the GPU. Run it without TRITON_INTERPRET. Exit 1 on a failure.
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from bench_chunk import parse_launch  # noqa: E402
from compile_sm90 import compile_kernel, ptxas_report  # noqa: E402

from kda_trace.kernels import chunk  # noqa: E402

H = HV = 96
K = V = 128
GATE = "safe"  # or "precomputed" (--precomputed: bench_chunk.py's "pre" shapes, no L2 norm in the op)
# each kernel's register cap setting in chunk.LAUNCH, by the first word of its name in `kernels` (the split state
# pass's "state 5a" and "state 5b" launch uncapped)
CAP_KEYS = {"gate": "gate_maxnreg", "intra": "intra_maxnreg", "solve": "solve_maxnreg", "wu": "wu_maxnreg",
            "state": "state_maxnreg", "output": "out_maxnreg"}


def residency(report: list[str], warps: int, kernel) -> str:
    """Programs of this kernel that an sm_90 SM can hold by its registers (each of the 4 sub-partitions has 16384,
    given to a warp in units of 256; the rule Nsight Compute's "Block Limit Registers" reproduced in the forty-first
    session), and its shared memory per program (the SM has at most 228 KB, the driver may carve out less)."""
    found = re.search(r"Used (\d+) registers", " ".join(report))
    if not found:
        return "registers unknown"
    regs = int(found.group(1))
    per_warp = -(-regs * 32 // 256) * 256
    programs = (16384 // per_warp) * 4 // warps
    return f"{programs} programs per SM by registers, {kernel.metadata.shared / 1024:.1f} KB shared each"


def kernels(launch: dict):
    """(name, kernel, signature, constexprs, warps, stages) of one forward call with these launch settings."""
    L = launch
    exp2 = L["exp2"]
    l2norm = GATE == "safe"  # bench_chunk.py's shapes: the L2 norm in the op with the safe gate only
    l2_in_intra = l2norm and L["l2_in_intra"]
    ptr = lambda t, *names: {n: f"*{t}" for n in names}  # noqa: E731
    tables = {"cu_seqlens": "*i64", "chunk_indices": "*i32"}
    common = dict(H=H, HV=HV, K=K, BT=chunk.BT, INTERPRET=False)
    out = []
    # with gate_in_intra the intra program does kernel 1's work
    gate_fused = bool(L["intra_one_launch"]) and chunk._gate_in_intra(L["gate_in_intra"], GATE)
    gate_code = chunk.GATE_CODES[GATE]
    sig = {**ptr("bf16", "g", "q", "k"), **ptr("fp32", "A_log", "dt_bias", "G", "rq", "rk"), **tables,
           "lower_bound": "fp32"}
    if not gate_fused:
        out.append(("gate", chunk._gate_cumsum_kernel, sig,
                    dict(H=H, HV=HV, K=K, BT=chunk.BT, BK=min(L["gate_bk"], 64), GATE=gate_code,
                         L2NORM=l2norm and not l2_in_intra,
                         EXP2=exp2),
                    L["gate_warps"], None))
    qg_raw = bool(L["qg_in_intra"])
    sig = {**ptr("bf16", "q", "k", "beta", "Aqk", "QG", "KB", "KG"), **ptr("fp32", "G", "rq", "rk", "Akk", "Ps", "Qs"),
           **tables, "scale": "fp32"}
    kg_here = chunk._kg_in_intra(L["kg_in_intra"], l2_in_intra)
    one_anchor, check_range = chunk._intra_anchors(L["intra_one_anchor"], GATE, -5.0)
    capped = chunk._intra_cap(one_anchor, check_range) > 0  # `_off_tile`'s default follows the default cap
    intra = dict(common, BC=chunk.BC, BK=L["intra_bk"], BETA=0, L2NORM=l2norm, L2_HERE=l2_in_intra, QG_HERE=qg_raw,
                 MAX_EXP=chunk.MAX_EXP, CHECK_RANGE=check_range, EXP2=exp2, SAVE=False, KG_HERE=kg_here,
                 STREAM=bool(L["intra_stream"]), ONE_ANCHOR=one_anchor)
    if L["intra_one_launch"]:
        gate_here = dict(GATE_HERE=gate_fused, GATE=gate_code, BKG=min(L["gate_bk"], 64),
                         L2_IN_GATE=l2norm and not l2_in_intra,
                         BJ3=chunk._off_tile(3, L["intra_off_tail"], capped),
                         DISCARD_G=chunk._discard_g(L["discard_g"], kg_here and qg_raw, K, "cuda", False))
        sig_chunk = {**sig, "g": "*bf16", **ptr("fp32", "A_log", "dt_bias"), "lower_bound": "fp32"}
        out.append(("intra all blocks", chunk._intra_chunk_kernel, sig_chunk, dict(intra, **gate_here),
                    L["intra_warps"], L["intra_stages"]))
    else:
        for block in range(chunk.BT // chunk.BC):
            out.append((f"intra I={block}", chunk._intra_kernel, sig,
                        dict(intra, I=block, BJ=chunk._off_tile(block, L["intra_off_tail"], capped)),
                        L["intra_warps"], L["intra_stages"]))
    out.append(("solve", chunk._solve_kernel, {"Akk": "*fp32", "beta": "*bf16", "Xs": "*bf16", "Xf": "*fp32", **tables},
                dict(HV=HV, BT=chunk.BT, BC=chunk.BC, BETA=0, INTERPRET=False, SAVE=False, STORE_XS=True,
                     **chunk._solve_precisions(L, keep=False)),
                L["solve_warps"], None))
    sig = {**ptr("bf16", "q", "k", "v", "beta", "Xs", "W", "U", "QG", "KG", "KB"), **ptr("fp32", "G", "rq", "rk", "Xf"),
           **tables, "scale": "fp32"}
    out.append(("wu", chunk._wu_kernel, sig,
                dict(common, V=V, BK=L["wu_bk"], BV=L["wu_bv"], BETA=0, L2NORM=l2norm, QG_DONE=qg_raw,
                     KG_DONE=kg_here, EXP2=exp2),
                chunk._wu_warps(V), L["wu_stages"]))
    saved = dict(chunk.LAUNCH)
    chunk.LAUNCH.update(L)
    BV, stages, fused = chunk._state_launch(HV, K, V)
    split = bool(chunk._split_launch(HV, chunk.SPLIT_MIN_CHUNKS, K))  # as for one long sequence of HV heads
    chunk.LAUNCH.update(saved)
    sig = {**ptr("bf16", "W", "U", "KG", "h", "v_new", "QG", "Aqk", "o"),
           **ptr("fp32", "G", "h0", "ht", "hs", "S0", "rq"), "scale": "fp32",
           "cu_seqlens": "*i64", "chunk_offsets": "*i64", "seg_info": "*i64"}
    out.append(("state", chunk._state_kernel, sig,
                dict(HV=HV, K=K, V=V, BT=chunk.BT, BK=K, BV=BV, STATE_VK=False, USE_H0=True, STORE_HT=True,
                     STORE_HS=False, OUT=fused, SPLIT=split, QG_RAW=qg_raw, L2NORM=l2norm, EXP2=exp2,
                     STORE_VN=not fused, INTERPRET=False,
                     PREFETCH=chunk._state_prefetch(L["state_prefetch"], fused)),
                L["state_warps"], stages))
    if split:
        sig = {**ptr("bf16", "W", "U", "KG"), **ptr("fp32", "G", "R", "M", "h0"), "cu_seqlens": "*i64",
               "seg_info": "*i64"}
        out.append(("state 5a", chunk._segment_affine_kernel, sig,
                    dict(HV=HV, K=K, V=V, BT=chunk.BT, BK=K, BV=min(L["split_bv"], K), STATE_VK=False, USE_H0=True,
                         EXP2=exp2, INTERPRET=False),
                    L["state_warps"], 1 if L["split_bv"] > 16 else 3))
        sig = {**ptr("fp32", "R", "M", "S0", "h0"), "seg_offsets": "*i64"}
        out.append(("state 5b", chunk._segment_scan_kernel, sig,
                    dict(HV=HV, K=K, V=V, BK=K, BV=BV, STATE_VK=False, USE_H0=True), L["scan_warps"], None))
    sig = {**ptr("bf16", "QG", "Aqk", "h", "v_new", "o"), "rq": "*fp32", "scale": "fp32", **tables}
    out.append(("output", chunk._output_kernel, sig,
                dict(HV=HV, K=K, V=V, BT=chunk.BT, BK=64, BV=min(L["out_bv"], V), QG_RAW=qg_raw, L2NORM=l2norm,
                     INTERPRET=False), L["out_warps"], None))
    return out


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the kernels must be compiled")
        return 1
    asked = sys.argv[1:]
    global H, HV, GATE
    only = None
    while asked[:1] in (["--only"], ["--heads"], ["--precomputed"]):
        if asked[0] == "--precomputed":
            GATE = "precomputed"
            asked = asked[1:]
            continue
        if asked[0] == "--only":
            only = asked[1].split(",")
        else:
            H = HV = int(asked[1])
        asked = asked[2:]
    changes = parse_launch(",".join(asked), "compile_chunk_sm90.py") if asked else {}  # exits on an unknown key
    failed = False
    print(f"\n{changes or 'defaults'}:")
    launch = {**chunk.LAUNCH, **changes}
    for name, fn, sig, consts, warps, stages in kernels(launch):
        if only and name.split()[0] not in only:
            continue
        try:
            cap = None if name.startswith("state 5") else launch[CAP_KEYS[name.split()[0]]]
            if name == "wu" and cap is None:  # the forward's choice (`chunk._wu_cap`; no save_states here)
                cap = chunk._wu_cap(consts["KG_DONE"], False)
            if name == "solve" and cap is None:  # `chunk._solve_cap` (the kept matrices' solve is not compiled here)
                cap = chunk._solve_cap(False)
            if name.startswith("intra") and cap is None:  # `chunk._intra_cap`
                cap = chunk._intra_cap(consts["ONE_ANCHOR"], consts["CHECK_RANGE"])
            kernel = compile_kernel(fn, sig, consts, warps, stages, cap)
        except Exception as e:  # noqa: BLE001 -- report every kernel
            print(f"  {name}: FAILED {type(e).__name__}: {str(e)[:400]}")
            failed = True
            continue
        report = ptxas_report(kernel)
        print(f"  {name} (warps {warps}): " + "; ".join(report) + f"; {residency(report, warps, kernel)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
