/* Target `aarch64` (Armv8-A with Advanced SIMD): the reference table with these overrides.
 *   norm family -> neon (src/simd/norm_simd.inc over 4-lane vec_neon.h)
 *   mx ops -> neon
 *   mxfp8_linear -> neon (f32 FMA)
 * Chosen by construction, not by measurement: no aarch64 hardware has run them yet (they
 * are tested under qemu-user, where time means nothing; tools/insn counts instructions per
 * element instead, BENCHMARKS.md). */
#include "internal.h"
#include "arm/neon/neon.h"

/* gemma_shifted_weight: as on every x86 target (the f32 1 + w saves a conversion per row);
   not measured on aarch64. */
const qk_target_config qk_target_config_built = {
    .name = "aarch64",
    .overrides = {
        .norm = QK_NORM_ALL(&qk_provider_neon),
        .mx_quantize = &qk_provider_neon,
        .mx_dequantize = &qk_provider_neon,
        .mxfp8_linear = &qk_provider_neon,   /* mx_pack_scale_pairs: ref's (a byte shuffle) */
    },
    .gemma_shifted_weight = true,
};
