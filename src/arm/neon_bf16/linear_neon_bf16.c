/* Armv8.6-A BF16 (FEAT_BF16) MXFP8 W8A8 linear: mxfp8_linear_neon_bf16 (BFDOT for M <= 4,
 * BFMMLA for M > 4).
 *
 * Prepared weight (1.03 bytes per element): tiles of 16 rows; per tile, kb block records of
 * 16 bytes of scales (row r's at r) then 512 bytes of codes in 16 chunks of 32, chunk p
 * holding the pairs k = 2p, 2p+1 of the 16 rows (byte 2r + h is row r's element 2p + h), so
 * that a 16-byte half widens to the BFDOT operand of 4 rows. N is padded with zero rows to
 * a multiple of 16 and the last block with zero codes; a byte per (tile, block) flags
 * blocks holding E4M3 subnormal codes.
 *
 * What the instructions do (Arm ARM, BFDOT / BFMMLA): with FEAT_EBF16 absent or FPCR.EBF = 0,
 * each BFDOT step is acc + (p0 + p1) with the products, their sum and the accumulation each
 * rounded to f32 with round-to-odd, denormal inputs and results flushed to zero; with
 * FPCR.EBF = 1 the products are summed unrounded, (p0 + p1) and the accumulation rounded by
 * FPCR. BFMMLA is, per output, two such steps, pairs (k0, k1) then (k2, k3), in either mode.
 * Both generate only the default NaN. So this file makes every operand and every product
 * exact and normal and bounds the rest:
 *   - x~ = dec(qx)·2^64 in BF16 (exact: 4 significant bits; subnormal codes become normal
 *     BF16, NaN codes BF16 NaN); w~ = dec(w)·2^-120 by a shift and a mask, exact for every
 *     code but the subnormals (their BF16 would be subnormal and flushed); flagged blocks
 *     decode exactly as dec(w)·2^0 instead (a 16-entry table for the subnormal codes).
 *   - Every product is then exact in f32 and a multiple of 2^-74 (pure decode) or 2^46
 *     (exact decode), and so is every partial sum, so no value is ever subnormal: the
 *     flushing never applies, and the 32 products of a block sum with 2 roundings per pair,
 *     each at most 1 ulp (round-to-odd): at most 17·2^-23 of the block's sum of |products|.
 *   - The block sum is scaled by 2^(sx + sw - 254) (decode offsets folded in) with one
 *     rounding to f32 (one f32 multiply when every 2^e is a normal f32, in double
 *     otherwise: the same bits), and added to a running sum flushed into the total every 16
 *     blocks: all told at most (51 + kb/16)·2^-24 of sum |terms|, inside mxfp8.md's 2^-16
 *     bound for K up to 100 000.
 *   - A NaN in x makes its block's sums the default NaN, and so the row's outputs.
 * Paths: M <= 4, one pass over the weight for the rows, BFDOT by element (4 tiles per pass
 * for M = 1, 2 for M = 2, 1 otherwise); M > 4, each block of a work item's 4 tiles is decoded
 * once into BFMMLA panels (2 rows x 4 k per operand) used by every row, 8 rows x 8 columns
 * per register tile. Both take each output's pairs in the same order from a fresh
 * accumulator per block (the exact and the shift decode differ by 2^120, which scales every
 * intermediate exactly), then the same scaling and sums, so a row's outputs depend neither
 * on M nor on the thread split. */
#include "internal.h"
#include "arm/neon_bf16/neon_bf16.h"
#include "ref/linear_ref.h"
#include "ref/mx_ref.h"

#include <arm_neon.h>
#include <math.h>
#include <stdlib.h>

#define TILE 16
#define BLK_BYTES (TILE + QK_MX_BLOCK * TILE) /* one tile-block: scales, then codes */
#define X_EXP 64                              /* x~ = dec(qx) · 2^X_EXP */
#define PURE_EXP (-120)                       /* w~ = dec(w) · 2^PURE_EXP (shift decode) */
#define GROUP_BLOCKS 16                       /* blocks per running sum before the total */
#define MAX_M 4                               /* rows of the BFDOT kernel */
#define MAX_TT 4                              /* tiles per pass of the BFDOT kernel */

