/* MXFP8 format API (mxfp8.md, api.md): every argument check of qk_mx_quantize,
 * qk_mx_dequantize and qk_mx_pack_scale_pairs, then the staged provider's row kernel over
 * the rows (threads split rows when there is enough work). Nothing is written unless every
 * check passed. */
#include "internal.h"
#include "api/check.h"
#include "ref/mx_ref.h"

#include <stdio.h>
#include <stdlib.h>

qk_mx_options qk_mx_options_default(void)
{
    qk_mx_options o = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR, QK_ROUND_NEAREST_EVEN};
    return o;
}

static int64_t blocks_of(int64_t K) { return qk_mx_blocks(K); }

/* ---- argument checks (each names the function and the argument) ---- */

/* t must have exactly ref's shape. */
static qk_status check_same_shape(const char *fn, const char *name, const qk_tensor *t,
                                  const char *ref_name, const qk_tensor *ref)
{
    bool same = t->ndim == ref->ndim;
    for (int32_t d = 0; same && d < ref->ndim; d++) same = t->shape[d] == ref->shape[d];
    if (!same) {
        char a[96], b[96];
        return qk_fail(QK_ERR_SHAPE, "%s: %s has shape %s but %s has shape %s; they must match",
                       fn, name, qk_shape_str(t, a, sizeof a), ref_name,
                       qk_shape_str(ref, b, sizeof b));
    }
    return QK_OK;
}

/* scale must be [..., ceil(K/32)] with the leading dims of `of` ([..., K]). */
static qk_status check_scale_shape(const char *fn, const qk_tensor *scale, const char *of_name,
                                   const qk_tensor *of)
{
    const int64_t K = of->shape[of->ndim - 1], kb = blocks_of(K);
    char a[96], b[96];
    bool lead = scale->ndim == of->ndim;
    for (int32_t d = 0; lead && d + 1 < of->ndim; d++) lead = scale->shape[d] == of->shape[d];
    if (!lead)
        return qk_fail(QK_ERR_SHAPE, "%s: scale has shape %s but %s has shape %s; expected "
                       "[..., %lld] with %s's leading dims", fn, qk_shape_str(scale, a, sizeof a),
                       of_name, qk_shape_str(of, b, sizeof b), (long long)kb, of_name);
    const int64_t got = scale->shape[scale->ndim - 1];
    if (got != kb)
        return qk_fail(QK_ERR_SHAPE, "%s: scale has %lld blocks per row but K = %lld needs "
                       "ceil(%lld/%d) = %lld", fn, (long long)got, (long long)K, (long long)K,
                       QK_MX_BLOCK, (long long)kb);
    return QK_OK;
}

static qk_status check_options(const char *fn, const qk_mx_options *o)
{
    if (o->elem != QK_DTYPE_F8_E4M3 && o->elem != QK_DTYPE_F8_E5M2)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: opt->elem is %d (%s); expected "
                       "QK_DTYPE_F8_E4M3 or QK_DTYPE_F8_E5M2", fn, (int)o->elem,
                       qk_dtype_name(o->elem));
    if ((unsigned)o->scale_rule > (unsigned)QK_MX_SCALE_MODELSLIM)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: opt->scale_rule is %d; expected "
                       "QK_MX_SCALE_FLOOR (0), QK_MX_SCALE_RCEIL (1) or QK_MX_SCALE_MODELSLIM (2)",
                       fn, (int)o->scale_rule);
    if ((unsigned)o->round > (unsigned)QK_ROUND_NEAREST_AWAY)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: opt->round is %d; expected "
                       "QK_ROUND_NEAREST_EVEN (0) or QK_ROUND_NEAREST_AWAY (1)", fn, (int)o->round);
    return QK_OK;
}

