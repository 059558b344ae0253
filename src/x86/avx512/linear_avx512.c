/* AVX-512 + AVX512-BF16 MXFP8 W8A8 linear: mxfp8_linear_avx512_bf16.
 *
 * Prepared weight (about 1.03 bytes per element): tiles of 16 rows (one f32 lane per row);
 * per tile, super-blocks of 4 blocks (128 K): 64 bytes of scales (block i's 16 row scales
 * at 16i) then 4 x 512 bytes of codes. A block's codes are 8 chunks of 64 bytes covering
 * k0 = 4c .. 4c+3; row r holds bytes 4r..4r+3 = w[k0], w[k0+2], w[k0+1], w[k0+3], so that
 * the low bytes of the 16-bit words are the dpbf16 pairs (k0, k0+1) of the 16 rows and the
 * high bytes the pairs (k0+2, k0+3). K is padded with zero codes to a multiple of 128 and
 * N with zero rows to a multiple of 16; the padding lives only here. E4M3 subnormal codes
 * are stored as zero and listed per (tile, block) as corrections (corr, flagged by a byte).
 *
 * Decode: E4M3 -> BF16 by a shift and a mask gives dec(w)·2^-120 exactly for every code but
 * the subnormals (their BF16 would be subnormal, which vdpbf16ps reads as zero); those are
 * zero in the codes and each kernel adds their products into the block's sum from the
 * corrections (the GEMM panel writes them into its unbiased BF16 instead). x is quantized per row by
 * the provider set's quantizer and decoded to BF16 dec(qx)·2^64. Every product is then
 * exact and normal in f32 (|x~ w~| in [2^-71, 2^82]), so vdpbf16ps loses nothing to its
 * flushing; each block is summed into a fresh accumulator, scaled with one rounding by
 * vscalefps (2^(sx + sw - 254) with the decode offsets folded in: no overflow or underflow
 * on the way, whatever the scale bytes), and added to a running sum that is flushed into
 * the total every 16 blocks (GEMV) or every k-chunk (GEMM): the f32 summation depth of an
 * output stays below 32 + 16 + kb/8, inside mxfp8.md's 2^-16 relative bound.
 *
 * Paths (by the weight, then by the row; measured on the 2-core Zen 4 of 2026-12-03, see
 * src/targets/x86-64-v4.c):
 *   a foldable weight (every row's block scales within 2^FOLD_SPAN over its nonzero blocks),
 *     every M: the folded kernel (fk_*): a group of 4 tiles (M <= 3) or 2 (M >= 4) is
 *     streamed once and decoded in registers per group of up to FK_MM rows (a 16-block chunk
 *     stays in L1 for the next row group); x is folded (its block scales in its BF16
 *     exponents, once per call) and each weight block's sum is scaled and added by one FMA.
 *     Every row is summed in the same order whatever M and the row groups, so a row's result
 *     does not depend on the rows beside it. A row it cannot fold (NaN/Inf, or block scales
 *     spanning more than 2^FK_SPAN) is then computed alone by the exact GEMV. It matches the
 *     exact GEMV at M = 1..3 (both bound by the weight stream) and beat it at M = 4, and
 *     beat the exact GEMM and an earlier folded BF16-panel GEMM from M = 5 to 512.
 *     From M = PK_MIN_M on, the folded panel GEMM (pk_*) gives the same bits faster: each
 *     panel of 4 tiles is decoded once per call and super-block (block scales folded into
 *     the BF16 exponents, exact), and a register tile runs over it for all the item's rows
 *     (2026-12-06, Zen 4, a 3 x 4 tile with its running sums in registers, M = 512:
 *     0.88-0.95x the folded kernel's time; M = 64 and 80 0.97-1.05x, so it started at 96).
 *     2026-12-07, Zen 5: a 4 x 4 tile with the running sums in L1 (16 vdpbf16ps chains)
 *     runs M = 512 in 0.93-0.96x the 3 x 4 tile's time, and from M = 32 on it beat the
 *     folded kernel: M = 32 0.94-1.00x, 48 0.88-0.99x, 64 0.82-0.90x (M = 16: 1.02-1.04x).
 *     Once the folded kernel streamed each tile's codes whole (fk_worker, 2026-12-07) it ran
 *     M = 32..47 in 0.87-1.01x the panel GEMM's time and M = 48 / 64 in 0.99-1.03x /
 *     1.01-1.09x, so the panel GEMM starts at 48.
 *   another weight: the exact GEMV above for M <= 4, one pass over the weight per group of up
 *     to 4 rows; for M > 4 the exact GEMM: per k-chunk each work item's panels of 3 tiles are
 *     decoded once into BF16 and a 4 x 48 register tile runs over them, with the per-block
 *     scaling above.
 * Every kernel's product is exact and normal in f32, so vdpbf16ps' flushing never applies;
 * the depths of the f32 sums are given at each kernel, inside mxfp8.md's 2^-16 bound for K
 * up to about 47 000 (the spec's shapes have K <= 17 408). Outputs do not depend on the
 * thread count, nor, for a foldable weight, on M.
 * Threads take tile groups / items from a shared counter (a preempted thread holds up one
 * chunk, not half the call); no output depends on which thread computed it. */
#include "internal.h"
#include "ref/linear_ref.h"
#include "ref/mx_ref.h"
#include "x86/x86.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#define TILE 16
#define SB_BLOCKS 4
#define SB_BYTES (64 + SB_BLOCKS * 512)
#define X_EXP 64                 /* x~ = dec(qx) · 2^X_EXP */
#define PURE_EXP (-120)          /* pure-shift weight decode: dec(w) · 2^-120 */
#define GROUP_BLOCKS 16          /* GEMV: blocks per running sum before the total */
#define GEMV_PREFETCH SB_BYTES   /* M = 4: bytes ahead in a tile's stream, into L1 (M <= 3: as
                                    the folded kernel's small groups, FK_PREFETCH_SMALL_L2; on
                                    the Zen 4, 2026-12-07, scale span 100: M = 1, 2 0.66-0.97x
                                    the time of this one, M = 3 0.73-0.95x from DRAM, M = 4
                                    1.04-1.09x) */
#define GEMV_MAX_M 4             /* GEMV handles up to this many rows per weight pass */
#define MR 4                     /* GEMM register tile: MR rows x NB tiles */
#define NB 3
#define KCB 8                    /* GEMM k-chunk, in blocks */
#define GEMM_PREFETCH (KCB / SB_BLOCKS * SB_BYTES) /* the next k-chunk (measured: 1.6x at M = 16) */
#define MC 512                   /* GEMM rows per work item */
#define MI 128                   /* GEMM rows per inner block: their x~ k-chunk stays in L2 */
#define PB 8                     /* GEMM panels per work item: decoded k-chunks stay in L2 */
#define FOLD_SPAN 54             /* folded kernel: largest sw span over a weight row's nonzero blocks */
#define FK_MM 16                 /* folded kernel: most rows per register group (see fk_dispatch) */
/* folded kernel: bytes ahead in a tile's stream. Groups of up to 3 rows prefetch two
   super-blocks ahead into L2 only, the larger groups two ahead into L1 and eight ahead into
   L2. The two x86-64-v4 hosts disagree on the small groups (interleaved A/B, 2 threads,
   weights from DRAM):
   - 2-core Zen 4 (2026-12-07 evening, builds side by side in one process): one ahead into
     L1 only (what the Zen 5 chose) takes 1.2-1.55x the time of two ahead into L2 only at
     M = 1..3 ((17408, 5120), (5120, 17408)); the L1 hint at 2 or 3 ahead gains little
     (0.92-1.07x), the L2 hint at 2..16 ahead all of it (best at 2..4); cache shapes within 4%.
   - 2-core Zen 5 (2026-12-07 morning): two ahead into L1 and eight into L2 took 1.06-1.26x
     the time of one ahead into L1 only; the L2-only form was not measured there.
   The Zen 4's loss is the larger, so the L2 form stands until a Zen 5 measures it. The
   larger groups: on the Zen 5 their L2 prefetch gains M = 8, 16 14-20%, M = 64 3%; on the
   Zen 4 the L2-only forms (2, 4 or 8 ahead) take 1.04-1.20x at M = 4, 1.0-1.05x at 8 and 16. */
#define FK_PREFETCH_SMALL_L2 (2 * SB_BYTES)
#define FK_PREFETCH (2 * SB_BYTES)
#define FK_PREFETCH_L2 (8 * SB_BYTES)
#define FK_GROUP_MAX 8           /* folded kernel: most tiles per group (L2: x~ chunk + codes + sums) */
#define FK_X_L2_BYTES (1 << 20)  /* folded kernel: x~ up to this size is read from L2 (fk_worker) */
#define FK_SPAN 40               /* folded kernel: largest sx span over a row's nonzero blocks */
#define FK_XOFF 64               /* folded kernel: x~ offset, 2^64 (see the folded kernel) */
#define FK_WOFF 60               /* folded kernel: block scale offset */
#define FK_EOFF (120 - FK_XOFF - FK_WOFF)
#ifndef PK_MIN_M
#define PK_MIN_M 48              /* the folded panel GEMM from this M on (see run_panel) */
#endif

#define INLINE static inline __attribute__((always_inline))

typedef struct avx512_layout {
    int64_t tiles, kbp, tile_bytes;
    uint8_t *codes;                /* [tiles][kbp / 4] super-blocks */
    uint8_t *flags;                /* [tiles][kbp]: 1 = the block had subnormal codes (see corr) */
    int32_t *cw;                   /* [tiles][16]: Cw[n], the row's largest sw - 127 (folding) */
    uint32_t *cstart;              /* [tiles * kbp + 1]: a tile-block's corrections are */
    uint16_t *corr;                /*   corr[cstart[i] .. cstart[i+1]) (CORR_* fields) */
    int fold;                      /* every row's scale span fits the folded kernel (FOLD_SPAN) */
} avx512_layout;

