/* Overflow-checked size arithmetic: the one set of helpers every shape, stride, byte-count
 * and block-count computation on values read from files or given by callers goes through
 * (src/api, src/io, src/serve). Each checked helper returns true and stores the exact result
 * when it fits its type, false otherwise (the stored value is then unspecified); the
 * saturating ones are for estimates only (work sizes, never an allocation or an offset).
 * Header-only, no dependencies beyond <stdint.h>. */
#ifndef QK_API_CKD_H
#define QK_API_CKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool qk_ckd_add_i64(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool qk_ckd_sub_i64(int64_t a, int64_t b, int64_t *r) { return !__builtin_sub_overflow(a, b, r); }
static inline bool qk_ckd_mul_i64(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool qk_ckd_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool qk_ckd_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* count (>= 0) elements of es bytes as a size_t, at most PTRDIFF_MAX (what one allocation or
   one pointer difference can hold); false for a negative count or a larger product */
static inline bool qk_ckd_bytes(int64_t count, size_t es, size_t *r)
{
    return count >= 0 && !__builtin_mul_overflow((uint64_t)count, es, r) && *r <= (size_t)PTRDIFF_MAX;
}

/* a x b x es bytes (a, b >= 0) as a size_t at most PTRDIFF_MAX: a 2-D buffer */
static inline bool qk_ckd_bytes2(int64_t a, int64_t b, size_t es, size_t *r)
{
    int64_t n;
    return a >= 0 && b >= 0 && qk_ckd_mul_i64(a, b, &n) && qk_ckd_bytes(n, es, r);
}

/* The product of dims [0, n) (each >= 0), in int64; false when it (or, with a zero dim, the
   product of the non-zero dims) exceeds INT64_MAX or a dim is negative. */
static inline bool qk_ckd_numel(const int64_t *shape, int32_t n, int64_t *r)
{
    int64_t p = 1;
    bool zero = false;
    for (int32_t d = 0; d < n; d++) {
        if (shape[d] < 0) return false;
        if (shape[d] == 0) zero = true;
        else if (!qk_ckd_mul_i64(p, shape[d], &p)) return false;
    }
    *r = zero ? 0 : p;
    return true;
}

/* a x b for a, b >= 0, INT64_MAX when it does not fit: for work estimates only */
static inline int64_t qk_sat_mul_i64(int64_t a, int64_t b)
{
    int64_t r;
    return qk_ckd_mul_i64(a, b, &r) ? r : INT64_MAX;
}

#endif /* QK_API_CKD_H */
