/* MXFP8 quantize / dequantize row kernels, AVX2 (+F16C): bit-identical to src/ref/mx_ref.c
 * for every option, element format and dtype.
 * Quantize: 8 whole blocks at a time, the block maxima come from one transposing max tree and
 * the 8 scale bytes from one vector; each block's elements are then rounded in integer
 * arithmetic on their exponent-rebased magnitudes (BF16 in 16-bit lanes, F16/F32 in 32-bit
 * lanes). BF16 codes saturate in the 16 -> 8 bit pack, take their signs from a second pack
 * of the input, and the 8 blocks share one test for lanes left to the reference encoder.
 * The rare lanes in the element format's subnormal range are redone by the reference
 * encoder, as are NaN/Inf blocks and blocks with a scale below 2^-107. Partial blocks go
 * through a zero-padded 32-element copy. */
#include "internal.h"
#include "ref/mx_ref.h"
#include "x86/x86.h"
#include "x86/avx2/e4m3_avx2.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* Below this scale byte a block goes to the reference encoder (see mx_avx512.c). */
enum { FAST_MIN_SCALE = 20 };

#define MBITS(e5) ((e5) ? 2 : 3)
#define BIAS8(e5) ((e5) ? 15 : 7)
#define MAXCODE(e5) ((e5) ? 0x7b : 0x7e)

static const qk_mx_options default_options = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR,
                                              QK_ROUND_NEAREST_EVEN};

/* ---- element codes (the rebasing of mx_avx512.c) ---- */

/* BF16 elements, in 16-bit lanes. The rebased magnitude of an element of a block with scale
   byte b is ap = |x| + (bias8 - b) * 128: the code's exponent and mantissa bits when
   ap > 0x7f (normal), a result of 0 when ap < -mb * 128, and the format's subnormal range,
   left to the reference encoder, in between. The rounding constant k0 is folded into the
   per-block constant k7 = (bias8 - b) * 128 + k0. */
#define BF16_SH(e5) (7 - MBITS(e5))
#define BF16_K0(e5, away) ((away) ? 1 << (BF16_SH(e5) - 1) : (1 << (BF16_SH(e5) - 1)) - 1)

AI int32_t bf16_k7(int b, const int e5, const int away)
{
    return (BIAS8(e5) - b) * 128 + BF16_K0(e5, away);
}
/* the same for the 8 scale bytes of a group, in 32-bit lanes */
AI __m256i bf16_k7_8(__m256i b, const int e5, const int away)
{
    return _mm256_add_epi32(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(BIAS8(e5)), b), 7),
                            _mm256_set1_epi32(BF16_K0(e5, away)));
}

/* 16 elements -> 16 signed codes without sign or saturation (negative: rounds to 0) and, in
   *u, a value that is below bf16_left_limit exactly in the lanes of the subnormal range, ap
   in [-mb * 128, 0x7f], which go to the reference encoder: t - k0 - lo - 32768 maps that
   range to the bottom of int16, and with b >= FAST_MIN_SCALE (ap >= -31616) the values below
   it wrap to positive ones. */
AI __m256i codes16_bf16(__m256i x, __m256i k7, const int e5, const int away, __m256i *u)
{
    const int sh = BF16_SH(e5), lo = -MBITS(e5) * 128, k0 = BF16_K0(e5, away);
    const __m256i t = _mm256_add_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7fff)), k7);
    *u = _mm256_add_epi16(t, _mm256_set1_epi16((short)(-(lo + k0) - 32768)));
    if (away) return _mm256_srai_epi16(t, sh);
    /* nearest even: t = ap + 2^(sh-1) - 1; adding bit sh of t gives ap's tie rule (a carry out
       of the low bits already rounded up, and then bit sh cannot carry again) */
    return _mm256_srai_epi16(_mm256_add_epi16(t, _mm256_and_si256(_mm256_srli_epi16(t, sh),
                                                                    _mm256_set1_epi16(1))), sh);
}

AI __m256i bf16_left_limit(const int e5)
{
    return _mm256_set1_epi16((short)(-32768 + 0x80 + MBITS(e5) * 128));
}

