/* The staged table: the target's config (src/targets/<target>.c: the reference provider
 * plus its overrides) resolved once, when the library loads, into the op table the API
 * calls through. Each op comes from its provider's own set, so one definition serves. */
#include "internal.h"

qk_target_table qk_target_table_built;

void qk_target_resolve(const qk_target_config *cfg, qk_target_table *t)
{
    const qk_ops *ref = &qk_provider_ref.ops;
    const qk_target_overrides *o = &cfg->overrides;
    t->name = cfg->name;
    t->gemma_shifted_weight = cfg->gemma_shifted_weight;
    t->ops = *ref;
    t->cpu_features = 0;
#define QK_TAKE(set, field)                                                                    \
    do {                                                                                       \
        if (set) { t->ops.field = (set)->ops.field; t->cpu_features |= (set)->cpu_features; } \
    } while (0)
    for (int k = 0; k < QK_NORM_KINDS; k++) QK_TAKE(o->norm[k], norm[k]);
    QK_TAKE(o->mx_quantize, mx_quantize);
    QK_TAKE(o->mx_dequantize, mx_dequantize);
    QK_TAKE(o->mx_pack_scale_pairs, mx_pack_scale_pairs);
    QK_TAKE(o->mxfp8_linear, mxfp8_linear);
#undef QK_TAKE
}

/* Runs before main and before any library call: every entry point of the API reads the
   table (a static library's user links this file in through those reads). */
__attribute__((constructor)) static void qk_target_load(void)
{
    qk_target_resolve(&qk_target_config_built, &qk_target_table_built);
}
