/* Reference MXFP8 provider: the definitions of mxfp8.md in portable C (contracts in
 * mx_ref.h). Rounding is done in integer arithmetic on the f32 bit pattern, so the only
 * rounding anywhere is the one mxfp8.md names. */
#include "ref/mx_ref.h"

#include <math.h>
#include <pthread.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- element codecs ---- */

/* Rounds the finite magnitude with f32 bits `a` to a float8 format with `mbits` mantissa
   bits and minimum normal exponent `emin`. Returns the magnitude code before saturation
   (it may exceed the format's largest finite code). */
static uint32_t f8_round_magnitude(uint32_t a, int mbits, int emin, qk_round r)
{
    int e = (int)(a >> 23);
    uint32_t m = a & 0x7fffffu;
    if (e == 0) e = 1;          /* f32 subnormal: m * 2^-149 */
    else m |= 0x800000u;
    /* |v| = m * 2^(e - 150); the format's step at |v| is 2^(max(e - 127, emin) - mbits) */
    const int ev = e - 127 > emin ? e - 127 : emin;
    const int shift = (ev - mbits) - (e - 150); /* >= 23 - mbits */
    if (shift > 25) return 0;                   /* |v| < step / 4 */
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r == QK_ROUND_NEAREST_AWAY || (q & 1u)))) q++;
    /* normal: exponent field (ev - emin + 1), q in [2^mbits, 2^(mbits+1)] carries the
       hidden bit; subnormal: ev == emin and q is the code itself */
    return ((uint32_t)(ev - emin) << mbits) + q;
}

uint8_t qk_e4m3_from_f32(float v, qk_round r)
{
    const uint32_t u = f32_bits(v), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a >= 0x7f800000u) return (uint8_t)(s | 0x7fu); /* NaN, and inf (E4M3 has none) */
    const uint32_t c = f8_round_magnitude(a, 3, -6, r);
    return (uint8_t)(s | (c > 0x7eu ? 0x7eu : c));
}

uint8_t qk_e5m2_from_f32(float v, qk_round r)
{
    const uint32_t u = f32_bits(v), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
    if (a > 0x7f800000u) return (uint8_t)(s | 0x7fu);
    if (a == 0x7f800000u) return (uint8_t)(s | 0x7cu);
    const uint32_t c = f8_round_magnitude(a, 2, -14, r);
    return (uint8_t)(s | (c > 0x7bu ? 0x7bu : c));
}

float qk_e4m3_to_f32(uint8_t c)
{
    const uint32_t s = (uint32_t)(c & 0x80u) << 24, mag = c & 0x7fu;
    if (mag == 0x7fu) return bits_f32(s | 0x7fc00000u);
    if (mag < 8u) return bits_f32(s | f32_bits((float)mag * 0x1p-9f));
    return bits_f32(s | ((mag << 20) + (120u << 23)));
}

float qk_e5m2_to_f32(uint8_t c)
{
    const uint32_t s = (uint32_t)(c & 0x80u) << 24, mag = c & 0x7fu;
    if (mag > 0x7cu) return bits_f32(s | 0x7fc00000u);
    if (mag == 0x7cu) return bits_f32(s | 0x7f800000u);
    if (mag < 4u) return bits_f32(s | f32_bits((float)mag * 0x1p-16f));
    return bits_f32(s | ((mag << 21) + (112u << 23)));
}

float qk_f8_to_f32(uint8_t c, qk_dtype elem)
{
    return elem == QK_DTYPE_F8_E5M2 ? qk_e5m2_to_f32(c) : qk_e4m3_to_f32(c);
}

uint8_t qk_f8_from_f32(float v, qk_dtype elem, qk_round r)
{
    return elem == QK_DTYPE_F8_E5M2 ? qk_e5m2_from_f32(v, r) : qk_e4m3_from_f32(v, r);
}

/* ---- the scale ---- */

float qk_e8m0_to_f32(uint8_t b)
{
    if (b == 0xffu) return bits_f32(0x7fc00000u);
    if (b == 0u) return bits_f32(0x00400000u); /* 2^-127, an f32 subnormal */
    return bits_f32((uint32_t)b << 23);
}

