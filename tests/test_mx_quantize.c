/* mxfp8.md, "Blocks", "The shared scale of a block", "The elements", "Scale pair layout",
 * and api.md's MXFP8 checks: qk_mx_quantize / qk_mx_dequantize / qk_mx_pack_scale_pairs
 * and every provider's row kernels against a reference written here in double (nearest
 * value by search over a code table built from the bit-field formula), bit for bit. */
#include "harness.h"
#include "internal.h"
#include "ref/mx_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "mx_oracle.h"

/* ---------------------------------------------------------------------------------------
 * Test data
 * ------------------------------------------------------------------------------------- */

static const qk_dtype XDTS[3] = {QK_DTYPE_BF16, QK_DTYPE_F16, QK_DTYPE_F32};
static const qk_dtype ODTS[3] = {QK_DTYPE_F32, QK_DTYPE_F16, QK_DTYPE_BF16};

static void store_elem(void *p, qk_dtype dt, int64_t i, float v)
{
    if (dt == QK_DTYPE_F32) ((float *)p)[i] = v;
    else if (dt == QK_DTYPE_BF16) ((uint16_t *)p)[i] = qk_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = qk_f16_from_f32(v);
}

static float xdt_max(qk_dtype dt) { return dt == QK_DTYPE_F16 ? 65504.0f : FLT_MAX; }

enum { D_GAUSS, D_TIES, D_SATURATE, D_SUBNORMAL, D_ZEROS, D_NONFINITE, D_BITS, D_OUTLIER, D_KINDS };
static const char *const DNAMES[D_KINDS] = {"gauss", "ties", "saturate", "subnormal", "zeros",
                                            "nan-inf", "random-bits", "outlier"};

/* Fills row [0, K) of dtype dt with data of one kind. */
static void fill_row(void *x, qk_dtype dt, int64_t K, int kind, const fmt *f, uint64_t *st)
{
    const int e_lo = dt == QK_DTYPE_F16 ? -20 : -60, e_hi = dt == QK_DTYPE_F16 ? 1 : 60;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        const int64_t n = K - k0 < 32 ? K - k0 : 32;
        const int s = e_lo + (int)(qk_rand_u64(st) % (uint64_t)(e_hi - e_lo)); /* block exponent */
        for (int64_t i = 0; i < n; i++) {
            const uint64_t u = qk_rand_u64(st);
            float v = 0.0f;
            switch (kind) {
            case D_GAUSS:
                v = ldexpf((float)qk_rand_normal(st), s);
                break;
            case D_TIES: {
                /* element 0 pins the block's scale to 2^s (FLOOR and RCEIL agree: 256 * 2^s);
                   the others sit on midpoints between neighbouring codes, or one input ulp off */
                if (i == 0) { v = ldexpf(f->dt == QK_DTYPE_F8_E5M2 ? 32768.0f : 256.0f, s); break; }
                const int c = (int)(u % (uint64_t)f->maxcode);
                double m = 0.5 * (f->table[c] + f->table[c + 1]);
                v = ldexpf((float)m, s);
                const int wig = (int)((u >> 20) % 3);
                if (wig && dt == QK_DTYPE_F32) v = nextafterf(v, wig == 1 ? 0.0f : INFINITY);
                if (wig && dt == QK_DTYPE_BF16) {
                    uint16_t h = qk_f32_to_bf16(v);
                    h = (uint16_t)(h + (wig == 1 ? -1 : 1));
                    uint32_t w = (uint32_t)h << 16;
                    memcpy(&v, &w, 4);
                }
                if ((u >> 30) & 1) v = -v;
                break;
            }
            case D_SATURATE:
                /* magnitudes in [256, 512) * 2^s: FLOOR puts (448, 512) into saturation */
                v = ldexpf(256.0f + (float)(u % 256u) + (float)((u >> 8) & 1) * 0.5f, s);
                if ((u >> 40) & 1) v = -v;
                break;
            case D_SUBNORMAL: {
                /* element formats' subnormal range relative to amax, and input subnormals */
                const int mode = (int)(k0 / 32 % 3);
                if (mode == 0) v = ldexpf((float)(u % 1000u) / 1000.0f, s - (int)((u >> 10) % 24));
                else if (mode == 1) v = ldexpf((float)(u % 255u + 1u), dt == QK_DTYPE_F16 ? -24 : -140 - (int)((u >> 10) % 9));
                else v = i == 0 ? ldexpf(1.0f, s) : ldexpf(1.0f + (float)(u % 8u) / 8.0f, s - 8 - 6 - (int)((u >> 10) % 6));
                if ((u >> 40) & 1) v = -v;
                break;
            }
            case D_ZEROS:
                v = (u & 1) ? -0.0f : 0.0f;
                if ((k0 / 32) % 3 == 2 && (u >> 5) % 7 == 0) v = ldexpf((float)qk_rand_normal(st), s);
                break;
            case D_NONFINITE:
                v = ldexpf((float)qk_rand_normal(st), s);
                if ((k0 / 32) % 4 == 1 && i == (int64_t)((u >> 8) % (uint64_t)n)) v = NAN;
                if ((k0 / 32) % 4 == 2 && (u >> 20) % 16 == 0) v = (u >> 30) & 1 ? -INFINITY : INFINITY;
                break;
            case D_BITS:
                break;
            case D_OUTLIER:
                v = ldexpf((float)qk_rand_normal(st), s);
                if (i == 5) v = ldexpf(3.0f, s + 16);
                break;
            }
            if (kind == D_BITS) {
                if (dt == QK_DTYPE_F32) ((uint32_t *)x)[k0 + i] = (uint32_t)u;
                else ((uint16_t *)x)[k0 + i] = (uint16_t)u;
            } else {
                if (fabsf(v) > xdt_max(dt) && !isinf(v)) v = copysignf(xdt_max(dt), v);
                store_elem(x, dt, k0 + i, v);
            }
        }
    }
}

static const int64_t KS[] = {1, 5, 31, 32, 33, 63, 64, 65, 1152, 4303, 4304, 4305};
enum { NKS = sizeof KS / sizeof KS[0] };

/* rule: 0 FLOOR, 1 RCEIL, 2 MODELSLIM */
static qk_mx_options make_opt(int elem, int rule, int round)
{
    qk_mx_options o;
    o.elem = elem ? QK_DTYPE_F8_E5M2 : QK_DTYPE_F8_E4M3;
    o.scale_rule = rule == 2 ? QK_MX_SCALE_MODELSLIM : rule ? QK_MX_SCALE_RCEIL : QK_MX_SCALE_FLOOR;
    o.round = round ? QK_ROUND_NEAREST_AWAY : QK_ROUND_NEAREST_EVEN;
    return o;
}

/* every combination of element format, scale rule and rounding: 12 */
enum { NOPTS = 12 };
static qk_mx_options opt_at(int oi) { return make_opt(oi & 1, (oi >> 1) % 3, oi >= 6); }

static const char *opt_str(const qk_mx_options *o)
{
    static _Thread_local char buf[64];
    snprintf(buf, sizeof buf, "%s/%s/%s", qk_dtype_name(o->elem),
             o->scale_rule == QK_MX_SCALE_MODELSLIM ? "MODELSLIM"
             : o->scale_rule ? "RCEIL" : "FLOOR", o->round ? "AWAY" : "EVEN");
    return buf;
}

