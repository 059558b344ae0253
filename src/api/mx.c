/* MXFP8 format API (placeholder until the MXFP8 formats issue lands). */
#include "internal.h"

qk_mx_options qk_mx_options_default(void)
{
    qk_mx_options o = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR, QK_ROUND_NEAREST_EVEN};
    return o;
}

qk_status qk_mx_quantize(const qk_tensor *x, const qk_mx_options *opt, qk_tensor *q,
                         qk_tensor *scale)
{
    (void)x; (void)opt; (void)q; (void)scale;
    return qk_fail(QK_ERR_UNSUPPORTED, "qk_mx_quantize: not available in this build yet");
}

qk_status qk_mx_dequantize(const qk_tensor *q, const qk_tensor *scale, qk_tensor *out)
{
    (void)q; (void)scale; (void)out;
    return qk_fail(QK_ERR_UNSUPPORTED, "qk_mx_dequantize: not available in this build yet");
}

qk_status qk_mx_pack_scale_pairs(const qk_tensor *scale, qk_tensor *packed)
{
    (void)scale; (void)packed;
    return qk_fail(QK_ERR_UNSUPPORTED, "qk_mx_pack_scale_pairs: not available in this build yet");
}
