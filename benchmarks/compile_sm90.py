"""Compile our training kernels (kernels/backward.py, kernels/gate.py) for sm_90 without a GPU: Triton's front
end, its NVIDIA passes and ptxas. Catches what the interpreter accepts but the compiler refuses, and prints
ptxas's register and spill report for the backward's launch settings.

    python benchmarks/compile_sm90.py [--spills] [--chunked]
    python benchmarks/compile_sm90.py --forward [--heads N] [--precomputed | --layer] [--only gate,...] [KEY=VALUE ...]
    python benchmarks/compile_sm90.py --fused-decode

--chunked: only the chunked mode's kernels (backward.LAUNCH["mode"] = "chunked": kernels/backward_chunked.py's
prep and pass, and the split local kernels), a few minutes instead of the whole list.

--forward: the chunked forward's kernels (kernels/chunk.py) instead, at the launch defaults or with the KEY=VALUE
settings of chunk.LAUNCH (as bench_chunk.py --ab takes them), each kernel's ptxas register / spill report with the
programs per SM its registers allow and its shared memory. The shape is bench_chunk.py's K3 one (96 heads, K = V =
128, safe gate, L2 norm in the kernel, beta a probability, initial and final state); --heads sets the (sequence,
head) pairs (it picks the state pass's V-tile and stages), --precomputed the "pre" shapes (a precomputed gate, no L2
norm in the op), --layer fla's layer configuration (the unbounded gate and the L2 norm in the op: the intra kernel
with its range check, as bench_backward.py's "layer" shapes run it), --only a subset (gate, intra, solve, wu, state,
output).

Run it without TRITON_INTERPRET (the kernels must be compiled, not interpreted). Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from kda_trace.kernels import backward, backward_chunked, chunk, gate  # noqa: E402
from kda_trace.kernels.common import register_cap  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


ALIGNED = True  # pointer arguments 16-byte aligned (--unaligned: no hint)


def compile_kernel(fn, sig: dict, consts: dict, warps: int, stages: int | None = None, maxnreg: int | None = None):
    """Compile fn for sm_90. Pointer arguments carry the 16-byte divisibility hint that the JIT gives every
    torch tensor (their data pointers are aligned): without it Triton cannot vectorise loads or prove a
    base pointer's alignment, and ptxas reports registers and spills that a real launch does not have."""
    consts = {n: c for n, c in consts.items() if n in fn.arg_names}
    # constexprs with a default in the kernel's signature take it unless given
    consts.update({p.name: p.default for p in fn.params
                   if p.name not in consts and p.name not in sig and p.default is not inspect.Parameter.empty})
    sig = {n: t for n, t in sig.items() if n in fn.arg_names}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
    missing = [n for n in fn.arg_names if n not in sig]
    if missing:
        raise SystemExit(f"{fn.__name__}: no type or value given for {', '.join(missing)}")
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
             if ALIGNED and t.startswith("*")}
    options = {"num_warps": warps} if stages is None else {"num_warps": warps, "num_stages": stages}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=TARGET, options=options)


