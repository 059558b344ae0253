/* MXFP8 quantize / dequantize row kernels, AVX-512 (F/BW/VL/DQ): bit-identical to
 * src/ref/mx_ref.c for every option, element format and dtype.
 * Quantize: 16 whole blocks at a time, the block maxima come from one transposing max tree
 * (for BF16 with FLOOR, the default, a tree over the elements' exponent bytes, two blocks
 * per vector) and the 16 scale bytes from one vector; then each block's elements are rounded in integer
 * arithmetic on their exponent-rebased magnitudes (BF16 in 32 16-bit lanes, F16/F32 in 16
 * 32-bit lanes). Rare lanes in the element format's subnormal range take a variable-shift
 * path; NaN/Inf blocks and blocks with a scale below 2^-107 (where inputs may be subnormal)
 * are handed to the reference block encoder. */
#include "internal.h"
#include "ref/mx_ref.h"
#include "x86/x86.h"
#include "x86/avx512/e4m3_avx512.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
/* Keeps v in a register: without it the compiler folds a vector used three times into three
   loads, and a 512-bit load is a cycle of the load port here. */
#define OPAQUE(v) __asm__("" : "+v"(v))

/* 32-bit broadcast straight from memory (a load-port operation; GCC otherwise loads the
   value into a general register and broadcasts from there, a vector-pipe cycle) */
AI __m512i bcast32_mem(const int32_t *p)
{
    __m512i v;
    __asm__("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
    return v;
}

/* Blocks with a scale byte below this go to the reference encoder: from here up, the 16-bit
   rebased magnitude cannot wrap, and input subnormals (< 2^-126) scale to below 2^-19, so
   they round to zero in both element formats. */
enum { FAST_MIN_SCALE = 20 };

/* BF16 input is prefetched this many blocks (64 B each) ahead of the codes */
enum { PREFETCH_BLOCKS = 64 };

/* element format constants: E4M3 (e5 = 0) or E5M2 (e5 = 1) */
#define MBITS(e5) ((e5) ? 2 : 3)
#define BIAS8(e5) ((e5) ? 15 : 7)
#define MAXCODE(e5) ((e5) ? 0x7b : 0x7e)

static const qk_mx_options default_options = {QK_DTYPE_F8_E4M3, QK_MX_SCALE_FLOOR,
                                              QK_ROUND_NEAREST_EVEN};

/* ---- element codes ----
 * With b the block's scale byte, the element v = x * 2^(127-b) has the bits of |x| with
 * (bias8 - b) added to the exponent field ("rebased"; the exponent field is then the
 * element format's, or <= 0 below its normal range). Normal lanes round at the element
 * mantissa's last bit with one add; lanes far below the smallest subnormal are zero; the
 * rest (the subnormal range) shift the mantissa by a per-lane amount. */

/* 32 BF16 elements (bits in 16-bit lanes) -> 32 codes in 16-bit lanes. kadd = (bias8-b)*128. */
AI __m512i codes_bf16(__m512i x, __m512i kadd, const int e5, const int away)
{
    const int mb = MBITS(e5), sh = 7 - mb;
    const __m512i one = _mm512_set1_epi16(1);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi16(0x7fff));
    const __m512i ap = _mm512_add_epi16(a, kadd);
    const __mmask32 normal = _mm512_cmpgt_epi16_mask(ap, _mm512_set1_epi16(0x7f));
    const __mmask32 zero = _mm512_cmplt_epi16_mask(ap, _mm512_set1_epi16((short)(-mb * 128)));
    __m512i r;
    if (away) {
        r = _mm512_add_epi16(ap, _mm512_set1_epi16((short)(1 << (sh - 1))));
    } else {
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(ap, sh), one);
        r = _mm512_add_epi16(_mm512_add_epi16(ap, _mm512_set1_epi16((short)((1 << (sh - 1)) - 1))), lsb);
    }
    __m512i c = _mm512_min_epu16(_mm512_maskz_srli_epi16(normal, r, sh),
                                 _mm512_set1_epi16(MAXCODE(e5)));
    const __mmask32 sub = ~(normal | zero);
    if (__builtin_expect(sub != 0, 0)) {
        /* |v| = m * 2^(e - 7 - bias8) with m = 1.mmmmmmm; code = round(m / 2^s) */
        const __m512i m = _mm512_ternarylogic_epi32(a, _mm512_set1_epi16(0x7f),
                                                    _mm512_set1_epi16(0x80), 0xea);
        const __m512i s = _mm512_sub_epi16(_mm512_set1_epi16((short)(8 - mb)), _mm512_srai_epi16(ap, 7));
        __m512i bias;
        if (away) {
            bias = _mm512_sllv_epi16(one, _mm512_sub_epi16(s, one));
        } else {
            bias = _mm512_add_epi16(
                _mm512_srlv_epi16(_mm512_set1_epi16(0x7fff), _mm512_sub_epi16(_mm512_set1_epi16(16), s)),
                _mm512_and_si512(_mm512_srlv_epi16(m, s), one));
        }
        c = _mm512_mask_mov_epi16(c, sub, _mm512_srlv_epi16(_mm512_add_epi16(m, bias), s));
    }
    /* sign: bit 15 of x -> bit 7 */
    return _mm512_ternarylogic_epi32(c, _mm512_srli_epi16(x, 8), _mm512_set1_epi16(0x80), 0xf8);
}