static bool cpu_has(const qk_provider_set *p) { return (p->cpu_features & ~qk_cpu_features()) == 0; }

/* ---------------------------------------------------------------------------------------
 * Scale rules
 * ------------------------------------------------------------------------------------- */

static void test_rceil_reciprocal_constant(void)
{
    uint32_t u;
    memcpy(&u, &INV448, 4);
    CHECK(u == 0x3b124925u, "fl32(1/448) is 0x%08x", u);
    const float inv = 1.0f / 448.0f;
    CHECK(inv == INV448, "1.0f/448.0f is fl32(1/448)");
}

static void check_scale(float amax, const char *what)
{
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < 2; r++) {
            const qk_mx_options o = make_opt(e, r, 0);
            const int want = mxo_scale(fabs((double)amax), o.scale_rule, fmt_of(o.elem));
            const int got = qk_e8m0_scale(amax, o.scale_rule, o.elem);
            CHECK(got == want, "%s amax %a (%s): scale 0x%02x, want 0x%02x", what, (double)amax,
                  opt_str(&o), got, want);
        }
}

static void test_scale_rules_at_power_of_two_boundaries(void)
{
    for (int e = -149; e <= 127; e++) {
        const float p = ldexpf(1.0f, e);
        check_scale(p, "2^e");
        check_scale(nextafterf(p, 0.0f), "below 2^e");
        if (e < 127) check_scale(nextafterf(p, INFINITY), "above 2^e");
        if (e <= 118) {
            const float a = ldexpf(448.0f, e), b = ldexpf(512.0f, e);
            check_scale(a, "448*2^e");
            check_scale(nextafterf(a, 0.0f), "below 448*2^e");
            check_scale(nextafterf(a, INFINITY), "above 448*2^e");
            check_scale(b, "512*2^e");
            check_scale(nextafterf(b, 0.0f), "below 512*2^e");
            check_scale(nextafterf(b, INFINITY), "above 512*2^e");
            check_scale(ldexpf(57344.0f, e - 8), "57344*2^e");
            check_scale(nextafterf(ldexpf(57344.0f, e - 8), INFINITY), "above 57344*2^e");
        }
    }
    check_scale(FLT_MAX, "FLT_MAX");
    check_scale(FLT_TRUE_MIN, "smallest subnormal");
    check_scale(0x1.8p-140f, "subnormal");
    check_scale(-3.0f, "negative amax (sign ignored)");
    /* anchors written out from the spec's formulas */
    CHECK(qk_e8m0_scale(1.0f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 119, "FLOOR 1.0 -> 2^-8");
    CHECK(qk_e8m0_scale(448.0f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 127, "FLOOR 448 -> 2^0");
    CHECK(qk_e8m0_scale(511.9f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 127, "FLOOR 511.9 -> 2^0");
    CHECK(qk_e8m0_scale(512.0f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 128, "FLOOR 512 -> 2^1");
    CHECK(qk_e8m0_scale(449.0f, QK_MX_SCALE_RCEIL, QK_DTYPE_F8_E4M3) == 128, "RCEIL 449 -> 2^1");
    CHECK(qk_e8m0_scale(0x1p-149f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 0, "FLOOR clamps at 2^-127");
    CHECK(qk_e8m0_scale(0x1p-100f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 19, "FLOOR subnormal-free");
    CHECK(qk_e8m0_scale(0x1p-130f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E5M2) == 0, "FLOOR E5M2 clamps");
    CHECK(qk_e8m0_scale(0.0f, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E4M3) == 0, "zero -> 0x00");
    CHECK(qk_e8m0_scale(0.0f, QK_MX_SCALE_RCEIL, QK_DTYPE_F8_E4M3) == 0, "zero -> 0x00 (RCEIL)");
    CHECK(qk_e8m0_scale(NAN, QK_MX_SCALE_RCEIL, QK_DTYPE_F8_E4M3) == 0xff, "NaN -> 0xFF");
    CHECK(qk_e8m0_scale(INFINITY, QK_MX_SCALE_FLOOR, QK_DTYPE_F8_E5M2) == 0xff, "inf -> 0xFF");
}

/* Rows of 64 whole blocks (so vector providers take their grouped path), each block's
   maximum at or a few ulps around 2^e, 448 * 2^e, 512 * 2^e or 57344 * 2^e; every provider's
   scale bytes and elements against the reference here; RCEIL never saturates the maximum. */
static void check_boundary_rows(qk_mx_quantize_row_fn fn, const char *who)
{
    enum { NB = 64, K = NB * 32 };
    static float x[K];
    static uint8_t q[K], s[NB], eq[K], es[NB];
    uint64_t st = 7;
    const float bases[4] = {1.0f, 448.0f, 512.0f, 57344.0f};
    for (int oi = 0; oi < NOPTS; oi++) {
        const qk_mx_options o = opt_at(oi);
        const fmt *f = fmt_of(o.elem);
        for (int rep = 0; rep < 12; rep++) {
            for (int b = 0; b < NB; b++) {
                const int ex = -149 + (int)(qk_rand_u64(&st) % 280);
                float amax = ldexpf(bases[b % 4], ex - (b % 4 == 3 ? 15 : b % 4 ? 8 : 0));
                for (int u = (b / 4) % 7 - 3; u != 0; u += u < 0 ? 1 : -1)
                    amax = nextafterf(amax, u < 0 ? 0.0f : INFINITY);
                if (!(amax <= FLT_MAX)) amax = FLT_MAX;
                if (amax == 0.0f) amax = FLT_TRUE_MIN;
                for (int i = 0; i < 32; i++) x[b * 32 + i] = amax * (float)qk_rand_uniform(&st, -1.0, 1.0);
                x[b * 32 + (b * 7) % 32] = (b & 16) ? -amax : amax;
            }
            fn(x, QK_DTYPE_F32, K, &o, q, s);
            mxo_quantize_row(x, QK_DTYPE_F32, K, &o, eq, es);
            for (int b = 0; b < NB; b++) {
                const float amax = fabsf(x[b * 32 + (b * 7) % 32]);
                CHECK(s[b] == es[b], "%s %s block amax %a: scale 0x%02x want 0x%02x", who, opt_str(&o),
                      (double)amax, s[b], es[b]);
                CHECK(!memcmp(q + b * 32, eq + b * 32, 32), "%s %s block amax %a: elements differ", who,
                      opt_str(&o), (double)amax);
                if (o.scale_rule == QK_MX_SCALE_RCEIL && s[b] > 0) {
                    /* RCEIL never saturates the block maximum: scaled, it is at most the
                       midpoint above max, so rounding (not clipping) gives max */
                    const double v = ldexp(amax, 127 - s[b]);
                    const double top = f->table[f->maxcode], step = top - f->table[f->maxcode - 1];
                    CHECK(v <= top + step / 2, "RCEIL block max %g scaled past max", v);
                }
            }
        }
    }
}

static void test_scale_rules_through_quantize(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mx_quantize.fn) continue;
        if (!cpu_has(p)) {
            qk_test_skip(p->name, "this CPU lacks the provider's instructions");
            continue;
        }
        check_boundary_rows(p->ops.mx_quantize.fn, p->name);
    }
    /* and the public API on a few rows of one block each */
    float x[4 * 32];
    uint8_t q[4 * 32], s[4];
    const float amax[4] = {448.0f, nextafterf(448.0f, INFINITY), 512.0f, 0x1p-130f};
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 32; i++) x[b * 32 + i] = i == 3 ? amax[b] : amax[b] / 64.0f;
    int64_t shp[2] = {4, 32}, sshp[2] = {4, 1};
    qk_tensor tx = qk_tensor_make(x, QK_DTYPE_F32, 2, shp);
    qk_tensor tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, shp);
    qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sshp);
    const qk_mx_options o = make_opt(0, 1, 0);
    CHECK(qk_mx_quantize(&tx, &o, &tq, &ts) == QK_OK, "%s", qk_last_error());
    for (int b = 0; b < 4; b++)
        CHECK(s[b] == mxo_scale(amax[b], QK_MX_SCALE_RCEIL, &E4M3), "API RCEIL amax %a: 0x%02x", (double)amax[b], s[b]);
    CHECK(s[0] == 127 && s[1] == 128 && s[2] == 128, "RCEIL 448 -> 2^0, 448+ulp and 512 -> 2^1");
}

static void test_floor_saturates_448_to_512(void)
{
    float x[32];
    uint8_t q[32], s[1];
    for (int i = 0; i < 32; i++) x[i] = 448.0f + 2.0f * (float)i; /* 448 .. 510 */
    int64_t shp[1] = {32}, sshp[1] = {1};
    qk_tensor tx = qk_tensor_make(x, QK_DTYPE_F32, 1, shp);
    qk_tensor tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 1, shp);
    qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 1, sshp);
    CHECK(qk_mx_quantize(&tx, NULL, &tq, &ts) == QK_OK, "%s", qk_last_error());
    CHECK(s[0] == 127, "FLOOR scale of a block with amax 510 is 2^0 (got 0x%02x)", s[0]);
    for (int i = 0; i < 32; i++) CHECK(q[i] == 0x7e, "x = %g saturates to 448 (got 0x%02x)", (double)x[i], q[i]);
    qk_mx_options o = make_opt(0, 1, 0);
    CHECK(qk_mx_quantize(&tx, &o, &tq, &ts) == QK_OK, "%s", qk_last_error());
    CHECK(s[0] == 128, "RCEIL scale of amax 510 is 2^1 (got 0x%02x)", s[0]);
    CHECK(q[31] == 0x78, "RCEIL: 510 / 2 = 255 rounds to 256 (0x78), no saturation (got 0x%02x)", q[31]);
}