def backward_signatures(acc: str) -> dict:
    """Argument types of the backward's kernels: bf16 inputs with fp32 buffers, fp64 inputs with fp64 buffers (the
    backward computes in float64 only where every input is float64; bf16 inputs with fp64 buffers make Triton 3.6
    fail on float64 products that never run)."""
    inputs = {n: "*bf16" if acc == "fp32" else f"*{acc}" for n in ("q", "k", "v", "beta", "do")}
    tables = dict(cu_seqlens="*i64", chunk_indices="*i32")
    bufs = lambda *names: {n: f"*{acc}" for n in names}  # noqa: E731
    # W and Kt as the prep stores them for a bf16 pass (LAUNCH["chunked_pass_bf16_copies"])
    w_kt = {n: "*bf16" if acc == "fp32" else f"*{acc}" for n in ("W", "Kt")}
    return {
        "maps": {**inputs, **bufs("g", "amap", "states", "dstates", "dh0"), **tables, "p_scale": f"*{acc}"},
        "pass": {**bufs("amap", "states", "dstates", "h0", "dht", "dh0"), "cu_seqlens": "*i64",
                 "chunk_offsets": "*i64"},
        "local": {**inputs, **bufs("g", "states", "dstates", "dq", "dk", "dv", "dg", "dbeta", "scratch"), **tables,
                  "p_scale": f"*{acc}", "n_work": "i64"},
        "forward": {**inputs, **bufs("g", "h0", "o", "ht"), "cu_seqlens": "*i64", "p_scale": f"*{acc}"},
        # the chunked mode (kernels/backward_chunked.py)
        "prep_pairs": {**inputs, **bufs("g", "Pb", "Aqk", "gamma"), **tables, "n_work": "i64"},
        "prep_solve": {**inputs, **bufs("Pb", "Xb"), **tables},
        "prep_operands": {**inputs, **bufs("g", "Xb", "Aqk", "U", "Qt", "dO2", "gamma"), **w_kt,
                          **bufs("rq", "rk"), **tables, "p_scale": f"*{acc}"},
        "local_vk": {**inputs, **bufs("g", "Vn", "dVn", "Xb", "Pb", "states", "dstates", "dv", "dQt", "dKt", "Yk",
                                      "dgamma", "dbeta", "d1", "M1", "M2", "rk"), **tables, "p_scale": f"*{acc}"},
        "local_k": {**inputs, **bufs("g", "Yk", "d1", "dQt", "dKt", "dgamma", "dq", "dk", "dg", "R1", "R2", "R3",
                                     "rq", "rk", "Bal"), **tables, "p_scale": f"*{acc}"},
        "local_sums": {**inputs, **bufs("g", "M1", "M2", "R1", "R2", "R3", "rq", "rk", "Bal"), **tables,
                       "flags": "*i8", "n_work": "i64"},
        "chunked_pass": {**bufs("U", "Qt", "gamma", "dO2", "states", "dstates", "h0", "dht", "dh0"), **w_kt,
                         "do": inputs["do"], "cu_seqlens": "*i64", "chunk_offsets": "*i64"},
    }


def ptxas_report(kernel) -> list[str]:
    """ptxas -v lines about registers and spills (the newest ptxas Triton ships, which reads its PTX)."""
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    for exe in ("ptxas-blackwell", "ptxas"):
        path = os.path.join(bindir, exe)
        if os.path.exists(path):
            out = subprocess.run([path, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull],
                                 capture_output=True, text=True)
            if out.returncode == 0:
                return [line.strip() for line in out.stderr.splitlines() if "spill" in line or "registers" in line]
    return ["(no ptxas could read the PTX)"]