/* 16 f32 elements -> 16 codes in 32-bit lanes. kadd = (bias8-b) * 2^23. */
AI __m512i codes_f32(__m512 xf, __m512i kadd, const int e5, const int away)
{
    const int mb = MBITS(e5), sh = 23 - mb;
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i x = _mm512_castps_si512(xf);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __m512i ap = _mm512_add_epi32(a, kadd);
    const __mmask16 normal = _mm512_cmpgt_epi32_mask(ap, _mm512_set1_epi32(0x7fffff));
    const __mmask16 zero = _mm512_cmplt_epi32_mask(ap, _mm512_set1_epi32(-mb * (1 << 23)));
    __m512i r;
    if (away) {
        r = _mm512_add_epi32(ap, _mm512_set1_epi32(1 << (sh - 1)));
    } else {
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(ap, sh), one);
        r = _mm512_add_epi32(_mm512_add_epi32(ap, _mm512_set1_epi32((1 << (sh - 1)) - 1)), lsb);
    }
    __m512i c = _mm512_min_epu32(_mm512_maskz_srli_epi32(normal, r, sh),
                                 _mm512_set1_epi32(MAXCODE(e5)));
    const __mmask16 sub = (__mmask16)~(normal | zero);
    if (__builtin_expect(sub != 0, 0)) {
        const __m512i m = _mm512_ternarylogic_epi32(a, _mm512_set1_epi32(0x7fffff),
                                                    _mm512_set1_epi32(0x800000), 0xea);
        const __m512i s = _mm512_sub_epi32(_mm512_set1_epi32(24 - mb), _mm512_srai_epi32(ap, 23));
        __m512i bias;
        if (away) {
            bias = _mm512_sllv_epi32(one, _mm512_sub_epi32(s, one));
        } else {
            bias = _mm512_add_epi32(
                _mm512_srlv_epi32(_mm512_set1_epi32(0x7fffffff), _mm512_sub_epi32(_mm512_set1_epi32(32), s)),
                _mm512_and_si512(_mm512_srlv_epi32(m, s), one));
        }
        c = _mm512_mask_mov_epi32(c, sub, _mm512_srlv_epi32(_mm512_add_epi32(m, bias), s));
    }
    return _mm512_ternarylogic_epi32(c, _mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x80), 0xf8);
}

/* ---- loads ---- */

static inline __mmask32 mask32(int64_t n) { return n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1u); }
static inline __mmask16 mask16(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

/* 16 elements [i, i + n) as f32 (n <= 16; missing ones are zero) */
AI __m512 load16_f32(const void *x, const qk_dtype xdt, int64_t i, int64_t n)
{
    if (xdt == QK_DTYPE_F32) {
        const float *p = (const float *)x + i;
        return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask16(n), p);
    }
    const uint16_t *p = (const uint16_t *)x + i;
    const __m256i h = n >= 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(mask16(n), p);
    if (xdt == QK_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ---- block maxima and scale bytes ---- */

#define VMAX(u16, a, b) ((u16) ? _mm512_max_epu16(a, b) : _mm512_max_epu32(a, b))

/* v[t] holds block t's magnitudes (16 u32 units, or 32 u16 halves when u16); returns the 16
   maxima as u32 lanes in block order (u16: the larger half already folded into the low 16
   bits; the high 16 bits are not cleared). */
AI __m512i max_tree8(const __m512i w[8], const int u16);
AI __m512i max_tree16(__m512i v[16], const int u16)
{
    __m512i w[8];
    for (int i = 0; i < 8; i++) /* 128-bit lanes 0-1: block 2i, 2-3: block 2i+1 */
        w[i] = VMAX(u16, _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44),
                    _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xee));
    return max_tree8(w, u16);
}

