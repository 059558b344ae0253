/* Target `generic`: portable C only. Every op runs the reference provider. */
#include "internal.h"
#include "ref/ref.h"
#include "ref/mx_ref.h"
#include "ref/linear_ref.h"

#define NORM_REF QK_NORM_IMPL_REF

/* gemma_rms_norm: the API keeps the native (1 + w) ref kernel (it receives the raw weight);
 * the serving layer keeps an f32 1 + w and runs rms_norm with it: `qk bench gemma-shift`
 * (2026-12-02, generic build on the 2-core Zen 5) measured the shifted weight faster
 * (native/shifted geometric mean 0.83x, loaded machine). */
const qk_target_table qk_target_table_built = {
    .name = "generic",
    .cpu_features = 0,
    .ops = {
        .norm = {NORM_REF, NORM_REF, NORM_REF, NORM_REF, NORM_REF},
        .mx_quantize = {"ref", qk_mx_quantize_row_ref},   /* mx ops: ref, the only provider in this target */
        .mx_dequantize = {"ref", qk_mx_dequantize_row_ref},
        .mx_pack_scale_pairs = "ref",
        .mxfp8_linear = &qk_linear_ref,   /* the only provider here */
    },
    .gemma_shifted_weight = true,
};
