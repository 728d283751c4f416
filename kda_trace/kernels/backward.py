"""KDA backward (dq, dk, dv, dg, dbeta, dh0 from do and dht) in Triton, parallel over chunks, in two modes
(LAUNCH["mode"]):
- "chunked" (the default on a GPU; "Chunked mode" below, kernels/backward_chunked.py): the chunked forward's
  matrix form with tf32 products; on the H100 at 32 heads x 16384 tokens 10.2 ms forward + backward against the exact
  mode's 132 ms, and more accurate than fla's chunk_kda on every gradient (benchmarks/RESULTS.md);
- "exact": fp32 (float64 for float64 inputs) gradients of the token recurrence, in three kernels (below); the
  default under the Triton interpreter, which runs it about 7x faster than the chunked mode.
float64 inputs get float64 gradients in both modes (every product in ieee float64).

Exact mode.

Per token t, with a_t = exp(g_t) (g_t <= 0), the forward (KDA.md) is
    S' = diag(a_t) S_{t-1};  r = v_t - S'^T k_t;  S_t = S' + beta_t k_t r^T;  o_t = S_t^T (scale q_t)
that is S_t = M_t S_{t-1} + beta_t k_t v_t^T with M_t = (I - beta_t k_t k_t^T) diag(a_t). With dS the
gradient of the loss with respect to S_t (dht at the end), the reverse step is
    dS     += scale q_t do_t^T                 dq_t = scale S_t do_t
    dk_t    = dS (beta r) + S' du              with dd = dS^T k_t (gradient of beta r), du = -beta dd
    dv_t    = beta dd                          dbeta_t = dd . r
    dS'     = dS + k_t du^T                    dg_t = rowsum(dS' * S')   (d/dg of a_t S_{t-1})
    dS      = diag(a_t) dS'  (= M_t^T dS)      (the gradient for S_{t-1}; after the first token: dh0)
Every exp has the argument g <= 0: nothing is divided by a decay, so strong gates are safe.

Over a chunk c of CT = 64 tokens (the last of a sequence may be shorter) both recurrences are affine:
    S_end(c)   = A_c S_start(c) + B_c,      A_c = M_n ... M_1 [K, K],  B_c = the chunk's steps from S = 0
    dS_start(c) = A_c^T dS_end(c) + b_c,    b_c = the chunk's reverse steps from dS = 0 (its own do only)
(dS_end(c) is the gradient with respect to the state after chunk c from later tokens and dht; the dS pass
needs no state.) In the chunked forward's terms (kernels/chunk.py) A_c = diag(gamma) - Kt^T W and
b_c = Qt^T dO - W^T A_qk^T dO; here they are computed from the token steps, in fp32, not from chunk.py's
bf16 intermediates, so that the gradients stay exact to fp32 (and float64 inputs get float64 gradients).

Kernels, in launch order:
1. `_chunk_maps_kernel`, per (chunk, value head, column tile), three launches: A_c (the identity's columns
   through the token steps with v = 0), B_c and b_c, each a token sweep over the chunk. Parallel over chunks.
2. `_chunk_pass_kernel`, per (sequence, V-tile, value head), sequential over the sequence's chunks only:
   S_start(c + 1) = A_c S_start(c) + B_c from h0 (the checkpoints), then dS_end(c - 1) = A_c^T dS_end(c) +
   b_c back from dht, and dh0 = A_0^T dS_end(0) + b_0; fp32 matrix products (tf32x3 on tensor cores, about
   fp32 accuracy; ieee for float64), dS kept in fp32 (float64) between chunks.
3. `_local_kernel`, per (chunk, value head, V-tile), parallel: the reverse token steps above from the chunk's
   checkpoint and dS_end. The chunk is walked in segments of SEG tokens (LAUNCH["seg"], 16 on a GPU) last to
   first: one forward run from the checkpoint keeps the state at every segment start in the program's scratch;
   per segment, the forward from its start keeps its SEG states S_{t-1} in the scratch, then the reverse
   steps through them. The programs are persistent (a bounded number, each looping over
   work items) so that the scratch is sized by the programs, not by the chunks.
V-tiles are independent (the recurrence never mixes V columns of the state); their contributions to dq, dk,
dg and dbeta (sums over V) are added into fp32 buffers with atomic adds (one V-tile per item under the
interpreter, where the sums are then deterministic).

Work (in token steps over a [K, V] state, with SEG 16): maps K/V + 2 (A_c, B_c, b_c), local reverse about 3.75
(0.75 to the last segment start, 1 storing, the reverse step about 2); the pass adds 2 K x K x V products per chunk.
Memory beyond inputs and gradients (fp32; K = V = 128: 3 KiB per token per value head, e.g. 1.5 GiB for
16384 tokens x 32 heads): A_c 4 K^2, checkpoints and dS_end 4 K V each, per value head per chunk; dh0
(always, 4 K V per sequence and head); A_c is freed before kernel 3, which adds the scratch, 4 (SEG + CT / SEG)
BK BV bytes per program, and fp32 buffers for dq, dk (per value head), dg: 12 K bytes per token per value head.
Nothing is kept from the forward: everything is recomputed from q, k, v, g, beta. (The forward's fp32 chunk
states, kernels/chunk.py's output_chunk_states, would spare B_c and half the pass, but the chunked forward
rounds S to bf16 in its products, which would cost the gradients their fp32 accuracy.)

Chunked mode (LAUNCH["mode"] = "chunked", the default on a GPU; kernels/backward_chunked.py): trades the exact
mode's fp32 accuracy for speed, to be no worse than fla's chunk_kda (RMS-relative 3e-3 on every gradient with bf16
inputs). The per-chunk maps A_c, B_c, b_c (K x K, K/V + 2 token sweeps) are never formed:
1. the prep, per (chunk, value head), parallel: the chunked forward's A_kk, A_qk (decay-weighted 16-row
   blocks, exp arguments <= 0), X = (I + A_kk)^-1 by 16x16 blocks (the forward's solve), W, U, Qt, Kt, gamma and
   A_qk^T dO, as three kernels (`_prep_pairs_kernel`, `_prep_solve_kernel`, `_prep_operands_kernel`; see
   backward_chunked.py). Given the forward's P, A_qk and X (`kda_backward`'s chunk_matrices, which
   kernels/autograd.py keeps from kernels/chunk.py's forward), only the operands kernel runs.
2. `_state_pass_kernel`, per (sequence, V-tile, value head), sequential over chunks: S_start(c + 1) =
   diag(gamma) S + Kt^T (U - W S) from h0, then dS_start(c) = diag(gamma) dS_end + Qt^T dO - W^T (A_qk^T dO +
   Kt dS_end) from dht (= A_c^T dS_end + b_c without A_c), the state in K-tiles of 64 rows, fp32 between chunks
   (bf16 products on a GPU for 2-byte inputs, reading W and Kt stored in bf16); it writes each chunk's Vn = U - W S
   and dVn = A_qk^T dO + Kt dS_end, fp32, for 3.
3. the local gradients from S_start and dS_end, LAUNCH["chunked_local"]: "split" (default) = `_local_vk_kernel`
   (per chunk and value head, from the pass's Vn and dVn: the sums over V and K in registers, dv, Y_k, dA_kk,
   dbeta, the two matrices of the decay-weighted sums), `_local_sums_kernel` (those sums) and `_local_k_kernel`
   (dq, dk, dg by K-tiles), with the prep's X and P (the formulas and their float64 oracle:
   tests/kernels/chunk_backward_matrix.py); or "tokens" (the exact mode's kernel 3 from the same states). A
   one-kernel matrix form of 3 (whole K and V per chunk) does not fit: it needs 256 KiB of shared memory at
   K = V = 128, past the H100's 227 KiB.
Precision: fp32 storage and accumulation; products on tensor cores in tf32 (LAUNCH["chunked_precision"],
["chunked_pass_precision"], ["split_precision"]; tf32x3 each on request); ieee for float64 inputs. Measured on
the H100 (bf16 inputs, 32 heads x 1024 tokens, RMS-relative against float64; the pass in bf16 with Qt^T dO
split): dq 1.8e-3, dk 2.0e-3, dv 2.5e-3, dg 1.1e-3, dbeta 2.5e-3, dh0 1.7e-4, against fla's
2.9e-3, 3.3e-3, 3.0e-3, 2.8e-3, 2.8e-3, 1.6e-3 (dq, dk, dv,
dbeta are bf16 outputs: their rounding alone is about 1.7e-3; a CPU estimate of the tf32 cost
said 4e-4; dv and dbeta take the pass's rounding through its Vn and dVn:
1.9e-3 and 2.0e-3 when 3 recomputes Vn and dVn in tf32). The states come from
the prep's W, U, Kt, not from kernels/chunk.py's bf16 products (see above). Memory beyond inputs and
gradients (fp32, K = V = 128; per token and value head): the prep's W, Qt, Kt, U, A_qk^T dO, X, P (3 KiB),
states and dS_end (2 KiB), then 3a's dQt, dKt, Y_k, M1, M2 in place of W, Qt, Kt, then the sums and dq, dk, dg;
each buffer is freed after its last reader, for a peak of about 6 KiB (3.9 GiB measured at 16384 tokens x 32
heads with bf16 inputs).

`kda_forward_exact` runs the forward token by token (`_forward_exact_kernel`) and writes o and the final
state: an exact forward (in float64 for float64 inputs) used for gradient checks, not for speed.

Addresses: per-program bases are int64 scalars; every load and store is masked, so any K, V (<= 256),
sequence length >= 1 and total size work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kda_trace.kernels.backward_blocks import _chunk_span
from kda_trace.kernels.options import KDAOptions

CT = 64  # chunk length (tokens); equals chunk.BT so the chunk tables of chunk.py serve here
_DEFAULT_OPTIONS = KDAOptions()
# Launch settings (None: the default named). bv: V-tile of the local reverse (16 on a GPU; under the
# interpreter, which pays per program, the whole V); warps: its warps (4, or 8 when the [BK, BV] tile passes
# 2048 elements; from ptxas -v for sm_90 at K = 128: BV 16 / 4 warps and BV 32 / 8 warps do not spill).
# seg: tokens whose states a local program holds in its scratch at a time (a divisor of CT; 16 on a GPU, 64
# under the interpreter): 16 runs 0.75 forward passes more than 64 (to the segment starts), for about a quarter
# of the scratch (20 states against 65). programs: local programs in flight (8 per SM on a GPU). map_bx / map_warps: column tile and warps
# of the chunk maps (16 / 4 on a GPU). pass_bv / pass_rows / pass_warps: V-tile, rows per product and warps of
# the chunk pass (16 / 16 / 4, 8 for K > 128, on a GPU; ptxas for sm_90: 32 rows spill at K = 128, and K = 256
# spills with 4 or 8 warps). Not timed yet: benchmarks/bench_backward.py sweeps some of them.
LAUNCH = {"bv": None, "warps": None, "seg": None, "programs": None, "map_bx": None, "map_warps": None,
          "pass_bv": None, "pass_rows": None, "pass_warps": None}
PASS_PRECISION = "tf32x3"  # fp32 products of the chunk pass: three tf32 MMAs, about fp32 accuracy
# mode: "chunked" (module docstring, "Chunked mode") or "exact" (kernels 1 to 3 of the docstring); None (the
# default): chunked on a GPU, exact under the interpreter (see _backward).
# Chunked mode's keys: chunked_local, its local kernels ("split", the default: backward_chunked.py's three;
# "tokens": `_local_kernel`). Precisions on a GPU (float64 inputs always ieee):
# chunked_precision (the prep kernel's products), chunked_pass_precision (the sequential pass's) and
# split_precision (the split local kernels'), tf32 each but the pass: operands rounded to 2^-11 relative, against
# fla's bf16 at 2^-8 (measured: module docstring, "Precision"). tf32x3 (about fp32) makes each of them spill at
# K = V = 128 (compile_sm90.py --chunked --spills). Every precision key takes "bf16" too (backward_blocks.`_xdot`).
# The pass: None = bf16 on a GPU for 2-byte inputs (tf32 for fp32 inputs, and under the interpreter, which computes it
# in fp32: the pass's Vn and dVn go to the local kernels as they are), with
# chunked_pass_source_precision (None: where the pass is bf16, "bf16_split_a" for a bf16 dO, Qt as two bf16 terms
# and two bf16 products, else tf32; otherwise the pass's) for the reverse recursion's Qt^T dO alone: that
# product's bf16 rounding is what reaches dh0 (a CPU estimate: dh0 1.7e-3 with every product
# in bf16, 2.4e-4 with that one in tf32, 1.5e-4 split, 2.1e-4 all tf32). H100, 32 heads x 16384: fwd+bwd 17.14 /
# 17.17 ms split against 18.28 / 18.24 with tf32 there, 18.82 / 18.74 all tf32 and 17.12 / 17.09 all bf16; dh0
# 1.8e-4 split, 4.6e-4, 4.3e-4 and 1.7e-3 (fla 1.64e-3). The prep's and the local kernels' products in bf16 are
# 1-2% faster each but take dq, dk, dv, dbeta to fla's errors and ddt_bias past them: off. Tiles and warps:
# chunked_pass_bv / _warps / _stages (32 / 4 / 2 where they fit: 186 / 213 registers, no spill; 3 stages or BV 64
# spill; H100 A/B);
# split_bv / split_bk / split_vk_warps / split_vk_stages (`_local_vk_kernel`'s V-tile 32, K-tile 32, warps 4 and
# Triton's default stages, one where they do not fit, on a GPU); split_k_bk,
# the K-tile of 3c's work items (16 on a GPU, 64 under the interpreter), and split_k_warps (8): 16 columns on 8
# warps against 32 columns on 4: K3's backward 14.39 against 14.70 ms, 32 x 16384 8.78 against 8.77 (H100; 3c
# is a streaming kernel, 2.09 ms on K3 at 32 x 4).
# The prep's three kernels: prep_pairs_warps / prep_solve_warps / prep_operands_warps (4 each) and prep_bv (the
# operands kernel's V-tile, 64). 3b's decay-weighted sums by `_local_sums_kernel`, by 16-row blocks (all in one
# launch with sums_one_launch, below) with the sums in registers: sums_bk (its K-tile, at most 32), sums_warps (2 with
# sums_one_launch, else 4). (One fused prep
# kernel, and the sums inside `_local_k_kernel`, are slower: H200, 32 heads x 16384, prep 16.83 ms
# against 5.84 + 1.23 + 0.49, fwd+bwd 34.1 ms against 28.7 with the sums apart. dq, dk, dg inside the sums kernel
# are slower too: 14.8 against 13.0 ms, H100.)
LAUNCH.update({"mode": None, "chunked_local": "split", "chunked_precision": "tf32",
               "chunked_pass_precision": None, "chunked_pass_source_precision": None, "split_precision": "tf32",
               "chunked_pass_bv": None, "chunked_pass_warps": None, "chunked_pass_stages": None, "split_bv": None,
               "split_bk": None, "split_vk_warps": None, "split_vk_stages": None, "split_k_bk": None, "split_k_warps": None,
               "prep_pairs_warps": None, "prep_solve_warps": None, "prep_operands_warps": None, "prep_bv": None,
               "sums_bk": None, "sums_warps": None, "sums_maxnreg": None})
# Register caps (`maxnreg`; 0: ptxas's choice; None: the default) of the chunked kernels: sums_maxnreg (128 for fp32
# buffers with the anchored diagonal blocks, else 0), prep_operands_maxnreg (168 for fp32 buffers, else 0),
# prep_pairs_maxnreg, chunked_pass_maxnreg, split_vk_maxnreg, split_k_maxnreg (0). Uncapped, ptxas gives the sums
# kernel 168-243 registers at 4 warps (two programs per SM), the operands kernel 196 (two); 128 and 168 let four and
# three be resident for 80-120 and 8 bytes of spills (sm_90, triton 3.6, `compile_sm90.py --chunked --spills`).
# H100, 32 heads x 16384, fwd+bwd: 12.86 ms uncapped, 11.71 with the sums at 128, 11.55 with the operands at 168
# too; 96 heads x 8192 safe gate 20.66 -> 18.65 with the sums at 128. Losers there: the sums at 96 (12.61), the
# pairs at 168 (11.79) or 128 (11.73, no gain), local_k at 168 (11.86), local_vk at 128 (14.41: 1228 bytes of
# spills), the pass at 168 on the 96-head shape (no gain).
LAUNCH.update({"prep_pairs_maxnreg": None, "prep_operands_maxnreg": None, "chunked_pass_maxnreg": None,
               "split_vk_maxnreg": None, "split_k_maxnreg": None})
# workspace_bytes: the most memory the backward's own buffers may take at once; past it `kda_backward` runs
# groups of heads one after the other (None: WORKSPACE_CAP_BYTES or 90% of what the device has free, with the
# caching allocator's unused blocks, at the call, whichever is less; unlimited off CUDA). H200, 65536 tokens x
# 96 heads: the buffers alone take about 61 GiB, and an evaluation ran out of memory beside the runner's worker.
LAUNCH["workspace_bytes"] = None
WORKSPACE_CAP_BYTES = 16 << 30
"""The default workspace limit: a group of heads under it still has thousands of (chunk, head) work items at the
sizes that reach it (24 heads x 65536 tokens: 24,864), so more heads at once would only take memory."""

# diag_blocks: the 16x16 diagonal blocks of the prep's pair matrices and of 3b's sums. "anchors": tensor-core
# products at two anchors per block, as the forward's intra kernel, with fall-backs where a block's gates pass
# backward_blocks.MAX_EXP (the pairs: nested anchors; the sums: running products, `sums_steps_pass`); "nested": the
# sums' at nested anchors (backward_blocks.py `_nested_level`, any gate, no fall-back), the pairs' as "anchors";
# None (default): "nested" where kda_backward is told of strong gates (strong_gates: the unbounded gate computed in
# the op), else "anchors"; "elementwise": [16, 16, 32] products with one exp per pair and channel. H200 (benchmarks/
# bench_backward.py --no-fla, fwd+bwd): fla's layer configuration, 73% of the blocks past the two anchors' range, 32
# heads x 16384 13.82 -> 12.19 ms, 16 x 4096 packed 53.64 -> 45.97 with the sums at nested anchors; a precomputed gate
# (no block past the range) 9.50-9.56 ms at two anchors against 10.23-10.58 nested. The nested sums under caps of 112,
# 168 and none lost (12.64, 12.78, 13.81 against 11.84 at 128), as did two anchors with the nested form as the
# in-kernel fall-back (17.48: both forms' registers in one kernel).
LAUNCH["diag_blocks"] = None
# diag_balance: with the anchored diagonal blocks, the sums kernel also writes each block's imbalance, the sum over
# its rows of its part of dG (exactly zero: every pair adds +x to one row and -x to the other; the products round
# the two sides differently), and the local_k kernel subtracts it at the block's first row, so the rounding stays
# inside the block instead of reaching every earlier row of the chunk through dG's reverse cumulative sum (and,
# summed over tokens, dA_log and dt_bias). One fp32 value per 16 rows, key channel and value head. None (default):
# on but at one anchor (sums_one_anchor with the safe gate's bound). H200, bf16 inputs, against float64
# (bench_backward.py --accuracy): fla's layer configuration (h8_packed_2x1024_layer) dA_log 3.02e-3 -> 1.79e-3,
# ddt_bias 6.07e-3 -> 2.11e-3, dg 2.25e-3 -> 2.02e-3 (fla 0.6.0 on the same inputs: 1.70e-3, 3.35e-3, 3.51e-3; the
# nested products in tf32x3 instead: 1.93e-3, 1.65e-3, 1.95e-3 at 14.4 ms against 12.0 fwd+bwd); the safe gate
# (h8_dense_1x2048_safe_l2) 2.19e-3 -> 1.53e-3, 4.11e-3 -> 1.94e-3. fwd+bwd, four alternating rounds: layer 32 heads x
# 16384 12.01-12.05 -> 12.11-12.20 ms, a precomputed gate 9.43-9.47 -> 9.43-9.45, K3 (one anchor) 13.29-13.51 ->
# 13.65-13.76 (the backward 10.39-10.40 -> 10.65-10.67): off there, where ours is below fla's error without it.
LAUNCH["diag_balance"] = None
# pairs_diag_precision / sums_diag_precision: the products of the anchored diagonal blocks in the pairs and the
# sums kernels. The sums' reach dg and, summed over tokens, ddt_bias. "tf32_rn" there (tf32 products of operands
# rounded to nearest first, chunk.`_tf32_rn`) against tf32x3 (about fp32, three tf32 products): H100, fwd+bwd 11.07
# against 11.34 ms at 32 heads x 16384, 17.80 against 18.10 on K3; the errors against float64 (bf16 inputs) of dq,
# dk, dv, dbeta, dh0 equal to three digits, dg 1.12e-3 against 1.08e-3 at 32 x 1024, and on the safe-gate 8 x 2048
# dg 2.57e-3 against 2.20e-3, dA_log 1.91e-3 against 1.60e-3, ddt_bias 4.02e-3 against 1.70e-3: each still below
# fla 0.6.0's on the same inputs (4.71e-3, 8.99e-3, 5.35e-3). Plain tf32 (truncated operands): as fast, ddt_bias
# 4.49e-3; bf16: ddt_bias 3.07e-2. Every product of the backward in tf32_rn: dg 4.9e-4 at 32 x 1024, 3.5% slower.
# The pairs' in bf16 (None: bf16 on a GPU; fp32 under the interpreter, whose tf32 products are fp32 too): 18.79
# against 18.97 ms at 32 heads x 16384, 38.57 against 38.69 on K3, every gradient within 1.04x of tf32's error on
# three shapes and dg, dA_log, ddt_bias lower on the safe-gate one (H100).
# sums_diag_precision None: plain tf32 with the sums' diagonal blocks at nested anchors (`_nested`: sixteen products
# per block and K-tile, each operand rounded by four integer operations in tf32_rn), else tf32_rn. H200, fla's layer
# configuration, 32 heads x 16384: fwd+bwd 12.233 -> 11.525 ms (bench_backward.py --ab, three rounds in turn in one
# process), the sums kernel 4.17 -> 3.42 ms (--parts); against float64 (h8_packed_2x1024_layer, bf16 inputs) dA_log 1.14e-3 -> 1.46e-3,
# dg 1.89e-3 -> 1.91e-3, ddt_bias 2.00e-3 -> 1.97e-3, the rest equal to three digits (fla 0.6.0 on the same inputs:
# 1.70e-3, 3.51e-3, 3.35e-3).
LAUNCH.update({"pairs_diag_precision": None, "sums_diag_precision": None})
# sums_one_anchor: where the gates' lower bound is known to be >= -7.5 (the safe gate's; `kda_backward`'s
# gate_bound), the sums kernel's diagonal blocks at one anchor (half the products, no range check), as fla's
# safe-gate path does. H100: K3 fwd+bwd 17.75 -> 17.61-17.65 ms (bwd 14.87 -> 14.72), 32 heads x 16384 (no
# bound) unchanged; safe gate 8 x 2048 against float64: dg 2.57e-3 -> 2.53e-3, dA_log
# 1.91e-3 -> 2.17e-3, ddt_bias 4.02e-3 -> 4.10e-3, the rest equal (fla 0.6.0: 4.71e-3, 8.99e-3, 5.35e-3).
LAUNCH["sums_one_anchor"] = True
# qk_norm_factors: with q/k L2-normalised in the op (kernels/autograd.py), the backward reads q and k as given with
# their rows' norm factors (`kda_backward(qk_norms=...)`, one fp32 per row) instead of fp32 normalised copies: at
# K3 (96 heads x 8192) the copies cost 0.41 ms to write (805 MB) and are read by the prep operands, sums, 3a and
# 3c kernels at twice bf16's bytes. The same gradients (against float64 on the safe gate 8 x 2048, bf16 inputs:
# every gradient's error equal to three digits). H100: K3 fwd+bwd 17.27 -> 17.05-17.09 ms (bwd 14.38 -> 14.22),
# peak memory 6.8 -> 6.0 GiB.
LAUNCH["qk_norm_factors"] = True
# chunked_pass_parallel: the pass's forward (states) and reverse (dS) recursions as separate programs at once
# (True) or one after the other in one program (False); they are independent. H100: 3.5 against 4.3 ms at 96 heads x
# 8192, 4.21 against 4.12 at 32 heads x 16384 (measured with V-tiles of 16).
LAUNCH["chunked_pass_parallel"] = True
# keep_states: for 2-byte inputs (whose backward pass has bf16 products, as the forward's) kernels/autograd.py's
# forward keeps its fp32 state before every chunk and its V_new = U - W S in fp32 before the pass's bf16 rounding,
# with U computed in tf32 from the solve's fp32 X for it (`kda_chunk`'s save_states, with the chunk matrices); the
# backward's pass then runs only its reverse recursion and computes no U and no Vn of its own. Memory kept from the
# forward to the backward: 4 K V bytes per chunk and head and 4 V bytes per token and head (96 heads x 8192 tokens,
# K = V = 128: 805 + 403 MB). H100, two alternating rounds: fwd+bwd 16.1-16.2 -> 15.5-15.6 ms on K3 (96 heads x
# 8192, safe gate; peak 6.0 -> 6.8 GiB, fla 0.6.0 7.4), 10.75 -> 10.61-10.63 at 32 heads x 16384 (3.9 -> 4.1 GiB,
# fla 4.9); every gradient's error against float64 the same as the recomputing backward's to three digits (32 x 1024
# and the safe-gate 8 x 2048: dq 1.83e-3, ddt_bias 4.10e-3). Less accurate (dq at 32 x 1024, ddt_bias on the safe
# gate; fla 0.6.0: 2.92e-3, 5.35e-3): V_new kept in bf16 2.91e-3, 5.30e-3; in fp32 with the forward's bf16 U
# 2.89e-3, 5.35e-3; with U in fp32 from the bf16 X 2.40e-3, 4.86e-3 (0.2 ms faster on K3). The states kept without
# V_new (the reverse programs computing Vn = U - W S from them): as accurate, slower (17.49 against 17.10 ms on K3).
# With them the forward also keeps its bf16 W (computed in tf32 from the fp32 X too) and k exp(G_last - G), which
# the backward's bf16 pass reads as they are, so the prep's operands kernel computes neither: K3 15.25-15.29 ->
# 14.69-14.76 ms, 32 x 16384 10.56-10.60 -> 10.20-10.23 (H100); 2 K bytes more kept per token and head; every
# gradient's error the same to three digits.
LAUNCH["keep_states"] = True
# sums_one_launch: 3b's sums kernel as one launch over every (item, 16-row block), an item's four blocks as
# neighbouring work (they read the same gates, q, k, M1 and M2: from L2 after the first), instead of one launch per
# block. H100: K3 fwd+bwd 17.03-17.09 -> 16.66-16.72 ms (the kernel 3.80 -> 3.48 ms), 32 heads x 16384 10.94 ->
# 10.92. One program per (item, block) instead of 8 persistent ones per SM is slower (K3 16.72-16.75, 32 x 16384
# 11.17). sums_warps 2 against 4: K3 16.47-16.53 against 16.64-16.73 ms, 32 x 16384 10.95 against 10.92-10.94; a
# register cap of 168 (17.36) and K-tiles of 16 (19.2) are slower.
LAUNCH["sums_one_launch"] = True
# sums_steps_pass: the sums kernel compiled without the running-products fall-back (`_diag_sums_by_steps`), the
# blocks past the anchored range flagged, and their diagonal parts added after it by `_diag_steps_kernel`
# (sums_steps_warps: its warps; 112 registers on 4, no spills). With the one-launch sums and two anchors only.
# H200 (bench_backward.py --no-fla --parts): fla's layer configuration at 32 x 16384 (73% of the blocks past the
# range) fwd+bwd 15.36 -> 13.82 ms (the sums kernel 7.09 -> 2.62 ms, the pass of its own 2.98); a precomputed gate
# (no block past it) 9.49 -> 9.48 (2.68 + 0.08 ms). Under a register cap of 168 instead of 128 both slower (14.87,
# 10.33 ms).
# sums_steps_unroll: `_diag_steps_kernel`'s 2 x 16 steps unrolled that many at a time (1, 2, 4, 8 or 16), so that
# their loads (which do not wait for the running products) can be issued ahead; the same operations in the same
# order. ptxas (sm_90, Triton 3.9, 4 warps, no spills but at 16): 112 registers at 1, 127 at 2, 168 at 4, 94 at 8,
# 255 and 92 bytes of spills at 16. Not yet timed: 1.
LAUNCH.update({"sums_steps_pass": True, "sums_steps_warps": None, "sums_steps_unroll": 1})
# split_vk_ktiles: 3a's sums over V of its K-tiles (dQt, dKt, dW, dgamma, Y_k) by `_local_kt_kernel`, one program
# per (chunk, value head, K-tile), before `_local_vk_kernel` does the rest with that Y_k; instead of every K-tile
# inside `_local_vk_kernel`'s one program per (chunk, value head) (255 registers, two programs per SM, 3.44 ms on
# K3). split_kt_warps: `_local_kt_kernel`'s warps (4; its K-tile is split_bk's). ptxas (sm_90, triton 3.6, K = V =
# 128, 32 x 32 tiles): `_local_kt_kernel` 142 registers on 4 warps (102 on 8), no spill; `_local_vk_kernel` with
# Y_k given 234 (255 and 20 bytes of spills with every K-tile inside). H100, two alternating rounds: K3 fwd+bwd
# 16.49-16.56 -> 16.16-16.32 ms, 32 x 16384 10.93-10.98 -> 10.77-10.80; on 8 warps no better (16.18 / 10.80).
LAUNCH.update({"split_vk_ktiles": True, "split_kt_warps": None})
# chunked_pass_bf16_copies (None: on): with the pass in bf16 the prep's operands kernel stores W and Kt in bf16, which
# the pass's products round them to anyway (the pass is their only reader): the same gradients (bit for bit under
# the interpreter; dh0 apart in its last bits on the H100), 1.0-1.4% faster fwd+bwd than fp32 W and Kt (H100).
LAUNCH["chunked_pass_bf16_copies"] = None
# chunked_pass_prefetch (None: on): the pass's reverse recursion reads each chunk's dO2 tile and gamma one step
# ahead. They feed no product's operands, so Triton issues plain loads of them inside the step (TTGIR, Triton 3.9 on
# the CPU), where every step of the chain through dS waited on them. The same operations in the same order (the same
# gradients to three digits against float64). H200, `bench_backward.py --ab chunked_pass_prefetch=0 --parts --rounds
# 3` (medians in one process): the pass kernel 0.941 -> 0.906 ms at 32 heads x 16384 and 2.300 -> 2.264 on 16 x 4096
# packed (fla's layer configuration); fwd+bwd 11.356 -> 11.343 and 43.530 -> 43.174.
LAUNCH["chunked_pass_prefetch"] = None


@triton.jit
def _load_token(q, k, v, g, beta, r, i_h, i_hv, o_k, o_v, m_k, m_v,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr):
    """q, k (head i_h), v, g, beta (value head i_hv) of token row r, in the compute dtype."""
    b_q = tl.load(q + (r * H + i_h) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_k = tl.load(k + (r * H + i_h) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_g = tl.load(g + (r * HV + i_hv) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_v = tl.load(v + (r * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(ACC)
    b_b = tl.load(beta + r * HV + i_hv).to(ACC)
    return b_q, b_k, b_g, b_v, b_b


@triton.jit
def _step(b_s, b_k, b_g, b_v, b_b):
    """S_t from S_{t-1} ([BK, BV] tile): decay, then the delta-rule write with the decayed state."""
    b_s = b_s * tl.exp(b_g)[:, None]
    b_r = b_v - tl.sum(b_s * b_k[:, None], axis=0)
    return b_s + b_k[:, None] * (b_b * b_r)[None, :]


# ----------------------------------------------------------------------------------------------------
# 1. per chunk, in parallel: A_c, B_c, b_c
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _chunk_maps_kernel(
    q, k, v, g, beta, do, amap, states, dstates, dh0, cu_seqlens, chunk_indices, p_scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BX: tl.constexpr, CT: tl.constexpr, WHAT: tl.constexpr,
):
    """One column tile (BX columns) of one chunk's A_c (WHAT 0, columns of K), B_c (1) or b_c (2, columns
    of V), by the token steps of the recurrence (see the module docstring). B_c goes to the next chunk's
    slot of `states` (nothing for a sequence's last chunk), b_c to the previous chunk's slot of `dstates`
    (to `dh0` for a sequence's first chunk): the chunk pass adds the rest there."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    NCOL: tl.constexpr = K if WHAT == 0 else V
    NX: tl.constexpr = (NCOL + BX - 1) // BX
    i_c = tl.program_id(0).to(tl.int64) // NX
    i_x = tl.program_id(0).to(tl.int64) % NX
    i_hv = tl.program_id(1).to(tl.int64)
    i_h = i_hv // (HV // H)
    ACC: tl.constexpr = amap.dtype.element_ty
    i_n, i_t, r0, n, eos = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    o_k = tl.arange(0, BK)
    o_x = i_x * BX + tl.arange(0, BX)
    m_k = o_k < K
    m_x = o_x < NCOL
    m_kx = m_k[:, None] & m_x[None, :]
    p_k = k + (r0 * H + i_h) * K  # token t of the chunk: + t * H * K
    p_q = q + (r0 * H + i_h) * K
    p_g = g + (r0 * HV + i_hv) * K
    p_b = beta + r0 * HV + i_hv
    if WHAT == 0:
        # A_c = M_n ... M_1 (M_t = (I - beta_t k_t k_t^T) diag(exp(g_t))): the identity's columns through
        # the chunk's steps with v = 0
        b_s = tl.where((o_k[:, None] == o_x[None, :]) & m_kx, 1.0, 0.0).to(ACC)
        b_zero = tl.zeros([BX], dtype=ACC)
        for t in range(n):
            b_k = tl.load(p_k + t * (H * K) + o_k, mask=m_k, other=0.0).to(ACC)
            b_g = tl.load(p_g + t * (HV * K) + o_k, mask=m_k, other=0.0).to(ACC)
            b_s = _step(b_s, b_k, b_g, b_zero, tl.load(p_b + t * HV).to(ACC))
        tl.store(amap + (i_c * HV + i_hv) * (K * K) + o_k[:, None] * K + o_x[None, :], b_s, mask=m_kx)
    elif WHAT == 1:
        # B_c: the chunk's steps from a zero state
        if r0 + CT < eos:  # not the sequence's last chunk
            p_v = v + (r0 * HV + i_hv) * V
            b_s = tl.zeros([BK, BX], dtype=ACC)
            for t in range(n):
                b_k = tl.load(p_k + t * (H * K) + o_k, mask=m_k, other=0.0).to(ACC)
                b_g = tl.load(p_g + t * (HV * K) + o_k, mask=m_k, other=0.0).to(ACC)
                b_v = tl.load(p_v + t * (HV * V) + o_x, mask=m_x, other=0.0).to(ACC)
                b_s = _step(b_s, b_k, b_g, b_v, tl.load(p_b + t * HV).to(ACC))
            tl.store(states + ((i_c + 1) * HV + i_hv) * (K * V) + o_k[:, None] * V + o_x[None, :], b_s, mask=m_kx)
    else:
        # b_c: the reverse steps through the chunk from dS = 0 (the gradient of this chunk's outputs alone
        # with respect to the chunk's start state)
        p_do = do + (r0 * HV + i_hv) * V
        b_ds = tl.zeros([BK, BX], dtype=ACC)
        for tr in range(n):
            t = n - 1 - tr
            b_q = tl.load(p_q + t * (H * K) + o_k, mask=m_k, other=0.0).to(ACC)
            b_k = tl.load(p_k + t * (H * K) + o_k, mask=m_k, other=0.0).to(ACC)
            b_g = tl.load(p_g + t * (HV * K) + o_k, mask=m_k, other=0.0).to(ACC)
            b_b = tl.load(p_b + t * HV).to(ACC)
            b_do = tl.load(p_do + t * (HV * V) + o_x, mask=m_x, other=0.0).to(ACC)
            b_ds += (b_q * scale)[:, None] * b_do[None, :]
            b_dd = tl.sum(b_ds * b_k[:, None], axis=0)
            b_ds = (b_ds - b_k[:, None] * (b_b * b_dd)[None, :]) * tl.exp(b_g)[:, None]
        if i_t == 0:
            p_out = dh0 + (i_n * HV + i_hv) * (K * V)
        else:
            p_out = dstates + ((i_c - 1) * HV + i_hv) * (K * V)
        tl.store(p_out + o_k[:, None] * V + o_x[None, :], b_ds, mask=m_kx)


# ----------------------------------------------------------------------------------------------------
# 2. per sequence, sequential over its chunks: the states at chunk starts, dS at chunk ends, dh0
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _add_map(p_a, b_x, p_y, o_k, o_v, m_k, m_v, K: tl.constexpr, V: tl.constexpr, BR: tl.constexpr,
             TRANS: tl.constexpr, PRECISION: tl.constexpr):
    """y += A x (TRANS: A^T x) in memory, BR rows of y at a time: A [K, K] at p_a, x a [BK, BV] tile in
    registers (rows past K zero), y a [K, V] state at p_y (columns o_v)."""
    o_r = tl.arange(0, BR)
    for r0 in range(0, K, BR):
        rows = r0 + o_r
        m_r = rows < K
        if TRANS:
            b_a = tl.trans(tl.load(p_a + o_k[:, None] * K + rows[None, :], mask=m_k[:, None] & m_r[None, :],
                                   other=0.0))
        else:
            b_a = tl.load(p_a + rows[:, None] * K + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0.0)
        p = p_y + rows[:, None] * V + o_v[None, :]
        m = m_r[:, None] & m_v[None, :]
        tl.store(p, tl.load(p, mask=m, other=0.0) + tl.dot(b_a, b_x, input_precision=PRECISION), mask=m)


@triton.jit
def _chunk_pass_kernel(
    amap, states, dstates, h0, dht, dh0, cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BR: tl.constexpr,
    CT: tl.constexpr, USE_H0: tl.constexpr, USE_DHT: tl.constexpr, PRECISION: tl.constexpr,
):
    """For one (sequence, V-tile, value head): S_{c+1} = A_c S_c + B_c over the chunks (states), then
    dS_end(c - 1) = A_c^T dS_end(c) + b_c back over them (dstates), and dh0 = A_0^T dS_end(0) + b_0."""
    NV: tl.constexpr = (V + BV - 1) // BV
    i_n = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    ACC: tl.constexpr = amap.dtype.element_ty
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    n_chunks = (tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos + CT - 1) // CT
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    off_s = o_k[:, None] * V + o_v[None, :]
    s_seq = (i_n * HV + i_hv) * (K * V)
    p_a = amap + (c0 * HV + i_hv) * (K * K)  # chunk c of the sequence: + c * (HV * K * K)
    p_s = states + (c0 * HV + i_hv) * (K * V)  # + c * (HV * K * V), likewise dstates
    p_d = dstates + (c0 * HV + i_hv) * (K * V)

    if USE_H0:
        b_s = tl.load(h0 + s_seq + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_s = tl.zeros([BK, BV], dtype=ACC)
    tl.store(p_s + off_s, b_s, mask=m_kv)
    for c in range(n_chunks - 1):
        # slot c + 1 holds B_c; every thread's part of slot c is written (stores above / in _add_map)
        tl.debug_barrier()
        b_s = tl.load(p_s + c * (HV * K * V) + off_s, mask=m_kv, other=0.0)
        _add_map(p_a + c * (HV * K * K), b_s, p_s + (c + 1) * (HV * K * V), o_k, o_v, m_k, m_v, K, V, BR,
                 False, PRECISION)

    if USE_DHT:
        b_d = tl.load(dht + s_seq + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_d = tl.zeros([BK, BV], dtype=ACC)
    tl.store(p_d + (n_chunks - 1) * (HV * K * V) + off_s, b_d, mask=m_kv)
    for cr in range(n_chunks - 1):
        c = n_chunks - 1 - cr
        tl.debug_barrier()  # slot c - 1 holds b_c; slot c is complete
        b_d = tl.load(p_d + c * (HV * K * V) + off_s, mask=m_kv, other=0.0)
        _add_map(p_a + c * (HV * K * K), b_d, p_d + (c - 1) * (HV * K * V), o_k, o_v, m_k, m_v, K, V, BR,
                 True, PRECISION)
    if USE_H0:
        tl.debug_barrier()
        b_d = tl.load(p_d + off_s, mask=m_kv, other=0.0)
        _add_map(p_a, b_d, dh0 + s_seq, o_k, o_v, m_k, m_v, K, V, BR, True, PRECISION)


# ----------------------------------------------------------------------------------------------------
# 3. per chunk, in parallel: the token-by-token reverse from the chunk's start state and dS at its end
# ----------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["n_work"])
def _local_kernel(
    q, k, v, g, beta, do, states, dstates, dq, dk, dv, dg, dbeta, scratch, cu_seqlens, chunk_indices,
    p_scale, n_work,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr, SEG: tl.constexpr,
):
    """Work items (chunk, value head, V-tile), n_work of them, shared out over the programs (each owns a
    scratch of SEG + CT // SEG states). Per item: the states at the segment starts from the chunk's start
    state, then the segments last to first, each re-run forward from its start into the scratch and stepped
    back from its end (see the module docstring); gradients that sum over V are added into fp32 buffers."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    NV: tl.constexpr = (V + BV - 1) // BV
    ACC: tl.constexpr = states.dtype.element_ty
    pid = tl.program_id(0).to(tl.int64)
    p_scr = scratch + pid * ((SEG + CT // SEG) * BK * BV)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    off_scr = o_k[:, None] * BV + tl.arange(0, BV)[None, :]
    for w in range(pid, n_work, tl.num_programs(0)):
        i_v = w % NV
        i_c = w // NV // HV
        i_hv = w // NV % HV
        i_h = i_hv // (HV // H)
        _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        m_kv = m_k[:, None] & m_v[None, :]
        off_s = o_k[:, None] * V + o_v[None, :]
        p_st = states + (i_c * HV + i_hv) * (K * V)
        b_ds = tl.load(dstates + (i_c * HV + i_hv) * (K * V) + off_s, mask=m_kv, other=0.0)
        n_seg = (n + SEG - 1) // SEG
        # the forward from the chunk start; the state at each segment start into the scratch's last CT // SEG slots
        b_s = tl.load(p_st + off_s, mask=m_kv, other=0.0)
        tl.store(p_scr + SEG * (BK * BV) + off_scr, b_s)
        for s in range(1, n_seg):
            for t in range((s - 1) * SEG, s * SEG):
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, r0 + t, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_s = _step(b_s, b_k, b_g, b_v, b_b)
            tl.store(p_scr + (SEG + s) * (BK * BV) + off_scr, b_s)
        tl.debug_barrier()
        for sr in range(n_seg):
            t_s = (n_seg - 1 - sr) * SEG
            t_e = tl.minimum(t_s + SEG, n)
            b_s = tl.load(p_scr + (SEG + t_s // SEG) * (BK * BV) + off_scr)
            # the segment's states S_{t-1} into the scratch's first SEG slots
            for t in range(t_s, t_e):
                tl.store(p_scr + (t - t_s) * (BK * BV) + off_scr, b_s)
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, r0 + t, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_s = _step(b_s, b_k, b_g, b_v, b_b)
            tl.debug_barrier()
            # reverse steps through the segment
            for tr in range(t_e - t_s):
                t = t_e - 1 - tr
                r = r0 + t
                b_prev = tl.load(p_scr + (t - t_s) * (BK * BV) + off_scr)
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, r, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_do = tl.load(do + (r * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(ACC)
                b_a = tl.exp(b_g)
                b_sp = b_prev * b_a[:, None]                         # S'
                b_r = b_v - tl.sum(b_sp * b_k[:, None], axis=0)      # v - S'^T k
                b_st = b_sp + b_k[:, None] * (b_b * b_r)[None, :]    # S_t
                b_ds += (b_q * scale)[:, None] * b_do[None, :]
                b_dq = scale * tl.sum(b_st * b_do[None, :], axis=1)
                b_dd = tl.sum(b_ds * b_k[:, None], axis=0)           # gradient of beta r
                b_du = -b_b * b_dd
                b_dk = tl.sum(b_ds * (b_b * b_r)[None, :], axis=1) + tl.sum(b_sp * b_du[None, :], axis=1)
                b_dsp = b_ds + b_k[:, None] * b_du[None, :]
                b_dg = tl.sum(b_dsp * b_sp, axis=1)
                b_ds = b_dsp * b_a[:, None]
                # V-tile partial sums of the gradients that reduce over V
                tl.atomic_add(dq + (r * HV + i_hv) * K + o_k, b_dq, mask=m_k)
                tl.atomic_add(dk + (r * HV + i_hv) * K + o_k, b_dk, mask=m_k)
                tl.atomic_add(dg + (r * HV + i_hv) * K + o_k, b_dg, mask=m_k)
                tl.atomic_add(dbeta + r * HV + i_hv, tl.sum(b_dd * b_r, axis=0))
                tl.store(dv + (r * HV + i_hv) * V + o_v, b_b * b_dd, mask=m_v)
            # the scratch is overwritten by the next segment (or work item)
            tl.debug_barrier()


# ----------------------------------------------------------------------------------------------------
# the exact forward, token by token (gradient checks)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _forward_exact_kernel(
    q, k, v, g, beta, h0, o, ht, cu_seqlens, p_scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, USE_H0: tl.constexpr,
):
    """o and the final state of one (sequence, value head, V-tile), token by token in the dtype of ht."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    NV: tl.constexpr = (V + BV - 1) // BV
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_n = pid // NV // HV
    i_hv = pid // NV % HV
    i_h = i_hv // (HV // H)
    ACC: tl.constexpr = ht.dtype.element_ty
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    off_s = o_k[:, None] * V + o_v[None, :]
    s_base = (i_n * HV + i_hv) * (K * V)
    if USE_H0:
        b_s = tl.load(h0 + s_base + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_s = tl.zeros([BK, BV], dtype=ACC)
    for r in range(bos, eos):
        b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, r, i_h, i_hv, o_k, o_v, m_k, m_v, H, HV, K, V, ACC)
        b_s = _step(b_s, b_k, b_g, b_v, b_b)
        tl.store(o + (r * HV + i_hv) * V + o_v, tl.sum(b_s * (b_q * scale)[:, None], axis=0), mask=m_v)
    tl.store(ht + s_base + off_s, b_s, mask=m_kv)


@dataclass
class KDAGrads:
    """Gradients of sum(o * do) + sum(final_state * dht). dq, dk like q; dv like v; dg fp32 (fp64 for fp64
    inputs) like g; dbeta like beta; dh0 fp32 like the initial state (in its layout), or None without one."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    dg: torch.Tensor
    dbeta: torch.Tensor
    dh0: torch.Tensor | None


def _prepare(q, k, v, g, beta, opts, initial_state, cu_seqlens):
    """Shape checks and the packed view; returns (tensors, sizes, sequence tables, compute dtype, h0 [K, V])."""
    from kda_trace.kernels.chunk import _sequence_tables

    if opts.gate != "precomputed" or opts.beta != "prob" or opts.use_qk_l2norm:
        raise ValueError("kernels.backward takes a precomputed g, beta as a probability and q/k as given; apply "
                         "the gate, sigmoid and L2 norm around it (kernels.autograd.kda_backward_raw does)")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if k.shape != q.shape or v.shape[:2] != (B, T) or g.shape != (B, T, HV, K) or beta.shape != (B, T, HV):
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} g {tuple(g.shape)} "
            f"beta {tuple(beta.shape)}; expected k like q, v [B, T, HV, V], g [B, T, HV, K], beta [B, T, HV]")
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of q/k heads ({H})")
    if K > 256 or V > 256:
        raise ValueError(f"head dims up to 256 are supported, got K={K}, V={V}")
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {B}")
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    vk = opts.state_layout == "vk"
    state_shape = (N, HV, V, K) if vk else (N, HV, K, V)
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be {list(state_shape)} ({opts.state_layout} layout), "
                         f"got {list(initial_state.shape)}")
    wide = all(x.dtype == torch.float64 for x in (q, k, v, g, beta))
    acc = torch.float64 if wide else torch.float32
    h0 = None
    if initial_state is not None:
        h0 = (initial_state.transpose(-1, -2) if vk else initial_state).to(acc).contiguous()
    xs = tuple(x.reshape(B * T, *x.shape[2:]).contiguous() for x in (q, k, v, g, beta))
    tables = _sequence_tables(cu_seqlens, B, T, q.device)
    return xs, (B, T, H, HV, K, V, N), tables, acc, h0


def _tile(key, width, interpreted, gpu_default=16):
    """A launch tile: LAUNCH[key], else the whole (padded) width under the interpreter, else gpu_default."""
    if LAUNCH[key]:
        return LAUNCH[key]
    return max(16, triton.next_power_of_2(width)) if interpreted else gpu_default


def _mode(interp: bool) -> str:
    """LAUNCH["mode"]; the default (None): chunked when compiled; under the interpreter the exact mode, which it
    runs about 7x faster (bf16, 32 heads x 2 x 12 tokens: 13 s against 91 s), so that the CPU run of the smoke
    workloads stays short."""
    return LAUNCH["mode"] or ("exact" if interp else "chunked")


def scale_arg(scale: float, acc: torch.dtype, device) -> torch.Tensor:
    """The attention scale as the kernels take it: one element in the buffers' dtype (`p_scale`). Triton types a
    Python float argument fp32, which for float64 inputs put every gradient 1e-8 off float64 at a scale such as 0.7
    (H100; the interpreter keeps the float64)."""
    return torch.full((1,), scale, dtype=acc, device=device)


def _backward(xs, sizes, tables, acc, h0, do, dht, scale, given=None, gate_bound=None, norms=None,
              strong_gates=False, release=False):
    """The three kernels; returns dq, dk (per q/k head), dv, dg, dbeta, dh0 (kv layout), fp32 (fp64) but dq, dk, dv
    in the inputs' dtypes where the chunked mode writes them so (`local_split`). given: the
    forward's chunk matrices for the chunked mode (the exact mode does not use them), or None. norms: q's and k's
    L2-norm factors for the chunked mode (`_reads_norms`), or None. gate_bound, strong_gates: kda_backward's.
    release: `given` may be emptied once taken (kda_backward's release_chunk_matrices)."""
    from kda_trace.platform import triton_interpreted

    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, chunk_offsets, NT = tables
    TT, dev = B * T, q.device
    interp = triton_interpreted()
    BK = max(16, triton.next_power_of_2(K))
    z = torch.empty(1, dtype=acc, device=dev)
    scale = scale_arg(scale, acc, dev)
    do = do.reshape(TT, HV, V).contiguous()
    mode = _mode(interp)
    if mode == "chunked":
        return _backward_chunked(xs, sizes, tables, acc, h0, do, dht, scale, interp, given, gate_bound, norms,
                                 strong_gates, release)
    if mode != "exact":
        raise ValueError(f"LAUNCH['mode'] must be 'exact' or 'chunked', got {LAUNCH['mode']!r}")

    # 1. A_c, B_c (into the next chunk's checkpoint slot), b_c (into the previous chunk's dS_end slot, or dh0)
    amap = torch.empty(NT, HV, K, K, dtype=acc, device=dev)
    states = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dstates = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dh0 = torch.empty(N, HV, K, V, dtype=acc, device=dev)
    BX = _tile("map_bx", max(K, V), interp)
    for what, ncol in ((0, K), (1, V), (2, V)):
        _chunk_maps_kernel[(NT * triton.cdiv(ncol, BX), HV)](
            q, k, v, g, beta, do, amap, states, dstates, dh0, cu, chunk_indices, scale,
            H=H, HV=HV, K=K, V=V, BK=BK, BX=BX, CT=CT, WHAT=what, num_warps=LAUNCH["map_warps"] or 4)

    # 2. checkpoints, dS_end, dh0: sequential over each sequence's chunks
    BVp = _tile("pass_bv", V, interp)
    BR = LAUNCH["pass_rows"] or (BK if interp else 16)
    _chunk_pass_kernel[(N * triton.cdiv(V, BVp), HV)](
        amap, states, dstates, h0 if h0 is not None else z, dht.to(acc).contiguous() if dht is not None else z,
        dh0, cu, chunk_offsets, HV=HV, K=K, V=V, BK=BK, BV=BVp, BR=BR, CT=CT, USE_H0=h0 is not None,
        USE_DHT=dht is not None, PRECISION="ieee" if acc == torch.float64 else PASS_PRECISION,
        num_warps=LAUNCH["pass_warps"] or (4 if BK <= 128 else 8))
    del amap  # the local kernel does not read it: freed (stream-ordered) before its buffers are allocated

    dq, dk, dv, dg, dbeta = _local_tokens(xs, sizes, tables, acc, states, dstates, do, scale, interp)
    # GVA: the value heads of a group share q/k heads; their contributions add up
    if HV != H:
        dq = dq.view(TT, H, HV // H, K).sum(2)
        dk = dk.view(TT, H, HV // H, K).sum(2)
    return dq, dk, dv, dg, dbeta, dh0


def _backward_chunked(xs, sizes, tables, acc, h0, do, dht, scale, interp, given=None, gate_bound=None, norms=None,
                      strong_gates=False, release=False):
    """LAUNCH["mode"] = "chunked": states and dS at chunk boundaries by kernels/backward_chunked.py, then the
    local kernel LAUNCH["chunked_local"]; same returns as `_backward`."""
    from kda_trace.kernels.backward_chunked import chunk_states_and_grads, local_split

    B, T, H, HV, K, V, N = sizes
    local = LAUNCH["chunked_local"]
    states, dstates, dh0, pre = chunk_states_and_grads(xs, sizes, tables, acc, h0, do, dht, scale, LAUNCH,
                                                       _n_programs, for_split=local == "split", given=given,
                                                       norms=norms)
    if release and given is not None:
        given.clear()  # what is still needed is in pre and states: each freed after its last reader below
    if local == "split":
        pre.update(states=states, dstates=dstates)  # local_split frees each buffer after its last reader
        del states, dstates
        dq, dk, dv, dg, dbeta = local_split(xs, sizes, tables, acc, pre, do, scale, LAUNCH, _n_programs, gate_bound,
                                            norms, strong_gates)
    elif local == "tokens":
        dq, dk, dv, dg, dbeta = _local_tokens(xs, sizes, tables, acc, states, dstates, do, scale, interp)
    else:
        raise ValueError(f"LAUNCH['chunked_local'] must be 'split' or 'tokens', got {local!r}")
    if HV != H:
        dq = dq.view(B * T, H, HV // H, K).sum(2)
        dk = dk.view(B * T, H, HV // H, K).sum(2)
    return dq, dk, dv, dg, dbeta, dh0


def _n_programs(n_work, dev, interp):
    """Persistent programs of the local kernels: LAUNCH["programs"], else one per item under the interpreter
    or off CUDA, else 8 per SM."""
    if LAUNCH["programs"]:
        return min(n_work, LAUNCH["programs"])
    if interp or dev.type != "cuda":
        return n_work
    return min(n_work, 8 * torch.cuda.get_device_properties(dev).multi_processor_count)


def _local_tokens(xs, sizes, tables, acc, states, dstates, do, scale, interp):
    """Kernel 3 by token steps: fp32 (fp64) dq, dk per value head, dv, dg, dbeta."""
    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, _, NT = tables
    TT, dev = B * T, q.device
    BK = max(16, triton.next_power_of_2(K))
    # 3. the local reverse of every chunk
    BV = _tile("bv", V, interp)
    warps = LAUNCH["warps"] or (4 if BK * BV <= 2048 else 8)
    SEG = LAUNCH["seg"] or (CT if interp else 16)
    if CT % SEG:
        raise ValueError(f"LAUNCH['seg'] must divide {CT}, got {SEG}")
    n_work = NT * HV * triton.cdiv(V, BV)
    n_prog = _n_programs(n_work, dev, interp)
    dq = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dk = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dg = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dbeta = torch.zeros(TT, HV, dtype=acc, device=dev)
    dv = torch.empty(TT, HV, V, dtype=acc, device=dev)
    scratch = torch.empty(n_prog, SEG + CT // SEG, BK, BV, dtype=acc, device=dev)
    _local_kernel[(n_prog,)](
        q, k, v, g, beta, do, states, dstates, dq, dk, dv, dg, dbeta, scratch, cu, chunk_indices, scale, n_work,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, CT=CT, SEG=SEG, num_warps=warps)
    return dq, dk, dv, dg, dbeta


def _dht_kv(dht, opts, N, HV, K, V):
    if dht is None:
        return None
    vk = opts.state_layout == "vk"
    want = (N, HV, V, K) if vk else (N, HV, K, V)
    if tuple(dht.shape) != want:
        raise ValueError(f"dht must be {list(want)} ({opts.state_layout} layout), got {list(dht.shape)}")
    return dht.transpose(-1, -2) if vk else dht


def kda_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, do: torch.Tensor,
    opts: KDAOptions = _DEFAULT_OPTIONS, *, initial_state: torch.Tensor | None = None, dht: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None, chunk_matrices: dict | None = None, gate_bound: float | None = None,
    qk_norms: tuple[torch.Tensor, torch.Tensor] | None = None, strong_gates: bool = False,
    release_chunk_matrices: bool = False,
) -> KDAGrads:
    r"""Gradients of L = sum(o * do) + sum(final_state * dht) for the KDA forward with these inputs.

    Args:
        q, k: `[B, T, H, K]`; v: `[B, T, HV, V]` (HV a multiple of H); g: `[B, T, HV, K]` log decay (<= 0);
            beta: `[B, T, HV]` probability; do: `[B, T, HV, V]` gradient of o.
        opts: scale and state layout (gate must be "precomputed", beta "prob", no in-kernel L2 norm).
        initial_state: `[N, HV, K, V]` ("kv") or `[N, HV, V, K]` ("vk"), or None for zeros.
        dht: gradient of the final state (same shape as initial_state), or None for zeros.
        cu_seqlens: `[N + 1]` cumulative lengths of a packed batch (B = 1), or None (N = B rows of T).
        chunk_matrices: the chunk matrices P, Aqk and X of the forward on these inputs, as kernels/chunk.py's
            `kda_chunk(..., saved=...)` keeps them (fp32 `[NT, HV, 64, 64]`): the chunked mode then skips
            computing them (about 15% of the backward at 32 heads x 16384 on the H100). None: computed here.
            With "states" and "Vn" too (`kda_chunk(..., save_states=True)`: the forward's fp32 chunk-start states
            `[NT, HV, K, V]` and fp32 V_new `[B * T, HV, V]`; bf16 is taken too) the chunked mode runs only the
            reverse recursion and computes no U and no Vn of its own; with "W" and "KG" (the forward's W =
            X diag(beta) k e(G) and k e(G_last - G), `[B * T, HV, K]` bf16 or fp32) it computes neither (a bf16
            pair only where its pass rounds them to bf16 anyway: bf16 products on a GPU for 2-byte dO).
        gate_bound: a lower bound that every element of g is known to keep (the safe gate's lower_bound, which it
            keeps by construction), or None. Not checked: a wrong bound gives wrong gradients where
            LAUNCH["sums_one_anchor"] uses it.
        strong_gates: most 16-token blocks are expected to decay past e(-60) within 8 tokens (the unbounded gate
            computed in the op, as fla's layer initialises it): the chunked mode then takes its sums' diagonal
            blocks at nested anchors (LAUNCH["diag_blocks"] None). Speed only: the gradients are right either way.
        qk_norms: (rq, rk) `[B, T, H]`: the gradients are for the L2-normalised q * rq[..., None] and k *
            rk[..., None] (kernels/option_grads.py `l2_factors`), q and k given raw. The chunked mode with the
            chunk matrices reads q and k with their factors instead of normalised fp32 copies (`_reads_norms`);
            elsewhere the copies are made here. dq and dk are then fp32 (fp64).
        release_chunk_matrices: chunk_matrices is the caller's to give away (kernels/autograd.py's, whose forward
            kept them for this one backward): the dict is emptied as the backward takes its tensors, and the
            chunked mode drops each after its last reader, so that their memory is free for its later kernels.

    Returns:
        KDAGrads(dq, dk, dv, dg, dbeta, dh0); dh0 is None when initial_state is None.
    """
    xs, sizes, tables, acc, h0 = _prepare(q, k, v, g, beta, opts, initial_state, cu_seqlens)
    B, T, H, HV, K, V, N = sizes
    given = _check_chunk_matrices(chunk_matrices, sizes, tables[3], acc, q.device)
    if release_chunk_matrices and chunk_matrices is not None:
        chunk_matrices.clear()  # `given` holds them now, and is emptied in turn (`_backward_chunked`)
    dht = _dht_kv(dht, opts, N, HV, K, V)
    do = do.reshape(B * T, HV, V)
    dtypes = (q.dtype, k.dtype, v.dtype, beta.dtype)
    norms = None
    if qk_norms is not None:
        dtypes = (acc, acc, v.dtype, beta.dtype)
        norms = tuple(_check_norms(r, name, (B, T, H), q.device).to(acc).reshape(B * T, H).contiguous()
                      for r, name in zip(qk_norms, ("rq", "rk")))
        if not _reads_norms(given):
            xs = (xs[0].to(acc) * norms[0][..., None], xs[1].to(acc) * norms[1][..., None], *xs[2:])
            norms = None
    groups = head_groups(sizes, tables[3], acc, q.device)
    if len(groups) == 1:
        out = _backward(xs, sizes, tables, acc, h0, do, dht, opts.resolved_scale(K), given, gate_bound, norms,
                        strong_gates, release_chunk_matrices)
        return _grads(out, sizes, dtypes, acc, opts, initial_state is not None)
    # heads are independent: each group's inputs are copied out and its gradients into the whole ones, already in
    # the dtypes returned (dg and dh0 stay fp32 / fp64)
    TT, dev = B * T, q.device
    out = (torch.empty(TT, H, K, dtype=dtypes[0], device=dev), torch.empty(TT, H, K, dtype=dtypes[1], device=dev),
           v.new_empty(TT, HV, V),
           torch.empty(TT, HV, K, dtype=acc, device=dev), beta.new_empty(TT, HV),
           torch.empty(N, HV, K, V, dtype=acc, device=dev) if h0 is not None else None)
    for qk, vh in groups:
        sub_xs = tuple(_heads(x, qk if i < 2 else vh) for i, x in enumerate(xs))
        sub = _backward(sub_xs, (B, T, qk.stop - qk.start, vh.stop - vh.start, K, V, N), tables, acc,
                        _heads(h0, vh), _heads(do, vh), _heads(dht, vh), opts.resolved_scale(K),
                        None if given is None else {n: _heads(m, vh) for n, m in given.items()}, gate_bound,
                        None if norms is None else tuple(_heads(r, qk) for r in norms), strong_gates, True)
        for whole, piece, heads in zip(out, sub, (qk, qk, vh, vh, vh, vh)):
            if whole is not None:
                whole[:, heads] = piece
        del sub
    return _grads(out, sizes, dtypes, acc, opts, initial_state is not None)


def _check_norms(r, name, shape, device):
    """One of kda_backward's qk_norms, checked: `shape` on the device."""
    if tuple(r.shape) != shape or r.device != device:
        raise ValueError(f"qk_norms {name} must be {list(shape)} on {device}, got {list(r.shape)} on {r.device}")
    return r


def _reads_norms(given) -> bool:
    """Whether the backward reads q and k with their norm factors (kda_backward's qk_norms): the chunked mode with
    the forward's chunk matrices (the prep's pairs kernel is not run), the split local kernels and the anchored
    diagonal blocks (the element-wise sums do not take them)."""
    from kda_trace.kernels.backward_chunked import _anchors
    from kda_trace.platform import triton_interpreted

    return (given is not None and _mode(triton_interpreted()) == "chunked" and LAUNCH["chunked_local"] == "split"
            and _anchors(LAUNCH))


def _check_chunk_matrices(given, sizes, n_chunks, acc, device):
    """kda_backward's chunk_matrices, checked (or None): P, Aqk and X [NT, HV, CT, CT] in acc on the device, and
    optionally both "states" [NT, HV, K, V] in acc and "Vn" [B * T, HV, V] (bf16 or acc), and both "W" and "KG"
    [B * T, HV, K] (bf16 or acc)."""
    if given is None:
        return None
    B, T, H, HV, K, V, N = sizes
    want = {n: ((n_chunks, HV, CT, CT), (acc,)) for n in ("P", "Aqk", "X")}
    if "states" in given or "Vn" in given:
        want.update(states=((n_chunks, HV, K, V), (acc,)), Vn=((B * T, HV, V), (torch.bfloat16, acc)))
    if "W" in given or "KG" in given:
        want.update({n: ((B * T, HV, K), (torch.bfloat16, acc)) for n in ("W", "KG")})
    for name, (shape, dtypes) in want.items():
        m = given.get(name)
        if m is None or tuple(m.shape) != shape or m.dtype not in dtypes or m.device != device:
            got = None if m is None else f"{list(m.shape)} {m.dtype} on {m.device}"
            raise ValueError(f"chunk_matrices[{name!r}] must be {list(shape)} {' or '.join(map(str, dtypes))} on "
                             f"{device}, got {got}")
    return {name: given[name].contiguous() for name in want}


def _heads(x, heads):
    """A contiguous copy of heads (dim 1) of x, or None."""
    return None if x is None else x[:, heads].contiguous()


def _grads(out, sizes, dtypes, acc, opts, has_h0):
    """KDAGrads in the inputs' shapes and dtypes (those of q, k, v, beta) from the packed dq, dk, dv, dg, dbeta, dh0
    ([K, V] layout)."""
    B, T, H, HV, K, V, N = sizes
    q_dtype, k_dtype, v_dtype, beta_dtype = dtypes
    dq, dk, dv, dg, dbeta, dh0 = out
    if not has_h0:
        dh0 = None
    elif opts.state_layout == "vk":
        dh0 = dh0.transpose(-1, -2).contiguous()
    return KDAGrads(
        dq=dq.view(B, T, H, K).to(q_dtype), dk=dk.view(B, T, H, K).to(k_dtype), dv=dv.view(B, T, HV, V).to(v_dtype),
        dg=dg.view(B, T, HV, K).to(torch.float64 if acc == torch.float64 else torch.float32),
        dbeta=dbeta.view(B, T, HV).to(beta_dtype), dh0=dh0)


def workspace_bytes(sizes, n_chunks, acc) -> int:
    """Bytes of the chunked mode's buffers alive at once: the larger of backward_chunked.local_split's two peaks
    (3a: the pass's Vn and dVn, the prep's X and P, the states and dS with 3a's outputs; 3b: 3a's outputs left, the
    sums, then dq, dk, dg), and dh0. The pass's own peak (W, Kt, Qt, gamma instead of 3a's outputs) is smaller. The
    persistent programs' scratch (a few MB on a GPU) is left out. Checked against the buffers really made and freed
    on the CPU (test_backward_chunked: within 10%); the exact mode needs less (its per-chunk maps are [K, K] and
    [K, V] too, without the CT x CT ones)."""
    B, T, H, HV, K, V, N = sizes
    TT, NT, CT2 = B * T, n_chunks, CT * CT
    # 3a: Vn, dVn, X, P, states, dS; dv, dQt, dKt, Y_k, dgamma, d1, dbeta, M1, M2
    first = TT * (3 * V + 3 * K + 2) + NT * (4 * CT2 + 2 * K * V + K)
    # 3b: dv, dQt, dKt, Y_k, dgamma, d1, dbeta and the three sums, with M1 and M2 while the sums are made, then
    # with dq, dk, dg
    third = TT * (V + 6 * K + 2) + NT * K + max(NT * 2 * CT2, 3 * TT * K)
    return HV * (max(first, third) + N * K * V) * torch.empty(0, dtype=acc).element_size()  # + dh0


def head_groups(sizes, n_chunks, acc, device) -> list[tuple[slice, slice]]:
    """(q/k heads, value heads) of each group the backward runs at once: one group unless the workspace
    (`workspace_bytes`) exceeds LAUNCH["workspace_bytes"] or, when that is None or 0, WORKSPACE_CAP_BYTES or 90%
    of the device memory free now (no limit off CUDA); then as few groups as fit, each of whole GVA groups (at
    worst one q/k head and its value heads)."""
    B, T, H, HV, K, V, N = sizes
    budget = LAUNCH["workspace_bytes"]
    if not budget:  # 0 too, as bench_backward.py's --launch key=0
        if device.type != "cuda":
            return [(slice(0, H), slice(0, HV))]
        free, _ = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        budget = min(WORKSPACE_CAP_BYTES, 0.9 * (free + unused))
    n = min(H, max(1, -(-workspace_bytes(sizes, n_chunks, acc) // max(int(budget), 1))))
    per = -(-H // n)
    G = HV // H
    return [(slice(h, min(h + per, H)), slice(h * G, min(h + per, H) * G)) for h in range(0, H, per)]


def kda_forward_exact(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    opts: KDAOptions = _DEFAULT_OPTIONS, *, initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward token by token with the backward's own steps: (o [B, T, HV, V] in v's dtype, final state
    fp32, or fp64 for float64 inputs, in the options' layout). Same arguments as `kda_backward` without the
    gradients. Exact to the compute dtype: for gradient checks, not for speed."""
    from kda_trace.platform import triton_interpreted

    (q, k, v, g, beta), (B, T, H, HV, K, V, N), tables, acc, h0 = _prepare(q, k, v, g, beta, opts, initial_state,
                                                                          cu_seqlens)
    BK = max(16, triton.next_power_of_2(K))
    BV = _tile("bv", V, triton_interpreted())
    o = torch.empty(B * T, HV, V, dtype=acc, device=q.device)
    ht = torch.empty(N, HV, K, V, dtype=acc, device=q.device)
    _forward_exact_kernel[(N * HV * triton.cdiv(V, BV),)](
        q, k, v, g, beta, h0 if h0 is not None else ht, o, ht, tables[0],
        scale_arg(opts.resolved_scale(K), acc, q.device),
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, USE_H0=h0 is not None, num_warps=4 if BK * BV <= 2048 else 8)
    if opts.state_layout == "vk":
        ht = ht.transpose(-1, -2).contiguous()
    return o.view(B, T, HV, V).to(v.dtype), ht  # rounded by torch (nearest even)
