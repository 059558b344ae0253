/* RMSNorm family API: every argument check of norm.md, then the staged provider's row
 * kernel over the rows (threads split rows when there is enough work). Nothing is
 * written unless every check passed. */
#include "internal.h"
#include "api/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const norm_fn_names[QK_NORM_KINDS] = {
    "qk_rms_norm", "qk_gemma_rms_norm", "qk_add_rms_norm", "qk_add_gemma_rms_norm",
    "qk_rms_norm_gated",
};

const char *qk_norm_op_name(qk_norm_kind kind) { return qk_op_names[kind]; }

/* t must have x's shape and dtype and a contiguous last dim. Inline: a small call makes up
   to four of these. */
static inline __attribute__((always_inline)) qk_status check_like_x(const char *fn, const char *name, const qk_tensor *t,
                              const qk_tensor *x, bool same_dtype)
{
    char a[96], b[96];
    qk_status st;   /* t itself passed qk_check_tensor at the top of qk_norm_run */
    bool same = t->ndim == x->ndim;
    for (int32_t d = 0; same && d < x->ndim; d++) same = t->shape[d] == x->shape[d];
    if (!same)
        return qk_fail(QK_ERR_SHAPE, "%s: %s has shape %s but x has shape %s", fn, name,
                       qk_shape_str(t, a, sizeof a), qk_shape_str(x, b, sizeof b));
    if (same_dtype && t->dtype != x->dtype)
        return qk_fail(QK_ERR_DTYPE, "%s: %s has dtype %s but x has dtype %s; they must match",
                       fn, name, qk_dtype_name(t->dtype), qk_dtype_name(x->dtype));
    if (!same_dtype && (st = qk_check_float_dtype(fn, name, t))) return st;
    if ((st = qk_check_last_contiguous(fn, name, t))) return st;
    return qk_check_data(fn, name, t);
}

/* out may be exactly `in` (in place) or disjoint from it. */
static qk_status check_inplace_or_disjoint(const char *fn, const char *on, const qk_tensor *o,
                                           qk_extent oe, const char *in_name, const qk_tensor *in,
                                           qk_extent ie)
{
    if (!qk_extents_overlap(oe, ie) || qk_tensor_same(o, in)) return QK_OK;
    return qk_fail(QK_ERR_LAYOUT, "%s: %s partially overlaps %s; it must be the same tensor "
                       "(same data and strides) or not overlap at all", fn, on, in_name);
}

/* ---- the common call, valid at a glance ----
   Rows of 1-D [H] or 2-D [R, H] tensors with a contiguous last dim and rows at least a row
   apart (stride[0] >= H), with data, every dim and stride below 2^30: for such calls the
   checks below take a few compares per tensor and the full sequence is skipped (every one
   of its checks would pass). Any other call, valid or not, takes the full sequence, which
   alone writes the error messages. */
#define NORM_FAST_LIM ((int64_t)1 << 30)

/* t has x's rank and shape (x already passed norm_fast_x), these rows, and data */
static inline __attribute__((always_inline)) bool fast_like_x(const qk_tensor *t, const qk_tensor *x)
{
    const int32_t nd = x->ndim;
    return t->ndim == nd && t->data && t->shape[nd - 1] == x->shape[nd - 1] &&
           t->stride[nd - 1] == 1 &&
           (nd == 1 || (t->shape[0] == x->shape[0] && t->stride[0] >= x->shape[1] &&
                        t->stride[0] < NORM_FAST_LIM));
}

static inline __attribute__((always_inline)) bool fast_x(const qk_tensor *x)
{
    if (x->ndim == 1)
        return x->shape[0] >= 1 && x->shape[0] < NORM_FAST_LIM && x->stride[0] == 1 && x->data;
    return x->ndim == 2 && x->shape[1] >= 1 && x->shape[1] < NORM_FAST_LIM && x->shape[0] >= 1 &&
           x->shape[0] < NORM_FAST_LIM && x->stride[1] == 1 && x->stride[0] >= x->shape[1] &&
           x->stride[0] < NORM_FAST_LIM && x->data;
}

/* the bytes of a tensor fast_x / fast_like_x accepted, its row stride in bytes (0 for one
   row, as qk_rows_set describes it) */
