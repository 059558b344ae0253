/* Per-call ops: each stable-API call with a backend in front. The registry selects the
 * backend (strict when explicit); `target` and `reference` run libqkern's own argument
 * checks with the target's or the reference provider's kernels (qk_norm_run,
 * qk_mx_weight_create_with), `library` calls the loaded provider library's op table. Also
 * the multi-backend MXFP8 weight: one prepared layout per backend. */
#include "serve/serve_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- RMSNorm family ---- */
static qk_status run_norm(qk_serve_op op, qk_backend b, const qk_tensor *x, const qk_tensor *w,
                          const qk_tensor *extra, float eps, qk_tensor *out, qk_tensor *out2)
{
    qk_backend c;
    qk_status st = qk_serve_select(op, b, &c);
    if (st != QK_OK) return st;
    const qk_norm_kind kind = qk_serve_norm_kind(op);
    if (c == QK_BACKEND_TARGET)
        return qk_norm_run(kind, &qk_target_table_built.ops.norm[kind], x, w, extra, eps, out, out2);
    if (c == QK_BACKEND_REFERENCE)
        return qk_norm_run(kind, &qk_provider_ref.ops.norm[kind], x, w, extra, eps, out, out2);
    const qk_provider_ops *o = &qk_serve_lib()->ops;
    switch (op) {
    case QK_OP_GEMMA_RMS_NORM: st = o->gemma_rms_norm(x, w, eps, out, out2); break;
    case QK_OP_RMS_NORM: st = o->rms_norm(x, w, eps, out, out2); break;
    case QK_OP_ADD_GEMMA_RMS_NORM: st = o->add_gemma_rms_norm(x, w, extra, eps, out, out2); break;
    case QK_OP_ADD_RMS_NORM: st = o->add_rms_norm(x, w, extra, eps, out, out2); break;
    default: st = o->rms_norm_gated(x, w, extra, eps, out); break;
    }
    return st == QK_OK ? QK_OK : qk_serve_lib_fail(st, qk_serve_op_name(op));
}

qk_status qk_serve_rms_norm(qk_backend b, const qk_tensor *x, const qk_tensor *weight, float eps,
                            qk_tensor *out, qk_tensor *rstd)
{
    return run_norm(QK_OP_RMS_NORM, b, x, weight, NULL, eps, out, rstd);
}

qk_status qk_serve_gemma_rms_norm(qk_backend b, const qk_tensor *x, const qk_tensor *weight,
                                  float eps, qk_tensor *out, qk_tensor *rstd)
{
    return run_norm(QK_OP_GEMMA_RMS_NORM, b, x, weight, NULL, eps, out, rstd);
}

qk_status qk_serve_add_rms_norm(qk_backend b, const qk_tensor *x, const qk_tensor *weight,
                                const qk_tensor *residual, float eps, qk_tensor *out,
                                qk_tensor *residual_out)
{
    return run_norm(QK_OP_ADD_RMS_NORM, b, x, weight, residual, eps, out, residual_out);
}

qk_status qk_serve_add_gemma_rms_norm(qk_backend b, const qk_tensor *x, const qk_tensor *weight,
                                      const qk_tensor *residual, float eps, qk_tensor *out,
                                      qk_tensor *residual_out)
{
    return run_norm(QK_OP_ADD_GEMMA_RMS_NORM, b, x, weight, residual, eps, out, residual_out);
}

qk_status qk_serve_rms_norm_gated(qk_backend b, const qk_tensor *x, const qk_tensor *weight,
                                  const qk_tensor *gate, float eps, qk_tensor *out)
{
    return run_norm(QK_OP_RMS_NORM_GATED, b, x, weight, gate, eps, out, NULL);
}

