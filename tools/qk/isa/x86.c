/* qk bench's machine-limit loops on x86-64 (the contract: bench_isa.h): AVX-512 or AVX2
 * as the build target's flags allow (QK_TOOL_FLAGS in cmake/targets/<target>.cmake), none
 * on generic, where the callers' plain C loops do all of the work. */
#include "bench_isa.h"

#include "internal.h"

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

/* ---- bandwidth kernels ---- */
int64_t qkb_isa_scale_f32(const float *x, float *y, float a, int64_t begin, int64_t end, bool nt)
{
    int64_t i = begin;
#if defined(__AVX512F__)
    const __m512 va = _mm512_set1_ps(a);
    if (nt) {
        for (; i + 64 <= end; i += 64) {
            _mm512_stream_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(x + i)));
            _mm512_stream_ps(y + i + 16, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 16)));
            _mm512_stream_ps(y + i + 32, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 32)));
            _mm512_stream_ps(y + i + 48, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 48)));
        }
        _mm_sfence();
    }
    for (; i + 64 <= end; i += 64) {
        _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(x + i)));
        _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 16)));
        _mm512_storeu_ps(y + i + 32, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 32)));
        _mm512_storeu_ps(y + i + 48, _mm512_mul_ps(va, _mm512_loadu_ps(x + i + 48)));
    }
    for (; i + 16 <= end; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(x + i)));
#elif defined(__AVX2__)
    const __m256 va = _mm256_set1_ps(a);
    if (nt) {
        for (; i + 32 <= end; i += 32) {
            _mm256_stream_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
            _mm256_stream_ps(y + i + 8, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 8)));
            _mm256_stream_ps(y + i + 16, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 16)));
            _mm256_stream_ps(y + i + 24, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 24)));
        }
        _mm_sfence();
    }
    for (; i + 32 <= end; i += 32) {
        _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 8)));
        _mm256_storeu_ps(y + i + 16, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 16)));
        _mm256_storeu_ps(y + i + 24, _mm256_mul_ps(va, _mm256_loadu_ps(x + i + 24)));
    }
    for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
#else
    (void)x, (void)y, (void)a, (void)end, (void)nt;
#endif
    return i;
}

int64_t qkb_isa_sum_f32(const float *x, int64_t begin, int64_t end, float *sum)
{
    int64_t i = begin;
    float s = 0;
#if defined(__AVX512F__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 64 <= end; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= end; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float lanes[8];
    _mm256_storeu_ps(lanes, t);
    for (int k = 0; k < 8; k++) s += lanes[k];
#else
    (void)x, (void)end;
#endif
    *sum = s;
    return i;
}

/* ---- the peak of the linear kernel's instruction: PEAK_CHAINS independent accumulator
   chains per thread, all of them and the two operands in registers (16 chains on AVX2 left
   two spilled and bound the loop by store-to-load forwarding: the peak read ~40% low on
   Zen 3) ---- */
