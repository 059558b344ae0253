/* Reference provider for the RMSNorm family: the definition of norm.md in plain C.
 * Sum of squares in double; r = 1/sqrt(mean + eps) in double, rounded to f32; the output
 * product x * r * w' in f32 (w' = w, or 1 + w formed in f32 for the Gemma forms). */
#include "internal.h"
#include "ref/ref.h"

#include <math.h>

static float silu_f32(float g) { return g / (1.0f + expf(-g)); }

void qk_norm_ref(const qk_norm_call *c, int64_t begin, int64_t end)
{
    const int64_t H = c->H;
    const bool gemma = c->kind == QK_NORM_GEMMA || c->kind == QK_NORM_ADD_GEMMA;
    const bool add = c->kind == QK_NORM_ADD_RMS || c->kind == QK_NORM_ADD_GEMMA;
    for (int64_t i = begin; i < end; i++) {
        const void *x = c->x + qk_rows_offset(&c->xr, i);
        void *out = c->out + qk_rows_offset(&c->outr, i);
        const void *src = x; /* the row that is normalised */
        if (add) {
            const void *res = c->res + qk_rows_offset(&c->rr, i);
            void *res_out = c->res_out + qk_rows_offset(&c->ror, i);
            for (int64_t k = 0; k < H; k++)
                qk_store_f32(res_out, c->xdt, k,
                             qk_load_f32(x, c->xdt, k) + qk_load_f32(res, c->xdt, k));
            src = res_out;
        }
        double ss = 0.0;
        for (int64_t k = 0; k < H; k++) {
            double v = qk_load_f32(src, c->xdt, k);
            ss += v * v;
        }
        const float r = (float)(1.0 / sqrt(ss / (double)H + (double)c->eps));
        if (c->rstd) *(float *)(c->rstd + qk_rows_offset(&c->rsr, i)) = r;
        const void *gate = c->gate ? c->gate + qk_rows_offset(&c->gr, i) : NULL;
        for (int64_t k = 0; k < H; k++) {
            float w = qk_load_f32(c->w, c->wdt, k);
            if (gemma) w = 1.0f + w;
            float v = qk_load_f32(src, c->xdt, k) * r * w;
            if (gate) v *= silu_f32(qk_load_f32(gate, c->gdt, k));
            qk_store_f32(out, c->xdt, k, v);
        }
    }
}