/* A subnormal code (m·2^-9, m = 1..7) is stored as 0 in the codes, so that every block
   decodes by the pure shift (whose BF16 of a subnormal code vdpbf16ps would read as zero),
   and listed as a correction: element kk of the block, lane (row in the tile) r, m, sign.
   The kernels add x~[kk] · dec(w) into lane r of the block's sum (apply_corr). Measured
   (5120, 5120), bell-shaped weights with 3% of tile-blocks holding one, M = 512: 70-75 ms
   with those blocks decoded exactly, 68 ms with corrections, 66 ms with no such codes. */
#define CORR(kk, r, m, neg) ((uint16_t)((kk) | (r) << 5 | (m) << 9 | (neg) << 12))
#define CORR_KK(e) ((e) & 31)
#define CORR_R(e) (((e) >> 5) & 15)
#define CORR_M(e) (((e) >> 9) & 7)
#define CORR_NEG(e) ((e) >> 12)

static int e4m3_subnormal(uint8_t code) { return (code & 0x78) == 0 && (code & 0x07) != 0; }

/* ---- prepare ---- */
static qk_status avx512_prepare(qk_mx_weight *w, const uint8_t *q, int64_t qs,
                                const uint8_t *scale, int64_t ss)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    avx512_layout *l = (avx512_layout *)calloc(1, sizeof *l);
    if (!l) return QK_ERR_NOMEM;
    l->tiles = (N + TILE - 1) / TILE;
    l->kbp = (kb + SB_BLOCKS - 1) / SB_BLOCKS * SB_BLOCKS;
    l->tile_bytes = l->kbp / SB_BLOCKS * SB_BYTES;
    const int64_t nblk = l->tiles * l->kbp;
    /* counts of subnormal codes per tile-block, then their prefix sums */
    uint32_t *cnt = (uint32_t *)calloc((size_t)nblk + 1, sizeof *cnt);
    if (!cnt) {
        free(l);
        return QK_ERR_NOMEM;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            if (e4m3_subnormal(q[n * qs + k])) cnt[(n / TILE) * l->kbp + k / QK_MX_BLOCK + 1]++;
    for (int64_t i = 0; i < nblk; i++) cnt[i + 1] += cnt[i];
    const size_t ncorr = cnt[nblk];
    size_t cb = (size_t)(l->tiles * l->tile_bytes), fb = (size_t)nblk;
    size_t wb = (size_t)(l->tiles * TILE) * sizeof(int32_t), stb = ((size_t)nblk + 1) * sizeof(uint32_t);
    fb = (fb + 3) & ~(size_t)3;   /* keep cw and cstart 4-byte aligned */
    l->codes = (uint8_t *)qk_linear_alloc_weights(cb + fb + wb + stb + ncorr * 2);
    if (!l->codes) {
        free(cnt);
        free(l);
        return QK_ERR_NOMEM;
    }
    memset(l->codes, 0, cb + fb + wb);
    l->flags = l->codes + cb;
    l->cw = (int32_t *)(void *)(l->codes + cb + fb);
    l->cstart = (uint32_t *)(void *)(l->codes + cb + fb + wb);
    l->corr = (uint16_t *)(void *)(l->codes + cb + fb + wb + stb);
    memcpy(l->cstart, cnt, stb);
    l->fold = 1;
    for (int64_t n = 0; n < N; n++) {
        const int64_t t = n / TILE, r = n % TILE;
        uint8_t *tile = l->codes + t * l->tile_bytes;
        int smax = -1, smin = 256;
        for (int64_t b = 0; b < kb; b++) {
            const int64_t k0 = b * QK_MX_BLOCK, kn = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
            int nonzero = 0;
            for (int64_t kk = 0; kk < kn; kk++) nonzero |= q[n * qs + k0 + kk] & 0x7F;
            if (!nonzero) continue;       /* a zero block's scale scales nothing */
            const int sb = scale[n * ss + b];
            smax = sb > smax ? sb : smax;
            smin = sb < smin ? sb : smin;
        }
        l->cw[n] = smax < 0 ? 0 : smax - 127;
        if (smax >= 0 && smax - smin > FOLD_SPAN) l->fold = 0;
        for (int64_t b = 0; b < kb; b++) {
            uint8_t *sbk = tile + (b / SB_BLOCKS) * SB_BYTES;
            const int64_t i = b % SB_BLOCKS, tb = t * l->kbp + b;
            sbk[16 * i + r] = scale[n * ss + b];
            uint8_t *blk = sbk + 64 + i * 512;
            const int64_t k0 = b * QK_MX_BLOCK, kn = K - k0 < QK_MX_BLOCK ? K - k0 : QK_MX_BLOCK;
            for (int64_t kk = 0; kk < kn; kk++) {
                const uint8_t code = q[n * qs + k0 + kk];
                const int64_t o = kk % 4, pos = ((o & 1) << 1) | (o >> 1);
                if (e4m3_subnormal(code)) {
                    l->corr[cnt[tb]++] = CORR(kk, r, code & 7, code >> 7);
                    l->flags[tb] = 1;
                } else {
                    blk[(kk / 4) * 64 + 4 * r + pos] = code;
                }
            }
        }
    }
    free(cnt);
    w->layout = l;
    w->layout_bytes = cb + fb + wb + stb + ncorr * 2;
    return QK_OK;
}

static void avx512_release(qk_mx_weight *w)
{
    avx512_layout *l = (avx512_layout *)w->layout;
    if (l) qk_linear_free_weights(l->codes);
    free(l);
    w->layout = NULL;
}

/* ---- decode ---- */
/* The 16-bit words of v hold two codes; these give BF16 of the high / low byte's code. */
INLINE __m512i dec_hi_pure(__m512i v, __m512i m87f0)
{
    return _mm512_and_si512(_mm512_srai_epi16(v, 4), m87f0);
}
INLINE __m512i dec_lo_pure(__m512i v, __m512i m87f0)
{
    return _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 4), m87f0);
}
/* unbiased: dec(w) · 2^0, the pure decode with 120 added to the exponent of every nonzero
   code (subnormal codes are zero in the layout; the GEMM panel writes them from corr) */
INLINE __m512i dec_hi_unbiased(__m512i v, __m512i m87f0)
{
    const __m512i p = dec_hi_pure(v, m87f0);
    return _mm512_mask_add_epi16(p, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7800)), p,
                                 _mm512_set1_epi16(0x3C00));
}
INLINE __m512i dec_lo_unbiased(__m512i v, __m512i m87f0)
{
    const __m512i p = dec_lo_pure(v, m87f0);
    return _mm512_mask_add_epi16(p, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x0078)), p,
                                 _mm512_set1_epi16(0x3C00));
}

/* Weight scale exponents of a tile-block as f32 lanes, decode offset folded in. */
INLINE __m512 weight_exp(const uint8_t *scales16, int exact)
{
    __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)scales16));
    return _mm512_cvtepi32_ps(_mm512_add_epi32(s, _mm512_set1_epi32(exact ? -127 : -127 - PURE_EXP)));
}

INLINE __m512bh as_bh(__m512i v) { return (__m512bh)v; }

INLINE __m512 bcast_pair(const uint16_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_castsi512_ps(_mm512_set1_epi32(v));
}
INLINE __m512 dp(__m512 acc, __m512i w, __m512 x) { return _mm512_dpbf16_ps(acc, as_bh(w), (__m512bh)x); }
/* acc += w . (the BF16 pair at p, broadcast): the broadcast folded into the instruction's
   memory operand (compilers emit a separate vpbroadcastd, an extra uop per product pair) */
