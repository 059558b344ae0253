/* MXFP8 quantize / dequantize row kernels, Armv8-A Advanced SIMD: bit-identical to
 * src/ref/mx_ref.c for every option, element format and dtype.
 * Quantize: 4 whole blocks at a time, the block maxima come from one pairwise-max tree and
 * the 4 scale bytes from one vector (FLOOR, RCEIL, MODELSLIM). Each block's elements are then
 * rounded in integer arithmetic on their exponent-rebased magnitudes (BF16 in 16-bit lanes,
 * F16 widened exactly to f32 and F32 in 32-bit lanes): the element format's normal and
 * subnormal ranges alike, with a per-lane rounding shift (URSHL rounds half up: ties away;
 * ties to even add the quotient's low bit first). NaN/Inf blocks are filled here; blocks with
 * a scale below 2^-107 (where inputs may be f32 subnormals) are handed to the reference
 * block encoder. Partial blocks go through a zero-padded 32-element copy.
 * Dequantize: E4M3 and E5M2 codes decode exactly through F16 (fcvtl), times the block's
 * scale in f32, NaN made canonical, then stored as F32, F16 (fcvtn) or BF16 (integer RNE). */
#include "internal.h"
#include "ref/mx_ref.h"
#include "arm/neon/neon.h"

#include <arm_neon.h>

#define AI static inline __attribute__((always_inline))

/* Below this scale byte a block goes to the reference encoder: from here up, an input that
   is an f32 subnormal (< 2^-126) scales to below 2^-19 and rounds to zero in both element
   formats, which the rebased arithmetic below gives without knowing its true exponent. */
enum { FAST_MIN_SCALE = 20 };

/* element format constants: E4M3 (e5 = 0) or E5M2 (e5 = 1) */
#define MBITS(e5) ((e5) ? 2 : 3)
#define BIAS8(e5) ((e5) ? 15 : 7)
#define EMAX(e5) ((e5) ? 15 : 8)
#define MAXCODE(e5) ((e5) ? 0x7b : 0x7e)

static const qk_mx_options default_options = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR,
                                              QK_ROUND_NEAREST_EVEN};

/* ---- element codes ----
 * With b the block's scale byte, v = x * 2^(127-b) has the exponent field f = E + bias8 - b
 * in the element format's bias (E: x's f32 exponent field), and the 24-bit significand
 * M = 1.mmm (23 fraction bits; BF16: 8 bits, 1.mmmmmmm). The code is
 *   max(f - 1, 0) << mbits  +  round(M >> s),  s = 23 - mbits + max(1 - f, 0)
 * (normal: the rounded significand carries the hidden bit, and its carry into the exponent
 * is the format's; subnormal, f <= 0: the fixed step; s is clamped where M >> s already
 * rounds to 0), saturated to the largest finite code, with x's sign. */

/* 8 BF16 elements (bits) -> 8 codes. kf = bias8 - b (b >= FAST_MIN_SCALE). */
AI uint8x8_t codes8_bf16(uint16x8_t x, int16x8_t kf, const int e5, const int away)
{
    const int mb = MBITS(e5);
    const uint16x8_t a = vandq_u16(x, vdupq_n_u16(0x7fff));
    const int16x8_t f = vaddq_s16(vreinterpretq_s16_u16(vshrq_n_u16(a, 7)), kf);
    const uint16x8_t m = vorrq_u16(vandq_u16(a, vdupq_n_u16(0x7f)), vdupq_n_u16(0x80));
    /* right shift s in [7 - mb, 15] (15: every M < 2^8 rounds to 0), as a negative count */
    const int16x8_t s = vminq_s16(vmaxq_s16(vsubq_s16(vdupq_n_s16((short)(8 - mb)), f),
                                            vdupq_n_s16((short)(7 - mb))),
                                  vdupq_n_s16(15));
    const int16x8_t ns = vnegq_s16(s);
    uint16x8_t q;
    if (away) {
        q = vrshlq_u16(m, ns);
    } else {
        const uint16x8_t lsb = vandq_u16(vshlq_u16(m, ns), vdupq_n_u16(1));
        q = vrshlq_u16(vsubq_u16(vaddq_u16(m, lsb), vdupq_n_u16(1)), ns);
    }
    const int16x8_t e1 = vmaxq_s16(vsubq_s16(f, vdupq_n_s16(1)), vdupq_n_s16(0));
    uint16x8_t c = vaddq_u16((e5 ? vshlq_n_u16(vreinterpretq_u16_s16(e1), 2) : vshlq_n_u16(vreinterpretq_u16_s16(e1), 3)), q);
    c = vminq_u16(c, vdupq_n_u16(MAXCODE(e5)));
    c = vorrq_u16(c, vandq_u16(vshrq_n_u16(x, 8), vdupq_n_u16(0x80)));
    return vmovn_u16(c);
}