/* ---- mxfp8_quantize ---- */
qk_status qk_serve_mxfp8_quantize(qk_backend b, const qk_tensor *x, const qk_mx_options *opt,
                                  qk_tensor *q, qk_tensor *scale)
{
    qk_backend c;
    qk_status st = qk_serve_select(QK_OP_MXFP8_QUANTIZE, b, &c);
    if (st != QK_OK) return st;
    if (c == QK_BACKEND_TARGET) return qk_mx_quantize(x, opt, q, scale);
    if (c == QK_BACKEND_REFERENCE)
        return qk_mx_quantize_with(&qk_provider_ref.ops.mx_quantize, x, opt, q, scale);
    st = qk_serve_lib()->ops.mx_quantize(x, opt, q, scale);
    return st == QK_OK ? QK_OK : qk_serve_lib_fail(st, "mxfp8_quantize");
}

/* ---- the multi-backend MXFP8 weight ---- */
qk_serve_weight *qk_serve_weight_new(int64_t N, int64_t K)
{
    qk_serve_weight *w = calloc(1, sizeof *w);
    if (w) {
        w->N = N;
        w->K = K;
    }
    return w;
}

static void drop_handle(qk_serve_weight *w, int b)
{
    if (!w->h[b]) return;
    bool shared = false;
    for (int o = QK_BACKEND_TARGET; o < QK_BACKEND_COUNT; o++)
        if (o != b && w->h[o] == w->h[b]) shared = true;
    if (w->owned[b] && !shared) {
        if (b == QK_BACKEND_LIBRARY) {
            qk_serve_lib()->ops.mx_weight_destroy(w->h[b]);
            qk_serve_lib_ref(-1);
        } else {
            qk_mx_weight_destroy(w->h[b]);
        }
    } else if (w->owned[b] && shared) {
        /* hand ownership to the backend that keeps the shared handle */
        for (int o = QK_BACKEND_TARGET; o < QK_BACKEND_COUNT; o++)
            if (o != b && w->h[o] == w->h[b]) {
                w->owned[o] = true;
                break;
            }
    }
    w->h[b] = NULL;
    w->owned[b] = false;
}

void qk_serve_weight_borrow(qk_serve_weight *w, qk_backend b, qk_mx_weight *h)
{
    w->h[b] = h;
    w->owned[b] = false;
}

qk_status qk_serve_weight_prepare(qk_serve_weight *w, const qk_tensor *q, const qk_tensor *scale,
                                  unsigned mask)
{
    unsigned added = 0;
    qk_status st = QK_OK;
    for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT && st == QK_OK; b++) {
        if (!(mask & QK_BACKEND_BIT(b)) || w->h[b]) continue;
        qk_backend c;
        if ((st = qk_serve_select(QK_OP_MXFP8_LINEAR, (qk_backend)b, &c)) != QK_OK) break;
        if (b == QK_BACKEND_LIBRARY) {
            const qk_provider_info *lib = qk_serve_lib();
            st = lib->ops.mx_weight_create(q, scale, &w->h[b]);
            if (st != QK_OK) {
                w->h[b] = NULL;
                st = qk_serve_lib_fail(st, "mxfp8_linear weight");
                break;
            }
            qk_serve_lib_ref(1);
            w->owned[b] = true;
        } else {
            const qk_linear_impl *impl = qk_serve_linear_impl((qk_backend)b);
            /* target and reference share one prepared weight where they are one provider */
            for (int o = QK_BACKEND_TARGET; o <= QK_BACKEND_REFERENCE; o++)
                if (o != b && w->h[o] && w->h[o]->impl == impl) {
                    w->h[b] = w->h[o];
                    w->owned[b] = false;
                }
            if (!w->h[b]) {
                if ((st = qk_mx_weight_create_with(impl, q, scale, &w->h[b])) != QK_OK) {
                    w->h[b] = NULL;
                    break;
                }
                w->owned[b] = true;
            }
        }
        added |= QK_BACKEND_BIT(b);
    }
    if (st != QK_OK) {
        for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT; b++)
            if (added & QK_BACKEND_BIT(b)) drop_handle(w, b);
        return st;
    }
    /* where target and reference are one provider, one prepared weight serves both */
    if (qk_serve_linear_impl(QK_BACKEND_TARGET) == qk_serve_linear_impl(QK_BACKEND_REFERENCE))
        for (int b = QK_BACKEND_TARGET; b <= QK_BACKEND_REFERENCE; b++) {
            const int o = b == QK_BACKEND_TARGET ? QK_BACKEND_REFERENCE : QK_BACKEND_TARGET;
            if (!w->h[b] && w->h[o]) {
                w->h[b] = w->h[o];
                w->owned[b] = false;
            }
        }
    return QK_OK;
}

