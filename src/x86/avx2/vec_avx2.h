/* Thin AVX2 vector layer for the kernels written once in src/simd/<op>_simd.inc: 8 f32 lanes,
 * exact loads of F32/F16/BF16, RNE stores, partial vectors through a zeroed stack
 * buffer, double accumulation, exp. */
#ifndef QK_VEC_AVX2_H
#define QK_VEC_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VL 8
typedef __m256 vf;
typedef __m256d vd;
#define QK_ISA_SUFFIX avx2

static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float a) { return _mm256_set1_ps(a); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }

static inline vf vld_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline vf vld_f32_n(const float *p, int64_t n)
{
    float b[VL] = {0};
    memcpy(b, p, (size_t)n * 4);
    return _mm256_loadu_ps(b);
}
static inline vf vcvt_bf16(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline vf vld_bf16(const uint16_t *p) { return vcvt_bf16(_mm_loadu_si128((const __m128i *)p)); }
static inline vf vld_bf16_n(const uint16_t *p, int64_t n)
{
    uint16_t b[VL] = {0};
    memcpy(b, p, (size_t)n * 2);
    return vld_bf16(b);
}
static inline vf vld_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline vf vld_f16_n(const uint16_t *p, int64_t n)
{
    uint16_t b[VL] = {0};
    memcpy(b, p, (size_t)n * 2);
    return vld_f16(b);
}

static inline __m128i vcvt_to_bf16(vf v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    r = _mm256_srli_epi32(r, 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static inline __m128i vcvt_to_f16(vf v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline void vst_f32(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline void vst_f32_n(float *p, vf v, int64_t n)
{
    float b[VL];
    _mm256_storeu_ps(b, v);
    memcpy(p, b, (size_t)n * 4);
}
static inline void vst_bf16(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, vcvt_to_bf16(v)); }
static inline void vst_bf16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    _mm_storeu_si128((__m128i *)b, vcvt_to_bf16(v));
    memcpy(p, b, (size_t)n * 2);
}
static inline void vst_f16(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, vcvt_to_f16(v)); }
static inline void vst_f16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    _mm_storeu_si128((__m128i *)b, vcvt_to_f16(v));
    memcpy(p, b, (size_t)n * 2);
}

/* two vectors (2 * VL consecutive elements) at once */
static inline void vst2_f32(float *p, vf a, vf b) { vst_f32(p, a); vst_f32(p + VL, b); }
static inline void vst2_f16(uint16_t *p, vf a, vf b) { vst_f16(p, a); vst_f16(p + VL, b); }
static inline void vst2_bf16(uint16_t *p, vf a, vf b) { vst_bf16(p, a); vst_bf16(p + VL, b); }

/* AVX2 rounds BF16 in integer arithmetic, exact for every value: no "normal-only" form */
static inline void vst2_f32_normal(float *p, vf a, vf b) { vst2_f32(p, a, b); }
static inline void vst2_f16_normal(uint16_t *p, vf a, vf b) { vst2_f16(p, a, b); }
static inline void vst2_bf16_normal(uint16_t *p, vf a, vf b) { vst2_bf16(p, a, b); }

/* running minimum of the nonzero |v| (zeros and NaN ignored), and its horizontal min */
static inline vf vminnz_abs(vf m, vf v)
{
    vf a = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    vf nz = _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    return _mm256_blendv_ps(m, _mm256_min_ps(a, m), nz);
}
static inline float vhmin(vf m)
{
    __m128 h = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_min_ps(h, _mm_movehl_ps(h, h));
    h = _mm_min_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline vf vround_f32(vf v) { return v; }
static inline vf vround_bf16(vf v) { return vcvt_bf16(vcvt_to_bf16(v)); }
static inline vf vround_f16(vf v) { return _mm256_cvtph_ps(vcvt_to_f16(v)); }

/* store v rounded to the dtype and return the stored value as f32 */
static inline vf vst_round_f32(float *p, vf v) { vst_f32(p, v); return v; }
static inline vf vst_round_f32_n(float *p, vf v, int64_t n) { vst_f32_n(p, v, n); return v; }
static inline vf vst_round_bf16(uint16_t *p, vf v) { vst_bf16(p, v); return vround_bf16(v); }
static inline vf vst_round_bf16_n(uint16_t *p, vf v, int64_t n) { vst_bf16_n(p, v, n); return vround_bf16(v); }
static inline vf vst_round_f16(uint16_t *p, vf v) { vst_f16(p, v); return vround_f16(v); }
static inline vf vst_round_f16_n(uint16_t *p, vf v, int64_t n) { vst_f16_n(p, v, n); return vround_f16(v); }

/* Non-temporal (streaming) stores, for calls far larger than the caches (see
   NORM_STREAM_MIN_BYTES): p must be 32-byte aligned for f32 (one ymm) and 16-byte aligned for
   F16 (one xmm); the caller checks its rows and ends the call with vst_nt_fence. BF16 rows
   take the even/odd path, which does not stream on this layer: a streaming variant of it
   (out only, as on avx512) gave the DRAM cells 0.91-0.92x the time on the Zen 4 but made the
   calls that do not stream 6-8% slower (512 x 2048, 16 x 4096), so it was not kept. */
#define VEC_HAS_NT_STORE 1
static inline void vst_nt_f32(float *p, vf v) { _mm256_stream_ps(p, v); }
static inline void vst_nt_f16(uint16_t *p, vf v) { _mm_stream_si128((__m128i *)p, vcvt_to_f16(v)); }
static inline vf vst_round_nt_keep_f16(uint16_t *p, uint16_t *kp, vf v)
{
    const __m128i h = vcvt_to_f16(v);
    _mm_stream_si128((__m128i *)p, h);
    _mm_store_si128((__m128i *)kp, h);
    return _mm256_cvtph_ps(h);
}
static inline void vst_nt_fence(void) { _mm_sfence(); }

static inline void vacc_d(vd *lo, vd *hi, vf s)
{
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(s)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1)));
}
static inline vd vd_zero(void) { return _mm256_setzero_pd(); }
static inline vd vd_add(vd a, vd b) { return _mm256_add_pd(a, b); }
static inline double vd_sum(vd a)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* BF16 rows as even/odd halves: 16 BF16 values load as the f32 vectors of their even and
   odd elements with lane-local shifts (no widening shuffle) and store back rounded by exact
   integer RNE, the two halves merged with one word blend (no pack or permute). Weights for
   such rows are kept in f32 with the same even/odd order per 16 elements (veo_split_f32). */
