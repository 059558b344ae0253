/* The reference provider's op set: every op of the stable API in portable C. */
#include "internal.h"
#include "ref/ref.h"
#include "ref/mx_ref.h"
#include "ref/linear_ref.h"

#define REF_NORM QK_NORM_IMPL_REF

const qk_provider_set qk_provider_ref = {
    .name = "ref",
    .cpu_features = 0,
    .ops = {
        .norm = {REF_NORM, REF_NORM, REF_NORM, REF_NORM, REF_NORM},
        .mx_quantize = {"ref", qk_mx_quantize_row_ref},
        .mx_dequantize = {"ref", qk_mx_dequantize_row_ref},
        .mx_pack_scale_pairs = "ref",
        .mxfp8_linear = &qk_linear_ref,
    },
};
