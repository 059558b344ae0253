/* E4M3 -> F32 / BF16 vector decode, AVX-512 (F, BW): exact (every E4M3 value is an f32 and a
 * bf16), shared by the MXFP8 dequantize and the W8A8 linear kernels. Normal codes are a shift
 * and an exponent rebias; the 7 subnormal codes (m * 2^-9) come from a small permute table.
 *   qk_e4m3x16_to_f32_avx512(16 codes)  -> 16 f32
 *   qk_e4m3x32_to_bf16_avx512(32 codes) -> 32 bf16 bit patterns in 16-bit lanes
 * The plain forms give a quiet NaN for the NaN codes 0x7F / 0xFF. The _finite forms skip that
 * step, for codes known not to be NaN (a validated qk_mx_weight, or activations whose NaN
 * blocks are recognised by their 0xFF scale); a NaN code then decodes as ±480. */
#ifndef QK_E4M3_AVX512_H
#define QK_E4M3_AVX512_H

#include <immintrin.h>

static inline __m512 qk_e4m3x16_to_f32_finite_avx512(__m128i codes)
{
    const __m512i c = _mm512_cvtepu8_epi32(codes);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
    /* normal: exponent field e (1..15) -> e + 120, mantissa to the top of f32's */
    __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    /* subnormal m * 2^-9, m = 0..7 (permutexvar uses the low 4 bits of the index) */
    const __m512i sub = _mm512_setr_epi32(0, 0x3b000000, 0x3b800000, 0x3bc00000, 0x3c000000,
                                          0x3c200000, 0x3c400000, 0x3c600000, 0, 0, 0, 0, 0, 0, 0, 0);
    bits = _mm512_mask_permutexvar_epi32(bits, _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(8)),
                                         mag, sub);
    /* sign: bit 7 of the code -> bit 31 */
    bits = _mm512_ternarylogic_epi32(bits, _mm512_slli_epi32(c, 24),
                                     _mm512_set1_epi32((int)0x80000000u), 0xf8);
    return _mm512_castsi512_ps(bits);
}

static inline __m512 qk_e4m3x16_to_f32_avx512(__m128i codes)
{
    const __m512 v = qk_e4m3x16_to_f32_finite_avx512(codes);
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(
        _mm512_and_si512(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(v), nan, _mm512_castps_si512(v),
                                                    _mm512_set1_epi32(0x7fc00000)));
}

static inline __m512i qk_e4m3x32_to_bf16_finite_avx512(__m256i codes)
{
    const __m512i c = _mm512_cvtepu8_epi16(codes);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi16(0x7f));
    __m512i bits = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
    const __m512i sub = _mm512_setr_epi32(0x3b000000, 0x3bc03b80, 0x3c203c00, 0x3c603c40, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 0);
    bits = _mm512_mask_permutexvar_epi16(bits, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)),
                                         mag, sub);
    return _mm512_ternarylogic_epi32(bits, _mm512_slli_epi16(c, 8), _mm512_set1_epi16((short)0x8000),
                                     0xf8);
}

static inline __m512i qk_e4m3x32_to_bf16_avx512(__m256i codes)
{
    const __m512i v = qk_e4m3x32_to_bf16_finite_avx512(codes);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(
        _mm512_and_si512(_mm512_cvtepu8_epi16(codes), _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7f));
    return _mm512_mask_mov_epi16(v, nan, _mm512_or_si512(v, _mm512_set1_epi16(0x7fc0)));
}

#endif
