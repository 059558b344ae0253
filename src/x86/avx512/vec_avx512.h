/* Thin AVX-512 vector layer for the kernels written once in src/x86/<op>_simd.inc: 16 f32 lanes,
 * exact loads of F32/F16/BF16, RNE stores (BF16 by integer rounding, so subnormals are
 * kept, unlike vcvtneps2bf16), masked partial vectors, double accumulation, exp. */
#ifndef QK_VEC_AVX512_H
#define QK_VEC_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define VL 16
typedef __m512 vf;
typedef __m512d vd;
#define QK_ISA_SUFFIX avx512

static inline __mmask16 vmask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float a) { return _mm512_set1_ps(a); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }

/* loads: full and partial (n < VL lanes, the rest zero) */
static inline vf vld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vld_f32_n(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(vmask(n), p); }
static inline vf vcvt_bf16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline vf vld_bf16(const uint16_t *p) { return vcvt_bf16(_mm256_loadu_si256((const __m256i *)p)); }
static inline vf vld_bf16_n(const uint16_t *p, int64_t n)
{
    return vcvt_bf16(_mm256_maskz_loadu_epi16(vmask(n), p));
}
static inline vf vld_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline vf vld_f16_n(const uint16_t *p, int64_t n)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(vmask(n), p));
}

/* f32 -> bf16 bits with round-to-nearest-even; NaN stays NaN (quiet) */
static inline __m256i vcvt_to_bf16(vf v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
static inline __m256i vcvt_to_f16(vf v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline void vst_f32(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline void vst_f32_n(float *p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, vmask(n), v); }
static inline void vst_bf16(uint16_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, vcvt_to_bf16(v)); }
static inline void vst_bf16_n(uint16_t *p, vf v, int64_t n) { _mm256_mask_storeu_epi16(p, vmask(n), vcvt_to_bf16(v)); }
static inline void vst_f16(uint16_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, vcvt_to_f16(v)); }
static inline void vst_f16_n(uint16_t *p, vf v, int64_t n) { _mm256_mask_storeu_epi16(p, vmask(n), vcvt_to_f16(v)); }

/* the f32 value of v rounded to the dtype (what a store then a load would give) */
static inline vf vround_f32(vf v) { return v; }
static inline vf vround_bf16(vf v) { return vcvt_bf16(vcvt_to_bf16(v)); }
static inline vf vround_f16(vf v) { return _mm512_cvtph_ps(vcvt_to_f16(v)); }

/* store v rounded to the dtype and return the stored value as f32 */
static inline vf vst_round_f32(float *p, vf v) { vst_f32(p, v); return v; }
static inline vf vst_round_f32_n(float *p, vf v, int64_t n) { vst_f32_n(p, v, n); return v; }
static inline vf vst_round_bf16(uint16_t *p, vf v) { vst_bf16(p, v); return vround_bf16(v); }
static inline vf vst_round_bf16_n(uint16_t *p, vf v, int64_t n) { vst_bf16_n(p, v, n); return vround_bf16(v); }
static inline vf vst_round_f16(uint16_t *p, vf v) { vst_f16(p, v); return vround_f16(v); }
static inline vf vst_round_f16_n(uint16_t *p, vf v, int64_t n) { vst_f16_n(p, v, n); return vround_f16(v); }

/* double accumulation of the 16 lanes of s into two 8-lane accumulators */
static inline void vacc_d(vd *lo, vd *hi, vf s)
{
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(s)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(s), 1))));
}
static inline vd vd_zero(void) { return _mm512_setzero_pd(); }
static inline vd vd_add(vd a, vd b) { return _mm512_add_pd(a, b); }
static inline double vd_sum(vd a) { return _mm512_reduce_add_pd(a); }

/* e^x (~1 ulp): overflow to inf, underflow through subnormals to 0, NaN kept */
static inline vf vexp(vf x)
{
    const vf log2e = vset1(1.44269504088896341f);
    /* beyond these e^x is inf / 0 in f32; the clamp keeps r finite for +-inf */
    vf xc = _mm512_min_ps(_mm512_max_ps(x, vset1(-104.0f)), vset1(89.0f));
    vf n = _mm512_roundscale_ps(vmul(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, vset1(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, vset1(-2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfmadd(p, r, vset1(1.3981999507e-3f));
    p = vfmadd(p, r, vset1(8.3334519073e-3f));
    p = vfmadd(p, r, vset1(4.1665795894e-2f));
    p = vfmadd(p, r, vset1(1.6666665459e-1f));
    p = vfmadd(p, r, vset1(5.0000001201e-1f));
    p = vfmadd(p, vmul(r, r), vadd(r, vset1(1.0f)));
    vf e = _mm512_scalef_ps(p, n);
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

#endif
