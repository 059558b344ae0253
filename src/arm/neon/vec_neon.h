/* Thin Advanced SIMD (NEON, Armv8-A) vector layer for the kernels written once in
 * src/simd/<op>_simd.inc: 4 f32 lanes, exact loads of F32/F16/BF16 (fcvtl for F16), RNE
 * stores (F16 by fcvtn, BF16 by integer rounding with the reference's NaN rule), partial
 * vectors through a zeroed stack buffer, double accumulation in float64x2_t, exp. */
#ifndef QK_VEC_NEON_H
#define QK_VEC_NEON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#define VL 4
typedef float32x4_t vf;
typedef float64x2_t vd;
#define QK_ISA_SUFFIX neon

/* The pair stores of norm_simd.inc are named vst2_<dtype>, as are ACLE's interleaving
   stores (functions in GCC's arm_neon.h, macros in clang's): the layer's own are renamed. */
#undef vst2_f32
#undef vst2_f16
#undef vst2_bf16
#define vst2_f32 qk_neon_vst2_f32
#define vst2_f16 qk_neon_vst2_f16
#define vst2_bf16 qk_neon_vst2_bf16

static inline vf vzero(void) { return vdupq_n_f32(0.0f); }
static inline vf vset1(float a) { return vdupq_n_f32(a); }
static inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vdiv(vf a, vf b) { return vdivq_f32(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); } /* a * b + c */

/* loads: full and partial (n < VL lanes, the rest zero) */
static inline vf vld_f32(const float *p) { return vld1q_f32(p); }
static inline vf vld_f32_n(const float *p, int64_t n)
{
    float b[VL] = {0};
    memcpy(b, p, (size_t)n * 4);
    return vld1q_f32(b);
}
static inline vf nv_from_bf16(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
static inline vf vld_bf16(const uint16_t *p) { return nv_from_bf16(vld1_u16(p)); }
static inline vf vld_bf16_n(const uint16_t *p, int64_t n)
{
    uint16_t b[VL] = {0};
    memcpy(b, p, (size_t)n * 2);
    return vld_bf16(b);
}
/* fcvtl: exact (every F16 value, subnormals included, is a normal f32) */
static inline vf nv_from_f16(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }
static inline vf vld_f16(const uint16_t *p) { return nv_from_f16(vld1_u16(p)); }
static inline vf vld_f16_n(const uint16_t *p, int64_t n)
{
    uint16_t b[VL] = {0};
    memcpy(b, p, (size_t)n * 2);
    return vld_f16(b);
}

/* f32 -> bf16 bits with round-to-nearest-even; NaN becomes its quiet form (bits | 0x40),
   as qk_f32_to_bf16 */
static inline uint16x4_t nv_to_bf16(vf v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff)));
    const uint32x4_t ord = vceqq_f32(v, v); /* all ones where v is not NaN */
    return vshrn_n_u32(vbslq_u32(ord, r, vorrq_u32(u, vdupq_n_u32(0x400000))), 16);
}
/* fcvtn under the default FPCR (round to nearest even, no flush): IEEE RNE, overflow to
   inf, F16 subnormals kept; NaN keeps its sign and top payload bits with the quiet bit set,
   the bits qk_f16_from_f32 gives */
static inline uint16x4_t nv_to_f16(vf v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }

static inline void vst_f32(float *p, vf v) { vst1q_f32(p, v); }
static inline void vst_f32_n(float *p, vf v, int64_t n)
{
    float b[VL];
    vst1q_f32(b, v);
    memcpy(p, b, (size_t)n * 4);
}
static inline void vst_bf16(uint16_t *p, vf v) { vst1_u16(p, nv_to_bf16(v)); }
static inline void vst_bf16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    vst1_u16(b, nv_to_bf16(v));
    memcpy(p, b, (size_t)n * 2);
}
static inline void vst_f16(uint16_t *p, vf v) { vst1_u16(p, nv_to_f16(v)); }
static inline void vst_f16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    vst1_u16(b, nv_to_f16(v));
    memcpy(p, b, (size_t)n * 2);
}

/* two vectors (2 * VL consecutive elements) at once */
static inline void vst2_f32(float *p, vf a, vf b) { vst1q_f32(p, a); vst1q_f32(p + VL, b); }
static inline void vst2_f16(uint16_t *p, vf a, vf b)
{
    vst1q_u16(p, vcombine_u16(nv_to_f16(a), nv_to_f16(b)));
}
static inline void vst2_bf16(uint16_t *p, vf a, vf b)
{
    vst1q_u16(p, vcombine_u16(nv_to_bf16(a), nv_to_bf16(b)));
}

