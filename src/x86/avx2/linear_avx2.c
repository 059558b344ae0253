/* AVX2 + FMA MXFP8 W8A8 linear: mxfp8_linear_avx2_f32fma.
 *
 * Prepared weight (about 1.03 bytes per element): tiles of 8 rows (one f32 lane per row);
 * per tile, super-blocks of 4 blocks (128 K): 32 bytes of scales (block i's 8 row scales at
 * 8i) then 4 x 256 bytes of codes, k-major (byte 8k + r is row r's element k). K is padded
 * with zero codes to a multiple of 128 and N with zero rows to a multiple of 8.
 *
 * Decode: E4M3 -> f32 by shifts and a mask gives dec(w)·2^-120 exactly for every code
 * (subnormal codes become f32 subnormals, which FMA reads exactly); x is decoded to f32
 * dec(qx)·2^64, so every product is exact and normal. Each block is summed by FMA into a
 * fresh accumulator, scaled by 2^(sx + sw - 254) (offsets folded in) and rounded once to f32
 * (one f32 multiply when every 2^e of the row is a normal f32, checked per row of x against
 * the weight's scale-byte range; in double otherwise: the same bits), and added to a running
 * sum flushed into the total every 16 blocks: summation depth below 32 + 16 + kb/16, inside
 * mxfp8.md's 2^-16 bound; padded blocks are not run. M <= 4: the rows in one pass over the
 * weight, decoding as it goes (4 tiles per pass for M <= 2, 2 otherwise). M > 4: each block
 * of a work item's 8 tiles is decoded once into f32 panels and used by every row (4 rows x 3
 * tiles per register tile, x packed k-major per 4 rows), with the same per-block sums and
 * scalings in the same order, so a row's outputs depend neither on M nor on the thread
 * split. */
#include "internal.h"
#include "ref/linear_ref.h"
#include "ref/mx_ref.h"
#include "x86/x86.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#define TILE 8
#define SB_BLOCKS 4
#define SB_BYTES (32 + SB_BLOCKS * 256)
#define X_EXP 64
#define PURE_EXP (-120)
#define GROUP_BLOCKS 16
#define MAX_M 4
#define MAX_TT 4 /* tiles per pass of the small-M kernel */

#define INLINE static inline __attribute__((always_inline))

typedef struct avx2_layout {
    int64_t tiles, kbp, tile_bytes;
    int sw_lo, sw_hi;   /* range of the real blocks' scale bytes */
    float xdec[256];    /* E4M3 code -> dec(code)·2^X_EXP, x's decode (made once, here) */
    uint8_t *codes;     /* [tiles][kbp / 4] super-blocks */
} avx2_layout;

static qk_status avx2_prepare(qk_mx_weight *w, const uint8_t *q, int64_t qs, const uint8_t *scale,
                              int64_t ss)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    avx2_layout *l = (avx2_layout *)calloc(1, sizeof *l);
    if (!l) return QK_ERR_NOMEM;
    l->tiles = (N + TILE - 1) / TILE;
    l->kbp = (kb + SB_BLOCKS - 1) / SB_BLOCKS * SB_BLOCKS;
    l->tile_bytes = l->kbp / SB_BLOCKS * SB_BYTES;
    size_t cb = (size_t)(l->tiles * l->tile_bytes);
    l->codes = (uint8_t *)qk_linear_alloc_weights(cb);
    if (!l->codes) {
        free(l);
        return QK_ERR_NOMEM;
    }
    memset(l->codes, 0, cb);
    l->sw_lo = 255;
    l->sw_hi = 0;
    for (int i = 0; i < 256; i++) l->xdec[i] = ldexpf(qk_e4m3_to_f32((uint8_t)i), X_EXP);
    for (int64_t n = 0; n < N; n++) {
        uint8_t *tile = l->codes + (n / TILE) * l->tile_bytes;
        const int64_t r = n % TILE;
        for (int64_t b = 0; b < kb; b++) {
            uint8_t *sb = tile + (b / SB_BLOCKS) * SB_BYTES;
            const int64_t i = b % SB_BLOCKS;
            const int sv = scale[n * ss + b];
            sb[8 * i + r] = (uint8_t)sv;
            l->sw_lo = sv < l->sw_lo ? sv : l->sw_lo;
            l->sw_hi = sv > l->sw_hi ? sv : l->sw_hi;
            uint8_t *blk = sb + 32 + i * 256;
            const int64_t k0 = b * QK_MX_BLOCK, kn = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
            for (int64_t kk = 0; kk < kn; kk++) blk[8 * kk + r] = q[n * qs + k0 + kk];
        }
    }
    w->layout = l;
    w->layout_bytes = cb;
    return QK_OK;
}

