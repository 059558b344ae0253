/* The composite Gemma RMSNorm baseline: the sequence of full passes a framework's native
 * path runs (x.float(); pow(2); mean(-1); + eps; rsqrt; x * r; w.float(); 1 + w; * (1 + w);
 * .to(dtype)), each over freshly allocated f32 temporaries and split across the library's
 * threads once it has 32768 elements, as a framework's parallel_for does. */
#define _DEFAULT_SOURCE /* mallopt */
#include "bench_composite.h"
#include "isa/bench_isa.h"

#include "internal.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define GRAIN 32768 /* elements below which a pass runs on one thread */
#define VEC 16       /* elements per chunk: fixed-count inner loops, which -O2 vectorises */

/* ---- dtype conversion passes (the hardware conversions a framework uses) ---- */
static void upcast(const void *src, qk_dtype dt, float *restrict y, int64_t b, int64_t e)
{
    int64_t i = b;
    if (dt == QK_DTYPE_BF16) {
        const uint16_t *restrict x = (const uint16_t *)src;
        for (; i + VEC <= e; i += VEC)
            for (int l = 0; l < VEC; l++) {
                uint32_t u = (uint32_t)x[i + l] << 16;
                memcpy(&y[i + l], &u, 4);
            }
    }
    if (dt == QK_DTYPE_F16) i = qkb_isa_f16_to_f32((const uint16_t *)src, y, i, e);
    for (; i < e; i++) y[i] = qk_load_f32(src, dt, i);
}

static void downcast(const float *restrict a, qk_dtype dt, void *dst, int64_t b, int64_t e)
{
    int64_t i = b;
    if (dt == QK_DTYPE_BF16) {
        /* round to nearest even on the bits, NaN kept quiet: branch-free, so it vectorises */
        uint16_t *restrict o = (uint16_t *)dst;
        for (; i + VEC <= e; i += VEC)
            for (int l = 0; l < VEC; l++) {
                uint32_t u;
                memcpy(&u, &a[i + l], 4);
                const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
                const uint32_t q = (u >> 16) | 0x40u;
                o[i + l] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
            }
    }
    if (dt == QK_DTYPE_F16) i = qkb_isa_f32_to_f16(a, (uint16_t *)dst, i, e);
    for (; i < e; i++) qk_store_f32(dst, dt, i, a[i]);
}

/* ---- arithmetic passes: plain C over fixed-size chunks, then the tail ---- */
static void square(const float *restrict a, float *restrict y, int64_t b, int64_t e)
{
    int64_t i = b;
    for (; i + VEC <= e; i += VEC)
        for (int l = 0; l < VEC; l++) y[i + l] = a[i + l] * a[i + l];
    for (; i < e; i++) y[i] = a[i] * a[i];
}

/* a framework's reduction keeps VEC partial sums; so does this one */
static float row_mean(const float *restrict row, int64_t H)
{
    float s[VEC] = {0};
    int64_t k = 0;
    for (; k + VEC <= H; k += VEC)
        for (int l = 0; l < VEC; l++) s[l] += row[k + l];
    for (; k < H; k++) s[0] += row[k];
    for (int w = VEC / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) s[l] += s[l + w];
    return s[0] / (float)H;
}

/* y = a * r[row]: a per-row scalar broadcast over the row */
static void mul_row(const float *restrict a, const float *restrict r, int64_t H,
                    float *restrict y, int64_t b, int64_t e)
{
    for (int64_t i = b; i < e;) {
        const int64_t row = i / H, row_end = (row + 1) * H < e ? (row + 1) * H : e;
        const float rv = r[row];
        for (; i + VEC <= row_end; i += VEC)
            for (int l = 0; l < VEC; l++) y[i + l] = a[i + l] * rv;
        for (; i < row_end; i++) y[i] = a[i] * rv;
    }
}

/* y = a * w[col]: a row vector broadcast over the rows */
static void mul_col(const float *restrict a, const float *restrict w, int64_t H,
                    float *restrict y, int64_t b, int64_t e)
{
    for (int64_t i = b; i < e;) {
        const int64_t row = i / H, row_end = (row + 1) * H < e ? (row + 1) * H : e;
        const float *wr = w + (i - row * H);
        int64_t k = 0, n = row_end - i;
        for (; k + VEC <= n; k += VEC)
            for (int l = 0; l < VEC; l++) y[i + k + l] = a[i + k + l] * wr[k + l];
        for (; k < n; k++) y[i + k] = a[i + k] * wr[k];
        i = row_end;
    }
}

typedef enum pass_kind {
    P_ADD,        /* s = (x + res).to(dt), one elementwise kernel */
    P_UPCAST,     /* a = x.float() */
    P_SQUARE,     /* b = a * a */
    P_MEAN,       /* v[r] = mean(b[r, :]) (items are rows) */
    P_ADD_EPS,    /* v = v + eps (rows) */
    P_RSQRT,      /* v = 1 / sqrt(v) (rows) */
    P_MUL_ROW,    /* c = a * v[row] */
    P_ONE_PLUS,   /* w1 = 1 + wf */
    P_MUL_COL,    /* d = c * w1[col] */
    P_DOWNCAST,   /* out = d.to(dt) */
} pass_kind;