/* floor(log2(x)) of a positive finite f32 given by its bits (subnormals: true exponent). */
static int floor_log2_bits(uint32_t a)
{
    if (a >= 0x800000u) return (int)(a >> 23) - 127;
    return (31 - __builtin_clz(a)) - 149;
}

/* ceil(log2(x)) of a positive finite f32 given by its bits. */
static int ceil_log2_bits(uint32_t a)
{
    if (a >= 0x800000u) return (int)(a >> 23) - 127 + ((a & 0x7fffffu) != 0);
    return (a == 1u ? 0 : 32 - __builtin_clz(a - 1u)) - 149;
}

uint8_t qk_e8m0_scale(float amax, qk_mx_scale_rule rule, qk_dtype elem)
{
    const uint32_t a = f32_bits(amax) & 0x7fffffffu;
    if (a >= 0x7f800000u) return 0xffu;
    if (a == 0u) return 0x00u;
    const bool e5m2 = elem == QK_DTYPE_F8_E5M2;
    int e;
    if (rule == QK_MX_SCALE_RCEIL) {
        /* descale = fl32(amax * fl32(1/max_elem)); the smallest 2^(b-127) >= descale */
        const float inv = e5m2 ? 1.0f / 57344.0f : 1.0f / 448.0f;
        const uint32_t d = f32_bits(bits_f32(a) * inv);
        if (d == 0u) return 0x00u;
        e = ceil_log2_bits(d);
    } else {
        e = floor_log2_bits(a) - (e5m2 ? 15 : 8);
    }
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}

/* ---- MODELSLIM: log2(amax) rounded to the input's dtype ---- */

/* v rounded to nearest-even with p fraction bits (a normal result; the log2 values here are
   in [-150, 128] and at least 2^-11 away from 0 unless exactly 0) */
static float round_fraction_bits(float v, int p)
{
    uint32_t u = f32_bits(v);
    const uint32_t drop = 23u - (uint32_t)p, half = 1u << (drop - 1);
    u += half - 1u + ((u >> drop) & 1u);
    return bits_f32(u & ~((1u << drop) - 1u));
}

static uint32_t ms_thr[2][256];
static pthread_once_t ms_once = PTHREAD_ONCE_INIT;

/* floor(rnd_xdt(fl32(log2(a)))) > floor(log2(a)) for the positive finite f32 value a */
static bool ms_bumps(float a, int p)
{
    const float l = (float)log2((double)a);
    return floorf(round_fraction_bits(l, p)) > floorf(l);
}

static void ms_build(void)
{
    for (int d = 0; d < 2; d++)
        for (int e = 0; e < 256; e++) ms_thr[d][e] = 0x7fffffffu; /* above every finite amax */
    /* every positive finite BF16 (p = 7) and F16 (p = 10) value; rounding is monotonic, so
       within a binade the values that bump form an upper interval: keep its least */
    for (uint32_t h = 1; h < 0x7f80u; h++) {
        const float a = bits_f32(h << 16);
        const uint32_t ab = h << 16;
        if (ms_bumps(a, 7) && ab < ms_thr[0][ab >> 23]) ms_thr[0][ab >> 23] = ab;
    }
    for (uint32_t h = 1; h < 0x7c00u; h++) {
        const float a = qk_f16_to_f32((uint16_t)h);
        const uint32_t ab = f32_bits(a);
        if (ms_bumps(a, 10) && ab < ms_thr[1][ab >> 23]) ms_thr[1][ab >> 23] = ab;
    }
}

const uint32_t *qk_mx_modelslim_thresholds(qk_dtype xdt)
{
    if (xdt != QK_DTYPE_BF16 && xdt != QK_DTYPE_F16) return NULL;
    pthread_once(&ms_once, ms_build);
    return ms_thr[xdt == QK_DTYPE_F16];
}

