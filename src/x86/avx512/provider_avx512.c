/* The avx512 provider's op set (AVX-512 F/BW/VL/DQ; AVX512-BF16 where an op says so). */
#include "internal.h"
#include "x86/x86.h"

#define NORM_AVX512 QK_NORM_IMPL_AVX512

const qk_provider_set qk_provider_avx512 = {
    .name = "avx512",
    .cpu_features = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C | QK_CPU_AVX512F | QK_CPU_AVX512BW |
                    QK_CPU_AVX512VL | QK_CPU_AVX512DQ | QK_CPU_AVX512BF16,
    .ops = {
        .norm = {NORM_AVX512, NORM_AVX512, NORM_AVX512, NORM_AVX512, NORM_AVX512},
        .mx_quantize = {"avx512", qk_mx_quantize_row_avx512},
        .mx_dequantize = {"avx512", qk_mx_dequantize_row_avx512},
        .mx_pack_scale_pairs = "ref",
        .mxfp8_linear = &qk_linear_avx512,
    },
};
