/* Advanced SIMD (Armv8-A) MXFP8 W8A8 linear: mxfp8_linear_neon_f32fma.
 *
 * Prepared weight (1.03 bytes per element): tiles of 16 rows (four f32 vectors, one lane
 * per row); per tile, kb block records of 16 bytes of scales (row r's at r) then 512 bytes
 * of codes, k-major (byte 16k + r is row r's element k). N is padded with zero rows to a
 * multiple of 16 and the last block with zero codes; the padding lives only here.
 *
 * Decode: E4M3 -> f32 by a widening shift and a mask gives dec(w)·2^-120 exactly for every
 * code (subnormal codes become f32 subnormals, which FMLA reads exactly: FPCR.FZ is 0, the
 * Linux default); x is decoded to f32 dec(qx)·2^64, so every product is exact and normal.
 * Each block is summed by FMLA into a fresh accumulator (k = 0..31 in order), scaled by
 * 2^(sx + sw - 254) (decode offsets folded in) with one rounding to f32 (one f32 multiply
 * when every 2^e of the row is a normal f32, checked per row of x against the weight's
 * scale-byte range; in double otherwise: the same bits), and added to a running sum that
 * is flushed into the total every 16 blocks: the f32 summation depth of an output stays
 * below 32 + 16 + kb/16, inside mxfp8.md's 2^-16 bound.
 *
 * Paths: M <= 4, one pass over the weight for the rows, decoding as it goes (4 tiles per
 * pass for M = 1, 2 for M = 2, 1 otherwise); M > 4, each block of a work item's 4 tiles is
 * decoded once into f32 panels and used by every row (4 rows x 16 columns per register
 * tile, x packed k-major per 4 rows). Both run the same per-block sums, scalings and
 * running/total sums in the same order, so a row's outputs depend neither on M nor on the
 * thread split. */
#include "internal.h"
#include "arm/neon/neon.h"
#include "ref/linear_ref.h"
#include "ref/mx_ref.h"

#include <arm_neon.h>
#include <math.h>
#include <stdlib.h>

#define TILE 16
#define BLK_BYTES (TILE + QK_MX_BLOCK * TILE) /* one tile-block: scales, then codes */
#define X_EXP 64                              /* x~ = dec(qx) · 2^X_EXP */
#define PURE_EXP (-120)                       /* w~ = dec(w) · 2^PURE_EXP */
#define GROUP_BLOCKS 16                       /* blocks per running sum before the total */
#define MAX_M 4                               /* rows of the small-M kernel / register tile */
#define MAX_TT 4                              /* tiles per pass of the small-M kernel */

#define INLINE static inline __attribute__((always_inline))

typedef struct neon_layout {
    int64_t tiles, tile_bytes;
    int sw_lo, sw_hi;   /* range of the real rows' scale bytes */
    float xdec[256];    /* E4M3 code -> dec(code)·2^X_EXP, x's decode (made once, here) */
    uint8_t *codes;     /* [tiles][kb] tile-blocks */
} neon_layout;

static qk_status neon_prepare(qk_mx_weight *w, const uint8_t *q, int64_t qs, const uint8_t *scale,
                              int64_t ss)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    neon_layout *l = (neon_layout *)calloc(1, sizeof *l);
    if (!l) return QK_ERR_NOMEM;
    l->tiles = (N + TILE - 1) / TILE;
    l->tile_bytes = kb * BLK_BYTES;
    const size_t cb = (size_t)(l->tiles * l->tile_bytes);
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
            uint8_t *blk = tile + b * BLK_BYTES;
            const int sv = scale[n * ss + b];
            blk[r] = (uint8_t)sv;
            l->sw_lo = sv < l->sw_lo ? sv : l->sw_lo;
            l->sw_hi = sv > l->sw_hi ? sv : l->sw_hi;
            const int64_t k0 = b * QK_MX_BLOCK, kn = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
            for (int64_t kk = 0; kk < kn; kk++) blk[TILE + TILE * kk + r] = q[n * qs + k0 + kk];
        }
    }
    w->layout = l;
    w->layout_bytes = cb;
    return QK_OK;
}