static void test_zero_blocks(void)
{
    float x[96];
    uint8_t q[96], s[3];
    for (int i = 0; i < 96; i++) x[i] = (i < 32) ? 0.0f : (i < 64) ? -0.0f : ((i & 1) ? -0.0f : 0.0f);
    x[70] = 0x1p-149f; /* block 2 is not all zero */
    int64_t shp[1] = {96}, sshp[1] = {3};
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < 2; r++) {
            qk_mx_options o = make_opt(e, r, 0);
            qk_tensor tx = qk_tensor_make(x, QK_DTYPE_F32, 1, shp);
            qk_tensor tq = qk_tensor_make(q, o.elem, 1, shp);
            qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 1, sshp);
            memset(q, 0xaa, sizeof q);
            CHECK(qk_mx_quantize(&tx, &o, &tq, &ts) == QK_OK, "%s", qk_last_error());
            CHECK(s[0] == 0 && s[1] == 0, "%s: zero blocks have scale 0x00 (0x%02x 0x%02x)",
                  opt_str(&o), s[0], s[1]);
            for (int i = 0; i < 64; i++)
                CHECK(q[i] == (i < 32 ? 0x00 : 0x80), "%s: zero element %d is 0x%02x", opt_str(&o), i, q[i]);
            for (int i = 64; i < 96; i++)
                if (i != 70) CHECK(q[i] == ((i & 1) ? 0x80 : 0x00), "%s: signed zero %d", opt_str(&o), i);
        }
}

static void test_nan_inf_blocks(void)
{
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int kind = 0; kind < 3; kind++)
        for (int e = 0; e < 2; e++) {
            float x[96];
            uint8_t q[96], s[3];
            for (int i = 0; i < 96; i++) x[i] = (float)(i - 48) * 0.25f;
            x[40] = bad[kind];
            int64_t shp[1] = {96}, sshp[1] = {3};
            qk_mx_options o = make_opt(e, 0, 0);
            qk_tensor tx = qk_tensor_make(x, QK_DTYPE_F32, 1, shp);
            qk_tensor tq = qk_tensor_make(q, o.elem, 1, shp);
            qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 1, sshp);
            CHECK(qk_mx_quantize(&tx, &o, &tq, &ts) == QK_OK, "%s", qk_last_error());
            CHECK(s[1] == 0xff, "%s block with %g has scale 0x%02x", opt_str(&o), (double)bad[kind], s[1]);
            for (int i = 32; i < 64; i++)
                CHECK(q[i] == 0x7f, "%s: element %d of a %g block is 0x%02x, want NaN 0x7F",
                      opt_str(&o), i, (double)bad[kind], q[i]);
            CHECK(s[0] != 0xff && s[2] != 0xff, "other blocks unaffected");
            CHECK(isnan(qk_f8_to_f32(0x7f, o.elem)), "0x7F is NaN in %s", qk_dtype_name(o.elem));
            /* dequantized: NaN for the whole block, finite elsewhere */
            float out[96];
            qk_tensor to = qk_tensor_make(out, QK_DTYPE_F32, 1, shp);
            CHECK(qk_mx_dequantize(&tq, &ts, &to) == QK_OK, "%s", qk_last_error());
            for (int i = 0; i < 96; i++)
                CHECK((i >= 32 && i < 64) == (bool)isnan(out[i]), "dequantized element %d: %g", i, (double)out[i]);
        }
}

/* ---------------------------------------------------------------------------------------
 * The public API against the independent reference: partial blocks, every option, dtype
 * ------------------------------------------------------------------------------------- */