INLINE __m512 dp_bcast(__m512 acc, __m512i w, const uint16_t *p)
{
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

/* A block sum's corrections (the tile-block's subnormal codes, zero in the codes):
   lane r += x~[kk] · dec(w) · 2^-120, the product the pure decode would have given. Exact:
   x~ is 0 or at least 2^15 (folded) / 2^55 (X_EXP), so every factor and the product stay
   normal; a zeroed code added nothing in the dot products, so the block's f32 sum takes
   no more roundings than it had. */
/* Out of line, on accumulators in memory: the kernels' loops keep their registers (a
   call there would make every vector register caller-saved). rows sums at sum[r * sstride],
   their x~ blocks at xb + r * xstride. f: the lanes' power-of-two factor on that product (1,
   or the folded panel GEMM's block scales, whose sums carry them), exact. */
static __attribute__((noinline)) void apply_corr(const avx512_layout *l, int64_t tb, int rows,
                                                 __m512 *sum, int sstride, const uint16_t *xb,
                                                 int64_t xstride, __m512 f)
{
    for (uint32_t i = l->cstart[tb]; i < l->cstart[tb + 1]; i++) {
        const unsigned e = l->corr[i];
        const float w = (CORR_NEG(e) ? -0x1p-9f : 0x1p-9f) * (float)CORR_M(e);   /* dec(w) */
        const __mmask16 lane = (__mmask16)(1u << CORR_R(e));
        for (int r = 0; r < rows; r++) {
            const float v = qk_bf16_to_f32(xb[r * xstride + CORR_KK(e)]) * 0x1p-120f * w;
            sum[r * sstride] = _mm512_mask_add_ps(sum[r * sstride], lane, sum[r * sstride],
                                                  _mm512_mul_ps(_mm512_set1_ps(v), f));
        }
    }
}

/* ---- output ---- */
static void store16(char *orow, qk_dtype odt, int64_t n0, int64_t valid, const float *bias,
                    __m512 v)
{
    const __mmask16 k = valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1u);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + n0));
    if (odt == QK_DTYPE_F32) {
        _mm512_mask_storeu_ps((float *)orow + n0, k, v);
    } else if (odt == QK_DTYPE_BF16) {
        __m512i u = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
        _mm256_mask_storeu_epi16((uint16_t *)orow + n0, k,
                                 _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    } else {
        _mm256_mask_storeu_epi16((uint16_t *)orow + n0, k,
                                 _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/* ---- the call's activations: x~ rows [M][kp] BF16 and exponents [M][kbp] f32 ---- */
typedef struct act512 {
    const qk_linear_call *c;
    qk_linear_act a;
    uint16_t *xt;     /* [M][kp] */
    float *ex;        /* [M][kbp]: sx - 127 - X_EXP */
    int64_t kp, kbp;
    int fold;         /* also the folded rows: */
    uint16_t *xf;     /* [kbp][M][32] (block-major): dec(qx) · 2^(sx - 127 - cx[m] + FK_XOFF), BF16
                         (zero for exact rows) */
    int32_t *cx;      /* [M]: the row's largest sx - 127 over its nonzero blocks */
    uint8_t *exact;   /* [M]: 1 = the row cannot be folded (NaN/Inf, or a scale span over FK_SPAN) */
} act512;

/* BF16 of dec(q[k]) · 2^e for one block's 32 codes: the table t gives dec(i) · 2^X_EXP (the
   exact kernels' x~) or · 2^0 (the folded kernels', which add e = s[j] - 127 - cx + FK_XOFF
   to the exponent of every nonzero element: fold); t holds 128 BF16 entries, i < 128. */
INLINE __m512i x_decode_block(const uint8_t *q, const __m512i t[4], const int fold, int e)
{
    __m512i i = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)q));
    __m512i lo = _mm512_permutex2var_epi16(t[0], i, t[1]);
    __m512i hi = _mm512_permutex2var_epi16(t[2], i, t[3]);
    __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(i, _mm512_set1_epi16(0x40)), lo, hi);
    if (fold)
        mag = _mm512_mask_add_epi16(mag, _mm512_test_epi16_mask(i, _mm512_set1_epi16(0x7F)), mag,
                                    _mm512_set1_epi16((short)(e * 128)));
    __m512i sign = _mm512_slli_epi16(_mm512_and_si512(i, _mm512_set1_epi16(0x80)), 8);
    return _mm512_or_si512(mag, sign);
}

INLINE void x_tab(const uint16_t *tab, __m512i t[4])
{
    for (int i = 0; i < 4; i++) t[i] = _mm512_loadu_si512(tab + 32 * i);
}

/* Whether row m can be folded, and its cx: the largest sx - 127 over the row's nonzero
   blocks; the row is folded when its span is at most FK_SPAN and it holds no NaN (a NaN/Inf
   row, or a wider span, is left to the exact kernels). */
static int fold_row_cx(const act512 *x, int64_t m, int32_t *cx)
{
    const uint8_t *q = x->a.q + m * x->a.qstride, *s = x->a.scale + m * x->a.sstride;
    int smax = -1, smin = 256, bad = 0;
    for (int64_t j = 0; j < x->kbp; j++) {
        const __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(q + j * QK_MX_BLOCK)),
                                           _mm256_set1_epi8(0x7F));
        bad |= _mm256_cmpeq_epi8_mask(v, _mm256_set1_epi8(0x7F)) != 0;
        if (_mm256_testz_si256(v, v)) continue;   /* a zero block's scale scales nothing */
        bad |= s[j] == 0xFF;
        smax = s[j] > smax ? s[j] : smax;
        smin = s[j] < smin ? s[j] : smin;
    }
    bad |= smax >= 0 && smax - smin > FK_SPAN;
    *cx = bad || smax < 0 ? 0 : smax - 127;
    return !bad;
}

#define AD_ROWS 16               /* act_decode_range: rows decoded together, block by block */
static void act_decode_range(const void *ctx, int64_t m0, int64_t m1)
{
    const act512 *x = (const act512 *)ctx;
    const qk_mx_quantize_row_fn quant = qk_provider_avx512.ops.mx_quantize.fn;
    if (!x->fold) qk_linear_act_rows(x->c, quant, &x->a, m0, m1);
    /* each table is made only when a row of this range needs it (a folded call rarely has
       an exact row) */
    uint16_t tab[128];
    __m512i t[4];
    if (x->fold) {
        for (int i = 0; i < 128; i++) tab[i] = qk_f32_to_bf16(qk_e4m3_to_f32((uint8_t)i));
        x_tab(tab, t);
        /* AD_ROWS rows at a time, block by block: block j of rows m .. m + 15 is one
           contiguous 1 KiB of xf. Row by row, each store went to another page (M x 64 bytes
           apart): 4x the time (2026-12-07, Zen 5, M = 512, K = 4304: 0.42 -> 0.11 ms, 5-6%
           of the call) */
        const int64_t os = x->a.M * QK_MX_BLOCK;
        for (int64_t mc = m0; mc < m1; mc += AD_ROWS) {
            const int64_t me = m1 - mc < AD_ROWS ? m1 : mc + AD_ROWS;
            /* the rows are quantized here, just before their decode, which then reads their
               codes from L1/L2 (one pass over the rows instead of two, one parallel region) */
            qk_linear_act_rows(x->c, quant, &x->a, mc, me);
            for (int64_t m = mc; m < me; m++) x->exact[m] = (uint8_t)!fold_row_cx(x, m, &x->cx[m]);
            for (int64_t j = 0; j < x->kbp; j++) {
                uint16_t *o = x->xf + j * os + mc * QK_MX_BLOCK;
                for (int64_t m = mc; m < me; m++, o += QK_MX_BLOCK) {
                    if (x->exact[m]) {   /* the folded kernels' rows: zero */
                        _mm512_storeu_si512(o, _mm512_setzero_si512());
                        continue;
                    }
                    const uint8_t *q = x->a.q + m * x->a.qstride, *s = x->a.scale + m * x->a.sstride;
                    _mm512_storeu_si512(o, x_decode_block(q + j * QK_MX_BLOCK, t, 1,
                                                          (int)s[j] - 127 - (x->cx[m] - FK_XOFF)));
                }
            }
        }
    }
    int have_exact = 0;
    for (int64_t m = m0; m < m1; m++) {
        if (x->fold && !x->exact[m]) continue;
        if (!have_exact) {
            for (int i = 0; i < 128; i++) tab[i] = qk_f32_to_bf16(ldexpf(qk_e4m3_to_f32((uint8_t)i), X_EXP));
            x_tab(tab, t);
            have_exact = 1;
        }
        const uint8_t *q = x->a.q + m * x->a.qstride, *s = x->a.scale + m * x->a.sstride;
        for (int64_t j = 0; j < x->kbp; j++)
            _mm512_storeu_si512(x->xt + m * x->kp + j * QK_MX_BLOCK, x_decode_block(q + j * QK_MX_BLOCK, t, 0, 0));
        float *e = x->ex + m * x->kbp;
        for (int64_t j = 0; j < x->kbp; j++) e[j] = (float)((int)s[j] - 127 - X_EXP);
    }
}

static void act512_free(act512 *x)
{
    qk_linear_free(x->xt);
    qk_linear_free(x->ex);
    qk_linear_free(x->xf);
    qk_linear_free(x->cx);
    qk_linear_act_free(&x->a);
}

static qk_status act512_make(const qk_linear_call *c, int64_t kbp, int fold, act512 *x)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    x->kbp = kbp;
    x->kp = kbp * QK_MX_BLOCK;
    x->fold = fold;
    qk_status st = qk_linear_act_alloc(c, x->kp, kbp, &x->a);
    if (st) return st;
    x->xt = (uint16_t *)qk_linear_alloc((size_t)(c->M * x->kp) * 2);
    x->ex = (float *)qk_linear_alloc((size_t)(c->M * kbp) * 4);
    if (fold) {
        x->xf = (uint16_t *)qk_linear_alloc((size_t)(c->M * x->kp) * 2);
        x->cx = (int32_t *)qk_linear_alloc((size_t)c->M * (sizeof(int32_t) + 1));
        x->exact = (uint8_t *)(x->cx + c->M);
    }
    if (!x->xt || !x->ex || (fold && (!x->xf || !x->cx))) {
        act512_free(x);
        return QK_ERR_NOMEM;
    }
    /* per row: the quantization (x in, codes out) and the decode (codes in, x~ out) */
    qk_parallel_for(c->M, c->K * ((int64_t)qk_dtype_size(c->xdt) + 1) + x->kp * (fold ? 6 : 3), 256 << 10,
                    act_decode_range, x);
    return QK_OK;
}

/* ---- GEMV: MM rows, TT tiles at once, A accumulators per (row, tile) ---- */
typedef struct gemv_job {
    const qk_linear_call *c;
    const avx512_layout *l;
    const act512 *x;
    int64_t m0;
    int MM, TT;
    int64_t groups, threads, next; /* tile groups, handed out by qk_linear_take_groups */
} gemv_job;

INLINE void gemv_block(const int MM, const int TT, const int A, __m512 acc[GEMV_MAX_M][4][2],
                       const uint8_t *const blk[4], const uint16_t *const xj[GEMV_MAX_M],
                       __m512i m87f0)
{
    /* accumulator indices must be compile-time constants (or acc lives in memory) */
    for (int c0 = 0; c0 < 8; c0 += A)
        for (int a = 0; a < A; a++) {
            const int c = c0 + a;
            __m512i lo[4], hi[4];
            for (int t = 0; t < TT; t++) {
                if (MM <= 3)
                    _mm_prefetch((const char *)blk[t] + 64 * c + FK_PREFETCH_SMALL_L2, _MM_HINT_T1);
                else
                    _mm_prefetch((const char *)blk[t] + 64 * c + GEMV_PREFETCH, _MM_HINT_T0);
                __m512i v = _mm512_loadu_si512(blk[t] + 64 * c);
                lo[t] = dec_lo_pure(v, m87f0);
                hi[t] = dec_hi_pure(v, m87f0);
            }
            for (int m = 0; m < MM; m++) {
                __m512 xa = bcast_pair(xj[m] + 4 * c), xb = bcast_pair(xj[m] + 4 * c + 2);
                for (int t = 0; t < TT; t++) acc[m][t][a] = dp(acc[m][t][a], lo[t], xa);
                for (int t = 0; t < TT; t++) acc[m][t][a] = dp(acc[m][t][a], hi[t], xb);
            }
        }
}

