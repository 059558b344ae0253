/* The neon provider's op set (Armv8-A Advanced SIMD). */
#include "internal.h"
#include "arm/neon/neon.h"

const qk_provider_set qk_provider_neon = {
    .name = "neon",
    .cpu_features = QK_CPU_NEON,
    .ops = {
        .norm = {QK_NORM_IMPL_NEON, QK_NORM_IMPL_NEON, QK_NORM_IMPL_NEON, QK_NORM_IMPL_NEON,
                 QK_NORM_IMPL_NEON},
        .mx_quantize = {"neon", qk_mx_quantize_row_neon},
        .mx_dequantize = {"neon", qk_mx_dequantize_row_neon},
        .mx_pack_scale_pairs = "ref",
        .mxfp8_linear = &qk_linear_neon,
    },
};
