/* Target `generic`: portable C only. Every op runs the reference provider. */
#include "internal.h"

/* gemma_rms_norm: the API keeps the native (1 + w) ref kernel (it receives the raw weight);
 * the serving layer keeps an f32 1 + w and runs rms_norm with it: `qk bench gemma-shift`
 * (2026-12-02, generic build on the 2-core Zen 5) measured the shifted weight faster
 * (native/shifted geometric mean 0.83x, loaded machine). */
const qk_target_config qk_target_config_built = {
    .name = "generic",
    .overrides = {.mxfp8_linear = NULL},   /* none: the reference provider, the only one here */
    .gemma_shifted_weight = true,
};
