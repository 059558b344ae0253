/* Target `x86-64-v3` (AVX2, FMA, F16C): the reference table with these overrides.
 *   norm family -> avx2 (8-lane f32 with double-accumulated sums of squares; BF16 rows in
 *                  even/odd halves with exact integer RNE; 27-30x ref, 4.4-4.9x the
 *                  composite, `qk bench norm` on Zen 3; F16/F32 calls moving >= 12 MiB
 *                  prefetch and store with non-temporal stores: F16 add_gemma 512 x 4096 /
 *                  5120 from DRAM 0.70-0.72x the time, a v3 build on Zen 4, 2026-12-05 (row
 *                  i + 2 into L2 then; the streamed row 3 KB ahead into L1 and F16 kept rows
 *                  since 2026-12-07: the avx2 provider 0.94-0.96x that on a Zen 5); not yet
 *                  measured on Zen 3)
 *   mx ops -> avx2 (BF16->E4M3: 7.8 Gelem/s per thread vs ref 0.08 on Zen 5; on Zen 3 85x
 *                   ref, 0.37 of copy bandwidth from cache and 0.58 from DRAM, qk bench quant)
 *   mxfp8_linear -> avx2 (f32 FMA: 10-28x ref at M = 1, 0.81-0.98 of read bandwidth; 0.40-0.64
 *                  of the f32 FMA peak (182 GFLOP/s) at M >= 128; qk bench linear, Zen 3, 93b8d47)
 */
#include "internal.h"
#include "x86/x86.h"

/* gemma_rms_norm: the API keeps the native (1 + w) kernel (it receives the raw weight); the
 * serving layer keeps an f32 1 + w and runs rms_norm with it: `qk bench gemma-shift`
 * (2026-12-02, 2-core Zen 5) measured native/shifted 0.96x geometric mean over the 32
 * cells, the shifted weight up to 28% faster at rows = 1 (no per-row weight conversion).
 * Re-measured on Zen 3 after the BF16 even/odd rows (2026-12-02 14:27): 0.99x; BF16 rows = 1
 * now favour the native kernel (up to 1.15x at H = 5120), F16 rows = 1 the shifted weight (up
 * to 1.23x at H = 2048), equal from 16 rows on: the decision stands. */
const qk_target_config qk_target_config_built = {
    .name = "x86-64-v3",
    .overrides = {
        .norm = QK_NORM_ALL(&qk_provider_avx2),
        .mx_quantize = &qk_provider_avx2,
        .mx_dequantize = &qk_provider_avx2,
        .mxfp8_linear = &qk_provider_avx2,   /* mx_pack_scale_pairs: ref's (a byte shuffle) */
    },
    .gemma_shifted_weight = true,
};