INLINE void gemv_tiles(const gemv_job *g, int64_t t0, const int MM, const int TT, const int A)
{
    const qk_linear_call *c = g->c;
    const avx512_layout *l = g->l;
    const act512 *x = g->x;
    const __m512i m87f0 = _mm512_set1_epi16((short)0x87F0);
    __m512 acc[GEMV_MAX_M][4][2], run[GEMV_MAX_M][4];
    float total[GEMV_MAX_M][4][16];
    for (int m = 0; m < MM; m++)
        for (int t = 0; t < TT; t++) {
            for (int a = 0; a < A; a++) acc[m][t][a] = _mm512_setzero_ps();
            run[m][t] = _mm512_setzero_ps();
            _mm512_storeu_ps(total[m][t], _mm512_setzero_ps());
        }
    const uint8_t *tile[4], *flags[4];
    for (int t = 0; t < TT; t++) {
        tile[t] = l->codes + (t0 + t) * l->tile_bytes;
        flags[t] = l->flags + (t0 + t) * l->kbp;
    }
    const float *ex[GEMV_MAX_M];
    for (int m = 0; m < MM; m++) ex[m] = x->ex + (g->m0 + m) * x->kbp;
    for (int64_t j = 0; j < l->kbp; j++) {
        const int64_t sbo = (j / SB_BLOCKS) * SB_BYTES, i = j % SB_BLOCKS;
        const uint8_t *blk[4];
        for (int t = 0; t < TT; t++) blk[t] = tile[t] + sbo + 64 + i * 512;
        const uint16_t *xj[GEMV_MAX_M];
        for (int m = 0; m < MM; m++) xj[m] = x->xt + (g->m0 + m) * x->kp + j * QK_MX_BLOCK;
        gemv_block(MM, TT, A, acc, blk, xj, m87f0);
        for (int t = 0; t < TT; t++) {
            __m512 ew = weight_exp(tile[t] + sbo + 16 * i, 0);
            if (flags[t][j]) {   /* into the first accumulator of each row */
                __m512 a0[GEMV_MAX_M];
                for (int m = 0; m < MM; m++) a0[m] = acc[m][t][0];
                apply_corr(l, (t0 + t) * l->kbp + j, MM, a0, 1, xj[0], xj[MM > 1] - xj[0],
                           _mm512_set1_ps(1.0f));
                for (int m = 0; m < MM; m++) acc[m][t][0] = a0[m];
            }
            for (int m = 0; m < MM; m++) {
                __m512 b = acc[m][t][0];
                for (int a = 1; a < A; a++) b = _mm512_add_ps(b, acc[m][t][a]);
                __m512 e = _mm512_add_ps(ew, _mm512_set1_ps(ex[m][j]));
                run[m][t] = _mm512_add_ps(run[m][t], _mm512_scalef_ps(b, e));
                for (int a = 0; a < A; a++) acc[m][t][a] = _mm512_setzero_ps();
            }
        }
        if (j % GROUP_BLOCKS == GROUP_BLOCKS - 1)
            for (int m = 0; m < MM; m++)
                for (int t = 0; t < TT; t++) {
                    _mm512_storeu_ps(total[m][t],
                                     _mm512_add_ps(_mm512_loadu_ps(total[m][t]), run[m][t]));
                    run[m][t] = _mm512_setzero_ps();
                }
    }
    for (int m = 0; m < MM; m++) {
        char *orow = c->out + qk_rows_offset(&c->outr, g->m0 + m);
        for (int t = 0; t < TT; t++) {
            const int64_t n0 = (t0 + t) * TILE;
            __m512 v = _mm512_add_ps(_mm512_loadu_ps(total[m][t]), run[m][t]);
            store16(orow, c->odt, n0, c->N - n0, c->bias, v);
        }
    }
}

/* The tile-group width per MM (registers: MM*TT*A accumulators + MM*TT running sums). */
static int gemv_tt(int MM) { return MM == 1 ? 4 : MM == 2 ? 4 : MM == 3 ? 3 : 2; }

static void gemv_dispatch(const gemv_job *g, int64_t t0, int TT)
{
#define GT(MMv, TTv, Av) case TTv: gemv_tiles(g, t0, MMv, TTv, Av); return;
    switch (g->MM) {
    case 1: switch (TT) { GT(1, 1, 2) GT(1, 2, 2) GT(1, 3, 2) GT(1, 4, 2) } break;
    case 2: switch (TT) { GT(2, 1, 1) GT(2, 2, 1) GT(2, 3, 1) GT(2, 4, 1) } break;
    case 3: switch (TT) { GT(3, 1, 1) GT(3, 2, 1) GT(3, 3, 1) } break;
    default: switch (TT) { GT(4, 1, 1) GT(4, 2, 1) } break;
    }
#undef GT
}

/* Threads take runs of tile groups from a shared counter (qk_linear_take_groups); which
   thread computes a tile never changes its result. */
static void gemv_worker(const void *ctx, int64_t s0, int64_t s1)
{
    gemv_job *g = (gemv_job *)(uintptr_t)ctx;
    (void)s0;
    (void)s1;
    const int64_t tiles = g->l->tiles;
    int64_t b, e;
    while (qk_linear_take_groups(&g->next, g->groups, g->threads, &b, &e)) {
        for (int64_t grp = b; grp < e; grp++) {
            const int64_t t0 = grp * g->TT;
            const int64_t tt = tiles - t0 < g->TT ? tiles - t0 : g->TT;
            gemv_dispatch(g, t0, (int)tt);
        }
    }
}

/* rows [mb, me) */
static void run_gemv(const qk_linear_call *c, const avx512_layout *l, const act512 *x, int64_t mb,
                     int64_t me)
{
    for (int64_t m0 = mb; m0 < me; m0 += GEMV_MAX_M) {
        gemv_job g;
        memset(&g, 0, sizeof g);
        g.c = c;
        g.l = l;
        g.x = x;
        g.m0 = m0;
        g.MM = (int)(me - m0 < GEMV_MAX_M ? me - m0 : GEMV_MAX_M);
        g.TT = gemv_tt(g.MM);
        g.groups = (l->tiles + g.TT - 1) / g.TT;
        int64_t threads = g.groups * g.TT * l->tile_bytes < (192 << 10) ? 1 : qk_threads();
        if (threads > g.groups) threads = g.groups;
        g.threads = threads;
        qk_parallel_for(threads, 1, 0, gemv_worker, &g);
    }
}

/* ---- the folded kernel's output ---- */
/* out = acc · 2^(e + Cw[n]) (one rounding, only when the result is subnormal), + bias */
static void store_scaled(const qk_linear_call *c, const avx512_layout *l, int64_t m, int32_t e,
                         int64_t tile, __m512 acc)
{
    const __m512 ev = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_loadu_si512(l->cw + tile * TILE),
                                                          _mm512_set1_epi32(e)));
    store16(c->out + qk_rows_offset(&c->outr, m), c->odt, tile * TILE, c->N - tile * TILE, c->bias,
            _mm512_scalef_ps(acc, ev));
}

/* ---- folded kernel: each weight chunk decoded once in registers for up to FK_MM rows ---- */
/* x~ = dec(qx) · 2^(sx - 127 - cx + FK_XOFF) (x folded, its row span at most FK_SPAN, so
   x~ in [2^15, 2^73]); w~ = dec(w) · 2^-120 (the pure decode; subnormal codes from the corrections).
   Every product is then exact and normal (>= 2^-111, its last bit >= 2^-114; a subnormal
   code's, added from the corrections, >= 2^-114), and a block's
   sum, scaled by f = 2^(sw - 127 - Cw + FK_WOFF) (normal for
   a weight span up to FOLD_SPAN) in the FMA that adds it to the running sum, is exact and
   normal too ([2^-108, 2^27]): one rounding per block, as in the exact kernels, but one
   FMA where they take three operations. out = total · 2^(cx + Cw + FK_EOFF). */

/* f for a tile-block's 16 row scales: biased exponent sw - Cw + FK_WOFF, kept in
   [1, 254] so that a zero block (whose scale scales nothing) multiplies its zero by a finite f */
INLINE __m512 fk_scale(const uint8_t *scales16, __m512i cw)
{
    __m512i e = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)scales16)), cw);
    e = _mm512_add_epi32(e, _mm512_set1_epi32(FK_WOFF));
    e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(1)), _mm512_set1_epi32(254));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

/* One block of rows [0, MM) x TT tiles. A row's x~ pair is broadcast once into a register where
   TT >= 2 tiles use it, and folded into each instruction's memory operand (dp_bcast) where one
   tile does: measured on the Zen 5 (2026-12-07, interleaved A/B, (5120, 5120)), the register
   broadcast ran M = 6..8 (8 x 2 and 6 x 2 tiles) in 0.87-0.91x the time of the folded one, M = 2..5
   within 3% either way; for the 16 x 1 tile (M = 9..16) it took 1.00-1.04x. */
