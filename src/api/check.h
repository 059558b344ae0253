/* Argument checks shared by the API entry points: each one names the function and the
 * argument in its message (qk_fail) and returns the status, or QK_OK. */
#ifndef QK_API_CHECK_H
#define QK_API_CHECK_H

#include "internal.h"

/* not NULL, 1..QK_MAX_DIMS dims, none negative */
QK_HIDDEN qk_status qk_check_tensor(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN bool qk_tensor_has_elements(const qk_tensor *t);
/* data not NULL when the tensor has elements */
QK_HIDDEN qk_status qk_check_data(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_dtype(const char *fn, const char *name, const qk_tensor *t, qk_dtype want);
/* F32, F16 or BF16 */
QK_HIDDEN qk_status qk_check_float_dtype(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_last_contiguous(const char *fn, const char *name, const qk_tensor *t);
/* an output must not write one element twice (a zero or aliasing stride) */
QK_HIDDEN qk_status qk_check_no_self_overlap(const char *fn, const char *name, const qk_tensor *t);
QK_HIDDEN qk_status qk_check_disjoint(const char *fn, const char *an, const qk_tensor *a,
                                      const char *bn, const qk_tensor *b);
/* the same on extents computed once (qk_extent_of), for ops that check many pairs */
QK_HIDDEN qk_status qk_check_disjoint_extents(const char *fn, const char *an, qk_extent a,
                                              const char *bn, qk_extent b);

#endif