/* BF16 is rounded in integer arithmetic, exact for every value: no "normal-only" form */
static inline void vst2_f32_normal(float *p, vf a, vf b) { vst2_f32(p, a, b); }
static inline void vst2_f16_normal(uint16_t *p, vf a, vf b) { vst2_f16(p, a, b); }
static inline void vst2_bf16_normal(uint16_t *p, vf a, vf b) { vst2_bf16(p, a, b); }

/* running minimum of the nonzero |v| (zeros and NaN ignored), and its horizontal min */
static inline vf vminnz_abs(vf m, vf v)
{
    const vf a = vabsq_f32(v);
    const uint32x4_t nz = vcgtq_f32(a, vzero()); /* false for 0 and NaN */
    return vbslq_f32(nz, vminq_f32(a, m), m);
}
static inline float vhmin(vf m) { return vminvq_f32(m); }

/* the f32 value of v rounded to the dtype (what a store then a load would give) */
static inline vf vround_f32(vf v) { return v; }
static inline vf vround_bf16(vf v) { return nv_from_bf16(nv_to_bf16(v)); }
static inline vf vround_f16(vf v) { return nv_from_f16(nv_to_f16(v)); }

/* store v rounded to the dtype and return the stored value as f32 */
static inline vf vst_round_f32(float *p, vf v) { vst_f32(p, v); return v; }
static inline vf vst_round_f32_n(float *p, vf v, int64_t n) { vst_f32_n(p, v, n); return v; }
static inline vf vst_round_bf16(uint16_t *p, vf v)
{
    const uint16x4_t h = nv_to_bf16(v);
    vst1_u16(p, h);
    return nv_from_bf16(h);
}
static inline vf vst_round_bf16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    const uint16x4_t h = nv_to_bf16(v);
    vst1_u16(b, h);
    memcpy(p, b, (size_t)n * 2);
    return nv_from_bf16(h);
}
static inline vf vst_round_f16(uint16_t *p, vf v)
{
    const uint16x4_t h = nv_to_f16(v);
    vst1_u16(p, h);
    return nv_from_f16(h);
}
static inline vf vst_round_f16_n(uint16_t *p, vf v, int64_t n)
{
    uint16_t b[VL];
    const uint16x4_t h = nv_to_f16(v);
    vst1_u16(b, h);
    memcpy(p, b, (size_t)n * 2);
    return nv_from_f16(h);
}

/* double accumulation of the 4 lanes of s into two 2-lane accumulators */
static inline void vacc_d(vd *lo, vd *hi, vf s)
{
    *lo = vaddq_f64(*lo, vcvt_f64_f32(vget_low_f32(s)));
    *hi = vaddq_f64(*hi, vcvt_high_f64_f32(s));
}
static inline vd vd_zero(void) { return vdupq_n_f64(0.0); }
static inline vd vd_add(vd a, vd b) { return vaddq_f64(a, b); }
static inline double vd_sum(vd a) { return vgetq_lane_f64(a, 0) + vgetq_lane_f64(a, 1); }

/* e^x (~1 ulp): overflow to inf, underflow through subnormals to 0, NaN kept; 2^n applied
   as two exact power-of-two factors */
static inline vf vexp(vf x)
{
    const vf log2e = vset1(1.44269504088896341f);
    /* beyond these e^x is inf / 0 in f32; the clamp keeps r finite for +-inf */
    const vf xc = vminq_f32(vmaxq_f32(x, vset1(-104.0f)), vset1(89.0f));
    const vf n = vrndnq_f32(vmul(xc, log2e));
    vf r = vfmsq_f32(xc, n, vset1(0.693359375f));     /* xc - n * ln2_hi */
    r = vfmsq_f32(r, n, vset1(-2.12194440e-4f));       /* - n * ln2_lo */
    vf p = vset1(1.9875691500e-4f);
    p = vfmadd(p, r, vset1(1.3981999507e-3f));
    p = vfmadd(p, r, vset1(8.3334519073e-3f));
    p = vfmadd(p, r, vset1(4.1665795894e-2f));
    p = vfmadd(p, r, vset1(1.6666665459e-1f));
    p = vfmadd(p, r, vset1(5.0000001201e-1f));
    p = vfmadd(p, vmul(r, r), vadd(r, vset1(1.0f)));
    const int32x4_t ni = vcvtnq_s32_f32(n);
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const vf s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
    const vf s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
    vf e = vmul(vmul(p, s1), s2);
    /* x beyond the clamp: +inf above, 0 below; NaN stays NaN */
    e = vbslq_f32(vcgtq_f32(x, vset1(89.0f)), vset1(__builtin_inff()), e);
    e = vbslq_f32(vcltq_f32(x, vset1(-104.0f)), vzero(), e);
    e = vbslq_f32(vceqq_f32(x, x), e, x);
    return e;
}

#endif