#if defined(__AVX512BF16__)
#define PEAK_NAME "vdpbf16ps"
#define PEAK_CHAINS 16 /* + 2 operands of 32 zmm */
#define PEAK_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
#define PEAK_FLOPS_PER_INSN 64 /* 16 lanes x 2 BF16 products x (mul + add) */
typedef __m512 peak_v;
static inline peak_v peak_step(peak_v acc) /* acc += a . b, pairs of BF16 */
{
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(0x3F803F80),
                            (__m512bh)_mm512_set1_epi32(0x3F003F00));
}
static inline peak_v peak_init(int i) { return _mm512_set1_ps((float)i); }
static inline float peak_sum(peak_v v) { return _mm512_reduce_add_ps(v); }
#elif defined(__FMA__) && defined(__AVX2__)
#define PEAK_NAME "vfmadd231ps"
#define PEAK_CHAINS 12 /* + 2 operands of 16 ymm; >= latency x FMA ports on current x86 */
#define PEAK_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
#define PEAK_FLOPS_PER_INSN 16 /* 8 lanes x (mul + add) */
typedef __m256 peak_v;
static inline peak_v peak_step(peak_v acc)
{
    return _mm256_fmadd_ps(_mm256_set1_ps(0.999f), acc, _mm256_set1_ps(0.5f));
}
static inline peak_v peak_init(int i) { return _mm256_set1_ps((float)i); }
static inline float peak_sum(peak_v v)
{
    float l[8];
    _mm256_storeu_ps(l, v);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
#endif


#ifdef PEAK_NAME
const char *const qkb_isa_peak_name = PEAK_NAME;
const double qkb_isa_peak_flops_per_iter = (double)PEAK_CHAINS * PEAK_FLOPS_PER_INSN;
static volatile float peak_sink;

/* the chains are named variables, not an array: gcc 12 kept an array of them on the stack
   (even unrolled), which bound the loop by store-to-load forwarding at half the
   vdpbf16ps peak on Zen 4 */
#define PEAK_DECL(i) peak_v acc##i = peak_init(i);
#define PEAK_STEP(i) acc##i = peak_step(acc##i); __asm__ volatile("" : "+x"(acc##i));
#define PEAK_SUM(i) s += peak_sum(acc##i);
void qkb_isa_peak_run(int64_t iters)
{
    PEAK_EACH(PEAK_DECL)
    for (int64_t it = 0; it < iters; it++) {
        PEAK_EACH(PEAK_STEP) /* each step happens */
    }
    float s = 0;
    PEAK_EACH(PEAK_SUM)
    peak_sink = s;
}
#else
const char *const qkb_isa_peak_name = "(none)";
const double qkb_isa_peak_flops_per_iter = 0;
void qkb_isa_peak_run(int64_t iters) { (void)iters; }
#endif

/* ---- the unfused norm path's add, residual_out = rnd(x + residual), 16-bit dtypes ---- */
#if defined(__AVX512F__)
static inline __m512 bf16x16_load(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m256i bf16x16_round(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
#elif defined(__AVX2__) && defined(__F16C__)
static inline __m256 bf16x8_load(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline __m128i bf16x8_round(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q), nan));
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
#endif


int64_t qkb_isa_add_16(qk_dtype dt, const uint16_t *x, const uint16_t *res, uint16_t *out,
                       int64_t i, int64_t end)
{
#if defined(__AVX512F__)
    if (dt == QK_DTYPE_BF16) {
        for (; i + 16 <= end; i += 16) {
            __m512 s = _mm512_add_ps(bf16x16_load(x + i), bf16x16_load(res + i));
            _mm256_storeu_si256((__m256i *)(out + i), bf16x16_round(s));
        }
    } else if (dt == QK_DTYPE_F16) {
        for (; i + 16 <= end; i += 16) {
            __m512 s = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                                     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(res + i))));
            _mm256_storeu_si256((__m256i *)(out + i),
                                _mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
#elif defined(__AVX2__) && defined(__F16C__)
    if (dt == QK_DTYPE_BF16) {
        for (; i + 8 <= end; i += 8) {
            __m256 s = _mm256_add_ps(bf16x8_load(x + i), bf16x8_load(res + i));
            _mm_storeu_si128((__m128i *)(out + i), bf16x8_round(s));
        }
    } else if (dt == QK_DTYPE_F16) {
        for (; i + 8 <= end; i += 8) {
            __m256 s = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(res + i))));
            _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT));
        }
    }
#else
    (void)dt, (void)x, (void)res, (void)out, (void)end;
#endif
    return i;
}

/* ---- F16 <-> F32, the hardware conversions a framework's composite path uses ---- */
int64_t qkb_isa_f16_to_f32(const uint16_t *x, float *y, int64_t i, int64_t e)
{
#if defined(__F16C__)
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#else
    (void)x, (void)y, (void)e;
#endif
    return i;
}

int64_t qkb_isa_f32_to_f16(const float *a, uint16_t *o, int64_t i, int64_t e)
{
#if defined(__F16C__)
    for (; i + 8 <= e; i += 8)
        _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(a + i), 0));
#else
    (void)a, (void)o, (void)e;
#endif
    return i;
}