/* x-like [..., K] argument: K >= 1 and a contiguous last dim. */
static qk_status check_rows_tensor(const char *fn, const char *name, const qk_tensor *t)
{
    char a[96];
    if (t->shape[t->ndim - 1] == 0)
        return qk_fail(QK_ERR_SHAPE, "%s: %s has shape %s; its last dim (K) must be >= 1", fn,
                       name, qk_shape_str(t, a, sizeof a));
    qk_status st = qk_check_last_contiguous(fn, name, t);
    if (st) return st;
    return qk_check_data(fn, name, t);
}

/* ---- qk_mx_quantize ---- */

struct quant_job {
    qk_mx_quantize_row_fn fn;
    qk_mx_options opt;
    qk_dtype xdt;
    int64_t K;
    const char *x; qk_rows xr;
    char *q; qk_rows qr;
    char *s; qk_rows sr;
};

static void quant_range(const void *ctx, int64_t begin, int64_t end)
{
    const struct quant_job *j = (const struct quant_job *)ctx;
    for (int64_t i = begin; i < end; i++)
        j->fn(j->x + qk_rows_offset(&j->xr, i), j->xdt, j->K, &j->opt,
              (uint8_t *)(j->q + qk_rows_offset(&j->qr, i)),
              (uint8_t *)(j->s + qk_rows_offset(&j->sr, i)));
}

qk_status qk_mx_quantize(const qk_tensor *x, const qk_mx_options *opt, qk_tensor *q,
                         qk_tensor *scale)
{
    return qk_mx_quantize_with(&qk_target_table_built.ops.mx_quantize, x, opt, q, scale);
}

qk_status qk_mx_quantize_with(const qk_mx_quantize_impl *impl, const qk_tensor *x,
                              const qk_mx_options *opt, qk_tensor *q, qk_tensor *scale)
{
    static const char fn[] = "qk_mx_quantize";
    qk_status st = qk_init();
    if (st) return st;
    if (!impl || !impl->fn)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s: no provider implements this op here", fn);

    if ((st = qk_check_tensor(fn, "x", x))) return st;
    if ((st = qk_check_tensor(fn, "q", q))) return st;
    if ((st = qk_check_tensor(fn, "scale", scale))) return st;
    const qk_mx_options o = opt ? *opt : qk_mx_options_default();
    if ((st = check_options(fn, &o))) return st;

    if ((st = qk_check_float_dtype(fn, "x", x))) return st;
    if ((st = check_rows_tensor(fn, "x", x))) return st;
    if (q->dtype != o.elem)
        return qk_fail(QK_ERR_DTYPE, "%s: q has dtype %s but the options' elem is %s; they must "
                       "match", fn, qk_dtype_name(q->dtype), qk_dtype_name(o.elem));
    if ((st = check_same_shape(fn, "q", q, "x", x))) return st;
    if ((st = check_rows_tensor(fn, "q", q))) return st;
    if ((st = qk_check_dtype(fn, "scale", scale, QK_DTYPE_E8M0))) return st;
    if ((st = check_scale_shape(fn, scale, "x", x))) return st;
    if ((st = qk_check_last_contiguous(fn, "scale", scale))) return st;
    if ((st = qk_check_data(fn, "scale", scale))) return st;

    if ((st = qk_check_no_self_overlap(fn, "q", q))) return st;
    if ((st = qk_check_no_self_overlap(fn, "scale", scale))) return st;
    if ((st = qk_check_disjoint(fn, "q", q, "x", x))) return st;
    if ((st = qk_check_disjoint(fn, "scale", scale, "x", x))) return st;
    if ((st = qk_check_disjoint(fn, "q", q, "scale", scale))) return st;

    const int64_t rows = qk_tensor_rows(x);
    if (rows == 0) return QK_OK;
    struct quant_job j;
    memset(&j, 0, sizeof j);
    j.fn = impl->fn;
    j.opt = o;
    j.xdt = x->dtype;
    j.K = x->shape[x->ndim - 1];
    j.x = (const char *)x->data;
    qk_rows_set(&j.xr, x);
    j.q = (char *)q->data;
    qk_rows_set(&j.qr, q);
    j.s = (char *)scale->data;
    qk_rows_set(&j.sr, scale);
    const int64_t per_row = j.K * (int64_t)(qk_dtype_size(x->dtype) + 1) + blocks_of(j.K);
    qk_parallel_for(rows, per_row, QK_MX_MIN_PARALLEL_BYTES, quant_range, &j);
    return QK_OK;
}