static void neon_release(qk_mx_weight *w)
{
    neon_layout *l = (neon_layout *)w->layout;
    if (l) qk_linear_free_weights(l->codes);
    free(l);
    w->layout = NULL;
}

/* 16 codes (rows 0..15 of one k) -> f32 dec(w)·2^-120, rows 4v..4v+3 in w[v]: the code,
   sign-extended and shifted left by 4 into 16 bits and masked, is the BF16 of that value
   (sign in bit 15, the 7 magnitude bits in 10..4); shifted into the top half, its f32 */
INLINE void dec16(const uint8_t *p, float32x4_t w[4])
{
    const int8x16_t c = vld1q_s8((const int8_t *)p);
    const uint16x8_t mask = vdupq_n_u16(0x87F0);
    const uint16x8_t lo = vandq_u16(vreinterpretq_u16_s16(vshll_n_s8(vget_low_s8(c), 4)), mask);
    const uint16x8_t hi = vandq_u16(vreinterpretq_u16_s16(vshll_high_n_s8(c, 4)), mask);
    w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(lo), 16));
    w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(lo, 16));
    w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hi), 16));
    w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(hi, 16));
}

/* A tile-block's 16 scale bytes as int32 lanes, plus add */
INLINE void scales16(const uint8_t *p, int32_t add, int32x4_t s[4])
{
    const uint8x16_t b = vld1q_u8(p);
    const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    const int32x4_t a = vdupq_n_s32(add);
    s[0] = vaddq_s32(vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo))), a);
    s[1] = vaddq_s32(vreinterpretq_s32_u32(vmovl_high_u16(lo)), a);
    s[2] = vaddq_s32(vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi))), a);
    s[3] = vaddq_s32(vreinterpretq_s32_u32(vmovl_high_u16(hi)), a);
}

/* b · 2^e, the exact product rounded once to f32 (e may be far outside f32's range: the
   product is exact in double, FCVTN rounds it once) */
INLINE float32x4_t scale_block(float32x4_t b, int32x4_t e)
{
    const int64x2_t bias = vdupq_n_s64(1023);
    const float64x2_t slo =
        vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vmovl_s32(vget_low_s32(e)), bias), 52));
    const float64x2_t shi = vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vmovl_high_s32(e), bias), 52));
    const float64x2_t lo = vmulq_f64(vcvt_f64_f32(vget_low_f32(b)), slo);
    const float64x2_t hi = vmulq_f64(vcvt_high_f64_f32(b), shi);
    return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi);
}

/* The same when 2^e is a normal f32 (e in [-126, 127], the usual case): one f32 multiply by
   2^e rounds the exact product once, as the double path does (for a subnormal, infinite or
   NaN result too), so both give the same bits. e127 = e + 127, in [1, 254] for every real
   row (the lanes of padded rows may hold anything: they are never stored). */
#define POW2_MIN (-126)
#define POW2_MAX 127
INLINE float32x4_t scale_block_pow2(float32x4_t b, int32x4_t e127)
{
    return vmulq_f32(b, vreinterpretq_f32_s32(vshlq_n_s32(e127, 23)));
}
/* e: e + 127 when pow2 (a compile-time constant at every call) */
INLINE float32x4_t scale_block_by(float32x4_t b, int32x4_t e, const int pow2)
{
    return pow2 ? scale_block_pow2(b, e) : scale_block(b, e);
}

