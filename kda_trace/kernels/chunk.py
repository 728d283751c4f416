"""Chunked KDA forward (prefill) in six Triton kernels (one fewer where the intra kernel computes the gate's sum,
another where the state pass writes O, two more with state_split).

Each sequence is cut into chunks of BT = 64 tokens (the last one may be shorter); a chunk is handled as
four sub-chunks of 16 rows. With G the inclusive cumulative sum of the log decay g inside a chunk
(per key channel, G <= 0 and non-increasing), the recurrence of KDA.md becomes (KDA.md, "The chunked
algorithm"):

    A_kk[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)        j < i
    A_qk[i, j] = scale  sum_d q_id k_jd exp(G_id - G_jd)        j <= i
    X = (I + A_kk)^-1,  W = X (beta k exp(G)),  U = X (beta v)
    per chunk, in order:  V_new = U - W S
                          O     = (scale q exp(G)) S + A_qk V_new
                          S     = diag(exp(G_last)) S + (k exp(G_last - G))^T V_new

Kernels, in launch order:
1. `_gate_cumsum_kernel`, per (chunk, value head): gate (precomputed, unbounded or safe), cumulative sum
   G (fp32, in log2 units with the launch setting `exp2`, the default), and with `l2_in_intra` off the q/k
   L2-norm factors 1 / sqrt(sum x^2 + 1e-6) (by default kernel 2 computes them). With `gate_in_intra` (the default
   for a precomputed gate) not launched: kernel 2's program does this for its chunk first.
2. `_intra_chunk_kernel`, per (chunk, value head): A_qk (bf16), A_kk (fp32 scratch) and q exp(G) (bf16,
   without the scale and L2-norm factors, which kernel 5 or 6 applies), and with `kg_in_intra` kernel 4's
   operands beta k exp(G) and k exp(G_last - G) (bf16), its four 16-row blocks one after the other (the columns
   before each block and the 16x16 diagonal block); with `intra_one_launch` off, `_intra_kernel` does one block
   per launch. With `discard_g` (where no later kernel reads G but its last rows) it then drops its G rows from L2.
3. `_solve_kernel`, per (chunk, value head): X = (I + A_kk)^-1 by 16x16 blocks in registers (the diagonal
   inverses as (I - L)(I + L^2)(I + L^4)(I + L^8)), stored as bf16.
4. `_wu_kernel`, per (chunk, value head): W, U (and k exp(G_last - G) with `kg_in_intra` off, q exp(G) with
   `qg_in_intra` off; kernel 2 writes them otherwise).
5. `_state_kernel`, per (sequence, value head, V-tile), sequential over the sequence's chunks: the state
   at every chunk start (bf16, for kernel 6; also in fp32 in the caller's layout when asked, for prefix
   caching), V_new, and the final state; from 64 (sequence, head) pairs on also O (launch setting
   `out_in_state`), and then kernel 6 is not launched and neither h nor V_new is stored. For long sequences
   of few heads (`state_split`) kernels 5a and 5b first find every segment's start state, then kernel 5 runs
   the segments of a sequence in parallel. Where it does not compute O it loads each chunk's last G row (the
   decay of S) one step ahead (`state_prefetch`), off the sequential chain.
6. `_output_kernel`, per (chunk, value head, V-tile): O.
The launch settings in LAUNCH (see the comment there) are chosen by A/B timings on an H100 and an H200.

Decays are taken relative to a row inside the chunk: exp(G_i - G_a) with the anchor row a at or before row
i (A_qk, A_kk), exp(G) from the chunk start (W, q exp(G)), exp(G_last - G_j) (the state update, read only by
later chunks). Every exp argument is <= 0, except one bounded case: the 16x16 diagonal blocks of A_kk / A_qk
are tensor-core products (x_i exp(G_i - G_a)) . (k_j exp(G_a - G_j)). By default (launch setting
`intra_one_anchor`) a = the block's row 8, as fla's safe-gate path: one product per block, with exp arguments
up to |G_i - G_8| either way; else a = the first row of the 8-row half that holds column j (two products: rows
scaled to the block's first row, and rows scaled to their own half's first row; exp(G_a - G_j) >= 1). A factor
is used only where its exp argument is <= MAX_EXP (= 60, so nothing overflows fp32). Where a gate can pass that
(a strong unbounded or precomputed gate), a block whose rows read a column beyond it takes another form (launch
setting `intra_fallback`): for a gate computed in the op, the block's range is read first (three G rows: every
g <= 0) and a block past it is taken at nested anchors instead (`_nested_diag_tile`: four tensor-core products
per side, every factor <= 1, exact for any gate); for a precomputed gate, rows are checked as the products are
made and a row past the range takes an exact element-wise sum with exp(min(G_i - G_j, 0)) afterwards. The "safe"
gate keeps every block within range by construction and skips that check: with one anchor where lower_bound >=
-7.5 (8 steps * 7.5 = 60), with two where lower_bound >= -8.57 (7 steps).
With two anchors every anchor row is at or before the row it serves, so no output depends on later tokens' gates,
bit for bit. With one, rows 0-7 of a block are rounded relative to G at its row 8: exact in real arithmetic, but
their outputs move by rounding (tf32's on the GPU) with the gates of the block's later rows up to row 8 (and,
where the range is checked, whether such a row takes the exact path can depend on them).

Dot precisions (say where accuracy is spent):
- A_kk, A_qk blocks: tf32 (fp32 operands scaled by the decays).
- the triangular solve (16x16 diagonal inverses as a product of powers, block merges): one tf32 product each, its
  operands rounded to the nearest tf32 first ("tf32_rn": the tensor cores truncate fp32 operands) and the identity
  kept out of the products (solve_peel), which leaves X as close to float64 as tf32x3 does once X is rounded to
  bf16 after it (launch settings solve_inv_precision, solve_merge_precision, solve_peel); with the chunk matrices
  kept for the backward (`saved`, fp32 X) tf32x3 (three tf32 tensor-core products with the low parts, about fp32
  accuracy).
- W, U (X rounded to bf16 times bf16 operands), the state pass (W S, k^T V_new with S and V_new rounded to
  bf16) and the output (q exp(G) S, A_qk V_new): bf16 tensor cores, fp32 accumulation. The state S itself
  is kept in fp32 between chunks.

Addresses: the int64 part (a chunk's first row times the row stride) is a scalar base pointer, offsets
inside a tile are small int32 tensors; every load is masked. So any K, V <= 256 (powers of two or not),
any sequence length >= 1 and any total size (past 2^31 elements) work.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
import triton
import triton.language as tl

from kda_trace.kernels.common import (
    BETA_CODES,
    GATE_CODES,
    beta_value,
    check_inputs,
    dot_precision,
    log_decay,
    register_cap,
    sequence_lengths,
)
from kda_trace.kernels.options import KDAOptions
from kda_trace.platform import triton_interpreted

BT = 64  # chunk length
BC = 16  # sub-chunk length (the diagonal blocks of the solve)
SOLVE_PRECISION = tl.constexpr("tf32x3")  # 3 tf32 MMAs, about fp32 accuracy: the kept fp32 X, the backward, 5b
MAX_EXP = 60.0  # largest positive exp argument allowed in a diagonal block (e^60 * |x| * |k| * K << 3e38)

# Launch settings: warps per program, K/V tiles, pipelining depths (3 is Triton's default), and the state pass's
# V-tile and depth (None picks by the number of (sequence, head) pairs, see _state_launch). bench_chunk.py --sweep
# and --ab time them; ptxas numbers below: benchmarks/compile_sm90.py --forward on the K3 shape (triton 3.9 here; the
# GPUs run 3.6). Ratios: bench_chunk.py --ab (torch 2.11, triton 3.6; 7 alternating rounds, medians), the time
# without a setting over the time with it, so > 1: the setting is faster (K3 = 96 heads x 8192, safe gate + L2 norm;
# "the six shapes": those of benchmarks/RESULTS.md's prefill table), each with its device. The CPU tests run each setting below against float64 and
# against the other side.
# - l2_in_intra: the intra kernel computes the q/k L2-norm factors of its own rows, so the gate kernel does not
#   read q and k. H100: 1.051 on K3 (rounds differently: o RMS-rel 1.8e-5 from the gate kernel's norms).
# - exp2: G is kept in log2 units (the gate kernel folds log2(e) into the cumulative sum), so every decay is one
#   ex2 instead of a multiply and an ex2 (fla #867); the range limit MAX_EXP is scaled to match. Intra blocks 2
#   and 3: 184 and 193 registers against 255 (block 3 spilling). H100: 1.000-1.012 (0.999 on 16 x 4096 packed).
# - wu_bk = wu_bv = 64 on 4 warps (fla's W/U tiles): H100 1.014 on K3 against 32, 32 on 8 warps, 1.00 elsewhere.
# - out_bv=128 on 4 warps: q exp(G) and A_qk read once per chunk at V = 128. H100: 1.008-1.009 against 64 on 8.
# - out_in_state (None: from 64 (sequence, head) pairs on, K <= 128, with 64-wide V-tiles; _state_launch): the
#   state pass computes each chunk's output while S and V_new are in its registers, so neither the bf16
#   chunk-start states (512 bytes per token and head at K = V = 128) nor V_new go through memory and the output
#   kernel is not launched. The cost: the output's loads and two products join the sequential pass. H100:
#   1.05-1.13 from 64 to 512 pairs, 0.54-0.86 at 8 to 32 pairs.
# - intra_one_launch: kernel 2's four blocks of a chunk in one program, one after the other, instead of four
#   launches: the earlier rows that a block reads as columns (k and the fp32 G: about 1.1 of the intra kernel's
#   2.4 KB per token and head at K = 128) were just read by the same program, so they come from L1/L2 instead of
#   DRAM; 4x fewer programs. Bit-identical. H100: 1.014 on K3; 0.997-1.000 (within the rounds' spread) on 32 x
#   16384, 8 x 131072 and 16 x 4096 packed.
# - state_split (None: _split_launch picks; 0: off; else chunks per segment; K <= 128): the state pass split into
#   segments of a sequence (kernels 5a, 5b; see there), for long sequences with few heads, where the sequential
#   pass is the bound (8 heads x 131072 tokens: 2048 dependent chunk steps per program). Up to 3x the state
#   pass's work (5a skips a sequence's last segment and the [K, K] map of its first) and the memory of three fp32
#   [K, V] or [K, K] tensors per segment and value head. Kernel 5 then picks its tiles and out_in_state by the
#   number of segments (chains) instead of sequences. H100, segments of 64 chunks: 1.375 at 8 x 131072, 1.082 at
#   8 x 16384, 0.999 at 32 x 16384; from 32 pairs on it loses (0.95-0.98 at 32 pairs with 16- or 32-chunk
#   segments, 0.88 on K3), hence _split_launch's limits.
#   split_bv: kernel 5a's tile width (wide: W and k exp(G_last - G) are read once per tile, and there are many
#   segments to fill the GPU). scan_warps: kernel 5b's warps (ptxas, K = 128, BV 16: 4 warps spill 984 bytes
#   holding the [K, K] fp32 map, 8 warps none).
# - qg_in_intra: kernel 2 writes q exp(G) (from the q and G rows it loads anyway, times exp(G) of the block's
#   first row), without the scale and L2-norm factors, which are not known until the end of its K loop; kernel
#   5 or 6 applies them to the rows of (q exp(G)) S. Kernel 4 then reads neither q nor the q norms and writes
#   no q exp(G): about 0.25 KB per token and head less traffic in all (fla's W/U kernel does not touch q
#   either). Rounds differently (q exp(G) is rounded to bf16 before the factors). H100: 1.077 on K3, 1.058 on
#   32 x 16384.
# - kg_in_intra (None: on unless kernel 2 computes the L2-norm factors; _kg_in_intra): kernel 2 also writes
#   beta k exp(G) and k exp(G_last - G) of its rows (bf16, with the W/U kernel's operations: the same bits), so
#   kernel 4 reads neither k nor the fp32 G. H100: 1.020-1.028 on the five shapes without the L2 norm in the op
#   (W/U 368 -> 217 us, intra 603 -> 727 at 32 x 16384); 0.993 on K3, where the norm factors need a pass of
#   their own over k first.
# - gate_in_intra (None: on for a precomputed gate; _gate_in_intra): kernel 2's program first does kernel 1's work for
#   its chunk (G, and the norm factors with l2_in_intra off) and its blocks then read G back from the caches; kernel 1
#   is not launched. The same bits. H100: 1.016-1.021 on the five shapes with a precomputed gate, 0.989 on K3.
# - solve_inv_precision, solve_merge_precision = "tf32_rn" and solve_peel (tf32x3 only with the kept matrices): the
#   solve's products (the diagonal inverses' chain of six, the merges) in one tf32 MMA instead of three, X rounded
#   to bf16 for the W/U kernel right after. The tensor cores truncate an fp32 operand to tf32
#   (measured on the H200, triton 3.6), so "tf32_rn" rounds the operands to the nearest tf32 first (`_tf32_rn`:
#   half truncation's error and without its bias), and solve_peel keeps the identity out of the products (X (I + M)
#   as I + N + M + N M with N = X - I, X_II B as B + N_II B, A X_JJ as A + A N_JJ), so that tf32 rounds only the
#   small terms, not X's entries. X's error after its bf16 rounding is then tf32x3's +0.00% (bench_chunk.py's
#   decays) and +0.08% (weak decays), against +6.6% and +13% with plain "tf32" (a CPU estimate);
#   on the GPU (bench_chunk.py --f64, 8 x 4096 and 4 x 16384) o and the state within 0.4% of the tf32x3 solve's,
#   the worst token -2.6% to +1.1% (as far as rounding alone moves it: the tf32x3 solve peeled moves it by -0.4% to
#   +0.7%). Against the tf32x3 solve: H200 1.034 (32 x 16384), 1.032 (K3); the peel and the rounding cost 0.5% and
#   0.7-0.8% of that (ptxas, triton 3.9: 141 -> 194 registers; PTX cvt.rna.tf32 instead of the bit operations: 0.3%
#   and 0.4%). solve_power_precision (None: solve_inv_precision) sets the powers L^2, L^4, L^8 of the diagonal
#   inverses apart (never timed: ptxas gave it 255 registers).
# - discard_g (None: on where it applies; _discard_g): kernel 2 drops its G rows but the last from L2 after its blocks
#   (PTX discard.global.L2: no write-back to DRAM of 32 KB per chunk and head at K = 128) where no later kernel reads
#   G. The same bits. H100: 1.004-1.005 (32 x 16384, 16 x 2 x 16384, 96 x 8192).
# - intra_stream: kernel 2 stores its outputs for later kernels (A_qk, A_kk, q exp(G), beta k exp(G), k exp(G_last -
#   G)) with the streaming cache hint (.cs: evict first) and loads the gate input in its prologue evict_first, so
#   that the G and k rows its blocks read back stay in L2. The same bits. H100 (with discard_g and the tf32 solve):
#   1.026 (16 x 2 x 16384), 1.030 (32 x 16384), 1.049 (96 x 8192), 1.042 (16 x 4096 packed), 1.029 (8 x 131072),
#   1.001 (K3, where kernel 1 computes G).
# - intra_one_anchor (_intra_anchors): the diagonal blocks at one anchor, their row 8: two products per K-tile
#   instead of four; no range check where the safe gate bounds the gates (lower_bound >= -7.5), else range-checked
#   at run time row by row. Rounds differently (o 1.3e-3 RMS-rel from the two anchors on K3; the tests hold it to the
#   two anchors' error against float64 both ways). Alone 0.3% (K3) and 0.6% (32 x 16384, safe gate) faster on the
#   H200: the kernel is latency-bound (Nsight Compute on K3, uncapped: 2 warps per scheduler, 37% of issue slots busy), not
#   bound by its products. With fewer accumulators live it takes a register cap (intra_maxnreg None: `_intra_cap`)
#   and block 3's earlier columns as a 32- and a 16-wide tile (intra_off_tail None: `_off_tile`): H200 1.034 on K3,
#   1.026 on 32 x 16384 with the safe gate and L2 norm. Range-checked and uncapped: H200 1.016 (32 x 16384,
#   96 x 8192) and 1.018 (16 x 2 x 16384) against two anchors with precomputed gates.
# - state_prefetch (None: `_state_prefetch`, where O is not in the pass): kernel 5 loads each chunk's last G row one
#   step ahead. It feeds no product, so Triton would issue a plain load of it after the step's first product (TTGIR
#   of Triton 3.9 on the CPU; the GPU's 3.6 behaves the same), and every step of the chain through S would wait for
#   it. The same bits. H200: 32 x 16384 1.030 (1.596 -> 1.549 ms), 16 x 2 x 16384 1.032; with O in the pass
#   0.997-0.999 (K3, 96 x 8192, 8 x 131072; measured with its q row factors loaded ahead as well), so not there.
# - intra_precision ("tf32"), wu_precision ("tf32_rn"): the intra kernel's products (A_qk, A_kk and, with the kept
#   matrices, the backward's P and Q) and the W/U kernel's fp32 W and U (save_states: for the backward) in plain
#   tf32 (the tensor cores truncate fp32 operands, a bias toward zero), "tf32_rn" (rounded to nearest first,
#   `_tf32_rn`) or "tf32x3". H200, bf16 inputs, the backward's gradients against float64 (bench_backward.py
#   --accuracy), fla's layer configuration / the safe gate: W and U in tf32_rn dq 1.84e-3 -> 1.73e-3 / 1.88e-3 ->
#   1.77e-3, dk 2.02e-3 -> 1.83e-3 / 2.06e-3 -> 1.89e-3, dg 2.02e-3 -> 1.89e-3 / 2.23e-3 -> 1.96e-3, dA_log 1.79e-3
#   -> 1.14e-3 / 1.53e-3 -> 0.96e-3, ddt_bias 2.11e-3 -> 2.00e-3 / 1.94e-3 -> 1.68e-3 (with backward.LAUNCH
#   ["diag_balance"] on), fwd+bwd within the rounds' spread (32 x 16384 layer 12.07-12.17 against 12.11-12.20 ms);
#   the intra kernel's in tf32_rn (layer, balance off): every gradient within 1% but dh0 (1.60e-4 -> 1.50e-4).
# - intra_fallback (None: `_intra_fallback`): how the range-checked intra kernel takes a diagonal block past MAX_EXP.
#   "inline" (None's choice for a gate computed in the op): the block's range read first, from its first, row-8 and
#   last G rows where every g <= 0 (else from every row), and a block past it at nested anchors (`_nested_diag_tile`)
#   instead of at one; "elementwise" (None's for a precomputed gate): one anchor, row by row checked, the rows past
#   the range again element-wise (`_exact_diag_blocks`). H200, the forward in fla's layer configuration (73% of the
#   blocks past the range): 32 x 16384 1.090 (2.420 -> 2.221 ms), 16 x 4096 packed 1.000; with a precomputed gate
#   (every row read for the range, few blocks past it) inline loses, 0.938 at 32 x 16384. Against float64
#   (bench_chunk.py --f64 8x4096, precomputed gate, inline forced, H200): o and state 3.432e-3 and 2.444e-3 either way;
#   weak decays 4.960e-3 / 4.305e-3 against 4.958e-3 / 4.292e-3. The nested form after the one-anchor products instead
#   of element-wise: 0.986 (layer, 32 x 16384).
# Slower alternatives (the same ratios, < 1: the alternative is slower; their diffs are in git history):
# - H100: the solve inside the W/U kernel 0.693 on K3; a state pass one product deep per chunk 0.800 on 8 x 131072;
#   wu_stages=2 0.990, intra_stages=2 0.970, intra_warps=4 0.945 (K3); solve_warps=2 0.953 / 0.946, 4 0.866 (32 x
#   16384 / K3); inv_in_intra (kernel 2 also inverting its diagonal blocks of A_kk, the solve only merging) 0.711 /
#   0.805; the solve at the end of the one-launch intra program (its A_kk read back from the caches) 0.699 / 0.659;
#   decay_in_gate (the gate kernel writing q exp(G), k exp(G_last - G) and beta k exp(G) while G is in its
#   registers, so that the W/U kernel reads neither q, k nor G; gate_bk=32 not to spill) 0.960 / 0.963; the gate
#   and its cumulative sum inside the intra kernel, each 16-row block continuing the sum from its predecessor's G
#   (kernel 1 not launched): 0.946 / 0.843, with intra_bk 16 0.954 / 0.899, 0.949-0.954 on 16 x 4096 packed and 8 x
#   131072 (gate_in_intra does the whole chunk's sum first, apart from the blocks' loops); pipelined parts (every
#   sequence cut into 2-8 parts, each part's state pass and output on a side stream beside the next part's kernels
#   1-4): 0.90-0.98, 0.81 on 8 x 131072, as the state pass at 32 pairs holds most of every SM's shared memory and
#   registers while it runs, so nothing runs beside it at speed (seen in a timeline of the kernels).
# - H200 (K3 unless named): intra_split (two programs per chunk, the k side and the q side of the blocks): 0.770,
#   32 x 16384 0.729, the loads, exponentials and column operands both sides need being most of the kernel's time;
#   intra_kouter (the K loop outside the four blocks, each row loaded once per K-tile, the block pairs from
#   registers; 20 accumulators, spills): 0.946 (1.006 with intra_bk=16), 32 x 16384 0.846 (0.942); intra_warps=4
#   0.874, intra_stages=2 0.979, intra_bk=64 0.660 (32 x 16384); intra_stages=1 0.951 (32 x 16384 0.961), with
#   intra_bk=16 0.933 (0.884); kg_in_intra with l2_in_intra=False 0.980, and with gate_in_intra 0.974; gate_in_wu
#   (kernel 4 computing G from the bf16 gate input instead of reading the fp32 G) 0.967, 0.945 with gate_in_intra;
#   wu_warps=8, wu_bk=128 1.000; wu_stages=1 1.016 but 32 x 16384 0.988; wu_bk=wu_bv=32 0.988, with wu_maxnreg=104
#   0.991; gate_warps=8 0.973, gate_warps=2 0.964, gate_bk=32 0.991; one anchor range-checked under the intra cap
#   0.958-0.973 with precomputed gates, uncapped with the tail tiles 0.992; state_split=64 0.964 (32 x 16384), 0.982
#   (16 x 2 x 16384); state_bv=32 0.849 (32 x 16384); state_bv=128 with state_warps=8 0.907 (with 2 stages 0.962);
#   out_in_state=False 0.920; solve_warps=2 0.979; state_l2_ahead (the state pass asking L2 for the next chunk's
#   tiles a step ahead, PTX prefetch.global.L2) 0.996, 16 x 4096 packed 1.016, 32 x 16384 0.932; loads ahead for
#   the intra kernel's rows that feed no product (G's last row, block 0's first) 1.000-1.003, for the W/U kernel's
#   G row 0.989 (16 bytes of spills under its cap); tensor descriptors (TMA) for the intra kernel's q, k (and G)
#   rows 0.990 / 0.979 (32 x 16384 / K3), with G 0.892 / 0.958.
LAUNCH = {
    "gate_warps": 4, "gate_bk": 64, "l2_in_intra": True,
    "intra_warps": 2, "intra_bk": 32, "intra_stages": 3, "solve_warps": 1,
    "wu_warps": 4, "wu_bk": 64, "wu_bv": 64, "wu_stages": 3,
    "state_warps": 4, "state_stages": None, "state_bv": None,
    "out_warps": 4, "out_bv": 128,
    "exp2": True, "out_in_state": None, "state_split": None, "split_bv": 64, "scan_warps": 8,
    "intra_one_launch": True, "qg_in_intra": True, "kg_in_intra": None, "gate_in_intra": None,
    "discard_g": None, "solve_inv_precision": "tf32_rn", "solve_merge_precision": "tf32_rn", "intra_stream": True,
    "solve_power_precision": None, "solve_peel": True, "intra_one_anchor": True,
    "intra_off_tail": None, "state_prefetch": None, "intra_precision": "tf32", "wu_precision": "tf32_rn",
    "intra_fallback": None,
}
# Register caps (`maxnreg`, 0: ptxas's choice) per kernel: fewer registers, more programs resident per SM, perhaps
# spills (benchmarks/compile_sm90.py --forward reports both). wu_maxnreg None: `_wu_cap`; intra_maxnreg None:
# `_intra_cap`; solve_maxnreg None: `_solve_cap` (168 for the tf32 solve: H200 1.006-1.010 on the six shapes, the same
# bits). gate_maxnreg 80 (96 registers uncapped: 5 programs of 4 warps per SM, 6 capped; ptxas 4 bytes of spills),
# H200, the same bits: K3 1.005 (twice), 32 x 16384 with the safe gate and L2 norm in the op 1.004; at 64 (8
# programs) 1.001. Slower (H100, K3 / 32 x 16384): intra at 168 0.968 / 1.006, at 128 0.917 / 0.922; W/U at 128
# 0.973 / 0.986; the state pass at 168 0.869 / 0.997; the tf32x3 solve at 128 0.938 / 0.949.
LAUNCH.update({"gate_maxnreg": 80, "intra_maxnreg": None, "solve_maxnreg": None, "wu_maxnreg": None, "state_maxnreg": 0,
               "out_maxnreg": 0})
SPLIT_CHUNKS, SPLIT_MAX_PAIRS, SPLIT_MIN_CHUNKS = 64, 16, 256  # _split_launch
LOG2E = tl.constexpr(1.4426950408889634)  # G in log2 units with the exp2 variant: 2^(G log2 e) = e^G

_DEFAULT_OPTIONS = KDAOptions()


@triton.jit
def _bf16(x, INTERPRET: tl.constexpr):
    """x rounded to bf16 (nearest even). Triton 3.9's interpreter truncates fp32 -> bf16 instead, which
    biases every rounding the same way; there the rounding is done on the bits first (finite x)."""
    if INTERPRET:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    """a @ b for bf16 operands with fp32 accumulation (tensor cores). Triton 3.9's interpreter computes
    bf16 dots wrongly, so there the (already bf16-rounded) operands are multiplied in fp32 instead."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _exp(x, EXP2: tl.constexpr):
    """e^x, or 2^x when G is kept in log2 units (the launch setting exp2)."""
    if EXP2:
        return tl.exp2(x)
    else:
        return tl.exp(x)