INLINE void fk_block(const int MM, const int TT, __m512 acc[FK_MM][4], const uint8_t *const blk[4],
                     const uint16_t *xj, __m512i m87f0)
{
    for (int c = 0; c < 8; c++) {
        __m512i lo[4], hi[4];
        for (int t = 0; t < TT; t++) {
            if (MM <= 3) {
                _mm_prefetch((const char *)blk[t] + 64 * c + FK_PREFETCH_SMALL_L2, _MM_HINT_T1);
            } else {
                _mm_prefetch((const char *)blk[t] + 64 * c + FK_PREFETCH, _MM_HINT_T0);
                _mm_prefetch((const char *)blk[t] + 64 * c + FK_PREFETCH_L2, _MM_HINT_T1);
            }
            const __m512i v = _mm512_loadu_si512(blk[t] + 64 * c);
            lo[t] = dec_lo_pure(v, m87f0);
            hi[t] = dec_hi_pure(v, m87f0);
        }
        for (int r = 0; r < MM; r++)
            if (TT >= 2) {
                const __m512 xa = bcast_pair(xj + r * QK_MX_BLOCK + 4 * c);
                const __m512 xb = bcast_pair(xj + r * QK_MX_BLOCK + 4 * c + 2);
                for (int t = 0; t < TT; t++) {
                    acc[r][t] = dp(acc[r][t], lo[t], xa);
                    acc[r][t] = dp(acc[r][t], hi[t], xb);
                }
            } else {
                acc[r][0] = dp_bcast(acc[r][0], lo[0], xj + r * QK_MX_BLOCK + 4 * c);
                acc[r][0] = dp_bcast(acc[r][0], hi[0], xj + r * QK_MX_BLOCK + 4 * c + 2);
            }
    }
}

/* Rows [m, m+MM) x tiles [t0, t0+TT), blocks [j0, j0+nj) (nj <= GROUP_BLOCKS: the chunk's
   codes stay in L1 for the next row group); total [r][rowf] += the chunk's sum (tile t at 16 t). Summation
   depth of an output: 32 + GROUP_BLOCKS + kb / GROUP_BLOCKS. */
INLINE void fk_micro(const int MM, const int TT, const avx512_layout *l, const act512 *x, int64_t m,
                     int64_t t0, int64_t j0, int64_t nj, float *total, size_t rowf)
{
    const __m512i m87f0 = _mm512_set1_epi16((short)0x87F0);
    __m512 acc[FK_MM][4];
    /* the running sums [r][t][16] in L1, one load and store per block: the registers hold
       the block sums of up to 16 rows x 1 tile or 8 x 2 */
    float run[FK_MM * 4 * 16] __attribute__((aligned(64)));
    for (int r = 0; r < MM; r++)
        for (int t = 0; t < TT; t++) {
            acc[r][t] = _mm512_setzero_ps();
            _mm512_store_ps(run + (r * 4 + t) * 16, acc[r][t]);
        }
    const uint8_t *tile[4], *flags[4];
    __m512i cw[4];
    for (int t = 0; t < TT; t++) {
        tile[t] = l->codes + (t0 + t) * l->tile_bytes;
        flags[t] = l->flags + (t0 + t) * l->kbp;
        cw[t] = _mm512_loadu_si512(l->cw + (t0 + t) * TILE);
    }
    for (int64_t j = j0; j < j0 + nj; j++) {
        const int64_t sbo = (j / SB_BLOCKS) * SB_BYTES, i = j % SB_BLOCKS;
        const uint8_t *blk[4];
        for (int t = 0; t < TT; t++) blk[t] = tile[t] + sbo + 64 + i * 512;
        const uint16_t *xj = x->xf + (j * x->a.M + m) * QK_MX_BLOCK;   /* block-major */
        fk_block(MM, TT, acc, blk, xj, m87f0);
        for (int t = 0; t < TT; t++) {
            const __m512 f = fk_scale(tile[t] + sbo + 16 * i, cw[t]);
            if (flags[t][j]) {
                __m512 a[FK_MM];
                for (int r = 0; r < MM; r++) a[r] = acc[r][t];
                apply_corr(l, (t0 + t) * l->kbp + j, MM, a, 1, xj, QK_MX_BLOCK, _mm512_set1_ps(1.0f));
                for (int r = 0; r < MM; r++) acc[r][t] = a[r];
            }
            for (int r = 0; r < MM; r++) {
                float *rp = run + (r * 4 + t) * 16;
                _mm512_store_ps(rp, _mm512_fmadd_ps(acc[r][t], f, _mm512_load_ps(rp)));
                acc[r][t] = _mm512_setzero_ps();
            }
        }
    }
    for (int r = 0; r < MM; r++)
        for (int t = 0; t < TT; t++) {
            float *o = total + (size_t)r * rowf + (size_t)t * 16;
            _mm512_store_ps(o, _mm512_add_ps(_mm512_load_ps(o), _mm512_load_ps(run + (r * 4 + t) * 16)));
        }
}

/* up to 3 rows: up to 4 tiles at once; 4..8 rows: 2; 9..16 rows: one tile (registers: the
   MM x TT block sums; the running sums are in L1) */
static void fk_dispatch(int MM, int TT, const avx512_layout *l, const act512 *x, int64_t m,
                        int64_t t0, int64_t j0, int64_t nj, float *total, size_t rowf)
{
#define FK4(MMv)                                                                            \
    case MMv:                                                                              \
        switch (TT) {                                                                      \
        case 4: fk_micro(MMv, 4, l, x, m, t0, j0, nj, total, rowf); return;                      \
        case 3: fk_micro(MMv, 3, l, x, m, t0, j0, nj, total, rowf); return;                      \
        case 2: fk_micro(MMv, 2, l, x, m, t0, j0, nj, total, rowf); return;                      \
        default: fk_micro(MMv, 1, l, x, m, t0, j0, nj, total, rowf); return;                     \
        }
#define FK2(MMv)                                                                            \
    case MMv:                                                                              \
        if (TT == 2) fk_micro(MMv, 2, l, x, m, t0, j0, nj, total, rowf);                         \
        else fk_micro(MMv, 1, l, x, m, t0, j0, nj, total, rowf);                                 \
        return;
#define FK1(MMv)                                                                            \
    case MMv: fk_micro(MMv, 1, l, x, m, t0, j0, nj, total, rowf); return;
    switch (MM) {
    FK4(1) FK4(2) FK4(3) FK2(4) FK2(5) FK2(6) FK2(7) FK2(8) FK1(9) FK1(10) FK1(11) FK1(12) FK1(13) FK1(14) FK1(15) default: FK1(16)
    }
#undef FK1
#undef FK2
#undef FK4
}

/* Tiles per group (and per call when M <= 4): 4 for M <= 3 (the weight stream is the limit:
   more tiles in flight), 2 for M = 4. From M = 5 on (one or two tiles per call; where x~
   fits in L2 each tile's whole stream in turn, else the group's tiles share each k-chunk of
   x~ while it is in L2, see fk_worker) up to FK_GROUP_MAX, keeping at least 8 groups per
   thread for the shared counter to balance. */
static int fk_group(int64_t M, int64_t tiles, int64_t threads)
{
    if (M <= 4) return M <= 3 ? 4 : 2;
    int64_t g = tiles / (8 * threads);
    return g < 2 ? 2 : g > FK_GROUP_MAX ? FK_GROUP_MAX : (int)g;
}

typedef struct fk_job {
    const qk_linear_call *c;
    const avx512_layout *l;
    const act512 *x;
    int G;                         /* tiles per group (fk_group) */
    int64_t groups, threads, next; /* tile groups, handed out by qk_linear_take_groups */
    float *scratch;                /* per thread: total [M][G][16] */
} fk_job;

static void fk_worker(const void *ctx, int64_t s0, int64_t s1)
{
    fk_job *g = (fk_job *)(uintptr_t)ctx;
    (void)s1;
    const qk_linear_call *c = g->c;
    const avx512_layout *l = g->l;
    const act512 *x = g->x;
    const int G = g->G;
    const size_t rowf = (size_t)G * 16;
    float *total = g->scratch + (size_t)s0 * (size_t)c->M * rowf;
    /* M > 4: ceil(M / FK_MM) row groups, split evenly (M = 17: 8 + 9, not 16 + 1), and two
       tiles per call for groups of up to 8 rows (twice the chains; the decode per dot product
       depends on the rows only). 2026-12-07, Zen 5: one group of 16 rows (16 chains, each
       code decoded once for 16 rows) runs M = 16 in 0.82-0.88x the time of two groups of 8
       (M = 13: 0.83x); two tiles for 7 and 8 rows, M = 7 0.96x, M = 8 within 3%. */
    const int64_t ng = (c->M + FK_MM - 1) / FK_MM;
    const int ttr = (c->M + ng - 1) / ng <= 8 ? 2 : 1;
    /* The order over a group's tiles and k-chunks (each tile sums its chunks in order either
       way: the same bits). Where x~ (M x K x 2 bytes) fits in L2, each run of ttr tiles takes
       its whole stream, chunk after chunk (the chunk's codes in L1 for the ng row groups), so
       the prefetches stay ahead of one stream; else every tile of the group takes chunk j0
       before any takes chunk j0 + 1, sharing x~'s chunk while it is in L2. 2026-12-07, Zen 5,
       interleaved A/B: the first order runs M = 5..31 in 0.84-0.97x the time of the second
       ((1152, 4304) .. (5120, 17408)), but M = 31 (5120, 17408) (x~ 1.08 MB) in 1.03x. */
    const int span = c->M * c->K * 2 <= FK_X_L2_BYTES ? ttr : G;
    int64_t b, e;
    while (qk_linear_take_groups(&g->next, g->groups, g->threads, &b, &e)) {
        for (int64_t grp = b; grp < e; grp++) {
            const int64_t t0 = grp * G;
            const int tt = (int)(l->tiles - t0 < G ? l->tiles - t0 : G);
            memset(total, 0, (size_t)c->M * rowf * sizeof(float));
            if (c->M <= 4)   /* one row group, the group's tiles at once */
                for (int64_t j0 = 0; j0 < l->kbp; j0 += GROUP_BLOCKS)
                    fk_dispatch((int)c->M, tt, l, x, 0, t0, j0,
                                l->kbp - j0 < GROUP_BLOCKS ? l->kbp - j0 : GROUP_BLOCKS, total, rowf);
            else             /* ng row groups of near-equal size, ttr tiles at a time */
                for (int ts = 0; ts < tt; ts += span)
                    for (int64_t j0 = 0; j0 < l->kbp; j0 += GROUP_BLOCKS) {
                        const int64_t nj = l->kbp - j0 < GROUP_BLOCKS ? l->kbp - j0 : GROUP_BLOCKS;
                        for (int t = ts; t < ts + span && t < tt; t += ttr)
                            for (int64_t gi = 0; gi < ng; gi++) {
                                const int64_t m = gi * c->M / ng;
                                const int mm = (int)((gi + 1) * c->M / ng - m);
                                fk_dispatch(mm, tt - t < ttr ? tt - t : ttr, l, x, m, t0 + t, j0,
                                            nj, total + (size_t)m * rowf + (size_t)t * 16, rowf);
                            }
                    }
            for (int64_t m = 0; m < c->M; m++) {
                if (x->exact[m]) continue;     /* the exact GEMV writes this row */
                for (int t = 0; t < tt; t++)
                    store_scaled(c, l, m, x->cx[m] + FK_EOFF, t0 + t,
                                 _mm512_load_ps(total + (size_t)m * rowf + (size_t)t * 16));
            }
        }
    }
}

