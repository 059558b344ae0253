/* The ISA seam of `qk bench`: the loops that measure the machine's limits (copy and read
 * bandwidth, the peak of the linear kernel's instruction) and the vector conversions of the
 * baselines, one file per architecture (tools/qk/isa/<arch>.c, built with the target's
 * QK_TOOL_FLAGS). Each loop does the part it can vectorise from `begin` and returns where
 * it stopped; the caller finishes the tail in plain C. */
#ifndef QK_BENCH_ISA_H
#define QK_BENCH_ISA_H

#include "qkern.h"

#include <stdbool.h>
#include <stdint.h>

/* y[i] = a * x[i] (nt: non-temporal stores where the ISA has them) */
int64_t qkb_isa_scale_f32(const float *x, float *y, float a, int64_t begin, int64_t end, bool nt);
/* *sum = the sum of x[begin, returned index) */
int64_t qkb_isa_sum_f32(const float *x, int64_t begin, int64_t end, float *sum);
/* out[i] = rnd(x[i] + res[i]) for BF16 / F16 rows (RNE, quiet NaN as the library rounds) */
int64_t qkb_isa_add_16(qk_dtype dt, const uint16_t *x, const uint16_t *res, uint16_t *out,
                       int64_t begin, int64_t end);
/* F16 <-> F32 (RNE) */
int64_t qkb_isa_f16_to_f32(const uint16_t *x, float *y, int64_t begin, int64_t end);
int64_t qkb_isa_f32_to_f16(const float *x, uint16_t *y, int64_t begin, int64_t end);

/* The peak loop: the linear kernel's instruction in independent chains on one thread.
   qkb_isa_peak_flops_per_iter is 0 where the ISA has none (the bench reports no peak). */
extern const char *const qkb_isa_peak_name;              /* "vdpbf16ps", "bfdot", ... */
extern const double qkb_isa_peak_flops_per_iter;
void qkb_isa_peak_run(int64_t iters);

#endif
