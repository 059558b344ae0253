/* Reference MXFP8 provider (mxfp8.md): exact scalar codecs for the element formats E4M3 and
 * E5M2 and the scale format E8M0, the FLOOR / RCEIL shared-scale rules, and the row kernels
 * that define qk_mx_quantize / qk_mx_dequantize. Every other provider is tested bit for bit
 * against these; they may also call them for rare blocks (NaN/Inf, tiny scales). */
#ifndef QK_MX_REF_H
#define QK_MX_REF_H

#include "internal.h"

/* ---- element codecs ----
 * Decode is exact; NaN codes (E4M3 0x7F/0xFF, E5M2 exponent 31 with m != 0) give a quiet
 * NaN carrying the code's sign, E5M2 0x7C/0xFC give ±inf.
 * Encode rounds |v| to the format with `r` (ties to even, or away from zero), keeps the
 * sign (so -0.0 and negative values that round to zero give 0x80) and saturates every
 * finite magnitude above the format's max to ±max (0x7E = 448, 0x7B = 57344). Non-finite
 * inputs: NaN -> sign|0x7F (NaN in both formats); ±inf -> E5M2 ±inf (0x7C/0xFC), E4M3
 * sign|0x7F (NaN: E4M3 has no infinity, and an infinite input is not a finite one). */
QK_HIDDEN float qk_e4m3_to_f32(uint8_t c);
QK_HIDDEN float qk_e5m2_to_f32(uint8_t c);
QK_HIDDEN uint8_t qk_e4m3_from_f32(float v, qk_round r);
QK_HIDDEN uint8_t qk_e5m2_from_f32(float v, qk_round r);
/* dtype-generic forms (elem = QK_DTYPE_F8_E4M3 or QK_DTYPE_F8_E5M2) */
QK_HIDDEN float qk_f8_to_f32(uint8_t c, qk_dtype elem);
QK_HIDDEN uint8_t qk_f8_from_f32(float v, qk_dtype elem, qk_round r);

/* ---- the scale ----
 * E8M0 decode: 2^(b-127) for b = 0..254 (b = 0 is the f32 subnormal 2^-127), NaN for 0xFF. */
QK_HIDDEN float qk_e8m0_to_f32(uint8_t b);
/* The shared scale byte of a block whose largest magnitude is |amax| (mxfp8.md, "The shared
   scale of a block"): 0xFF for NaN/inf, 0x00 for zero, else FLOOR or RCEIL for elem's
   format. The sign of amax is ignored. */
QK_HIDDEN uint8_t qk_e8m0_scale(float amax, qk_mx_scale_rule rule, qk_dtype elem);
/* The same for input of dtype xdt, which the MODELSLIM rule depends on: FLOOR plus one where
   log2(amax), rounded to f32 and then (RNE) to xdt, reaches the next integer; a NaN/Inf amax
   gives 0x00 under MODELSLIM (the block's elements are 0xFF). */
QK_HIDDEN uint8_t qk_e8m0_scale_x(float amax, qk_mx_scale_rule rule, qk_dtype elem, qk_dtype xdt);
/* MODELSLIM for BF16 / F16 input: 256 thresholds indexed by the f32 exponent field of amax;
   the rule adds one to FLOOR's exponent exactly when amax's f32 bits >= the entry (0x7FFFFFFF:
   never, above every finite amax, so signed compares work too). NULL for F32 input (MODELSLIM = FLOOR). Built once, thread-safe. */
QK_HIDDEN const uint32_t *qk_mx_modelslim_thresholds(qk_dtype xdt);
/* MODELSLIM's NaN/Inf block convention for providers that computed the FLOOR one: every
   block with scale 0xFF gets scale 0x00 and elements 0xFF. */
QK_HIDDEN void qk_mx_modelslim_nan_blocks(uint8_t *q, uint8_t *scale, int64_t K);

/* ---- row kernels (the signatures of internal.h's qk_mx_*_row_fn) ----
 * opt may be NULL (the defaults). */
QK_HIDDEN void qk_mx_quantize_row_ref(const void *x, qk_dtype xdt, int64_t K,
                                      const qk_mx_options *opt, uint8_t *q, uint8_t *scale);
/* Dequantize: dec(q) * 2^(b-127) in f32, rounded (RNE) to odt. A NaN code or a 0xFF scale
   gives the canonical quiet NaN (F32 0x7FC00000, F16 0x7E00, BF16 0x7FC0) so that every
   provider's output is bit-identical. */
QK_HIDDEN void qk_mx_dequantize_row_ref(const uint8_t *q, qk_dtype qdt, const uint8_t *scale,
                                        int64_t K, void *out, qk_dtype odt);

/* Encodes the n (<= 32) elements x[0..n) of one block with the already computed scale byte
   b (0xFF: every element becomes 0x7F). Vector providers use it for the blocks they leave
   to scalar code. */
QK_HIDDEN void qk_mx_quantize_block_ref(const void *x, qk_dtype xdt, int64_t n,
                                        const qk_mx_options *opt, uint8_t b, uint8_t *q);
/* One row of qk_mx_pack_scale_pairs: packed[2j+t] = scale[2j+t], and 0x00 for the missing
   second byte of the last pair when kb is odd. */
QK_HIDDEN void qk_mx_pack_scale_pairs_row_ref(const uint8_t *scale, int64_t kb, uint8_t *packed);

#endif