#define INLINE static inline __attribute__((always_inline))

typedef struct bf16_layout {
    int64_t tiles, tile_bytes;
    int sw_lo, sw_hi;   /* range of the real rows' scale bytes */
    uint16_t xdec[256]; /* E4M3 code -> BF16 of dec(code)·2^X_EXP, x's decode */
    uint8_t *codes;     /* [tiles][kb] tile-blocks */
    uint8_t *flags;     /* [tiles][kb]: 1 = the block holds subnormal codes (exact decode) */
} bf16_layout;

static qk_status bf16_prepare(qk_mx_weight *w, const uint8_t *q, int64_t qs, const uint8_t *scale,
                              int64_t ss)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    bf16_layout *l = (bf16_layout *)calloc(1, sizeof *l);
    if (!l) return QK_ERR_NOMEM;
    l->tiles = (N + TILE - 1) / TILE;
    l->tile_bytes = kb * BLK_BYTES;
    const size_t cb = (size_t)(l->tiles * l->tile_bytes), fb = (size_t)(l->tiles * kb);
    l->codes = (uint8_t *)qk_linear_alloc_weights(cb + fb);
    if (!l->codes) {
        free(l);
        return QK_ERR_NOMEM;
    }
    memset(l->codes, 0, cb + fb);
    l->flags = l->codes + cb;
    l->sw_lo = 255;
    l->sw_hi = 0;
    for (int i = 0; i < 256; i++) l->xdec[i] = qk_f32_to_bf16(ldexpf(qk_e4m3_to_f32((uint8_t)i), X_EXP));
    for (int64_t n = 0; n < N; n++) {
        const int64_t t = n / TILE, r = n % TILE;
        uint8_t *tile = l->codes + t * l->tile_bytes;
        for (int64_t b = 0; b < kb; b++) {
            uint8_t *blk = tile + b * BLK_BYTES;
            const int sv = scale[n * ss + b];
            blk[r] = (uint8_t)sv;
            l->sw_lo = sv < l->sw_lo ? sv : l->sw_lo;
            l->sw_hi = sv > l->sw_hi ? sv : l->sw_hi;
            const int64_t k0 = b * QK_MX_BLOCK, kn = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
            for (int64_t kk = 0; kk < kn; kk++) {
                const uint8_t code = q[n * qs + k0 + kk];
                blk[TILE + 32 * (kk / 2) + 2 * r + kk % 2] = code;
                if ((code & 0x78) == 0 && (code & 0x07) != 0) l->flags[t * kb + b] = 1;
            }
        }
    }
    w->layout = l;
    w->layout_bytes = cb + fb;
    return QK_OK;
}

static void bf16_release(qk_mx_weight *w)
{
    bf16_layout *l = (bf16_layout *)w->layout;
    if (l) qk_linear_free_weights(l->codes);
    free(l);
    w->layout = NULL;
}

/* ---- decode ---- */
/* BF16 bytes of m·2^-9 at 2m, 2m + 1 (m = 0..7): the E4M3 subnormal codes' values */
static const uint8_t subnormal_bf16[16] = {0x00, 0x00, 0x00, 0x3B, 0x80, 0x3B, 0xC0, 0x3B,
                                           0x00, 0x3C, 0x20, 0x3C, 0x40, 0x3C, 0x60, 0x3C};

/* 8 codes -> 8 BF16 words dec(w)·2^-120: the code sign-extended and shifted left by 4 into
   16 bits, masked (sign in bit 15, the 7 magnitude bits in 10..4) */
INLINE uint16x8_t dec8_pure(int8x8_t c)
{
    return vandq_u16(vreinterpretq_u16_s16(vshll_n_s8(c, 4)), vdupq_n_u16(0x87F0));
}
INLINE uint16x8_t dec8_pure_high(int8x16_t c)
{
    return vandq_u16(vreinterpretq_u16_s16(vshll_high_n_s8(c, 4)), vdupq_n_u16(0x87F0));
}
/* exact, dec(w)·2^0: normal codes get 120 added to the exponent, the others (exponent field
   0: zero and the subnormals) m·2^-9 from the table, with their sign */