uint8_t qk_e8m0_scale_x(float amax, qk_mx_scale_rule rule, qk_dtype elem, qk_dtype xdt)
{
    if (rule != QK_MX_SCALE_MODELSLIM) return qk_e8m0_scale(amax, rule, elem);
    const uint32_t a = f32_bits(amax) & 0x7fffffffu;
    if (a >= 0x7f800000u || a == 0u) return 0x00u;
    const uint32_t *thr = qk_mx_modelslim_thresholds(xdt);
    int e = floor_log2_bits(a) - (elem == QK_DTYPE_F8_E5M2 ? 15 : 8) + (thr && a >= thr[a >> 23]);
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}

void qk_mx_modelslim_nan_blocks(uint8_t *q, uint8_t *scale, int64_t K)
{
    for (int64_t j = 0; j * QK_MX_BLOCK < K; j++)
        if (scale[j] == 0xffu) {
            const int64_t n = K - j * QK_MX_BLOCK < QK_MX_BLOCK ? K - j * QK_MX_BLOCK : QK_MX_BLOCK;
            scale[j] = 0x00u;
            memset(q + j * QK_MX_BLOCK, 0xff, (size_t)n);
        }
}

/* ---- row kernels ---- */

static const qk_mx_options *options_or_default(const qk_mx_options *opt)
{
    static const qk_mx_options def = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR, QK_ROUND_NEAREST_EVEN};
    return opt ? opt : &def;
}

void qk_mx_quantize_block_ref(const void *x, qk_dtype xdt, int64_t n, const qk_mx_options *opt,
                              uint8_t b, uint8_t *q)
{
    opt = options_or_default(opt);
    if (b == 0xffu) {
        memset(q, 0x7f, (size_t)n);
        return;
    }
    /* v = x / 2^(b-127): exact in f32 whenever |v| >= 2^-126; smaller |v| round to ±0 in
       both element formats whatever ldexpf does with them */
    const int sh = 127 - (int)b;
    for (int64_t i = 0; i < n; i++)
        q[i] = qk_f8_from_f32(ldexpf(qk_load_f32(x, xdt, i), sh), opt->elem, opt->round);
}

void qk_mx_quantize_row_ref(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *opt,
                            uint8_t *q, uint8_t *scale)
{
    opt = options_or_default(opt);
    const size_t es = qk_dtype_size(xdt);
    for (int64_t k0 = 0, j = 0; k0 < K; k0 += QK_MX_BLOCK, j++) {
        const int64_t n = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
        const void *xb = (const char *)x + (size_t)k0 * es;
        float amax = 0.0f;
        bool nonfinite = false;
        for (int64_t i = 0; i < n; i++) {
            const float a = fabsf(qk_load_f32(xb, xdt, i));
            if (!(a <= 3.40282347e38f)) nonfinite = true;
            else if (a > amax) amax = a;
        }
        if (nonfinite && opt->scale_rule == QK_MX_SCALE_MODELSLIM) {
            scale[j] = 0x00u;
            memset(q + k0, 0xff, (size_t)n);
            continue;
        }
        const uint8_t b = nonfinite ? 0xffu : qk_e8m0_scale_x(amax, opt->scale_rule, opt->elem, xdt);
        scale[j] = b;
        qk_mx_quantize_block_ref(xb, xdt, n, opt, b, q + k0);
    }
}

void qk_mx_dequantize_row_ref(const uint8_t *q, qk_dtype qdt, const uint8_t *scale, int64_t K,
                              void *out, qk_dtype odt)
{
    const float nan = bits_f32(0x7fc00000u);
    for (int64_t k = 0; k < K; k++) {
        float v = qk_f8_to_f32(q[k], qdt) * qk_e8m0_to_f32(scale[k / QK_MX_BLOCK]);
        if (v != v) v = nan;
        qk_store_f32(out, odt, k, v);
    }
}

void qk_mx_pack_scale_pairs_row_ref(const uint8_t *scale, int64_t kb, uint8_t *packed)
{
    memcpy(packed, scale, (size_t)kb);
    if (kb & 1) packed[kb] = 0x00u;
}