static inline __attribute__((always_inline)) qk_extent fast_extent(const qk_tensor *t, int64_t R,
                                                                   int64_t H, int64_t es)
{
    const int64_t s0 = t->ndim == 2 ? t->stride[0] : 0;
    return (qk_extent){(uintptr_t)t->data,
                       (uintptr_t)t->data + (uintptr_t)(((R - 1) * s0 + H) * es)};
}
static inline __attribute__((always_inline)) void fast_rows_set(qk_rows *r, const qk_tensor *t,
                                                                int64_t R, int64_t es)
{
    r->n = 1;
    r->shape[0] = R > 1 ? R : 1;
    r->bstride[0] = R > 1 ? t->stride[0] * es : 0;
}
/* o is exactly i (the in-place form) or does not overlap it; both passed fast_like_x */
static inline __attribute__((always_inline)) bool fast_inplace_or_disjoint(const qk_tensor *o, qk_extent oe,
                                                                           const qk_tensor *i, qk_extent ie)
{
    return !qk_extents_overlap(oe, ie) ||
           (o->data == i->data && (o->ndim == 1 || o->stride[0] == i->stride[0]));
}

/* t's rows: fast_rows_set for the layouts fast_x / fast_like_x accepted, else qk_rows_set */
static inline __attribute__((always_inline)) void norm_rows_of(qk_rows *r, const qk_tensor *t,
                                                               int64_t R, bool fast)
{
    if (fast) fast_rows_set(r, t, R, (int64_t)qk_dtype_bytes(t->dtype));
    else qk_rows_set(r, t);
}
/* The call's description, shared by the fast path and the full one (rstd, the full path's
   only, is set by it). Returns the streams the call moves per element (for the threading
   threshold). */
static inline __attribute__((always_inline)) int64_t norm_call_fill(
    qk_norm_call *c, qk_norm_kind kind, const qk_tensor *x, const qk_tensor *weight,
    const qk_tensor *out, const qk_tensor *extra, const qk_tensor *out2, int64_t rows, int64_t H,
    float eps, bool fast)
{
    c->res = c->gate = NULL;
    c->res_out = c->rstd = NULL;
    c->rr.n = c->gr.n = c->ror.n = c->rsr.n = 0;
    c->gdt = x->dtype;
    c->kind = kind;
    c->rows = rows;
    c->H = H;
    c->eps = eps;
    c->xdt = x->dtype;
    c->wdt = weight->dtype;
    c->x = (const char *)x->data;
    norm_rows_of(&c->xr, x, rows, fast);
    c->w = weight->data;
    c->out = (char *)out->data;
    norm_rows_of(&c->outr, out, rows, fast);
    if (kind == QK_NORM_ADD_RMS || kind == QK_NORM_ADD_GEMMA) {
        c->res = (const char *)extra->data;
        norm_rows_of(&c->rr, extra, rows, fast);
        c->res_out = (char *)out2->data;
        norm_rows_of(&c->ror, out2, rows, fast);
        return 4;
    }
    if (kind == QK_NORM_GATED) {
        c->gate = (const char *)extra->data;
        norm_rows_of(&c->gr, extra, rows, fast);
        c->gdt = extra->dtype;
        return 3;
    }
    return 2;   /* x in, out */
}

struct norm_job { qk_norm_fn fn; const qk_norm_call *c; };

static void norm_range(const void *ctx, int64_t begin, int64_t end)
{
    const struct norm_job *j = (const struct norm_job *)ctx;
    j->fn(j->c, begin, end);
}

