/* Reference MXFP8 W8A8 linear: mxfp8.md's formula as written. x is quantized per row with
 * the reference quantizer; each block's 32 products (exact in f32) are summed in f32, the
 * block sum is scaled by 2^(sx + sw - 254) with one rounding (ldexpf), and the scaled block
 * sums are added in groups of 16 blocks, so that every output's f32 summation depth stays
 * at most 32 + 16 + kb/16 (well inside the spec's 2^-16 relative bound). */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1 /* madvise */
#endif
#include "ref/linear_ref.h"

#include "ref/mx_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define GROUP_BLOCKS 16

/* Per-call scratch comes from a small process-wide cache of freed buffers: a serving loop
   calls the linear with the same shapes over and over, and returning megabytes to the OS
   after every call made the next call fault them in again (15% of an M = 512 call). A
   buffer carries its capacity in a 64-byte header; the cache keeps at most POOL_SLOTS
   buffers and POOL_CAP bytes, and hands out the smallest one that fits. */
#define POOL_SLOTS 16
#define POOL_CAP ((size_t)512 << 20)
#define POOL_MIN ((size_t)64 << 10)   /* smaller buffers come from malloc directly */
#define HDR 64

static struct {
    pthread_mutex_t lock;
    char *buf[POOL_SLOTS];
    size_t bytes;
} pool = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static size_t cap_of(const char *b) { size_t c; memcpy(&c, b - HDR, sizeof c); return c; }

void *qk_linear_alloc(size_t bytes)
{
    const size_t cap = (bytes + 63) & ~(size_t)63;
    if (cap >= POOL_MIN) {
        pthread_mutex_lock(&pool.lock);
        int best = -1;
        for (int i = 0; i < POOL_SLOTS; i++)
            if (pool.buf[i] && cap_of(pool.buf[i]) >= cap &&
                (best < 0 || cap_of(pool.buf[i]) < cap_of(pool.buf[best])))
                best = i;
        char *b = NULL;
        if (best >= 0) {
            b = pool.buf[best];
            pool.buf[best] = NULL;
            pool.bytes -= cap_of(b);
        }
        pthread_mutex_unlock(&pool.lock);
        if (b) return b;
    }
    char *b = (char *)aligned_alloc(64, cap + HDR);
    if (!b) return NULL;
    memcpy(b, &cap, sizeof cap);
    return b + HDR;
}

void qk_linear_free(void *p)
{
    if (!p) return;
    char *b = (char *)p;
    const size_t cap = cap_of(b);
    if (cap >= POOL_MIN && cap <= POOL_CAP) {
        pthread_mutex_lock(&pool.lock);
        int slot = -1;
        for (int i = 0; i < POOL_SLOTS && slot < 0; i++)
            if (!pool.buf[i]) slot = i;
        /* full: the smallest cached buffer makes way for a larger one */
        if (slot < 0) {
            int small = 0;
            for (int i = 1; i < POOL_SLOTS; i++)
                if (cap_of(pool.buf[i]) < cap_of(pool.buf[small])) small = i;
            if (cap_of(pool.buf[small]) < cap) {
                pool.bytes -= cap_of(pool.buf[small]);
                free(pool.buf[small] - HDR);
                pool.buf[small] = NULL;
                slot = small;
            }
        }
        /* over the cap: drop cached buffers, largest first, until this one fits */
        while (slot >= 0 && pool.bytes + cap > POOL_CAP) {
            int big = -1;
            for (int i = 0; i < POOL_SLOTS; i++)
                if (pool.buf[i] && (big < 0 || cap_of(pool.buf[i]) > cap_of(pool.buf[big]))) big = i;
            if (big < 0) break;
            pool.bytes -= cap_of(pool.buf[big]);
            free(pool.buf[big] - HDR);
            pool.buf[big] = NULL;
        }
        if (slot >= 0 && pool.bytes + cap <= POOL_CAP) {
            pool.buf[slot] = b;
            pool.bytes += cap;
            b = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
        if (!b) return;
    }
    free(b - HDR);
}

/* The cache is the library's: freed with it (dlclose of a provider library, or exit), so no
   buffer outlives the code that can hand it out. */
__attribute__((destructor)) static void pool_release(void)
{
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (pool.buf[i]) free(pool.buf[i] - HDR);
        pool.buf[i] = NULL;
    }
    pool.bytes = 0;
    pthread_mutex_unlock(&pool.lock);
}

