/* E4M3 -> F32 / BF16 vector decode, AVX2: exact (every E4M3 value is an f32 and a bf16),
 * shared by the MXFP8 dequantize and the W8A8 linear kernels. Normal codes are a shift and
 * an exponent rebias; the 7 subnormal codes (m * 2^-9) come from a small table.
 *   qk_e4m3x8_to_f32_avx2(low 8 bytes of codes) -> 8 f32
 *   qk_e4m3x16_to_bf16_avx2(16 codes)           -> 16 bf16 bit patterns in 16-bit lanes
 * The plain forms give a quiet NaN for the NaN codes 0x7F / 0xFF; the _finite forms skip
 * that step for codes known not to be NaN (a NaN code then decodes as ±480). */
#ifndef QK_E4M3_AVX2_H
#define QK_E4M3_AVX2_H

#include <immintrin.h>

static inline __m256 qk_e4m3x8_to_f32_finite_avx2(__m128i codes)
{
    const __m256i c = _mm256_cvtepu8_epi32(codes);
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
    __m256i bits = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    const __m256i sub = _mm256_permutevar8x32_epi32(
        _mm256_setr_epi32(0, 0x3b000000, 0x3b800000, 0x3bc00000, 0x3c000000, 0x3c200000, 0x3c400000,
                          0x3c600000),
        mag);
    bits = _mm256_blendv_epi8(bits, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
    bits = _mm256_or_si256(bits, _mm256_and_si256(_mm256_slli_epi32(c, 24),
                                                  _mm256_set1_epi32((int)0x80000000u)));
    return _mm256_castsi256_ps(bits);
}

static inline __m256 qk_e4m3x8_to_f32_avx2(__m128i codes)
{
    const __m256i v = _mm256_castps_si256(qk_e4m3x8_to_f32_finite_avx2(codes));
    const __m256i mag = _mm256_and_si256(_mm256_cvtepu8_epi32(codes), _mm256_set1_epi32(0x7f));
    const __m256i nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
    return _mm256_castsi256_ps(
        _mm256_or_si256(v, _mm256_and_si256(nan, _mm256_set1_epi32(0x7fc00000))));
}

static inline __m256i qk_e4m3x16_to_bf16_finite_avx2(__m128i codes)
{
    const __m256i c = _mm256_cvtepu8_epi16(codes);
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7f));
    __m256i bits = _mm256_add_epi16(_mm256_slli_epi16(mag, 4), _mm256_set1_epi16(120 << 7));
    /* subnormal m * 2^-9 as bf16: low and high bytes looked up separately (the index's high
       byte is 0 and both tables hold 0 at index 0) */
    const __m256i lo_tab = _mm256_setr_epi8(0, 0, (char)0x80, (char)0xc0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, (char)0x80, (char)0xc0, 0, 0x20, 0x40,
                                            0x60, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i hi_tab = _mm256_setr_epi8(0, 0x3b, 0x3b, 0x3b, 0x3c, 0x3c, 0x3c, 0x3c, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0x3b, 0x3b, 0x3b, 0x3c, 0x3c, 0x3c, 0x3c, 0, 0, 0,
                                            0, 0, 0, 0, 0);
    const __m256i sub = _mm256_or_si256(_mm256_shuffle_epi8(lo_tab, mag),
                                        _mm256_slli_epi16(_mm256_shuffle_epi8(hi_tab, mag), 8));
    bits = _mm256_blendv_epi8(bits, sub, _mm256_cmpgt_epi16(_mm256_set1_epi16(8), mag));
    return _mm256_or_si256(bits, _mm256_and_si256(_mm256_slli_epi16(c, 8),
                                                  _mm256_set1_epi16((short)0x8000)));
}

static inline __m256i qk_e4m3x16_to_bf16_avx2(__m128i codes)
{
    const __m256i v = qk_e4m3x16_to_bf16_finite_avx2(codes);
    const __m256i mag = _mm256_and_si256(_mm256_cvtepu8_epi16(codes), _mm256_set1_epi16(0x7f));
    const __m256i nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f));
    return _mm256_or_si256(v, _mm256_and_si256(nan, _mm256_set1_epi16(0x7fc0)));
}

#endif
