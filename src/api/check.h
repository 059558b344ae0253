/* Argument checks shared by the API entry points: each one names the function and the
 * argument in its message (qk_fail) and returns the status, or QK_OK. */
#ifndef QK_API_CHECK_H
#define QK_API_CHECK_H

#include "internal.h"

/* The complete checks (check.c). The inline functions below answer QK_OK at a glance for
   the common, plainly valid input (a few compares, no call: a small norm call runs a dozen
   checks) and leave every other input, valid or not, to these. */
QK_HIDDEN qk_status qk_check_tensor_full(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_data_full(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_float_dtype_full(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_last_contiguous_full(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_no_self_overlap_full(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_disjoint_extents_full(const char *fn, const char *an, qk_extent a,
                                                   const char *bn, qk_extent b);
QK_HIDDEN bool qk_tensor_has_elements(const qk_tensor *t);

#define QK_CHECK_SMALL(v) ((v) > -((int64_t)1 << 30) && (v) < ((int64_t)1 << 30))

/* not NULL, 1..QK_MAX_DIMS dims, none negative, and api.md's limits (dims and byte spans fit
   in int64); fast: 1 or 2 dims with every dim and stride below 2^30 in magnitude */
static inline __attribute__((always_inline)) qk_status qk_check_tensor(const char *fn, const char *name, const qk_tensor *t)
{
    if (t && (t->ndim == 1 || t->ndim == 2) && t->shape[0] >= 0 && QK_CHECK_SMALL(t->shape[0]) &&
        QK_CHECK_SMALL(t->stride[0]) &&
        (t->ndim == 1 || (t->shape[1] >= 0 && QK_CHECK_SMALL(t->shape[1]) && QK_CHECK_SMALL(t->stride[1]))))
        return QK_OK;
    return qk_check_tensor_full(fn, name, t);
}
/* data not NULL when the tensor has elements */
static inline __attribute__((always_inline)) qk_status qk_check_data(const char *fn, const char *name, const qk_tensor *t)
{
    return t->data ? QK_OK : qk_check_data_full(fn, name, t);
}
QK_HIDDEN qk_status qk_check_dtype(const char *fn, const char *name, const qk_tensor *t, qk_dtype want);
/* F32, F16 or BF16 */
static inline __attribute__((always_inline)) qk_status qk_check_float_dtype(const char *fn, const char *name, const qk_tensor *t)
{
    return qk_is_float_dtype(t->dtype) ? QK_OK : qk_check_float_dtype_full(fn, name, t);
}
static inline __attribute__((always_inline)) qk_status qk_check_last_contiguous(const char *fn, const char *name, const qk_tensor *t)
{
    const int32_t d = t->ndim - 1;
    return t->shape[d] <= 1 || t->stride[d] == 1 ? QK_OK : qk_check_last_contiguous_full(fn, name, t);
}
/* an output must not write one element twice (a zero or aliasing stride); fast: one
   contiguous dim, or rows of a contiguous last dim at least a row apart (after
   qk_check_tensor, so the strides have magnitudes) */
static inline __attribute__((always_inline)) qk_status qk_check_no_self_overlap(const char *fn, const char *name, const qk_tensor *t)
{
    if (t->ndim == 1 && (t->shape[0] <= 1 || t->stride[0] == 1)) return QK_OK;
    if (t->ndim == 2 && t->stride[1] == 1 && t->stride[0] != INT64_MIN &&
        (t->stride[0] < 0 ? -t->stride[0] : t->stride[0]) >= (t->shape[1] > 1 ? t->shape[1] : 1))
        return QK_OK;
    return qk_check_no_self_overlap_full(fn, name, t);
}
QK_HIDDEN qk_status qk_check_disjoint(const char *fn, const char *an, const qk_tensor *a,
                                      const char *bn, const qk_tensor *b);
/* the same on extents computed once (qk_extent_of), for ops that check many pairs */
static inline __attribute__((always_inline)) qk_status qk_check_disjoint_extents(const char *fn, const char *an, qk_extent a,
                                                  const char *bn, qk_extent b)
{
    return qk_extents_overlap(a, b) ? qk_check_disjoint_extents_full(fn, an, a, bn, b) : QK_OK;
}

#endif
