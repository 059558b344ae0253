/* MXFP8 W8A8 linear API (placeholder until the linear issue lands). */
#include "internal.h"

qk_status qk_mx_weight_create(const qk_tensor *q, const qk_tensor *scale, qk_mx_weight **w)
{
    (void)q; (void)scale; (void)w;
    return qk_fail(QK_ERR_UNSUPPORTED, "qk_mx_weight_create: not available in this build yet");
}

void qk_mx_weight_destroy(qk_mx_weight *w) { (void)w; }
int64_t qk_mx_weight_n(const qk_mx_weight *w) { return w ? w->N : 0; }
int64_t qk_mx_weight_k(const qk_mx_weight *w) { return w ? w->K : 0; }

qk_status qk_mxfp8_linear(const qk_tensor *x, const qk_mx_weight *w, const qk_tensor *bias,
                          qk_tensor *out)
{
    (void)x; (void)w; (void)bias; (void)out;
    return qk_fail(QK_ERR_UNSUPPORTED, "qk_mxfp8_linear: not available in this build yet");
}
