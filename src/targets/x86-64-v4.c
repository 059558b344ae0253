/* Target `x86-64-v4` (AVX-512 F/BW/VL/DQ + AVX512-BF16): the reference table with these
 * overrides.
 *   norm family -> avx512 (16-lane f32, masked tails, rows software-pipelined; BF16 rows:
 *                  vdpbf16ps sums of squares and vcvtne2ps2bf16 stores where no result
 *                  can be subnormal (it flushes those), integer RNE otherwise; 2.3x avx2,
 *                  42x ref, geometric means of `qk bench norm`; calls moving >= 12 MiB
 *                  prefetch the streamed row 3 KB ahead into L1 and store with
 *                  non-temporal stores (F16 16 bytes at a time): add_gemma 512 x 4096 /
 *                  5120 from DRAM 0.75-0.85x the time, 2026-12-05, Zen 4 (row i + 2 into
 *                  L2 then); the L1 prefetch and F16 kept rows 0.59-0.86x that on the Zen 5,
 *                  2026-12-07, 0.90-1.00 of copy bandwidth in `qk bench norm`)
 *   mx ops -> avx512 (BF16->E4M3: 15.8 Gelem/s per thread vs avx2 7.8, ref 0.08; Zen 5)
 */
/* mxfp8_linear -> avx512. Its paths, by what `qk bench linear` and interleaved A/B runs
 * measured on the 2-core Zen 4 (2026-12-03, 2 threads; BENCHMARKS.md):
 *   every M, for a weight whose rows' block scales span at most 2^54: the folded kernel
 *     (x's scales folded into its BF16 exponents, the weight decoded in registers once per
 *     group of up to 16 rows (12 until 2026-12-07: a group of 16 runs M = 16 in 0.82-0.88x
 *     the time of 8 + 8 on the Zen 5), split evenly over ceil(M / 16) groups, one FMA per block;
 *     E4M3 subnormal weight codes added from per-block corrections, 2026-12-04: M = 512
 *     (5120, 5120) 70-75 -> 68 ms; each tile's stream also prefetched into L2 8 super-blocks
 *     ahead, 2026-12-05: M = 1, 2 from DRAM 0.92-0.97x the time on the Zen 4; on the Zen 5,
 *     2026-12-07, groups of up to 3 rows prefetch one super-block ahead into L1 only: M = 1..3
 *     0.80-0.94x the time there, but 1.2-1.55x on the Zen 4 that evening (interleaved A/B of
 *     the builds), where two super-blocks ahead into L2 only ran M = 1 at 0.78-0.80 of read
 *     bandwidth in `qk bench linear` (was 0.54-0.58), so the L2 form stands, the exact GEMV's
 *     M <= 3 too, until a Zen 5 measures it; later that day, groups of 2-4 tiles broadcast each x~ pair
 *     into a register (M = 6..8 0.87-0.91x the time) and threads take guided runs of tile
 *     groups (M = 16 (17408, 5120) 0.95x)). It matched the exact GEMV at M = 1..3
 *     (both at the weight stream: 0.85-0.93 of read bandwidth at M = 1 for 87.7 MiB), beat it
 *     at M = 4, and beat a BF16-panel GEMM (exact or folded) from M = 5 to 512: M = 16
 *     (5120, 5120) 3.60 -> 2.58 ms, M = 128 (17408, 5120) 109 -> 60 ms; at M = 512 it runs
 *     0.70-0.83 of the vdpbf16ps peak, where oneDNN's BF16 matmul runs 0.86-0.95.
 *   M >= 48 (96 until 2026-12-07, then 32), the same weights: the folded panel GEMM (each 4-tile
 *     panel decoded once per call, its block scales folded into the BF16 exponents; a 4 x 4
 *     register tile, the running sums in L1, since 2026-12-07: M = 512 0.93-0.96x the time
 *     of the 3 x 4 tile with register sums on the Zen 5; the folded kernel's bits).
 *     Interleaved A/B in one process, 2026-12-06 (Zen 4, 3 x 4 tile): M = 512 0.88-0.95x
 *     the folded kernel's time (5120, 5120) 66.5 -> 62.8 ms, (17408, 5120) 240 -> 212 ms;
 *     M = 96 / 128 0.89-0.98x; M = 64 / 72 / 80 0.95-1.05x (either way), so 96 was the start;
 *     with the 4 x 4 tile, on the Zen 5 (2026-12-07): M = 32 0.94-1.00x, 48 0.88-0.99x, 64
 *     0.82-0.90x the folded kernel's time, M = 16 1.02-1.04x, so 32 was the start; once the
 *     folded kernel streamed each tile's codes whole (2026-12-07: M = 5..31 0.84-0.97x the
 *     time) it ran M = 32..47 in 0.87-1.01x the panel GEMM's time, so 48 is. Each row tile
 *     prefetches the next one's x~ into L1 (2026-12-07, Zen 5: M = 512 (5120, 17408), whose
 *     17.8 MB x~ the weight stream evicts from L3, 0.58-0.93x the time; within 1% on a quiet
 *     host).
 *   a weight with a wider row (quantized weights span a few powers of two): the exact
 *     GEMV (M <= 4) and the exact BF16-panel GEMM (M > 4). */
#include "internal.h"
#include "x86/x86.h"

/* gemma_rms_norm: the API keeps the native (1 + w) kernel (it receives the raw weight); the
 * serving layer keeps an f32 1 + w and runs rms_norm with it: `qk bench gemma-shift`
 * (2026-12-02, 2-core Zen 5) measured native/shifted 0.98x geometric mean over the 32
 * cells — equal from 16 rows on, the shifted weight 8-15% faster at rows = 1 and
 * H >= 2048 (no per-row conversion of the BF16 weight). */
const qk_target_config qk_target_config_built = {
    .name = "x86-64-v4",
    .overrides = {
        .norm = QK_NORM_ALL(&qk_provider_avx512),
        .mx_quantize = &qk_provider_avx512,
        .mx_dequantize = &qk_provider_avx512,
        .mxfp8_linear = &qk_provider_avx512,   /* mx_pack_scale_pairs: ref's (a byte shuffle) */
    },
    .gemma_shifted_weight = true,
};
