/* The neon-bf16 provider's op set (Armv8.6-A FEAT_BF16): the MXFP8 linear on BFDOT/BFMMLA;
 * the other ops are neon's, which a target stages from neon's own set. */
#include "internal.h"
#include "arm/neon_bf16/neon_bf16.h"

const qk_provider_set qk_provider_neon_bf16 = {
    .name = "neon-bf16",
    .cpu_features = QK_CPU_NEON | QK_CPU_ARM_BF16,
    .ops = {
        .mxfp8_linear = &qk_linear_neon_bf16,
    },
};