static void avx2_release(qk_mx_weight *w)
{
    avx2_layout *l = (avx2_layout *)w->layout;
    if (l) qk_linear_free_weights(l->codes);
    free(l);
    w->layout = NULL;
}

/* 8 codes -> f32 dec(w)·2^-120 */
INLINE __m256 dec8(const uint8_t *p, __m256i mask)
{
    /* sign-extended code << 20: the sign lands in bit 31, the 7 magnitude bits in 26..20 */
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), mask));
}

/* b · 2^e, exact product rounded once to f32 (e may be far outside f32's range) */
INLINE __m256 scale_block(__m256 b, __m256i e)
{
    __m256i bias = _mm256_set1_epi64x(1023);
    __m256i elo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(e));
    __m256i ehi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(e, 1));
    __m256d slo = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(elo, bias), 52));
    __m256d shi = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(ehi, bias), 52));
    __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(b)), slo));
    __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), shi));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

/* The same when 2^e is a normal f32 (e in [-126, 127], the usual case): one f32 multiply by
   2^e rounds the exact product once, as the double path does (for a subnormal, infinite or
   NaN result too), so both give the same bits. e127 = e + 127, in [1, 254] for every real
   row (the lanes of padded rows may hold anything: they are never stored; padded blocks are
   not run). */
#define POW2_MIN (-126)
#define POW2_MAX 127
INLINE __m256 scale_block_pow2(__m256 b, __m256i e127)
{
    return _mm256_mul_ps(b, _mm256_castsi256_ps(_mm256_slli_epi32(e127, 23)));
}
/* e: e + 127 when pow2 (a compile-time constant at every call) */
INLINE __m256 scale_block_by(__m256 b, __m256i e, const int pow2)
{
    return pow2 ? scale_block_pow2(b, e) : scale_block(b, e);
}

typedef struct avx2_job {
    const qk_linear_call *c;
    const avx2_layout *l;
    const float *xt;        /* [M][kp] */
    const int32_t *ex;      /* [M][kbp]: sx - 127 - X_EXP - 127 - PURE_EXP */
    int64_t kp, m0;
    int MM, TT;
    int64_t groups, threads, next; /* tile groups, handed out by qk_linear_take_groups */
    const uint8_t *pow2;    /* [M]: 1 when every real block of the row scales by scale_block_pow2 */
} avx2_job;

static void store8(char *orow, qk_dtype odt, int64_t n0, int64_t valid, const float *bias,
                   __m256 v)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    const int64_t nv = valid < 8 ? valid : 8;
    for (int64_t i = 0; i < nv; i++) {
        float r = t[i] + (bias ? bias[n0 + i] : 0.0f);
        qk_store_f32(orow, odt, n0 + i, r);
    }
}

