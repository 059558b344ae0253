/* Target `aarch64-bf16` (Armv8.6-A: Advanced SIMD + FEAT_BF16): the aarch64 overrides, and
 * the MXFP8 linear on BF16 dot products (BFDOT/BFMMLA), as x86-64-v4 runs it on vdpbf16ps.
 * Tested under qemu-user -cpu max; not timed on hardware yet (BENCHMARKS.md has its
 * instruction counts). */
#include "internal.h"
#include "arm/neon/neon.h"
#include "arm/neon_bf16/neon_bf16.h"

const qk_target_config qk_target_config_built = {
    .name = "aarch64-bf16",
    .overrides = {
        .norm = QK_NORM_ALL(&qk_provider_neon),
        .mx_quantize = &qk_provider_neon,
        .mx_dequantize = &qk_provider_neon,
        .mxfp8_linear = &qk_provider_neon_bf16,
    },
    .gemma_shifted_weight = true,
};