qk_status qk_norm_run(qk_norm_kind kind, const qk_norm_impl *impl, const qk_tensor *x,
                      const qk_tensor *weight, const qk_tensor *extra, float eps,
                      qk_tensor *out, qk_tensor *out2)
{
    const char *fn = norm_fn_names[kind];
    const bool add = kind == QK_NORM_ADD_RMS || kind == QK_NORM_ADD_GEMMA;
    const bool gated = kind == QK_NORM_GATED;
    char a[96];
    qk_status st = qk_init();
    if (st) return st;
    if (!impl || !impl->fn)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s: no provider implements this op here", fn);

    qk_norm_call c;   /* no memset: 700 bytes of row descriptions, a sixth of a small call */
    int64_t streams;
    if (x && weight && out && fast_x(x) && qk_is_float_dtype(x->dtype) && weight->ndim == 1 &&
        weight->shape[0] == x->shape[x->ndim - 1] && weight->stride[0] == 1 && weight->data &&
        qk_is_float_dtype(weight->dtype) && eps >= 0.0f && !isinf(eps) && fast_like_x(out, x) &&
        out->dtype == x->dtype) {
        const int64_t H = x->shape[x->ndim - 1], R = x->ndim == 2 ? x->shape[0] : 1;
        const int64_t es = (int64_t)qk_dtype_bytes(x->dtype);
        const qk_extent ex = fast_extent(x, R, H, es), eo = fast_extent(out, R, H, es);
        const qk_extent ew = {(uintptr_t)weight->data,
                              (uintptr_t)weight->data + (uintptr_t)(H * (int64_t)qk_dtype_bytes(weight->dtype))};
        bool ok = fast_inplace_or_disjoint(out, eo, x, ex) && !qk_extents_overlap(eo, ew);
        if (add) {
            ok = ok && extra && out2 && fast_like_x(extra, x) && extra->dtype == x->dtype &&
                 fast_like_x(out2, x) && out2->dtype == x->dtype;
            if (ok) {
                const qk_extent ee = fast_extent(extra, R, H, es), e2 = fast_extent(out2, R, H, es);
                ok = fast_inplace_or_disjoint(out2, e2, extra, ee) && !qk_extents_overlap(e2, ex) &&
                     !qk_extents_overlap(e2, ew) && !qk_extents_overlap(eo, ee) &&
                     !qk_extents_overlap(eo, e2);
            }
        } else if (gated) {
            ok = ok && extra && fast_like_x(extra, x) && qk_is_float_dtype(extra->dtype) &&
                 !qk_extents_overlap(eo, fast_extent(extra, R, H, (int64_t)qk_dtype_bytes(extra->dtype)));
        }
        ok = ok && (add || !out2);   /* rstd: the full checks */
        if (ok) {
            streams = norm_call_fill(&c, kind, x, weight, out, extra, out2, R, H, eps, true);
            goto run;
        }
    }

    /* NULL arguments */
    if ((st = qk_check_tensor(fn, "x", x))) return st;
    if ((st = qk_check_tensor(fn, "weight", weight))) return st;
    if (add && (st = qk_check_tensor(fn, "residual", extra))) return st;
    if (gated && (st = qk_check_tensor(fn, "gate", extra))) return st;
    if ((st = qk_check_tensor(fn, "out", out))) return st;
    if (add && (st = qk_check_tensor(fn, "residual_out", out2))) return st;
    if (!(eps >= 0.0f) || isinf(eps))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: eps is %g; expected a finite value >= 0",
                       fn, (double)eps);

    /* x */
    if ((st = qk_check_float_dtype(fn, "x", x))) return st;
    const int64_t H = x->shape[x->ndim - 1];
    if (H == 0)
        return qk_fail(QK_ERR_SHAPE, "%s: x has shape %s; its last dim (H) must be >= 1", fn,
                       qk_shape_str(x, a, sizeof a));
    if ((st = qk_check_last_contiguous(fn, "x", x))) return st;
    if ((st = qk_check_data(fn, "x", x))) return st;

    /* weight */
    if ((st = qk_check_float_dtype(fn, "weight", weight))) return st;
    if (weight->ndim != 1 || weight->shape[0] != H)
        return qk_fail(QK_ERR_SHAPE, "%s: weight has shape %s but x's last dim is %lld", fn,
                       qk_shape_str(weight, a, sizeof a), (long long)H);
    if (H > 1 && weight->stride[0] != 1)
        return qk_fail(QK_ERR_LAYOUT, "%s: weight has stride %lld; it must be contiguous", fn,
                       (long long)weight->stride[0]);
    if ((st = qk_check_data(fn, "weight", weight))) return st;

    /* the other inputs and the outputs */
    if (add && (st = check_like_x(fn, "residual", extra, x, true))) return st;
    if (gated && (st = check_like_x(fn, "gate", extra, x, false))) return st;
    if ((st = check_like_x(fn, "out", out, x, true))) return st;
    if (add && (st = check_like_x(fn, "residual_out", out2, x, true))) return st;
    const bool want_rstd = !add && out2 != NULL;
    if (want_rstd) {
        if ((st = qk_check_tensor(fn, "rstd", out2))) return st;
        if (out2->dtype != QK_DTYPE_F32)
            return qk_fail(QK_ERR_DTYPE, "%s: rstd has dtype %s; expected F32", fn,
                           qk_dtype_name(out2->dtype));
        bool ok;
        if (x->ndim == 1) {
            ok = out2->ndim == 1 && out2->shape[0] == 1;
        } else {
            ok = out2->ndim == x->ndim - 1;
            for (int32_t d = 0; ok && d < out2->ndim; d++) ok = out2->shape[d] == x->shape[d];
        }
        if (!ok) {
            char b[96];
            qk_tensor lead = *x;
            lead.ndim = x->ndim > 1 ? x->ndim - 1 : 1;
            if (x->ndim == 1) lead.shape[0] = 1;
            return qk_fail(QK_ERR_SHAPE, "%s: rstd has shape %s; expected x's leading shape %s",
                           fn, qk_shape_str(out2, a, sizeof a), qk_shape_str(&lead, b, sizeof b));
        }
        if ((st = qk_check_data(fn, "rstd", out2))) return st;
    }

    /* aliasing: outputs never write one element twice, and overlap inputs only in place */
    if ((st = qk_check_no_self_overlap(fn, "out", out))) return st;
    if (add && (st = qk_check_no_self_overlap(fn, "residual_out", out2))) return st;
    if (want_rstd && (st = qk_check_no_self_overlap(fn, "rstd", out2))) return st;
    /* each tensor's extent once: the aliasing checks take pairs of them */
    const qk_extent ex = qk_extent_of(x), ew = qk_extent_of(weight), eo = qk_extent_of(out);
    const qk_extent ee = extra ? qk_extent_of(extra) : ex, e2 = out2 ? qk_extent_of(out2) : eo;
    if ((st = check_inplace_or_disjoint(fn, "out", out, eo, "x", x, ex))) return st;
    if ((st = qk_check_disjoint_extents(fn, "out", eo, "weight", ew))) return st;
    if (add) {
        if ((st = check_inplace_or_disjoint(fn, "residual_out", out2, e2, "residual", extra, ee)))
            return st;
        if ((st = qk_check_disjoint_extents(fn, "residual_out", e2, "x", ex))) return st;
        if ((st = qk_check_disjoint_extents(fn, "residual_out", e2, "weight", ew))) return st;
        if ((st = qk_check_disjoint_extents(fn, "out", eo, "residual", ee))) return st;
        if ((st = qk_check_disjoint_extents(fn, "out", eo, "residual_out", e2))) return st;
    }
    if (gated && (st = qk_check_disjoint_extents(fn, "out", eo, "gate", ee))) return st;
    if (want_rstd) {
        if ((st = qk_check_disjoint_extents(fn, "rstd", e2, "x", ex))) return st;
        if ((st = qk_check_disjoint_extents(fn, "rstd", e2, "weight", ew))) return st;
        if ((st = qk_check_disjoint_extents(fn, "rstd", e2, "out", eo))) return st;
    }

    const int64_t rows = qk_tensor_rows(x);
    if (rows == 0) return QK_OK;

    streams = norm_call_fill(&c, kind, x, weight, out, extra, out2, rows, H, eps, false);
    if (want_rstd) {
        /* rstd's dims are x's leading dims: describe it as rows of one element */
        qk_tensor r = *out2;
        if (x->ndim > 1) {
            r.ndim = out2->ndim + 1;
            r.shape[r.ndim - 1] = 1;
            r.stride[r.ndim - 1] = 1;
        } else {
            r.ndim = 2; r.shape[0] = 1; r.shape[1] = 1; r.stride[1] = 1;
        }
        c.rstd = (char *)out2->data;
        qk_rows_set(&c.rsr, &r);
    }