qk_status qk_serve_weight_create(const qk_tensor *q, const qk_tensor *scale, unsigned backends,
                                 qk_serve_weight **out)
{
    static const char who[] = "qk_serve_weight_create";
    if (!q || !scale || !out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    if (backends & ~(QK_BACKEND_BIT(QK_BACKEND_TARGET) | QK_BACKEND_BIT(QK_BACKEND_REFERENCE) |
                     QK_BACKEND_BIT(QK_BACKEND_LIBRARY)))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: backends mask 0x%x has bits that name no "
                       "backend", who, backends);
    if (!backends) {
        qk_backend c;
        qk_status st = qk_serve_select(QK_OP_MXFP8_LINEAR, QK_BACKEND_DEFAULT, &c);
        if (st != QK_OK) return st;
        backends = QK_BACKEND_BIT(c);
    }
    qk_serve_weight *w = qk_serve_weight_new(q->ndim == 2 ? q->shape[0] : 0,
                                             q->ndim == 2 ? q->shape[1] : 0);
    if (!w) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    qk_status st = qk_serve_weight_prepare(w, q, scale, backends);
    if (st != QK_OK) {
        free(w);
        return st;
    }
    *out = w;
    qk_serve_ok();
    return QK_OK;
}

void qk_serve_weight_destroy(qk_serve_weight *w)
{
    if (!w) return;
    for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT; b++) drop_handle(w, b);
    free(w);
}

unsigned qk_serve_weight_backends(const qk_serve_weight *w)
{
    unsigned m = 0;
    for (int b = QK_BACKEND_TARGET; w && b < QK_BACKEND_COUNT; b++)
        if (w->h[b]) m |= QK_BACKEND_BIT(b);
    return m;
}

static void mask_text(unsigned m, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT && k < n; b++)
        if (m & QK_BACKEND_BIT(b))
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", qk_backend_name((qk_backend)b));
    if (!k) snprintf(buf, n, "none");
}

qk_status qk_serve_mxfp8_linear(qk_backend b, const qk_tensor *x, const qk_serve_weight *w,
                                const qk_tensor *bias, qk_tensor *out)
{
    if (!w) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_mxfp8_linear: w is NULL");
    qk_backend c;
    qk_status st = qk_serve_select(QK_OP_MXFP8_LINEAR, b, &c);
    if (st != QK_OK) return st;
    const qk_mx_weight *h = w->h[c];
    if (!h) {
        char have[96];
        mask_text(qk_serve_weight_backends(w), have, sizeof have);
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "mxfp8_linear: backend '%s' was selected%s but the "
                       "[%lld, %lld] weight was prepared for %s only; prepare it for '%s' too "
                       "(QK_LAYER_ALL_BACKENDS, or set the backend before "
                       "process_weights_after_loading)", qk_backend_name(c),
                       b == QK_BACKEND_DEFAULT ? " (by the registry)" : "", (long long)w->N,
                       (long long)w->K, have, qk_backend_name(c));
    }
    if (c != QK_BACKEND_LIBRARY) return qk_mxfp8_linear(x, h, bias, out);
    st = qk_serve_lib()->ops.mxfp8_linear(x, h, bias, out);
    return st == QK_OK ? QK_OK : qk_serve_lib_fail(st, "mxfp8_linear");
}
