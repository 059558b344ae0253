/* Target `x86-64-v3` (AVX2, FMA, F16C): the reference table with these overrides.
 *   norm family -> avx2 (8-lane f32 with double-accumulated sums of squares)
 * gemma_rms_norm is a native (1 + w) kernel: see x86-64-v4.c for the measurement. */
#include "internal.h"
#include "ref/ref.h"
#include "x86/x86.h"

#define NORM_AVX2 {"avx2", qk_norm_avx2, 256 << 10}

const qk_target_table qk_target_table_built = {
    .name = "x86-64-v3",
    .cpu_features = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C,
    .ops = {
        .norm = {NORM_AVX2, NORM_AVX2, NORM_AVX2, NORM_AVX2, NORM_AVX2},
        .mx_quantize = {NULL, NULL},
        .mx_dequantize = {NULL, NULL},
        .mx_pack_scale_pairs = NULL,
        .mxfp8_linear = &qk_linear_avx2,    /* avx2 f32 FMA (measurement: see bench linear) */
    },
};
