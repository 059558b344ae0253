/* The reusable E4M3 vector decodes (src/x86/avx512/e4m3_avx512.h, src/x86/avx2/e4m3_avx2.h)
 * that the MXFP8 dequantize and the W8A8 linear share: every one of the 256 codes, in every
 * lane position, to F32 and to BF16, against the spec's bit-field formula evaluated here in
 * double; the _finite forms agree except on the two NaN codes (±480 there). Each ISA's part
 * is compiled for that ISA here and skipped visibly when the CPU lacks it. */
#include "harness.h"
#include "internal.h"
#include "mx_oracle.h"

#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
/* included here, outside the per-ISA regions below, so that each intrinsic keeps its own
   target (included inside a region it would inherit that region's) */
#include <immintrin.h>
#endif

static double spec_e4m3(int c) { return mxo_e4m3((uint8_t)c); } /* the tests' one decoder */

static __attribute__((unused)) float bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* got (f32 values of 256 codes, code c at index c) against the spec */
static void check_values(const char *who, const float *got, bool finite_form)
{
    for (int c = 0; c < 256; c++) {
        const double want = spec_e4m3(c);
        if (isnan(want)) {
            if (finite_form)
                CHECK(got[c] == (c & 0x80 ? -480.0f : 480.0f), "%s: NaN code 0x%02x -> %g (want ±480)",
                      who, c, (double)got[c]);
            else
                CHECK(isnan(got[c]), "%s: NaN code 0x%02x -> %g", who, c, (double)got[c]);
            continue;
        }
        CHECK((double)got[c] == want && !signbit(got[c]) == !signbit(want), "%s: code 0x%02x -> %a, want %a",
              who, c, (double)got[c], want);
    }
}

/* the 256 codes in a rotated order, so that every code visits several lane positions */
static void codes_rotated(uint8_t *out, int rot)
{
    for (int i = 0; i < 256; i++) out[i] = (uint8_t)((i * 97 + rot) & 0xff);
}

#if defined(QK_HAVE_AVX512) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#endif
#include "x86/avx512/e4m3_avx512.h"

static void decode_avx512(const uint8_t *codes, float *f32, float *f32_fin, float *bf, float *bf_fin)
{
    for (int i = 0; i < 256; i += 16) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(codes + i));
        _mm512_storeu_ps(f32 + i, qk_e4m3x16_to_f32_avx512(c));
        _mm512_storeu_ps(f32_fin + i, qk_e4m3x16_to_f32_finite_avx512(c));
    }
    for (int i = 0; i < 256; i += 32) {
        uint16_t h[32], hf[32];
        const __m256i c = _mm256_loadu_si256((const __m256i *)(codes + i));
        _mm512_storeu_si512(h, qk_e4m3x32_to_bf16_avx512(c));
        _mm512_storeu_si512(hf, qk_e4m3x32_to_bf16_finite_avx512(c));
        for (int k = 0; k < 32; k++) {
            bf[i + k] = bf16_value(h[k]);
            bf_fin[i + k] = bf16_value(hf[k]);
        }
    }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#define HAVE_AVX512_PART 1
#endif

#if defined(QK_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "x86/avx2/e4m3_avx2.h"

static void decode_avx2(const uint8_t *codes, float *f32, float *f32_fin, float *bf, float *bf_fin)
{
    for (int i = 0; i < 256; i += 8) {
        const __m128i c = _mm_loadl_epi64((const __m128i *)(codes + i));
        _mm256_storeu_ps(f32 + i, qk_e4m3x8_to_f32_avx2(c));
        _mm256_storeu_ps(f32_fin + i, qk_e4m3x8_to_f32_finite_avx2(c));
    }
    for (int i = 0; i < 256; i += 16) {
        uint16_t h[16], hf[16];
        const __m128i c = _mm_loadu_si128((const __m128i *)(codes + i));
        _mm256_storeu_si256((__m256i *)h, qk_e4m3x16_to_bf16_avx2(c));
        _mm256_storeu_si256((__m256i *)hf, qk_e4m3x16_to_bf16_finite_avx2(c));
        for (int k = 0; k < 16; k++) {
            bf[i + k] = bf16_value(h[k]);
            bf_fin[i + k] = bf16_value(hf[k]);
        }
    }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#define HAVE_AVX2_PART 1
#endif

typedef void (*decode_fn)(const uint8_t *, float *, float *, float *, float *);

static __attribute__((unused)) void check_decoder(const char *isa, decode_fn fn)
{
    for (int rot = 0; rot < 64; rot++) {
        uint8_t codes[256];
        float f32[256], f32_fin[256], bf[256], bf_fin[256];
        float by_code[4][256];
        codes_rotated(codes, rot);
        fn(codes, f32, f32_fin, bf, bf_fin);
        for (int i = 0; i < 256; i++) {
            by_code[0][codes[i]] = f32[i];
            by_code[1][codes[i]] = f32_fin[i];
            by_code[2][codes[i]] = bf[i];
            by_code[3][codes[i]] = bf_fin[i];
        }
        char who[64];
        snprintf(who, sizeof who, "%s e4m3->f32", isa);
        check_values(who, by_code[0], false);
        snprintf(who, sizeof who, "%s e4m3->f32 finite", isa);
        check_values(who, by_code[1], true);
        snprintf(who, sizeof who, "%s e4m3->bf16", isa);
        check_values(who, by_code[2], false);
        snprintf(who, sizeof who, "%s e4m3->bf16 finite", isa);
        check_values(who, by_code[3], true);
    }
}

static void test_e4m3_vector_decode_avx512(void)
{
#ifdef HAVE_AVX512_PART
    const unsigned need = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C | QK_CPU_AVX512F | QK_CPU_AVX512BW |
                          QK_CPU_AVX512VL | QK_CPU_AVX512DQ;
    if ((qk_cpu_features() & need) != need) {
        qk_test_skip("e4m3_avx512.h", "this CPU lacks AVX-512 F/BW/VL/DQ");
        return;
    }
    check_decoder("avx512", decode_avx512);
#else
    qk_test_skip("e4m3_avx512.h", "not built for this target");
#endif
}

static void test_e4m3_vector_decode_avx2(void)
{
#ifdef HAVE_AVX2_PART
    const unsigned need = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C;
    if ((qk_cpu_features() & need) != need) {
        qk_test_skip("e4m3_avx2.h", "this CPU lacks AVX2/FMA/F16C");
        return;
    }
    check_decoder("avx2", decode_avx2);
#else
    qk_test_skip("e4m3_avx2.h", "not built for this target");
#endif
}

int main(void)
{
    RUN(test_e4m3_vector_decode_avx512);
    RUN(test_e4m3_vector_decode_avx2);
    return qk_test_finish();
}
