/* The reference provider's op set: every op of the stable API in portable C. */
#include "internal.h"
#include "ref/ref.h"

#define REF_NORM {"ref", qk_norm_ref, 1 << 20}

const qk_provider_set qk_provider_ref = {
    .name = "ref",
    .cpu_features = 0,
    .ops = {
        .norm = {REF_NORM, REF_NORM, REF_NORM, REF_NORM, REF_NORM},
        .mx_quantize = {NULL, NULL},
        .mx_dequantize = {NULL, NULL},
        .mx_pack_scale_pairs = NULL,
        .mxfp8_linear = NULL,
    },
};