/* the rest of the tree, from w[i] holding block 2i in its low 256 bits and 2i+1 in its high */
AI __m512i max_tree8(const __m512i w[8], const int u16)
{
    __m512i u[4], d[2];
    for (int i = 0; i < 4; i++) /* 128-bit lane k: block 4i+k */
        u[i] = VMAX(u16, _mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0x88),
                    _mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) /* lane k: 2 units of block 8i+k, then 2 of block 8i+4+k */
        d[i] = VMAX(u16, _mm512_unpacklo_epi64(u[2 * i], u[2 * i + 1]),
                    _mm512_unpackhi_epi64(u[2 * i], u[2 * i + 1]));
    for (int i = 0; i < 2; i++) /* units 0, 2 of lane k: blocks 8i+k, 8i+4+k */
        d[i] = VMAX(u16, d[i], _mm512_shuffle_epi32(d[i], _MM_PERM_CDAB));
    /* lane k: blocks k, k+4, k+8, k+12 -> block order */
    __m512i r = _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(d[0]),
                                                      _mm512_castsi512_ps(d[1]), 0x88));
    r = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
    if (u16) r = _mm512_max_epu16(r, _mm512_srli_epi32(r, 16));
    return r;
}

/* f32 bits of the 16 block maxima of blocks [j, j + 16) (all whole) */
AI __m512i group_amax(const void *x, const qk_dtype xdt, int64_t j)
{
    __m512i v[16];
    if (xdt == QK_DTYPE_F32) {
        const __m512i abs = _mm512_set1_epi32(0x7fffffff);
        const float *p = (const float *)x + 32 * j;
        for (int t = 0; t < 16; t++)
            v[t] = _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(p + 32 * t), abs),
                                    _mm512_and_si512(_mm512_loadu_si512(p + 32 * t + 16), abs));
        return max_tree16(v, 0);
    }
    const __m512i abs = _mm512_set1_epi16(0x7fff);
    const uint16_t *p = (const uint16_t *)x + 32 * j;
    for (int t = 0; t < 16; t++) v[t] = _mm512_and_si512(_mm512_loadu_si512(p + 32 * t), abs);
    const __m512i r = max_tree16(v, 1);
    if (xdt == QK_DTYPE_BF16) return _mm512_slli_epi32(r, 16);
    return _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(r)));
}

/* scale bytes (u32 lanes) of block maxima given as f32 bits (mxfp8.md's rules) */
/* ms: MODELSLIM's thresholds for the input dtype (qk_mx_modelslim_thresholds), else NULL */
AI __m512i scale_bytes(__m512i A, const int rceil, const int e5, const uint32_t *ms)
{
    const __m512i zero = _mm512_setzero_si512();
    const __mmask16 nonfinite = _mm512_cmpge_epu32_mask(A, _mm512_set1_epi32(0x7f800000));
    __m512i b;
    if (rceil) {
        /* descale = fl32(amax * fl32(1/max)); the smallest 2^(b-127) >= descale: the exponent
           of descale rounded up; subnormal descales <= 2^-127 give 0 */
        const float inv = e5 ? 1.0f / 57344.0f : 1.0f / 448.0f;
        const __m512i d = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(A), _mm512_set1_ps(inv)));
        b = _mm512_srli_epi32(_mm512_add_epi32(d, _mm512_set1_epi32(0x7fffff)), 23);
        b = _mm512_mask_mov_epi32(b, _mm512_cmple_epu32_mask(d, _mm512_set1_epi32(0x400000)), zero);
    } else {
        /* floor(log2(amax)) - emax, clamped at -127 (subnormal amax: below the clamp) */
        __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(A, 23), _mm512_set1_epi32(e5 ? 15 : 8));
        if (ms) { /* + 1 where A >= the binade's threshold */
            const __m512i thr = _mm512_i32gather_epi32(_mm512_srli_epi32(A, 23), ms, 4);
            e = _mm512_mask_add_epi32(e, _mm512_cmpge_epu32_mask(A, thr), e, _mm512_set1_epi32(1));
        }
        b = _mm512_max_epi32(e, zero);
    }
    return _mm512_mask_mov_epi32(b, nonfinite, _mm512_set1_epi32(0xff));
}