static void test_quantize_matches_reference_all_options_partial_blocks(void)
{
    uint64_t st = 1234;
    const int64_t rows = 3;
    for (int ki = 0; ki < NKS; ki++) {
        const int64_t K = KS[ki], kb = (K + 31) / 32;
        for (int xi = 0; xi < 3; xi++) {
            const qk_dtype xdt = XDTS[xi];
            const size_t es = qk_dtype_size(xdt);
            for (int oi = 0; oi < NOPTS; oi++) {
                const qk_mx_options o = opt_at(oi);
                const int kind = (int)((ki * 3 + xi + oi) % D_KINDS);
                /* x rows are 2K apart: the gap holds huge values that must not reach any scale */
                char *x = malloc((size_t)(rows * 2 * K) * es);
                uint8_t *q = malloc((size_t)(rows * K)), *s = malloc((size_t)(rows * kb));
                uint8_t *eq = malloc((size_t)(rows * K)), *es_ = malloc((size_t)(rows * kb));
                for (int64_t r = 0; r < rows; r++) {
                    fill_row(x + (size_t)(r * 2 * K) * es, xdt, K, kind, fmt_of(o.elem), &st);
                    for (int64_t k = K; k < 2 * K; k++)
                        store_elem(x + (size_t)(r * 2 * K) * es, xdt, k, xdt == QK_DTYPE_F16 ? 60000.0f : 1e30f);
                }
                int64_t shp[2] = {rows, K}, sshp[2] = {rows, kb};
                qk_tensor tx = qk_tensor_make(x, xdt, 2, shp);
                tx.stride[0] = 2 * K;
                qk_tensor tq = qk_tensor_make(q, o.elem, 2, shp);
                qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sshp);
                const qk_status r = qk_mx_quantize(&tx, &o, &tq, &ts);
                CHECK(r == QK_OK, "%s", qk_last_error());
                for (int64_t i = 0; i < rows; i++)
                    mxo_quantize_row(x + (size_t)(i * 2 * K) * es, xdt, K, &o, eq + i * K, es_ + i * kb);
                int bad = 0;
                for (int64_t i = 0; i < rows * kb && bad < 3; i++)
                    if (s[i] != es_[i]) {
                        bad++;
                        CHECK(0, "K=%lld %s %s %s: scale[%lld] = 0x%02x, want 0x%02x", (long long)K,
                              qk_dtype_name(xdt), opt_str(&o), DNAMES[kind], (long long)i, s[i], es_[i]);
                    }
                for (int64_t i = 0; i < rows * K && bad < 3; i++)
                    if (q[i] != eq[i]) {
                        bad++;
                        CHECK(0, "K=%lld %s %s %s: q[%lld] = 0x%02x, want 0x%02x (x = %a, scale 0x%02x)",
                              (long long)K, qk_dtype_name(xdt), opt_str(&o), DNAMES[kind], (long long)i,
                              q[i], eq[i], mxo_load(x + (size_t)(i / K * 2 * K) * es, xdt, i % K),
                              s[i / K * kb + i % K / 32]);
                    }
                free(x); free(q); free(s); free(eq); free(es_);
            }
        }
    }
}

/* The last block's scale comes from its real elements only: the same row padded with
   large values, or with zeros, past K. */
static void test_partial_block_scale_from_real_elements(void)
{
    for (int ki = 0; ki < NKS; ki++) {
        const int64_t K = KS[ki], kb = (K + 31) / 32, Kp = kb * 32;
        float *x = malloc((size_t)(Kp + 32) * 4), *xz = calloc((size_t)Kp, 4);
        uint8_t *q = malloc((size_t)K + 64), *s = malloc((size_t)kb + 64), *qz = malloc((size_t)Kp), *sz = malloc((size_t)kb);
        for (int64_t k = 0; k < K; k++) x[k] = xz[k] = (float)((k * 37) % 19) * 0.01f - 0.05f;
        for (int64_t k = K; k < Kp + 32; k++) x[k] = 1e20f;
        memset(q, 0xaa, (size_t)K + 64);
        memset(s, 0xaa, (size_t)kb + 64);
        int64_t shp[1] = {K}, sshp[1] = {kb}, zshp[1] = {Kp}, zsshp[1] = {kb};
        qk_tensor tx = qk_tensor_make(x, QK_DTYPE_F32, 1, shp);
        qk_tensor tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 1, shp);
        qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 1, sshp);
        CHECK(qk_mx_quantize(&tx, NULL, &tq, &ts) == QK_OK, "%s", qk_last_error());
        /* zero-padded to whole blocks: same result */
        qk_tensor tz = qk_tensor_make(xz, QK_DTYPE_F32, 1, zshp);
        qk_tensor tqz = qk_tensor_make(qz, QK_DTYPE_F8_E4M3, 1, zshp);
        qk_tensor tsz = qk_tensor_make(sz, QK_DTYPE_E8M0, 1, zsshp);
        CHECK(qk_mx_quantize(&tz, NULL, &tqz, &tsz) == QK_OK, "%s", qk_last_error());
        CHECK(!memcmp(s, sz, (size_t)kb), "K=%lld: scales differ from the zero-padded row (last 0x%02x vs 0x%02x)",
              (long long)K, s[kb - 1], sz[kb - 1]);
        CHECK(!memcmp(q, qz, (size_t)K), "K=%lld: elements differ from the zero-padded row", (long long)K);
        CHECK(s[kb - 1] < 0x90, "K=%lld: last scale 0x%02x saw the padding", (long long)K, s[kb - 1]);
        bool untouched = true;
        for (int i = 0; i < 64; i++) untouched = untouched && q[K + i] == 0xaa && s[kb + i] == 0xaa;
        CHECK(untouched, "K=%lld: bytes past q[K] / scale[kb] were written", (long long)K);
        free(x); free(xz); free(q); free(s); free(qz); free(sz);
    }
    /* the real case: K = 4304 -> 135 blocks, block 134 holds 16 elements */
    CHECK((4304 + 31) / 32 == 135 && 4304 - 32 * 134 == 16, "K = 4304 layout");
}

static void test_strided_leading_dims(void)
{
    /* x [4, 3, K] as a permuted view of a [3, 4, K + 7] buffer; q and scale with gaps */
    const int64_t K = 65, kb = 3, ld = K + 7;
    uint16_t *buf = malloc((size_t)(3 * 4 * ld) * 2);
    uint64_t st = 99;
    for (int64_t i = 0; i < 3 * 4 * ld; i++) buf[i] = qk_f32_to_bf16((float)qk_rand_normal(&st));
    uint8_t *q = malloc((size_t)(4 * 3 * (K + 5))), *s = malloc((size_t)(4 * 3 * (kb + 2)));
    memset(q, 0xaa, (size_t)(4 * 3 * (K + 5)));
    memset(s, 0xaa, (size_t)(4 * 3 * (kb + 2)));
    int64_t shp[3] = {4, 3, K}, sshp[3] = {4, 3, kb};
    qk_tensor tx = qk_tensor_make(buf, QK_DTYPE_BF16, 3, shp);
    tx.stride[0] = ld; tx.stride[1] = 4 * ld; tx.stride[2] = 1;
    qk_tensor tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 3, shp);
    tq.stride[1] = K + 5; tq.stride[0] = 3 * (K + 5);
    qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 3, sshp);
    ts.stride[1] = kb + 2; ts.stride[0] = 3 * (kb + 2);
    CHECK(qk_mx_quantize(&tx, NULL, &tq, &ts) == QK_OK, "%s", qk_last_error());
    const qk_mx_options o = qk_mx_options_default();
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++) {
            uint8_t eq[65], es[3];
            mxo_quantize_row(buf + b * 4 * ld + a * ld, QK_DTYPE_BF16, K, &o, eq, es);
            const uint8_t *qr = q + a * 3 * (K + 5) + b * (K + 5), *sr = s + a * 3 * (kb + 2) + b * (kb + 2);
            CHECK(!memcmp(qr, eq, (size_t)K) && !memcmp(sr, es, (size_t)kb), "row [%d, %d] differs", a, b);
            CHECK(qr[K] == 0xaa && sr[kb] == 0xaa, "row [%d, %d]: gap written", a, b);
        }
    /* dequantize through strided views back into a strided out */
    float *out = malloc((size_t)(4 * 3 * (K + 3)) * 4);
    qk_tensor to = qk_tensor_make(out, QK_DTYPE_F32, 3, shp);
    to.stride[1] = K + 3; to.stride[0] = 3 * (K + 3);
    CHECK(qk_mx_dequantize(&tq, &ts, &to) == QK_OK, "%s", qk_last_error());
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int64_t k = 0; k < K; k++) {
                const uint8_t c = q[a * 3 * (K + 5) + b * (K + 5) + k], sb = s[a * 3 * (kb + 2) + b * (kb + 2) + k / 32];
                const double want = mxo_dequant(&E4M3, c, sb, QK_DTYPE_F32);
                CHECK(out[a * 3 * (K + 3) + b * (K + 3) + k] == want, "dequant [%d,%d,%lld]", a, b, (long long)k);
            }
    free(buf); free(q); free(s); free(out);
}