/* one whole block of 32 BF16 elements -> 32 codes at qb; returns the lane-wise minimum of the
   u values of codes16_bf16 (a lane is left when it is below bf16_left_limit) */
AI __m256i block_codes_bf16(const void *p, __m256i k7, uint8_t *qb, const int e5, const int away)
{
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)p);
    const __m256i x1 = _mm256_loadu_si256((const __m256i *)p + 1);
    __m256i u0, u1;
    const __m256i c0 = codes16_bf16(x0, k7, e5, away, &u0);
    const __m256i c1 = codes16_bf16(x1, k7, e5, away, &u1);
    /* packus: negative -> 0, large -> 255, then the saturation to the largest finite code;
       packs keeps each element's sign in its byte's top bit */
    const __m256i mag = _mm256_min_epu8(_mm256_packus_epi16(c0, c1), _mm256_set1_epi8(MAXCODE(e5)));
    const __m256i sgn = _mm256_and_si256(_mm256_packs_epi16(x0, x1), _mm256_set1_epi8((char)0x80));
    _mm256_storeu_si256((__m256i *)qb, _mm256_permute4x64_epi64(_mm256_or_si256(mag, sgn), 0xd8));
    return _mm256_min_epi16(u0, u1);
}

/* the lanes of one BF16 block left to the reference encoder, one bit per element */
static uint32_t block_left_bf16(const void *p, int b, const int e5, const int away)
{
    const __m256i k7 = _mm256_set1_epi16((short)bf16_k7(b, e5, away)), lim = bf16_left_limit(e5);
    __m256i u0, u1;
    (void)codes16_bf16(_mm256_loadu_si256((const __m256i *)p), k7, e5, away, &u0);
    (void)codes16_bf16(_mm256_loadu_si256((const __m256i *)p + 1), k7, e5, away, &u1);
    const __m256i l = _mm256_packs_epi16(_mm256_cmpgt_epi16(lim, u0), _mm256_cmpgt_epi16(lim, u1));
    return (uint32_t)_mm256_movemask_epi8(_mm256_permute4x64_epi64(l, 0xd8));
}

/* 8 f32 elements -> 8 codes in 32-bit lanes; *sub gets one bit per lane left to redo. */
AI __m256i codes_f32(__m256 xf, __m256i kadd, const int e5, const int away, uint32_t *sub)
{
    const int mb = MBITS(e5), sh = 23 - mb;
    const __m256i x = _mm256_castps_si256(xf);
    const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i ap = _mm256_add_epi32(a, kadd);
    const __m256i normal = _mm256_cmpgt_epi32(ap, _mm256_set1_epi32(0x7fffff));
    const __m256i zero = _mm256_cmpgt_epi32(_mm256_set1_epi32(-mb * (1 << 23)), ap);
    __m256i r;
    if (away) {
        r = _mm256_add_epi32(ap, _mm256_set1_epi32(1 << (sh - 1)));
    } else {
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ap, sh), _mm256_set1_epi32(1));
        r = _mm256_add_epi32(_mm256_add_epi32(ap, _mm256_set1_epi32((1 << (sh - 1)) - 1)), lsb);
    }
    __m256i c = _mm256_min_epu32(_mm256_and_si256(_mm256_srli_epi32(r, sh), normal),
                                 _mm256_set1_epi32(MAXCODE(e5)));
    *sub = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(normal, zero))) ^ 0xffu;
    return _mm256_or_si256(c, _mm256_and_si256(_mm256_srli_epi32(x, 24), _mm256_set1_epi32(0x80)));
}

