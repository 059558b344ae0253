/* Target `generic`: portable C only. Every op runs the reference provider. */
#include "internal.h"
#include "ref/ref.h"

#define NORM_REF {"ref", qk_norm_ref, 256 << 10}

const qk_target_table qk_target_table_built = {
    .name = "generic",
    .cpu_features = 0,
    .ops = {
        .norm = {NORM_REF, NORM_REF, NORM_REF, NORM_REF, NORM_REF},
        .mx_quantize = {NULL, NULL},
        .mx_dequantize = {NULL, NULL},
        .mx_pack_scale_pairs = NULL,
        .mxfp8_linear = NULL,
    },
};