INLINE uint16x8_t exact_of_pure(uint16x8_t p, uint8x16_t sub)
{
    const uint16x8_t normal = vtstq_u16(p, vdupq_n_u16(0x0780));
    const uint16x8_t m2 = vandq_u16(vshrq_n_u16(p, 3), vdupq_n_u16(0x000E));      /* 2m */
    const uint16x8_t idx = vorrq_u16(m2, vshlq_n_u16(vaddq_u16(m2, vdupq_n_u16(1)), 8));
    uint16x8_t s = vreinterpretq_u16_u8(vqtbl1q_u8(sub, vreinterpretq_u8_u16(idx)));
    s = vorrq_u16(s, vandq_u16(p, vdupq_n_u16(0x8000)));
    return vbslq_u16(normal, vaddq_u16(p, vdupq_n_u16(0x3C00)), s);
}

/* One 32-byte pair chunk (rows 0..15, k = 2p, 2p+1) -> BFDOT operands: rows 4v..4v+3 in w[v] */
INLINE void dec_chunk(const uint8_t *p, const int exact, uint8x16_t sub, uint16x8_t w[4])
{
    const int8x16_t c0 = vld1q_s8((const int8_t *)p), c1 = vld1q_s8((const int8_t *)p + 16);
    w[0] = dec8_pure(vget_low_s8(c0));
    w[1] = dec8_pure_high(c0);
    w[2] = dec8_pure(vget_low_s8(c1));
    w[3] = dec8_pure_high(c1);
    if (exact)
        for (int v = 0; v < 4; v++) w[v] = exact_of_pure(w[v], sub);
}

INLINE bfloat16x8_t as_bf(uint16x8_t v) { return vreinterpretq_bf16_u16(v); }

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

/* ---- scaling: b · 2^e with one rounding to f32 ---- */
/* e anywhere: the product is exact in double, FCVTN rounds it once */
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
/* 2^e a normal f32 (e in [-126, 127]): one f32 multiply, the same bits; e127 = e + 127 */
#define POW2_MIN (-126)
#define POW2_MAX 127
INLINE float32x4_t scale_block_pow2(float32x4_t b, int32x4_t e127)
{
    return vmulq_f32(b, vreinterpretq_f32_s32(vshlq_n_s32(e127, 23)));
}
INLINE float32x4_t scale_block_by(float32x4_t b, int32x4_t e, const int pow2)
{
    return pow2 ? scale_block_pow2(b, e) : scale_block(b, e);
}
/* r[0..4) += b · 2^e */
INLINE void run_add(float *r, float32x4_t b, int32x4_t e, const int pow2)
{
    vst1q_f32(r, vaddq_f32(vld1q_f32(r), scale_block_by(b, e, pow2)));
}
INLINE void add16(float *dst, const float *src)
{
    for (int v = 0; v < 4; v++)
        vst1q_f32(dst + 4 * v, vaddq_f32(vld1q_f32(dst + 4 * v), vld1q_f32(src + 4 * v)));
}
/* the weight's decode offset in a block's exponent: 0 for the exact decode */
INLINE int32_t wexp(int exact) { return exact ? 0 : -PURE_EXP; }

/* out[n0 .. n0 + min(valid, 16)) = t (+ bias) */
static void store16(char *orow, qk_dtype odt, int64_t n0, int64_t valid, const float *bias,
                    const float *t)
{
    const int64_t nv = valid < TILE ? valid : TILE;
    for (int64_t i = 0; i < nv; i++) {
        const float r = t[i] + (bias ? bias[n0 + i] : 0.0f);
        qk_store_f32(orow, odt, n0 + i, r);
    }
}

