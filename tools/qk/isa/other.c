/* qk bench's machine-limit loops on an architecture without an ISA file: none, so the
 * callers' plain C loops do all of the work and the linear bench reports no peak. */
#include "bench_isa.h"

int64_t qkb_isa_scale_f32(const float *x, float *y, float a, int64_t begin, int64_t end, bool nt)
{
    (void)x, (void)y, (void)a, (void)end, (void)nt;
    return begin;
}

int64_t qkb_isa_sum_f32(const float *x, int64_t begin, int64_t end, float *sum)
{
    (void)x, (void)end;
    *sum = 0;
    return begin;
}

int64_t qkb_isa_add_16(qk_dtype dt, const uint16_t *x, const uint16_t *res, uint16_t *out,
                       int64_t begin, int64_t end)
{
    (void)dt, (void)x, (void)res, (void)out, (void)end;
    return begin;
}

int64_t qkb_isa_f16_to_f32(const uint16_t *x, float *y, int64_t begin, int64_t end)
{
    (void)x, (void)y, (void)end;
    return begin;
}

int64_t qkb_isa_f32_to_f16(const float *x, uint16_t *y, int64_t begin, int64_t end)
{
    (void)x, (void)y, (void)end;
    return begin;
}

const char *const qkb_isa_peak_name = "(none)";
const double qkb_isa_peak_flops_per_iter = 0;
void qkb_isa_peak_run(int64_t iters) { (void)iters; }
