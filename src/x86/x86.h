/* x86 providers: the entry points each ISA folder exports (src/x86/avx2, src/x86/avx512). */
#ifndef QK_X86_H
#define QK_X86_H

#include "internal.h"

/* Each norm provider's impl, used by its provider set and by the target tables that stage it,
   so `qk bench` times what the API runs. The last field: below this many bytes moved, one
   thread. avx2: 32 KiB, measured on Zen 3 (2026-12-02), where an OpenMP fork/join costs
   ~0.9 us and 2 threads ran gemma_rms_norm 16 x 2048 1.1-1.4x, 128 x 256 1.3-1.5x and
   2 x 5120 1.2-1.45x faster than 1 (F16 and BF16, p50 of 1000 calls, two builds in turns),
   16 x 1024 (64 KiB) up to 1.2x; 16 x 256 (16 KiB) stays on one thread. It was 256 KiB, the
   avx512 figure from Zen 5, which stays. */
#define QK_NORM_IMPL_AVX2 {"avx2", qk_norm_avx2, 32 << 10}
#define QK_NORM_IMPL_AVX512 {"avx512", qk_norm_avx512, 256 << 10}

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