AI __m256 load8_f32(const void *x, const qk_dtype xdt, int64_t i)
{
    if (xdt == QK_DTYPE_F32) return _mm256_loadu_ps((const float *)x + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
    if (xdt == QK_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* ---- block maxima and scale bytes ---- */

#define VMAX(u16, a, b) ((u16) ? _mm256_max_epu16(a, b) : _mm256_max_epu32(a, b))

/* v[t]: block t's magnitudes in 8 u32 units (16 u16 halves when u16) -> the 8 maxima in
   block order (u16: folded into the low 16 bits, high bits not cleared) */
AI __m256i max_tree8(__m256i v[8], const int u16)
{
    __m256i w[4], z[2];
    for (int i = 0; i < 4; i++) /* 128-bit lane 0: block 2i, lane 1: block 2i+1 */
        w[i] = VMAX(u16, _mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x20),
                    _mm256_permute2x128_si256(v[2 * i], v[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++) /* lane 0: blocks 4i, 4i+2 (2 units each); lane 1: 4i+1, 4i+3 */
        z[i] = VMAX(u16, _mm256_unpacklo_epi64(w[2 * i], w[2 * i + 1]),
                    _mm256_unpackhi_epi64(w[2 * i], w[2 * i + 1]));
    for (int i = 0; i < 2; i++) z[i] = VMAX(u16, z[i], _mm256_shuffle_epi32(z[i], 0xb1));
    /* lane 0: blocks 0, 2, 4, 6; lane 1: 1, 3, 5, 7 */
    __m256i r = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(z[0]), _mm256_castsi256_ps(z[1]), 0x88));
    r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (u16) r = _mm256_max_epu16(r, _mm256_srli_epi32(r, 16));
    return r;
}

/* block t's magnitudes, 8 u32 units (16 u16 halves for 16-bit dtypes); p: the block */
AI __m256i block_magnitudes(const void *p, const qk_dtype xdt)
{
    if (xdt == QK_DTYPE_F32) {
        const __m256i abs = _mm256_set1_epi32(0x7fffffff);
        const __m256i *v = (const __m256i *)p;
        const __m256i m01 = _mm256_max_epu32(_mm256_and_si256(_mm256_loadu_si256(v), abs),
                                             _mm256_and_si256(_mm256_loadu_si256(v + 1), abs));
        const __m256i m23 = _mm256_max_epu32(_mm256_and_si256(_mm256_loadu_si256(v + 2), abs),
                                             _mm256_and_si256(_mm256_loadu_si256(v + 3), abs));
        return _mm256_max_epu32(m01, m23);
    }
    const __m256i abs = _mm256_set1_epi16(0x7fff);
    const __m256i *v = (const __m256i *)p;
    return _mm256_max_epu16(_mm256_and_si256(_mm256_loadu_si256(v), abs),
                            _mm256_and_si256(_mm256_loadu_si256(v + 1), abs));
}

/* block maxima (u16 folded in the low 16 bits, or u32) -> f32 bits */
AI __m256i maxima_to_f32(__m256i r, const qk_dtype xdt)
{
    if (xdt == QK_DTYPE_F32) return r;
    if (xdt == QK_DTYPE_BF16) return _mm256_slli_epi32(r, 16);
    const __m256i h = _mm256_and_si256(r, _mm256_set1_epi32(0xffff));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(p)));
}

/* ms: MODELSLIM's thresholds for the input dtype (qk_mx_modelslim_thresholds), else NULL */
AI __m256i scale_bytes(__m256i A, const int rceil, const int e5, const uint32_t *ms)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i nonfinite = _mm256_cmpgt_epi32(A, _mm256_set1_epi32(0x7f7fffff));
    __m256i b;
    if (rceil) {
        const float inv = e5 ? 1.0f / 57344.0f : 1.0f / 448.0f;
        const __m256i d = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(A), _mm256_set1_ps(inv)));
        b = _mm256_srli_epi32(_mm256_add_epi32(d, _mm256_set1_epi32(0x7fffff)), 23);
        b = _mm256_and_si256(b, _mm256_cmpgt_epi32(d, _mm256_set1_epi32(0x400000)));
    } else {
        __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(A, 23), _mm256_set1_epi32(e5 ? 15 : 8));
        if (ms) { /* + 1 where A >= the binade's threshold: + 1 + (thr > A ? -1 : 0) */
            const __m256i thr = _mm256_i32gather_epi32((const int *)ms, _mm256_srli_epi32(A, 23), 4);
            e = _mm256_add_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(1)), _mm256_cmpgt_epi32(thr, A));
        }
        b = _mm256_max_epi32(e, zero);
    }
    return _mm256_blendv_epi8(b, _mm256_set1_epi32(0xff), nonfinite);
}