def chunked_mode(spills: bool) -> None:
    """The chunked mode's prep and pass kernels (kernels/backward_chunked.py) at their launch defaults, and the
    pass's other V-tiles / warps with --spills."""
    prec = backward.LAUNCH["chunked_precision"]
    for acc, K, V in (("fp32", 128, 128), ("fp32", 100, 60), ("fp32", 256, 64), ("fp64", 32, 32)):
        sigs = backward_signatures(acc)
        BK, BV = triton.next_power_of_2(K), triton.next_power_of_2(V)
        shared = dict(H=8, HV=16, K=K, V=V, BK=BK, CT=64, PREC="ieee" if acc == "fp64" else prec)
        # the kernels that read q and k with their norm factors: as launched (LAUNCH["qk_norm_factors"])
        norm = dict(NORM=bool(backward.LAUNCH["qk_norm_factors"]))
        solve = "ieee" if acc == "fp64" else backward_chunked.SOLVE_PRECISION.value
        # the prep: the pairs kernel per row block, the solve, the operands
        # LAUNCH["diag_blocks"]: the default, and with --spills the other form too
        anchor_forms = (True, False) if spills else (backward_chunked._anchors(backward.LAUNCH),)
        # the anchored sums at nested anchors (strong gates) and at two (no hint), as LAUNCH["diag_blocks"] gives them
        nested_forms = sorted({backward_chunked._nested(backward.LAUNCH, strong) for strong in (True, False)})
        dprec = "ieee" if acc == "fp64" else backward.LAUNCH["pairs_diag_precision"] or "bf16"
        # each kernel's register cap as launched (LAUNCH["..._maxnreg"], None: backward_chunked.default_cap); with
        # --spills at K = 128 its default tile uncapped and at 168 and 128
        torch_acc = torch.float32 if acc == "fp32" else torch.float64

        def caps(key, anchors=True, K=K, torch_acc=torch_acc):
            if spills and K == 128:
                return (None, 168, 128)
            default = backward_chunked.default_cap(key, torch_acc, anchors)
            return (register_cap(backward.LAUNCH[key], default).get("maxnreg"),)  # as the launches resolve it
        for bi, anchors, cap in itertools.product(range(4), anchor_forms, caps("prep_pairs_maxnreg")):
            k = compile_kernel(backward_chunked._prep_pairs_kernel, sigs["prep_pairs"],
                               dict(shared, BI=bi, ANCHORS=anchors, DPREC=dprec), backward.LAUNCH["prep_pairs_warps"] or 4,
                               maxnreg=cap)
            extra = ptxas_report(k) if spills and acc == "fp32" else []
            print(f"chunked split prep pairs {acc} K={K} V={V} BI={bi} anchors={anchors} warps=4 maxnreg={cap}: ok",
                  *extra)
        k = compile_kernel(backward_chunked._prep_solve_kernel, sigs["prep_solve"], dict(shared, SOLVE_PREC=solve),
                           backward.LAUNCH["prep_solve_warps"] or 4)
        extra = ptxas_report(k) if spills and acc == "fp32" else []
        print(f"chunked split prep solve {acc} K={K} V={V} warps=4: ok", *extra)
        for cap in caps("prep_operands_maxnreg"):
            k = compile_kernel(backward_chunked._prep_operands_kernel, sigs["prep_operands"],
                               dict(shared, **norm, BKT=min(BK, 64), BVT=min(BV, 64), WITH_U=True, WITH_WK=True,
                                    INTERPRET=False),
                               backward.LAUNCH["prep_operands_warps"] or 4, maxnreg=cap)
            extra = ptxas_report(k) if spills and acc == "fp32" else []
            print(f"chunked split prep operands {acc} K={K} V={V} warps=4 maxnreg={cap}: ok", *extra)
        pass_prec = "ieee" if acc == "fp64" else backward.LAUNCH["chunked_pass_precision"] or "bf16"
        src_prec = backward.LAUNCH["chunked_pass_source_precision"] or ("tf32" if pass_prec == "bf16" else pass_prec)
        tiles = ((32, 4, 1), (16, 4, 1), (64, 4, 1), (32, 8, 1), (32, 4, 3)) if spills and K == 128 else ((32, 4, 1),)
        tiles = [(*t, None) for t in tiles] + [(32, 4, 1, cap) for cap in caps("chunked_pass_maxnreg") if cap]
        for bv, warps, stages, cap in tiles:
            c = dict(shared, BV=min(bv, BV), USE_H0=True, USE_DHT=True, PREC=pass_prec,
                     PREC_SRC="ieee" if acc == "fp64" else src_prec,
                     PARALLEL=backward.LAUNCH["chunked_pass_parallel"], STORE_VN=True, FORWARD=True)
            k = compile_kernel(backward_chunked._state_pass_kernel, sigs["chunked_pass"], c, warps, stages, cap)
            extra = ptxas_report(k) if spills and acc == "fp32" else []
            print(f"chunked pass {acc} K={K} V={V} BV={bv} warps={warps} stages={stages} maxnreg={cap}: ok",
                  f"shared memory {k.metadata.shared} B", *extra)
        # the reverse recursion alone (the forward's states and V_new kept: LAUNCH["keep_states"])
        c = dict(shared, BV=min(32, BV), USE_H0=True, USE_DHT=True, PREC=pass_prec,
                 PREC_SRC="ieee" if acc == "fp64" else src_prec, PARALLEL=True, STORE_VN=True, FORWARD=False)
        k = compile_kernel(backward_chunked._state_pass_kernel, sigs["chunked_pass"], c, 4, 1)
        extra = ptxas_report(k) if spills and acc == "fp32" else []
        print(f"chunked pass (reverse only) {acc} K={K} V={V} BV=32 warps=4 stages=1: ok",
              f"shared memory {k.metadata.shared} B", *extra)
        split_prec = "ieee" if acc == "fp64" else backward.LAUNCH["split_precision"]
        # 3a per (chunk, value head): the GPU default (K-tiles of 32, V-tiles of 32, 4 warps; 32 wide),
        # others with --spills
        vk_tiles = ((32, 32, 4), (64, 64, 8), (32, 64, 8), (32, 64, 4), (64, 32, 8)) if spills and K == 128 else (
            (32, 32, 4),)
        vk_tiles = [(*t, None) for t in vk_tiles[1:]] + [(*vk_tiles[0], cap) for cap in caps("split_vk_maxnreg")]
        for bkt, bvt, warps, cap in vk_tiles:
            c = dict(shared, **norm, BKT=bkt, BVT=bvt, PREC=split_prec, INTERPRET=False)
            k = compile_kernel(backward_chunked._local_vk_kernel, sigs["local_vk"], c, warps, maxnreg=cap)
            extra = ptxas_report(k) if spills and acc == "fp32" else []
            print(f"chunked split local_vk {acc} K={K} V={V} BKT={bkt} BVT={bvt} warps={warps} maxnreg={cap}: ok",
                  *extra)
        # 3c per K-tile: the GPU default (16 columns, 8 warps), and 32 / 4 (an earlier default)
        # and 64 / 8 with --spills
        bkts = ((64, 8), (32, 4)) if spills and K == 128 else ()
        bkts = [(*t, None) for t in bkts] + [(16, 8, cap) for cap in caps("split_k_maxnreg")]
        for bkt, warps, cap in bkts:
            c = dict(shared, **norm, BKT=bkt, INTERPRET=False, BALANCE=True)
            k = compile_kernel(backward_chunked._local_k_kernel, sigs["local_k"], c, warps, maxnreg=cap)
            extra = ptxas_report(k) if spills and acc == "fp32" else []
            print(f"chunked split local_k {acc} K={K} V={V} BKT={bkt} warps={warps} maxnreg={cap}: ok", *extra)
        # 3b's sums as launched (LAUNCH["sums_one_launch"]: every row block in one kernel on 2 warps, anchored
        # diagonal blocks only; else one per row block on 4), and with --spills the other way too; the one-anchor
        # form (a known gate bound) too with --spills or where it is on
        forms = [(anchors, False) for anchors in anchor_forms]
        forms += [(True, True)] if spills or backward.LAUNCH["sums_one_anchor"] else []
        one_launch = bool(backward.LAUNCH["sums_one_launch"])
        launches = [(True, 0)] if one_launch or spills else []
        launches += [(False, bi) for bi in range(4)] if spills or not one_launch else []
        sums = [(all_blocks, bi, anchors, one, cap) for (all_blocks, bi), (anchors, one) in
                itertools.product(launches, forms) for cap in caps("sums_maxnreg", anchors)
                if anchors or not all_blocks]  # (the element-wise form runs one launch per block)
        # the fall-back in a pass of its own (LAUNCH["sums_steps_pass"]: two anchors, one launch) too, with --spills
        steps_apart = spills or (backward.LAUNCH["sums_steps_pass"] and False in nested_forms)
        for all_blocks, bi, anchors, one, cap in sums:
            variants = [(False, True)]  # (nested, steps)
            if anchors and not one:
                variants = [(True, True)] if True in nested_forms else []
                if False in nested_forms:
                    variants += [(False, s) for s in ((True, False) if steps_apart and all_blocks else (True,))]
            for nested, steps in variants:
                c = dict(shared, **norm, BKS=min(BK, 32), BI=bi, PREC=split_prec, ANCHORS=anchors, ONE_ANCHOR=one,
                         ALL_BLOCKS=all_blocks, STEPS=steps, NESTED=nested,
                         BALANCE=anchors and backward_chunked._balance(backward.LAUNCH, -5.0 if one else None),
                         DPREC="ieee" if acc == "fp64" else backward_chunked.sums_diag_precision(backward.LAUNCH, nested))
                warps = backward.LAUNCH["sums_warps"] or (2 if all_blocks else 4)
                k = compile_kernel(backward_chunked._local_sums_kernel, sigs["local_sums"], c, warps, maxnreg=cap)
                extra = ptxas_report(k) if spills and acc == "fp32" else []
                blocks = "all blocks" if all_blocks else f"BI={bi}"
                print(f"chunked split local_sums {acc} K={K} V={V} BKS={min(BK, 32)} {blocks} anchors={anchors} "
                      f"one_anchor={one} nested={nested} steps={steps} warps={warps} maxnreg={cap}: ok", *extra)
        if steps_apart:
            warps = backward.LAUNCH["sums_steps_warps"] or 4
            # the steps unrolled 4 and 16 at a time too with --spills (LAUNCH["sums_steps_unroll"])
            for unroll in sorted({backward.LAUNCH["sums_steps_unroll"] or 1} | ({4, 16} if spills else set())):
                k = compile_kernel(backward_chunked._diag_steps_kernel, sigs["local_sums"],
                                   dict(H=shared["H"], HV=shared["HV"], K=K, BKS=min(BK, 32), CT=shared["CT"],
                                        UNROLL=unroll, **norm), warps)
                extra = ptxas_report(k) if spills and acc == "fp32" else []
                print(f"chunked split diag_steps {acc} K={K} BKS={min(BK, 32)} warps={warps} unroll={unroll}: ok",
                      *extra)
        if spills and K == 128 and acc == "fp32":  # 3a's K-tiles apart (LAUNCH["split_vk_ktiles"]), 4 and 8 warps
            for warps in (4, 8):
                k = compile_kernel(backward_chunked._local_kt_kernel, sigs["local_vk"],
                                   dict(shared, BKT=32, BVT=32, PREC=split_prec), warps)
                print(f"chunked split local_kt {acc} K={K} V={V} BKT=32 BVT=32 warps={warps}: ok", *ptxas_report(k))
            k = compile_kernel(backward_chunked._local_vk_kernel, sigs["local_vk"],
                               dict(shared, **norm, BKT=32, BVT=32, PREC=split_prec, INTERPRET=False, YK_GIVEN=True), 4)
            print(f"chunked split local_vk with Y_k given {acc} K={K} V={V}: ok", *ptxas_report(k))
        if spills and K == 128 and acc == "fp32":  # the kernels with the norm factors read (qk_norm_factors on)
            on = dict(shared, NORM=True, INTERPRET=False)
            for name, kernel, c, warps, key in (
                    ("prep_operands", backward_chunked._prep_operands_kernel, dict(on, BKT=64, BVT=64, WITH_U=True, WITH_WK=True), 4,
                     "prep_operands_maxnreg"),
                    ("local_vk", backward_chunked._local_vk_kernel, dict(on, BKT=32, BVT=32, PREC=split_prec), 4,
                     "split_vk_maxnreg"),
                    ("local_k", backward_chunked._local_k_kernel, dict(on, BKT=16), 8, "split_k_maxnreg")):
                cap = backward_chunked.default_cap(key, torch.float32) or None
                k = compile_kernel(kernel, sigs[name], c, warps, maxnreg=cap)
                print(f"chunked {name} with norm factors K={K} maxnreg={cap}: ok", *ptxas_report(k))
            c = dict(on, BKS=32, BI=0, PREC=split_prec, ANCHORS=True, ONE_ANCHOR=True, ALL_BLOCKS=True,
                     DPREC=backward_chunked.sums_diag_precision(backward.LAUNCH, False))
            k = compile_kernel(backward_chunked._local_sums_kernel, sigs["local_sums"], c, 2, maxnreg=128)
            print(f"chunked local_sums with norm factors K={K} all blocks one_anchor=True warps=2 maxnreg=128: ok",
                  *ptxas_report(k))


