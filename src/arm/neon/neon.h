/* The neon provider's entry points (Armv8-A Advanced SIMD; src/arm/neon): each kernel's
 * declaration, used by its provider set and by the target tables that stage it. */
#ifndef QK_ARM_NEON_H
#define QK_ARM_NEON_H

#include "internal.h"

/* The norm impl (last field: below this many bytes moved, one thread). */
#define QK_NORM_IMPL_NEON {"neon", qk_norm_neon, 64 << 10}

QK_HIDDEN void qk_norm_neon(const qk_norm_call *c, int64_t begin, int64_t end);
QK_HIDDEN void qk_mx_quantize_row_neon(const void *x, qk_dtype xdt, int64_t K,
                                       const qk_mx_options *opt, uint8_t *q, uint8_t *scale);
QK_HIDDEN void qk_mx_dequantize_row_neon(const uint8_t *q, qk_dtype qdt, const uint8_t *scale,
                                         int64_t K, void *out, qk_dtype odt);
QK_HIDDEN extern const qk_linear_impl qk_linear_neon;   /* mxfp8_linear, f32 FMA */

#endif