void *qk_linear_alloc_weights(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge) return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    bytes = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) (void)madvise(p, bytes, MADV_HUGEPAGE); /* best effort: fewer TLB misses */
#endif
    return p;
}

void qk_linear_free_weights(void *p) { free(p); }

/* Fixed runs of groups / (8 x threads) left a thread idle for up to one run at the end:
   2026-12-07, Zen 5, interleaved A/B, avx512's folded kernel at M = 16 (17408, 5120) (136
   groups, runs of 8) took 0.95x the time with these runs, (4304, 1152) 0.97x, M = 8
   0.96-0.98x, M = 1..4 and 32 within 1%. */
bool qk_linear_take_groups(int64_t *next, int64_t groups, int64_t threads, int64_t *b, int64_t *e)
{
    int64_t cur = __atomic_load_n(next, __ATOMIC_RELAXED);
    for (;;) {
        if (cur >= groups) return false;
        int64_t n = (groups - cur) / (4 * threads);
        if (n < 1) n = 1;
        if (__atomic_compare_exchange_n(next, &cur, cur + n, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *b = cur;
            *e = cur + n;
            return true;
        }
    }
}

static int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

void qk_linear_act_rows(const qk_linear_call *c, qk_mx_quantize_row_fn quant, const qk_linear_act *a,
                        int64_t m0, int64_t m1)
{
    qk_mx_options opt = qk_mx_options_default();
    for (int64_t m = m0; m < m1; m++) {
        uint8_t *q = a->q + m * a->qstride, *s = a->scale + m * a->sstride;
        quant(c->x + qk_rows_offset(&c->xr, m), c->xdt, c->K, &opt, q, s);
        memset(q + c->K, 0, (size_t)(a->qstride - c->K));
        memset(s + a->kb, 0, (size_t)(a->sstride - a->kb));
    }
}

struct act_job {
    const qk_linear_call *c;
    qk_mx_quantize_row_fn quant;
    const qk_linear_act *a;
};

static void act_range(const void *ctx, int64_t begin, int64_t end)
{
    const struct act_job *j = (const struct act_job *)ctx;
    qk_linear_act_rows(j->c, j->quant, j->a, begin, end);
}

qk_status qk_linear_act_alloc(const qk_linear_call *c, int64_t qalign, int64_t salign, qk_linear_act *a)
{
    memset(a, 0, sizeof *a);
    a->M = c->M;
    a->K = c->K;
    a->kb = qk_mx_blocks(c->K);
    a->qstride = round_up(c->K, qalign);
    a->sstride = round_up(a->kb, salign);
    size_t qbytes = (size_t)round_up(a->M * a->qstride, 64);
    a->mem = qk_linear_alloc(qbytes + (size_t)(a->M * a->sstride));
    if (!a->mem) return QK_ERR_NOMEM;
    a->q = (uint8_t *)a->mem;
    a->scale = a->q + qbytes;
    return QK_OK;
}

qk_status qk_linear_act_quantize(const qk_linear_call *c, qk_mx_quantize_row_fn quant,
                                 int64_t qalign, int64_t salign, qk_linear_act *a)
{
    const qk_status st = qk_linear_act_alloc(c, qalign, salign, a);
    if (st) return st;
    struct act_job j = {c, quant ? quant : qk_mx_quantize_row_ref, a};
    qk_parallel_for(c->M, c->K * (int64_t)qk_dtype_size(c->xdt), 64 << 10, act_range, &j);
    return QK_OK;
}

void qk_linear_act_free(qk_linear_act *a)
{
    qk_linear_free(a->mem);
    a->mem = NULL;
}

/* ---- the reference provider ---- */
typedef struct ref_layout {
    uint8_t *q;       /* [N, K] */
    uint8_t *scale;   /* [N, kb] */
} ref_layout;

static qk_status ref_prepare(qk_mx_weight *w, const uint8_t *q, int64_t qs, const uint8_t *scale,
                             int64_t ss)
{
    size_t qb = (size_t)(w->N * w->K), sb = (size_t)(w->N * w->kb);
    ref_layout *l = (ref_layout *)malloc(sizeof *l);
    uint8_t *mem = (uint8_t *)qk_linear_alloc_weights(qb + sb);
    if (!l || !mem) {
        free(l);
        qk_linear_free_weights(mem);
        return QK_ERR_NOMEM;
    }
    l->q = mem;
    l->scale = mem + qb;
    for (int64_t n = 0; n < w->N; n++) {
        memcpy(l->q + n * w->K, q + n * qs, (size_t)w->K);
        memcpy(l->scale + n * w->kb, scale + n * ss, (size_t)w->kb);
    }
    w->layout = l;
    w->layout_bytes = qb + sb;
    return QK_OK;
}

static void ref_release(qk_mx_weight *w)
{
    ref_layout *l = (ref_layout *)w->layout;
    if (l) qk_linear_free_weights(l->q);
    free(l);
    w->layout = NULL;
}

struct ref_job {
    const qk_linear_call *c;
    const qk_linear_act *a;
    const ref_layout *l;
    float dec[256];
};

static void ref_range(const void *ctx, int64_t n0, int64_t n1)
{
    const struct ref_job *j = (const struct ref_job *)ctx;
    const qk_linear_call *c = j->c;
    const qk_linear_act *a = j->a;
    const int64_t K = c->K, kb = a->kb;
    for (int64_t m = 0; m < c->M; m++) {
        const uint8_t *qx = a->q + m * a->qstride, *sx = a->scale + m * a->sstride;
        char *orow = c->out + qk_rows_offset(&c->outr, m);
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *qw = j->l->q + n * K, *sw = j->l->scale + n * kb;
            float total = 0.0f, group = 0.0f;
            for (int64_t b = 0; b < kb; b++) {
                int64_t k0 = b * QK_MX_BLOCK, k1 = k0 + QK_MX_BLOCK < K ? k0 + QK_MX_BLOCK : K;
                float s = 0.0f;
                for (int64_t k = k0; k < k1; k++) s += j->dec[qx[k]] * j->dec[qw[k]];
                /* 2^(sx-127) * 2^(sw-127) applied with one rounding; a NaN scale is NaN */
                float term = (sx[b] == 0xFF || sw[b] == 0xFF)
                                 ? NAN : ldexpf(s, (int)sx[b] + (int)sw[b] - 254);
                group += term;
                if ((b + 1) % GROUP_BLOCKS == 0) {
                    total += group;
                    group = 0.0f;
                }
            }
            total += group;
            if (c->bias) total += c->bias[n];
            qk_store_f32(orow, c->odt, n, total);
        }
    }
}

static qk_status ref_run(const qk_linear_call *c)
{
    qk_linear_act a;
    qk_status st = qk_linear_act_quantize(c, qk_mx_quantize_row_ref, 1, 1, &a);
    if (st) return st;
    struct ref_job *j = (struct ref_job *)malloc(sizeof *j);
    if (!j) {
        qk_linear_act_free(&a);
        return QK_ERR_NOMEM;
    }
    j->c = c;
    j->a = &a;
    j->l = (const ref_layout *)c->w->layout;
    for (int i = 0; i < 256; i++) j->dec[i] = qk_e4m3_to_f32((uint8_t)i);
    qk_parallel_for(c->N, c->M * c->K, 1 << 18, ref_range, j);
    free(j);
    qk_linear_act_free(&a);
    return QK_OK;
}

const qk_linear_impl qk_linear_ref = {"ref", ref_prepare, ref_release, ref_run};