run:;
    struct norm_job job = {impl->fn, &c};
    qk_parallel_for(c.rows, streams * c.H * (int64_t)qk_dtype_bytes(c.xdt), impl->min_parallel_bytes,
                    norm_range, &job);
    return QK_OK;
}

#define NORM_ENTRY(kind) (&qk_target_table_built.ops.norm[kind])

qk_status qk_rms_norm(const qk_tensor *x, const qk_tensor *weight, float eps, qk_tensor *out,
                      qk_tensor *rstd)
{
    return qk_norm_run(QK_NORM_RMS, NORM_ENTRY(QK_NORM_RMS), x, weight, NULL, eps, out, rstd);
}

qk_status qk_gemma_rms_norm(const qk_tensor *x, const qk_tensor *weight, float eps,
                            qk_tensor *out, qk_tensor *rstd)
{
    return qk_norm_run(QK_NORM_GEMMA, NORM_ENTRY(QK_NORM_GEMMA), x, weight, NULL, eps, out, rstd);
}

qk_status qk_add_rms_norm(const qk_tensor *x, const qk_tensor *weight, const qk_tensor *residual,
                          float eps, qk_tensor *out, qk_tensor *residual_out)
{
    return qk_norm_run(QK_NORM_ADD_RMS, NORM_ENTRY(QK_NORM_ADD_RMS), x, weight, residual, eps,
                       out, residual_out);
}

qk_status qk_add_gemma_rms_norm(const qk_tensor *x, const qk_tensor *weight,
                                const qk_tensor *residual, float eps, qk_tensor *out,
                                qk_tensor *residual_out)
{
    return qk_norm_run(QK_NORM_ADD_GEMMA, NORM_ENTRY(QK_NORM_ADD_GEMMA), x, weight, residual, eps,
                       out, residual_out);
}

qk_status qk_rms_norm_gated(const qk_tensor *x, const qk_tensor *weight, const qk_tensor *gate,
                            float eps, qk_tensor *out)
{
    return qk_norm_run(QK_NORM_GATED, NORM_ENTRY(QK_NORM_GATED), x, weight, gate, eps, out, NULL);
}
