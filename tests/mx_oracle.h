/* The test-side MXFP8 oracle (mxfp8.md), written independently of the library and shared by
 * every MXFP8 test: the element codes of E4M3 / E5M2 by search over a code table built from
 * the bit-field formula, the FLOOR / RCEIL / MODELSLIM scale rules evaluated in double, a
 * whole-row quantizer, and plain decoders. Call mx_oracle_init() once before use. */
#ifndef QK_TEST_MX_ORACLE_H
#define QK_TEST_MX_ORACLE_H

#include "qkern.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The independent reference
 * ------------------------------------------------------------------------------------- */

typedef struct fmt {
    qk_dtype dt;
    int ebits, mbits, bias, emax_elem, maxcode;
    bool has_inf;
    double table[256]; /* code -> value */
} fmt;

__attribute__((unused)) static fmt E4M3 = {QK_DTYPE_F8_E4M3, 4, 3, 7, 8, 0x7e, false, {0}};
__attribute__((unused)) static fmt E5M2 = {QK_DTYPE_F8_E5M2, 5, 2, 15, 15, 0x7b, true, {0}};

static inline void mxo_build_table(fmt *f)
{
    for (int c = 0; c < 256; c++) {
        const int s = c >> 7, emask = (1 << f->ebits) - 1, e = (c >> f->mbits) & emask,
                  m = c & ((1 << f->mbits) - 1);
        double v;
        if (f->has_inf && e == emask) v = m ? NAN : INFINITY;
        else if (!f->has_inf && e == emask && m == (1 << f->mbits) - 1) v = NAN;
        else if (e == 0) v = ldexp((double)m, 1 - f->bias - f->mbits);
        else v = ldexp(1.0 + m / (double)(1 << f->mbits), e - f->bias);
        f->table[c] = s ? -v : v;
    }
}

/* 2^n for n in [-1022, 1023], exactly, from its bits (ldexp per element is most of the
   oracle's time under qemu's soft-float; test_mx_formats checks it against ldexp) */
static inline double mxo_pow2(int n)
{
    const uint64_t u = (uint64_t)(n + 1023) << 52;
    double v;
    memcpy(&v, &u, 8);
    return v;
}

static inline const fmt *fmt_of(qk_dtype dt) { return dt == QK_DTYPE_F8_E5M2 ? &E5M2 : &E4M3; }

/* nearest code of finite v: search, ties per mode, saturating, sign kept */
static inline int mxo_encode(const fmt *f, double v, qk_round r)
{
    const int s = signbit(v) ? 0x80 : 0;
    const double a = fabs(v);
    if (a >= f->table[f->maxcode]) return s | f->maxcode;
    int lo = 0, hi = f->maxcode;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (f->table[mid] <= a) lo = mid;
        else hi = mid;
    }
    const double m = 0.5 * (f->table[lo] + f->table[hi]);
    int c = a < m ? lo : a > m ? hi : (r == QK_ROUND_NEAREST_AWAY || (lo & 1)) ? hi : lo;
    return s | c;
}