/* scale byte of one block of n <= 32 elements */
AI int block_scale(const void *x, const qk_dtype xdt, int64_t j, int64_t n, const int rceil, const int e5,
                   const uint32_t *ms)
{
    uint32_t A;
    if (xdt == QK_DTYPE_F32) {
        const __m512i abs = _mm512_set1_epi32(0x7fffffff);
        const __m512 lo = load16_f32(x, xdt, 32 * j, n), hi = load16_f32(x, xdt, 32 * j + 16, n - 16);
        A = _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(lo), abs),
                                                     _mm512_and_si512(_mm512_castps_si512(hi), abs)));
    } else {
        const uint16_t *p = (const uint16_t *)x + 32 * j;
        const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(mask32(n), p), _mm512_set1_epi16(0x7fff));
        const __m512i f = _mm512_max_epu16(v, _mm512_srli_epi32(v, 16));
        const uint32_t h = _mm512_reduce_max_epu32(_mm512_and_si512(f, _mm512_set1_epi32(0xffff)));
        if (xdt == QK_DTYPE_BF16) {
            A = h << 16;
        } else {
            const float fa = qk_f16_to_f32((uint16_t)h);
            memcpy(&A, &fa, 4);
        }
    }
    return _mm_cvtsi128_si32(_mm512_castsi512_si128(scale_bytes(_mm512_set1_epi32((int)A), rceil, e5, ms)));
}

/* ---- one block's elements ---- */

AI void quantize_block(const void *x, const qk_dtype xdt, int64_t j, int64_t n, int b,
                       const qk_mx_options *o, uint8_t *q, const int e5, const int away)
{
    uint8_t *qb = q + 32 * j;
    if (b == 0xff) {
        memset(qb, 0x7f, (size_t)n);
        return;
    }
    if (b < FAST_MIN_SCALE) {
        qk_mx_quantize_block_ref((const char *)x + (size_t)(32 * j) * qk_dtype_size(xdt), xdt, n, o,
                                 (uint8_t)b, qb);
        return;
    }
    if (xdt == QK_DTYPE_BF16) {
        const uint16_t *p = (const uint16_t *)x + 32 * j;
        const __m512i v = n == 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(mask32(n), p);
        const __m512i c = codes_bf16(v, _mm512_set1_epi16((short)((BIAS8(e5) - b) * 128)), e5, away);
        if (n == 32) _mm256_storeu_si256((__m256i *)qb, _mm512_cvtepi16_epi8(c));
        else _mm512_mask_cvtepi16_storeu_epi8(qb, mask32(n), c);
        return;
    }
    const __m512i kadd = _mm512_set1_epi32((BIAS8(e5) - b) * (1 << 23));
    const __m512i c0 = codes_f32(load16_f32(x, xdt, 32 * j, n), kadd, e5, away);
    const __m512i c1 = codes_f32(load16_f32(x, xdt, 32 * j + 16, n - 16), kadd, e5, away);
    if (n == 32) {
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(c1));
    } else {
        _mm512_mask_cvtepi32_storeu_epi8(qb, mask16(n), c0);
        _mm512_mask_cvtepi32_storeu_epi8(qb + 16, mask16(n - 16), c1);
    }
}

/* ---- 16 whole blocks without special cases: no calls, two blocks per store ---- */

/* kadd[t]: block t's rebasing constant ((bias8-b) * 128 for BF16, * 2^23 otherwise) */
AI void quantize_group_fast(const void *x, const qk_dtype xdt, int64_t j, const int32_t *kadd,
                            uint8_t *q, const int e5, const int away)
{
    uint8_t *qb = q + 32 * j;
    if (xdt == QK_DTYPE_BF16) {
        const uint16_t *p = (const uint16_t *)x + 32 * j;
        const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
        for (int t = 0; t < 16; t += 2) {
            const __m512i c0 = codes_bf16(_mm512_loadu_si512(p + 32 * t),
                                          _mm512_set1_epi16((short)kadd[t]), e5, away);
            const __m512i c1 = codes_bf16(_mm512_loadu_si512(p + 32 * t + 32),
                                          _mm512_set1_epi16((short)kadd[t + 1]), e5, away);
            /* per 128-bit lane: 8 codes of c0, then 8 of c1 -> c0's 32, then c1's 32 */
            _mm512_storeu_si512(qb + 32 * t, _mm512_permutexvar_epi64(order, _mm512_packus_epi16(c0, c1)));
        }
        return;
    }
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int t = 0; t < 16; t += 2) {
        const int64_t i = 32 * (j + t);
        const __m512i k0 = _mm512_set1_epi32(kadd[t]), k1 = _mm512_set1_epi32(kadd[t + 1]);
        const __m512i c0 = codes_f32(load16_f32(x, xdt, i, 16), k0, e5, away);
        const __m512i c1 = codes_f32(load16_f32(x, xdt, i + 16, 16), k0, e5, away);
        const __m512i c2 = codes_f32(load16_f32(x, xdt, i + 32, 16), k1, e5, away);
        const __m512i c3 = codes_f32(load16_f32(x, xdt, i + 48, 16), k1, e5, away);
        /* per 128-bit lane: 4 codes of each of c0..c3 -> c0's 16, c1's, c2's, c3's */
        const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
        _mm512_storeu_si512(qb + 32 * t, _mm512_permutexvar_epi32(order, bytes));
    }
}

