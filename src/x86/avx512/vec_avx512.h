/* Thin AVX-512 vector layer for the kernels written once in src/simd/<op>_simd.inc: 16 f32 lanes,
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

/* two vectors (2 * VL consecutive elements) at once: BF16 through one vcvtne2ps2bf16
   (AVX512-BF16, RNE) unless an input is subnormal — that instruction flushes those, so
   such pairs take the integer rounding above */
static inline void vst2_f32(float *p, vf a, vf b) { vst_f32(p, a); vst_f32(p + VL, b); }
static inline void vst2_f16(uint16_t *p, vf a, vf b) { vst_f16(p, a); vst_f16(p + VL, b); }
/* Pairs whose values are known to be zero or at least 2^-126 in magnitude (no subnormal):
   vcvtne2ps2bf16 alone. */
static inline void vst2_bf16_normal(uint16_t *p, vf a, vf b)
{
    _mm512_storeu_si512((void *)p, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}
static inline void vst2_f32_normal(float *p, vf a, vf b) { vst2_f32(p, a, b); }
static inline void vst2_f16_normal(uint16_t *p, vf a, vf b) { vst2_f16(p, a, b); }

/* running minimum of the nonzero |v| (zeros and NaN ignored), and its horizontal min */
static inline vf vminnz_abs(vf m, vf v)
{
    vf a = _mm512_abs_ps(v);
    return _mm512_mask_min_ps(m, _mm512_cmp_ps_mask(a, vzero(), _CMP_NEQ_OQ), a, m);
}
static inline float vhmin(vf m) { return _mm512_reduce_min_ps(m); }

static inline void vst2_bf16(uint16_t *p, vf a, vf b)
{
    __mmask16 sa = _mm512_fpclass_ps_mask(a, 0x20), sb = _mm512_fpclass_ps_mask(b, 0x20);
    if (__builtin_expect(_kortestz_mask16_u8(sa, sb), 1)) {
        _mm512_storeu_si512((void *)p, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    } else {
        vst_bf16(p, a);
        vst_bf16(p + VL, b);
    }
}

/* the f32 value of v rounded to the dtype (what a store then a load would give) */
static inline vf vround_f32(vf v) { return v; }
static inline vf vround_bf16(vf v) { return vcvt_bf16(vcvt_to_bf16(v)); }
static inline vf vround_f16(vf v) { return _mm512_cvtph_ps(vcvt_to_f16(v)); }

/* store v rounded to the dtype and return the stored value as f32 */
static inline vf vst_round_f32(float *p, vf v) { vst_f32(p, v); return v; }
static inline vf vst_round_f32_n(float *p, vf v, int64_t n) { vst_f32_n(p, v, n); return v; }
static inline vf vst_round_bf16(uint16_t *p, vf v) { vst_bf16(p, v); return vround_bf16(v); }
static inline vf vst_round_bf16_n(uint16_t *p, vf v, int64_t n) { vst_bf16_n(p, v, n); return vround_bf16(v); }

/* Non-temporal (streaming) stores, for calls far larger than the caches: the lines go to
   memory without being read first and without evicting the inputs. p must be 64-byte
   aligned for f32 (one zmm) and 32-byte aligned for F16 (16 elements); the caller checks
   its rows and ends the call with vst_nt_fence (streaming stores are weakly ordered).
   vst_round_nt_keep_f16 also stores the F16 bits to the kept row kp (32-byte aligned) and
   returns the stored value (the streaming F16 rows' residual_out).
   F16 goes out as two 16-byte streaming stores, not one of 32 bytes: `qk bench norm` on the
   2-core Zen 5 (2026-12-07, F16 add_gemma 512 x 4096 / 5120 from DRAM, two runs each) had
   the avx2 provider (16-byte stores) at 0.85-0.94x the time of avx512 with 32-byte ones,
   and at 0.97-1.03x once avx512 stored 16 bytes at a time. */
#define VEC_HAS_NT_STORE 1
static inline void vst_nt_f32(float *p, vf v) { _mm512_stream_ps(p, v); }
static inline void vst_nt_f16_bits(uint16_t *p, __m256i h)
{
    _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(h));
    _mm_stream_si128((__m128i *)p + 1, _mm256_extracti128_si256(h, 1));
}
static inline void vst_nt_f16(uint16_t *p, vf v) { vst_nt_f16_bits(p, vcvt_to_f16(v)); }
static inline vf vst_round_nt_keep_f16(uint16_t *p, uint16_t *kp, vf v)
{
    const __m256i h = vcvt_to_f16(v);
    vst_nt_f16_bits(p, h);
    _mm256_store_si256((__m256i *)kp, h);
    return _mm512_cvtph_ps(h);
}
static inline void vst_nt_fence(void) { _mm_sfence(); }
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

/* Sum of squares of a BF16 row with AVX512-BF16 dot products: each vdpbf16ps adds two
   exact BF16 squares per lane (two f32 roundings), two instructions (at most 4 terms per
   lane) make a block that is accumulated in double — the generic scheme's bound. The
   instruction flushes subnormal results, so a row whose sum is below 2^-60 (where the
   flushed parts could matter) is summed again by the generic code. */
typedef struct sq_state {
    vd alo, ahi, blo, bhi;
    __m512i mn; /* smallest nonzero |x| as BF16 bits minus one (zeros wrap to 0xffff) */
} sq_state;

static inline void sq_init(sq_state *s)
{
    s->alo = s->ahi = s->blo = s->bhi = vd_zero();
    s->mn = _mm512_set1_epi16(-1);
}
static inline __m512i sq_abs_m1(__m512i u)
{
    return _mm512_sub_epi16(_mm512_and_si512(u, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(1));
}
/* 128 consecutive elements as four vectors of 32 BF16 */
static inline void sq_block128(sq_state *s, __m512i u0, __m512i u1, __m512i u2, __m512i u3)
{
    vacc_d(&s->alo, &s->ahi, _mm512_dpbf16_ps(_mm512_dpbf16_ps(vzero(), (__m512bh)u0, (__m512bh)u0),
                                              (__m512bh)u1, (__m512bh)u1));
    vacc_d(&s->blo, &s->bhi, _mm512_dpbf16_ps(_mm512_dpbf16_ps(vzero(), (__m512bh)u2, (__m512bh)u2),
                                              (__m512bh)u3, (__m512bh)u3));
    s->mn = _mm512_min_epu16(s->mn, _mm512_min_epu16(_mm512_min_epu16(sq_abs_m1(u0), sq_abs_m1(u1)),
                                                     _mm512_min_epu16(sq_abs_m1(u2), sq_abs_m1(u3))));
}
/* the last elements, 32 (or fewer, zero-padded) at a time */
static inline void sq_chunk32(sq_state *s, __m512i u)
{
    vacc_d(&s->alo, &s->ahi, _mm512_dpbf16_ps(vzero(), (__m512bh)u, (__m512bh)u));
    s->mn = _mm512_min_epu16(s->mn, sq_abs_m1(u));
}
static inline __mmask32 sq_mask(int64_t n) { return (__mmask32)(n >= 32 ? ~0u : (1u << n) - 1u); }
/* The row's sum of squares (x: the row, for the exact re-summation of tiny rows) and its
   smallest nonzero |x| (0 if it is NaN/Inf, +inf for an all-zero row). */
static inline double sq_final(const sq_state *s, const uint16_t *x, int64_t H,
                              double (*generic)(const uint16_t *, int64_t), float *xmin)
{
    __m256i h = _mm256_min_epu16(_mm512_castsi512_si256(s->mn), _mm512_extracti64x4_epi64(s->mn, 1));
    __m128i q = _mm_min_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    uint16_t b = (uint16_t)(_mm_extract_epi16(_mm_minpos_epu16(q), 0) + 1);
    *xmin = b == 0 ? __builtin_inff() : (b >= 0x7f80 ? 0.0f : qk_bf16_to_f32(b));
    double ss = vd_sum(vd_add(vd_add(s->alo, s->ahi), vd_add(s->blo, s->bhi)));
    return ss < 0x1p-60 ? generic(x, H) : ss;
}

/* 32 elements of rnd(x + res) packed as BF16 (what vst2_bf16 stores), stored to ro; n < 32
   stores and returns only the first n (the rest zero). */
static inline __m512i vadd_pack_bf16_st(const uint16_t *x, const uint16_t *res, uint16_t *ro, int nt)
{
    vf a = vadd(vld_bf16(x), vld_bf16(res)), b = vadd(vld_bf16(x + VL), vld_bf16(res + VL));
    __mmask16 sa = _mm512_fpclass_ps_mask(a, 0x20), sb = _mm512_fpclass_ps_mask(b, 0x20);
    __m512i u;
    if (__builtin_expect(_kortestz_mask16_u8(sa, sb), 1))
        u = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    else
        u = _mm512_inserti64x4(_mm512_castsi256_si512(vcvt_to_bf16(a)), vcvt_to_bf16(b), 1);
    if (nt) _mm512_stream_si512((void *)ro, u);
    else _mm512_storeu_si512((void *)ro, u);
    return u;
}
/* nt: ro with a streaming store (ro 64-byte aligned; see vst_nt_f32) */
static inline __m512i vadd_pack_bf16(const uint16_t *x, const uint16_t *res, uint16_t *ro)
{
    return vadd_pack_bf16_st(x, res, ro, 0);
}
static inline __m512i vadd_pack_bf16_n(const uint16_t *x, const uint16_t *res, uint16_t *ro,
                                       int64_t n)
{
    __m512i u;
    if (n > VL) {
        vf a = vadd(vld_bf16(x), vld_bf16(res));
        vf b = vadd(vld_bf16_n(x + VL, n - VL), vld_bf16_n(res + VL, n - VL));
        u = _mm512_inserti64x4(_mm512_castsi256_si512(vcvt_to_bf16(a)), vcvt_to_bf16(b), 1);
    } else {
        u = _mm512_castsi256_si512(vcvt_to_bf16(vadd(vld_bf16_n(x, n), vld_bf16_n(res, n))));
    }
    u = _mm512_maskz_mov_epi16(sq_mask(n), u);
    _mm512_mask_storeu_epi16(ro, sq_mask(n), u);
    return u;
}
/* The sum of squares of x, or (res != NULL) of rnd(x + res), which it stores to ro as it
   goes: the add forms' pass 0 and pass 1 in one stream, the same sums either way. */
static inline double vsumsq_bf16_dp_add(const uint16_t *x, const uint16_t *res, uint16_t *ro,
                                        int64_t H, double (*generic)(const uint16_t *, int64_t),
                                        float *xmin)
{
    sq_state s;
    sq_init(&s);
    int64_t k = 0;
    if (res) {
        for (; k + 128 <= H; k += 128)
            sq_block128(&s, vadd_pack_bf16(x + k, res + k, ro + k),
                        vadd_pack_bf16(x + k + 32, res + k + 32, ro + k + 32),
                        vadd_pack_bf16(x + k + 64, res + k + 64, ro + k + 64),
                        vadd_pack_bf16(x + k + 96, res + k + 96, ro + k + 96));
        for (; k < H; k += 32)
            sq_chunk32(&s, H - k >= 32 ? vadd_pack_bf16(x + k, res + k, ro + k)
                                       : vadd_pack_bf16_n(x + k, res + k, ro + k, H - k));
        return sq_final(&s, ro, H, generic, xmin);
    }
    for (; k + 128 <= H; k += 128)
        sq_block128(&s, _mm512_loadu_si512((const void *)(x + k)),
                    _mm512_loadu_si512((const void *)(x + k + 32)),
                    _mm512_loadu_si512((const void *)(x + k + 64)),
                    _mm512_loadu_si512((const void *)(x + k + 96)));
    for (; k < H; k += 32) sq_chunk32(&s, _mm512_maskz_loadu_epi16(sq_mask(H - k), x + k));
    return sq_final(&s, x, H, generic, xmin);
}
static inline double vsumsq_bf16_dp(const uint16_t *x, int64_t H,
                                    double (*generic)(const uint16_t *, int64_t), float *xmin)
{
    return vsumsq_bf16_dp_add(x, NULL, NULL, H, generic, xmin);
}
#define VEC_SUMSQ_BF16 vsumsq_bf16_dp
#define VEC_ADD_SUMSQ_BF16 vsumsq_bf16_dp_add

/* BF16 rows as even/odd halves: 32 BF16 values load as the f32 vectors of their even and
   odd elements with lane-local shifts (no widening shuffle), and store back with one
   vcvtne2ps2bf16 plus one word permute. Weights for such rows are kept in f32 with the
   same even/odd order per 32 elements (veo_split_f32). */
#define VEC_HAS_BF16_EO 1
#define VEC_BF16_EO_DP 1 /* the EO rows take the packed vdpbf16ps sums of norm_simd.inc */
static inline void veo_load_bf16(const uint16_t *p, vf *even, vf *odd)
{
    __m512i u = _mm512_loadu_si512((const void *)p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}
static inline void veo_split_f32(vf v0, vf v1, vf *even, vf *odd)
{
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    *even = _mm512_permutex2var_ps(v0, ie, v1);
    *odd = _mm512_permutex2var_ps(v0, io, v1);
}
/* values known to be zero or at least 2^-126 in magnitude */
static inline __m512i veo_pack_bf16_normal(vf even, vf odd)
{
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                        23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}
static inline void veo_store_bf16_normal(uint16_t *p, vf even, vf odd)
{
    _mm512_storeu_si512((void *)p, veo_pack_bf16_normal(even, odd));
}
/* the same 32 elements as one streaming store (p 64-byte aligned; see vst_nt_f32) */
static inline void veo_store_bf16_normal_nt(uint16_t *p, vf even, vf odd)
{
    _mm512_stream_si512((void *)p, veo_pack_bf16_normal(even, odd));
}
/* nt: streaming stores where the pair has no subnormal (the rare others take vst_bf16) */
static inline void veo_store_bf16(uint16_t *p, vf even, vf odd, int nt)
{
    __mmask16 se = _mm512_fpclass_ps_mask(even, 0x20), so = _mm512_fpclass_ps_mask(odd, 0x20);
    if (__builtin_expect(_kortestz_mask16_u8(se, so), 1)) {
        if (nt) veo_store_bf16_normal_nt(p, even, odd);
        else veo_store_bf16_normal(p, even, odd);
    } else { /* back to element order, then the exact integer rounding */
        const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        vst_bf16(p, _mm512_permutex2var_ps(even, lo, odd));
        vst_bf16(p + VL, _mm512_permutex2var_ps(even, hi, odd));
    }
}

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