/* scale byte of one whole block at p (a horizontal max) */
AI int block_scale(const void *p, const qk_dtype xdt, const int rceil, const int e5, const uint32_t *ms)
{
    const int u16 = xdt != QK_DTYPE_F32;
    __m256i m = block_magnitudes(p, xdt);
    m = VMAX(u16, m, _mm256_permute2x128_si256(m, m, 0x01));
    m = VMAX(u16, m, _mm256_shuffle_epi32(m, 0x4e));
    m = VMAX(u16, m, _mm256_shuffle_epi32(m, 0xb1));
    if (u16) m = _mm256_max_epu16(m, _mm256_srli_epi32(m, 16));
    const __m256i A = maxima_to_f32(m, xdt);
    return _mm256_cvtsi256_si32(scale_bytes(A, rceil, e5, ms));
}

/* ---- one whole block's elements: p -> qb[0..32) ---- */

/* The vector part for F16/F32: returns one bit per element left for the reference encoder
   (the subnormal range of the element format). kadd: (bias8-b)*2^23. */
AI uint32_t quantize_block_vec32(const void *p, const qk_dtype xdt, int32_t kadd, uint8_t *qb,
                                 const int e5, const int away)
{
    const __m256i k = _mm256_set1_epi32(kadd);
    uint32_t s0, s1, s2, s3;
    const __m256i c0 = codes_f32(load8_f32(p, xdt, 0), k, e5, away, &s0);
    const __m256i c1 = codes_f32(load8_f32(p, xdt, 8), k, e5, away, &s1);
    const __m256i c2 = codes_f32(load8_f32(p, xdt, 16), k, e5, away, &s2);
    const __m256i c3 = codes_f32(load8_f32(p, xdt, 24), k, e5, away, &s3);
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    _mm256_storeu_si256((__m256i *)qb,
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return s0 | s1 << 8 | s2 << 16 | s3 << 24;
}

/* the elements `sub` of the block at p, by the reference encoder */
static void redo_elements(const void *p, qk_dtype xdt, uint32_t sub, int b, const qk_mx_options *o,
                          uint8_t *qb)
{
    const size_t es = qk_dtype_size(xdt);
    while (sub) {
        const int i = __builtin_ctz(sub);
        sub &= sub - 1;
        qk_mx_quantize_block_ref((const char *)p + (size_t)i * es, xdt, 1, o, (uint8_t)b, qb + i);
    }
}

AI void quantize_block(const void *p, const qk_dtype xdt, int b, const qk_mx_options *o, uint8_t *qb,
                       const int e5, const int away)
{
    if (b == 0xff) {
        memset(qb, 0x7f, 32);
        return;
    }
    if (b < FAST_MIN_SCALE) {
        qk_mx_quantize_block_ref(p, xdt, 32, o, (uint8_t)b, qb);
        return;
    }
    uint32_t sub;
    if (xdt == QK_DTYPE_BF16) {
        const __m256i u = block_codes_bf16(p, _mm256_set1_epi16((short)bf16_k7(b, e5, away)), qb, e5, away);
        const __m256i left = _mm256_cmpgt_epi16(bf16_left_limit(e5), u);
        sub = _mm256_testz_si256(left, left) ? 0 : block_left_bf16(p, b, e5, away);
    } else {
        sub = quantize_block_vec32(p, xdt, (BIAS8(e5) - b) * (1 << 23), qb, e5, away);
    }
    if (sub) redo_elements(p, xdt, sub, b, o, qb);
}

/* 8 whole blocks at x, none special: bs their scale bytes, k7 their bf16_k7 values */
AI void group_fast_bf16(const char *x, __m256i k7v, const int32_t bs[8], const qk_mx_options *o,
                        uint8_t *q, const int e5, const int away)
{
    int32_t k7[8];
    _mm256_storeu_si256((__m256i *)k7, k7v);
    __m256i umin = _mm256_set1_epi16(0x7fff);
    /* unrolled by 2 only: gcc interleaves a full unroll and spills (measured slower) */
#pragma GCC unroll 2
    for (int t = 0; t < 8; t++)
        umin = _mm256_min_epi16(umin, block_codes_bf16(x + 64 * t, _mm256_set1_epi16((short)k7[t]),
                                                       q + 32 * t, e5, away));
    const __m256i left = _mm256_cmpgt_epi16(bf16_left_limit(e5), umin);
    if (__builtin_expect(!_mm256_testz_si256(left, left), 0))
        for (int t = 0; t < 8; t++) {
            const uint32_t sub = block_left_bf16(x + 64 * t, bs[t], e5, away);
            if (sub) redo_elements(x + 64 * t, QK_DTYPE_BF16, sub, bs[t], o, q + 32 * t);
        }
}

/* the same for F16/F32: kaddv the blocks' (bias8 - b) * 2^23 */
AI void group_fast_32(const char *x, const qk_dtype xdt, __m256i kaddv, const int32_t bs[8],
                      const qk_mx_options *o, uint8_t *q, const int e5, const int away)
{
    const size_t bb = 32 * qk_dtype_size(xdt);
    int32_t kadd[8];
    uint32_t sub[8], any = 0;
    _mm256_storeu_si256((__m256i *)kadd, kaddv);
    for (int t = 0; t < 8; t++) { /* no calls in this loop: its constants stay in registers */
        sub[t] = quantize_block_vec32(x + bb * t, xdt, kadd[t], q + 32 * t, e5, away);
        any |= sub[t];
    }
    if (__builtin_expect(any != 0, 0))
        for (int t = 0; t < 8; t++)
            if (sub[t]) redo_elements(x + bb * t, xdt, sub[t], bs[t], o, q + 32 * t);
}

/* the 8 scale bytes (u32 lanes) of the whole blocks [j, j + 8) */
AI __m256i group_scales(const char *xc, const qk_dtype xdt, size_t es, int64_t j, const int rceil,
                        const int e5, const uint32_t *ms)
{
    __m256i v[8];
    for (int t = 0; t < 8; t++) {
        /* 2 KiB ahead: +10-18% on inputs from DRAM, -2-3% from cache (2 threads, Zen 3) */
        _mm_prefetch(xc + (size_t)(32 * (j + t)) * es + 2048, _MM_HINT_T0);
        v[t] = block_magnitudes(xc + (size_t)(32 * (j + t)) * es, xdt);
    }
    return scale_bytes(maxima_to_f32(max_tree8(v, xdt != QK_DTYPE_F32), xdt), rceil, e5, ms);
}

AI void quantize_row(const void *x, const qk_dtype xdt, int64_t K, const qk_mx_options *o,
                     uint8_t *q, uint8_t *scale, const int e5, const int away)
{
    const int rceil = o->scale_rule == QK_MX_SCALE_RCEIL;
    const int modelslim = o->scale_rule == QK_MX_SCALE_MODELSLIM;
    const uint32_t *ms = modelslim ? qk_mx_modelslim_thresholds(xdt) : NULL;
    const size_t es = qk_dtype_size(xdt);
    const int64_t nfull = K / 32;
    const char *xc = (const char *)x;
    int64_t j = 0;
    /* the next group's scales are computed before this group's codes: the max tree's long
       dependency chain then overlaps the element work */
    __m256i bnext = nfull >= 8 ? group_scales(xc, xdt, es, 0, rceil, e5, ms) : _mm256_setzero_si256();
    for (; j + 8 <= nfull; j += 8) {
        const __m256i b = bnext;
        if (j + 16 <= nfull) bnext = group_scales(xc, xdt, es, j + 8, rceil, e5, ms);
        const __m256i special = _mm256_or_si256(_mm256_cmpeq_epi32(b, _mm256_set1_epi32(0xff)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(FAST_MIN_SCALE), b));
        int32_t bs[8];
        _mm256_storeu_si256((__m256i *)bs, b);
        const __m128i b16 = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storel_epi64((__m128i *)(scale + j), _mm_packus_epi16(b16, b16)); /* the 8 scale bytes */
        if (__builtin_expect(_mm256_testz_si256(special, special), 1)) {
            if (xdt == QK_DTYPE_BF16)
                group_fast_bf16(xc + (size_t)(32 * j) * es, bf16_k7_8(b, e5, away), bs, o, q + 32 * j,
                                e5, away);
            else
                group_fast_32(xc + (size_t)(32 * j) * es, xdt,
                              _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(BIAS8(e5)), b), 23),
                              bs, o, q + 32 * j, e5, away);
        } else {
            for (int t = 0; t < 8; t++)
                quantize_block(xc + (size_t)(32 * (j + t)) * es, xdt, bs[t], o, q + 32 * (j + t), e5, away);
        }
    }
    for (; j < nfull; j++) {
        const void *p = xc + (size_t)(32 * j) * es;
        const int b = block_scale(p, xdt, rceil, e5, ms);
        scale[j] = (uint8_t)b;
        quantize_block(p, xdt, b, o, q + 32 * j, e5, away);
    }
    const int64_t n = K - 32 * nfull;
    if (n > 0) { /* the partial block, zero-padded (the same result as absent elements) */
        _Alignas(32) char buf[32 * 4];
        uint8_t qb[32];
        memset(buf, 0, sizeof buf);
        memcpy(buf, xc + (size_t)(32 * nfull) * es, (size_t)n * es);
        const int b = block_scale(buf, xdt, rceil, e5, ms);
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

void qk_mx_quantize_row_avx2(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *opt,
                             uint8_t *q, uint8_t *scale)
{
    const qk_mx_options *o = opt ? opt : &default_options;
    const bool e5 = o->elem == QK_DTYPE_F8_E5M2, away = o->round == QK_ROUND_NEAREST_AWAY;
    if (e5) (away ? quantize_e5m2_away : quantize_e5m2_even)(x, xdt, K, o, q, scale);
    else (away ? quantize_e4m3_away : quantize_e4m3_even)(x, xdt, K, o, q, scale);
}

/* ---- dequantize ---- */

AI __m256 decode8(__m128i codes, const int e5)
{
    if (e5) return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(codes), 8));
    return qk_e4m3x8_to_f32_avx2(codes);
}