/* ---- BF16: 16 whole blocks from registers, the codes packed with saturation ----
 * The magnitudes a = |x| stay in registers from the maximum to the codes. With
 * ap = a + (bias8 - b) * 128 (the rebased magnitude), a normal lane's code is RNE(ap >> sh)
 * (away: ties up), which can exceed the format's largest code by a little (FLOOR: amax's
 * rebased exponent is emax + bias8, so ap <= 2047 resp. 3967). Offsetting it by
 * T = 255 - maxcode makes the signed-to-unsigned saturating pack clamp it at the top
 * (255 = T + maxcode), and lanes far below the smallest subnormal (ap < -mb * 128) land
 * below T, so that one saturating subtraction of T gives their code 0. The lanes in between
 * (the element format's subnormal range, ap in [-mb * 128, 127]) land in [SUB_LO, SUB_HI]
 * (a superset); a pair of blocks holding one is encoded by codes_bf16 instead. The sign
 * comes from the signed saturating pack of x itself: bit 7 of each byte is x's sign. */
#define SAT_T(e5) (255 - MAXCODE(e5))
#define SUB_LO(e5) (SAT_T(e5) - ((e5) ? 8 : 24)) /* T + floor((-mb*128 + 2^(sh-1) - 1) / 2^sh) */
#define SUB_HI(e5) (SAT_T(e5) + ((e5) ? 4 : 8))  /* T + (127 + 2^(sh-1)) >> sh */

/* FLOOR: the 16 scale bytes (u32 lanes) of 16 whole BF16 blocks from their largest biased
   exponent E (the scale is max(E - emax, 0), 0xFF where E = 255: an Inf or NaN). E of an
   element is the high byte of x + x; two blocks share a vector (block 2i's E in the odd bytes,
   2i+1's in the even ones), so the max tree starts from 8 vectors, not 16. */
AI __m512i group_scales_bf16_floor(const uint16_t *p, const int e5)
{
    __m512i v[8];
    for (int i = 0; i < 8; i++) {
        const __m512i a = _mm512_loadu_si512(p + 64 * i), b = _mm512_loadu_si512(p + 64 * i + 32);
        /* (a + a) & 0xFF00 | (b >> 7) & 0x00FF */
        v[i] = _mm512_ternarylogic_epi32(_mm512_add_epi16(a, a), _mm512_srli_epi16(b, 7),
                                         _mm512_set1_epi16((short)0xFF00), 0xe4);
    }
    __m512i u[4], d[2];
    for (int i = 0; i < 4; i++) /* low 256 bits: pair 2i, high: pair 2i+1 */
        u[i] = _mm512_max_epu8(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44),
                               _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 2; i++) /* 128-bit lane k: pair 4i+k */
        d[i] = _mm512_max_epu8(_mm512_shuffle_i64x2(u[2 * i], u[2 * i + 1], 0x88),
                               _mm512_shuffle_i64x2(u[2 * i], u[2 * i + 1], 0xdd));
    /* lane k: qword 0 pair k, qword 1 pair 4+k */
    __m512i e = _mm512_max_epu8(_mm512_unpacklo_epi64(d[0], d[1]), _mm512_unpackhi_epi64(d[0], d[1]));
    e = _mm512_max_epu8(e, _mm512_srli_epi64(e, 32));
    e = _mm512_max_epu8(e, _mm512_srli_epi64(e, 16));
    /* byte 0 of a qword: block 2i+1 of its pair i, byte 1: block 2i. Lane k -> dword 0
       [2k, 2k+1, 8+2k, 9+2k], then the 16 bytes into block order */
    e = _mm512_shuffle_epi8(e, _mm512_set4_epi32(-1, -1, -1, 0x08090001));
    __m128i s = _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), e));
    s = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    const __m512i E = _mm512_cvtepu8_epi32(s);
    const __m512i b = _mm512_max_epi32(_mm512_sub_epi32(E, _mm512_set1_epi32(e5 ? 15 : 8)), _mm512_setzero_si512());
    return _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(E, _mm512_set1_epi32(255)), _mm512_set1_epi32(0xff));
}