/* ---- qk_mx_dequantize ---- */

struct dequant_job {
    qk_mx_dequantize_row_fn fn;
    qk_dtype qdt, odt;
    int64_t K;
    const char *q; qk_rows qr;
    const char *s; qk_rows sr;
    char *out; qk_rows outr;
};

static void dequant_range(const void *ctx, int64_t begin, int64_t end)
{
    const struct dequant_job *j = (const struct dequant_job *)ctx;
    for (int64_t i = begin; i < end; i++)
        j->fn((const uint8_t *)(j->q + qk_rows_offset(&j->qr, i)), j->qdt,
              (const uint8_t *)(j->s + qk_rows_offset(&j->sr, i)), j->K,
              j->out + qk_rows_offset(&j->outr, i), j->odt);
}

qk_status qk_mx_dequantize(const qk_tensor *q, const qk_tensor *scale, qk_tensor *out)
{
    static const char fn[] = "qk_mx_dequantize";
    qk_status st = qk_init();
    if (st) return st;
    const qk_mx_dequantize_impl *impl = &qk_target_table_built.ops.mx_dequantize;
    if (!impl->fn) return qk_fail(QK_ERR_UNSUPPORTED, "%s: no provider implements this op here", fn);

    if ((st = qk_check_tensor(fn, "q", q))) return st;
    if ((st = qk_check_tensor(fn, "scale", scale))) return st;
    if ((st = qk_check_tensor(fn, "out", out))) return st;

    if (q->dtype != QK_DTYPE_F8_E4M3 && q->dtype != QK_DTYPE_F8_E5M2)
        return qk_fail(QK_ERR_DTYPE, "%s: q has dtype %s; expected F8_E4M3 or F8_E5M2", fn,
                       qk_dtype_name(q->dtype));
    if ((st = check_rows_tensor(fn, "q", q))) return st;
    if ((st = qk_check_dtype(fn, "scale", scale, QK_DTYPE_E8M0))) return st;
    if ((st = check_scale_shape(fn, scale, "q", q))) return st;
    if ((st = qk_check_last_contiguous(fn, "scale", scale))) return st;
    if ((st = qk_check_data(fn, "scale", scale))) return st;
    if ((st = qk_check_float_dtype(fn, "out", out))) return st;
    if ((st = check_same_shape(fn, "out", out, "q", q))) return st;
    if ((st = check_rows_tensor(fn, "out", out))) return st;

    if ((st = qk_check_no_self_overlap(fn, "out", out))) return st;
    if ((st = qk_check_disjoint(fn, "out", out, "q", q))) return st;
    if ((st = qk_check_disjoint(fn, "out", out, "scale", scale))) return st;

    const int64_t rows = qk_tensor_rows(q);
    if (rows == 0) return QK_OK;
    struct dequant_job j;
    memset(&j, 0, sizeof j);
    j.fn = impl->fn;
    j.qdt = q->dtype;
    j.odt = out->dtype;
    j.K = q->shape[q->ndim - 1];
    j.q = (const char *)q->data;
    qk_rows_set(&j.qr, q);
    j.s = (const char *)scale->data;
    qk_rows_set(&j.sr, scale);
    j.out = (char *)out->data;
    qk_rows_set(&j.outr, out);
    const int64_t per_row = j.K * (int64_t)(qk_dtype_size(out->dtype) + 1) + blocks_of(j.K);
    qk_parallel_for(rows, per_row, QK_MX_MIN_PARALLEL_BYTES, dequant_range, &j);
    return QK_OK;
}