# each kernel's register cap setting in chunk.LAUNCH, by the first word of its name in `kernels` (the split state
# pass's "state 5a" and "state 5b" launch uncapped)
CAP_KEYS = {"gate": "gate_maxnreg", "intra": "intra_maxnreg", "solve": "solve_maxnreg", "wu": "wu_maxnreg",
            "state": "state_maxnreg", "output": "out_maxnreg"}


def residency(report: list[str], warps: int, kernel) -> str:
    """Programs of this kernel that an sm_90 SM can hold by its registers (each of the 4 sub-partitions has 16384,
    given to a warp in units of 256: the rule behind Nsight Compute's "Block Limit Registers" on an H200), and its shared memory per program (the SM has at most 228 KB, the driver may carve out less)."""
    found = re.search(r"Used (\d+) registers", " ".join(report))
    if not found:
        return "registers unknown"
    regs = int(found.group(1))
    per_warp = -(-regs * 32 // 256) * 256
    programs = (16384 // per_warp) * 4 // warps
    return f"{programs} programs per SM by registers, {kernel.metadata.shared / 1024:.1f} KB shared each"


def forward_kernels(launch: dict, heads: int, gate_kind: str):
    """(name, kernel, signature, constexprs, warps, stages) of one forward call with these launch settings."""
    H = HV = heads
    K = V = 128
    GATE = gate_kind
    L = launch
    exp2 = L["exp2"]
    l2norm = GATE != "precomputed"  # bench_chunk.py's shapes and --layer: the L2 norm in the op with a gate in it
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
                 STREAM=bool(L["intra_stream"]), ONE_ANCHOR=one_anchor,
                 PREC=chunk._tensor_core_precision(L["intra_precision"], False),
                 FALLBACK=chunk._intra_fallback(L["intra_fallback"], GATE))
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
                     KG_DONE=kg_here, EXP2=exp2, PREC=chunk._tensor_core_precision(L["wu_precision"], False)),
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


