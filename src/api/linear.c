/* MXFP8 W8A8 linear API (mxfp8.md, "The W8A8 linear"; api.md): every argument check of
 * qk_mx_weight_create and qk_mxfp8_linear, then the provider that prepared the weight.
 * Nothing is written unless every check passed. The scale of a weight may be given as
 * E8M0 or as U8 (checkpoints store E8M0 bytes as U8); both mean 2^(b-127). */
#include "internal.h"
#include "api/check.h"

#include <stdlib.h>

static const char *const CREATE = "qk_mx_weight_create";
static const char *const LINEAR = "qk_mxfp8_linear";

qk_status qk_mx_weight_create_with(const qk_linear_impl *impl, const qk_tensor *q,
                                   const qk_tensor *scale, qk_mx_weight **w)
{
    const char *fn = CREATE;
    char a[96];
    qk_status st = qk_init();
    if (st) return st;
    if (!impl || !impl->prepare || !impl->run)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s: no provider implements mxfp8_linear here", fn);
    if (!w) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: w (the result pointer) is NULL", fn);
    if ((st = qk_check_tensor(fn, "q", q))) return st;
    if ((st = qk_check_tensor(fn, "scale", scale))) return st;

    if (q->dtype != QK_DTYPE_F8_E4M3)
        return qk_fail(QK_ERR_DTYPE, "%s: q has dtype %s; expected F8_E4M3", fn,
                       qk_dtype_name(q->dtype));
    if (q->ndim != 2 || q->shape[0] < 1 || q->shape[1] < 1)
        return qk_fail(QK_ERR_SHAPE, "%s: q has shape %s; expected [N, K] with N, K >= 1", fn,
                       qk_shape_str(q, a, sizeof a));
    const int64_t N = q->shape[0], K = q->shape[1], kb = qk_mx_blocks(K);
    if (scale->dtype != QK_DTYPE_E8M0 && scale->dtype != QK_DTYPE_U8)
        return qk_fail(QK_ERR_DTYPE, "%s: scale has dtype %s; expected F8_E8M0 (or U8 holding "
                       "E8M0 bytes)", fn, qk_dtype_name(scale->dtype));
    if (scale->ndim != 2 || scale->shape[0] != N || scale->shape[1] != kb)
        return qk_fail(QK_ERR_SHAPE, "%s: scale has shape %s; expected [%lld, %lld] for q [%lld, "
                       "%lld] (ceil(K/32) = %lld blocks per row)", fn,
                       qk_shape_str(scale, a, sizeof a), (long long)N, (long long)kb,
                       (long long)N, (long long)K, (long long)kb);
    if ((st = qk_check_last_contiguous(fn, "q", q))) return st;
    if ((st = qk_check_last_contiguous(fn, "scale", scale))) return st;
    if ((st = qk_check_data(fn, "q", q))) return st;
    if ((st = qk_check_data(fn, "scale", scale))) return st;

    const uint8_t *qd = (const uint8_t *)q->data, *sd = (const uint8_t *)scale->data;
    const int64_t qs = q->stride[0], ss = scale->stride[0];
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *s = sd + n * ss;
        for (int64_t b = 0; b < kb; b++)
            if (s[b] == 0xFF)
                return qk_fail(QK_ERR_FORMAT, "%s: scale[%lld][%lld] (row %lld, block %lld) is "
                               "0xFF (NaN); a weight with a NaN scale cannot be served", fn,
                               (long long)n, (long long)b, (long long)n, (long long)b);
        const uint8_t *r = qd + n * qs;
        for (int64_t k = 0; k < K; k++)
            if ((r[k] & 0x7F) == 0x7F)
                return qk_fail(QK_ERR_FORMAT, "%s: q[%lld][%lld] (row %lld, element %lld) is the "
                               "E4M3 NaN code 0x%02X; a weight with NaN elements cannot be "
                               "served", fn, (long long)n, (long long)k, (long long)n,
                               (long long)k, r[k]);
    }

    qk_mx_weight *nw = (qk_mx_weight *)calloc(1, sizeof *nw);
    if (!nw) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", fn);
    nw->N = N;
    nw->K = K;
    nw->kb = kb;
    nw->impl = impl;
    if ((st = impl->prepare(nw, qd, qs, sd, ss)) != QK_OK) {
        free(nw);
        return qk_fail(st, "%s: out of memory preparing a [%lld, %lld] weight for provider %s",
                       fn, (long long)N, (long long)K, impl->provider);
    }
    *w = nw;
    return QK_OK;
}

qk_status qk_mx_weight_create(const qk_tensor *q, const qk_tensor *scale, qk_mx_weight **w)
{
    return qk_mx_weight_create_with(qk_target_table_built.ops.mxfp8_linear, q, scale, w);
}