/* the 16 scale bytes (u32 lanes) of 16 whole BF16 blocks */
AI __m512i group_scales_bf16(const uint16_t *p, const int rceil, const int e5, const uint32_t *ms)
{
    if (!rceil && !ms) return group_scales_bf16_floor(p, e5);
    const __m512i abs = _mm512_set1_epi16(0x7fff);
    __m512i a[16];
    for (int t = 0; t < 16; t++) a[t] = _mm512_and_si512(_mm512_loadu_si512(p + 32 * t), abs);
    return scale_bytes(_mm512_slli_epi32(max_tree16(a, 1), 16), rceil, e5, ms);
}

/* Blocks t and t + 1 (x0, x1) of a group, offset codes y (per 128-bit lane: 8 of block t,
   then 8 of block t + 1): T + code for normal lanes, clamped at 255, below T for lanes that
   round to zero, in [SUB_LO, SUB_HI] for the element format's subnormal range. kk: the
   group's per-block constants (quantize_group_bf16). */
AI __m512i offset_codes_bf16(__m512i x0, __m512i x1, const int32_t *kk, int t, const int e5, const int away)
{
    const int sh = 7 - MBITS(e5);
    const __m512i abs = _mm512_set1_epi16(0x7fff);
    __m512i r0 = _mm512_add_epi16(_mm512_and_si512(x0, abs), bcast32_mem(kk + t));
    __m512i r1 = _mm512_add_epi16(_mm512_and_si512(x1, abs), bcast32_mem(kk + t + 1));
    if (!away) { /* + the code's last bit (bit sh of ap is bit sh of x) */
        const __m512i lsb = _mm512_set1_epi16((short)(1 << sh)), one = _mm512_set1_epi16(1);
        r0 = _mm512_mask_add_epi16(r0, _mm512_test_epi16_mask(x0, lsb), r0, one);
        r1 = _mm512_mask_add_epi16(r1, _mm512_test_epi16_mask(x1, lsb), r1, one);
    }
    return _mm512_packus_epi16(_mm512_srai_epi16(r0, sh), _mm512_srai_epi16(r1, sh));
}

