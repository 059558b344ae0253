/* Argument checks shared by the API entry points (see check.h): the complete checks, which
 * check.h's inline fast paths call for any input they cannot pass at a glance. */
#include "api/check.h"
#include "api/ckd.h"

#include <stdint.h>
#include <stdlib.h>

qk_status qk_check_tensor_full(const char *fn, const char *name, const qk_tensor *t)
{
    if (!t) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (t->ndim < 1 || t->ndim > QK_MAX_DIMS)
        return qk_fail(QK_ERR_SHAPE, "%s: %s has ndim %d; expected 1..%d", fn, name,
                       (int)t->ndim, QK_MAX_DIMS);
    /* api.md's limits: the product of the non-zero dims fits in int64 (so no element count
       or row count overflows), and a tensor with elements spans at most INT64_MAX bytes */
    int64_t prod = 1;
    bool empty = false;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return qk_fail(QK_ERR_SHAPE, "%s: %s has negative dim %d (%lld)", fn, name, (int)d,
                           (long long)t->shape[d]);
        if (t->shape[d] == 0) empty = true;
        else if (!qk_ckd_mul_i64(prod, t->shape[d], &prod))
            return qk_fail(QK_ERR_SHAPE, "%s: %s's dims multiply to more than INT64_MAX elements "
                           "(rule: dims and byte spans must fit in int64)", fn, name);
    }
    if (empty) return QK_OK;
    int64_t span = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 1) continue;
        int64_t a, p;
        if (t->stride[d] == INT64_MIN || (a = llabs(t->stride[d]), !qk_ckd_mul_i64(a, t->shape[d] - 1, &p)) ||
            !qk_ckd_add_i64(span, p, &span))
            return qk_fail(QK_ERR_LAYOUT, "%s: %s's dim %d has stride %lld, so the tensor spans more "
                           "than INT64_MAX elements (rule: dims and byte spans must fit in int64)", fn,
                           name, (int)d, (long long)t->stride[d]);
    }
    const int64_t es = qk_dtype_bytes(t->dtype) ? (int64_t)qk_dtype_bytes(t->dtype) : 1;
    int64_t bytes;
    if (!qk_ckd_add_i64(span, 1, &span) || !qk_ckd_mul_i64(span, es, &bytes))
        return qk_fail(QK_ERR_LAYOUT, "%s: %s spans more than INT64_MAX bytes (rule: dims and byte "
                       "spans must fit in int64)", fn, name);
    return QK_OK;
}

bool qk_tensor_has_elements(const qk_tensor *t)
{
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0) return false;
    return true;
}

qk_status qk_check_data_full(const char *fn, const char *name, const qk_tensor *t)
{
    if (qk_tensor_has_elements(t) && !t->data)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    return QK_OK;
}

qk_status qk_check_dtype(const char *fn, const char *name, const qk_tensor *t, qk_dtype want)
{
    if (t->dtype != want)
        return qk_fail(QK_ERR_DTYPE, "%s: %s has dtype %s; expected %s", fn, name,
                       qk_dtype_name(t->dtype), qk_dtype_name(want));
    return QK_OK;
}

qk_status qk_check_float_dtype_full(const char *fn, const char *name, const qk_tensor *t)
{
    if (!qk_is_float_dtype(t->dtype))
        return qk_fail(QK_ERR_DTYPE, "%s: %s has dtype %s; expected F32, F16 or BF16", fn, name,
                       qk_dtype_name(t->dtype));
    return QK_OK;
}

qk_status qk_check_last_contiguous_full(const char *fn, const char *name, const qk_tensor *t)
{
    const int32_t d = t->ndim - 1;
    if (t->shape[d] > 1 && t->stride[d] != 1)
        return qk_fail(QK_ERR_LAYOUT, "%s: %s's last dim has stride %lld; it must be contiguous "
                       "(stride 1)", fn, name, (long long)t->stride[d]);
    return QK_OK;
}

/* |s|, with INT64_MIN (which has no llabs) as INT64_MAX */
static int64_t qk_abs_sat(int64_t s) { return s == INT64_MIN ? INT64_MAX : llabs(s); }

qk_status qk_check_no_self_overlap_full(const char *fn, const char *name, const qk_tensor *t)
{
    /* Sufficient: ordered by |stride|, each dim's stride covers the extent of those inside. */
    int idx[QK_MAX_DIMS], n = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1) idx[n++] = d;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && qk_abs_sat(t->stride[idx[j]]) < qk_abs_sat(t->stride[idx[j - 1]]); j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    /* after qk_check_tensor the extents sum to at most the tensor's span; checked anyway,
       since a stride of INT64_MIN has no llabs */
    int64_t extent = 1;
    for (int i = 0; i < n; i++) {
        const int64_t st = t->stride[idx[i]], s = qk_abs_sat(st);
        int64_t p;
        if (s < extent || !qk_ckd_mul_i64(s, t->shape[idx[i]] - 1, &p) ||
            !qk_ckd_add_i64(p, extent, &extent))
            return qk_fail(QK_ERR_LAYOUT, "%s: %s's dim %d has stride %lld, so its elements "
                           "overlap each other", fn, name, idx[i], (long long)st);
    }
    return QK_OK;
}

qk_status qk_check_disjoint_extents_full(const char *fn, const char *an, qk_extent a, const char *bn,
                                    qk_extent b)
{
    if (qk_extents_overlap(a, b))
        return qk_fail(QK_ERR_LAYOUT, "%s: %s overlaps %s; outputs may not overlap inputs or each "
                       "other, except in the in-place forms the op names", fn, an, bn);
    return QK_OK;
}

qk_status qk_check_disjoint(const char *fn, const char *an, const qk_tensor *a, const char *bn,
                            const qk_tensor *b)
{
    return qk_check_disjoint_extents(fn, an, qk_extent_of(a), bn, qk_extent_of(b));
}
