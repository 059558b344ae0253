/* The composite baseline of the norm protocol (performance.md): Gemma RMSNorm as a
 * framework's native path runs it, one full pass per elementary op over f32 temporaries
 * allocated per call. Plain C, compiled -O2 (see CMakeLists.txt). */
#ifndef QK_BENCH_COMPOSITE_H
#define QK_BENCH_COMPOSITE_H

#include "qkern.h"

#include <stdint.h>

/* out = (x.float() * rsqrt(mean(x.float()^2) + eps) * (1 + w.float())).to(dt);
   x and out [rows, H] of dtype dt (F16/BF16/F32), w [H] of dtype wdt. */
void qkb_composite_gemma_rms_norm(qk_dtype dt, int64_t rows, int64_t H, const void *x,
                                  qk_dtype wdt, const void *w, float eps, void *out);
/* residual_out = (x + residual) in dt (one elementwise pass), then the composite norm of
   residual_out into out. */
void qkb_composite_add_gemma_rms_norm(qk_dtype dt, int64_t rows, int64_t H, const void *x,
                                      const void *residual, qk_dtype wdt, const void *w,
                                      float eps, void *out, void *residual_out);

#endif