/* ---- the call's activations ---- */
typedef struct act_bf16 {
    qk_linear_act a;
    int64_t kp, nq;         /* K padded to blocks; k-quads per row (kp / 4) */
    uint16_t *xt;           /* BFDOT: [M][kp] x~; BFMMLA: [ceil(M/2)][nq][2][4] (row pairs) */
    int32_t *ex;            /* [M][kb]: sx - 127 - X_EXP - 127 (the weight's offset apart) */
    int32_t *exq;           /* BFMMLA: [ceil(M/2)][kb][4]: ex of rows 2P, 2P, 2P+1, 2P+1 */
    uint8_t *pow2;          /* [M]: 1 when every block of the row scales by scale_block_pow2 */
} act_bf16;

static void act_free(act_bf16 *x)
{
    qk_linear_free(x->xt);
    qk_linear_free(x->ex);
    qk_linear_free(x->exq);
    qk_linear_act_free(&x->a);
}

static qk_status act_make(const qk_linear_call *c, const bf16_layout *l, int mm, act_bf16 *x)
{
    const int64_t M = c->M, kb = c->w->kb, pairs = (M + 1) / 2;
    memset(x, 0, sizeof *x);
    x->kp = kb * QK_MX_BLOCK;
    x->nq = x->kp / 4;
    qk_status st = qk_linear_act_quantize(c, qk_provider_neon.ops.mx_quantize.fn, QK_MX_BLOCK, 1, &x->a);
    if (st) return st;
    x->xt = (uint16_t *)qk_linear_alloc((size_t)((mm ? 2 * pairs : M) * x->kp) * 2);
    x->ex = (int32_t *)qk_linear_alloc((size_t)(M * kb) * 4 + (size_t)M);
    if (mm) x->exq = (int32_t *)qk_linear_alloc((size_t)(pairs * kb) * 16);
    if (!x->xt || !x->ex || (mm && !x->exq)) {
        act_free(x);
        return QK_ERR_NOMEM;
    }
    x->pow2 = (uint8_t *)(x->ex + M * kb);
    for (int64_t m = 0; m < M; m++) {
        const uint8_t *q = x->a.q + m * x->a.qstride, *s = x->a.scale + m * x->a.sstride;
        if (mm) {   /* row pair m / 2, quad k / 4: 8 words, row m % 2 at 4 (m % 2) */
            uint16_t *o = x->xt + (m / 2) * x->nq * 8 + (m % 2) * 4;
            for (int64_t k = 0; k < x->kp; k++) o[(k / 4) * 8 + k % 4] = l->xdec[q[k]];
        } else {
            for (int64_t k = 0; k < x->kp; k++) x->xt[m * x->kp + k] = l->xdec[q[k]];
        }
        int32_t lo = INT32_MAX, hi = INT32_MIN;
        for (int64_t j = 0; j < kb; j++) {
            const int32_t e = (int32_t)s[j] - 127 - X_EXP - 127;
            x->ex[m * kb + j] = e;
            lo = e < lo ? e : lo;
            hi = e > hi ? e : hi;
        }
        /* every block's 2^e normal whichever decode (offset 0 or 120) the weight block takes */
        x->pow2[m] = lo + l->sw_lo + wexp(1) >= POW2_MIN && hi + l->sw_hi + wexp(0) <= POW2_MAX;
    }
    if (mm) {
        if (M % 2) {   /* the last pair's second row: zero codes */
            uint16_t *o = x->xt + (M / 2) * x->nq * 8 + 4;
            for (int64_t qd = 0; qd < x->nq; qd++) memset(o + qd * 8, 0, 8);
        }
        for (int64_t p = 0; p < pairs; p++)
            for (int64_t j = 0; j < kb; j++) {
                const int32_t e0 = x->ex[2 * p * kb + j];
                const int32_t e1 = 2 * p + 1 < M ? x->ex[(2 * p + 1) * kb + j] : 0;
                int32_t *o = x->exq + (p * kb + j) * 4;
                o[0] = o[1] = e0;
                o[2] = o[3] = e1;
            }
    }
    return QK_OK;
}

/* ---- BFDOT (M <= 4): the rows in one pass over the weight ---- */
typedef struct dot_job {
    const qk_linear_call *c;
    const bf16_layout *l;
    const act_bf16 *x;
    int MM, TT;
    int64_t groups, threads, next; /* tile groups, handed out by qk_linear_take_groups */
} dot_job;