/* 4 f32 elements (bits) -> 4 codes in 16-bit lanes. kf = bias8 - b (b >= FAST_MIN_SCALE). */
AI uint16x4_t codes4_f32(uint32x4_t x, int32x4_t kf, const int e5, const int away)
{
    const int mb = MBITS(e5);
    const uint32x4_t a = vandq_u32(x, vdupq_n_u32(0x7fffffff));
    const int32x4_t f = vaddq_s32(vreinterpretq_s32_u32(vshrq_n_u32(a, 23)), kf);
    const uint32x4_t m = vorrq_u32(vandq_u32(a, vdupq_n_u32(0x7fffff)), vdupq_n_u32(0x800000));
    /* right shift s in [23 - mb, 31] (31: every M < 2^24 rounds to 0) */
    const int32x4_t s = vminq_s32(vmaxq_s32(vsubq_s32(vdupq_n_s32(24 - mb), f), vdupq_n_s32(23 - mb)),
                                  vdupq_n_s32(31));
    const int32x4_t ns = vnegq_s32(s);
    uint32x4_t q;
    if (away) {
        q = vrshlq_u32(m, ns);
    } else {
        const uint32x4_t lsb = vandq_u32(vshlq_u32(m, ns), vdupq_n_u32(1));
        q = vrshlq_u32(vsubq_u32(vaddq_u32(m, lsb), vdupq_n_u32(1)), ns);
    }
    const int32x4_t e1 = vmaxq_s32(vsubq_s32(f, vdupq_n_s32(1)), vdupq_n_s32(0));
    uint32x4_t c = vaddq_u32((e5 ? vshlq_n_u32(vreinterpretq_u32_s32(e1), 2) : vshlq_n_u32(vreinterpretq_u32_s32(e1), 3)), q);
    c = vminq_u32(c, vdupq_n_u32(MAXCODE(e5)));
    c = vorrq_u32(c, vandq_u32(vshrq_n_u32(x, 24), vdupq_n_u32(0x80)));
    return vmovn_u32(c);
}

/* 8 elements of a 32-bit-lane dtype (F32, or F16 widened exactly by fcvtl) as f32 bits */
AI void load8_f32bits(const void *p, const qk_dtype xdt, uint32x4_t *lo, uint32x4_t *hi)
{
    if (xdt == QK_DTYPE_F32) {
        *lo = vld1q_u32((const uint32_t *)p);
        *hi = vld1q_u32((const uint32_t *)p + 4);
    } else {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)p));
        *lo = vreinterpretq_u32_f32(vcvt_f32_f16(vget_low_f16(h)));
        *hi = vreinterpretq_u32_f32(vcvt_high_f32_f16(h));
    }
}

/* one whole block's 32 elements -> qb[0..32), b in [FAST_MIN_SCALE, 254] */
AI void block_codes(const void *p, const qk_dtype xdt, int b, uint8_t *qb, const int e5,
                    const int away)
{
    if (xdt == QK_DTYPE_BF16) {
        const int16x8_t kf = vdupq_n_s16((short)(BIAS8(e5) - b));
        const uint16_t *x = (const uint16_t *)p;
        const uint8x8_t c0 = codes8_bf16(vld1q_u16(x), kf, e5, away);
        const uint8x8_t c1 = codes8_bf16(vld1q_u16(x + 8), kf, e5, away);
        const uint8x8_t c2 = codes8_bf16(vld1q_u16(x + 16), kf, e5, away);
        const uint8x8_t c3 = codes8_bf16(vld1q_u16(x + 24), kf, e5, away);
        vst1q_u8(qb, vcombine_u8(c0, c1));
        vst1q_u8(qb + 16, vcombine_u8(c2, c3));
        return;
    }
    const int32x4_t kf = vdupq_n_s32(BIAS8(e5) - b);
    const size_t es = qk_dtype_size(xdt);
    for (int h = 0; h < 32; h += 16) {
        uint32x4_t v0, v1, v2, v3;
        load8_f32bits((const char *)p + (size_t)h * es, xdt, &v0, &v1);
        load8_f32bits((const char *)p + (size_t)(h + 8) * es, xdt, &v2, &v3);
        const uint16x8_t c01 = vcombine_u16(codes4_f32(v0, kf, e5, away), codes4_f32(v1, kf, e5, away));
        const uint16x8_t c23 = vcombine_u16(codes4_f32(v2, kf, e5, away), codes4_f32(v3, kf, e5, away));
        vst1q_u8(qb + h, vcombine_u8(vmovn_u16(c01), vmovn_u16(c23)));
    }
}