/* ---- qk_mx_pack_scale_pairs ---- */

struct pack_job {
    int64_t kb;
    const char *s; qk_rows sr;
    char *p; qk_rows pr;
};

static void pack_range(const void *ctx, int64_t begin, int64_t end)
{
    const struct pack_job *j = (const struct pack_job *)ctx;
    for (int64_t i = begin; i < end; i++)
        qk_mx_pack_scale_pairs_row_ref((const uint8_t *)(j->s + qk_rows_offset(&j->sr, i)), j->kb,
                                       (uint8_t *)(j->p + qk_rows_offset(&j->pr, i)));
}

qk_status qk_mx_pack_scale_pairs(const qk_tensor *scale, qk_tensor *packed)
{
    static const char fn[] = "qk_mx_pack_scale_pairs";
    char a[96], b[96];
    qk_status st = qk_init();
    if (st) return st;
    if (!qk_target_table_built.ops.mx_pack_scale_pairs)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s: no provider implements this op here", fn);

    if ((st = qk_check_tensor(fn, "scale", scale))) return st;
    if ((st = qk_check_tensor(fn, "packed", packed))) return st;
    if ((st = qk_check_dtype(fn, "scale", scale, QK_DTYPE_E8M0))) return st;
    if ((st = qk_check_dtype(fn, "packed", packed, QK_DTYPE_E8M0))) return st;
    const int32_t sd = scale->ndim;
    const int64_t kb = scale->shape[sd - 1], pairs = (kb + 1) / 2;
    if (kb == 0)
        return qk_fail(QK_ERR_SHAPE, "%s: scale has shape %s; its last dim (blocks per row) must "
                       "be >= 1", fn, qk_shape_str(scale, a, sizeof a));
    if ((st = qk_check_last_contiguous(fn, "scale", scale))) return st;
    bool ok = packed->ndim == sd + 1;
    for (int32_t d = 0; ok && d + 1 < sd; d++) ok = packed->shape[d] == scale->shape[d];
    ok = ok && packed->shape[sd - 1] == pairs && packed->shape[sd] == 2;
    if (!ok)
        return qk_fail(QK_ERR_SHAPE, "%s: packed has shape %s; for scale %s expected [..., %lld, 2] "
                       "(ceil(%lld/2) pairs) with scale's leading dims", fn,
                       qk_shape_str(packed, a, sizeof a), qk_shape_str(scale, b, sizeof b),
                       (long long)pairs, (long long)kb);
    if (packed->stride[sd] != 1 || (pairs > 1 && packed->stride[sd - 1] != 2))
        return qk_fail(QK_ERR_LAYOUT, "%s: packed's last two dims have strides [%lld, %lld]; each "
                       "row's pairs must be contiguous (strides [2, 1])", fn,
                       (long long)packed->stride[sd - 1], (long long)packed->stride[sd]);
    if ((st = qk_check_data(fn, "scale", scale))) return st;
    if ((st = qk_check_data(fn, "packed", packed))) return st;
    if ((st = qk_check_no_self_overlap(fn, "packed", packed))) return st;
    if ((st = qk_check_disjoint(fn, "packed", packed, "scale", scale))) return st;

    const int64_t rows = qk_tensor_rows(scale);
    if (rows == 0) return QK_OK;
    /* packed viewed as [..., 2 * pairs]: one contiguous row per scale row */
    qk_tensor pv = *packed;
    pv.ndim = sd;
    pv.shape[sd - 1] = 2 * pairs;
    pv.stride[sd - 1] = 1;
    struct pack_job j;
    memset(&j, 0, sizeof j);
    j.kb = kb;
    j.s = (const char *)scale->data;
    qk_rows_set(&j.sr, scale);
    j.p = (char *)packed->data;
    qk_rows_set(&j.pr, &pv);
    qk_parallel_for(rows, 2 * kb + 1, QK_MX_MIN_PARALLEL_BYTES, pack_range, &j);
    return QK_OK;
}
