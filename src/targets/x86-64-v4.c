/* Target `x86-64-v4` (AVX-512 F/BW/VL/DQ + AVX512-BF16): the reference table with these
 * overrides.
 *   norm family -> avx512 (16-lane f32, masked tails, no AVX512-BF16: its vcvtneps2bf16
 *                  flushes subnormals, so BF16 is rounded with integer RNE instead)
 * gemma_rms_norm: native (1 + w) kernel (decision measured with `qk bench norm`). */
#include "internal.h"
#include "ref/ref.h"
#include "x86/x86.h"

#define NORM_AVX512 {"avx512", qk_norm_avx512, 256 << 10}

const qk_target_table qk_target_table_built = {
    .name = "x86-64-v4",
    .cpu_features = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C | QK_CPU_AVX512F | QK_CPU_AVX512BW |
                    QK_CPU_AVX512VL | QK_CPU_AVX512DQ | QK_CPU_AVX512BF16,
    .ops = {
        .norm = {NORM_AVX512, NORM_AVX512, NORM_AVX512, NORM_AVX512, NORM_AVX512},
        .mx_quantize = {NULL, NULL},
        .mx_dequantize = {NULL, NULL},
        .mx_pack_scale_pairs = NULL,
        .mxfp8_linear = &qk_linear_avx512,  /* avx512 vdpbf16ps GEMV/GEMM (measurement: bench linear) */
    },
};