/* ---- block maxima and scale bytes ---- */

/* block magnitudes folded to one vector: 4 u32 lanes (F32), or 8 u16 lanes (F16/BF16) held
   in a uint32x4_t */
AI uint32x4_t block_magnitudes(const void *p, const qk_dtype xdt)
{
    if (xdt == QK_DTYPE_F32) {
        const uint32_t *x = (const uint32_t *)p;
        const uint32x4_t abs = vdupq_n_u32(0x7fffffff);
        uint32x4_t m0 = vandq_u32(vld1q_u32(x), abs), m1 = vandq_u32(vld1q_u32(x + 4), abs);
        for (int i = 8; i < 32; i += 8) {
            m0 = vmaxq_u32(m0, vandq_u32(vld1q_u32(x + i), abs));
            m1 = vmaxq_u32(m1, vandq_u32(vld1q_u32(x + i + 4), abs));
        }
        return vmaxq_u32(m0, m1);
    }
    const uint16_t *x = (const uint16_t *)p;
    const uint16x8_t abs = vdupq_n_u16(0x7fff);
    const uint16x8_t m = vmaxq_u16(vmaxq_u16(vandq_u16(vld1q_u16(x), abs), vandq_u16(vld1q_u16(x + 8), abs)),
                                   vmaxq_u16(vandq_u16(vld1q_u16(x + 16), abs), vandq_u16(vld1q_u16(x + 24), abs)));
    return vreinterpretq_u32_u16(m);
}

/* four maxima of 16-bit dtype bits -> f32 bits of those magnitudes */
AI uint32x4_t maxima16_to_f32(uint16x4_t h, const qk_dtype xdt)
{
    if (xdt == QK_DTYPE_BF16) return vshll_n_u16(h, 16);
    return vreinterpretq_u32_f32(vcvt_f32_f16(vreinterpret_f16_u16(h))); /* exact; NaN stays NaN */
}

/* m[t]: block t's folded magnitudes -> the 4 block maxima as f32 bits, in block order */
AI uint32x4_t max_tree4(const uint32x4_t m[4], const qk_dtype xdt)
{
    if (xdt == QK_DTYPE_F32)
        return vpmaxq_u32(vpmaxq_u32(m[0], m[1]), vpmaxq_u32(m[2], m[3]));
    const uint16x8_t p01 = vpmaxq_u16(vreinterpretq_u16_u32(m[0]), vreinterpretq_u16_u32(m[1]));
    const uint16x8_t p23 = vpmaxq_u16(vreinterpretq_u16_u32(m[2]), vreinterpretq_u16_u32(m[3]));
    const uint16x8_t q = vpmaxq_u16(p01, p23); /* two lanes per block */
    return maxima16_to_f32(vget_low_u16(vpmaxq_u16(q, q)), xdt);
}

/* one block's maximum as f32 bits (a horizontal max) */
AI uint32_t block_max(const void *p, const qk_dtype xdt)
{
    const uint32x4_t m = block_magnitudes(p, xdt);
    if (xdt == QK_DTYPE_F32) return vmaxvq_u32(m);
    const uint16_t h = vmaxvq_u16(vreinterpretq_u16_u32(m));
    return vgetq_lane_u32(maxima16_to_f32(vdup_n_u16(h), xdt), 0);
}

/* The scale bytes of 4 blocks from their maxima A (f32 bits, sign clear): 0xFF for NaN/Inf
   (MODELSLIM's convention is applied to the row afterwards), else FLOOR, RCEIL or (ms: the
   thresholds of qk_mx_modelslim_thresholds) MODELSLIM; all clamped as qk_e8m0_scale_x. */