/* the input element as a double, decoded here from its bits */
static inline double mxo_load(const void *p, qk_dtype dt, int64_t i)
{
    if (dt == QK_DTYPE_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    if (dt == QK_DTYPE_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* RNE rounding of a double to a binary format with mbits stored mantissa bits, minimum
   normal exponent emin and largest finite value maxf; overflow gives inf. */
static inline double mxo_round_ieee(double v, int mbits, int emin, double maxf)
{
    if (v == 0 || isnan(v) || isinf(v)) return v;
    int e = ilogb(v);
    if (e < emin) e = emin;
    const double r = ldexp(rint(ldexp(v, mbits - e)), e - mbits);
    if (fabs(r) > maxf) return copysign(INFINITY, v);
    return r;
}

/* The expected output element: dec(q) * 2^(b-127) rounded to f32, then to odt. */
static inline double mxo_dequant(const fmt *f, int code, int b, qk_dtype odt)
{
    if (b == 0xff || isnan(f->table[code])) return NAN;
    double v = (double)(float)(f->table[code] * mxo_pow2(b - 127)); /* the f32 product */
    if (odt == QK_DTYPE_BF16) v = mxo_round_ieee(v, 7, -126, 0x1.fep127);
    if (odt == QK_DTYPE_F16) v = mxo_round_ieee(v, 10, -14, 65504.0);
    return v;
}

static inline double mxo_out_load(const void *p, qk_dtype dt, int64_t i) { return mxo_load(p, dt, i); }

static const float INV448 __attribute__((unused)) = 0x1.24924ap-9f; /* fl32(1/448), 0x3B124925 */

/* v (a normal double) rounded to nearest-even with `bits` significant bits */
static inline double mxo_round_bits(double v, int bits)
{
    int e;
    const double m = frexp(v, &e);
    return ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

/* xdt matters to MODELSLIM only: floor(log2(amax)) with log2 rounded to f32, then to xdt
   (BF16: 8 significant bits, F16: 11); F32 input: FLOOR. */
static inline int mxo_scale_x(double amax, qk_mx_scale_rule rule, const fmt *f, qk_dtype xdt)
{
    const int ms = rule == QK_MX_SCALE_MODELSLIM;
    if (isnan(amax) || isinf(amax)) return ms ? 0x00 : 0xff;
    if (amax == 0) return 0;
    int e;
    if (rule == QK_MX_SCALE_FLOOR || ms) {
        frexp(amax, &e); /* amax = m * 2^e, m in [0.5, 1) */
        e = e - 1;
        if (ms && xdt != QK_DTYPE_F32) {
            const double l = (double)(float)log2(amax);
            e = (int)floor(l == 0 ? 0 : mxo_round_bits(l, xdt == QK_DTYPE_BF16 ? 8 : 11));
        }
        e = e - f->emax_elem;
        if (e < -127) e = -127;
        if (e > 127) e = 127;
        return e + 127;
    }
    const float inv = f->dt == QK_DTYPE_F8_E5M2 ? (float)(1.0 / 57344.0) : INV448;
    const float d = (float)(amax * (double)inv); /* exact product, one rounding */
    for (int b = 0; b < 255; b++)
        if (mxo_pow2(b - 127) >= d) return b;
    return 254;
}

static inline int mxo_scale(double amax, qk_mx_scale_rule rule, const fmt *f)
{
    return mxo_scale_x(amax, rule, f, QK_DTYPE_F32);
}

/* One row: expected q and scale. */
static inline void mxo_quantize_row(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *o,
                           uint8_t *q, uint8_t *scale)
{
    const fmt *f = fmt_of(o->elem);
    for (int64_t k0 = 0, j = 0; k0 < K; k0 += 32, j++) {
        const int64_t n = K - k0 < 32 ? K - k0 : 32;
        double amax = 0;
        for (int64_t i = 0; i < n; i++) {
            const double a = fabs(mxo_load(x, xdt, k0 + i));
            if (isnan(a) || isinf(a)) amax = NAN;
            else if (!isnan(amax) && a > amax) amax = a;
        }
        const int b = mxo_scale_x(amax, o->scale_rule, f, xdt);
        scale[j] = (uint8_t)b;
        const int nan_block = isnan(amax);
        const double inv = mxo_pow2(127 - b); /* x * 2^(127-b) is exact in double */
        for (int64_t i = 0; i < n; i++)
            q[k0 + i] = nan_block ? (o->scale_rule == QK_MX_SCALE_MODELSLIM ? 0xff : 0x7f)
                                  : (uint8_t)mxo_encode(f, mxo_load(x, xdt, k0 + i) * inv, o->round);
    }
}


static inline void mx_oracle_init(void)
{
    mxo_build_table(&E4M3);
    mxo_build_table(&E5M2);
}

/* plain decoders, from the formats' definitions */
static inline double mxo_e4m3(uint8_t c)
{
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = ldexp(m, -9);
    else v = ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}
static inline double mxo_e8m0(uint8_t b) { return b == 0xFF ? NAN : ldexp(1.0, b - 127); }

/* rows [rows, K] of x quantized as the W8A8 linear's activations are (E4M3, FLOOR, nearest
   even): q [rows, K], s [rows, ceil(K/32)] */
static inline void mxo_quantize_rows(const void *x, qk_dtype xdt, int64_t rows, int64_t K, uint8_t *q,
                                     uint8_t *s)
{
    const qk_mx_options o = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR, QK_ROUND_NEAREST_EVEN};
    const int64_t kb = (K + 31) / 32;
    const size_t es = xdt == QK_DTYPE_F32 ? 4 : 2;
    for (int64_t m = 0; m < rows; m++)
        mxo_quantize_row((const char *)x + (size_t)(m * K) * es, xdt, K, &o, q + m * K, s + m * kb);
}

#endif