typedef struct pass {
    pass_kind kind;
    qk_dtype dt;
    int64_t H;
    float eps;
    const void *src, *src2;
    const float *a, *b;
    float *y;
    void *out;
} pass;

static void pass_range(const void *ctx, int64_t begin, int64_t end)
{
    const pass *p = (const pass *)ctx;
    switch (p->kind) {
    case P_ADD: {
        /* upcast both, add, round: through a small stack block, as a framework's
           elementwise kernel does in registers */
        float xa[256], xb[256];
        for (int64_t i = begin; i < end; i += 256) {
            const int64_t e = i + 256 < end ? i + 256 : end;
            upcast((const char *)p->src + i * (int64_t)qk_dtype_size(p->dt), p->dt, xa, 0, e - i);
            upcast((const char *)p->src2 + i * (int64_t)qk_dtype_size(p->dt), p->dt, xb, 0, e - i);
            for (int64_t k = 0; k < e - i; k++) xa[k] += xb[k];
            downcast(xa, p->dt, (char *)p->out + i * (int64_t)qk_dtype_size(p->dt), 0, e - i);
        }
        break;
    }
    case P_UPCAST: upcast(p->src, p->dt, p->y, begin, end); break;
    case P_SQUARE: square(p->a, p->y, begin, end); break;
    case P_MEAN:
        for (int64_t r = begin; r < end; r++) p->y[r] = row_mean(p->a + r * p->H, p->H);
        break;
    case P_ADD_EPS:
        for (int64_t r = begin; r < end; r++) p->y[r] = p->a[r] + p->eps;
        break;
    case P_RSQRT:
        for (int64_t r = begin; r < end; r++) p->y[r] = 1.0f / sqrtf(p->a[r]);
        break;
    case P_MUL_ROW: mul_row(p->a, p->b, p->H, p->y, begin, end); break;
    case P_ONE_PLUS:
        for (int64_t i = begin; i < end; i++) p->y[i] = 1.0f + p->a[i];
        break;
    case P_MUL_COL: mul_col(p->a, p->b, p->H, p->y, begin, end); break;
    case P_DOWNCAST: downcast(p->a, p->dt, p->out, begin, end); break;
    }
}

/* Runs one pass over n items (elements, or rows of H elements for the row passes). */
static void run(pass p, int64_t n, int64_t elems_per_item)
{
    qk_parallel_for(n, elems_per_item, GRAIN, pass_range, &p);
}

/* Per-call f32 temporaries. Left alone, glibc hands these pages back to the kernel after
   every call (it trims the heap and maps big blocks afresh) and faults them in again on the
   next, which costs more than the passes; a framework's allocator keeps them, and with
   these thresholds so does this process. */
static float *tmp(int64_t n)
{
    static int tuned;
    if (!tuned) {
        mallopt(M_MMAP_THRESHOLD, 512 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        tuned = 1;
    }
    float *t = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!t) {
        fprintf(stderr, "qk bench: out of memory in the composite baseline\n");
        exit(1);
    }
    return t;
}

void qkb_composite_gemma_rms_norm(qk_dtype dt, int64_t rows, int64_t H, const void *x,
                                  qk_dtype wdt, const void *w, float eps, void *out)
{
    const int64_t n = rows * H;
    float *a = tmp(n), *b = tmp(n), *v = tmp(rows), *v2 = tmp(rows), *r = tmp(rows);
    run((pass){.kind = P_UPCAST, .dt = dt, .src = x, .y = a}, n, 1);
    run((pass){.kind = P_SQUARE, .a = a, .y = b}, n, 1);
    run((pass){.kind = P_MEAN, .H = H, .a = b, .y = v}, rows, H);
    free(b);
    run((pass){.kind = P_ADD_EPS, .eps = eps, .a = v, .y = v2}, rows, 1);
    run((pass){.kind = P_RSQRT, .a = v2, .y = r}, rows, 1);
    float *c = tmp(n);
    run((pass){.kind = P_MUL_ROW, .H = H, .a = a, .b = r, .y = c}, n, 1);
    free(a);
    float *wf = tmp(H), *w1 = tmp(H);
    run((pass){.kind = P_UPCAST, .dt = wdt, .src = w, .y = wf}, H, 1);
    run((pass){.kind = P_ONE_PLUS, .a = wf, .y = w1}, H, 1);
    float *d = tmp(n);
    run((pass){.kind = P_MUL_COL, .H = H, .a = c, .b = w1, .y = d}, n, 1);
    free(c);
    run((pass){.kind = P_DOWNCAST, .dt = dt, .a = d, .out = out}, n, 1);
    free(d);
    free(wf);
    free(w1);
    free(v);
    free(v2);
    free(r);
}

void qkb_composite_add_gemma_rms_norm(qk_dtype dt, int64_t rows, int64_t H, const void *x,
                                      const void *residual, qk_dtype wdt, const void *w,
                                      float eps, void *out, void *residual_out)
{
    run((pass){.kind = P_ADD, .dt = dt, .src = x, .src2 = residual, .out = residual_out},
        rows * H, 1);
    qkb_composite_gemma_rms_norm(dt, rows, H, residual_out, wdt, w, eps, out);
}