AI uint32x4_t scale_bytes(uint32x4_t A, const int rceil, const int e5, const uint32_t *ms)
{
    const uint32x4_t nonfinite = vcgtq_u32(A, vdupq_n_u32(0x7f7fffff));
    uint32x4_t b;
    if (rceil) {
        /* descale d = fl32(amax * fl32(1/max)); b = ceil(log2(d)) + 127 for d > 2^-127
           (adding 0x7fffff bumps the exponent field exactly when the fraction is nonzero; an
           f32 subnormal d above 2^-127 gives 1), else 0 */
        const float inv = e5 ? 1.0f / 57344.0f : 1.0f / 448.0f;
        const uint32x4_t d = vreinterpretq_u32_f32(vmulq_f32(vreinterpretq_f32_u32(A), vdupq_n_f32(inv)));
        b = vshrq_n_u32(vaddq_u32(d, vdupq_n_u32(0x7fffff)), 23);
        b = vandq_u32(b, vcgtq_u32(d, vdupq_n_u32(0x400000)));
    } else {
        /* floor(log2(amax)) - emax + 127 = exponent field - emax (an f32 subnormal or zero
           amax clamps to 0) */
        int32x4_t e = vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(A, 23)), vdupq_n_s32(EMAX(e5)));
        if (ms) { /* + 1 where A >= its binade's threshold (a mask of -1) */
            uint32_t a[4], t[4];
            vst1q_u32(a, A);
            for (int i = 0; i < 4; i++) t[i] = ms[a[i] >> 23];
            e = vsubq_s32(e, vreinterpretq_s32_u32(vcgeq_u32(A, vld1q_u32(t))));
        }
        b = vreinterpretq_u32_s32(vmaxq_s32(e, vdupq_n_s32(0)));
    }
    return vbslq_u32(nonfinite, vdupq_n_u32(0xff), b);
}

/* one block at p with scale byte b -> qb[0..32) */
AI void quantize_block(const void *p, const qk_dtype xdt, int b, const qk_mx_options *o, uint8_t *qb,
                       const int e5, const int away)
{
    if (b == 0xff) {
        memset(qb, 0x7f, 32);
    } else if (b < FAST_MIN_SCALE) {
        qk_mx_quantize_block_ref(p, xdt, 32, o, (uint8_t)b, qb);
    } else {
        block_codes(p, xdt, b, qb, e5, away);
    }
}

AI void quantize_row(const void *x, const qk_dtype xdt, int64_t K, const qk_mx_options *o,
                     uint8_t *q, uint8_t *scale, const int e5, const int away)
{
    const int rceil = o->scale_rule == QK_MX_SCALE_RCEIL;
    const int modelslim = o->scale_rule == QK_MX_SCALE_MODELSLIM;
    const uint32_t *ms = modelslim ? qk_mx_modelslim_thresholds(xdt) : NULL;
    const size_t es = qk_dtype_size(xdt), bb = 32 * es; /* bytes per block */
    const int64_t nfull = K / 32;
    const char *xc = (const char *)x;
    int64_t j = 0;
    for (; j + 4 <= nfull; j += 4) {
        const char *p = xc + (size_t)j * bb;
        uint32x4_t m[4];
        for (int t = 0; t < 4; t++) m[t] = block_magnitudes(p + (size_t)t * bb, xdt);
        const uint32x4_t b = scale_bytes(max_tree4(m, xdt), rceil, e5, ms);
        uint32_t bs[4];
        vst1q_u32(bs, b);
        const uint32x4_t special = vorrq_u32(vceqq_u32(b, vdupq_n_u32(0xff)),
                                             vcltq_u32(b, vdupq_n_u32(FAST_MIN_SCALE)));
        for (int t = 0; t < 4; t++) scale[j + t] = (uint8_t)bs[t];
        if (__builtin_expect(vmaxvq_u32(special) == 0, 1)) {
            for (int t = 0; t < 4; t++)
                block_codes(p + (size_t)t * bb, xdt, (int)bs[t], q + 32 * (j + t), e5, away);
        } else {
            for (int t = 0; t < 4; t++)
                quantize_block(p + (size_t)t * bb, xdt, (int)bs[t], o, q + 32 * (j + t), e5, away);
        }
    }
    for (; j < nfull; j++) {
        const char *p = xc + (size_t)j * bb;
        const int b = (int)vgetq_lane_u32(scale_bytes(vdupq_n_u32(block_max(p, xdt)), rceil, e5, ms), 0);
        scale[j] = (uint8_t)b;
        quantize_block(p, xdt, b, o, q + 32 * j, e5, away);
    }
    const int64_t n = K - 32 * nfull;
    if (n > 0) { /* the partial block, zero-padded (the same result as absent elements) */
        _Alignas(16) char buf[32 * 4];
        uint8_t qb[32];
        memset(buf, 0, sizeof buf);
        memcpy(buf, xc + (size_t)nfull * bb, (size_t)n * es);
        const int b = (int)vgetq_lane_u32(scale_bytes(vdupq_n_u32(block_max(buf, xdt)), rceil, e5, ms), 0);
        scale[nfull] = (uint8_t)b;
        quantize_block(buf, xdt, b, o, qb, e5, away);
        memcpy(q + 32 * nfull, qb, (size_t)n);
    }
    if (modelslim) qk_mx_modelslim_nan_blocks(q, scale, K);
}