/* the codes of 16 whole BF16 blocks with scale bytes b (group_scales_bf16) */
AI void quantize_group_bf16(const uint16_t *p, __m512i b, uint8_t *qb, uint8_t *sb, const qk_mx_options *o,
                            const int e5, const int away)
{
    const int sh = 7 - MBITS(e5);
    _mm_storeu_si128((__m128i *)sb, _mm512_cvtepi32_epi8(b));
    const __mmask16 special = _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xff)) |
                              _mm512_cmplt_epi32_mask(b, _mm512_set1_epi32(FAST_MIN_SCALE));
    if (__builtin_expect(special != 0, 0)) {
        int32_t bs[16];
        _mm512_storeu_si512(bs, b);
        for (int t = 0; t < 16; t++) quantize_block(p, QK_DTYPE_BF16, t, 32, bs[t], o, qb, e5, away);
        return;
    }
    /* per block: (bias8 - b) * 128 + T * 2^sh + the rounding constant, a 16-bit word held
       twice in a 32-bit lane (a 32-bit broadcast from memory is a load) */
    const int rnd = away ? 1 << (sh - 1) : (1 << (sh - 1)) - 1;
    int32_t kk[16];
    {
        const __m512i k = _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(BIAS8(e5)), b), 7),
                                           _mm512_set1_epi32((SAT_T(e5) << sh) + rnd));
        _mm512_storeu_si512(kk, _mm512_or_si512(_mm512_and_si512(k, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(k, 16)));
    }
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    const __m512i sub_lo = _mm512_set1_epi8((char)SUB_LO(e5)), sub_span = _mm512_set1_epi8(SUB_HI(e5) - SUB_LO(e5));
    /* the minimum over the group of y - SUB_LO (bytes, unsigned): one test after the loop
       instead of a compare and a branch per pair of blocks (0.92-0.95x the time) */
    __m512i low = _mm512_set1_epi8((char)0xff);
    for (int t = 0; t < 16; t += 2) {
        /* reloaded (L1) rather than kept: 16 registers of magnitudes would be spilled */
        __m512i x0 = _mm512_loadu_si512(p + 32 * t), x1 = _mm512_loadu_si512(p + 32 * t + 32);
        OPAQUE(x0);
        OPAQUE(x1);
        const __m512i y = offset_codes_bf16(x0, x1, kk, t, e5, away);
        low = _mm512_min_epu8(low, _mm512_sub_epi8(y, sub_lo));
        const __m512i c = _mm512_ternarylogic_epi32(_mm512_subs_epu8(y, _mm512_set1_epi8((char)SAT_T(e5))),
                                                    _mm512_packs_epi16(x0, x1), _mm512_set1_epi8((char)0x80), 0xf8);
        _mm512_storeu_si512(qb + 32 * t, _mm512_permutexvar_epi64(order, c));
    }
    if (__builtin_expect(_mm512_cmple_epu8_mask(low, sub_span) != 0, 0)) {
        /* a lane in the subnormal range: the pairs of blocks holding one are encoded again by
           the general encoder (q never overlaps x) */
        for (int t = 0; t < 16; t += 2) {
            const __m512i x0 = _mm512_loadu_si512(p + 32 * t), x1 = _mm512_loadu_si512(p + 32 * t + 32);
            if (!_mm512_cmple_epu8_mask(_mm512_sub_epi8(offset_codes_bf16(x0, x1, kk, t, e5, away), sub_lo), sub_span))
                continue;
            const short k0 = (short)(kk[t] - (SAT_T(e5) << sh) - rnd), k1 = (short)(kk[t + 1] - (SAT_T(e5) << sh) - rnd);
            const __m512i c = _mm512_packus_epi16(codes_bf16(x0, _mm512_set1_epi16(k0), e5, away),
                                                  codes_bf16(x1, _mm512_set1_epi16(k1), e5, away));
            _mm512_storeu_si512(qb + 32 * t, _mm512_permutexvar_epi64(order, c));
        }
    }
}

/* ---- the row ---- */

AI void quantize_row(const void *x, const qk_dtype xdt, int64_t K, const qk_mx_options *o,
                     uint8_t *q, uint8_t *scale, const int e5, const int away)
{
    const int rceil = o->scale_rule == QK_MX_SCALE_RCEIL;
    const int modelslim = o->scale_rule == QK_MX_SCALE_MODELSLIM;
    const uint32_t *ms = modelslim ? qk_mx_modelslim_thresholds(xdt) : NULL;
    const int64_t nfull = K / 32, kb = qk_mx_blocks(K);
    int64_t j = 0;
    if (xdt == QK_DTYPE_BF16 && nfull >= 16) {
        /* the next group's scales are computed before this group's codes: the max tree's
           long dependency chain then overlaps the element work */
        const uint16_t *p = (const uint16_t *)x;
        __m512i b = group_scales_bf16(p, rceil, e5, ms);
        for (; j + 16 <= nfull; j += 16) {
            __m512i bn = b;
            if (j + 32 <= nfull) bn = group_scales_bf16(p + 32 * (j + 16), rceil, e5, ms);
            /* software prefetch 4 KiB ahead (past the row's end too: the next row, where rows
               are contiguous): on DRAM-resident input 0.92x the time (Zen 5, 2 threads,
               [512, 17408]); the hardware prefetcher alone runs short of it */
            for (int t = 0; t < 16; t++)
                _mm_prefetch((const char *)(p + 32 * (j + PREFETCH_BLOCKS + t)), _MM_HINT_T0);
            quantize_group_bf16(p + 32 * j, b, q + 32 * j, scale + j, o, e5, away);
            b = bn;
        }
    }
    for (; j + 16 <= nfull; j += 16) {
        const __m512i b = scale_bytes(group_amax(x, xdt, j), rceil, e5, ms);
        _mm_storeu_si128((__m128i *)(scale + j), _mm512_cvtepi32_epi8(b));
        const __mmask16 special = _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xff)) |
                                  _mm512_cmplt_epi32_mask(b, _mm512_set1_epi32(FAST_MIN_SCALE));
        if (__builtin_expect(special == 0, 1)) {
            int32_t kadd[16];
            const __m512i k = _mm512_sub_epi32(_mm512_set1_epi32(BIAS8(e5)), b);
            _mm512_storeu_si512(kadd, xdt == QK_DTYPE_BF16 ? _mm512_slli_epi32(k, 7) : _mm512_slli_epi32(k, 23));
            quantize_group_fast(x, xdt, j, kadd, q, e5, away);
        } else {
            int32_t bs[16];
            _mm512_storeu_si512(bs, b);
            for (int t = 0; t < 16; t++) quantize_block(x, xdt, j + t, 32, bs[t], o, q, e5, away);
        }
    }
    for (; j < kb; j++) {
        const int64_t n = K - 32 * j < 32 ? K - 32 * j : 32;
        const int b = block_scale(x, xdt, j, n, rceil, e5, ms);
        scale[j] = (uint8_t)b;
        quantize_block(x, xdt, j, n, b, o, q, e5, away);
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

void qk_mx_quantize_row_avx512(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *opt,
                               uint8_t *q, uint8_t *scale)
{
    const qk_mx_options *o = opt ? opt : &default_options;
    const bool e5 = o->elem == QK_DTYPE_F8_E5M2, away = o->round == QK_ROUND_NEAREST_AWAY;
    if (e5) (away ? quantize_e5m2_away : quantize_e5m2_even)(x, xdt, K, o, q, scale);
    else (away ? quantize_e4m3_away : quantize_e4m3_even)(x, xdt, K, o, q, scale);
}

/* ---- dequantize ---- */

AI __m512 decode16(__m128i codes, const int e5)
{
    /* an E5M2 code is the top byte of the F16 with the same value */
    if (e5) return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8));
    return qk_e4m3x16_to_f32_avx512(codes);
}