/* ---------------------------------------------------------------------------------------
 * Dequantize: every code under every scale byte, every output dtype
 * ------------------------------------------------------------------------------------- */

static void check_dequant_exhaustive(qk_mx_dequantize_row_fn fn, const char *who)
{
    static uint8_t q[256][256], s[256][8];
    static uint16_t out16[256 * 256];
    static float out32[256 * 256];
    for (int b = 0; b < 256; b++) {
        for (int c = 0; c < 256; c++) q[b][c] = (uint8_t)((c * 7 + b) & 0xff);
        memset(s[b], b, 8);
    }
    for (int e = 0; e < 2; e++) {
        const fmt *f = e ? &E5M2 : &E4M3;
        for (int oi = 0; oi < 3; oi++) {
            const qk_dtype odt = ODTS[oi];
            void *out = odt == QK_DTYPE_F32 ? (void *)out32 : (void *)out16;
            const size_t os = qk_dtype_size(odt);
            for (int b = 0; b < 256; b++) fn(q[b], f->dt, s[b], 256, (char *)out + (size_t)b * 256 * os, odt);
            int bad = 0;
            for (int b = 0; b < 256 && bad < 5; b++)
                for (int c = 0; c < 256 && bad < 5; c++) {
                    const double want = mxo_dequant(f, q[b][c], b, odt);
                    const double got = mxo_out_load(out, odt, b * 256 + c);
                    bool ok = isnan(want) ? isnan(got) : (got == want && signbit(got) == signbit(want));
                    if (isnan(want)) {
                        /* canonical quiet NaN, so providers agree bit for bit */
                        if (odt == QK_DTYPE_F32) ok = ok && ((uint32_t *)out32)[b * 256 + c] == 0x7fc00000u;
                        else ok = ok && out16[b * 256 + c] == (odt == QK_DTYPE_F16 ? 0x7e00 : 0x7fc0);
                    }
                    if (!ok) {
                        bad++;
                        CHECK(0, "%s dequant %s code 0x%02x scale 0x%02x -> %s: got %a, want %a", who,
                              qk_dtype_name(f->dt), q[b][c], b, qk_dtype_name(odt), got, want);
                    }
                }
        }
    }
}

static void test_dequantize_every_code_every_scale(void)
{
    check_dequant_exhaustive(qk_mx_dequantize_row_ref, "ref");
    /* and the public API (staged provider) on the same grid, F32 out */
    static uint8_t q[64 * 256], s[64 * 8];
    static float out[64 * 256];
    for (int i = 0; i < 64 * 256; i++) q[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 64 * 8; i++) s[i] = (uint8_t)(i * 29 + 3);
    int64_t shp[2] = {64, 256}, sshp[2] = {64, 8};
    qk_tensor tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, shp);
    qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sshp);
    qk_tensor to = qk_tensor_make(out, QK_DTYPE_F32, 2, shp);
    CHECK(qk_mx_dequantize(&tq, &ts, &to) == QK_OK, "%s", qk_last_error());
    for (int i = 0; i < 64 * 256; i++) {
        const double want = mxo_dequant(&E4M3, q[i], s[i / 32], QK_DTYPE_F32);
        CHECK(isnan(want) ? isnan(out[i]) : out[i] == want, "API dequant %d", i);
    }
}

/* ---------------------------------------------------------------------------------------
 * Scale pairs
 * ------------------------------------------------------------------------------------- */

static void test_scale_pairs_layout(void)
{
    const int64_t Ks[] = {32, 64, 96, 4304, 4305, 1152, 1, 5120};
    for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++) {
        const int64_t N = 3, kb = (Ks[i] + 31) / 32, pairs = (kb + 1) / 2;
        uint8_t *s = malloc((size_t)(N * kb)), *p = malloc((size_t)(N * pairs * 2 + 8));
        for (int64_t k = 0; k < N * kb; k++) s[k] = (uint8_t)(0x70 + k % 31);
        memset(p, 0xaa, (size_t)(N * pairs * 2 + 8));
        int64_t sshp[2] = {N, kb}, pshp[3] = {N, pairs, 2};
        qk_tensor ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sshp);
        qk_tensor tp = qk_tensor_make(p, QK_DTYPE_E8M0, 3, pshp);
        CHECK(qk_mx_pack_scale_pairs(&ts, &tp) == QK_OK, "%s", qk_last_error());
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < pairs; j++)
                for (int t = 0; t < 2; t++) {
                    const int64_t k = 2 * j + t;
                    const uint8_t want = k < kb ? s[n * kb + k] : 0x00;
                    CHECK(p[(n * pairs + j) * 2 + t] == want, "K=%lld n=%lld pair %lld.%d: 0x%02x want 0x%02x",
                          (long long)Ks[i], (long long)n, (long long)j, t, p[(n * pairs + j) * 2 + t], want);
                }
        CHECK(p[N * pairs * 2] == 0xaa, "past the end written");
        if (Ks[i] == 4304) CHECK(pairs == 68 && kb == 135, "K = 4304 -> [N, 68, 2]");
        free(s); free(p);
    }
}

/* ---------------------------------------------------------------------------------------
 * Bad input: status, a message naming the argument, outputs untouched
 * ------------------------------------------------------------------------------------- */

static bool names(const char *arg)
{
    const char *m = qk_last_error();
    /* ": x ", ": x'", ": x-" (x->data), or a longer name anywhere */
    const char *tails = " '-";
    for (const char *t = tails; *t; t++) {
        char pat[64];
        snprintf(pat, sizeof pat, ": %s%c", arg, *t);
        if (strstr(m, pat)) return true;
    }
    return strlen(arg) > 3 && strstr(m, arg) != NULL;
}

enum { EK = 4304, EKB = 135, EN = 2 };
static uint16_t ex[EN * EK];
static uint8_t eqb[EN * EK + 64], esb[EN * EKB + 64];
static float eout[EN * EK];