void qk_mx_weight_destroy(qk_mx_weight *w)
{
    if (!w) return;
    if (w->impl && w->impl->release) w->impl->release(w);
    free(w);
}

int64_t qk_mx_weight_n(const qk_mx_weight *w) { return w ? w->N : 0; }
int64_t qk_mx_weight_k(const qk_mx_weight *w) { return w ? w->K : 0; }

qk_status qk_mxfp8_linear(const qk_tensor *x, const qk_mx_weight *w, const qk_tensor *bias,
                          qk_tensor *out)
{
    const char *fn = LINEAR;
    char a[96], b[96];
    qk_status st = qk_init();
    if (st) return st;
    if (!w) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: w is NULL", fn);
    if ((st = qk_check_tensor(fn, "x", x))) return st;
    if ((st = qk_check_tensor(fn, "out", out))) return st;
    const int64_t N = w->N, K = w->K;

    /* x [..., K] */
    if (!qk_is_float_dtype(x->dtype))
        return qk_fail(QK_ERR_DTYPE, "%s: x has dtype %s; expected F32, F16 or BF16", fn,
                       qk_dtype_name(x->dtype));
    if (x->shape[x->ndim - 1] != K)
        return qk_fail(QK_ERR_SHAPE, "%s: x has shape %s but the weight is [%lld, %lld]: x's last "
                       "dim must be K = %lld", fn, qk_shape_str(x, a, sizeof a), (long long)N,
                       (long long)K, (long long)K);
    if ((st = qk_check_last_contiguous(fn, "x", x))) return st;
    if ((st = qk_check_data(fn, "x", x))) return st;

    /* bias [N] F32 */
    if (bias) {
        if ((st = qk_check_tensor(fn, "bias", bias))) return st;
        if (bias->dtype != QK_DTYPE_F32)
            return qk_fail(QK_ERR_DTYPE, "%s: bias has dtype %s; expected F32", fn,
                           qk_dtype_name(bias->dtype));
        if (bias->ndim != 1 || bias->shape[0] != N)
            return qk_fail(QK_ERR_SHAPE, "%s: bias has shape %s; expected [%lld] (the weight's N)",
                           fn, qk_shape_str(bias, a, sizeof a), (long long)N);
        if ((st = qk_check_last_contiguous(fn, "bias", bias))) return st;
        if ((st = qk_check_data(fn, "bias", bias))) return st;
    }

    /* out [..., N], x's dtype or F32 */
    bool same = out->ndim == x->ndim && out->shape[out->ndim - 1] == N;
    for (int32_t d = 0; same && d + 1 < x->ndim; d++) same = out->shape[d] == x->shape[d];
    if (!same) {
        qk_tensor want = *x;
        want.shape[want.ndim - 1] = N;
        return qk_fail(QK_ERR_SHAPE, "%s: out has shape %s; expected %s (x's leading dims, then "
                       "N)", fn, qk_shape_str(out, a, sizeof a), qk_shape_str(&want, b, sizeof b));
    }
    if (out->dtype != x->dtype && out->dtype != QK_DTYPE_F32)
        return qk_fail(QK_ERR_DTYPE, "%s: out has dtype %s; expected x's dtype (%s) or F32", fn,
                       qk_dtype_name(out->dtype), qk_dtype_name(x->dtype));
    if ((st = qk_check_last_contiguous(fn, "out", out))) return st;
    if ((st = qk_check_data(fn, "out", out))) return st;
    if ((st = qk_check_no_self_overlap(fn, "out", out))) return st;
    if (qk_tensor_overlap(out, x))
        return qk_fail(QK_ERR_LAYOUT, "%s: out overlaps x; the linear has no in-place form", fn);
    if (bias && qk_tensor_overlap(out, bias))
        return qk_fail(QK_ERR_LAYOUT, "%s: out overlaps bias", fn);

    const int64_t M = qk_tensor_rows(x);
    if (M == 0) return QK_OK;

    qk_linear_call c;
    memset(&c, 0, sizeof c);
    c.w = w;
    c.M = M;
    c.N = N;
    c.K = K;
    c.xdt = x->dtype;
    c.odt = out->dtype;
    c.x = (const char *)x->data;
    qk_rows_set(&c.xr, x);
    c.bias = bias ? (const float *)bias->data : NULL;
    c.out = (char *)out->data;
    qk_rows_set(&c.outr, out);
    if ((st = w->impl->run(&c)) != QK_OK)
        return qk_fail(st, "%s: out of memory for the call's scratch (M = %lld, K = %lld)", fn,
                       (long long)M, (long long)K);
    return QK_OK;
}
