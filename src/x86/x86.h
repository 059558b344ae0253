/* x86 providers: the entry points each ISA folder exports (src/x86/avx2, src/x86/avx512). */
#ifndef QK_X86_H
#define QK_X86_H

#include "internal.h"

#ifdef QK_HAVE_AVX2
QK_HIDDEN void qk_norm_avx2(const qk_norm_call *c, int64_t begin, int64_t end);
QK_HIDDEN extern const qk_linear_impl qk_linear_avx2;     /* mxfp8_linear, f32 FMA */
QK_HIDDEN void qk_mx_quantize_row_avx2(const void *x, qk_dtype xdt, int64_t K, const qk_mx_options *opt,
                                       uint8_t *q, uint8_t *scale);
QK_HIDDEN void qk_mx_dequantize_row_avx2(const uint8_t *q, qk_dtype qdt, const uint8_t *scale,
                                         int64_t K, void *out, qk_dtype odt);
#endif
#ifdef QK_HAVE_AVX512
QK_HIDDEN void qk_norm_avx512(const qk_norm_call *c, int64_t begin, int64_t end);
QK_HIDDEN extern const qk_linear_impl qk_linear_avx512;   /* mxfp8_linear, vdpbf16ps */
QK_HIDDEN void qk_mx_quantize_row_avx512(const void *x, qk_dtype xdt, int64_t K,
                                         const qk_mx_options *opt, uint8_t *q, uint8_t *scale);
QK_HIDDEN void qk_mx_dequantize_row_avx512(const uint8_t *q, qk_dtype qdt, const uint8_t *scale,
                                           int64_t K, void *out, qk_dtype odt);
#endif

#endif