static void reset_sentinels(void)
{
    memset(eqb, 0x5a, sizeof eqb);
    memset(esb, 0x5a, sizeof esb);
    memset(eout, 0x5a, sizeof eout);
}

static bool untouched(void)
{
    for (size_t i = 0; i < sizeof eqb; i++) if (eqb[i] != 0x5a) return false;
    for (size_t i = 0; i < sizeof esb; i++) if (esb[i] != 0x5a) return false;
    const uint8_t *o = (const uint8_t *)eout;
    for (size_t i = 0; i < sizeof eout; i++) if (o[i] != 0x5a) return false;
    return true;
}

static void expect(const char *what, qk_status got, qk_status want, const char *arg)
{
    CHECK(got == want, "%s: got %s, want %s (%s)", what, qk_status_name(got), qk_status_name(want),
          qk_last_error());
    CHECK(names(arg), "%s: message does not name '%s': %s", what, arg, qk_last_error());
    CHECK(untouched(), "%s: an output was written", what);
}

static void test_quantize_bad_inputs(void)
{
    int64_t shp[2] = {EN, EK}, sshp[2] = {EN, EKB};
    for (int i = 0; i < EN * EK; i++) ex[i] = qk_f32_to_bf16((float)(i % 17) - 8.0f);
    qk_tensor x, q, s;
#define FRESH()                                                  \
    do {                                                         \
        reset_sentinels();                                       \
        x = qk_tensor_make(ex, QK_DTYPE_BF16, 2, shp);           \
        q = qk_tensor_make(eqb, QK_DTYPE_F8_E4M3, 2, shp);       \
        s = qk_tensor_make(esb, QK_DTYPE_E8M0, 2, sshp);         \
    } while (0)
    qk_mx_options o;

    FRESH(); expect("NULL x", qk_mx_quantize(NULL, NULL, &q, &s), QK_ERR_INVALID_ARGUMENT, "x");
    FRESH(); expect("NULL q", qk_mx_quantize(&x, NULL, NULL, &s), QK_ERR_INVALID_ARGUMENT, "q");
    FRESH(); expect("NULL scale", qk_mx_quantize(&x, NULL, &q, NULL), QK_ERR_INVALID_ARGUMENT, "scale");
    FRESH(); x.data = NULL; expect("NULL x->data", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_INVALID_ARGUMENT, "x");
    FRESH(); q.data = NULL; expect("NULL q->data", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_INVALID_ARGUMENT, "q");
    FRESH(); s.data = NULL; expect("NULL scale->data", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_INVALID_ARGUMENT, "scale");
    FRESH(); o = qk_mx_options_default(); o.elem = QK_DTYPE_F32;
    expect("opt.elem F32", qk_mx_quantize(&x, &o, &q, &s), QK_ERR_INVALID_ARGUMENT, "opt->elem");
    FRESH(); o = qk_mx_options_default(); o.elem = (qk_dtype)99;
    expect("opt.elem 99", qk_mx_quantize(&x, &o, &q, &s), QK_ERR_INVALID_ARGUMENT, "opt->elem");
    FRESH(); o = qk_mx_options_default(); o.scale_rule = (qk_mx_scale_rule)3;
    expect("opt.scale_rule 3", qk_mx_quantize(&x, &o, &q, &s), QK_ERR_INVALID_ARGUMENT, "opt->scale_rule");
    FRESH(); o = qk_mx_options_default(); o.round = (qk_round)-1;
    expect("opt.round -1", qk_mx_quantize(&x, &o, &q, &s), QK_ERR_INVALID_ARGUMENT, "opt->round");
    FRESH(); x.dtype = QK_DTYPE_I32; expect("x I32", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "x");
    FRESH(); x.dtype = QK_DTYPE_F8_E4M3; expect("x E4M3", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "x");
    FRESH(); q.dtype = QK_DTYPE_F8_E5M2; expect("q E5M2 vs default E4M3", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "q");
    FRESH(); o = qk_mx_options_default(); o.elem = QK_DTYPE_F8_E5M2;
    expect("q E4M3 vs opt E5M2", qk_mx_quantize(&x, &o, &q, &s), QK_ERR_DTYPE, "q");
    FRESH(); q.dtype = QK_DTYPE_U8; expect("q U8", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "q");
    FRESH(); s.dtype = QK_DTYPE_U8; expect("scale U8", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "scale");
    FRESH(); s.dtype = QK_DTYPE_F8_E4M3; expect("scale E4M3", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_DTYPE, "scale");
    /* the classic bug: K // 32 blocks */
    FRESH(); s.shape[1] = EK / 32;
    expect("scale K/32", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "scale");
    CHECK(strstr(qk_last_error(), "scale has 134 blocks per row but K = 4304 needs ceil(4304/32) = 135") != NULL,
          "message: %s", qk_last_error());
    FRESH(); s.shape[1] = EKB + 1; expect("scale kb+1", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "scale");
    FRESH(); s.shape[0] = 1; expect("scale leading dims", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "scale");
    FRESH(); s.ndim = 1; s.shape[0] = EKB; s.stride[0] = 1;
    expect("scale ndim", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "scale");
    FRESH(); q.shape[1] = EK - 1; expect("q shape", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "q");
    FRESH(); x.shape[1] = 0; s.shape[1] = 0; q.shape[1] = 0;
    expect("K = 0", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "x");
    FRESH(); x.ndim = 0; expect("x ndim 0", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "x");
    FRESH(); x.ndim = 5; expect("x ndim 5", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "x");
    FRESH(); x.shape[0] = -1; expect("x negative dim", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_SHAPE, "x");
    FRESH(); x.stride[1] = 2; x.shape[1] = EK / 2; q.shape[1] = EK / 2; s.shape[1] = (EK / 2 + 31) / 32;
    expect("x last dim strided", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_LAYOUT, "x");
    FRESH(); q.stride[1] = 2; q.shape[1] = x.shape[1] = EK / 2; s.shape[1] = (EK / 2 + 31) / 32;
    expect("q last dim strided", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_LAYOUT, "q");
    FRESH(); s.stride[1] = 2; s.stride[0] = 2 * EKB;
    expect("scale last dim strided", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_LAYOUT, "scale");
    FRESH(); q.stride[0] = 0; expect("q rows alias", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_LAYOUT, "q");
    FRESH(); s.data = eqb + 100; expect("scale overlaps q", qk_mx_quantize(&x, NULL, &q, &s), QK_ERR_LAYOUT, "scale");
    memset(esb, 0x5a, sizeof esb);
    {
        /* q inside x's bytes (x is read-only here: the call must refuse before writing) */
        static uint16_t xs[EN * EK + 64];
        for (int i = 0; i < EN * EK; i++) xs[i] = ex[i];
        FRESH(); x.data = xs; q.data = (uint8_t *)xs + 8;
        const qk_status r = qk_mx_quantize(&x, NULL, &q, &s);
        CHECK(r == QK_ERR_LAYOUT && names("q"), "q overlapping x: %s (%s)", qk_status_name(r), qk_last_error());
        CHECK(!memcmp(xs, ex, sizeof ex), "x was written through q");
        FRESH(); x.data = xs; s.data = (uint8_t *)xs + 8;
        const qk_status r2 = qk_mx_quantize(&x, NULL, &q, &s);
        CHECK(r2 == QK_ERR_LAYOUT && names("scale"), "scale overlapping x: %s (%s)", qk_status_name(r2), qk_last_error());
        CHECK(!memcmp(xs, ex, sizeof ex), "x was written through scale");
        CHECK(untouched(), "outputs written");
    }
    /* zero rows is a valid, empty call */
    FRESH(); x.shape[0] = q.shape[0] = s.shape[0] = 0;
    CHECK(qk_mx_quantize(&x, NULL, &q, &s) == QK_OK && untouched(), "zero rows: %s", qk_last_error());
#undef FRESH
}