def forward_mode(heads: int, gate_kind: str, only: list[str] | None, settings: list[str]) -> bool:
    """--forward: the chunked forward's kernels (kernels/chunk.py) with these launch settings (KEY=VALUE, all applied
    together; none: the defaults); True if every kernel compiled."""
    from bench_chunk import parse_launch

    changes = parse_launch(",".join(settings), "compile_sm90.py --forward") if settings else {}
    print(f"\nforward, {heads} (sequence, head) pairs, {gate_kind} gate, {changes or 'defaults'}:")
    launch = {**chunk.LAUNCH, **changes}
    ok = True
    for name, fn, sig, consts, warps, stages in forward_kernels(launch, heads, gate_kind):
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
            ok = False
            continue
        report = ptxas_report(kernel)
        print(f"  {name} (warps {warps}): " + "; ".join(report) + f"; {residency(report, warps, kernel)}")
    return ok


FUSED_DECODE_SETTINGS = [(128, 8, 0, 0, 1), (128, 16, 0, 0, 1), (64, 4, 0, 0, 1), (64, 8, 0, 0, 1), (32, 2, 0, 0, 1),
                         (32, 4, 0, 0, 1), (32, 4, 1, 0, 1), (32, 8, 1, 0, 1), (16, 2, 0, 0, 1), (16, 2, 1, 0, 1),
                         (16, 4, 0, 0, 1), (16, 4, 1, 0, 1), (16, 4, 1, 80, 1), (16, 4, 2, 0, 1), (16, 4, 2, 80, 1),
                         (8, 4, 2, 0, 1), (32, 4, 0, 0, 4), (16, 4, 0, 0, 4), (16, 4, 1, 0, 4), (16, 4, 0, 0, 8)]