INLINE void avx2_tiles(const avx2_job *g, int64_t t0, const int MM, const int TT, const int pow2)
{
    const qk_linear_call *c = g->c;
    const avx2_layout *l = g->l;
    const __m256i mask = _mm256_set1_epi32((int)0x87F00000u);
    __m256 acc[MAX_M][MAX_TT];
    float run[MAX_M][MAX_TT][8], total[MAX_M][MAX_TT][8];
    memset(run, 0, sizeof run);
    memset(total, 0, sizeof total);
    const uint8_t *tile[MAX_TT];
    for (int t = 0; t < TT; t++) tile[t] = l->codes + (t0 + t) * l->tile_bytes;
    for (int64_t j = 0; j < c->w->kb; j++) { /* padded blocks (j >= kb) add only zeros */
        const int64_t sbo = (j / SB_BLOCKS) * SB_BYTES, i = j % SB_BLOCKS;
        for (int t = 0; t < TT; t++) /* the same block one super-block ahead */
            for (int q = 0; q < 4; q++)
                _mm_prefetch((const char *)tile[t] + sbo + SB_BYTES + 32 + i * 256 + 64 * q,
                             _MM_HINT_T0);
        for (int m = 0; m < MM; m++)
            for (int t = 0; t < TT; t++) acc[m][t] = _mm256_setzero_ps();
        const float *xj[MAX_M];
        for (int m = 0; m < MM; m++) xj[m] = g->xt + (g->m0 + m) * g->kp + j * QK_MX_BLOCK;
#pragma GCC unroll 2
        for (int k = 0; k < QK_MX_BLOCK; k++) {
            __m256 wv[MAX_TT];
            for (int t = 0; t < TT; t++) wv[t] = dec8(tile[t] + sbo + 32 + i * 256 + 8 * k, mask);
            for (int m = 0; m < MM; m++) {
                __m256 xb = _mm256_broadcast_ss(xj[m] + k);
                for (int t = 0; t < TT; t++) acc[m][t] = _mm256_fmadd_ps(wv[t], xb, acc[m][t]);
            }
        }
        for (int t = 0; t < TT; t++) {
            __m256i sw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(tile[t] + sbo + 8 * i)));
            if (pow2) sw = _mm256_add_epi32(sw, _mm256_set1_epi32(127));
            for (int m = 0; m < MM; m++) {
                __m256i e = _mm256_add_epi32(sw, _mm256_set1_epi32(g->ex[(g->m0 + m) * l->kbp + j]));
                __m256 r = _mm256_add_ps(_mm256_loadu_ps(run[m][t]), scale_block_by(acc[m][t], e, pow2));
                _mm256_storeu_ps(run[m][t], r);
            }
        }
        if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
            for (int m = 0; m < MM; m++)
                for (int t = 0; t < TT; t++) {
                    _mm256_storeu_ps(total[m][t], _mm256_add_ps(_mm256_loadu_ps(total[m][t]),
                                                                _mm256_loadu_ps(run[m][t])));
                    _mm256_storeu_ps(run[m][t], _mm256_setzero_ps());
                }
    }
    for (int m = 0; m < MM; m++) {
        char *orow = c->out + qk_rows_offset(&c->outr, g->m0 + m);
        for (int t = 0; t < TT; t++) {
            const int64_t n0 = (t0 + t) * TILE;
            store8(orow, c->odt, n0, c->N - n0, c->bias,
                   _mm256_add_ps(_mm256_loadu_ps(total[m][t]), _mm256_loadu_ps(run[m][t])));
        }
    }
}

/* ---- GEMM (M > MAX_M): each block of a tile is decoded once into an f32 panel and used by
   every row, instead of once per MAX_M rows. A work item is up to ITEM_TILES tiles; per block
   their panels (ITEM_TILES x 32 x 8 f32, in L1) serve the rows MAX_M at a time, the x block
   of those rows staying in L1 across the item's tile triples. Every block sum, scaling and
   running/total sum is the operation avx2_tiles performs in the same order, so a row's
   result does not depend on M or on the path. */
#define ITEM_TILES 8
#define GEMM_MC 128 /* rows per pass over an item's blocks: their sums and x blocks stay in L2 */

typedef struct avx2_gemm_job {
    const qk_linear_call *c;
    const avx2_layout *l;
    const float *xp;        /* x in groups of MAX_M rows, k-major: [M / 4][kp][4], zero-padded */
    const int32_t *ex;
    int64_t kp, items, next;
    float *bufs;            /* per worker: run and total sums [2][GEMM_MC][W], then the panels */
    int64_t buf_floats, slot;
    const uint8_t *pow2;
} avx2_gemm_job;

/* rows m0 .. m0+MM of tiles tp .. tp+TT (TT <= 3: 12 accumulators, 3 panel vectors and a
   broadcast fill the 16 registers) over the block's panels; sw: the tiles' scale bytes,
   + 127 for the pow2 path */
