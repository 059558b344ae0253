/* Test-side number formats, written independently of the library: rounding a double to
 * F32/F16/BF16 (RNE, subnormals, overflow to inf), encoding and decoding their bits, and
 * the ulp distance between two codes of one format. */
#ifndef QK_TEST_NORM_CHECK_H
#define QK_TEST_NORM_CHECK_H

#include "qkern.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct tfmt { int mant; int emin; int emax; } tfmt; /* precision incl. implicit bit */

static inline tfmt tfmt_of(qk_dtype d)
{
    tfmt f32 = {24, -126, 127}, f16 = {11, -14, 15}, bf16 = {8, -126, 127};
    return d == QK_DTYPE_F16 ? f16 : d == QK_DTYPE_BF16 ? bf16 : f32;
}

/* 2^n for n in [-1022, 1023], exactly, from its bits (ldexp is most of the tests' time under
   qemu's soft-float) */
static inline double t_pow2(int n)
{
    uint64_t u = (uint64_t)(n + 1023) << 52;
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* e with |v| in [2^(e-1), 2^e) for finite v != 0, as frexp's, from the bits where v is a
   normal double */
static inline int t_exponent(double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    int field = (int)((u >> 52) & 0x7ff), e;
    if (field) return field - 1022;
    frexp(v, &e);
    return e;
}

/* v rounded to the format with round-to-nearest-even (overflow -> inf). */
static inline double t_round(double v, qk_dtype d)
{
    if (isnan(v) || isinf(v) || v == 0) return v;
    tfmt f = tfmt_of(d);
    int e = t_exponent(v);        /* |v| in [2^(e-1), 2^e) */
    int ue = e - 1;               /* unbiased exponent */
    if (ue < f.emin) ue = f.emin; /* subnormal: fixed step */
    double step = t_pow2(ue - (f.mant - 1));
    double q = nearbyint(v / step) * step; /* default rounding mode: nearest-even */
    double maxv = (2.0 - t_pow2(1 - f.mant)) * t_pow2(f.emax);
    if (fabs(q) > maxv) return copysign(INFINITY, v);
    return q;
}

/* Bits of an exactly representable (or inf/NaN) value in the format. */
static inline uint32_t t_encode(double v, qk_dtype d)
{
    float fv = (float)v; /* exact for every F16/BF16 value */
    uint32_t u;
    memcpy(&u, &fv, 4);
    if (d == QK_DTYPE_F32) return u;
    if (d == QK_DTYPE_BF16) return u >> 16;
    /* F16 */
    uint32_t s = (u >> 16) & 0x8000u;
    if (isnan(v)) return s | 0x7e00u;
    if (isinf(v)) return s | 0x7c00u;
    double a = fabs(v);
    if (a == 0) return s;
    if (a < t_pow2(-14)) return s | (uint32_t)(a / t_pow2(-24));
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    return s | ((uint32_t)(e - 1 + 15) << 10) | ((uint32_t)((m * 2 - 1) * 1024) & 0x3ffu);
}

static inline double t_decode(uint32_t b, qk_dtype d)
{
    if (d == QK_DTYPE_F32) { float f; memcpy(&f, &b, 4); return f; }
    if (d == QK_DTYPE_BF16) { uint32_t u = b << 16; float f; memcpy(&f, &u, 4); return f; }
    double s = (b & 0x8000u) ? -1 : 1;
    uint32_t e = (b >> 10) & 0x1f, m = b & 0x3ff;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * (double)m * t_pow2(-24);
    return s * (1.0 + m / 1024.0) * t_pow2((int)e - 15);
}

/* Position of a code on the number line (monotonic in value; +0 and -0 both at 0). */
static inline int64_t t_ordinal(uint32_t b, qk_dtype d)
{
    uint32_t sign = d == QK_DTYPE_F32 ? 0x80000000u : 0x8000u;
    return (b & sign) ? -(int64_t)(b & ~sign) : (int64_t)b;
}

static inline uint32_t t_load_bits(const void *p, qk_dtype d, int64_t i)
{
    if (d == QK_DTYPE_F32) { uint32_t u; memcpy(&u, (const char *)p + 4 * i, 4); return u; }
    return ((const uint16_t *)p)[i];
}

static inline void t_store_bits(void *p, qk_dtype d, int64_t i, uint32_t b)
{
    if (d == QK_DTYPE_F32) memcpy((char *)p + 4 * i, &b, 4);
    else ((uint16_t *)p)[i] = (uint16_t)b;
}

static inline size_t t_size(qk_dtype d) { return d == QK_DTYPE_F32 ? 4 : 2; }

/* Whether `got` (bits in the output dtype) meets norm.md's bound against `exact`:
   F16/BF16 within one ulp of the correctly rounded value, F32 within 2^-19 relative
   (absolute 2^-140 below 2^-126); NaN must match NaN, inf must match exactly. */
static inline int t_within_bound(uint32_t got, double exact, qk_dtype d)
{
    double g = t_decode(got, d);
    if (isnan(exact)) return isnan(g);
    if (isinf(exact)) return g == exact;
    if (isnan(g) || isinf(g)) return 0;
    if (d == QK_DTYPE_F32) {
        double err = fabs(g - exact);
        if (err <= fabs(exact) * t_pow2(-19)) return 1;
        return fabs(exact) < t_pow2(-126) && err <= t_pow2(-140);
    }
    double rn = t_round(exact, d);
    if (isinf(rn)) return isinf(g) && g == rn ? 1 : fabs(g) == ldexp(2.0 - ldexp(1.0, 1 - tfmt_of(d).mant), tfmt_of(d).emax);
    int64_t dist = t_ordinal(got, d) - t_ordinal(t_encode(rn, d), d);
    return dist >= -1 && dist <= 1;
}

#endif