static qk_status run_folded(const qk_linear_call *c, const avx512_layout *l, const act512 *x)
{
    fk_job g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.l = l;
    g.x = x;
    int64_t threads = l->tiles * l->tile_bytes * c->M < (192 << 10) ? 1 : qk_threads();
    const int G = fk_group(c->M, l->tiles, threads);
    g.G = G;
    g.groups = (l->tiles + G - 1) / G;
    if (threads > g.groups) threads = g.groups;
    g.threads = threads;
    g.scratch = (float *)qk_linear_alloc((size_t)threads * (size_t)c->M * (size_t)G * 16 * sizeof(float));
    if (!g.scratch) return QK_ERR_NOMEM;
    qk_parallel_for(threads, 1, 0, fk_worker, &g);
    qk_linear_free(g.scratch);
    return QK_OK;
}

/* ---- work items from a shared counter (a preempted thread holds up one item): each thread,
   slot s0, runs the next item with its own slot_bytes of scratch ---- */
typedef void (*item_fn)(const void *job, int64_t item, char *scratch);
typedef struct item_queue {
    item_fn run;
    const void *job;
    int64_t items, next;
    char *scratch;                 /* slots x slot_bytes */
    size_t slot_bytes;
} item_queue;

static void queue_worker(const void *ctx, int64_t s0, int64_t s1)
{
    item_queue *q = (item_queue *)(uintptr_t)ctx;
    (void)s1;
    for (;;) {
        const int64_t i = __atomic_fetch_add(&q->next, 1, __ATOMIC_RELAXED);
        if (i >= q->items) break;
        q->run(q->job, i, q->scratch + (size_t)s0 * q->slot_bytes);
    }
}

static qk_status queue_run(item_fn run, const void *job, int64_t items, int64_t slots, size_t slot_bytes)
{
    item_queue q = {run, job, items, 0, NULL, slot_bytes};
    if (slots > items) slots = items;
    if (slots < 1) slots = 1;
    q.scratch = (char *)qk_linear_alloc(slot_bytes * (size_t)slots);
    if (!q.scratch) return QK_ERR_NOMEM;
    qk_parallel_for(slots, 1, 0, queue_worker, &q);
    qk_linear_free(q.scratch);
    return QK_OK;
}

/* ---- folded panel GEMM (prefill): the folded kernel's sums, the weight decoded once per call ----
   The folded kernel decodes each weight chunk once per group of up to FK_MM rows: at M = 512 that
   is 32 decodes of every code, and its 16 x 1 register tile loads a broadcast per product pair.
   This path decodes a panel of PK_NT tiles, one super-block of K at a time, into L1-sized BF16
   scratch with each block's f folded into the exponents (w~ · f: a power of two, exact and
   normal, as in the folded kernel), and runs a PK_MR x PK_NT register tile over it for all the
   item's rows. It gives the folded kernel's bits: a block's sum of products scaled by f is f
   times that kernel's sum (every product and partial sum stays normal, so each rounding
   commutes with the power of two), its corrections are added after the block's products as
   there, run + sum is the FMA run + sum · f, and total += run closes each GROUP_BLOCKS group;
   only where the running sums live differs (memory, per block, here). */
#ifndef PK_MR
#define PK_MR 4                  /* rows per register tile (its sums: PK_MR x PK_NT registers) */
#endif
#define PK_NT 4                  /* tiles per panel (register tile: PK_MR x PK_NT) */
#ifndef PK_MC
#define PK_MC 512                /* rows per work item: run + total (256 KiB) stay in L2 */
#endif
#define PK_PANEL_WORDS ((size_t)SB_BLOCKS * 16 * PK_NT * 32)   /* one super-block of a panel */

/* Super-block sb of tiles [t0, t0 + nt) into pw [block][pair][tile][32]: BF16 of dec(w) · 2^-120 · f
   (f = 2^k, the folded kernel's fk_scale, added to the exponent of every nonzero code). */
static void pk_decode(const avx512_layout *l, int64_t t0, int nt, int64_t sb, uint16_t *pw)
{
    const __m512i m87f0 = _mm512_set1_epi16((short)0x87F0), m7fff = _mm512_set1_epi16(0x7FFF);
    for (int t = 0; t < nt; t++) {
        const uint8_t *s = l->codes + (t0 + t) * l->tile_bytes + sb * SB_BYTES;
        const __m512i cw = _mm512_loadu_si512(l->cw + (t0 + t) * TILE);
        for (int i = 0; i < SB_BLOCKS; i++) {
            /* k = sw - Cw + FK_WOFF - 127, in [6, 60] where the block is nonzero (FOLD_SPAN);
               a zero block has no nonzero code to add it to, so it is only kept in range */
            __m512i k = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 16 * i))), cw);
            k = _mm512_add_epi32(k, _mm512_set1_epi32(FK_WOFF - 127));
            k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_setzero_si512()), _mm512_set1_epi32(127));
            const __m512i kv = _mm512_or_si512(_mm512_slli_epi32(k, 7), _mm512_slli_epi32(k, 23));
            const uint8_t *blk = s + 64 + i * 512;
            uint16_t *o = pw + ((size_t)i * 16 * PK_NT + (size_t)t) * 32;
            for (int c = 0; c < 8; c++) {
                _mm_prefetch((const char *)blk + 64 * c + SB_BYTES, _MM_HINT_T0);
                const __m512i v = _mm512_loadu_si512(blk + 64 * c);
                __m512i lo = dec_lo_pure(v, m87f0), hi = dec_hi_pure(v, m87f0);
                lo = _mm512_mask_add_epi16(lo, _mm512_test_epi16_mask(lo, m7fff), lo, kv);
                hi = _mm512_mask_add_epi16(hi, _mm512_test_epi16_mask(hi, m7fff), hi, kv);
                _mm512_store_si512(o + (size_t)(2 * c) * PK_NT * 32, lo);
                _mm512_store_si512(o + (size_t)(2 * c + 1) * PK_NT * 32, hi);
            }
        }
    }
}

/* Rows [m, m + RM) x the panel's TN tiles, super-block sb (blocks j0 .. j0 + 3): per block, the sum
   of its products (and corrections), run += it; run [r][64] carries a group's running sums from
   one block to the next, and total [r][64] += run closes the group. The running sums stay in
   memory (L1), so that all the registers but the panel's TN and the broadcast hold the
   RM x TN sums of products: the vdpbf16ps latency needs at least 12 independent sums at
   2 per cycle (16 reach the peak on the Zen 5, 12 0.92 of it). xb: x~ of block j0, row m
   (block-major, xjs apart). */
INLINE void pk_micro(const int RM, const int TN, const int CORR, const avx512_layout *l, int64_t t0,
                     int64_t j0, const uint16_t *xb, int64_t xjs, const uint16_t *pw, float *run,
                     float *total)
{
    /* a group's first super-block starts its sums from zeros */
    static const float zeros[PK_MR * 64] __attribute__((aligned(64)));
    /* groups are whole super-blocks (GROUP_BLOCKS is a multiple of SB_BLOCKS, as is kbp) */
    const int close = (j0 + SB_BLOCKS) % GROUP_BLOCKS == 0 || j0 + SB_BLOCKS == l->kbp;
    __m512 acc[PK_MR][PK_NT];
    for (int i = 0; i < SB_BLOCKS; i++) {
        const int64_t j = j0 + i;
        const uint16_t *xi = xb + i * xjs, *pi = pw + (size_t)i * 16 * PK_NT * 32;
        for (int r = 0; r < RM; r++)
            for (int t = 0; t < TN; t++) acc[r][t] = _mm512_setzero_ps();
        for (int p = 0; p < 16; p++) {
            __m512i b[PK_NT];
            for (int t = 0; t < TN; t++) b[t] = _mm512_load_si512(pi + ((size_t)p * PK_NT + (size_t)t) * 32);
            for (int r = 0; r < RM; r++) {
                const __m512 a = bcast_pair(xi + r * QK_MX_BLOCK + 2 * p);
                for (int t = 0; t < TN; t++) acc[r][t] = dp(acc[r][t], b[t], a);
            }
        }
        for (int t = 0; CORR && t < TN; t++)
            if (l->flags[(t0 + t) * l->kbp + j]) {
                const uint8_t *sbk = l->codes + (t0 + t) * l->tile_bytes + (j / SB_BLOCKS) * SB_BYTES;
                const __m512 f = fk_scale(sbk + 16 * i, _mm512_loadu_si512(l->cw + (t0 + t) * TILE));
                __m512 a[PK_MR];
                for (int r = 0; r < RM; r++) a[r] = acc[r][t];
                apply_corr(l, (t0 + t) * l->kbp + j, RM, a, 1, xi, QK_MX_BLOCK, f);
                for (int r = 0; r < RM; r++) acc[r][t] = a[r];
            }
        const float *src = i ? run : j0 % GROUP_BLOCKS ? run : zeros;
        for (int r = 0; r < RM; r++)
            for (int t = 0; t < TN; t++) {
                const __m512 sum = _mm512_add_ps(_mm512_load_ps(src + r * 64 + t * 16), acc[r][t]);
                if (close && i == SB_BLOCKS - 1) {
                    /* the first group's close adds to +0 without reading total (no memset) */
                    float *tp = total + r * 64 + t * 16;
                    const __m512 t0v = j0 < GROUP_BLOCKS ? _mm512_setzero_ps() : _mm512_load_ps(tp);
                    _mm512_store_ps(tp, _mm512_add_ps(t0v, sum));
                } else {
                    _mm512_store_ps(run + r * 64 + t * 16, sum);
                }
            }
    }
}