/* 8 codes at q (all present) -> out[i .. i+8) */
AI void dequant8(const uint8_t *q, __m256 s, void *out, int64_t i, const int e5, const qk_dtype odt)
{
    __m256 v = _mm256_mul_ps(decode8(_mm_loadl_epi64((const __m128i *)q), e5), s);
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    if (odt == QK_DTYPE_F32) {
        _mm256_storeu_ps((float *)out + i, v);
        return;
    }
    __m128i h;
    if (odt == QK_DTYPE_F16) {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
    _mm_storeu_si128((__m128i *)((uint16_t *)out + i), h);
}

AI void dequantize_row(const uint8_t *q, const uint8_t *scale, int64_t K, void *out, const int e5,
                       const qk_dtype odt)
{
    const size_t os = qk_dtype_size(odt);
    for (int64_t k0 = 0, j = 0; k0 < K; k0 += 32, j++) {
        const uint32_t b = scale[j];
        const uint32_t sbits = b == 0xff ? 0x7fc00000u : b == 0 ? 0x00400000u : b << 23;
        const __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32((int)sbits));
        const int64_t n = K - k0 < 32 ? K - k0 : 32;
        if (n == 32) {
            for (int h = 0; h < 32; h += 8) dequant8(q + k0 + h, s, out, k0 + h, e5, odt);
        } else { /* partial block through zero-padded copies */
            uint8_t qb[32];
            _Alignas(32) char ob[32 * 4];
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

void qk_mx_dequantize_row_avx2(const uint8_t *q, qk_dtype qdt, const uint8_t *scale, int64_t K,
                               void *out, qk_dtype odt)
{
    const bool e5 = qdt == QK_DTYPE_F8_E5M2;
    switch (odt) {
    case QK_DTYPE_F16: (e5 ? dequant_e5m2_f16 : dequant_e4m3_f16)(q, scale, K, out); break;
    case QK_DTYPE_BF16: (e5 ? dequant_e5m2_bf16 : dequant_e4m3_bf16)(q, scale, K, out); break;
    default: (e5 ? dequant_e5m2_f32 : dequant_e4m3_f32)(q, scale, K, out); break;
    }
}