#define QUANT_VARIANT(name, e5, away)                                                          \
    static void name(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *o,          \
                     uint8_t *q, uint8_t *s)                                                   \
    {                                                                                          \
        switch (xdt) {                                                                         \
        case QK_DTYPE_BF16: quantize_row(x, QK_DTYPE_BF16, K, o, q, s, e5, away); break;       \
        case QK_DTYPE_F16: quantize_row(x, QK_DTYPE_F16, K, o, q, s, e5, away); break;         \
        default: quantize_row(x, QK_DTYPE_F32, K, o, q, s, e5, away); break;                   \
        }                                                                                      \
    }
QUANT_VARIANT(quantize_e4m3_even, 0, 0)
QUANT_VARIANT(quantize_e4m3_away, 0, 1)
QUANT_VARIANT(quantize_e5m2_even, 1, 0)
QUANT_VARIANT(quantize_e5m2_away, 1, 1)

void qk_mx_quantize_row_neon(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *opt,
                             uint8_t *q, uint8_t *scale)
{
    const qk_mx_options *o = opt ? opt : &default_options;
    const bool e5 = o->elem == QK_DTYPE_F8_E5M2, away = o->round == QK_ROUND_NEAREST_AWAY;
    if (e5) (away ? quantize_e5m2_away : quantize_e5m2_even)(x, xdt, K, o, q, scale);
    else (away ? quantize_e4m3_away : quantize_e4m3_even)(x, xdt, K, o, q, scale);
}

/* ---- dequantize ---- */

/* 8 codes -> their exact values (NaN codes: NaN) in two f32 vectors. Both formats go through
   F16, which holds every value: E5M2 is F16's top byte; E4M3's magnitude shifted into F16's
   fields reads as 2^-8 times the value (subnormals included: F16 subnormals scale by the same
   2^-8), so one exact multiply by 256 gives it; its NaN codes are set apart. */
AI void decode8(uint8x8_t codes, float32x4_t *lo, float32x4_t *hi, const int e5)
{
    const uint16x8_t c = vmovl_u8(codes);
    if (e5) {
        const float16x8_t h = vreinterpretq_f16_u16(vshlq_n_u16(c, 8));
        *lo = vcvt_f32_f16(vget_low_f16(h));
        *hi = vcvt_high_f32_f16(h);
        return;
    }
    const uint16x8_t mag = vandq_u16(c, vdupq_n_u16(0x7f));
    const float16x8_t h = vreinterpretq_f16_u16(
        vorrq_u16(vshlq_n_u16(vandq_u16(c, vdupq_n_u16(0x80)), 8), vshlq_n_u16(mag, 7)));
    const float32x4_t k = vdupq_n_f32(256.0f);
    const uint16x8_t nan = vceqq_u16(mag, vdupq_n_u16(0x7f));
    const uint32x4_t nlo = vmovl_u16(vget_low_u16(nan)), nhi = vmovl_high_u16(nan);
    const uint32x4_t qn = vdupq_n_u32(0x7fc00000);
    /* NaN codes: 1.875 * 2^8 with the quiet-NaN bits or-ed in stays a NaN */
    *lo = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(vmulq_f32(vcvt_f32_f16(vget_low_f16(h)), k)),
                                          vandq_u32(vshlq_n_u32(nlo, 16), qn)));
    *hi = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(vmulq_f32(vcvt_high_f32_f16(h), k)),
                                          vandq_u32(vshlq_n_u32(nhi, 16), qn)));
}