@triton.jit
def _chunk_rows(cu_seqlens, chunk_indices, i_c, BT: tl.constexpr):
    """(first row of chunk i_c, its number of valid rows (1..BT)) as int64."""
    i_n = tl.load(chunk_indices + i_c * 2).to(tl.int64)
    i_t = tl.load(chunk_indices + i_c * 2 + 1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    r0 = bos + i_t * BT
    return r0, tl.minimum(eos - r0, BT)


# Addressing, in every kernel: the int64 part (first row of the chunk times the row stride, plus the head)
# goes into a scalar base pointer; offsets inside a tile (< BT rows) are small int32 tensors. Full int64
# offset tensors would cost two registers per element and spill.


# ----------------------------------------------------------------------------------------------------
# 1. gate, cumulative sum, L2-norm factors
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _l2_factors(q, k, rq, rk, r0, n, i_h, i_hv, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
                BT: tl.constexpr, BK: tl.constexpr):
    """1 / sqrt(sum x^2 + 1e-6) of the chunk's q and k rows, stored in rq, rk ([T, HV])."""
    o_t = tl.arange(0, BT)
    m_r = o_t < n
    q += (r0 * H + i_h) * K
    k += (r0 * H + i_h) * K
    ss_q = tl.zeros([BT], dtype=tl.float32)
    ss_k = tl.zeros([BT], dtype=tl.float32)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m = m_r[:, None] & (o_k < K)[None, :]
        off = o_t[:, None] * (H * K) + o_k[None, :]
        b_q = tl.load(q + off, mask=m, other=0.0).to(tl.float32)
        b_k = tl.load(k + off, mask=m, other=0.0).to(tl.float32)
        ss_q += tl.sum(b_q * b_q, axis=1)
        ss_k += tl.sum(b_k * b_k, axis=1)
    r_q = 1.0 / tl.sqrt(ss_q + 1e-6)
    r_k = 1.0 / tl.sqrt(ss_k + 1e-6)
    tl.store(rq + (r0 * HV + i_hv) + o_t * HV, r_q, mask=m_r)
    tl.store(rk + (r0 * HV + i_hv) + o_t * HV, r_k, mask=m_r)


@triton.jit(do_not_specialize=["lower_bound"])
def _gate_cumsum_kernel(
    g, A_log, dt_bias, G, q, k, rq, rk, cu_seqlens, chunk_indices, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    GATE: tl.constexpr, L2NORM: tl.constexpr, EXP2: tl.constexpr,
):
    """`_gate_chunk` of one (chunk, value head)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    _gate_chunk(g, A_log, dt_bias, G, q, k, rq, rk, lower_bound, i_hv, r0, n, H, HV, K, BT, BK, GATE, L2NORM, EXP2,
                False)


@triton.jit
def _gate_chunk(g, A_log, dt_bias, G, q, k, rq, rk, lower_bound, i_hv, r0, n,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                GATE: tl.constexpr, L2NORM: tl.constexpr, EXP2: tl.constexpr, STREAM: tl.constexpr):
    """G = the cumulative log decay of one (chunk, value head) of n rows from row r0 (times log2(e) with EXP2), and
    the q/k L2-norm factors (L2NORM: with the launch setting l2_in_intra off): kernel 1, or with gate_in_intra the
    start of kernel 2's program."""
    i_h = i_hv // (HV // H)
    o_t = tl.arange(0, BT)
    m_r = o_t < n
    g += (r0 * HV + i_hv) * K
    G += (r0 * HV + i_hv) * K
    if GATE != 0:
        b_A = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m = m_r[:, None] & m_k[None, :]
        off = o_t[:, None] * (HV * K) + o_k[None, :]
        b_g = tl.load(g + off, mask=m, other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
        if GATE != 0:
            x = b_g + tl.load(dt_bias + i_hv * K + o_k, mask=m_k, other=0.0).to(tl.float32)[None, :]
            # rows past the sequence end add nothing to the sum
            b_g = tl.where(m, log_decay(x, b_A, lower_bound, GATE), 0.0)
        if EXP2:
            b_g = b_g * LOG2E
        b_G = tl.cumsum(b_g, axis=0)
        tl.store(G + off, b_G, mask=m)

    if L2NORM:
        _l2_factors(q, k, rq, rk, r0, n, i_h, i_hv, H, HV, K, BT, BK)


# ----------------------------------------------------------------------------------------------------
# 2. intra-chunk: A_qk, A_kk; 3. X = (I + A_kk)^-1; 4. W, U, q exp(G), k exp(G_last - G)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _exact_diag_blocks(
    q, k, G, i0, n, BC: tl.constexpr, BK: tl.constexpr,
    SX: tl.constexpr, SG: tl.constexpr, K: tl.constexpr, EXP2: tl.constexpr,
):
    """P[i, j] = sum_d x_id k_jd exp(min(G_id - G_jd, 0)) for the 16 rows from i0 (of n valid chunk rows), with
    x = k (A_kk's block) and x = q (A_qk's), element-wise in fp32, no product of two exps (launch setting
    intra_fallback "elementwise"). Each K-chunk's tiles are loaded once and each decay serves both blocks.
    q, k: chunk-row-0 pointers with row stride SX; G: with row stride SG."""
    o_i = i0 + tl.arange(0, BC)
    m_i = o_i < n
    o_j = tl.arange(0, BC)
    kk = tl.zeros([BC, BC], dtype=tl.float32)
    qk = tl.zeros([BC, BC], dtype=tl.float32)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m = m_i[:, None] & m_k[None, :]
        b_k = tl.load(k + o_i[:, None] * SX + o_k[None, :], mask=m, other=0.0).to(tl.float32)
        b_q = tl.load(q + o_i[:, None] * SX + o_k[None, :], mask=m, other=0.0).to(tl.float32)
        g_i = tl.load(G + o_i[:, None] * SG + o_k[None, :], mask=m, other=0.0)
        for j in range(BC):
            m_kj = m_k & (o_k * 0 + i0 + j < n)
            b_kj = tl.load(k + (i0 + j) * SX + o_k, mask=m_kj, other=0.0).to(tl.float32)
            g_j = tl.load(G + (i0 + j) * SG + o_k, mask=m_kj, other=0.0)
            b_kw = b_kj[None, :] * _exp(tl.minimum(g_i - g_j[None, :], 0.0), EXP2)
            here = o_j[None, :] == j
            kk += tl.where(here, tl.sum(b_k * b_kw, axis=1)[:, None], 0.0)
            qk += tl.where(here, tl.sum(b_q * b_kw, axis=1)[:, None], 0.0)
    return kk, qk


@triton.jit
def _level_mask(S: tl.constexpr):
    """[16, 16]: the pairs (i, j) of level S of a 16-row diagonal block at nested anchors (`_nested_diag_tile`,
    backward_blocks.py's `_nested_level`): i in the second half of a group of 2 S rows, j in the first half of the
    same group."""
    o = tl.arange(0, 16)
    i = o[:, None]
    j = o[None, :]
    return (i // (2 * S) == j // (2 * S)) & (i % (2 * S) >= S) & (j % (2 * S) < S)


@triton.jit
def _nested_diag_tile(b_q, b_k, g_i, G, i0, n, o_k, m_k, SG: tl.constexpr, BC: tl.constexpr, EXP2: tl.constexpr,
                      PREC: tl.constexpr):
    """One K-tile's part of a diagonal block at nested anchors: (kk, qk) [16, 16], kk[i, j] = sum_d k_id k_jd
    exp(G_id - G_jd) for i > j and qk[i, j] the same with q's rows for i >= j, from the block's rows b_q, b_k
    (fp32) and their G rows g_i (zero on rows past n). The block's 16 rows split into groups of 2 S rows (S = 8, 4,
    2, 1), each at its anchor a, the group's row S: a pair (i, j) with i in a group's second half and j in its
    first weighs exp(G_i - G_a) exp(G_a - G_j), both arguments <= 0 whatever the gates (G does not increase). Every
    pair i > j is at exactly one level, that of the highest bit in which i and j differ, so four tensor-core
    products per side and the diagonal (weight 1) make the block, exact for any gate (the arguments clamped to
    <= 0, as `_exact_diag_blocks`' are, which only an increasing G would reach). G: the chunk's row 0 (row stride
    SG), for the anchor rows."""
    tl.static_assert(BC == 16)
    o_c = tl.arange(0, BC)
    m_i = (i0 + o_c < n)[:, None]
    kk = tl.zeros([BC, BC], dtype=tl.float32)
    qk = tl.zeros([BC, BC], dtype=tl.float32)
    for lv in tl.static_range(4):
        S = (BC // 2) >> lv  # a constexpr (lv is one)
        a = tl.minimum(i0 + (o_c // (2 * S)) * (2 * S) + S, n - 1)  # past n: only rows past n read it
        g_a = tl.load(G + a[:, None] * SG + o_k[None, :], mask=m_k[None, :], other=0.0)
        upper = ((o_c % (2 * S)) >= S)[:, None]
        e = tl.where(m_i, _exp(tl.minimum(tl.where(upper, g_i - g_a, g_a - g_i), 0.0), EXP2), 0.0)
        b_kc = tl.trans(tl.where(upper, 0.0, b_k * e))  # k_j exp(G_a - G_j), first halves
        e_r = tl.where(upper, e, 0.0)  # exp(G_i - G_a), second halves
        pairs = _level_mask(S)
        kk += tl.where(pairs, _pdot(b_k * e_r, b_kc, PREC, False), 0.0)
        qk += tl.where(pairs, _pdot(b_q * e_r, b_kc, PREC, False), 0.0)
    qk += tl.where(o_c[:, None] == o_c[None, :], tl.sum(b_q * b_k, axis=1)[:, None], 0.0)
    return kk, qk


@triton.jit
def _block_past_range(G, i0, n, BC: tl.constexpr, BK: tl.constexpr, SG: tl.constexpr, K: tl.constexpr,
                      MAX_EXP: tl.constexpr, MONOTONE: tl.constexpr):
    """Whether any G row of the 16-row block from i0 (of n valid chunk rows) is further than MAX_EXP from the
    block's row 8 in any channel, so that the one-anchor factors would pass MAX_EXP (launch setting intra_fallback
    "inline"). MONOTONE (a gate computed in the op: every g <= 0, so G does not increase down the rows): from the
    block's first, row-8 and last rows only; else from every row."""
    o_i = i0 + tl.arange(0, BC)
    m_i = o_i < n
    r8 = tl.minimum(i0 + BC // 2, n - 1)
    last = tl.minimum(i0 + BC - 1, n - 1)
    spread = tl.zeros([BC], dtype=tl.float32)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        g_8 = tl.load(G + r8 * SG + o_k, mask=m_k, other=0.0)
        if MONOTONE:
            g_0 = tl.load(G + i0 * SG + o_k, mask=m_k, other=0.0)
            g_l = tl.load(G + last * SG + o_k, mask=m_k, other=0.0)
            spread = tl.maximum(spread, tl.max(tl.maximum(g_0 - g_8, g_8 - g_l), axis=0))
        else:
            m = m_i[:, None] & m_k[None, :]
            g_i = tl.load(G + o_i[:, None] * SG + o_k[None, :], mask=m, other=0.0)
            spread = tl.maximum(spread, tl.max(tl.where(m, tl.abs(g_i - g_8[None, :]), 0.0), axis=1))
    return tl.max(spread, axis=0) > MAX_EXP


@triton.jit
def _tf32(x):
    """x (fp32) as the tensor cores take a tf32 operand: its low 13 mantissa bits dropped (truncated toward zero;
    NVIDIA H200, triton 3.6), for the interpreter, which multiplies in fp32."""
    return (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _tf32_rn(x):
    """fp32 x rounded to tf32 (10 fraction bits), to nearest, ties to even. A tf32 product on the tensor cores
    drops an fp32 operand's low 13 bits, a bias toward zero (Triton 3.6 rounds nothing before it; triton-lang/triton
    #4574) that sums over many tokens keep; rounded first, the errors take both signs. Bit operations (no PTX), so
    that the interpreter runs it too (tests/kernels/test_backward_chunked.py)."""
    u = x.to(tl.uint32, bitcast=True)
    u = (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _pdot(a, b, PREC: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b (fp32) with the products in PREC: "ieee", "tf32x3", "tf32" (operands truncated to tf32 by the tensor
    cores; emulated under the interpreter) or "tf32_rn" (operands first rounded to the nearest tf32, `_tf32_rn`,
    then one tf32 MMA, which takes them exactly)."""
    if PREC == "tf32_rn":
        return tl.dot(_tf32_rn(a), _tf32_rn(b), input_precision="tf32")
    elif INTERPRET and PREC == "tf32":
        return tl.dot(_tf32(a), _tf32(b), input_precision="ieee")
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _eye(BC: tl.constexpr):
    """The BC x BC identity (fp32)."""
    o_i = tl.arange(0, BC)
    return tl.where(o_i[:, None] == o_i[None, :], 1.0, 0.0)


@triton.jit
def _inverse_unit_lower(L, BC: tl.constexpr, PREC_POW: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
                        PEEL: tl.constexpr):
    """(I + L)^-1 for a strictly lower-triangular 16x16 L, the powers L^2, L^4, L^8 in PREC_POW and the products of
    the factors in PREC (the forward: the launch settings solve_power_precision and solve_inv_precision, tf32x3 with
    the kept matrices; the chunked backward's prep, kernels/backward_chunked.py: tf32x3, or "ieee" for float64).
    L is nilpotent (L^16 = 0), so (I + L)^-1 = (I - L)(I + L^2)(I + L^4)(I + L^8): six small products instead of
    15 dependent row steps of forward substitution (each of which needs two cross-thread reductions).
    With PEEL the identity stays out of the products (launch setting solve_peel): with N = X - I, X (I + M) =
    I + N + M + N M, so a tf32 product rounds only N M, not X's own entries (the same dots, a few more adds)."""
    eye = _eye(BC)
    L2 = _pdot(L, L, PREC_POW, INTERPRET)
    L4 = _pdot(L2, L2, PREC_POW, INTERPRET)
    L8 = _pdot(L4, L4, PREC_POW, INTERPRET)
    if PEEL:
        N = L2 - L - _pdot(L, L2, PREC, INTERPRET)
        N = N + L4 + _pdot(N, L4, PREC, INTERPRET)
        N = N + L8 + _pdot(N, L8, PREC, INTERPRET)
        return eye + N
    else:
        X = _pdot(eye - L, eye + L2, PREC, INTERPRET)
        X = _pdot(X, eye + L4, PREC, INTERPRET)
        return _pdot(X, eye + L8, PREC, INTERPRET)


@triton.jit
def _unit_dot(X, B, BC: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, PEEL: tl.constexpr):
    """X @ B for a unit lower-triangular 16x16 X (an inverted diagonal block); with PEEL as B + (X - I) B, so that
    a tf32 product does not round B's own entries (X - I is exact: X's diagonal is exactly 1)."""
    if PEEL:
        return B + _pdot(X - _eye(BC), B, PREC, INTERPRET)
    else:
        return _pdot(X, B, PREC, INTERPRET)


@triton.jit
def _dot_unit(A, X, BC: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, PEEL: tl.constexpr):
    """A @ X for a unit lower-triangular 16x16 X; with PEEL as A + A (X - I) (see `_unit_dot`)."""
    if PEEL:
        return A + _pdot(A, X - _eye(BC), PREC, INTERPRET)
    else:
        return _pdot(A, X, PREC, INTERPRET)


@triton.jit
def _inv_norm_at(r, rows, m, L2NORM: tl.constexpr):
    """1 / |x| at the given rows (computed by the gate kernel) when the kernel L2-normalises q and k, else 1."""
    if L2NORM:
        return tl.load(r + rows, mask=m, other=0.0)
    else:
        return tl.full(rows.shape, 1.0, tl.float32)


@triton.jit
def _beta_at(beta, rows, m, BETA: tl.constexpr):
    """beta for the given (masked) rows: as given, sigmoid(b) or 2 sigmoid(b); 0 on masked rows."""
    return tl.where(m, beta_value(tl.load(beta + rows, mask=m, other=0.0).to(tl.float32), BETA), 0.0)


@triton.jit
def _qg_row_factors(rq, scale, rows, m, HV: tl.constexpr, L2NORM: tl.constexpr):
    """scale times the q L2-norm factor (with L2NORM) of a chunk's rows (rq at the chunk's first row): the row
    factors of scale q exp(G), applied by kernel 4, or with qg_in_intra by kernel 5 or 6."""
    return scale * _inv_norm_at(rq, rows * HV, m, L2NORM)


@triton.jit
def _zero_unwritten(Ps, Qs, i_c, i_hv, n, HV: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """With SAVE: zeros into what `_intra_block` never writes of the chunk's P and A_qk slots (the blocks above the
    diagonal blocks, and the rows past n), so that the slots need no fill first."""
    Ps += (i_c * HV + i_hv) * (BT * BT)
    Qs += (i_c * HV + i_hv) * (BT * BT)
    o_c = tl.arange(0, BT)
    for i in tl.static_range(BT // BC):
        rows = i * BC + tl.arange(0, BC)
        m = (o_c[None, :] >= (i + 1) * BC) | (rows >= n)[:, None]
        zero = tl.zeros([BC, BT], dtype=Ps.dtype.element_ty)
        tl.store(Ps + rows[:, None] * BT + o_c[None, :], zero, mask=m)
        tl.store(Qs + rows[:, None] * BT + o_c[None, :], zero, mask=m)


@triton.jit(do_not_specialize=["scale"])
def _intra_kernel(
    q, k, beta, G, rq, rk, Akk, Aqk, cu_seqlens, chunk_indices, scale, QG, Ps, Qs, KB, KG,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, I: tl.constexpr, BJ: tl.constexpr,  # noqa: E741
    BETA: tl.constexpr, L2NORM: tl.constexpr, L2_HERE: tl.constexpr, QG_HERE: tl.constexpr, MAX_EXP: tl.constexpr,
    CHECK_RANGE: tl.constexpr, EXP2: tl.constexpr, INTERPRET: tl.constexpr, SAVE: tl.constexpr, KG_HERE: tl.constexpr,
    STREAM: tl.constexpr, ONE_ANCHOR: tl.constexpr, PREC: tl.constexpr, FALLBACK: tl.constexpr,
):
    """Block I of every (chunk, value head) (`_intra_block`): one launch per block index, one program per
    (chunk, value head); the blocks of a chunk are independent here (the solve is kernel 3)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    if SAVE and I == 0:
        _zero_unwritten(Ps, Qs, i_c, i_hv, n, HV, BT, BC)
    if I * BC < n:
        _intra_block(q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n, H, HV, K, BT, BC, BK, I, BJ,
                     BETA, L2NORM, L2_HERE, QG_HERE, MAX_EXP, CHECK_RANGE, EXP2, INTERPRET, SAVE, KG_HERE, STREAM, ONE_ANCHOR, PREC,
                     FALLBACK)


@triton.jit(do_not_specialize=["scale", "lower_bound"])
def _intra_chunk_kernel(
    q, k, beta, G, rq, rk, Akk, Aqk, cu_seqlens, chunk_indices, scale, QG, Ps, Qs, KB, KG,
    g, A_log, dt_bias, lower_bound,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
    BETA: tl.constexpr, L2NORM: tl.constexpr, L2_HERE: tl.constexpr, QG_HERE: tl.constexpr, MAX_EXP: tl.constexpr,
    CHECK_RANGE: tl.constexpr, EXP2: tl.constexpr, INTERPRET: tl.constexpr, SAVE: tl.constexpr, KG_HERE: tl.constexpr,
    STREAM: tl.constexpr, ONE_ANCHOR: tl.constexpr, PREC: tl.constexpr, FALLBACK: tl.constexpr,
    GATE_HERE: tl.constexpr, GATE: tl.constexpr, BKG: tl.constexpr, L2_IN_GATE: tl.constexpr, DISCARD_G: tl.constexpr,
    BJ3: tl.constexpr,
):
    """The four blocks of one (chunk, value head) in one program, one after the other (launch setting
    intra_one_launch): the rows that later blocks read again as columns come from the caches, not from
    DRAM as across four launches. With GATE_HERE (launch setting gate_in_intra) the program first does kernel 1's
    work for its chunk (`_gate_chunk`: G, and the norm factors with L2_IN_GATE), so that the blocks read G back
    from the caches and kernel 1 is not launched. Written out for BT = 4 * BC; the barriers make what one step
    stores (G, A_kk, and the L2-norm factors) visible to the threads of the next step."""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    if GATE_HERE:
        _gate_chunk(g, A_log, dt_bias, G, q, k, rq, rk, lower_bound, i_hv, r0, n, H, HV, K, BT, BKG, GATE,
                    L2_IN_GATE, EXP2, STREAM)
        tl.debug_barrier()
    if SAVE:
        _zero_unwritten(Ps, Qs, i_c, i_hv, n, HV, BT, BC)
    _intra_block(q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n, H, HV, K, BT, BC, BK, 0, BC, BETA,
                 L2NORM, L2_HERE, QG_HERE, MAX_EXP, CHECK_RANGE, EXP2, INTERPRET, SAVE, KG_HERE, STREAM, ONE_ANCHOR, PREC,
                 FALLBACK)
    tl.debug_barrier()
    if BC < n:
        _intra_block(q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n, H, HV, K, BT, BC, BK, 1, BC, BETA,
                     L2NORM, L2_HERE, QG_HERE, MAX_EXP, CHECK_RANGE, EXP2, INTERPRET, SAVE, KG_HERE, STREAM, ONE_ANCHOR, PREC,
                     FALLBACK)
    tl.debug_barrier()
    if 2 * BC < n:
        _intra_block(q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n, H, HV, K, BT, BC, BK, 2, 2 * BC,
                     BETA, L2NORM, L2_HERE, QG_HERE, MAX_EXP, CHECK_RANGE, EXP2, INTERPRET, SAVE, KG_HERE, STREAM, ONE_ANCHOR, PREC,
                     FALLBACK)
    tl.debug_barrier()
    if 3 * BC < n:
        _intra_block(q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n, H, HV, K, BT, BC, BK, 3, BJ3,
                     BETA, L2NORM, L2_HERE, QG_HERE, MAX_EXP, CHECK_RANGE, EXP2, INTERPRET, SAVE, KG_HERE, STREAM, ONE_ANCHOR, PREC,
                     FALLBACK)
    if DISCARD_G:
        tl.debug_barrier()
        _discard_l2_rows(G + (r0 * HV + i_hv) * K, n - 1, HV * K, K, BT)


@triton.jit
def _discard_l2_rows(x, rows, S: tl.constexpr, K: tl.constexpr, BT: tl.constexpr):
    """Drop the L2 lines of the fp32 rows 0..rows-1 (K elements each, row stride S) without writing them back
    to DRAM (PTX discard.global.L2): the data becomes undefined. For a scratch that no later kernel reads; K * 4
    bytes must be a whole number of 128-byte lines and x 128-byte aligned, so that no line holds other data."""
    NL: tl.constexpr = K // 32  # 128-byte lines per row
    o_r = tl.arange(0, BT)[:, None]
    o_l = tl.arange(0, triton.next_power_of_2(NL))[None, :]
    addr = (x + o_r * S + o_l * 32).to(tl.int64, bitcast=True)
    keep = ((o_r < rows) & (o_l < NL)).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p discard.global.L2 [$1], 128; mov.u32 $0, 0; }",
        "=r,l,r", [addr, keep], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _intra_block(
    q, k, beta, G, rq, rk, Akk, Aqk, QG, Ps, Qs, KB, KG, scale, i_c, i_hv, r0, n,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, I: tl.constexpr, BJ: tl.constexpr,  # noqa: E741
    BETA: tl.constexpr, L2NORM: tl.constexpr, L2_HERE: tl.constexpr, QG_HERE: tl.constexpr, MAX_EXP: tl.constexpr,
    CHECK_RANGE: tl.constexpr, EXP2: tl.constexpr, INTERPRET: tl.constexpr, SAVE: tl.constexpr, KG_HERE: tl.constexpr,
    STREAM: tl.constexpr, ONE_ANCHOR: tl.constexpr, PREC: tl.constexpr, FALLBACK: tl.constexpr,
):
    """Rows of the 16-row block I of chunk i_c (first row r0, n valid rows, n > 16 I): A_qk (bf16, into Aqk)
    and A_kk (fp32, into the chunk's [BT, BT] scratch Akk), the columns before the block (a tile of BJ columns, a
    power of two: BJ >= 16 I, or BJ = 32 for I = 3 with its last 16 columns in a second tile, `_off_tile`) and the
    16x16 diagonal block (at two anchors, or with ONE_ANCHOR at one); a constant I sizes the tiles to the block.
    With L2_HERE, the L2-norm factors of the block's rows are computed here and stored for the later blocks (columns
    before the block) and for kernel 4. With QG_HERE (launch setting qg_in_intra) it also stores q exp(G) of the block's
    rows, without the scale and L2-norm factors (not known until the end of the K loop: kernel 5 or 6 applies
    them to the rows of (q exp(G)) S), so that kernel 4 need not read q. With SAVE (`kda_chunk`'s `saved`), also
    P = A_kk without beta and A_qk without the scale, fp32, into the chunk's [BT, BT] slots of Ps and Qs, for the
    backward (kernels/backward_chunked.py computes the same matrices when they are not given). With KG_HERE (launch
    setting kg_in_intra) it also stores the W/U kernel's operands of the block's rows, beta k exp(G) (KB) and
    k exp(G_last - G) (KG), both bf16 and with k's L2-norm factor (then computed before the products), so that
    kernel 4 reads neither k nor G."""
    i_h = i_hv // (HV // H)
    i0 = I * BC
    CS: tl.constexpr = ".cs" if STREAM else ""  # streaming stores: outputs that later kernels read from DRAM
    # chunk-row-0 pointers; row strides SX (q, k), SG (G), SA (A_qk), HV (beta, r)
    SX: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    SA: tl.constexpr = HV * BT
    q += (r0 * H + i_h) * K
    k += (r0 * H + i_h) * K
    G += (r0 * HV + i_hv) * K
    Aqk += (r0 * HV + i_hv) * BT
    beta += r0 * HV + i_hv
    rq += r0 * HV + i_hv
    rk += r0 * HV + i_hv
    Akk += (i_c * HV + i_hv) * (BT * BT)
    QG += (r0 * HV + i_hv) * K
    KB += (r0 * HV + i_hv) * K
    KG += (r0 * HV + i_hv) * K

    o_c = tl.arange(0, BC)
    o_t = tl.arange(0, BJ)  # the columns before the block: o_t < i0 (BJ a power of two)
    # where i0 > BJ (I = 3: 48 columns, BJ = 32) the last BC of them in a tile of their own (no 64-wide tile)
    TAIL: tl.constexpr = I * BC > BJ
    tl.static_assert(I * BC <= BJ + BC)
    o_u = BJ + o_c
    o_i = i0 + o_c
    m_i = o_i < n

    # Columns before the block: one product, anchor = the block's first row (every exponent <= 0).
    # The 16x16 diagonal block: two anchors (see top).
    off_lo = tl.zeros([BC, BJ], dtype=tl.float32)  # sum_d x_id k_jd exp(G_id - G_jd), j < i0 (k and q)
    off_qlo = tl.zeros([BC, BJ], dtype=tl.float32)
    off_lo2 = tl.zeros([BC, BC], dtype=tl.float32)  # the tail's (TAIL)
    off_qlo2 = tl.zeros([BC, BC], dtype=tl.float32)
    kk_lo = tl.zeros([BC, BC], dtype=tl.float32)  # diagonal block, columns 0-7 (anchor row i0)
    qk_lo = tl.zeros([BC, BC], dtype=tl.float32)
    kk_hi = tl.zeros([BC, BC], dtype=tl.float32)  # diagonal block, columns 8-15 (anchor row i0 + 8)
    qk_hi = tl.zeros([BC, BC], dtype=tl.float32)
    spread = tl.zeros([BC], dtype=tl.float32)
    ss_q = tl.zeros([BC], dtype=tl.float32)  # sums of squares of the block's q / k rows (L2_HERE)
    ss_k = tl.zeros([BC], dtype=tl.float32)
    hi_row = tl.minimum(i0 + BC // 2, n - 1)  # (a block with <= 8 rows never uses it)
    # range-checked at one anchor and intra_fallback "inline": the block's range first, then its diagonal products
    # at one anchor or, past the range, at nested anchors
    INLINE: tl.constexpr = CHECK_RANGE and ONE_ANCHOR and FALLBACK != "elementwise"
    if INLINE:
        past = _block_past_range(G, i0, n, BC, BK, SG, K, MAX_EXP, FALLBACK == "inline_monotone")
    else:
        past = False
    if KG_HERE:  # the W/U operands need k's norm factors and beta inside the loop below
        if L2_HERE:
            for k0 in range(0, K, BK):
                o_k = k0 + tl.arange(0, BK)
                m_ik = m_i[:, None] & (o_k < K)[None, :]
                b_k = tl.load(k + o_i[:, None] * SX + o_k[None, :], mask=m_ik, other=0.0).to(tl.float32)
                ss_k += tl.sum(b_k * b_k, axis=1)
            rk_w = 1.0 / tl.sqrt(ss_k + 1e-6)
        else:
            rk_w = _inv_norm_at(rk, o_i * HV, m_i, L2NORM)
        beta_w = _beta_at(beta, o_i * HV, m_i, BETA)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m_ik = m_i[:, None] & m_k[None, :]
        b_q = tl.load(q + o_i[:, None] * SX + o_k[None, :], mask=m_ik, other=0.0).to(tl.float32)
        b_k = tl.load(k + o_i[:, None] * SX + o_k[None, :], mask=m_ik, other=0.0).to(tl.float32)
        if L2_HERE:
            ss_q += tl.sum(b_q * b_q, axis=1)
            if not KG_HERE:
                ss_k += tl.sum(b_k * b_k, axis=1)
        g_i = tl.load(G + o_i[:, None] * SG + o_k[None, :], mask=m_ik, other=0.0)
        g_c = tl.load(G + i0 * SG + o_k, mask=m_k, other=0.0)
        g_c8 = tl.load(G + hi_row * SG + o_k, mask=m_k, other=0.0)
        if INLINE:
            r_lo = _exp(tl.where(m_i[:, None], g_i - g_c[None, :], 0.0), EXP2)  # exp(G_i - G_c) <= 1
            if past:
                kk_t, qk_t = _nested_diag_tile(b_q, b_k, g_i, G, i0, n, o_k, m_k, SG, BC, EXP2, PREC)
            else:  # as below, every factor within range
                d = tl.where(m_i[:, None], g_i - g_c8[None, :], 0.0)
                e_row = _exp(tl.minimum(d, MAX_EXP), EXP2)
                k_col = tl.trans(b_k * _exp(tl.minimum(-d, MAX_EXP), EXP2))
                kk_t = _pdot(b_k * e_row, k_col, PREC, False)
                qk_t = _pdot(b_q * e_row, k_col, PREC, False)
            kk_hi += kk_t
            qk_hi += qk_t
        elif ONE_ANCHOR:
            # one anchor for the whole diagonal block, its row 8: both factors exact where |G_i - G_c8| <=
            # MAX_EXP, which the safe gate's bound promises (8 |g| <= MAX_EXP) and CHECK_RANGE checks below (the
            # clamps keep a broken promise finite). Entries above the diagonal (exp(G_i - G_j) >= 1, dropped
            # below by tl.where) may overflow to inf or NaN; the kept ones are products of x_i k_j exp(<= 0).
            d = tl.where(m_i[:, None], g_i - g_c8[None, :], 0.0)
            e_row = _exp(tl.minimum(d, MAX_EXP), EXP2)  # exp(G_i - G_c8)
            k_col = b_k * _exp(tl.minimum(-d, MAX_EXP), EXP2)  # k_j exp(G_c8 - G_j)
            if CHECK_RANGE:
                spread = tl.maximum(spread, tl.max(tl.abs(d), axis=1))
                # the columns before the block and q exp(G) need exp(G_i - G_c) exact even where e_row is clamped
                r_lo = _exp(tl.where(m_i[:, None], g_i - g_c[None, :], 0.0), EXP2)
            else:
                r_lo = e_row * _exp(g_c8 - g_c, EXP2)[None, :]  # exp(G_i - G_c) <= 1
        else:
            # the anchors: a(i) = g_c (the block's first row) for rows 0-7 of the block, g_c8 (its row 8) for rows
            # 8-15
            upper = (o_c >= BC // 2)[:, None]
            d = tl.where(m_i[:, None], g_i - tl.where(upper, g_c8[None, :], g_c[None, :]), 0.0)  # G_i - a(i) <= 0
            spread = tl.maximum(spread, tl.max(-d, axis=1))
            e_row = _exp(d, EXP2)  # exp(G_i - a(i)) <= 1
            k_col = b_k * _exp(tl.minimum(-d, MAX_EXP), EXP2)  # k_j exp(a(j) - G_j), exact where -d <= MAX_EXP
            # exp(G_i - G_c) <= 1 for every row: e_row, times exp(g_c8 - g_c) on rows 8-15
            r_lo = e_row * tl.where(upper, _exp(g_c8 - g_c, EXP2)[None, :], 1.0)
        kr_lo = b_k * r_lo
        qr_lo = b_q * r_lo
        if KG_HERE:  # as `_wu_kernel` computes them from k and G, operation for operation
            g_last = tl.load(G + (n - 1) * SG + o_k, mask=m_k, other=0.0)
            b_kn = b_k * rk_w[:, None]
            tl.store(KB + o_i[:, None] * SG + o_k[None, :],
                     _bf16(b_kn * (beta_w[:, None] * _exp(g_i, EXP2)), INTERPRET), mask=m_ik,
                     cache_modifier=CS)
            tl.store(KG + o_i[:, None] * SG + o_k[None, :],
                     _bf16(b_kn * _exp(tl.minimum(g_last[None, :] - g_i, 0.0), EXP2), INTERPRET), mask=m_ik,
                     cache_modifier=CS)
        if QG_HERE:  # q exp(G_i) = q exp(G_i - G_c) exp(G_c)
            tl.store(QG + o_i[:, None] * SG + o_k[None, :], _bf16(qr_lo * _exp(g_c, EXP2)[None, :], INTERPRET),
                     mask=m_ik, cache_modifier=CS)
        if not ONE_ANCHOR:
            # anchor g_c on both sides: right for the columns 0-7 of the block (any row)
            kk_lo += _pdot(kr_lo, tl.trans(k_col), PREC, False)
            qk_lo += _pdot(qr_lo, tl.trans(k_col), PREC, False)
        # anchor a(i) = a(j): right for columns 0-7 of rows 0-7 and columns 8-15 of rows 8-15 (every entry with
        # ONE_ANCHOR)
        if not INLINE:
            kk_hi += _pdot(b_k * e_row, tl.trans(k_col), PREC, False)
            qk_hi += _pdot(b_q * e_row, tl.trans(k_col), PREC, False)
        if I > 0:
            # earlier rows of the chunk, k_j exp(G_i0 - G_j) (<= 1); rows from i0 on are zeroed
            m_jk = (o_t < i0)[:, None] & m_k[None, :]
            b_kj = tl.load(k + o_t[:, None] * SX + o_k[None, :], mask=m_jk, other=0.0).to(tl.float32)
            g_j = tl.load(G + o_t[:, None] * SG + o_k[None, :], mask=m_jk, other=0.0)
            b_kj = b_kj * _exp(tl.where(m_jk, g_c[None, :] - g_j, 0.0), EXP2)
            off_lo += _pdot(kr_lo, tl.trans(b_kj), PREC, False)
            off_qlo += _pdot(qr_lo, tl.trans(b_kj), PREC, False)
            if TAIL:
                m_uk = (o_u < i0)[:, None] & m_k[None, :]
                b_ku = tl.load(k + o_u[:, None] * SX + o_k[None, :], mask=m_uk, other=0.0).to(tl.float32)
                g_u = tl.load(G + o_u[:, None] * SG + o_k[None, :], mask=m_uk, other=0.0)
                b_ku = b_ku * _exp(tl.where(m_uk, g_c[None, :] - g_u, 0.0), EXP2)
                off_lo2 += _pdot(kr_lo, tl.trans(b_ku), PREC, False)
                off_qlo2 += _pdot(qr_lo, tl.trans(b_ku), PREC, False)

    if ONE_ANCHOR:
        kk = kk_hi
        qk = qk_hi
    else:
        right = (o_c >= BC // 2)[None, :]
        kk = tl.where(right, kk_hi, kk_lo)
        qk = tl.where(right, qk_hi, qk_lo)
    if CHECK_RANGE and not INLINE:
        # One anchor: entry (i, j <= i) is exact where G_i - G_8 <= MAX_EXP (e_row) and G_8 - G_j <= MAX_EXP (k_col).
        # G does not increase, so both hold for every j <= i when row i is within range: G_8 - G_j <= 0 for j < 8,
        # <= G_8 - G_i for 8 <= j <= i. Two anchors: a column factor is exact where a(j) - G_j <= MAX_EXP; row i
        # reads the columns j <= i, and those of its own half are within range when row i is (spread_i <= MAX_EXP).
        ok = (spread <= MAX_EXP) | (o_c >= n - i0)
        if not ONE_ANCHOR:
            # rows 8-15 also read columns 0-7: they need row 7 (the last of them) within range too
            ok_lower = tl.min(tl.where(o_c < BC // 2, ok, True).to(tl.int32), axis=0) > 0
            ok = ok & ((o_c < BC // 2) | ok_lower)
        if tl.min(ok.to(tl.int32), axis=0) == 0:
            kk_exact, qk_exact = _exact_diag_blocks(q, k, G, i0, n, BC, BK, SX, SG, K, EXP2)
            kk = tl.where(ok[:, None], kk, kk_exact)
            qk = tl.where(ok[:, None], qk, qk_exact)

    # row and column factors: L2 norms, scale (and beta for A_kk, below)
    if L2_HERE:
        rq_i = 1.0 / tl.sqrt(ss_q + 1e-6)
        rk_i = 1.0 / tl.sqrt(ss_k + 1e-6)
        tl.store(rq + o_i * HV, rq_i, mask=m_i)
        tl.store(rk + o_i * HV, rk_i, mask=m_i)
    else:
        rq_i = _inv_norm_at(rq, o_i * HV, m_i, L2NORM)
        rk_i = _inv_norm_at(rk, o_i * HV, m_i, L2NORM)
    if SAVE:
        Ps += (i_c * HV + i_hv) * (BT * BT)
        Qs += (i_c * HV + i_hv) * (BT * BT)
        p_diag = o_i[:, None] * BT + o_i[None, :]
        tl.store(Ps + p_diag, tl.where(o_c[:, None] > o_c[None, :], kk * rk_i[:, None] * rk_i[None, :], 0.0),
                 mask=m_i[:, None])
        tl.store(Qs + p_diag, tl.where(o_c[:, None] >= o_c[None, :], qk * rq_i[:, None] * rk_i[None, :], 0.0),
                 mask=m_i[:, None])
    b_beta = _beta_at(beta, o_i * HV, m_i, BETA)
    if I > 0:  # the columns before the block
        _store_off_tile(off_lo, off_qlo, o_t, o_i, m_i, i0, rk, rq_i, rk_i, b_beta, scale, Aqk, Akk, Ps, Qs,
                        HV, BT, SA, L2NORM, SAVE, INTERPRET, CS)
        if TAIL:
            _store_off_tile(off_lo2, off_qlo2, o_u, o_i, m_i, i0, rk, rq_i, rk_i, b_beta, scale, Aqk, Akk, Ps, Qs,
                            HV, BT, SA, L2NORM, SAVE, INTERPRET, CS)
    # A_qk's diagonal block
    qk = tl.where(o_c[:, None] >= o_c[None, :], qk * (scale * rq_i)[:, None] * rk_i[None, :], 0.0)
    tl.store(Aqk + o_i[:, None] * SA + o_i[None, :], _bf16(qk, INTERPRET), mask=m_i[:, None], cache_modifier=CS)
    if not SAVE:  # A_kk's, fp32, in the chunk's scratch (rows past n are never read); with SAVE the solve forms
        # A_kk = diag(beta) P from the kept P instead (one fp32 [BT, BT] write less per chunk)
        kk = tl.where(o_c[:, None] > o_c[None, :], kk * (b_beta * rk_i)[:, None] * rk_i[None, :], 0.0)
        tl.store(Akk + o_i[:, None] * BT + o_i[None, :], kk, mask=m_i[:, None], cache_modifier=CS)


@triton.jit
def _store_off_tile(off_k, off_q, o_t, o_i, m_i, i0, rk, rq_i, rk_i, b_beta, scale, Aqk, Akk, Ps, Qs,
                    HV: tl.constexpr, BT: tl.constexpr, SA: tl.constexpr, L2NORM: tl.constexpr, SAVE: tl.constexpr,
                    INTERPRET: tl.constexpr, CS: tl.constexpr):
    """The columns o_t (< i0) of a block's rows o_i: sums off_k (k rows) and off_q (q rows) times their norm factors
    (column factors at rk), into A_qk (bf16, times the scale) and A_kk (fp32, times beta), or with SAVE into the
    kept P and A_qk (fp32, without beta and the scale) and A_qk."""
    m_t = o_t < i0
    rk_t = _inv_norm_at(rk, o_t * HV, m_t, L2NORM)
    m_lo = m_i[:, None] & m_t[None, :]
    if SAVE:
        p_off = o_i[:, None] * BT + o_t[None, :]
        tl.store(Ps + p_off, off_k * rk_i[:, None] * rk_t[None, :], mask=m_lo)
        tl.store(Qs + p_off, off_q * rq_i[:, None] * rk_t[None, :], mask=m_lo)
    a_q = off_q * (scale * rq_i)[:, None] * rk_t[None, :]
    tl.store(Aqk + o_i[:, None] * SA + o_t[None, :], _bf16(a_q, INTERPRET), mask=m_lo, cache_modifier=CS)
    if not SAVE:
        a_k = off_k * (b_beta * rk_i)[:, None] * rk_t[None, :]
        tl.store(Akk + o_i[:, None] * BT + o_t[None, :], a_k, mask=m_lo, cache_modifier=CS)


@triton.jit
def _akk_block(Akk, beta, I: tl.constexpr, J: tl.constexpr, n, HV: tl.constexpr, BT: tl.constexpr,  # noqa: E741
               BC: tl.constexpr, BETA: tl.constexpr, FROM_P: tl.constexpr):
    """Block (I, J) of the chunk's A_kk: from its scratch, or with FROM_P from the kept P (A_kk without beta) times
    the rows' beta (beta at the chunk's first row); rows and columns past n (never written) load as 0."""
    o = tl.arange(0, BC)
    rows = I * BC + o
    cols = J * BC + o
    m = (rows < n)[:, None] & (cols < n)[None, :]
    a = tl.load(Akk + rows[:, None] * BT + cols[None, :], mask=m, other=0.0)
    if FROM_P:
        a = a * _beta_at(beta, rows * HV, rows < n, BETA)[:, None]
    return a


@triton.jit
def _store_x_block(Xs, Xf, x, I: tl.constexpr, J: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,  # noqa: E741
                   INTERPRET: tl.constexpr, SAVE: tl.constexpr, STORE_XS: tl.constexpr):
    """Block (I, J) of X into Xs as bf16 (STORE_XS), and with SAVE into Xf as fp32."""
    o = tl.arange(0, BC)
    off = (I * BC + o)[:, None] * BT + (J * BC + o)[None, :]
    if STORE_XS:
        tl.store(Xs + off, _bf16(x, INTERPRET))
    if SAVE:
        tl.store(Xf + off, x)


@triton.jit
def _solve_kernel(Akk, beta, Xs, Xf, cu_seqlens, chunk_indices, HV: tl.constexpr, BT: tl.constexpr,
                  BC: tl.constexpr, BETA: tl.constexpr, INTERPRET: tl.constexpr, SAVE: tl.constexpr,
                  STORE_XS: tl.constexpr, PREC_INV: tl.constexpr, PREC_MERGE: tl.constexpr,
                  PREC_POW: tl.constexpr, PEEL: tl.constexpr):
    """X = (I + A_kk)^-1 of one (chunk, value head) of n valid rows, into its X scratch, by 16x16 blocks, all in
    registers: X_II = (I + A_II)^-1 and X_IJ = -X_II sum_{J <= M < I} A_IM X_MJ. A_kk from the intra kernel's
    scratch, or with SAVE diag(beta) P from the kept P (Akk is then P; the intra kernel wrote no scratch).
    Written as bf16 into Xs (STORE_XS: the lower blocks only; the W/U kernel masks the upper triangle), with SAVE
    as fp32 into Xf (for the backward, and for the W/U kernel with an fp32 U). Written out for BT = 4 * BC."""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    Akk += (i_c * HV + i_hv) * (BT * BT)
    beta += r0 * HV + i_hv
    Xs += (i_c * HV + i_hv) * (BT * BT)
    Xf += (i_c * HV + i_hv) * (BT * BT)
    X00 = _inverse_unit_lower(_akk_block(Akk, beta, 0, 0, n, HV, BT, BC, BETA, SAVE), BC, PREC_POW,
                              PREC_INV, INTERPRET, PEEL)
    X11 = _inverse_unit_lower(_akk_block(Akk, beta, 1, 1, n, HV, BT, BC, BETA, SAVE), BC, PREC_POW,
                              PREC_INV, INTERPRET, PEEL)
    X22 = _inverse_unit_lower(_akk_block(Akk, beta, 2, 2, n, HV, BT, BC, BETA, SAVE), BC, PREC_POW,
                              PREC_INV, INTERPRET, PEEL)
    X33 = _inverse_unit_lower(_akk_block(Akk, beta, 3, 3, n, HV, BT, BC, BETA, SAVE), BC, PREC_POW,
                              PREC_INV, INTERPRET, PEEL)
    A10 = _akk_block(Akk, beta, 1, 0, n, HV, BT, BC, BETA, SAVE)
    A20 = _akk_block(Akk, beta, 2, 0, n, HV, BT, BC, BETA, SAVE)
    A21 = _akk_block(Akk, beta, 2, 1, n, HV, BT, BC, BETA, SAVE)
    A30 = _akk_block(Akk, beta, 3, 0, n, HV, BT, BC, BETA, SAVE)
    A31 = _akk_block(Akk, beta, 3, 1, n, HV, BT, BC, BETA, SAVE)
    A32 = _akk_block(Akk, beta, 3, 2, n, HV, BT, BC, BETA, SAVE)
    P: tl.constexpr = PREC_MERGE
    X10 = -_unit_dot(X11, _dot_unit(A10, X00, BC, P, INTERPRET, PEEL), BC, P, INTERPRET, PEEL)
    X21 = -_unit_dot(X22, _dot_unit(A21, X11, BC, P, INTERPRET, PEEL), BC, P, INTERPRET, PEEL)
    X20 = -_unit_dot(X22, _dot_unit(A20, X00, BC, P, INTERPRET, PEEL) + _pdot(A21, X10, P, INTERPRET), BC, P,
                     INTERPRET, PEEL)
    X32 = -_unit_dot(X33, _dot_unit(A32, X22, BC, P, INTERPRET, PEEL), BC, P, INTERPRET, PEEL)
    X31 = -_unit_dot(X33, _dot_unit(A31, X11, BC, P, INTERPRET, PEEL) + _pdot(A32, X21, P, INTERPRET), BC, P,
                     INTERPRET, PEEL)
    X30 = -_unit_dot(X33, _dot_unit(A30, X00, BC, P, INTERPRET, PEEL) + _pdot(A31, X10, P, INTERPRET)
                     + _pdot(A32, X20, P, INTERPRET), BC, P, INTERPRET, PEEL)
    _store_x_block(Xs, Xf, X00, 0, 0, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X10, 1, 0, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X11, 1, 1, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X20, 2, 0, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X21, 2, 1, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X22, 2, 2, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X30, 3, 0, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X31, 3, 1, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X32, 3, 2, BT, BC, INTERPRET, SAVE, STORE_XS)
    _store_x_block(Xs, Xf, X33, 3, 3, BT, BC, INTERPRET, SAVE, STORE_XS)
    if SAVE:  # Xf's blocks above the diagonal: zeros (its slots are not filled first)
        o = tl.arange(0, BC)
        zero = tl.zeros([BC, BC], dtype=Xf.dtype.element_ty)
        for i in tl.static_range(BT // BC - 1):
            for j in tl.static_range(i + 1, BT // BC):
                tl.store(Xf + (i * BC + o)[:, None] * BT + (j * BC + o)[None, :], zero)


@triton.jit(do_not_specialize=["scale"])
def _wu_kernel(
    q, k, v, beta, G, rq, rk, Xs, Xf, W, U, QG, KG, KB, cu_seqlens, chunk_indices, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BETA: tl.constexpr, L2NORM: tl.constexpr, QG_DONE: tl.constexpr, KG_DONE: tl.constexpr, EXP2: tl.constexpr,
    INTERPRET: tl.constexpr, PREC: tl.constexpr,
):
    """W = X (beta k exp(G)), U = X (beta v), k exp(G_last - G) and, without QG_DONE, scale q exp(G) for one
    (chunk, value head), from the X that `_solve_kernel` left in Xs (with QG_DONE the intra kernel wrote q exp(G):
    qg_in_intra). With KG_DONE (kg_in_intra) the intra kernel wrote k exp(G_last - G) and beta k exp(G) (KB, the
    operand of W), so without an fp32 U this kernel reads neither k nor G. With an fp32 U (`kda_chunk`'s
    save_states: the pass's V_new = U - W S, W and k exp(G_last - G) go to the backward) W and U are computed
    from the solve's fp32 X (Xf) and fp32 operands in tf32, as the backward would compute them, not in bf16 (W
    still stored as bf16, as the backward's bf16 pass rounds it).
    PREC: the products of the fp32 W and U (launch setting wu_precision).
    (A separate kernel: fused into `_intra_kernel` it made that kernel spill registers.)"""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    i_h = i_hv // (HV // H)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    SX: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    SV: tl.constexpr = HV * V
    q += (r0 * H + i_h) * K
    k += (r0 * H + i_h) * K
    G += (r0 * HV + i_hv) * K
    W += (r0 * HV + i_hv) * K
    QG += (r0 * HV + i_hv) * K
    KG += (r0 * HV + i_hv) * K
    KB += (r0 * HV + i_hv) * K
    v += (r0 * HV + i_hv) * V
    U += (r0 * HV + i_hv) * V
    beta += r0 * HV + i_hv
    rq += r0 * HV + i_hv
    rk += r0 * HV + i_hv
    Xs += (i_c * HV + i_hv) * (BT * BT)
    o_t = tl.arange(0, BT)
    m_t = o_t < n

    # W = X (beta k exp(G)), q exp(G) and k exp(G_last - G), per K-tile. Rows past n: X rows/columns
    # there are never read (masked), their k, q are 0 and nothing is stored for them.
    m_x = m_t[:, None] & (o_t[None, :] <= o_t[:, None])  # X is lower triangular (upper blocks not written)
    FROM_XF: tl.constexpr = U.dtype.element_ty == tl.float32  # save_states
    if FROM_XF:
        b_X = tl.load(Xf + (i_c * HV + i_hv) * (BT * BT) + o_t[:, None] * BT + o_t[None, :], mask=m_x, other=0.0)
    else:
        b_X = tl.load(Xs + o_t[:, None] * BT + o_t[None, :], mask=m_x, other=0.0)
    b_beta = _beta_at(beta, o_t * HV, m_t, BETA)
    rk_t = _inv_norm_at(rk, o_t * HV, m_t, L2NORM)
    if not QG_DONE:
        f_q = _qg_row_factors(rq, scale, o_t, m_t, HV, L2NORM)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m = m_t[:, None] & m_k[None, :]
        off = o_t[:, None] * SG + o_k[None, :]
        if KG_DONE and not FROM_XF:
            b_w = _mma(b_X, tl.load(KB + off, mask=m, other=0.0), INTERPRET)
        else:
            b_k = tl.load(k + o_t[:, None] * SX + o_k[None, :], mask=m, other=0.0).to(tl.float32) * rk_t[:, None]
            b_g = tl.load(G + o_t[:, None] * SG + o_k[None, :], mask=m, other=0.0)
            b_kb = b_k * (b_beta[:, None] * _exp(b_g, EXP2))
            if FROM_XF:
                b_w = _pdot(b_X, b_kb, PREC, False)
            else:
                b_w = _mma(b_X, _bf16(b_kb, INTERPRET), INTERPRET)
        tl.store(W + off, _bf16(b_w, INTERPRET), mask=m)
        if not KG_DONE:
            # rows past the end have G = 0 >= G_last: clamped (their k is 0 anyway)
            g_last = tl.load(G + (n - 1) * SG + o_k, mask=m_k, other=0.0)
            tl.store(KG + off, _bf16(b_k * _exp(tl.minimum(g_last[None, :] - b_g, 0.0), EXP2), INTERPRET), mask=m)
        if not QG_DONE:
            if KG_DONE and not FROM_XF:
                b_g = tl.load(G + o_t[:, None] * SG + o_k[None, :], mask=m, other=0.0)
            b_q = tl.load(q + o_t[:, None] * SX + o_k[None, :], mask=m, other=0.0).to(tl.float32)
            tl.store(QG + off, _bf16(b_q * f_q[:, None] * _exp(b_g, EXP2), INTERPRET), mask=m)

    # U = X (beta v), per V-tile
    for v0 in range(0, V, BV):
        o_v = v0 + tl.arange(0, BV)
        m = m_t[:, None] & (o_v < V)[None, :]
        off = o_t[:, None] * SV + o_v[None, :]
        b_v = tl.load(v + off, mask=m, other=0.0).to(tl.float32)
        if FROM_XF:
            tl.store(U + off, _pdot(b_X, b_v * b_beta[:, None], PREC, False), mask=m)
        else:
            tl.store(U + off, _bf16(_mma(b_X, _bf16(b_v * b_beta[:, None], INTERPRET), INTERPRET), INTERPRET), mask=m)


# ----------------------------------------------------------------------------------------------------
# 5. state pass: sequential over a sequence's chunks
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _v_new(b_sb, p_w, p_u, off_tk, off_tv, m_w, m_u, INTERPRET: tl.constexpr):
    """V_new = U - W S of one chunk in fp32, before the pass rounds it to bf16 (b_sb: S rounded to bf16; masks m_w
    for W, m_u for U)."""
    b_w = tl.load(p_w + off_tk, mask=m_w, other=0.0)
    b_u = tl.load(p_u + off_tv, mask=m_u, other=0.0).to(tl.float32)
    return b_u - _mma(b_w, b_sb, INTERPRET)


@triton.jit
def _last_g_row(p_g, n, o_k, HV: tl.constexpr, K: tl.constexpr):
    """G's last row (the decay of S over the chunk) of a chunk of n rows from p_g."""
    return tl.load(p_g + (n - 1) * (HV * K) + o_k, mask=o_k < K, other=0.0)


@triton.jit
def _state_after_chunk(b_s, b_vn, g_last, p_kg, off_tk, m_w, EXP2: tl.constexpr, INTERPRET: tl.constexpr):
    """S after a chunk: diag(exp(G_last)) S + (k exp(G_last - G))^T V_new (g_last: G's last row)."""
    b_kg = tl.load(p_kg + off_tk, mask=m_w, other=0.0)
    return b_s * _exp(g_last, EXP2)[:, None] + _mma(tl.trans(b_kg), b_vn, INTERPRET)


@triton.jit
def _segment_span(seg_info, cu_seqlens, i_s, BT: tl.constexpr):
    """(sequence, first chunk in it, first row, end row, the sequence's end row) of segment i_s of the split
    state pass, as int64; a seg_info row is (sequence, first chunk in it, chunks)."""
    i_n = tl.load(seg_info + i_s * 3).to(tl.int64)
    c_first = tl.load(seg_info + i_s * 3 + 1).to(tl.int64)
    c_count = tl.load(seg_info + i_s * 3 + 2).to(tl.int64)
    seq_end = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64) + c_first * BT
    return i_n, c_first, bos, tl.minimum(seq_end, bos + c_count * BT), seq_end


@triton.jit
def _state_kernel(
    W, U, KG, G, h, v_new, h0, ht, hs, QG, Aqk, o, rq, scale, cu_seqlens, chunk_offsets, seg_info, S0,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STATE_VK: tl.constexpr, USE_H0: tl.constexpr, STORE_HT: tl.constexpr, STORE_HS: tl.constexpr,
    OUT: tl.constexpr, SPLIT: tl.constexpr, QG_RAW: tl.constexpr, L2NORM: tl.constexpr, EXP2: tl.constexpr,
    STORE_VN: tl.constexpr, INTERPRET: tl.constexpr, PREFETCH: tl.constexpr,
):
    """The state pass of one (sequence, value head, V-tile). Without OUT it stores the bf16 state at every chunk
    start (h) and V_new for `_output_kernel`; with OUT (launch setting out_in_state) it computes the chunk's
    output itself, O = (q exp(G)) S + A_qk V_new, while S and V_new are in registers, and stores neither (V_new
    still with STORE_VN, for the backward: `kda_chunk`'s save_states).
    With SPLIT (launch setting state_split) a program runs one segment of a sequence instead, from the start
    state that `_segment_scan_kernel` left in S0, and only a sequence's last segment stores its final state."""
    # grid (sequences or segments x V-tiles, value heads): only axis 0 may exceed 65535
    NV: tl.constexpr = (V + BV - 1) // BV
    i_n = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    if SPLIT:
        i_s = i_n  # the segment
        i_n, c_first, bos, eos, seq_end = _segment_span(seg_info, cu_seqlens, i_s, BT)
        c0 = tl.load(chunk_offsets + i_n).to(tl.int64) + c_first
    else:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    o_t = tl.arange(0, BT)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    # element (k, v) of a state in memory: [K, V] or [V, K]
    S_K: tl.constexpr = 1 if STATE_VK else V
    S_V: tl.constexpr = K if STATE_VK else 1
    off_s = o_k[:, None] * S_K + o_v[None, :] * S_V
    s_base = (i_n * HV + i_hv) * (K * V)

    if SPLIT:
        b_s = tl.load(S0 + (i_s * HV + i_hv) * (K * V) + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
    elif USE_H0:
        b_s = tl.load(h0 + s_base + off_s, mask=m_kv, other=0.0).to(tl.float32)
    else:
        b_s = tl.zeros([BK, BV], dtype=tl.float32)

    # per-chunk pointers advance by BT rows; h (the state at each chunk start, [K, V] bf16) by one chunk
    p_w = W + (bos * HV + i_hv) * K
    p_kg = KG + (bos * HV + i_hv) * K
    p_g = G + (bos * HV + i_hv) * K
    p_u = U + (bos * HV + i_hv) * V
    p_vn = v_new + (bos * HV + i_hv) * V
    p_h = h + (c0 * HV + i_hv) * (K * V)
    p_hs = hs + (c0 * HV + i_hv) * (K * V)  # fp32 chunk-start states in the caller's layout (STORE_HS)
    p_qg = QG + (bos * HV + i_hv) * K
    p_rq = rq + bos * HV + i_hv
    p_a = Aqk + (bos * HV + i_hv) * BT
    p_o = o + (bos * HV + i_hv) * V
    off_tk = o_t[:, None] * (HV * K) + o_k[None, :]
    off_tv = o_t[:, None] * (HV * V) + o_v[None, :]
    off_h = o_k[:, None] * V + o_v[None, :]
    n_tok = eos - bos
    if PREFETCH:
        g_next = _last_g_row(p_g, tl.minimum(n_tok, BT), o_k, HV, K)
    for t in range(tl.cdiv(n_tok, BT)):
        n = tl.minimum(n_tok - t * BT, BT)
        m_r = o_t < n
        if PREFETCH:
            # G's last row feeds no product, so Triton does not pipeline its load (it waited on L2 or DRAM in every
            # step, on the chain through S): loaded a step ahead instead, the next chunk's (none after the last)
            g_last = g_next
            n_next = n_tok - (t + 1) * BT
            g_next = tl.load(p_g + (BT + tl.minimum(n_next, BT) - 1) * (HV * K) + o_k,
                             mask=(o_k < K) & (o_k * 0 + n_next > 0), other=0.0)
        b_sb = _bf16(b_s, INTERPRET)
        if not OUT:
            tl.store(p_h + off_h, b_sb, mask=m_kv)
        if STORE_HS:
            tl.store(p_hs + off_s, b_s, mask=m_kv)

        m_rv = m_r[:, None] & m_v[None, :]
        m_rk = m_r[:, None] & m_k[None, :]
        b_vn32 = _v_new(b_sb, p_w, p_u, off_tk, off_tv, m_rk, m_rv, INTERPRET)
        b_vn = _bf16(b_vn32, INTERPRET)
        if OUT:
            # as _output_kernel: A_qk's upper half was never written, so it is masked off
            m_a = m_r[:, None] & (o_t[None, :] <= o_t[:, None])
            b_a = tl.load(p_a + o_t[:, None] * (HV * BT) + o_t[None, :], mask=m_a, other=0.0)
            b_qg = tl.load(p_qg + off_tk, mask=m_rk, other=0.0)
            if QG_RAW:  # as _output_kernel: the scale and norm factors on the rows of (q exp(G)) S
                f = _qg_row_factors(p_rq, scale, o_t, m_r, HV, L2NORM)
                acc = _mma(b_a, b_vn, INTERPRET) + f[:, None] * _mma(b_qg, b_sb, INTERPRET)
            else:
                acc = _mma(b_a, b_vn, INTERPRET) + _mma(b_qg, b_sb, INTERPRET)
            if o.dtype.element_ty == tl.bfloat16:
                acc = _bf16(acc, INTERPRET)
            tl.store(p_o + off_tv, acc.to(o.dtype.element_ty), mask=m_rv)
        if STORE_VN:
            if v_new.dtype.element_ty == tl.float32:  # kept for the backward (save_states): before the rounding
                tl.store(p_vn + off_tv, b_vn32, mask=m_rv)
            else:
                tl.store(p_vn + off_tv, b_vn, mask=m_rv)
        if not PREFETCH:
            g_last = _last_g_row(p_g, n, o_k, HV, K)
        b_s = _state_after_chunk(b_s, b_vn, g_last, p_kg, off_tk, m_rk, EXP2, INTERPRET)

        p_w += BT * HV * K
        p_kg += BT * HV * K
        p_g += BT * HV * K
        p_u += BT * HV * V
        p_vn += BT * HV * V
        p_h += HV * K * V
        p_hs += HV * K * V
        p_qg += BT * HV * K
        p_rq += BT * HV
        p_a += BT * HV * BT
        p_o += BT * HV * V

    if STORE_HT:
        if SPLIT:
            if eos == seq_end:
                tl.store(ht + s_base + off_s, b_s, mask=m_kv)
        else:
            tl.store(ht + s_base + off_s, b_s, mask=m_kv)


# ----------------------------------------------------------------------------------------------------
# 5'. the state pass split into segments (launch setting state_split): long sequences, few heads
# ----------------------------------------------------------------------------------------------------
# Over one segment (chunks a..b of a sequence) the state pass is affine in its start state:
#     S_end = M S_start + R,  M = prod_c (diag(exp(G_last,c)) - KG_c^T W_c)  [K, K],  R = the pass from S = 0.
# Kernel 5a computes R and M of every segment in parallel (M by running the same pass on the columns of the
# identity with U = 0), 5b chains them per sequence (S_start of segment s + 1 = M_s S_start(s) + R_s), and
# kernel 5 then runs every segment in parallel from its start state. Three passes over the data instead of one,
# but the sequential chain is segment_chunks + segments + segment_chunks steps long instead of chunks. Two
# segments of a sequence need less: its last (5b never reads its map: kernel 5 computes its end state) and its
# first, whose end state 5a computes directly, by the pass from the sequence's initial state (R only, no M).
@triton.jit
def _segment_affine_kernel(
    W, U, KG, G, R, M, h0, cu_seqlens, seg_info,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STATE_VK: tl.constexpr, USE_H0: tl.constexpr, EXP2: tl.constexpr, INTERPRET: tl.constexpr,
):
    """R (V-tiles 0..NV-1) or M (tiles NV.., BV columns of the [K, K] transition each) of one (segment, value
    head), with the operations of `_state_kernel` (S rounded to bf16 for W S, V_new rounded to bf16). A
    sequence's last segment is skipped; for its first, R is the pass from h0 (its end state) and M is skipped."""
    NV: tl.constexpr = (V + BV - 1) // BV
    NP: tl.constexpr = (K + BV - 1) // BV
    i_s = tl.program_id(0).to(tl.int64) // (NV + NP)
    i_v = tl.program_id(0).to(tl.int64) % (NV + NP)
    i_hv = tl.program_id(1).to(tl.int64)
    i_n, c_first, bos, eos, seq_end = _segment_span(seg_info, cu_seqlens, i_s, BT)
    is_r = i_v < NV
    first = c_first == 0
    if (eos == seq_end) | (first & ~is_r):
        return
    n_tok = eos - bos
    o_k = tl.arange(0, BK)
    o_t = tl.arange(0, BT)
    m_k = o_k < K
    # this tile's columns: of V (R) or of K (M); m_u: columns that read U (R tiles only)
    o_c = (i_v - (1 - is_r.to(tl.int64)) * NV) * BV + tl.arange(0, BV)
    is_r_c = (o_c * 0 + i_v) < NV
    m_c = tl.where(is_r_c, o_c < V, o_c < K)
    m_u = m_c & is_r_c
    m_kc = m_k[:, None] & m_c[None, :]
    b_s = tl.where(m_kc & (o_k[:, None] == o_c[None, :]) & ~is_r_c[None, :], 1.0, 0.0)  # M: the identity; R: 0
    if USE_H0:  # R of a first segment: from the sequence's initial state
        # a masked load, not a branch, and offsets within the tile in int32 (the tile's start in the int64
        # base): 211 registers for this kernel instead of 255 (ptxas for sm_90, K = V = 128; 187 without h0)
        S_K: tl.constexpr = 1 if STATE_VK else V
        S_V: tl.constexpr = K if STATE_VK else 1
        p_h0 = h0 + (i_n * HV + i_hv) * (K * V) + (i_v * BV) * S_V
        m_first = m_kc & ((o_k[:, None] * 0 + c_first) == 0)  # `first` as a tile: the interpreter takes no scalar mask
        b_s += tl.load(p_h0 + o_k[:, None] * S_K + tl.arange(0, BV)[None, :] * S_V, mask=m_first,
                       other=0.0).to(tl.float32)
    p_w = W + (bos * HV + i_hv) * K
    p_kg = KG + (bos * HV + i_hv) * K
    p_g = G + (bos * HV + i_hv) * K
    p_u = U + (bos * HV + i_hv) * V
    off_tk = o_t[:, None] * (HV * K) + o_k[None, :]
    off_tv = o_t[:, None] * (HV * V) + o_c[None, :]
    for t in range(tl.cdiv(n_tok, BT)):
        n = tl.minimum(n_tok - t * BT, BT)
        m_r = o_t < n
        m_rk = m_r[:, None] & m_k[None, :]
        b_vn = _bf16(_v_new(_bf16(b_s, INTERPRET), p_w, p_u, off_tk, off_tv, m_rk, m_r[:, None] & m_u[None, :],
                            INTERPRET), INTERPRET)
        b_s = _state_after_chunk(b_s, b_vn, _last_g_row(p_g, n, o_k, HV, K), p_kg, off_tk, m_rk, EXP2, INTERPRET)
        p_w += BT * HV * K
        p_kg += BT * HV * K
        p_g += BT * HV * K
        p_u += BT * HV * V
    base = i_s * HV + i_hv
    if is_r:
        tl.store(R + base * (K * V) + o_k[:, None] * V + o_c[None, :], b_s, mask=m_kc)
    else:
        tl.store(M + base * (K * K) + o_k[:, None] * K + o_c[None, :], b_s, mask=m_kc)


@triton.jit
def _segment_scan_kernel(
    R, M, S0, h0, seg_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STATE_VK: tl.constexpr, USE_H0: tl.constexpr,
):
    """The start state of every segment of one (sequence, value head, V-tile), into S0 ([K, V] fp32):
    S_start(first) = h0 or 0, S_start(first + 1) = R_first (kernel 5a ran the first segment from h0),
    S_start(s + 1) = M_s S_start(s) + R_s (fp32 products, tf32x3)."""
    NV: tl.constexpr = (V + BV - 1) // BV
    i_n = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_kv = m_k[:, None] & (o_v < V)[None, :]
    if USE_H0:
        S_K: tl.constexpr = 1 if STATE_VK else V
        S_V: tl.constexpr = K if STATE_VK else 1
        b_s = tl.load(h0 + (i_n * HV + i_hv) * (K * V) + o_k[:, None] * S_K + o_v[None, :] * S_V,
                      mask=m_kv, other=0.0).to(tl.float32)
    else:
        b_s = tl.zeros([BK, BV], dtype=tl.float32)
    s_first = tl.load(seg_offsets + i_n).to(tl.int64)
    s_end = tl.load(seg_offsets + i_n + 1).to(tl.int64)
    off_kv = o_k[:, None] * V + o_v[None, :]
    off_kk = o_k[:, None] * K + o_k[None, :]
    for i_s in range(s_first, s_end):
        base = i_s * HV + i_hv
        tl.store(S0 + base * (K * V) + off_kv, b_s, mask=m_kv)
        if i_s + 1 < s_end:  # the last segment's end state is the final state: kernel 5 stores it
            b_r = tl.load(R + base * (K * V) + off_kv, mask=m_kv, other=0.0)
            if i_s == s_first:
                b_s = b_r
            else:
                b_m = tl.load(M + base * (K * K) + off_kk, mask=m_k[:, None] & m_k[None, :], other=0.0)
                b_s = tl.dot(b_m, b_s, input_precision=SOLVE_PRECISION) + b_r


# ----------------------------------------------------------------------------------------------------
# 6. output
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _output_kernel(
    QG, Aqk, h, v_new, o, rq, scale, cu_seqlens, chunk_indices,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    QG_RAW: tl.constexpr, L2NORM: tl.constexpr, INTERPRET: tl.constexpr,
):
    """O of one (chunk, value head, V-tile): (scale q exp(G)) S + A_qk V_new. With QG_RAW (qg_in_intra) QG holds
    q exp(G) without the scale and L2-norm factors, and they are applied to the rows of the product."""
    # grid (chunks x V-tiles, value heads): only axis 0 may exceed 65535; a chunk's V-tiles are neighbours
    NV: tl.constexpr = (V + BV - 1) // BV
    i_c = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    r0, n = _chunk_rows(cu_seqlens, chunk_indices, i_c, BT)
    o_t = tl.arange(0, BT)
    m_r = o_t < n
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    m_rv = m_r[:, None] & m_v[None, :]
    QG += (r0 * HV + i_hv) * K
    Aqk += (r0 * HV + i_hv) * BT
    v_new += (r0 * HV + i_hv) * V
    o += (r0 * HV + i_hv) * V
    h += (i_c * HV + i_hv) * (K * V)

    # A_qk V_new: A_qk is lower triangular; its upper half was never written, so it is masked off here
    m_a = m_r[:, None] & (o_t[None, :] <= o_t[:, None])
    b_a = tl.load(Aqk + o_t[:, None] * (HV * BT) + o_t[None, :], mask=m_a, other=0.0)
    off_v = o_t[:, None] * (HV * V) + o_v[None, :]
    b_vn = tl.load(v_new + off_v, mask=m_rv, other=0.0)
    if v_new.dtype.element_ty != tl.bfloat16:  # fp32, kept for the backward (save_states): rounded as the pass did
        b_vn = _bf16(b_vn, INTERPRET)
    acc = _mma(b_a, b_vn, INTERPRET)

    # + (scale q exp(G)) S, S = the state at the chunk start
    acc_s = tl.zeros([BT, BV], dtype=tl.float32)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        b_qg = tl.load(QG + o_t[:, None] * (HV * K) + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0.0)
        b_h = tl.load(h + o_k[:, None] * V + o_v[None, :], mask=m_k[:, None] & m_v[None, :], other=0.0)
        if QG_RAW:
            acc_s += _mma(b_qg, b_h, INTERPRET)
        else:
            acc += _mma(b_qg, b_h, INTERPRET)
    if QG_RAW:
        acc += _qg_row_factors(rq + r0 * HV + i_hv, scale, o_t, m_r, HV, L2NORM)[:, None] * acc_s
    if o.dtype.element_ty == tl.bfloat16:
        acc = _bf16(acc, INTERPRET)
    tl.store(o + off_v, acc.to(o.dtype.element_ty), mask=m_rv)


# ----------------------------------------------------------------------------------------------------
# wrapper
# ----------------------------------------------------------------------------------------------------
def _chunk_tables(lens: list[int], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """For sequence lengths (each >= 1) known on the host: cu_seqlens [N + 1] int64, chunk_indices [NT, 2]
    int32 (sequence, chunk within it), chunk_offsets [N] int64 (first global chunk of each sequence) and NT.
    Built on the host and copied in one piece, asynchronously from pinned memory on a GPU, so that the
    device never waits for the host here."""
    # numpy, not torch: torch.repeat_interleave alone took about 8 ms per call on a CPU (torch 2.13), and this
    # runs on the host inside every call with a new cu_seqlens tensor
    lens_a = np.asarray(lens, dtype=np.int64)
    n_chunks = (lens_a + BT - 1) // BT
    offsets = np.cumsum(n_chunks) - n_chunks
    cu = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lens_a)])
    nt = int(n_chunks.sum())
    seq = np.repeat(np.arange(len(lens), dtype=np.int64), n_chunks)
    local = np.arange(nt, dtype=np.int64) - offsets[seq]
    # one int64 buffer: [cu_seqlens (N + 1) | offsets (N) | indices as int32 pairs (NT * 2 int32 = NT int64)]
    pairs = np.ascontiguousarray(np.stack([seq, local], axis=1).astype(np.int32)).view(np.int64).reshape(-1)
    buf = torch.from_numpy(np.concatenate([cu, offsets, pairs]))
    if torch.device(device).type == "cuda":
        buf = buf.pin_memory().to(device, non_blocking=True)
    else:
        buf = buf.to(device)
    n = len(lens)
    return buf[: n + 1], buf[2 * n + 1:].view(torch.int32).view(nt, 2), buf[n + 1: 2 * n + 1], nt


# key -> (cu_seqlens given or None, tables of _chunk_tables, sequence lengths, {segment chunks: _segment_tables})
_TABLES: OrderedDict = OrderedDict()
_TABLES_KEPT = 16


def _sequence_tables(cu_seqlens: torch.Tensor | None, B: int, T: int, device):
    """_chunk_tables for dense (B sequences of T tokens) or packed (cu_seqlens) inputs, cached.

    Packed lengths are read from the device once per cu_seqlens tensor (a host sync, which also makes the
    host wait for every kernel queued before): the cache holds the tensor object and its version counter,
    as fla does, so the layers of a forward pass that share one cu_seqlens launch without waiting. Change a
    cu_seqlens tensor's values only through torch operations (they bump the version), or pass a new one.
    Inference-mode tensors have no version counter; there the tensor object alone is the key. A CUDA graph
    can capture a call whose tables are cached (a call before the capture); the graph then uses the cached
    device tensors, which stay alive while they are among the last _TABLES_KEPT used."""
    return _table_entry(cu_seqlens, B, T, device)[1]


def _table_entry(cu_seqlens: torch.Tensor | None, B: int, T: int, device) -> tuple:
    """The cache entry behind `_sequence_tables`, built on a miss."""
    if cu_seqlens is None:
        key = ("dense", B, T, str(device))
    else:
        try:
            version = cu_seqlens._version
        except RuntimeError:  # inference tensors do not track versions
            version = None
        key = ("packed", id(cu_seqlens), version, str(device))
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is cu_seqlens:
        _TABLES.move_to_end(key)
        return hit
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("kda_chunk builds its chunk tables on the host, which a CUDA graph capture cannot "
                           "record: call it once with the same cu_seqlens tensor (or dense shape) before capturing")
    # the one host sync (grid sizes) for packed inputs; dense offsets are known
    offsets = cu_seqlens.tolist() if cu_seqlens is not None else [i * T for i in range(B + 1)]
    lens = sequence_lengths(offsets, B * T)
    entry = (cu_seqlens, _chunk_tables(lens, device), lens, {})
    _TABLES[key] = entry
    if len(_TABLES) > _TABLES_KEPT:
        _TABLES.popitem(last=False)
    return entry


def _segment_tables(entry: tuple, device, seg_chunks: int):
    """Segments of at most seg_chunks chunks of every sequence, for the split state pass: seg_info [NS, 3]
    int64 (sequence, first chunk in it, chunks), seg_offsets [N + 1] int64 (first segment of each sequence) and
    NS; cached in the chunk tables' entry (`_table_entry`)."""
    _, _, lens, by_size = entry
    if seg_chunks not in by_size:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("kda_chunk builds its segment tables on the host, which a CUDA graph capture cannot "
                               "record: call it once with the same cu_seqlens tensor and state_split before capturing")
        n_chunks = (np.asarray(lens, dtype=np.int64) + BT - 1) // BT
        n_segs = (n_chunks + seg_chunks - 1) // seg_chunks
        seq = np.repeat(np.arange(len(lens), dtype=np.int64), n_segs)
        first_seg = np.cumsum(n_segs) - n_segs
        first = (np.arange(len(seq), dtype=np.int64) - first_seg[seq]) * seg_chunks
        info = np.stack([seq, first, np.minimum(seg_chunks, n_chunks[seq] - first)], axis=1)
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(n_segs)])
        buf = torch.from_numpy(np.concatenate([info.reshape(-1), offsets]))
        buf = buf.pin_memory().to(device, non_blocking=True) if torch.device(device).type == "cuda" else buf.to(device)
        ns = len(seq)
        by_size[seg_chunks] = (buf[: 3 * ns].view(ns, 3), buf[3 * ns:], ns)
    return by_size[seg_chunks]


def kda_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    opts: KDAOptions = _DEFAULT_OPTIONS,
    *,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    output_chunk_states: bool = False,
    saved: dict | None = None,
    save_states: bool = False,
) -> tuple[torch.Tensor, ...]:
    r"""Chunked KDA forward (prefill / extend), dense or packed variable-length.

    Args:
        q, k: `[B, T, H, K]` queries / keys (bf16, fp16 or fp32), K <= 256.
        v: `[B, T, HV, V]` values, V <= 256; HV a multiple of H (GVA: value head hv uses q/k head
            hv // (HV // H)).
        g: `[B, T, HV, K]`: the log decay (<= 0) when `opts.gate == "precomputed"`, else the raw gate input.
        beta: `[B, T, HV]`: a probability (`opts.beta == "prob"`) or logits ("logits", "logits_x2").
        opts: scale, in-kernel q/k L2 norm, gate kind and lower bound, beta form, state layout,
            whether to return the final state.
        A_log: `[HV]` fp32, needed by the "unbounded" and "safe" gates.
        dt_bias: `[HV, K]` or `[HV * K]` fp32, needed by the "unbounded" and "safe" gates.
        initial_state: `[N, HV, K, V]` (`state_layout="kv"`) or `[N, HV, V, K]` ("vk") fp32, or None for
            zeros.
        cu_seqlens: `[N + 1]` int32/int64 cumulative lengths of a packed batch (B must be 1), or None for
            N = B dense sequences of T tokens. Every length must be >= 1 (checked on the host: the
            lengths are read once per cu_seqlens tensor, a device sync; see `_sequence_tables`).
        output_chunk_states: also return the state before every chunk of BT = 64 tokens of every sequence
            (what an engine's prefix cache stores; fla's return_intermediate_states convention).
        saved: a dict to fill with the chunk matrices the backward would otherwise recompute (kernels/autograd.py
            keeps them for kernels/backward.py's chunked mode), fp32 `[NT, HV, 64, 64]` each, zero past each
            chunk's rows and above the diagonal: "P" (A_kk without beta, strictly lower), "Aqk" (A_qk without
            the scale) and "X" ((I + A_kk)^-1), on the q/k the kernel saw (L2-normalised with the option); with
            the L2 norm in the op also "rq" and "rk", q's and k's norm factors 1 / sqrt(sum x^2 + 1e-6) as the
            kernels applied them, fp32 `[B * T, HV]` (a q/k head's factor repeated for each of its value heads).
            The solve's products are then in tf32x3 (about fp32, for the kept X) instead of tf32, so o and the final
            state differ from a call without saved by about tf32's rounding of X (before its bf16 rounding; small
            next to it, with the solve peeled and its operands rounded to nearest).
        save_states: with saved and the "kv" state layout, also "states" (the fp32 state before every chunk,
            `[NT, HV, K, V]`, as output_chunk_states returns them), "Vn" (every token's V_new = U - W S as the
            state pass computed it before rounding it to bf16, fp32 `[B * T, HV, V]`), "W" and "KG" (W =
            X diag(beta) k exp(G) and k exp(G_last - G), bf16 `[B * T, HV, K]`, as the pass read them): the
            backward's chunked mode then runs only its reverse recursion and computes neither W nor k exp(G_last -
            G). W and U are then computed in tf32 from the fp32 X instead of in bf16, so o differs from the call
            without save_states by about its bf16 rounding (a little closer to float64). Ignored with the "vk"
            layout (the backward recomputes them).

    Returns:
        o: `[B, T, HV, V]` in v's dtype.
        final_state: `[N, HV, K, V]` / `[N, HV, V, K]` fp32 when `opts.output_final_state`, else None.
        chunk_states (only with output_chunk_states): `[NT, HV, K, V]` / `[NT, HV, V, K]` fp32, NT = sum over
            sequences of ceil(len / 64); row sum(ceil(len_m / 64) for m < n) + c is the state of sequence n
            after its first 64 * c tokens (c = 0: its initial state, or zeros).
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = check_inputs(q, k, v, g, beta, opts, A_log, dt_bias, cu_seqlens)
    if K > 256 or V > 256:
        raise ValueError(f"head dims up to 256 are supported, got K={K}, V={V}")
    vk = opts.state_layout == "vk"
    state_shape = (N, HV, V, K) if vk else (N, HV, K, V)
    if initial_state is not None:
        if tuple(initial_state.shape) != state_shape:
            raise ValueError(f"initial_state must be {list(state_shape)} ({opts.state_layout} layout), "
                             f"got {list(initial_state.shape)}")
        if initial_state.dtype != torch.float32:
            raise ValueError(f"initial_state must be float32, got {initial_state.dtype}")
        initial_state = initial_state.contiguous()

    # the packed view: all kernels see [total_tokens, heads, dim]
    q, k, v, g, beta = (x.reshape(B * T, *x.shape[2:]).contiguous() for x in (q, k, v, g, beta))
    tables = _table_entry(cu_seqlens, B, T, q.device)  # the cached entry behind _sequence_tables
    cu_seqlens, chunk_indices, chunk_offsets, NT = tables[1]
    TT, dev = B * T, q.device
    interp = triton_interpreted()
    f32, bf16 = torch.float32, torch.bfloat16

    BKg = min(64, max(16, triton.next_power_of_2(K)))
    exp2, l2_in_intra = bool(LAUNCH["exp2"]), bool(LAUNCH["l2_in_intra"])
    G = torch.empty(TT, HV, K, dtype=f32, device=dev)
    rq = torch.empty(TT, HV, dtype=f32, device=dev) if opts.use_qk_l2norm else G
    rk = torch.empty(TT, HV, dtype=f32, device=dev) if opts.use_qk_l2norm else G
    QG = torch.empty(TT, HV, K, dtype=bf16, device=dev)
    KG = torch.empty(TT, HV, K, dtype=bf16, device=dev)
    gate_args = (A_log, dt_bias) if opts.gate != "precomputed" else (g, g)
    BK_gate, l2_in_gate = min(LAUNCH["gate_bk"], BKg), opts.use_qk_l2norm and not l2_in_intra
    # with gate_in_intra kernel 2's programs do kernel 1's work for their chunks first
    gate_here = _gate_in_intra(LAUNCH["gate_in_intra"], opts.gate) and bool(LAUNCH["intra_one_launch"])
    if not gate_here:
        _gate_cumsum_kernel[(NT, HV)](
            g, *gate_args, G, q, k, rq, rk, cu_seqlens, chunk_indices, float(opts.lower_bound),
            H=H, HV=HV, K=K, BT=BT, BK=BK_gate, GATE=GATE_CODES[opts.gate], L2NORM=l2_in_gate, EXP2=exp2,
            num_warps=LAUNCH["gate_warps"], **register_cap(LAUNCH["gate_maxnreg"]),
        )

    keep = saved is not None
    # with save_states the pass's V_new = U - W S goes to the backward in fp32, U (and W, which the backward takes
    # too) computed in tf32 from the fp32 X: U in bf16 cost dq and ddt_bias accuracy (backward.LAUNCH["keep_states"])
    save_states = keep and save_states and not vk
    # (zero where the kernels compute nothing: they write those zeros themselves)
    kept = {n: torch.empty(NT, HV, BT, BT, dtype=f32, device=dev) if keep else G for n in ("P", "Aqk", "X")}
    # the solve's A_kk: the intra kernel's fp32 scratch, or (keep) diag(beta) P from the kept P, no scratch
    Akk = kept["P"] if keep else torch.empty(NT, HV, BT, BT, dtype=f32, device=dev)
    Aqk = torch.empty(TT, HV, BT, dtype=bf16, device=dev)
    one_anchor, check_range = _intra_anchors(LAUNCH["intra_one_anchor"], opts.gate, opts.lower_bound)
    intra_cap = _intra_cap(one_anchor, check_range)
    # with qg_in_intra kernel 2 writes q exp(G) without the scale and norm factors (QG_RAW), kernel 4 skips it
    qg_raw = bool(LAUNCH["qg_in_intra"])
    # with kg_in_intra kernel 2 also writes k exp(G_last - G) and beta k exp(G) (KB), which kernel 4 then reads
    # (not with save_states: kernel 4 then computes W in tf32 from k and G, which it reads anyway)
    kg_here = _kg_in_intra(LAUNCH["kg_in_intra"], opts.use_qk_l2norm and l2_in_intra) and not save_states
    # KB lives in W's memory: the W/U kernel's program reads a tile of KB before it writes the same tile of W (the
    # product between), and no other program touches its rows, so W overwrites its own operand: no extra memory
    W = torch.empty(TT, HV, K, dtype=bf16, device=dev)
    KB = W if kg_here else KG
    # with discard_g kernel 2 drops its G rows (but the last, which the state pass reads) from L2 when it is done
    # with them, where no later kernel reads G and its rows are whole 128-byte lines
    discard_g = _discard_g(LAUNCH["discard_g"], kg_here and qg_raw, K, q.device, interp)
    intra_args = (q, k, beta, G, rq, rk, Akk, Aqk, cu_seqlens, chunk_indices, opts.resolved_scale(K), QG,
                  kept["P"], kept["Aqk"], KB, KG)
    intra_consts = dict(
        H=H, HV=HV, K=K, BT=BT, BC=BC, BK=min(LAUNCH["intra_bk"], BKg),
        BETA=BETA_CODES[opts.beta], L2NORM=opts.use_qk_l2norm, L2_HERE=opts.use_qk_l2norm and l2_in_intra,
        QG_HERE=qg_raw,
        MAX_EXP=MAX_EXP * LOG2E.value if exp2 else MAX_EXP, CHECK_RANGE=check_range, EXP2=exp2,
        INTERPRET=interp, SAVE=keep, KG_HERE=kg_here, STREAM=bool(LAUNCH["intra_stream"]), ONE_ANCHOR=one_anchor,
        PREC=_tensor_core_precision(LAUNCH["intra_precision"], interp), FALLBACK=_intra_fallback(LAUNCH["intra_fallback"], opts.gate), num_warps=LAUNCH["intra_warps"],
        num_stages=LAUNCH["intra_stages"],
        **register_cap(LAUNCH["intra_maxnreg"], intra_cap),
    )
    if LAUNCH["intra_one_launch"]:
        _intra_chunk_kernel[(NT, HV)](
            *intra_args, g, *gate_args, float(opts.lower_bound), GATE_HERE=gate_here, GATE=GATE_CODES[opts.gate],
            BKG=BK_gate, L2_IN_GATE=l2_in_gate, DISCARD_G=discard_g,
            BJ3=_off_tile(3, LAUNCH["intra_off_tail"], intra_cap > 0),
            **intra_consts)
    else:
        for block in range(BT // BC):  # one launch per block index: each sizes its tiles to its columns
            _intra_kernel[(NT, HV)](*intra_args, I=block,
                                    BJ=_off_tile(block, LAUNCH["intra_off_tail"], intra_cap > 0),
                                    **intra_consts)
    solve_prec = _solve_precisions(LAUNCH, keep)
    # the bf16 X, unless the W/U kernel reads the fp32 one (save_states)
    Xs = G if save_states else torch.empty(NT, HV, BT, BT, dtype=bf16, device=dev)
    _solve_kernel[(NT, HV)](Akk, beta, Xs, kept["X"], cu_seqlens, chunk_indices, HV=HV, BT=BT, BC=BC,
                            BETA=BETA_CODES[opts.beta], INTERPRET=interp, SAVE=keep, STORE_XS=not save_states,
                            **solve_prec,
                            num_warps=LAUNCH["solve_warps"], **register_cap(LAUNCH["solve_maxnreg"], _solve_cap(keep)))
    if keep:
        saved.update(kept)

    U = torch.empty(TT, HV, V, dtype=f32 if save_states else bf16, device=dev)
    _wu_kernel[(NT, HV)](
        q, k, v, beta, G, rq, rk, Xs, kept["X"], W, U, QG, KG, KB, cu_seqlens, chunk_indices, opts.resolved_scale(K),
        H=H, HV=HV, K=K, V=V, BT=BT, BK=min(LAUNCH["wu_bk"], BKg),
        BV=min(LAUNCH["wu_bv"], max(16, triton.next_power_of_2(V))),
        BETA=BETA_CODES[opts.beta], L2NORM=opts.use_qk_l2norm, QG_DONE=qg_raw, KG_DONE=kg_here, EXP2=exp2,
        INTERPRET=interp, PREC=_tensor_core_precision(LAUNCH["wu_precision"], interp), num_warps=_wu_warps(V),
        num_stages=LAUNCH["wu_stages"],
        **register_cap(LAUNCH["wu_maxnreg"], _wu_cap(kg_here, save_states)),
    )

    BK = max(16, triton.next_power_of_2(K))
    # the state pass's independent chains: sequences, or their segments with state_split
    n_chains, seg_info, seg_offsets = N, G, G
    few_chains = N * HV <= SPLIT_MAX_PAIRS  # only then the longest sequence matters (a host max over N lengths)
    longest = -(-max(tables[2]) // BT) if few_chains else 0
    seg_chunks = _split_launch(N * HV, longest, BK)
    if seg_chunks:
        seg_info, seg_offsets, NS = _segment_tables(tables, dev, seg_chunks)
        n_chains = NS if NS > N else N  # split only where some sequence is longer than one segment
    split = n_chains != N
    # tiles, depth and out_in_state by the number of chains (a segment is as independent as a sequence)
    BV, stages, out_in_state = _state_launch(n_chains * HV, BK, V)
    o = torch.empty(TT, HV, V, dtype=v.dtype, device=dev)
    # with out_in_state the state pass writes o itself: no chunk-start states or V_new in memory
    h = G if out_in_state else torch.empty(NT, HV, K, V, dtype=bf16, device=dev)
    v_new = G if out_in_state and not save_states else torch.empty(TT, HV, V, dtype=f32 if save_states else bf16,
                                                                   device=dev)
    final_state = torch.empty(state_shape, dtype=f32, device=dev) if opts.output_final_state else None
    with_states = output_chunk_states or save_states
    chunk_states = torch.empty((NT, *state_shape[1:]), dtype=f32, device=dev) if with_states else None
    if save_states:
        saved.update(states=chunk_states, Vn=v_new, W=W, KG=KG)
    if keep and opts.use_qk_l2norm:
        saved.update(rq=rq, rk=rk)
    h0_arg = initial_state if initial_state is not None else G
    S0 = G
    if split:
        R = torch.empty(n_chains, HV, K, V, dtype=f32, device=dev)
        M = torch.empty(n_chains, HV, K, K, dtype=f32, device=dev)
        S0 = torch.empty(n_chains, HV, K, V, dtype=f32, device=dev)
        # 5a: tiles of R's V columns and M's K columns, one width for both
        BVa = max(16, min(LAUNCH["split_bv"], triton.next_power_of_2(max(K, V))))
        _segment_affine_kernel[(n_chains * (triton.cdiv(V, BVa) + triton.cdiv(K, BVa)), HV)](
            W, U, KG, G, R, M, h0_arg, cu_seqlens, seg_info, HV=HV, K=K, V=V, BT=BT, BK=BK, BV=BVa,
            STATE_VK=vk, USE_H0=initial_state is not None, EXP2=exp2,
            INTERPRET=interp, num_warps=LAUNCH["state_warps"], num_stages=1 if BVa > 16 else 3,
        )
        # 5b: sequential over each sequence's segments, tiles as an unsplit pass would take
        BVb = _state_launch(N * HV, BK, V)[0]
        _segment_scan_kernel[(N * triton.cdiv(V, BVb), HV)](
            R, M, S0, h0_arg, seg_offsets, HV=HV, K=K, V=V, BK=BK, BV=BVb, STATE_VK=vk,
            USE_H0=initial_state is not None, num_warps=LAUNCH["scan_warps"],
        )
        del R, M
    _state_kernel[(n_chains * triton.cdiv(V, BV), HV)](
        W, U, KG, G, h, v_new, h0_arg, final_state if final_state is not None else G,
        chunk_states if chunk_states is not None else G, QG, Aqk, o, rq, opts.resolved_scale(K), cu_seqlens,
        chunk_offsets, seg_info, S0, HV=HV, K=K, V=V, BT=BT, BK=BK, BV=BV,
        STATE_VK=vk, USE_H0=initial_state is not None, STORE_HT=final_state is not None,
        STORE_HS=chunk_states is not None, OUT=out_in_state, SPLIT=split, QG_RAW=qg_raw,
        L2NORM=opts.use_qk_l2norm, EXP2=exp2, STORE_VN=not out_in_state or save_states, INTERPRET=interp,
        PREFETCH=_state_prefetch(LAUNCH["state_prefetch"], out_in_state),
        num_warps=LAUNCH["state_warps"], num_stages=stages, **register_cap(LAUNCH["state_maxnreg"]),
    )

    if not out_in_state:
        BVo = min(LAUNCH["out_bv"], max(16, triton.next_power_of_2(V)))
        _output_kernel[(NT * triton.cdiv(V, BVo), HV)](
            QG, Aqk, h, v_new, o, rq, opts.resolved_scale(K), cu_seqlens, chunk_indices,
            HV=HV, K=K, V=V, BT=BT, BK=min(64, BK), BV=BVo, QG_RAW=qg_raw, L2NORM=opts.use_qk_l2norm,
            INTERPRET=interp, num_warps=LAUNCH["out_warps"], **register_cap(LAUNCH["out_maxnreg"]),
        )
    if output_chunk_states:
        return o.view(B, T, HV, V), final_state, chunk_states
    return o.view(B, T, HV, V), final_state


def _intra_cap(one_anchor: bool, check_range: bool) -> int:
    """`_intra_block`'s register cap for intra_maxnreg None: 168 (6 programs per SM by registers instead of 4) with
    the diagonal blocks at one anchor and no range check (`_intra_anchors`; fewer accumulators live, ptxas 100
    bytes of spills, 24 with the 64-wide tile), else none (0). H200, the same bits: K3 1.032-1.034, 32 x 16384 with
    the safe gate and L2 norm in the op 1.026; with two anchors (32 x 16384, precomputed gate) it loses, 0.953, and
    with one anchor range-checked there 0.963."""
    return 168 if one_anchor and not check_range else 0


def _off_tile(block: int, tail: bool | None, capped: bool) -> int:
    """The width of `_intra_block`'s first tile of the columns before block `block`: with tail (launch setting
    intra_off_tail; None: where `_intra_cap` caps the kernel, capped) the largest power of two <= 16 block (block 3's
    last 16 columns then take a second tile: less work, 32.5 KB of shared memory instead of 42.5, more spills under
    a cap), else the smallest >= 16 block (block 3: 64 columns, 16 of them masked); at least 16. H200: with the
    register cap on K3 1.034 against 1.016 for the 64-wide tile; uncapped the tail loses, 0.998 on K3, 0.995 at 32 x
    16384 (precomputed gate)."""
    if tail is None:
        tail = capped
    if tail:
        return BC * (1 << max(block, 1).bit_length() - 1)
    return max(BC, triton.next_power_of_2(block * BC))


def _wu_warps(V: int) -> int:
    """`_wu_kernel`'s warps: LAUNCH["wu_warps"], but 8 where V fits one 16-wide tile. Triton 3.6 on the H100 got
    that kernel wrong at 4 warps there: o 0.9 off a float64 recurrence at K = 20 with V = 12 or 16, an illegal
    memory access at K = 32 (V = 16, 12), while 2 or 8 warps, or V = 32 on tiles of 16, were right (the interpreter
    was right)."""
    return LAUNCH["wu_warps"] if V > 16 else 8


def _wu_cap(kg_here: bool, save_states: bool) -> int:
    """`_wu_kernel`'s register cap for wu_maxnreg None: 168 where it forms its bf16 operands from k and G itself
    (neither kg_in_intra nor save_states), else none (0). H200 (the same bits): K3 1.020 (2.348 -> 2.301 ms; 174
    registers, 2 programs per SM uncapped), 32 x 16384 with the safe gate and L2 norm in the op 1.018; where it reads
    the intra kernel's operands (kg_in_intra) the cap loses (32 x 16384: 0.994). Not timed on an H100 (there a cap of
    128 loses on K3, 0.973) nor with save_states."""
    return 168 if not (kg_here or save_states) else 0


def _solve_cap(keep: bool) -> int:
    """`_solve_kernel`'s register cap for solve_maxnreg None: 168 (ptxas, triton 3.9: 194 -> 168 registers, 4 bytes of
    spills; 12 one-warp programs per SM by registers instead of 8) for the tf32 solve, none (0) for the tf32x3 one of
    the kept matrices (keep; not timed). H200 (Nsight Compute on K3 uncapped: 2 warps per scheduler, an instruction
    every 3.2 cycles; the same bits): 1.006-1.010 on the six prefill shapes of benchmarks/RESULTS.md; a cap of 128 (352 bytes of spills,
    16 programs) 1.000 on K3 and 32 x 16384. On the H100, with the solve in tf32x3, 128 lost (0.938 / 0.949 on K3 /
    32 x 16384) and 168 gave 0.995 on 32 x 16384."""
    return 0 if keep else 168


def _intra_anchors(setting: bool, gate: str, lower_bound: float) -> tuple[bool, bool]:
    """(one_anchor, check_range) of the intra kernel's diagonal blocks. Launch setting intra_one_anchor (setting):
    one anchor, the block's row 8 (two products per K-tile instead of four), else two (rows 0 and 8). The range
    check (each row's exp arguments within MAX_EXP of its anchor, else the element-wise fallback) is skipped where
    the safe gate bounds them: every |g| < -lower_bound, 8 gates between row 8 and a block's first or last row with
    one anchor (lower_bound >= -7.5), 7 within an 8-row half with two (>= -8.57)."""
    steps = BC // 2 if setting else BC // 2 - 1
    return bool(setting), not (gate == "safe" and -float(lower_bound) * steps <= MAX_EXP)


def _intra_fallback(setting: str | None, gate: str) -> str:
    """`_intra_block`'s FALLBACK for launch setting intra_fallback (setting): "elementwise", "inline", or
    "inline_monotone" (inline, for a gate computed in the op: every g <= 0, `_block_past_range`). None: inline for a
    gate computed in the op, else elementwise."""
    if setting is None:
        setting = "elementwise" if gate == "precomputed" else "inline"
    if setting not in ("inline", "elementwise"):
        raise ValueError(f"LAUNCH['intra_fallback'] must be 'inline', 'elementwise' or None, not {setting!r}")
    return "inline_monotone" if setting == "inline" and gate != "precomputed" else setting


def _kg_in_intra(setting: bool | None, l2_here: bool) -> bool:
    """Launch setting kg_in_intra (setting); None: on unless the intra kernel computes the q/k L2-norm factors (l2_here),
    which it then needs before its products, in a pass of its own over k. H100: 1.020-1.028
    on five of the six prefill shapes without the L2 norm in the op (W/U 368 -> 217 us, intra 603 -> 727 at 32 heads x
    16384), 0.993 on K3 (L2 norm in the op)."""
    return (not l2_here) if setting is None else bool(setting)


def _gate_in_intra(setting: bool | None, gate: str) -> bool:
    """Launch setting gate_in_intra (setting); None: on for a precomputed gate, off for one computed in the op. H100
    (the same bits): 1.016-1.021 on five of the six prefill shapes with a precomputed gate (32
    x 16384 1.974 -> 1.933 ms), 0.989 on K3 (safe gate and L2 norm in the op)."""
    return (gate == "precomputed") if setting is None else bool(setting)


def _solve_precisions(launch: dict, keep: bool) -> dict:
    """The solve's dot precisions (its constexprs PREC_POW, PREC_INV, PREC_MERGE) from the launch settings
    solve_power_precision (None: as solve_inv_precision), solve_inv_precision and solve_merge_precision; always
    SOLVE_PRECISION (tf32x3) where the chunk matrices are kept (keep), for the backward's fp32 X. And PEEL, the
    launch setting solve_peel (the identity kept out of the products: `_inverse_unit_lower`)."""
    peel = bool(launch["solve_peel"])
    if keep:
        p = SOLVE_PRECISION.value
        return dict(PREC_POW=p, PREC_INV=p, PREC_MERGE=p, PEEL=peel)
    inv = launch["solve_inv_precision"]
    return dict(PREC_POW=launch["solve_power_precision"] or inv, PREC_INV=inv, PREC_MERGE=launch["solve_merge_precision"],
                PEEL=peel)


def _tensor_core_precision(prec: str, interp: bool) -> str:
    """`_pdot`'s PREC for the launch settings intra_precision and wu_precision ("tf32", "tf32_rn" or "tf32x3";
    common.py `dot_precision`)."""
    return dot_precision(prec, interp, ("tf32", "tf32_rn", "tf32x3"))


def _discard_g(setting: bool | None, g_unread: bool, K: int, device, interp: bool) -> bool:
    """Launch setting discard_g (setting; None: on where it applies): kernel 2 drops its G rows from L2 when done. It
    applies where no later kernel reads G but its chunks' last rows (g_unread: the W/U kernel reads neither k exp(G_last -
    G), beta k exp(G) nor q exp(G) from G), a row is whole 128-byte lines (K % 32 == 0), and the kernel runs compiled on
    an NVIDIA GPU (PTX). H100: 1.004-1.005, the same bits."""
    applies = g_unread and K % 32 == 0 and not interp and torch.device(device).type == "cuda" and torch.version.hip is None
    return applies and (setting is None or bool(setting))


def _split_launch(n_heads_total: int, longest_chunks: int, BK: int) -> int:
    """Chunks per segment of the split state pass (launch setting state_split; 0: not split). None splits into
    segments of SPLIT_CHUNKS chunks when the sequential pass has few chains and one is long: at most
    SPLIT_MAX_PAIRS (sequence, head) pairs, the longest sequence at least SPLIT_MIN_CHUNKS chunks. H100, segments
    of 64 against none: 8 pairs x 2048 chunks 1.38x (128: 1.017x more; 1.34x with
    32, 1.25x with 16), 16 x 1024 1.15x, 8 x 256 1.09x; 32 pairs of 256 or 64 chunks lost (0.95-0.98x with 32
    and 16). 16 pairs of 256 to 1023 chunks and 9 to 15 pairs were not measured."""
    seg = LAUNCH["state_split"]
    if seg is None:
        seg = SPLIT_CHUNKS if n_heads_total <= SPLIT_MAX_PAIRS and longest_chunks >= SPLIT_MIN_CHUNKS else 0
    return int(seg) if BK <= 128 else 0


def _state_prefetch(setting: bool | None, out_in_state: bool) -> bool:
    """Launch setting state_prefetch (None: on where the state pass does not compute the output): kernel 5 loads
    each chunk's last G row one step ahead. H200 (the same bits): 32 x 16384 1.030, 16 x 2 x
    16384 1.032 (the state pass at 32 pairs, 16-wide V-tiles); with the output in the pass 0.997-0.999 on K3, 96 x
    8192 and 8 x 131072 (measured with the q row factors loaded ahead as well), so not there."""
    return not out_in_state if setting is None else bool(setting)


def _state_launch(n_heads_total: int, BK: int, V: int) -> tuple[int, int, bool]:
    """V-tile, pipelining depth and out_in_state of the state pass. The pass is sequential over chunks, so few
    (sequence, head) pairs want narrow tiles (more programs in flight); the [BK, BV] fp32 state must also fit in
    registers. On the H100 3 stages help the 16-wide tiles and cost the wider ones (h96: 707 -> 573 us with 1
    stage; h32 x 16384, BV 16: 2.42 -> 2.19 ms with 3). From 64 pairs on, the output is computed in the pass with
    64-wide tiles (out_in_state): on the H100 that takes 4.3-11.6% off at 64 to 512 pairs and adds 17-86% at 8 to
    32 pairs."""
    out_in_state = LAUNCH["out_in_state"]
    if out_in_state is None:
        out_in_state = n_heads_total >= 64 and BK <= 128
    if out_in_state:
        BV = 64
    else:
        BV = 64 if n_heads_total >= 256 else (32 if n_heads_total > 64 else 16)
    if BK > 128:
        BV = min(BV, 32)
    BV = LAUNCH["state_bv"] or max(16, min(BV, triton.next_power_of_2(V)))
    return BV, LAUNCH["state_stages"] or (3 if BV <= 16 else 1), bool(out_in_state)