/* out[n0 .. n0 + min(valid, 16)) = total + run (+ bias) */
static void store16(char *orow, qk_dtype odt, int64_t n0, int64_t valid, const float *bias,
                    const float *total, const float *run)
{
    float t[TILE];
    for (int v = 0; v < 4; v++)
        vst1q_f32(t + 4 * v, vaddq_f32(vld1q_f32(total + 4 * v), vld1q_f32(run + 4 * v)));
    const int64_t nv = valid < TILE ? valid : TILE;
    for (int64_t i = 0; i < nv; i++) {
        const float r = t[i] + (bias ? bias[n0 + i] : 0.0f);
        qk_store_f32(orow, odt, n0 + i, r);
    }
}

/* run[0..16) += v; total += run and run = 0 every GROUP_BLOCKS blocks (the caller) */
INLINE void add16(float *dst, const float *src)
{
    for (int v = 0; v < 4; v++)
        vst1q_f32(dst + 4 * v, vaddq_f32(vld1q_f32(dst + 4 * v), vld1q_f32(src + 4 * v)));
}

/* ---- small M: the rows in one pass over the weight ---- */
typedef struct neon_job {
    const qk_linear_call *c;
    const neon_layout *l;
    const float *xt;        /* [M][kp] */
    const int32_t *ex;      /* [M][kb]: sx - 127 - X_EXP - 127 - PURE_EXP */
    const uint8_t *pow2;    /* [M]: 1 when every block of the row scales by scale_block_pow2 */
    int64_t kp, m0;
    int MM, TT;
    int64_t groups, threads, next; /* tile groups, handed out by qk_linear_take_groups */
} neon_job;

INLINE void neon_tiles(const neon_job *g, int64_t t0, const int MM, const int TT, const int pow2)
{
    const qk_linear_call *c = g->c;
    const neon_layout *l = g->l;
    const int64_t kb = c->w->kb;
    float32x4_t acc[MAX_M][MAX_TT][4];
    float run[MAX_M][MAX_TT][TILE], total[MAX_M][MAX_TT][TILE];
    memset(run, 0, sizeof run);
    memset(total, 0, sizeof total);
    const uint8_t *tile[MAX_TT];
    for (int t = 0; t < TT; t++) tile[t] = l->codes + (t0 + t) * l->tile_bytes;
    for (int64_t j = 0; j < kb; j++) {
        for (int m = 0; m < MM; m++)
            for (int t = 0; t < TT; t++)
                for (int v = 0; v < 4; v++) acc[m][t][v] = vdupq_n_f32(0.0f);
        const float *xj[MAX_M];
        for (int m = 0; m < MM; m++) xj[m] = g->xt + (g->m0 + m) * g->kp + j * QK_MX_BLOCK;
        const int64_t bo = j * BLK_BYTES + TILE;
#pragma GCC unroll 2
        for (int k = 0; k < QK_MX_BLOCK; k++) {
            for (int t = 0; t < TT; t++) {
                float32x4_t wv[4];
                dec16(tile[t] + bo + TILE * k, wv);
                for (int m = 0; m < MM; m++) {
                    const float xk = xj[m][k];
                    for (int v = 0; v < 4; v++) acc[m][t][v] = vfmaq_n_f32(acc[m][t][v], wv[v], xk);
                }
            }
        }
        for (int t = 0; t < TT; t++) {
            int32x4_t sw[4];
            scales16(tile[t] + j * BLK_BYTES, pow2 ? 127 : 0, sw);
            for (int m = 0; m < MM; m++) {
                const int32x4_t ex = vdupq_n_s32(g->ex[(g->m0 + m) * kb + j]);
                for (int v = 0; v < 4; v++) {
                    float *r = run[m][t] + 4 * v;
                    vst1q_f32(r, vaddq_f32(vld1q_f32(r),
                                           scale_block_by(acc[m][t][v], vaddq_s32(sw[v], ex), pow2)));
                }
            }
        }
        if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
            for (int m = 0; m < MM; m++)
                for (int t = 0; t < TT; t++) {
                    add16(total[m][t], run[m][t]);
                    memset(run[m][t], 0, sizeof run[m][t]);
                }
    }
    for (int m = 0; m < MM; m++) {
        char *orow = c->out + qk_rows_offset(&c->outr, g->m0 + m);
        for (int t = 0; t < TT; t++) {
            const int64_t n0 = (t0 + t) * TILE;
            store16(orow, c->odt, n0, c->N - n0, c->bias, total[m][t], run[m][t]);
        }
    }
}