/* CORR: the super-block holds corrections (a separate instance: the call in the corrections'
   path would make the sums caller-saved, and the compiler keeps them in memory throughout) */
static void pk_dispatch(int RM, int TN, int CORR, const avx512_layout *l, int64_t t0, int64_t j0,
                        const uint16_t *xb, int64_t xjs, const uint16_t *pw, float *run, float *total)
{
#define PKT(RMv, Cv)                                                                               \
    case RMv:                                                                                      \
        switch (TN) {                                                                              \
        case 4: pk_micro(RMv, 4, Cv, l, t0, j0, xb, xjs, pw, run, total); return;                  \
        case 3: pk_micro(RMv, 3, Cv, l, t0, j0, xb, xjs, pw, run, total); return;                  \
        case 2: pk_micro(RMv, 2, Cv, l, t0, j0, xb, xjs, pw, run, total); return;                  \
        default: pk_micro(RMv, 1, Cv, l, t0, j0, xb, xjs, pw, run, total); return;                 \
        }
#if PK_MR == 3
#define PKS(Cv) switch (RM) { PKT(1, Cv) PKT(2, Cv) default: PKT(3, Cv) }
#elif PK_MR == 4
#define PKS(Cv) switch (RM) { PKT(1, Cv) PKT(2, Cv) PKT(3, Cv) default: PKT(4, Cv) }
#elif PK_MR == 5
#define PKS(Cv) switch (RM) { PKT(1, Cv) PKT(2, Cv) PKT(3, Cv) PKT(4, Cv) default: PKT(5, Cv) }
#elif PK_MR == 6
#define PKS(Cv) switch (RM) { PKT(1, Cv) PKT(2, Cv) PKT(3, Cv) PKT(4, Cv) PKT(5, Cv) default: PKT(6, Cv) }
#else
#error "pk_dispatch has instances for 3 to 6 rows"
#endif
    if (CORR) PKS(1) else PKS(0)
#undef PKS
#undef PKT
}

/* rows [m0, m1) of the panel's TN tiles, super-block j0: the full PK_MR-row tiles through one
   instance (one dispatch per super-block, not per tile), the last partial tile through pk_dispatch */
INLINE void pk_rows_tn(const int TN, const int CORR, const avx512_layout *l, int64_t t0, int64_t j0,
                       const uint16_t *xj, int64_t xjs, int64_t m0, int64_t m1, const uint16_t *pw,
                       float *run, float *total)
{
    int64_t m = m0;
    for (; m + PK_MR <= m1; m += PK_MR) {
        /* the next row tile's x~ (a line per row and block) into L1 while this one runs: x~ is
           re-read from L3 once per panel, and the weight stream evicts it there. 2026-12-07,
           Zen 5, interleaved A/B: M = 512 (5120, 17408) (x~ 17.8 MB) 0.58-0.93x the time,
           (5120, 5120) 0.96x when the host's L3 is contended, within 1% either way when
           it is quiet; the next tile's running sums as well: no further gain. Past m1 the
           address is the next block's rows or past the buffer: integer arithmetic, as a
           prefetch does not fault. */
        for (int i = 0; i < SB_BLOCKS; i++)
            for (int r = 0; r < PK_MR; r++)
                _mm_prefetch((const char *)((uintptr_t)xj + (uintptr_t)(((m + PK_MR + r) * QK_MX_BLOCK + i * xjs) * (int64_t)sizeof *xj)),
                             _MM_HINT_T0);
        pk_micro(PK_MR, TN, CORR, l, t0, j0, xj + m * QK_MX_BLOCK, xjs, pw, run + (m - m0) * 64, total + (m - m0) * 64);
    }
    if (m < m1)
        pk_dispatch((int)(m1 - m), TN, CORR, l, t0, j0, xj + m * QK_MX_BLOCK, xjs, pw, run + (m - m0) * 64,
                    total + (m - m0) * 64);
}
static __attribute__((noinline)) void pk_rows(int TN, int CORR, const avx512_layout *l, int64_t t0, int64_t j0,
                                              const uint16_t *xj, int64_t xjs, int64_t m0, int64_t m1,
                                              const uint16_t *pw, float *run, float *total)
{
#define PKR(TNv)                                                                                   \
    case TNv:                                                                                      \
        if (CORR) pk_rows_tn(TNv, 1, l, t0, j0, xj, xjs, m0, m1, pw, run, total);                 \
        else pk_rows_tn(TNv, 0, l, t0, j0, xj, xjs, m0, m1, pw, run, total);                      \
        return;
    switch (TN) { PKR(4) PKR(3) PKR(2) default: PKR(1) }
#undef PKR
}

typedef struct pk_job {
    const qk_linear_call *c;
    const avx512_layout *l;
    const act512 *x;
    int64_t panels;
} pk_job;

/* item: panel item % panels, rows from PK_MC (item / panels); scratch: pw, run [PK_MC][64],
   total [PK_MC][64] */
static void pk_item(const void *job, int64_t item, char *scratch)
{
    const pk_job *g = (const pk_job *)job;
    const qk_linear_call *c = g->c;
    const avx512_layout *l = g->l;
    const act512 *x = g->x;
    const int64_t panel = item % g->panels, m0 = item / g->panels * PK_MC;
    const int64_t m1 = c->M - m0 < PK_MC ? c->M : m0 + PK_MC, t0 = panel * PK_NT;
    const int nt = (int)(l->tiles - t0 < PK_NT ? l->tiles - t0 : PK_NT);
    uint16_t *pw = (uint16_t *)(void *)scratch;
    float *run = (float *)(void *)(scratch + PK_PANEL_WORDS * 2), *total = run + (size_t)PK_MC * 64;
    for (int64_t sb = 0; sb < l->kbp / SB_BLOCKS; sb++) {
        pk_decode(l, t0, nt, sb, pw);
        const int64_t j0 = sb * SB_BLOCKS;
        int corr = 0;   /* the panel's tile-blocks in this super-block: any with corrections */
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < SB_BLOCKS; i++) corr |= l->flags[(t0 + t) * l->kbp + j0 + i];
        pk_rows(nt, corr, l, t0, j0, x->xf + j0 * c->M * QK_MX_BLOCK, c->M * QK_MX_BLOCK, m0, m1, pw, run, total);
    }
    for (int64_t m = m0; m < m1; m++) {
        if (x->exact[m]) continue;     /* the exact GEMV writes this row */
        for (int t = 0; t < nt; t++)
            store_scaled(c, l, m, x->cx[m] + FK_EOFF, t0 + t,
                         _mm512_load_ps(total + (size_t)(m - m0) * 64 + (size_t)t * 16));
    }
}

static qk_status run_panel(const qk_linear_call *c, const avx512_layout *l, const act512 *x)
{
    const pk_job g = {c, l, x, (l->tiles + PK_NT - 1) / PK_NT};
    return queue_run(pk_item, &g, g.panels * ((c->M + PK_MC - 1) / PK_MC), qk_threads(),
                     PK_PANEL_WORDS * 2 + (size_t)2 * PK_MC * 64 * sizeof(float));
}

/* ---- GEMM ---- */
typedef struct gemm_job {
    const qk_linear_call *c;
    const avx512_layout *l;
    const act512 *x;
    int64_t panels, pb, nblocks, mchunks;
} gemm_job;

#define PANEL_WORDS ((size_t)KCB * 16 * NB * 32)         /* BF16 words of one panel */
#define PANEL_EXPS ((size_t)KCB * NB * 16)               /* f32 weight exponents */

/* Decodes tiles [t0, t0+nt) x blocks [j0, j0+nj) into pw [jj][pair][tile][32] and
   pe [jj][tile][16]. A block with corrections is decoded unbiased (dec(w) · 2^0, where its
   subnormal codes are normal BF16) and its subnormal codes written from corr. */
