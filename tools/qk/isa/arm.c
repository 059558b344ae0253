/* qk bench's machine-limit loops on aarch64 (the contract: bench_isa.h): Advanced SIMD, and
 * for the peak the linear kernel's instruction, BFDOT where the target has FEAT_BF16
 * (QK_TOOL_FLAGS: -march=...+bf16) and FMLA otherwise. */
#include "bench_isa.h"

#include <arm_neon.h>

/* ---- bandwidth kernels (aarch64 has no non-temporal vector store worth the name here:
   STNP is a hint most cores treat as a plain store, so nt changes nothing) ---- */
int64_t qkb_isa_scale_f32(const float *x, float *y, float a, int64_t begin, int64_t end, bool nt)
{
    (void)nt;
    int64_t i = begin;
    const float32x4_t va = vdupq_n_f32(a);
    for (; i + 16 <= end; i += 16) {
        vst1q_f32(y + i, vmulq_f32(va, vld1q_f32(x + i)));
        vst1q_f32(y + i + 4, vmulq_f32(va, vld1q_f32(x + i + 4)));
        vst1q_f32(y + i + 8, vmulq_f32(va, vld1q_f32(x + i + 8)));
        vst1q_f32(y + i + 12, vmulq_f32(va, vld1q_f32(x + i + 12)));
    }
    return i;
}

int64_t qkb_isa_sum_f32(const float *x, int64_t begin, int64_t end, float *sum)
{
    int64_t i = begin;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 16 <= end; i += 16) {
        a0 = vaddq_f32(a0, vld1q_f32(x + i));
        a1 = vaddq_f32(a1, vld1q_f32(x + i + 4));
        a2 = vaddq_f32(a2, vld1q_f32(x + i + 8));
        a3 = vaddq_f32(a3, vld1q_f32(x + i + 12));
    }
    *sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    return i;
}

/* ---- the unfused norm path's add, 16-bit dtypes ---- */
static inline uint16x4_t bf16x4_round(float32x4_t v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
    const uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    const uint32x4_t ordered = vceqq_f32(v, v);   /* false for NaN: keep it quiet */
    return vmovn_u32(vbslq_u32(ordered, r, q));
}

static inline float32x4_t bf16x4_load(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

int64_t qkb_isa_add_16(qk_dtype dt, const uint16_t *x, const uint16_t *res, uint16_t *out,
                       int64_t i, int64_t end)
{
    if (dt == QK_DTYPE_BF16) {
        for (; i + 4 <= end; i += 4)
            vst1_u16(out + i, bf16x4_round(vaddq_f32(bf16x4_load(x + i), bf16x4_load(res + i))));
    } else if (dt == QK_DTYPE_F16) {
        for (; i + 4 <= end; i += 4) {
            const float32x4_t s = vaddq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))),
                                            vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(res + i))));
            vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(s)));
        }
    }
    return i;
}

/* ---- F16 <-> F32 (FCVTL / FCVTN, round to nearest even) ---- */
int64_t qkb_isa_f16_to_f32(const uint16_t *x, float *y, int64_t i, int64_t e)
{
    for (; i + 4 <= e; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
    return i;
}

int64_t qkb_isa_f32_to_f16(const float *a, uint16_t *o, int64_t i, int64_t e)
{
    for (; i + 4 <= e; i += 4) vst1_u16(o + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(a + i))));
    return i;
}

/* ---- the peak: 16 independent accumulator chains (latency 4 x up to 4 SIMD pipes) ---- */
#define PEAK_CHAINS 16
#define PEAK_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
static volatile float peak_sink;
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
const char *const qkb_isa_peak_name = "bfdot";
const double qkb_isa_peak_flops_per_iter = PEAK_CHAINS * 16.0; /* 4 lanes x 2 products x 2 */
static inline float32x4_t peak_step(float32x4_t acc, bfloat16x8_t a, bfloat16x8_t b)
{
    return vbfdotq_f32(acc, a, b);
}
/* (the constants pass through an empty asm: gcc 12 would otherwise materialise them with an
   FP16 fmov, which -march=...+bf16 alone does not allow) */
#define PEAK_OPERANDS                                                                          \
    uint32x4_t ua = vdupq_n_u32(0x3F803F80u), ub = vdupq_n_u32(0x3F003F00u); /* 1.0, 0.5 */     \
    __asm__("" : "+w"(ua), "+w"(ub));                                                          \
    const bfloat16x8_t a = vreinterpretq_bf16_u32(ua), b = vreinterpretq_bf16_u32(ub);
#else
const char *const qkb_isa_peak_name = "fmla";
const double qkb_isa_peak_flops_per_iter = PEAK_CHAINS * 8.0;  /* 4 lanes x (mul + add) */
static inline float32x4_t peak_step(float32x4_t acc, float32x4_t a, float32x4_t b)
{
    return vfmaq_f32(b, a, acc);
}
#define PEAK_OPERANDS                                                                          \
    const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(0.5f);
#endif

/* the chains are named variables, not an array, so they stay in registers (see x86.c) */
#define PEAK_DECL(i) float32x4_t acc##i = vdupq_n_f32((float)(i));
#define PEAK_STEP(i) acc##i = peak_step(acc##i, a, b); __asm__ volatile("" : "+w"(acc##i));
#define PEAK_SUM(i) s += vaddvq_f32(acc##i);
void qkb_isa_peak_run(int64_t iters)
{
    PEAK_OPERANDS
    PEAK_EACH(PEAK_DECL)
    for (int64_t it = 0; it < iters; it++) {
        PEAK_EACH(PEAK_STEP) /* each step happens */
    }
    float s = 0;
    PEAK_EACH(PEAK_SUM)
    peak_sink = s;
}