/* Threads take runs of tile groups from a shared counter (qk_linear_take_groups); which
   thread computes a tile never changes its result. */
static void neon_worker(const void *ctx, int64_t s0, int64_t s1)
{
    neon_job *g = (neon_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    int p2 = 1;
    for (int m = 0; m < g->MM; m++) p2 &= g->pow2[g->m0 + m];
    int64_t b, e;
    while (qk_linear_take_groups(&g->next, g->groups, g->threads, &b, &e)) {
        for (int64_t grp = b; grp < e; grp++) {
            const int64_t t0 = grp * g->TT;
            const int tt = (int)(g->l->tiles - t0 < g->TT ? g->l->tiles - t0 : g->TT);
#define NT(MMv, TTv)                                                                        \
    if (g->MM == MMv && tt == TTv) {                                                        \
        if (p2) neon_tiles(g, t0, MMv, TTv, 1);                                             \
        else neon_tiles(g, t0, MMv, TTv, 0);                                                \
        continue;                                                                           \
    }
            NT(1, 1) NT(1, 2) NT(1, 3) NT(1, 4) NT(2, 1) NT(2, 2) NT(3, 1) NT(4, 1)
#undef NT
        }
    }
}

/* ---- GEMM (M > MAX_M): each block of a tile is decoded once into an f32 panel and used by
   every row, instead of once per MAX_M rows. A work item is up to ITEM_TILES tiles; per block
   their panels (ITEM_TILES x 32 x 16 f32, in L1) serve the rows MAX_M at a time. Every block
   sum, scaling and running/total sum is the operation neon_tiles performs in the same order,
   so a row's result does not depend on M or on the path. */
#define ITEM_TILES 4
#define GEMM_MC 128 /* rows per pass over an item's blocks: their sums and x blocks stay in L2 */
#define PANEL_FLOATS (QK_MX_BLOCK * TILE)

typedef struct neon_gemm_job {
    const qk_linear_call *c;
    const neon_layout *l;
    const float *xp;        /* x in groups of MAX_M rows, k-major: [M / 4][kp][4], zero-padded */
    const int32_t *ex;
    const uint8_t *pow2;
    int64_t kp, items, next;
    float *bufs;            /* per worker: run and total sums [2][GEMM_MC][W], then the panels */
    int64_t buf_floats, slot;
} neon_gemm_job;

/* acc[m][v] += w[v] · x[m] for the 4 rows of one k (lane m of xv) */
#define FMA_ROW(m)                                                                          \
    if (MM > m)                                                                             \
        for (int v = 0; v < 4; v++) acc[m][v] = vfmaq_laneq_f32(acc[m][v], wv[v], xv, m);

/* rows m0 .. m0+MM of one tile over the block's panel; sw: the tile's scale bytes (+ 127 for
   the pow2 path); run: the rows' running sums at the tile's columns, row stride W */
INLINE void gemm_micro(const neon_gemm_job *g, const float *panel, const int32x4_t *sw, float *run,
                       int64_t m0, int64_t j, const int MM, const int pow2)
{
    const int64_t kb = g->c->w->kb, W = ITEM_TILES * TILE;
    float32x4_t acc[MAX_M][4];
    for (int m = 0; m < MM; m++)
        for (int v = 0; v < 4; v++) acc[m][v] = vdupq_n_f32(0.0f);
    const float *xj = g->xp + (m0 / MAX_M) * g->kp * MAX_M + j * QK_MX_BLOCK * MAX_M;
#pragma GCC unroll 4
    for (int k = 0; k < QK_MX_BLOCK; k++) {
        float32x4_t wv[4];
        for (int v = 0; v < 4; v++) wv[v] = vld1q_f32(panel + k * TILE + 4 * v);
        const float32x4_t xv = vld1q_f32(xj + k * MAX_M);
        FMA_ROW(0) FMA_ROW(1) FMA_ROW(2) FMA_ROW(3)
    }
    for (int m = 0; m < MM; m++) {
        const int32x4_t ex = vdupq_n_s32(g->ex[(m0 + m) * kb + j]);
        float *r = run + m * W;
        for (int v = 0; v < 4; v++)
            vst1q_f32(r + 4 * v, vaddq_f32(vld1q_f32(r + 4 * v),
                                           scale_block_by(acc[m][v], vaddq_s32(sw[v], ex), pow2)));
    }
}
#undef FMA_ROW

static void gemm_item(const neon_gemm_job *g, int64_t t0, int nt, float *run, float *total,
                      float *panel)
{
    const qk_linear_call *c = g->c;
    const neon_layout *l = g->l;
    const int64_t M = c->M, W = ITEM_TILES * TILE, kb = c->w->kb;
    for (int64_t mc = 0; mc < M; mc += GEMM_MC) {
        const int64_t me = M - mc < GEMM_MC ? M : mc + GEMM_MC;
        memset(run, 0, sizeof(float) * (size_t)(GEMM_MC * W));
        memset(total, 0, sizeof(float) * (size_t)(GEMM_MC * W));
        for (int64_t j = 0; j < kb; j++) {
            int32x4_t sw[ITEM_TILES][4], sw127[ITEM_TILES][4];
            for (int t = 0; t < nt; t++) {
                const uint8_t *blk = l->codes + (t0 + t) * l->tile_bytes + j * BLK_BYTES;
                for (int k = 0; k < QK_MX_BLOCK; k++) {
                    float32x4_t wv[4];
                    dec16(blk + TILE + TILE * k, wv);
                    for (int v = 0; v < 4; v++) vst1q_f32(panel + t * PANEL_FLOATS + k * TILE + 4 * v, wv[v]);
                }
                scales16(blk, 0, sw[t]);
                scales16(blk, 127, sw127[t]);
            }
            for (int64_t m0 = mc; m0 < me; m0 += MAX_M) {
                const int mm = (int)(me - m0 < MAX_M ? me - m0 : MAX_M);
                int p2 = 1;
                for (int m = 0; m < mm; m++) p2 &= g->pow2[m0 + m];
                for (int t = 0; t < nt; t++) {
                    const float *pt = panel + t * PANEL_FLOATS;
                    float *rt = run + (m0 - mc) * W + t * TILE;
#define GM(MMv)                                                                             \
    if (mm == MMv) {                                                                        \
        if (p2) gemm_micro(g, pt, sw127[t], rt, m0, j, MMv, 1);                             \
        else gemm_micro(g, pt, sw[t], rt, m0, j, MMv, 0);                                   \
        continue;                                                                           \
    }
                    GM(4) GM(3) GM(2) GM(1)
#undef GM
                }
            }
            if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
                for (int64_t m = 0; m < me - mc; m++)
                    for (int t = 0; t < nt; t++) {
                        float *r = run + m * W + t * TILE;
                        add16(total + m * W + t * TILE, r);
                        memset(r, 0, sizeof(float) * TILE);
                    }
        }
        for (int64_t m = mc; m < me; m++) {
            char *orow = c->out + qk_rows_offset(&c->outr, m);
            for (int t = 0; t < nt; t++) {
                const int64_t n0 = (t0 + t) * TILE;
                store16(orow, c->odt, n0, c->N - n0, c->bias, total + (m - mc) * W + t * TILE,
                        run + (m - mc) * W + t * TILE);
            }
        }
    }
}

static void neon_gemm_worker(const void *ctx, int64_t s0, int64_t s1)
{
    neon_gemm_job *g = (neon_gemm_job *)(uintptr_t)ctx;
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

static qk_status neon_run(const qk_linear_call *c)
{
    const neon_layout *l = (const neon_layout *)c->w->layout;
    const int64_t kb = c->w->kb, kp = kb * QK_MX_BLOCK;
    qk_linear_act a;
    qk_status st = qk_linear_act_quantize(c, qk_provider_neon.ops.mx_quantize.fn, QK_MX_BLOCK, 1, &a);
    if (st) return st;
    /* x decoded to f32: [M][kp] for the small-M kernel; for the GEMM k-major in groups of
       MAX_M rows, [groups][kp][MAX_M], the rows past M zero */
    const int gemm = c->M > MAX_M;
    const int64_t groups = (c->M + MAX_M - 1) / MAX_M;
    const int64_t nitems = (l->tiles + ITEM_TILES - 1) / ITEM_TILES;
    const int64_t buf_floats = 2 * GEMM_MC * ITEM_TILES * TILE + ITEM_TILES * PANEL_FLOATS;
    int64_t gemm_threads = 1;
    if (gemm) {
        const double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        gemm_threads = flops < 4e6 ? 1 : qk_threads();
        if (gemm_threads > nitems) gemm_threads = nitems;
    }
    float *xt = (float *)qk_linear_alloc((size_t)((gemm ? groups * MAX_M : c->M) * kp) * sizeof(float));
    /* ex, then the rows' pow2 flags, in one allocation */
    int32_t *ex = (int32_t *)qk_linear_alloc((size_t)(c->M * kb) * sizeof(int32_t) + (size_t)c->M);
    float *bufs = gemm ? (float *)qk_linear_alloc((size_t)(gemm_threads * buf_floats) * sizeof(float)) : NULL;
    if (!xt || !ex || (gemm && !bufs)) {
        qk_linear_free(xt);
        qk_linear_free(ex);
        qk_linear_free(bufs);
        qk_linear_act_free(&a);
        return QK_ERR_NOMEM;
    }
    uint8_t *pow2 = (uint8_t *)(ex + c->M * kb);
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
        for (int64_t j = 0; j < kb; j++) {
            const int32_t e = (int32_t)s[j] - 127 - X_EXP - 127 - PURE_EXP;
            ex[m * kb + j] = e;
            lo = e < lo ? e : lo;
            hi = e > hi ? e : hi;
        }
        pow2[m] = lo + l->sw_lo >= POW2_MIN && hi + l->sw_hi <= POW2_MAX;
    }
    if (gemm) {
        for (int64_t m = c->M; m < groups * MAX_M; m++) {
            float *xg = xt + (m / MAX_M) * kp * MAX_M + m % MAX_M;
            for (int64_t k = 0; k < kp; k++) xg[k * MAX_M] = 0.0f;
        }
        neon_gemm_job g = {c, l, xt, ex, pow2, kp, nitems, 0, bufs, buf_floats, 0};
        qk_parallel_for(gemm_threads, 1, 0, neon_gemm_worker, &g);
    } else {
        neon_job g = {c, l, xt, ex, pow2, kp, 0, 0, 0, 0, 0, 0};
        g.MM = (int)c->M;
        /* independent FMA chains per pass: 4 x MM x TT (16, 16, 12, 16) */
        g.TT = g.MM == 1 ? 4 : g.MM == 2 ? 2 : 1;
        g.groups = (l->tiles + g.TT - 1) / g.TT;
        int64_t threads = g.groups * g.TT * l->tile_bytes < (128 << 10) ? 1 : qk_threads();
        if (threads > g.groups) threads = g.groups;
        g.threads = threads;
        qk_parallel_for(threads, 1, 0, neon_worker, &g);
    }
    qk_linear_free(xt);
    qk_linear_free(ex);
    qk_linear_free(bufs);
    qk_linear_act_free(&a);
    return QK_OK;
}

const qk_linear_impl qk_linear_neon = {"neon", neon_prepare, neon_release, neon_run};