"""(block_v, num_warps, prefetch, maxnreg, split) settings of kernels/fused_decode.py's LAUNCH that
--fused-decode compiles."""


def fused_decode_mode() -> None:
    """kernels/fused_decode.py at the definitions' shape (D = 128, conv width 4), float32 and bf16 pools, both
    gates, at each (block_v, num_warps) of FUSED_DECODE_SETTINGS: ptxas's register and spill report."""
    from kda_trace.kernels import fused_decode

    for pool in ("fp32", "bf16"):
        sig = {n: "*bf16" for n in ("x", "conv_state", "g_raw", "b", "output_gate", "o")}
        sig.update({n: "*fp32" for n in ("conv_weight", "A_log", "dt_bias", "norm_weight", "partials")},
                   state_pool=f"*{pool}", state_indices="*i32", counters="*i32", scale="fp32", lower_bound="fp32", norm_eps="fp32",
                   stride_x="i64", stride_cs="i64", stride_sp="i64")
        for gate_code in (1, 2):
            for block_v, warps, prefetch, maxnreg, split in FUSED_DECODE_SETTINGS:
                consts = dict(H=12, D=128, BD=128, W=4, BW=4, GATE=gate_code, STATE_BF16=pool == "bf16", BV=block_v,
                              PREFETCH=prefetch, SPLIT=split)
                k = compile_kernel(fused_decode._fused_decode_kernel, sig, consts, warps, maxnreg=maxnreg or None)
                print(f"fused decode {pool} pool gate {gate_code} block_v={block_v} warps={warps} prefetch={prefetch} "
                      f"maxnreg={maxnreg} split={split}: ok", *ptxas_report(k))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spills", action="store_true", help="ptxas register / spill report per launch setting")
    ap.add_argument("--chunked", action="store_true", help="only the chunked mode's kernels (LAUNCH['mode'])")
    ap.add_argument("--unaligned", action="store_true", help="no 16-byte alignment hint on pointers (more "
                    "registers and spills than a real launch, where torch's data pointers are aligned)")
    ap.add_argument("--forward", action="store_true", help="the chunked forward's kernels (kernels/chunk.py) instead")
    ap.add_argument("--heads", type=int, default=96, help="--forward: (sequence, head) pairs (default 96)")
    ap.add_argument("--precomputed", action="store_true", help="--forward: a precomputed gate, no L2 norm in the op")
    ap.add_argument("--layer", action="store_true", help="--forward: the unbounded gate and the L2 norm in the op")
    ap.add_argument("--only", default=None, help="--forward: only these kernels (gate,intra,solve,wu,state,output)")
    ap.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="--forward: chunk.LAUNCH settings")
    ap.add_argument("--fused-decode", action="store_true", help="the fused decode kernel (kernels/fused_decode.py) "
                    "instead, with its ptxas report")
    a = ap.parse_args()
    global ALIGNED
    ALIGNED = not a.unaligned
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the kernels must be compiled")
        return 1
    if a.fused_decode:
        fused_decode_mode()
        return 0
    if a.forward:
        gate_kind = "precomputed" if a.precomputed else ("unbounded" if a.layer else "safe")
        return 0 if forward_mode(a.heads, gate_kind, a.only.split(",") if a.only else None, a.settings) else 1
    chunked_mode(a.spills)
    if a.chunked:
        return 0
    kernels = {"maps": backward._chunk_maps_kernel, "pass": backward._chunk_pass_kernel,
               "local": backward._local_kernel, "forward": backward._forward_exact_kernel}
    # (acc, K, V, tile, warps, seg): the local kernel's V-tile / warps / segment; the other kernels' tiles 16
    cases = [("fp32", 128, 128, 16, 4, 16), ("fp64", 128, 128, 16, 4, 16), ("fp32", 100, 60, 16, 4, 16),
             ("fp32", 256, 256, 16, 8, 64)]
    if a.spills:
        cases += [("fp32", 128, 128, bv, w, 16) for bv, w in ((32, 4), (32, 8), (64, 8))]
    for acc, K, V, bv, warps, seg in cases:
        BK = triton.next_power_of_2(K)
        sigs = backward_signatures(acc)
        shared = dict(H=8, HV=16, K=K, V=V, BK=BK, CT=64)
        consts = {
            "maps": [dict(shared, BX=16, WHAT=w) for w in (0, 1, 2)],
            "pass": [dict(shared, BV=16, BR=br, USE_H0=True, USE_DHT=True,
                          PRECISION="ieee" if acc == "fp64" else backward.PASS_PRECISION) for br in (16, 32)],
            "local": [dict(shared, BV=bv, SEG=seg)],
            "forward": [dict(H=8, HV=16, K=K, V=V, BK=BK, BV=bv, USE_H0=True)],
        }
        for name, fn in kernels.items():
            for c in consts[name]:
                w = warps if name == "local" else (8 if name == "pass" and BK > 128 else 4)  # launch defaults
                k = compile_kernel(fn, sigs[name], c, w)
                extra = ptxas_report(k) if a.spills and acc == "fp32" else []
                what = {n: c[n] for n in ("WHAT", "BR") if n in c}
                print(f"backward {name} {acc} K={K} V={V} {what} BV={bv} warps={warps} seg={seg}: ok",
                      *extra)
    for code in (1, 2):
        sig = {"g_raw": "*bf16", "A_log": "*fp32", "dt_bias": "*fp32", "g": "*fp32", "n_rows": "i64",
               "lower_bound": "fp32"}
        compile_kernel(gate._gate_kernel, sig, dict(H=32, K=100, BR=32, BK=128, GATE=code), 4)
        print(f"gate {code}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