INLINE void gemm_micro(const avx2_gemm_job *g, const float *panel, const __m256i *sw, float *run,
                       int64_t mc, int64_t m0, int tp, int64_t j, const int MM, const int TT,
                       const int pow2)
{
    const int64_t kbp = g->l->kbp, W = ITEM_TILES * TILE;
    __m256 acc[MAX_M][3];
    for (int m = 0; m < MM; m++)
        for (int t = 0; t < TT; t++) acc[m][t] = _mm256_setzero_ps();
    const float *xj = g->xp + (m0 / MAX_M) * g->kp * MAX_M + j * QK_MX_BLOCK * MAX_M;
#pragma GCC unroll 4
    for (int k = 0; k < QK_MX_BLOCK; k++) {
        __m256 wv[3];
        for (int t = 0; t < TT; t++) wv[t] = _mm256_load_ps(panel + ((tp + t) * QK_MX_BLOCK + k) * TILE);
        for (int m = 0; m < MM; m++) {
            __m256 xb = _mm256_broadcast_ss(xj + k * MAX_M + m);
            for (int t = 0; t < TT; t++) acc[m][t] = _mm256_fmadd_ps(wv[t], xb, acc[m][t]);
        }
    }
    for (int t = 0; t < TT; t++)
        for (int m = 0; m < MM; m++) {
            __m256i e = _mm256_add_epi32(sw[tp + t], _mm256_set1_epi32(g->ex[(m0 + m) * kbp + j]));
            float *r = run + (m0 - mc + m) * W + (tp + t) * TILE;
            _mm256_storeu_ps(r, _mm256_add_ps(_mm256_loadu_ps(r), scale_block_by(acc[m][t], e, pow2)));
        }
}

static void gemm_item(const avx2_gemm_job *g, int64_t t0, int nt, float *run, float *total,
                      float *panel)
{
    const qk_linear_call *c = g->c;
    const avx2_layout *l = g->l;
    const int64_t M = c->M, W = ITEM_TILES * TILE;
    const __m256i mask = _mm256_set1_epi32((int)0x87F00000u);
    for (int64_t mc = 0; mc < M; mc += GEMM_MC) {
        const int64_t me = M - mc < GEMM_MC ? M : mc + GEMM_MC;
        memset(run, 0, sizeof(float) * (size_t)(GEMM_MC * W));
        memset(total, 0, sizeof(float) * (size_t)(GEMM_MC * W));
        for (int64_t j = 0; j < c->w->kb; j++) { /* padded blocks (j >= kb) add only zeros */
            const int64_t sbo = (j / SB_BLOCKS) * SB_BYTES, i = j % SB_BLOCKS;
            __m256i sw[ITEM_TILES], sw127[ITEM_TILES];
            for (int t = 0; t < nt; t++) {
                const uint8_t *tile = l->codes + (t0 + t) * l->tile_bytes + sbo;
                for (int q = 0; q < 4; q++) /* the same block one super-block ahead */
                    _mm_prefetch((const char *)tile + SB_BYTES + 32 + i * 256 + 64 * q, _MM_HINT_T0);
                for (int k = 0; k < QK_MX_BLOCK; k++)
                    _mm256_store_ps(panel + (t * QK_MX_BLOCK + k) * TILE, dec8(tile + 32 + i * 256 + 8 * k, mask));
                sw[t] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(tile + 8 * i)));
                sw127[t] = _mm256_add_epi32(sw[t], _mm256_set1_epi32(127));
            }
            for (int64_t m0 = mc; m0 < me; m0 += MAX_M) {
                const int mm = (int)(me - m0 < MAX_M ? me - m0 : MAX_M);
                int p2 = 1;
                for (int m = 0; m < mm; m++) p2 &= g->pow2[m0 + m];
                for (int tp = 0; tp < nt; tp += 3) {
                    const int tt = nt - tp < 3 ? nt - tp : 3;
#define GM(MMv, TTv)                                                                        \
    if (mm == MMv && tt == TTv) {                                                           \
        if (p2) gemm_micro(g, panel, sw127, run, mc, m0, tp, j, MMv, TTv, 1);               \
        else gemm_micro(g, panel, sw, run, mc, m0, tp, j, MMv, TTv, 0);                     \
        continue;                                                                           \
    }
                    GM(4, 3) GM(4, 2) GM(4, 1) GM(3, 3) GM(3, 2) GM(3, 1) GM(2, 3) GM(2, 2) GM(2, 1)
                    GM(1, 3) GM(1, 2) GM(1, 1)
#undef GM
                }
            }
            if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
                for (int64_t m = 0; m < me - mc; m++)
                    for (int t = 0; t < nt; t++) {
                        float *r = run + m * W + t * TILE, *s = total + m * W + t * TILE;
                        _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), _mm256_loadu_ps(r)));
                        _mm256_storeu_ps(r, _mm256_setzero_ps());
                    }
        }
        for (int64_t m = mc; m < me; m++) {
            char *orow = c->out + qk_rows_offset(&c->outr, m);
            for (int t = 0; t < nt; t++) {
                const int64_t n0 = (t0 + t) * TILE;
                store8(orow, c->odt, n0, c->N - n0, c->bias,
                       _mm256_add_ps(_mm256_loadu_ps(total + (m - mc) * W + t * TILE),
                                     _mm256_loadu_ps(run + (m - mc) * W + t * TILE)));
            }
        }
    }
}