/* acc[m][t][v] += the rows' pairs p = 4 p4 + lane against x's pair (lane of xq[m]) */
#define DOT_PAIR(lane)                                                                      \
    for (int t = 0; t < TT; t++) {                                                          \
        uint16x8_t wv[4];                                                                   \
        dec_chunk(blk[t] + 32 * (4 * p4 + lane), exact, sub, wv);                           \
        for (int m = 0; m < MM; m++)                                                        \
            for (int v = 0; v < 4; v++)                                                     \
                acc[m][t][v] = vbfdotq_laneq_f32(acc[m][t][v], as_bf(wv[v]), xq[m], lane);  \
    }

INLINE void dot_block(const int MM, const int TT, const int exact, float32x4_t acc[MAX_M][MAX_TT][4],
                      const uint8_t *const blk[MAX_TT], const uint16_t *const xj[MAX_M], uint8x16_t sub)
{
    for (int p4 = 0; p4 < 4; p4++) {
        bfloat16x8_t xq[MAX_M];
        for (int m = 0; m < MM; m++) xq[m] = vreinterpretq_bf16_u16(vld1q_u16(xj[m] + 8 * p4));
        DOT_PAIR(0) DOT_PAIR(1) DOT_PAIR(2) DOT_PAIR(3)
    }
}
#undef DOT_PAIR