static void test_dequantize_bad_inputs(void)
{
    int64_t shp[2] = {EN, EK}, sshp[2] = {EN, EKB};
    static uint8_t qin[EN * EK], sin_[EN * EKB];
    memset(qin, 0x38, sizeof qin);
    memset(sin_, 127, sizeof sin_);
    qk_tensor q, s, o;
#define FRESH()                                                  \
    do {                                                         \
        reset_sentinels();                                       \
        q = qk_tensor_make(qin, QK_DTYPE_F8_E4M3, 2, shp);       \
        s = qk_tensor_make(sin_, QK_DTYPE_E8M0, 2, sshp);        \
        o = qk_tensor_make(eout, QK_DTYPE_F32, 2, shp);          \
    } while (0)
    FRESH(); expect("NULL q", qk_mx_dequantize(NULL, &s, &o), QK_ERR_INVALID_ARGUMENT, "q");
    FRESH(); expect("NULL scale", qk_mx_dequantize(&q, NULL, &o), QK_ERR_INVALID_ARGUMENT, "scale");
    FRESH(); expect("NULL out", qk_mx_dequantize(&q, &s, NULL), QK_ERR_INVALID_ARGUMENT, "out");
    FRESH(); q.dtype = QK_DTYPE_BF16; expect("q BF16", qk_mx_dequantize(&q, &s, &o), QK_ERR_DTYPE, "q");
    FRESH(); s.dtype = QK_DTYPE_U8; expect("scale U8", qk_mx_dequantize(&q, &s, &o), QK_ERR_DTYPE, "scale");
    FRESH(); o.dtype = QK_DTYPE_I8; expect("out I8", qk_mx_dequantize(&q, &s, &o), QK_ERR_DTYPE, "out");
    FRESH(); s.shape[1] = EK / 32; expect("scale K/32", qk_mx_dequantize(&q, &s, &o), QK_ERR_SHAPE, "scale");
    CHECK(strstr(qk_last_error(), "ceil(4304/32) = 135") != NULL, "message: %s", qk_last_error());
    FRESH(); o.shape[0] = 1; expect("out shape", qk_mx_dequantize(&q, &s, &o), QK_ERR_SHAPE, "out");
    FRESH(); q.shape[1] = 0; s.shape[1] = 0; o.shape[1] = 0;
    expect("K = 0", qk_mx_dequantize(&q, &s, &o), QK_ERR_SHAPE, "q");
    FRESH(); o.stride[1] = 2; o.shape[1] = q.shape[1] = EK / 2; s.shape[1] = (EK / 2 + 31) / 32;
    expect("out strided", qk_mx_dequantize(&q, &s, &o), QK_ERR_LAYOUT, "out");
    {
        static float buf[EN * EK + 1024];
        uint8_t *qb = (uint8_t *)buf;
        memcpy(qb, qin, sizeof qin);
        FRESH(); q.data = qb; o.data = buf + 16;
        const qk_status r = qk_mx_dequantize(&q, &s, &o);
        CHECK(r == QK_ERR_LAYOUT && names("out"), "out overlapping q: %s (%s)", qk_status_name(r), qk_last_error());
        CHECK(!memcmp(qb, qin, sizeof qin), "q written through out");
    }
#undef FRESH
}

static void test_pack_scale_pairs_bad_inputs(void)
{
    int64_t sshp[2] = {EN, EKB}, pshp[3] = {EN, 68, 2};
    static uint8_t sin_[EN * EKB];
    memset(sin_, 127, sizeof sin_);
    qk_tensor s, p;
#define FRESH()                                                  \
    do {                                                         \
        reset_sentinels();                                       \
        s = qk_tensor_make(sin_, QK_DTYPE_E8M0, 2, sshp);        \
        p = qk_tensor_make(eqb, QK_DTYPE_E8M0, 3, pshp);         \
    } while (0)
    FRESH(); expect("NULL scale", qk_mx_pack_scale_pairs(NULL, &p), QK_ERR_INVALID_ARGUMENT, "scale");
    FRESH(); expect("NULL packed", qk_mx_pack_scale_pairs(&s, NULL), QK_ERR_INVALID_ARGUMENT, "packed");
    FRESH(); s.dtype = QK_DTYPE_U8; expect("scale U8", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_DTYPE, "scale");
    FRESH(); p.dtype = QK_DTYPE_U8; expect("packed U8", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_DTYPE, "packed");
    FRESH(); p.shape[1] = 67; expect("packed [N, kb/2, 2] for odd kb", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_SHAPE, "packed");
    FRESH(); p.shape[2] = 3; expect("packed [N, 68, 3]", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_SHAPE, "packed");
    FRESH(); p.ndim = 2; p.shape[1] = 136; expect("packed 2-D", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_SHAPE, "packed");
    FRESH(); s.shape[1] = 0; expect("kb = 0", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_SHAPE, "scale");
    FRESH(); p.stride[2] = 2; p.stride[1] = 4; p.stride[0] = 4 * 68;
    expect("packed strided", qk_mx_pack_scale_pairs(&s, &p), QK_ERR_LAYOUT, "packed");
    {
        static uint8_t buf[EN * EKB + 512];
        memcpy(buf, sin_, sizeof sin_);
        FRESH(); s.data = buf; p.data = buf + 40;
        const qk_status r = qk_mx_pack_scale_pairs(&s, &p);
        CHECK(r == QK_ERR_LAYOUT && names("packed"), "packed overlapping scale: %s (%s)", qk_status_name(r), qk_last_error());
        CHECK(!memcmp(buf, sin_, sizeof sin_), "scale written through packed");
    }
#undef FRESH
}

/* ---------------------------------------------------------------------------------------
 * Every provider against ref (and the independent reference), one test body
 * ------------------------------------------------------------------------------------- */