/* dec(q) * 2^(b-127) in f32; NaN (code or scale) -> the canonical quiet NaN; stored as odt */
AI void dequant16(const uint8_t *q, int64_t n, __m512 s, void *out, int64_t i, const int e5,
                  const qk_dtype odt)
{
    const __mmask16 m = mask16(n);
    const __m128i codes = n >= 16 ? _mm_loadu_si128((const __m128i *)q) : _mm_maskz_loadu_epi8(m, q);
    __m512 v = _mm512_mul_ps(decode16(codes, e5), s);
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    if (odt == QK_DTYPE_F32) {
        float *p = (float *)out + i;
        if (n >= 16) _mm512_storeu_ps(p, v);
        else _mm512_mask_storeu_ps(p, m, v);
        return;
    }
    __m256i h;
    if (odt == QK_DTYPE_F16) {
        h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else { /* BF16 by integer RNE: keeps subnormals; canonical NaN stays 0x7FC0 */
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16));
    }
    uint16_t *p = (uint16_t *)out + i;
    if (n >= 16) _mm256_storeu_si256((__m256i *)p, h);
    else _mm256_mask_storeu_epi16(p, m, h);
}

AI void dequantize_row(const uint8_t *q, const uint8_t *scale, int64_t K, void *out, const int e5,
                       const qk_dtype odt)
{
    for (int64_t k0 = 0, j = 0; k0 < K; k0 += 32, j++) {
        const int64_t n = K - k0 < 32 ? K - k0 : 32;
        const uint32_t b = scale[j];
        const uint32_t sbits = b == 0xff ? 0x7fc00000u : b == 0 ? 0x00400000u : b << 23;
        const __m512 s = _mm512_castsi512_ps(_mm512_set1_epi32((int)sbits));
        dequant16(q + k0, n, s, out, k0, e5, odt);
        if (n > 16) dequant16(q + k0 + 16, n - 16, s, out, k0 + 16, e5, odt);
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

void qk_mx_dequantize_row_avx512(const uint8_t *q, qk_dtype qdt, const uint8_t *scale, int64_t K,
                                 void *out, qk_dtype odt)
{
    const bool e5 = qdt == QK_DTYPE_F8_E5M2;
    switch (odt) {
    case QK_DTYPE_F16: (e5 ? dequant_e5m2_f16 : dequant_e4m3_f16)(q, scale, K, out); break;
    case QK_DTYPE_BF16: (e5 ? dequant_e5m2_bf16 : dequant_e4m3_bf16)(q, scale, K, out); break;
    default: (e5 ? dequant_e5m2_f32 : dequant_e4m3_f32)(q, scale, K, out); break;
    }
}
