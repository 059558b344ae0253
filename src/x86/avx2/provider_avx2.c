/* The avx2 provider's op set (AVX2, FMA, F16C). */
#include "internal.h"
#include "x86/x86.h"

#define NORM_AVX2 QK_NORM_IMPL_AVX2

const qk_provider_set qk_provider_avx2 = {
    .name = "avx2",
    .cpu_features = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C,
    .ops = {
        .norm = {NORM_AVX2, NORM_AVX2, NORM_AVX2, NORM_AVX2, NORM_AVX2},
        .mx_quantize = {"avx2", qk_mx_quantize_row_avx2},
        .mx_dequantize = {"avx2", qk_mx_dequantize_row_avx2},
        .mx_pack_scale_pairs = "ref",
        .mxfp8_linear = &qk_linear_avx2,
    },
};