#define VEC_HAS_BF16_EO 1
static inline void veo_load_bf16(const uint16_t *p, vf *even, vf *odd)
{
    __m256i u = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}
/* elements 0..15 as two natural vectors -> their even (0, 2, .., 14) and odd halves */
static inline void veo_split_f32(vf v0, vf v1, vf *even, vf *odd)
{
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0x88)), 0xd8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0xdd)), 0xd8));
}
/* RNE of f32 to BF16, left in the high 16 bits of each lane (low bits: garbage); _finite
   for values known not to be NaN, else NaN becomes its quiet form as in vcvt_to_bf16 */
static inline __m256i veo_rne_hi_finite(vf v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}
static inline __m256i veo_rne_hi(vf v)
{
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(veo_rne_hi_finite(v),
                              _mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x400000)), nan);
}
static inline __m256i veo_merge(__m256i re, __m256i ro)
{
    return _mm256_blend_epi16(_mm256_srli_epi32(re, 16), ro, 0xaa); /* odd words from ro */
}
static inline void veo_store_bf16(uint16_t *p, vf even, vf odd)
{
    _mm256_storeu_si256((__m256i *)p, veo_merge(veo_rne_hi(even), veo_rne_hi(odd)));
}
static inline void veo_store_bf16_finite(uint16_t *p, vf even, vf odd)
{
    _mm256_storeu_si256((__m256i *)p, veo_merge(veo_rne_hi_finite(even), veo_rne_hi_finite(odd)));
}
/* stores rnd(even), rnd(odd) and replaces them by the stored values as f32 */
static inline void veo_store_round_bf16(uint16_t *p, vf *even, vf *odd)
{
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256i re = veo_rne_hi(*even), ro = veo_rne_hi(*odd);
    _mm256_storeu_si256((__m256i *)p, veo_merge(re, ro));
    *even = _mm256_castsi256_ps(_mm256_and_si256(re, hi));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(ro, hi));
}
/* nonzero when some lane of a or b is NaN or +-Inf */
static inline int vany_nonfinite2(vf a, vf b)
{
    const vf abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = vset1(0x1.fffffep127f);
    vf m = _mm256_or_ps(_mm256_cmp_ps(_mm256_and_ps(a, abs), big, _CMP_NLE_UQ),
                        _mm256_cmp_ps(_mm256_and_ps(b, abs), big, _CMP_NLE_UQ));
    return !_mm256_testz_ps(m, m);
}

/* e^x (~1 ulp): overflow to inf, underflow to 0, via two exact power-of-two factors */
static inline vf vexp(vf x)
{
    const vf log2e = vset1(1.44269504088896341f);
    vf xc = _mm256_min_ps(_mm256_max_ps(x, vset1(-104.0f)), vset1(89.0f));
    vf n = _mm256_round_ps(vmul(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(n, vset1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, vset1(-2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfmadd(p, r, vset1(1.3981999507e-3f));
    p = vfmadd(p, r, vset1(8.3334519073e-3f));
    p = vfmadd(p, r, vset1(4.1665795894e-2f));
    p = vfmadd(p, r, vset1(1.6666665459e-1f));
    p = vfmadd(p, r, vset1(5.0000001201e-1f));
    p = vfmadd(p, vmul(r, r), vadd(r, vset1(1.0f)));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    vf s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    vf s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    vf e = vmul(vmul(p, s1), s2);
    /* x beyond the clamp: +inf above, 0 below; NaN stays NaN */
    e = _mm256_blendv_ps(e, vset1(__builtin_inff()), _mm256_cmp_ps(x, vset1(89.0f), _CMP_GT_OQ));
    e = _mm256_blendv_ps(e, vzero(), _mm256_cmp_ps(x, vset1(-104.0f), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return e;
}

#endif