static void decode_panel(const avx512_layout *l, int64_t t0, int nt, int64_t j0, int64_t nj,
                         uint16_t *pw, float *pe)
{
    const __m512i m87f0 = _mm512_set1_epi16((short)0x87F0);
    for (int t = 0; t < nt; t++) {
        const uint8_t *tile = l->codes + (t0 + t) * l->tile_bytes;
        for (int64_t jj = 0; jj < nj; jj++) {
            const int64_t j = j0 + jj, sbo = (j / SB_BLOCKS) * SB_BYTES, i = j % SB_BLOCKS;
            const int64_t tb = (t0 + t) * l->kbp + j;
            const uint8_t *blk = tile + sbo + 64 + i * 512;
            const int flagged = l->flags[tb];
            uint16_t *o = pw + ((size_t)jj * 16 * NB + (size_t)t) * 32;
            for (int c = 0; c < 8; c++) {
                _mm_prefetch((const char *)blk + 64 * c + GEMM_PREFETCH, _MM_HINT_T1);
                __m512i v = _mm512_loadu_si512(blk + 64 * c), lo, hi;
                if (flagged) {
                    lo = dec_lo_unbiased(v, m87f0);
                    hi = dec_hi_unbiased(v, m87f0);
                } else {
                    lo = dec_lo_pure(v, m87f0);
                    hi = dec_hi_pure(v, m87f0);
                }
                _mm512_store_si512(o + (size_t)(2 * c) * NB * 32, lo);
                _mm512_store_si512(o + (size_t)(2 * c + 1) * NB * 32, hi);
            }
            /* element kk of lane r: pair 2 (kk / 4) + (kk / 2) % 2, its word kk % 2 */
            for (uint32_t ci = flagged ? l->cstart[tb] : 0; flagged && ci < l->cstart[tb + 1]; ci++) {
                const unsigned e = l->corr[ci], kk = CORR_KK(e);
                const size_t pair = 2 * (kk / 4) + (kk / 2) % 2;
                o[pair * NB * 32 + 2 * CORR_R(e) + kk % 2] =
                    (uint16_t)(qk_f32_to_bf16((float)CORR_M(e) * 0x1p-9f) | CORR_NEG(e) << 15);
            }
            _mm512_store_ps(pe + ((size_t)jj * NB + (size_t)t) * 16,
                            weight_exp(tile + sbo + 16 * i, flagged));
        }
    }
}

/* rows [m, m+RM) x tiles [0, TN) of the panel, blocks [j0, j0+nj): ctot [row][NB*16] += */
INLINE void gemm_micro(const int RM, const int TN, const act512 *x, int64_t m, int64_t j0,
                       int64_t nj, const uint16_t *pw, const float *pe, float *ctot)
{
    __m512 acc[MR][NB], run[MR][NB];
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < TN; t++) run[r][t] = _mm512_setzero_ps();
    const uint16_t *xr[MR];
    const float *er[MR];
    for (int r = 0; r < RM; r++) {
        xr[r] = x->xt + (m + r) * x->kp + j0 * QK_MX_BLOCK;
        er[r] = x->ex + (m + r) * x->kbp + j0;
    }
    for (int64_t jj = 0; jj < nj; jj++) {
        for (int r = 0; r < RM; r++)
            for (int t = 0; t < TN; t++) acc[r][t] = _mm512_setzero_ps();
        const uint16_t *pb = pw + (size_t)jj * 16 * NB * 32;
        for (int p = 0; p < 16; p++) {
            __m512i b[NB];
            for (int t = 0; t < TN; t++)
                b[t] = _mm512_load_si512(pb + ((size_t)p * NB + (size_t)t) * 32);
            for (int r = 0; r < RM; r++) {
                __m512 a = bcast_pair(xr[r] + jj * QK_MX_BLOCK + 2 * p);
                for (int t = 0; t < TN; t++) acc[r][t] = dp(acc[r][t], b[t], a);
            }
        }
        for (int t = 0; t < TN; t++) {
            __m512 ew = _mm512_load_ps(pe + ((size_t)jj * NB + (size_t)t) * 16);
            for (int r = 0; r < RM; r++) {
                __m512 e = _mm512_add_ps(ew, _mm512_set1_ps(er[r][jj]));
                run[r][t] = _mm512_add_ps(run[r][t], _mm512_scalef_ps(acc[r][t], e));
            }
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < TN; t++) {
            float *o = ctot + (size_t)r * NB * 16 + (size_t)t * 16;
            _mm512_store_ps(o, _mm512_add_ps(_mm512_load_ps(o), run[r][t]));
        }
}

static void gemm_micro_dispatch(int RM, int TN, const act512 *x, int64_t m, int64_t j0,
                                int64_t nj, const uint16_t *pw, const float *pe, float *ctot)
{
#define GM(RMv, TNv) case TNv: gemm_micro(RMv, TNv, x, m, j0, nj, pw, pe, ctot); return;
    switch (RM) {
    case 1: switch (TN) { GM(1, 1) GM(1, 2) GM(1, 3) } break;
    case 2: switch (TN) { GM(2, 1) GM(2, 2) GM(2, 3) } break;
    case 3: switch (TN) { GM(3, 1) GM(3, 2) GM(3, 3) } break;
    default: switch (TN) { GM(4, 1) GM(4, 2) GM(4, 3) } break;
    }
#undef GM
}

/* One work item: panels [p0, p0 + np) x rows [m0, m1). Per k-chunk, the item's panels are
   decoded once (they stay in L2) and every block of MI rows (its x~ k-chunk stays in L2)
   runs over them; ctot [panel][row][NB*16] accumulates the k-chunks. */
static void gemm_item(const void *job, int64_t item, char *scratch)
{
    const gemm_job *g = (const gemm_job *)job;
    const qk_linear_call *c = g->c;
    const avx512_layout *l = g->l;
    const int64_t nbk = item % g->nblocks, mchunk = item / g->nblocks;
    const int64_t p0 = nbk * g->pb, np = g->panels - p0 < g->pb ? g->panels - p0 : g->pb;
    const int64_t m0 = mchunk * MC, m1 = c->M - m0 < MC ? c->M : m0 + MC, rows = m1 - m0;
    uint16_t *pw = (uint16_t *)scratch;
    float *pe = (float *)(scratch + (size_t)g->pb * PANEL_WORDS * 2);
    float *ctot = pe + (size_t)g->pb * PANEL_EXPS;
    memset(ctot, 0, (size_t)(np * rows) * NB * 16 * sizeof(float));
    for (int64_t j0 = 0; j0 < l->kbp; j0 += KCB) {
        const int64_t nj = l->kbp - j0 < KCB ? l->kbp - j0 : KCB;
        for (int64_t p = 0; p < np; p++) {
            const int64_t t0 = (p0 + p) * NB;
            const int nt = (int)(l->tiles - t0 < NB ? l->tiles - t0 : NB);
            decode_panel(l, t0, nt, j0, nj, pw + (size_t)p * PANEL_WORDS, pe + (size_t)p * PANEL_EXPS);
        }
        for (int64_t ic = m0; ic < m1; ic += MI) {
            const int64_t ie = m1 - ic < MI ? m1 : ic + MI;
            for (int64_t m = ic; m < ie; m += MR) {
                const int rm = (int)(ie - m < MR ? ie - m : MR);
                for (int64_t p = 0; p < np; p++) {
                    const int64_t t0 = (p0 + p) * NB;
                    const int nt = (int)(l->tiles - t0 < NB ? l->tiles - t0 : NB);
                    float *ct = ctot + (size_t)(p * rows + m - m0) * NB * 16;
                    gemm_micro_dispatch(rm, nt, g->x, m, j0, nj, pw + (size_t)p * PANEL_WORDS,
                                        pe + (size_t)p * PANEL_EXPS, ct);
                }
            }
        }
    }
    for (int64_t p = 0; p < np; p++) {
        const int64_t t0 = (p0 + p) * NB;
        const int nt = (int)(l->tiles - t0 < NB ? l->tiles - t0 : NB);
        for (int64_t m = m0; m < m1; m++) {
            char *orow = c->out + qk_rows_offset(&c->outr, m);
            const float *cr = ctot + (size_t)(p * rows + m - m0) * NB * 16;
            for (int t = 0; t < nt; t++) {
                const int64_t n0 = (t0 + t) * TILE;
                store16(orow, c->odt, n0, c->N - n0, c->bias, _mm512_load_ps(cr + (size_t)t * 16));
            }
        }
    }
}

static qk_status run_gemm(const qk_linear_call *c, const avx512_layout *l, const act512 *x)
{
    gemm_job g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.l = l;
    g.x = x;
    g.panels = (l->tiles + NB - 1) / NB;
    g.mchunks = (c->M + MC - 1) / MC;
    const double work = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    const int64_t threads = work < 4e6 ? 1 : qk_threads();
    /* up to PB panels per item, but at least ~2 items per thread (no output depends on it) */
    g.pb = g.panels / (2 * threads);
    g.pb = g.pb < 1 ? 1 : g.pb > PB ? PB : g.pb;
    if (c->M * x->kp * 2 <= (384 << 10)) g.pb = 1; /* x~ stays in L2 anyway: one panel per item */
    g.nblocks = (g.panels + g.pb - 1) / g.pb;
    const int64_t mc = c->M < MC ? c->M : MC;
    return queue_run(gemm_item, &g, g.nblocks * g.mchunks, threads,
                     ((size_t)g.pb * (PANEL_WORDS * 2 + PANEL_EXPS * 4 + (size_t)mc * NB * 16 * 4) + 63) &
                         ~(size_t)63);
}

static qk_status avx512_run(const qk_linear_call *c)
{
    const avx512_layout *l = (const avx512_layout *)c->w->layout;
    act512 x;
    const int fold = l->fold;
    qk_status st = act512_make(c, l->kbp, fold, &x);
    if (st) return st;
    if (fold) {
        st = c->M >= PK_MIN_M ? run_panel(c, l, &x) : run_folded(c, l, &x);
        for (int64_t m = 0; !st && m < c->M; m++)   /* rows the folded kernel cannot take */
            if (x.exact[m]) run_gemv(c, l, &x, m, m + 1);
    } else if (c->M <= GEMV_MAX_M) {
        run_gemv(c, l, &x, 0, c->M);
    } else {
        st = run_gemm(c, l, &x);
    }
    act512_free(&x);
    return st;
}

const qk_linear_impl qk_linear_avx512 = {"avx512", avx512_prepare, avx512_release, avx512_run};
