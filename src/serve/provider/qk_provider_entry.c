/* The one entry point of a provider library (build/libqkern-provider-<target>.so): this
 * build's staged providers behind the stable API's calls, ABI QK_ABI_VERSION. Compiled
 * into the provider library only, never into libqkern; provider.map exports this symbol
 * alone, so every other symbol binds inside the library (a host's own libqkern never
 * interposes). An op the target stages no provider for is NULL in the table. */
#include "internal.h"
#include "qkern_serve.h"

#include <pthread.h>

#ifndef QK_PROVIDER_TARGET
#error "QK_PROVIDER_TARGET must name the build target (CMake's qkern_provider target sets it)"
#endif
#ifndef QK_VERSION_STRING
#define QK_VERSION_STRING "0.0.0"
#endif

static qk_provider_info info;
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

static void fill_info(void)
{
    const qk_ops *t = &qk_target_table_built.ops;
    info.abi_version = QK_ABI_VERSION;
    info.size = sizeof info;
    info.target = QK_PROVIDER_TARGET;
    info.version = QK_VERSION_STRING;
    info.init = qk_init;
    info.last_error = qk_last_error;
    info.provider = qk_provider;
    info.ops.rms_norm = t->norm[QK_NORM_RMS].fn ? qk_rms_norm : NULL;
    info.ops.gemma_rms_norm = t->norm[QK_NORM_GEMMA].fn ? qk_gemma_rms_norm : NULL;
    info.ops.add_rms_norm = t->norm[QK_NORM_ADD_RMS].fn ? qk_add_rms_norm : NULL;
    info.ops.add_gemma_rms_norm = t->norm[QK_NORM_ADD_GEMMA].fn ? qk_add_gemma_rms_norm : NULL;
    info.ops.rms_norm_gated = t->norm[QK_NORM_GATED].fn ? qk_rms_norm_gated : NULL;
    info.ops.mx_quantize = t->mx_quantize.fn ? qk_mx_quantize : NULL;
    if (t->mxfp8_linear) {
        info.ops.mx_weight_create = qk_mx_weight_create;
        info.ops.mx_weight_destroy = qk_mx_weight_destroy;
        info.ops.mxfp8_linear = qk_mxfp8_linear;
    }
}

__attribute__((visibility("default"))) const qk_provider_info *qk_provider_entry(void);

const qk_provider_info *qk_provider_entry(void)
{
    pthread_once(&info_once, fill_info);
    return &info;
}