/* v with every NaN replaced by the canonical quiet NaN 0x7FC00000 */
AI float32x4_t canon_nan(float32x4_t v)
{
    return vbslq_f32(vceqq_f32(v, v), v, vreinterpretq_f32_u32(vdupq_n_u32(0x7fc00000)));
}

/* f32 -> BF16 bits, integer RNE (no NaN reaches it but the canonical one, which this keeps) */
AI uint16x4_t to_bf16(float32x4_t v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    return vshrn_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
}

/* 8 codes at q (all present), scale s -> out[i .. i+8) */
AI void dequant8(const uint8_t *q, float32x4_t s, void *out, int64_t i, const int e5, const qk_dtype odt)
{
    float32x4_t lo, hi;
    decode8(vld1_u8(q), &lo, &hi, e5);
    lo = canon_nan(vmulq_f32(lo, s));
    hi = canon_nan(vmulq_f32(hi, s));
    if (odt == QK_DTYPE_F32) {
        vst1q_f32((float *)out + i, lo);
        vst1q_f32((float *)out + i + 4, hi);
    } else if (odt == QK_DTYPE_F16) {
        vst1q_u16((uint16_t *)out + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(lo), hi)));
    } else {
        vst1q_u16((uint16_t *)out + i, vcombine_u16(to_bf16(lo), to_bf16(hi)));
    }
}

AI void dequantize_row(const uint8_t *q, const uint8_t *scale, int64_t K, void *out, const int e5,
                       const qk_dtype odt)
{
    const size_t os = qk_dtype_size(odt);
    for (int64_t k0 = 0, j = 0; k0 < K; k0 += 32, j++) {
        const uint32_t b = scale[j];
        const uint32_t sbits = b == 0xff ? 0x7fc00000u : b == 0 ? 0x00400000u : b << 23;
        const float32x4_t s = vreinterpretq_f32_u32(vdupq_n_u32(sbits));
        const int64_t n = K - k0 < 32 ? K - k0 : 32;
        if (n == 32) {
            for (int h = 0; h < 32; h += 8) dequant8(q + k0 + h, s, out, k0 + h, e5, odt);
        } else { /* partial block through zero-padded copies */
            uint8_t qb[32];
            _Alignas(16) char ob[32 * 4];
            memset(qb, 0, sizeof qb);
            memcpy(qb, q + k0, (size_t)n);
            for (int h = 0; h < 32; h += 8) dequant8(qb + h, s, ob, h, e5, odt);
            memcpy((char *)out + (size_t)k0 * os, ob, (size_t)n * os);
        }
    }
}

#define DEQUANT_VARIANT(name, e5, odt)                                                         \
    static void name(const uint8_t *q, const uint8_t *s, int64_t K, void *out)                 \
    {                                                                                          \
        dequantize_row(q, s, K, out, e5, odt);                                                 \
    }
DEQUANT_VARIANT(dequant_e4m3_f32, 0, QK_DTYPE_F32)
DEQUANT_VARIANT(dequant_e4m3_f16, 0, QK_DTYPE_F16)
DEQUANT_VARIANT(dequant_e4m3_bf16, 0, QK_DTYPE_BF16)
DEQUANT_VARIANT(dequant_e5m2_f32, 1, QK_DTYPE_F32)
DEQUANT_VARIANT(dequant_e5m2_f16, 1, QK_DTYPE_F16)
DEQUANT_VARIANT(dequant_e5m2_bf16, 1, QK_DTYPE_BF16)

void qk_mx_dequantize_row_neon(const uint8_t *q, qk_dtype qdt, const uint8_t *scale, int64_t K,
                               void *out, qk_dtype odt)
{
    const bool e5 = qdt == QK_DTYPE_F8_E5M2;
    switch (odt) {
    case QK_DTYPE_F16: (e5 ? dequant_e5m2_f16 : dequant_e4m3_f16)(q, scale, K, out); break;
    case QK_DTYPE_BF16: (e5 ? dequant_e5m2_bf16 : dequant_e4m3_bf16)(q, scale, K, out); break;
    default: (e5 ? dequant_e5m2_f32 : dequant_e4m3_f32)(q, scale, K, out); break;
    }
}