static void avx2_gemm_worker(const void *ctx, int64_t s0, int64_t s1)
{
    avx2_gemm_job *g = (avx2_gemm_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    const int64_t W = ITEM_TILES * TILE;
    float *state = g->bufs + __atomic_fetch_add(&g->slot, 1, __ATOMIC_RELAXED) * g->buf_floats;
    for (;;) {
        const int64_t it = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED);
        if (it >= g->items) break;
        const int64_t t0 = it * ITEM_TILES;
        const int nt = (int)(g->l->tiles - t0 < ITEM_TILES ? g->l->tiles - t0 : ITEM_TILES);
        gemm_item(g, t0, nt, state, state + GEMM_MC * W, state + 2 * GEMM_MC * W);
    }
}

/* Threads take runs of tile groups from a shared counter (qk_linear_take_groups); which
   thread computes a tile never changes its result. */
static void avx2_worker(const void *ctx, int64_t s0, int64_t s1)
{
    avx2_job *g = (avx2_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    int p2 = 1;
    for (int m = 0; m < g->MM; m++) p2 &= g->pow2[g->m0 + m];
    int64_t b, e;
    while (qk_linear_take_groups(&g->next, g->groups, g->threads, &b, &e)) {
        for (int64_t grp = b; grp < e; grp++) {
            const int64_t t0 = grp * g->TT;
            const int tt = (int)(g->l->tiles - t0 < g->TT ? g->l->tiles - t0 : g->TT);
#define AT(MMv, TTv)                                                                        \
    if (g->MM == MMv && tt == TTv) {                                                        \
        if (p2) avx2_tiles(g, t0, MMv, TTv, 1);                                             \
        else avx2_tiles(g, t0, MMv, TTv, 0);                                                \
        continue;                                                                           \
    }
            AT(1, 1) AT(1, 2) AT(1, 3) AT(1, 4) AT(2, 1) AT(2, 2) AT(2, 3) AT(2, 4)
            AT(3, 1) AT(3, 2) AT(4, 1) AT(4, 2)
#undef AT
        }
    }
}

static qk_status avx2_run(const qk_linear_call *c)
{
    const avx2_layout *l = (const avx2_layout *)c->w->layout;
    const int64_t kp = l->kbp * QK_MX_BLOCK;
    qk_mx_quantize_row_fn quant = qk_provider_avx2.ops.mx_quantize.fn;
    qk_linear_act a;
    qk_status st = qk_linear_act_quantize(c, quant, kp, l->kbp, &a);
    if (st) return st;
    /* x decoded to f32: [M][kp] for the small-M kernel; for the GEMM k-major in groups of
       MAX_M rows, [groups][kp][MAX_M], the rows past M zero */
    const int gemm = c->M > MAX_M;
    const int64_t groups = (c->M + MAX_M - 1) / MAX_M;
    const int64_t nitems = (l->tiles + ITEM_TILES - 1) / ITEM_TILES;
    const int64_t buf_floats = 2 * GEMM_MC * ITEM_TILES * TILE + ITEM_TILES * QK_MX_BLOCK * TILE;
    int64_t gemm_threads = 1;
    if (gemm) {
        const double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        gemm_threads = flops < 4e6 ? 1 : qk_threads();
        if (gemm_threads > nitems) gemm_threads = nitems;
    }
    float *xt = (float *)qk_linear_alloc((size_t)((gemm ? groups * MAX_M : c->M) * kp) * sizeof(float));
    /* ex, then the rows' pow2 flags, in one allocation */
    int32_t *ex = (int32_t *)qk_linear_alloc((size_t)(c->M * l->kbp) * sizeof(int32_t) + (size_t)c->M);
    float *bufs = gemm ? (float *)qk_linear_alloc((size_t)(gemm_threads * buf_floats) * sizeof(float)) : NULL;
    if (!xt || !ex || (gemm && !bufs)) {
        qk_linear_free(xt);
        qk_linear_free(ex);
        qk_linear_free(bufs);
        qk_linear_act_free(&a);
        return QK_ERR_NOMEM;
    }
    uint8_t *pow2 = (uint8_t *)(ex + c->M * l->kbp);
    const float *tab = l->xdec;
    for (int64_t m = 0; m < c->M; m++) {
        const uint8_t *q = a.q + m * a.qstride, *s = a.scale + m * a.sstride;
        if (gemm) {
            float *xg = xt + (m / MAX_M) * kp * MAX_M + m % MAX_M;
            for (int64_t k = 0; k < kp; k++) xg[k * MAX_M] = tab[q[k]];
        } else {
            for (int64_t k = 0; k < kp; k++) xt[m * kp + k] = tab[q[k]];
        }
        int32_t lo = INT32_MAX, hi = INT32_MIN;
        for (int64_t j = 0; j < l->kbp; j++) {
            ex[m * l->kbp + j] = (int32_t)s[j] - 127 - X_EXP - 127 - PURE_EXP;
            if (j < c->w->kb) {
                lo = ex[m * l->kbp + j] < lo ? ex[m * l->kbp + j] : lo;
                hi = ex[m * l->kbp + j] > hi ? ex[m * l->kbp + j] : hi;
            }
        }
        pow2[m] = lo + l->sw_lo >= POW2_MIN && hi + l->sw_hi <= POW2_MAX;
    }
    if (gemm) {
        for (int64_t m = c->M; m < groups * MAX_M; m++) {
            float *xg = xt + (m / MAX_M) * kp * MAX_M + m % MAX_M;
            for (int64_t k = 0; k < kp; k++) xg[k * MAX_M] = 0.0f;
        }
        avx2_gemm_job g = {c, l, xt, ex, kp, nitems, 0, bufs, buf_floats, 0, pow2};
        qk_parallel_for(gemm_threads, 1, 0, avx2_gemm_worker, &g);
    }
    for (int64_t m0 = 0; !gemm && m0 < c->M; m0 += MAX_M) {
        avx2_job g = {c, l, xt, ex, kp, m0, 0, 0, 0, 0, 0, pow2};
        g.MM = (int)(c->M - m0 < MAX_M ? c->M - m0 : MAX_M);
        /* independent FMA chains per pass: MM x TT; 2 (M = 1, TT = 2) left the kernel bound by
           FMA latency, not by reading the weight */
        g.TT = g.MM <= 2 ? 4 : 2;
        g.groups = (l->tiles + g.TT - 1) / g.TT;
        int64_t threads = g.groups * g.TT * l->tile_bytes < (128 << 10) ? 1 : qk_threads();
        if (threads > g.groups) threads = g.groups;
        g.threads = threads;
        qk_parallel_for(threads, 1, 0, avx2_worker, &g);
    }
    qk_linear_free(xt);
    qk_linear_free(ex);
    qk_linear_free(bufs);
    qk_linear_act_free(&a);
    return QK_OK;
}

const qk_linear_impl qk_linear_avx2 = {"avx2", avx2_prepare, avx2_release, avx2_run};