INLINE void dot_tiles(const dot_job *g, int64_t t0, const int MM, const int TT, const int pow2)
{
    const qk_linear_call *c = g->c;
    const bf16_layout *l = g->l;
    const act_bf16 *x = g->x;
    const int64_t kb = c->w->kb;
    const uint8x16_t sub = vld1q_u8(subnormal_bf16);
    float32x4_t acc[MAX_M][MAX_TT][4];
    float run[MAX_M][MAX_TT][TILE], total[MAX_M][MAX_TT][TILE];
    memset(run, 0, sizeof run);
    memset(total, 0, sizeof total);
    const uint8_t *tile[MAX_TT], *flags[MAX_TT];
    for (int t = 0; t < TT; t++) {
        tile[t] = l->codes + (t0 + t) * l->tile_bytes;
        flags[t] = l->flags + (t0 + t) * kb;
    }
    for (int64_t j = 0; j < kb; j++) {
        int exact = 0;
        const uint8_t *blk[MAX_TT];
        for (int t = 0; t < TT; t++) {
            blk[t] = tile[t] + j * BLK_BYTES + TILE;
            exact |= flags[t][j];
        }
        for (int m = 0; m < MM; m++)
            for (int t = 0; t < TT; t++)
                for (int v = 0; v < 4; v++) acc[m][t][v] = vdupq_n_f32(0.0f);
        const uint16_t *xj[MAX_M];
        for (int m = 0; m < MM; m++) xj[m] = x->xt + m * x->kp + j * QK_MX_BLOCK;
        if (exact) dot_block(MM, TT, 1, acc, blk, xj, sub);
        else dot_block(MM, TT, 0, acc, blk, xj, sub);
        for (int t = 0; t < TT; t++) {
            int32x4_t sw[4];
            scales16(tile[t] + j * BLK_BYTES, wexp(exact) + (pow2 ? 127 : 0), sw);
            for (int m = 0; m < MM; m++) {
                const int32x4_t ex = vdupq_n_s32(x->ex[m * kb + j]);
                for (int v = 0; v < 4; v++)
                    run_add(run[m][t] + 4 * v, acc[m][t][v], vaddq_s32(sw[v], ex), pow2);
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
        char *orow = c->out + qk_rows_offset(&c->outr, m);
        for (int t = 0; t < TT; t++) {
            const int64_t n0 = (t0 + t) * TILE;
            add16(total[m][t], run[m][t]);
            store16(orow, c->odt, n0, c->N - n0, c->bias, total[m][t]);
        }
    }
}

/* Threads take runs of tile groups from a shared counter (qk_linear_take_groups); which
   thread computes a tile never changes its result. */
static void dot_worker(const void *ctx, int64_t s0, int64_t s1)
{
    dot_job *g = (dot_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    int p2 = 1;
    for (int m = 0; m < g->MM; m++) p2 &= g->x->pow2[m];
    int64_t b, e;
    while (qk_linear_take_groups(&g->next, g->groups, g->threads, &b, &e)) {
        for (int64_t grp = b; grp < e; grp++) {
            const int64_t t0 = grp * g->TT;
            const int tt = (int)(g->l->tiles - t0 < g->TT ? g->l->tiles - t0 : g->TT);
#define DT(MMv, TTv)                                                                        \
    if (g->MM == MMv && tt == TTv) {                                                        \
        if (p2) dot_tiles(g, t0, MMv, TTv, 1);                                              \
        else dot_tiles(g, t0, MMv, TTv, 0);                                                 \
        continue;                                                                           \
    }
            DT(1, 1) DT(1, 2) DT(1, 3) DT(1, 4) DT(2, 1) DT(2, 2) DT(3, 1) DT(4, 1)
#undef DT
        }
    }
}

static void run_dot(const qk_linear_call *c, const bf16_layout *l, const act_bf16 *x)
{
    dot_job g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.l = l;
    g.x = x;
    g.MM = (int)c->M;
    /* independent BFDOT chains per pass: 4 x MM x TT (16, 16, 12, 16) */
    g.TT = g.MM == 1 ? 4 : g.MM == 2 ? 2 : 1;
    g.groups = (l->tiles + g.TT - 1) / g.TT;
    int64_t threads = g.groups * g.TT * l->tile_bytes < (128 << 10) ? 1 : qk_threads();
    if (threads > g.groups) threads = g.groups;
    g.threads = threads;
    qk_parallel_for(threads, 1, 0, dot_worker, &g);
}

/* ---- BFMMLA (M > 4): per block, a work item's tiles decoded once into panels ----
   Panel of a tile-block: [quad q][row pair rp][2 rows][4 k] BF16, the BFMMLA operand of rows
   2rp, 2rp+1 at k = 4q..4q+3 (zipped from two BFDOT chunks). A register tile is 4 row pairs
   of x (8 rows) by 4 row pairs of the weight (8 columns): 16 accumulators, each the 2 x 2
   outputs (x row 2i + a, weight row 2c + b) at lane 2a + b. */
#define ITEM_TILES 4
#define GEMM_MC 128 /* rows per pass over an item's blocks (even) */
#define RPB 4       /* x row pairs per register tile */
#define PANEL_WORDS (QK_MX_BLOCK * TILE)
#define WP (ITEM_TILES * TILE / 2)   /* column pairs per item */

typedef struct mm_job {
    const qk_linear_call *c;
    const bf16_layout *l;
    const act_bf16 *x;
    int64_t items, next;
    float *bufs;            /* per worker: run and total [2][GEMM_MC / 2][WP][4], then panels */
    int64_t buf_floats, slot;
} mm_job;

static void decode_panel(const uint8_t *blk, int exact, uint8x16_t sub, uint16_t *panel)
{
    for (int qd = 0; qd < QK_MX_BLOCK / 4; qd++) {
        uint16x8_t a[4], b[4];
        dec_chunk(blk + 32 * (2 * qd), exact, sub, a);
        dec_chunk(blk + 32 * (2 * qd + 1), exact, sub, b);
        for (int v = 0; v < 4; v++) {   /* rows 4v..4v+3: pairs (2v, 2v+1) of the tile */
            const uint32x4_t a32 = vreinterpretq_u32_u16(a[v]), b32 = vreinterpretq_u32_u16(b[v]);
            vst1q_u16(panel + (qd * 8 + 2 * v) * 8, vreinterpretq_u16_u32(vzip1q_u32(a32, b32)));
            vst1q_u16(panel + (qd * 8 + 2 * v + 1) * 8, vreinterpretq_u16_u32(vzip2q_u32(a32, b32)));
        }
    }
}

/* x row pairs P0 .. P0+RP over one half (row pairs 4h .. 4h+3) of a tile's panel; swv: the
   half's 4 column-pair exponent vectors (sw of rows 2c, 2c+1, 2c, 2c+1, offsets folded in);
   run: the row pairs' running sums at the half's first column pair, row pair stride WP */
INLINE void mm_micro(const mm_job *g, const uint16_t *panel, int h, const int32x4_t *swv,
                     float *run, int64_t P0, int64_t j, const int RP, const int pow2)
{
    const act_bf16 *x = g->x;
    const int64_t kb = g->c->w->kb;
    float32x4_t acc[RPB][4];
    for (int i = 0; i < RP; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = vdupq_n_f32(0.0f);
    const uint16_t *xa = x->xt + (P0 * x->nq + j * (QK_MX_BLOCK / 4)) * 8;
#pragma GCC unroll 2
    for (int qd = 0; qd < QK_MX_BLOCK / 4; qd++) {
        bfloat16x8_t b[4];
        for (int c = 0; c < 4; c++) b[c] = vreinterpretq_bf16_u16(vld1q_u16(panel + (qd * 8 + 4 * h + c) * 8));
        for (int i = 0; i < RP; i++) {
            const bfloat16x8_t a = vreinterpretq_bf16_u16(vld1q_u16(xa + (i * x->nq + qd) * 8));
            for (int c = 0; c < 4; c++) acc[i][c] = vbfmmlaq_f32(acc[i][c], a, b[c]);
        }
    }
    for (int i = 0; i < RP; i++) {
        const int32x4_t exv = vld1q_s32(x->exq + ((P0 + i) * kb + j) * 4);
        for (int c = 0; c < 4; c++)
            run_add(run + (i * WP + c) * 4, acc[i][c], vaddq_s32(swv[c], exv), pow2);
    }
}

static void mm_item(const mm_job *g, int64_t t0, int nt, float *run, float *total, uint16_t *panel)
{
    const qk_linear_call *c = g->c;
    const bf16_layout *l = g->l;
    const act_bf16 *x = g->x;
    const int64_t M = c->M, kb = c->w->kb;
    const uint8x16_t sub = vld1q_u8(subnormal_bf16);
    const size_t sums = sizeof(float) * (size_t)(GEMM_MC / 2 * WP * 4);
    for (int64_t mc = 0; mc < M; mc += GEMM_MC) {
        const int64_t me = M - mc < GEMM_MC ? M : mc + GEMM_MC;
        const int64_t Pc = mc / 2, Pe = (me + 1) / 2;
        memset(run, 0, sums);
        memset(total, 0, sums);
        for (int64_t j = 0; j < kb; j++) {
            /* per tile: 8 column-pair exponent vectors, for the f32 and the pow2 scaling */
            int32x4_t swv[ITEM_TILES][8], swv127[ITEM_TILES][8];
            for (int t = 0; t < nt; t++) {
                const uint8_t *blk = l->codes + (t0 + t) * l->tile_bytes + j * BLK_BYTES;
                const int exact = l->flags[(t0 + t) * kb + j];
                decode_panel(blk + TILE, exact, sub, panel + t * PANEL_WORDS);
                int32x4_t s[4];
                scales16(blk, wexp(exact), s);
                for (int v = 0; v < 4; v++) {   /* lanes (r0, r1, r2, r3) -> (r0, r1, r0, r1), (r2, r3, r2, r3) */
                    const int64x2_t s64 = vreinterpretq_s64_s32(s[v]);
                    swv[t][2 * v] = vreinterpretq_s32_s64(vdupq_laneq_s64(s64, 0));
                    swv[t][2 * v + 1] = vreinterpretq_s32_s64(vdupq_laneq_s64(s64, 1));
                    swv127[t][2 * v] = vaddq_s32(swv[t][2 * v], vdupq_n_s32(127));
                    swv127[t][2 * v + 1] = vaddq_s32(swv[t][2 * v + 1], vdupq_n_s32(127));
                }
            }
            for (int64_t P0 = Pc; P0 < Pe; P0 += RPB) {
                const int rp = (int)(Pe - P0 < RPB ? Pe - P0 : RPB);
                int p2 = 1;
                for (int64_t m = 2 * P0; m < 2 * (P0 + rp) && m < me; m++) p2 &= x->pow2[m];
                for (int t = 0; t < nt; t++)
                    for (int h = 0; h < 2; h++) {
                        const uint16_t *pt = panel + t * PANEL_WORDS;
                        float *rt = run + ((P0 - Pc) * WP + t * 8 + 4 * h) * 4;
#define MMD(RPv)                                                                             \
    if (rp == RPv) {                                                                        \
        if (p2) mm_micro(g, pt, h, swv127[t] + 4 * h, rt, P0, j, RPv, 1);                   \
        else mm_micro(g, pt, h, swv[t] + 4 * h, rt, P0, j, RPv, 0);                         \
        continue;                                                                           \
    }
                        MMD(4) MMD(3) MMD(2) MMD(1)
#undef MMD
                    }
            }
            if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
                for (int64_t P = 0; P < Pe - Pc; P++) {
                    float *r = run + P * WP * 4, *s = total + P * WP * 4;
                    for (int i = 0; i < nt * 8; i++) {
                        vst1q_f32(s + 4 * i, vaddq_f32(vld1q_f32(s + 4 * i), vld1q_f32(r + 4 * i)));
                        vst1q_f32(r + 4 * i, vdupq_n_f32(0.0f));
                    }
                }
        }
        for (int64_t m = mc; m < me; m++) {
            char *orow = c->out + qk_rows_offset(&c->outr, m);
            const int64_t P = m / 2 - Pc, a = m % 2;
            for (int t = 0; t < nt; t++) {
                float v[TILE];
                for (int cp = 0; cp < 8; cp++) {
                    const int64_t o = ((P * WP) + t * 8 + cp) * 4 + 2 * a;
                    v[2 * cp] = total[o] + run[o];
                    v[2 * cp + 1] = total[o + 1] + run[o + 1];
                }
                const int64_t n0 = (t0 + t) * TILE;
                store16(orow, c->odt, n0, c->N - n0, c->bias, v);
            }
        }
    }
}

static void mm_worker(const void *ctx, int64_t s0, int64_t s1)
{
    mm_job *g = (mm_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    const size_t sums = (size_t)(GEMM_MC / 2 * WP * 4);
    float *state = g->bufs + __atomic_fetch_add(&g->slot, 1, __ATOMIC_RELAXED) * g->buf_floats;
    for (;;) {
        const int64_t it = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED);
        if (it >= g->items) break;
        const int64_t t0 = it * ITEM_TILES;
        const int nt = (int)(g->l->tiles - t0 < ITEM_TILES ? g->l->tiles - t0 : ITEM_TILES);
        mm_item(g, t0, nt, state, state + sums, (uint16_t *)(void *)(state + 2 * sums));
    }
}

static qk_status run_mm(const qk_linear_call *c, const bf16_layout *l, const act_bf16 *x)
{
    mm_job g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.l = l;
    g.x = x;
    g.items = (l->tiles + ITEM_TILES - 1) / ITEM_TILES;
    g.buf_floats = 2 * (GEMM_MC / 2 * WP * 4) + ITEM_TILES * PANEL_WORDS / 2;
    const double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    int64_t threads = flops < 4e6 ? 1 : qk_threads();
    if (threads > g.items) threads = g.items;
    g.bufs = (float *)qk_linear_alloc((size_t)(threads * g.buf_floats) * sizeof(float));
    if (!g.bufs) return QK_ERR_NOMEM;
    qk_parallel_for(threads, 1, 0, mm_worker, &g);
    qk_linear_free(g.bufs);
    return QK_OK;
}

static qk_status bf16_run(const qk_linear_call *c)
{
    const bf16_layout *l = (const bf16_layout *)c->w->layout;
    const int mm = c->M > MAX_M;
    act_bf16 x;
    qk_status st = act_make(c, l, mm, &x);
    if (st) return st;
    if (mm) st = run_mm(c, l, &x);
    else run_dot(c, l, &x);
    act_free(&x);
    return st;
}

const qk_linear_impl qk_linear_neon_bf16 = {"neon-bf16", bf16_prepare, bf16_release, bf16_run};