static void provider_quantize_body(const qk_provider_set *p)
{
    uint64_t st = 0xfeed;
    const qk_mx_quantize_row_fn fn = p->ops.mx_quantize.fn, rf = qk_provider_ref.ops.mx_quantize.fn;
    const int64_t Kmax = 4305 + 512;
    char *x = malloc((size_t)Kmax * 4 + 64);
    uint8_t *q = malloc((size_t)Kmax + 64), *s = malloc(256), *rq = malloc((size_t)Kmax), *rs = malloc(256);
    uint8_t *tq = malloc((size_t)Kmax), *ts = malloc(256);
    const int64_t Ks[] = {1, 5, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 511, 512, 513, 1152, 4303, 4304, 4305, 4305 + 512};
    long compared = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        const int64_t K = Ks[ki], kb = (K + 31) / 32;
        for (int xi = 0; xi < 3; xi++)
            for (int oi = 0; oi < NOPTS; oi++)
                for (int kind = 0; kind < D_KINDS; kind++) {
                    if (K > 2000 && (kind + oi + xi) % 3) continue; /* keep ASan time down */
                    const qk_mx_options o = opt_at(oi);
                    const qk_dtype xdt = XDTS[xi];
                    fill_row(x, xdt, K, kind, fmt_of(o.elem), &st);
                    memset(q, 0xaa, (size_t)K + 64);
                    memset(s, 0xaa, 256);
                    fn(x, xdt, K, &o, q, s);
                    rf(x, xdt, K, &o, rq, rs);
                    mxo_quantize_row(x, xdt, K, &o, tq, ts);
                    compared++;
                    const bool ok = !memcmp(q, rq, (size_t)K) && !memcmp(s, rs, (size_t)kb);
                    const bool ok_t = !memcmp(rq, tq, (size_t)K) && !memcmp(rs, ts, (size_t)kb);
                    bool tail = true;
                    for (int i = 0; i < 64; i++) tail = tail && q[K + i] == 0xaa;
                    for (int64_t i = kb; i < 256; i++) tail = tail && s[i] == 0xaa;
                    if (!ok || !ok_t || !tail) {
                        int64_t bi = -1;
                        for (int64_t i = 0; i < K && bi < 0; i++) if (q[i] != rq[i] || rq[i] != tq[i]) bi = i;
                        for (int64_t j = 0; j < kb && bi < 0; j++) if (s[j] != rs[j] || rs[j] != ts[j]) bi = j * 32;
                        CHECK(ok, "%s vs ref: K=%lld %s %s %s: first difference at %lld (q 0x%02x ref 0x%02x, "
                              "scale 0x%02x ref 0x%02x, x %a)", p->name, (long long)K, qk_dtype_name(xdt),
                              opt_str(&o), DNAMES[kind], (long long)bi, bi >= 0 ? q[bi] : 0, bi >= 0 ? rq[bi] : 0,
                              bi >= 0 ? s[bi / 32] : 0, bi >= 0 ? rs[bi / 32] : 0, bi >= 0 ? mxo_load(x, xdt, bi) : 0.0);
                        CHECK(ok_t, "ref vs test reference: K=%lld %s %s %s: at %lld (ref 0x%02x want 0x%02x)",
                              (long long)K, qk_dtype_name(xdt), opt_str(&o), DNAMES[kind], (long long)bi,
                              bi >= 0 ? rq[bi] : 0, bi >= 0 ? tq[bi] : 0);
                        CHECK(tail, "%s wrote past K or kb (K=%lld)", p->name, (long long)K);
                    }
                }
    }
    CHECK(compared > 1000, "compared %ld rows", compared);
    free(x); free(q); free(s); free(rq); free(rs); free(tq); free(ts);
}

static void provider_dequantize_body(const qk_provider_set *p)
{
    check_dequant_exhaustive(p->ops.mx_dequantize.fn, p->name);
    /* partial blocks and tails, bit for bit against ref */
    uint64_t st = 77;
    const int64_t Ks[] = {1, 5, 15, 16, 17, 31, 33, 65, 1152, 4304, 4305};
    static uint8_t q[4305], s[135];
    static uint8_t out[4305 * 4 + 64], rout[4305 * 4 + 64];
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (int e = 0; e < 2; e++)
            for (int oi = 0; oi < 3; oi++) {
                const int64_t K = Ks[ki], kb = (K + 31) / 32;
                for (int64_t i = 0; i < K; i++) q[i] = (uint8_t)qk_rand_u64(&st);
                for (int64_t j = 0; j < kb; j++) s[j] = (uint8_t)(96 + qk_rand_u64(&st) % 64);
                if (kb > 2) s[1] = 0xff;
                const size_t os = qk_dtype_size(ODTS[oi]);
                memset(out, 0xaa, sizeof out);
                memset(rout, 0xaa, sizeof rout);
                const qk_dtype qdt = e ? QK_DTYPE_F8_E5M2 : QK_DTYPE_F8_E4M3;
                p->ops.mx_dequantize.fn(q, qdt, s, K, out, ODTS[oi]);
                qk_mx_dequantize_row_ref(q, qdt, s, K, rout, ODTS[oi]);
                CHECK(!memcmp(out, rout, (size_t)K * os + 64), "%s dequant K=%lld %s -> %s differs from ref",
                      p->name, (long long)K, qk_dtype_name(qdt), qk_dtype_name(ODTS[oi]));
            }
}

static void test_every_provider_quantize_matches_ref(void)
{
    int ran = 0;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mx_quantize.fn) continue;
        char what[96];
        snprintf(what, sizeof what, "mx_quantize provider %s", p->name);
        if (!cpu_has(p)) {
            qk_test_skip(what, "this CPU lacks the provider's instructions");
            continue;
        }
        provider_quantize_body(p);
        ran++;
    }
    CHECK(ran >= 1, "no provider ran");
}

static void test_every_provider_dequantize_matches_ref(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mx_dequantize.fn) continue;
        char what[96];
        snprintf(what, sizeof what, "mx_dequantize provider %s", p->name);
        if (!cpu_has(p)) {
            qk_test_skip(what, "this CPU lacks the provider's instructions");
            continue;
        }
        provider_dequantize_body(p);
    }
}

static void test_staged_providers_reported(void)
{
    const char *ops[3] = {"mx_quantize", "mx_dequantize", "mx_pack_scale_pairs"};
    for (int i = 0; i < 3; i++) {
        const char *p = qk_provider(ops[i]);
        CHECK(p != NULL, "qk_provider(\"%s\") is NULL", ops[i]);
        CHECK(p && !strcmp(p, qk_ops_provider(&qk_target_table_built.ops, ops[i])), "%s", ops[i]);
        printf("     %s -> %s (target %s)\n", ops[i], p ? p : "(none)", qk_target());
    }
}

int main(void)
{
    qk_test_require_cpu("test_mx_quantize");
    mxo_build_table(&E4M3);
    mxo_build_table(&E5M2);
    RUN(test_rceil_reciprocal_constant);
    RUN(test_scale_rules_at_power_of_two_boundaries);
    RUN(test_scale_rules_through_quantize);
    RUN(test_floor_saturates_448_to_512);
    RUN(test_zero_blocks);
    RUN(test_nan_inf_blocks);
    RUN(test_quantize_matches_reference_all_options_partial_blocks);
    RUN(test_partial_block_scale_from_real_elements);
    RUN(test_strided_leading_dims);
    RUN(test_dequantize_every_code_every_scale);
    RUN(test_scale_pairs_layout);
    RUN(test_quantize_bad_inputs);
    RUN(test_dequantize_bad_inputs);
    RUN(test_pack_scale_pairs_bad_inputs);
    RUN(test_every_provider_quantize_matches_ref);
    RUN(test_every_provider_dequantize_matches_ref);
    RUN(test_staged_providers_reported);
    return qk_test_finish();
}
