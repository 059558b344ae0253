/* mxfp8.md, "The W8A8 linear": one test body run over every provider compiled into this
 * build (skipped visibly where the CPU lacks its instructions), against the spec's formula
 * evaluated in double from the codes (the test's own E4M3/E8M0 decoders; x quantized with
 * qk_mx_quantize), at the spec's bound |out - exact| <= 2^-16 sum|scaled terms| + 1 ulp of
 * the output dtype. Also: the linear's activation codes are qk_mx_quantize's bit for bit,
 * scale bytes at the extremes, NaN/Inf rows, 1 vs 2 threads bit-identical, every bad input
 * of qk_mx_weight_create and qk_mxfp8_linear (named error, nothing written). */
#include "harness.h"
#include "mx_oracle.h"
#include "internal.h"
#include "norm_check.h"
#include "ref/mx_ref.h"

#include <math.h>
#include <stdlib.h>

/* every path of every provider: the GEMV (M <= 3), the small-M kernel and its row groups
   (4..128, groups of 8), the GEMM (129, 512), every row-group tail (avx512's panel GEMM,
   from M = 48 in tiles of 4 rows: 99, 130 and 129 end in 3, 2 and 1 rows; its folded kernel's
   one-group sizes 12, 13, its two and three groups 17 .. 47, and both sides of the switch,
   47 and 48) */
static const int64_t Ms[] = {0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 15, 16, 17, 31, 32, 33, 47, 48, 64, 65, 99, 128, 129, 130, 512};
static const int64_t Ns[] = {1, 3, 16, 17, 64, 100};
static const int64_t Ks[] = {1, 31, 32, 33, 64, 100, 1152, 4304};
static const qk_dtype Dt[] = {QK_DTYPE_F32, QK_DTYPE_F16, QK_DTYPE_BF16};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* Codes and scales come from the test-side oracle (mx_oracle.h), not from the library: x
   [rows, K] quantized as the linear's activations are (E4M3, FLOOR, nearest even). */
static qk_status quantize_rows(const void *x, qk_dtype xdt, int64_t rows, int64_t K,
                               uint8_t *q, uint8_t *s)
{
    mxo_quantize_rows(x, xdt, rows, K, q, s);
    return QK_OK;
}
/* the oracle's decoders, tabulated once (the formula below runs them billions of times) */
static double e4m3_tab[256], e8m0_tab[256];
static void tables_init(void)
{
    for (int i = 0; i < 256; i++) {
        e4m3_tab[i] = mxo_e4m3((uint8_t)i);
        e8m0_tab[i] = mxo_e8m0((uint8_t)i);
    }
}
#define e4m3(c) e4m3_tab[(uint8_t)(c)]
#define e8m0(b) e8m0_tab[(uint8_t)(b)]

static int provider_runs(const qk_provider_set *p)
{
    return (p->cpu_features & ~qk_cpu_features()) == 0;
}

/* ---- weights ---- */
typedef struct wdata {
    int64_t N, K, kb;
    uint8_t *q, *s;
} wdata;

/* Codes from quantizing random weights (the oracle), rows 2, 39, 76, ... replaced by
   random non-NaN codes (subnormals included: tiles holding one take a provider's exact
   decode, the others its fast one), a zero block here and there. */
static void wdata_make(wdata *w, int64_t N, int64_t K, uint64_t seed)
{
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    w->N = N;
    w->K = K;
    w->kb = (K + 31) / 32;
    w->q = malloc((size_t)(N * K));
    w->s = malloc((size_t)(N * w->kb));
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        const double sd = ldexp(1.0, -6 - (int)(qk_rand_u64(&rng) % 4));
        for (int64_t k = 0; k < K; k++) row[k] = (float)(qk_rand_normal(&rng) * sd);
        if (n % 11 == 4) for (int64_t k = 0; k < K && k < 32; k++) row[k] = 0.0f;
        qk_status r = quantize_rows(row, QK_DTYPE_F32, 1, K, w->q + n * K, w->s + n * w->kb);
        CHECK(r == QK_OK, "oracle quantization of the weights: %s (%s)", qk_status_name(r),
              qk_last_error());
        if (n % 37 == 2) {
            for (int64_t k = 0; k < K; k++) {
                uint8_t c = (uint8_t)qk_rand_u64(&rng);
                if ((c & 0x7F) == 0x7F) c ^= 1;
                w->q[n * K + k] = c;
            }
            for (int64_t b = 0; b < w->kb; b++) w->s[n * w->kb + b] = (uint8_t)(105 + qk_rand_u64(&rng) % 20);
        }
    }
    free(row);
}

static void wdata_free(wdata *w)
{
    free(w->q);
    free(w->s);
}

static qk_mx_weight *wcreate(const qk_provider_set *p, const wdata *w, int u8_scale)
{
    int64_t qs[2] = {w->N, w->K}, ss[2] = {w->N, w->kb};
    qk_tensor qt = qk_tensor_make(w->q, QK_DTYPE_F8_E4M3, 2, qs);
    qk_tensor st = qk_tensor_make(w->s, u8_scale ? QK_DTYPE_U8 : QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *mw = NULL;
    qk_status r = qk_mx_weight_create_with(p->ops.mxfp8_linear, &qt, &st, &mw);
    CHECK(r == QK_OK && mw, "%s: qk_mx_weight_create [%lld, %lld]: %s (%s)", p->name,
          (long long)w->N, (long long)w->K, qk_status_name(r), qk_last_error());
    return r == QK_OK ? mw : NULL;
}

/* ---- activations: [M, K] (or [2, M/2, K]) inside a sentinel-filled buffer ---- */
typedef struct tbuf {
    qk_tensor t;
    unsigned char *mem;
    size_t bytes;
} tbuf;

static void tbuf_make(tbuf *b, qk_dtype dt, int64_t M, int64_t C, int layout)
{
    const int64_t es = (int64_t)t_size(dt), rs = C + (layout ? 5 : 0);
    b->bytes = (size_t)(((M ? M : 1) + 1) * rs * 2 + 64) * (size_t)es;
    b->mem = malloc(b->bytes);
    memset(b->mem, 0xA5, b->bytes);
    memset(&b->t, 0, sizeof b->t);
    b->t.data = b->mem + 8 * es;
    b->t.dtype = dt;
    if (layout == 2 && M % 2 == 0 && M > 0) {
        b->t.ndim = 3;
        b->t.shape[0] = 2; b->t.shape[1] = M / 2; b->t.shape[2] = C;
        b->t.stride[2] = 1; b->t.stride[1] = rs; b->t.stride[0] = rs * (M / 2) + 7;
    } else {
        b->t.ndim = 2;
        b->t.shape[0] = M; b->t.shape[1] = C;
        b->t.stride[1] = 1; b->t.stride[0] = rs;
    }
}

static int64_t row_off(const qk_tensor *t, int64_t i)
{
    if (t->ndim == 3) return (i / t->shape[1]) * t->stride[0] + (i % t->shape[1]) * t->stride[1];
    return i * t->stride[0];
}

static double tget(const qk_tensor *t, int64_t m, int64_t k)
{
    return t_decode(t_load_bits(t->data, t->dtype, row_off(t, m) + k), t->dtype);
}
static void tset(qk_tensor *t, int64_t m, int64_t k, double v)
{
    t_store_bits(t->data, t->dtype, row_off(t, m) + k, t_encode(t_round(v, t->dtype), t->dtype));
}

/* rows of N(0, 1) scaled by 2^[-6, 6]; with edges, row 3 of every 5 gets a NaN or an inf */
static void fill_x(tbuf *x, int64_t M, int64_t K, uint64_t *rng, int edges)
{
    for (int64_t m = 0; m < M; m++) {
        const double sc = ldexp(1.0, (int)(qk_rand_u64(rng) % 13) - 6);
        for (int64_t k = 0; k < K; k++) tset(&x->t, m, k, qk_rand_normal(rng) * sc);
        if (edges && m % 5 == 3) {
            const int kind = (int)(m / 5 % 3);
            tset(&x->t, m, (m * 7) % K, kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY);
        }
    }
}

/* x's codes and scales by the oracle (the linear's activation rule): [M][K], [M][kb]. */
static void quantize_x(const tbuf *x, int64_t M, int64_t K, uint8_t *q, uint8_t *s)
{
    const int64_t kb = (K + 31) / 32, es = (int64_t)t_size(x->t.dtype);
    for (int64_t m = 0; m < M; m++) {
        qk_status r = quantize_rows((const char *)x->t.data + row_off(&x->t, m) * es, x->t.dtype,
                                    1, K, q + m * K, s + m * kb);
        CHECK(r == QK_OK, "oracle quantization of x: %s (%s)", qk_status_name(r), qk_last_error());
    }
}

static double ulp_at(double v, qk_dtype d)
{
    tfmt f = tfmt_of(d);
    int e = f.emin;
    if (v != 0 && isfinite(v)) {
        frexp(fabs(v), &e);
        e -= 1;
        if (e < f.emin) e = f.emin;
    }
    return ldexp(1.0, e - (f.mant - 1));
}

/* The formula in double; *sum_abs = sum |scaled terms|. NaN when a scale byte is 0xFF. */
static double exact_out(const uint8_t *qx, const uint8_t *sx, const wdata *w, int64_t n,
                        const float *bias, double *sum_abs)
{
    double total = 0, sa = 0;
    for (int64_t j = 0; j < w->kb; j++) {
        const double sc = e8m0(sx[j]) * e8m0(w->s[n * w->kb + j]);
        double b = 0, ba = 0;
        for (int64_t k = j * 32; k < w->K && k < j * 32 + 32; k++) {
            const double p = e4m3(qx[k]) * e4m3(w->q[n * w->K + k]);
            b += p;
            ba += fabs(p);
        }
        total += sc * b;
        sa += sc * ba;
    }
    *sum_abs = sa;
    return total + (bias ? bias[n] : 0.0);
}

static long check_outputs(const qk_provider_set *p, const wdata *w, const uint8_t *qx,
                          const uint8_t *sx, const tbuf *op, int64_t M, const float *bias,
                          const char *what);

/* Runs one call and checks every output against the bound and nothing else is written.
   Returns the number of bad outputs. */
static long check_call(const qk_provider_set *p, const wdata *w, qk_mx_weight *mw, int64_t M,
                       qk_dtype xdt, qk_dtype odt, int with_bias, int layout, uint64_t seed,
                       int edges, const char *what)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    uint64_t rng = seed;
    tbuf x, o;
    tbuf_make(&x, xdt, M, K, layout);
    fill_x(&x, M, K, &rng, edges);
    tbuf_make(&o, odt, M, N, layout == 2 ? 2 : layout == 1 ? 0 : 1);
    float *bias = malloc(sizeof(float) * (size_t)N);
    for (int64_t n = 0; n < N; n++) bias[n] = (float)qk_rand_normal(&rng);
    int64_t bshape = N;
    qk_tensor bt = qk_tensor_make(bias, QK_DTYPE_F32, 1, &bshape);
    uint8_t *qx = malloc((size_t)(M * K + 1)), *sx = malloc((size_t)(M * kb + 1));
    if (M) quantize_x(&x, M, K, qx, sx);

    qk_status st = qk_mxfp8_linear(&x.t, mw, with_bias ? &bt : NULL, &o.t);
    CHECK(st == QK_OK, "%s %s: M=%lld N=%lld K=%lld x=%s out=%s: %s (%s)", p->name, what,
          (long long)M, (long long)N, (long long)K, qk_dtype_name(xdt), qk_dtype_name(odt),
          qk_status_name(st), qk_last_error());
    long bad = st == QK_OK ? check_outputs(p, w, qx, sx, &o, M, with_bias ? bias : NULL, what) : 0;
    free(qx);
    free(sx);
    free(bias);
    free(x.mem);
    free(o.mem);
    return bad;
}

/* Every output of o [M, N] against the formula in double from x's codes and scales, at the
   spec's bound, and no byte of o's buffer outside its elements written. Returns the number
   of bad outputs. */
static long check_outputs(const qk_provider_set *p, const wdata *w, const uint8_t *qx,
                          const uint8_t *sx, const tbuf *op, int64_t M, const float *bias,
                          const char *what)
{
    const int64_t N = w->N, K = w->K, kb = w->kb;
    const tbuf o = *op;
    const qk_dtype odt = o.t.dtype;
    const int with_bias = bias != NULL;
    long bad = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double sa;
            const double ex = exact_out(qx + m * K, sx + m * kb, w, n, with_bias ? bias : NULL, &sa);
            const double got = tget(&o.t, m, n);
            int ok;
            if (isnan(ex)) ok = isnan(got);
            else if (isinf(t_round(ex, odt))) ok = isinf(got) && (got > 0) == (ex > 0);
            else ok = !isnan(got) && fabs(got - ex) <= ldexp(sa, -16) + ulp_at(ex, odt);
            if (!ok && bad++ < 3)
                CHECK(0, "%s %s M=%lld N=%lld K=%lld out=%s bias=%d: out[%lld][%lld] = %.9g, "
                      "exact %.9g, bound %.3g", p->name, what, (long long)M, (long long)N,
                      (long long)K, qk_dtype_name(odt), with_bias,
                      (long long)m, (long long)n, got, ex, ldexp(sa, -16) + ulp_at(ex, odt));
        }
    /* nothing written outside out's elements */
    {
        const size_t es = t_size(odt);
        unsigned char *mark = calloc(o.bytes, 1);
        for (int64_t m = 0; m < M; m++)
            memset(mark + ((unsigned char *)o.t.data - o.mem) + (size_t)row_off(&o.t, m) * es, 1,
                   (size_t)N * es);
        int clean = 1;
        for (size_t i = 0; i < o.bytes; i++)
            if (!mark[i] && o.mem[i] != 0xA5) clean = 0;
        CHECK(clean, "%s %s M=%lld N=%lld K=%lld: bytes outside out were written", p->name, what,
              (long long)M, (long long)N, (long long)K);
        free(mark);
    }
    return bad;
}

/* Every M, N and K of the lists with every provider, every output dtype, bias or not,
   contiguous, strided and 3-D x, NaN/Inf rows. */
static void test_linear_formula_bound(void)
{
    /* shapes outer, providers inner: each weight is made (by the oracle, the slow part under
       qemu) once for all providers */
    for (int ki = 0; ki < COUNT(Ks); ki++) {
        for (int i = 0; i < COUNT(Ms); i++) {
            const int64_t K = Ks[ki], M = Ms[i], N = Ns[(i + ki) % COUNT(Ns)];
            /* the largest products of M, N and K cost seconds (under sanitizers, minutes)
               for nothing the smaller ones do not hit */
            if (M * N * K > 12000000) continue;
            const qk_dtype xdt = Dt[(i + ki) % 3];
            const qk_dtype odt = (i + ki / 3) % 2 ? QK_DTYPE_F32 : xdt;
            wdata w;
            wdata_make(&w, N, K, (uint64_t)(ki * 100 + i));
            for (int pi = 0; qk_all_providers[pi]; pi++) {
                const qk_provider_set *p = qk_all_providers[pi];
                if (!p->ops.mxfp8_linear) continue;
                if (!provider_runs(p)) {
                    if (ki == 0 && i == 0) qk_test_skip(p->name, "CPU lacks its instructions");
                    continue;
                }
                if (!strcmp(p->name, "ref") && M * N * K > 3000000) continue;
                qk_mx_weight *mw = wcreate(p, &w, i % 2);
                if (mw) {
                    check_call(p, &w, mw, M, xdt, odt, (i + ki) % 2, (i + ki) % 3,
                               (uint64_t)(7 + ki * 31 + i), 1, "sweep");
                    CHECK(qk_mx_weight_n(mw) == N && qk_mx_weight_k(mw) == K, "n/k accessors");
                }
                qk_mx_weight_destroy(mw);
            }
            wdata_free(&w);
        }
    }
}

/* Qwen3.5's vision MLP: linear_fc1 [4304, 1152] and linear_fc2 [1152, 4304] at M = 4. */
static void test_linear_vision_mlp_shapes(void)
{
    const int64_t shapes[2][2] = {{4304, 1152}, {1152, 4304}};
    for (int s = 0; s < 2; s++) {
        wdata w;
        wdata_make(&w, shapes[s][0], shapes[s][1], 77 + (uint64_t)s);
        for (int pi = 0; qk_all_providers[pi]; pi++) {
            const qk_provider_set *p = qk_all_providers[pi];
            if (!p->ops.mxfp8_linear) continue;
            if (!provider_runs(p)) {
                if (s == 0) qk_test_skip(p->name, "CPU lacks its instructions");
                continue;
            }
            qk_mx_weight *mw = wcreate(p, &w, 0);
            if (mw) check_call(p, &w, mw, 4, QK_DTYPE_BF16, QK_DTYPE_BF16, s, 0, 5, 0, "vision");
            qk_mx_weight_destroy(mw);
        }
        wdata_free(&w);
    }
}

/* The linear's activation quantization is the oracle's (and so, by test_mx_quantize,
   qk_mx_quantize's with default options), bit for bit: with an identity
   weight (code 1.0 at [n][n], scale byte 127) and F32 out, out[m][n] is exactly
   dec(qx[m][n]) * 2^(sx - 127) from qk_mx_quantize's codes. x holds ties, values that
   saturate under FLOOR, signed zeros and a wide exponent range. */
static void test_linear_activation_is_qk_mx_quantize(void)
{
    const int64_t N = 100, K = 100, kb = 4, M = 9;
    wdata w = {N, K, kb, calloc((size_t)(N * K), 1), malloc((size_t)(N * kb))};
    memset(w.s, 127, (size_t)(N * kb));
    for (int64_t n = 0; n < N; n++) w.q[n * K + n] = 0x38;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        qk_mx_weight *mw = wcreate(p, &w, 0);
        for (int di = 0; di < 3 && mw; di++) {
            uint64_t rng = 99 + (uint64_t)di;
            tbuf x, o;
            tbuf_make(&x, Dt[di], M, K, 0);
            tbuf_make(&o, QK_DTYPE_F32, M, N, 0);
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++) {
                    const int e = Dt[di] == QK_DTYPE_F16 ? (int)(m % 5) * 2 - 4 : (int)m * 20 - 80;
                    double v = ldexp(qk_rand_normal(&rng), e);
                    if (k % 7 == 1) v = ldexp(1.0 + (2 * (double)(qk_rand_u64(&rng) % 8) + 1) / 16.0, e); /* ties */
                    if (k % 11 == 2) v = ldexp(1.0 + 15.0 / 16.0, e + 8); /* saturates: 496 -> 448 */
                    if (k % 13 == 3) v = (k % 2) ? -0.0 : 0.0;
                    tset(&x.t, m, k, v);
                }
            uint8_t *qx = malloc((size_t)(M * K)), *sx = malloc((size_t)(M * kb));
            quantize_x(&x, M, K, qx, sx);
            qk_status st = qk_mxfp8_linear(&x.t, mw, NULL, &o.t);
            CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
            long bad = 0;
            for (int64_t m = 0; m < M && st == QK_OK; m++)
                for (int64_t n = 0; n < N; n++) {
                    const float want = (float)(e4m3(qx[m * K + n]) * e8m0(sx[m * kb + n / 32]));
                    const float got = ((const float *)o.t.data)[m * N + n];
                    if (fabsf(want) != fabsf(got) || (want != 0 && want != got)) {
                        if (bad++ < 3)
                            CHECK(0, "%s x=%s: out[%lld][%lld] = %a, the oracle gives %a", p->name,
                                  qk_dtype_name(Dt[di]), (long long)m, (long long)n, (double)got,
                                  (double)want);
                    }
                }
            free(qx);
            free(sx);
            free(x.mem);
            free(o.mem);
        }
        qk_mx_weight_destroy(mw);
    }
    wdata_free(&w);
}

/* Scale bytes at the extremes: weights with scale bytes 0..2 against x rows of huge
   magnitude (x scale bytes near 254), weights with 252..254 against tiny x (scale bytes
   near 0, f32 subnormal x included); results in range, within the bound. */
static void test_linear_extreme_scales(void)
{
    const int64_t N = 40, K = 100, M = 6;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        for (int hi = 0; hi < 2; hi++) {
            wdata w;
            wdata_make(&w, N, K, 1234 + (uint64_t)hi);
            for (int64_t i = 0; i < N * w.kb; i++) w.s[i] = (uint8_t)(hi ? 252 + i % 3 : i % 3);
            qk_mx_weight *mw = wcreate(p, &w, hi);
            if (!mw) { wdata_free(&w); continue; }
            uint64_t rng = 5;
            tbuf x, o;
            tbuf_make(&x, QK_DTYPE_F32, M, K, 0);
            tbuf_make(&o, QK_DTYPE_F32, M, N, 0);
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++) {
                    /* hi: x ~ 2^-100 .. 2^-140 (scale bytes ~ 19 .. 0); lo: x ~ 2^100 .. 2^126 */
                    const int e = hi ? -100 - (int)m * 8 : 100 + (int)m * 5;
                    tset(&x.t, m, k, ldexp(qk_rand_normal(&rng), e));
                }
            uint8_t *qx = malloc((size_t)(M * K)), *sx = malloc((size_t)(M * w.kb));
            quantize_x(&x, M, K, qx, sx);
            qk_status st = qk_mxfp8_linear(&x.t, mw, NULL, &o.t);
            CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
            if (st == QK_OK)
                check_outputs(p, &w, qx, sx, &o, M, NULL, hi ? "high weight scales" : "low weight scales");
            free(qx);
            free(sx);
            free(x.mem);
            free(o.mem);
            qk_mx_weight_destroy(mw);
            wdata_free(&w);
        }
    }
}

/* Scale spans at and past what a provider folds into its operands' exponents (avx512: x
   rows up to 2^40 in its small-M kernel and 2^54 in its GEMM, weight rows up to 2^54; wider
   rows keep the exact kernels): weight rows whose block scales alternate between s and
   s - span, x rows whose blocks alternate between magnitudes 2^a and 2^(a - span) (all
   within f32), zero weight blocks with extreme scale bytes, for M on every path; every
   output within the bound. */
static void test_linear_fold_spans(void)
{
    const int64_t N = 35, K = 200, kb = 7;   /* 3 tiles (the last partial), 7 blocks (last partial) */
    static const int wspans[] = {0, 54, 55, 120, 200};
    static const int xspans[] = {0, 40, 41, 54, 55, 120, 200};
    static const int64_t Mv[] = {1, 6, 20, 140};
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        if (!strcmp(p->name, "ref")) continue;   /* no folding; the sweep covers it */
        for (int wi = 0; wi < COUNT(wspans); wi++) {
            wdata w;
            wdata_make(&w, N, K, 600 + (uint64_t)wi);
            /* block exponents 2^wh and 2^(wh - ws) (scale bytes wh + 127 ...); the largest
               products stay inside f32 (wh + xh <= 90), the smallest far below the largest */
            const int ws = wspans[wi], wh = ws > 120 ? 73 : -7, top = 127 + wh;
            for (int64_t n = 0; n < N; n++)
                for (int64_t b = 0; b < kb; b++)
                    w.s[n * kb + b] = (uint8_t)((n + b) % 2 ? top - ws : top);
            /* rows 20 and 21 (tile 1, no subnormal codes): block 1 all zero codes, with scale
               bytes 188 and 0 (a zero block counts for no span, and its scale must scale
               nothing: not even to Inf/NaN) */
            for (int64_t k = 16 * K; k < 32 * K; k++)
                if ((w.q[k] & 0x78) == 0) w.q[k] = (uint8_t)(w.q[k] & 0x80);   /* subnormal -> 0 */
            w.s[20 * kb + 1] = 188;
            w.s[21 * kb + 1] = 0;
            memset(w.q + 20 * K + 32, 0, 32);
            memset(w.q + 21 * K + 32, 0, 32);
            qk_mx_weight *mw = wcreate(p, &w, 0);
            for (int xi = 0; mw && xi < COUNT(xspans); xi++)
                for (int mi = 0; mi < COUNT(Mv); mi++) {
                    const int64_t M = Mv[mi];
                    const int xs = xspans[xi], hi = xs > 120 ? 74 : 10;
                    if (hi + wh > 90) continue;   /* sums past f32's range: not this test */
                    uint64_t rng = 77 + (uint64_t)(xi * 10 + mi);
                    tbuf x, o;
                    tbuf_make(&x, QK_DTYPE_F32, M, K, 0);
                    tbuf_make(&o, QK_DTYPE_F32, M, N, 0);
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t k = 0; k < K; k++) {
                            const int e = (k / 32 + m) % 2 ? hi - xs : hi;
                            tset(&x.t, m, k, (k / 32 == 3 && m % 3 == 0) ? 0.0 : ldexp(qk_rand_normal(&rng), e));
                        }
                    uint8_t *qx = malloc((size_t)M * (size_t)K), *sx = malloc((size_t)M * (size_t)kb);
                    quantize_x(&x, M, K, qx, sx);
                    qk_status st = qk_mxfp8_linear(&x.t, mw, NULL, &o.t);
                    CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
                    char what[96];
                    snprintf(what, sizeof what, "weight span %d, x span %d", ws, xs);
                    if (st == QK_OK) check_outputs(p, &w, qx, sx, &o, M, NULL, what);
                    free(qx);
                    free(sx);
                    free(x.mem);
                    free(o.mem);
                }
            qk_mx_weight_destroy(mw);
            wdata_free(&w);
        }
    }
}

/* Many rows: several row chunks of a provider's many-row path, with every tail. */
static void test_linear_many_rows(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        wdata w;
        wdata_make(&w, 53, 70, 4321);
        qk_mx_weight *mw = wcreate(p, &w, 0);
        if (mw) {
            check_call(p, &w, mw, 1031, QK_DTYPE_BF16, QK_DTYPE_F32, 1, 0, 11, 1, "many rows");
            check_call(p, &w, mw, 517, QK_DTYPE_F16, QK_DTYPE_F16, 0, 1, 12, 0, "many rows");
        }
        qk_mx_weight_destroy(mw);
        wdata_free(&w);
    }
}

/* NaN/Inf in a row of x makes that row's output NaN; other rows are unaffected. Both the
   few-row and the many-row paths. */
static void test_linear_nan_rows(void)
{
    const int64_t N = 37, K = 70;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        wdata w;
        wdata_make(&w, N, K, 55);
        qk_mx_weight *mw = wcreate(p, &w, 0);
        static const int64_t Mv[] = {2, 4, 24, 140};   /* GEMV, small M (2 groups), GEMM */
        for (int mi = 0; mi < COUNT(Mv) && mw; mi++) {
            const int64_t M = Mv[mi];
            uint64_t rng = 3;
            tbuf x, o;
            tbuf_make(&x, QK_DTYPE_BF16, M, K, 0);
            tbuf_make(&o, QK_DTYPE_BF16, M, N, 0);
            fill_x(&x, M, K, &rng, 0);
            tset(&x.t, 1, 5, NAN);
            tset(&x.t, 3, 69, INFINITY);
            if (M > 20) tset(&x.t, 20, 0, -INFINITY);
            CHECK(qk_mxfp8_linear(&x.t, mw, NULL, &o.t) == QK_OK, "%s: %s", p->name, qk_last_error());
            for (int64_t m = 0; m < M; m++) {
                const int nanrow = m == 1 || m == 3 || m == 20;
                int all = 1, none = 1;
                for (int64_t n = 0; n < N; n++) {
                    const double g = tget(&o.t, m, n);
                    if (isnan(g)) none = 0; else all = 0;
                }
                CHECK(nanrow ? all : none, "%s M=%lld row %lld: %s", p->name, (long long)M,
                      (long long)m, nanrow ? "not every output is NaN" : "an output is NaN");
            }
            free(x.mem);
            free(o.mem);
        }
        qk_mx_weight_destroy(mw);
        wdata_free(&w);
    }
}

/* Results are bit-identical for 1 and 2 threads (threads split N and M, never K). */
/* One call's data for the tests that compare two runs of provider p: a weight [N, K], BF16 x
   [M, K] and two F32 outputs [M, N]. */
typedef struct lin_case {
    wdata w;
    qk_mx_weight *mw;   /* NULL if creation failed */
    tbuf x, o1, o2;
} lin_case;

static void lin_case_make(lin_case *lc, const qk_provider_set *p, int64_t M, int64_t N, int64_t K,
                          uint64_t wseed, uint64_t xseed)
{
    wdata_make(&lc->w, N, K, wseed);
    lc->mw = wcreate(p, &lc->w, 0);
    tbuf_make(&lc->x, QK_DTYPE_BF16, M, K, 0);
    fill_x(&lc->x, M, K, &xseed, 1);
    tbuf_make(&lc->o1, QK_DTYPE_F32, M, N, 0);
    tbuf_make(&lc->o2, QK_DTYPE_F32, M, N, 0);
}

static void lin_case_free(lin_case *lc)
{
    free(lc->x.mem);
    free(lc->o1.mem);
    free(lc->o2.mem);
    qk_mx_weight_destroy(lc->mw);
    wdata_free(&lc->w);
}

static void test_linear_threads_bit_identical(void)
{
    const int64_t shapes[][3] = {{1, 4304, 1152}, {4, 1152, 4304}, {33, 300, 1152},
                                 {96, 400, 512}, {2, 2000, 256}};
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        for (int s = 0; s < COUNT(shapes); s++) {
            const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            lin_case lc;
            lin_case_make(&lc, p, M, N, K, 900 + (uint64_t)s, 17);
            qk_set_num_threads(1);
            qk_status a = lc.mw ? qk_mxfp8_linear(&lc.x.t, lc.mw, NULL, &lc.o1.t) : QK_ERR_NOMEM;
            qk_set_num_threads(2);
            qk_status b = lc.mw ? qk_mxfp8_linear(&lc.x.t, lc.mw, NULL, &lc.o2.t) : QK_ERR_NOMEM;
            qk_set_num_threads(0);
            CHECK(a == QK_OK && b == QK_OK, "%s: %s", p->name, qk_last_error());
            CHECK(memcmp(lc.o1.mem, lc.o2.mem, lc.o1.bytes) == 0, "%s M=%lld N=%lld K=%lld: 1 and 2 "
                  "threads differ", p->name, (long long)M, (long long)N, (long long)K);
            lin_case_free(&lc);
        }
    }
}

/* A row's outputs do not depend on the rows beside it (batch invariance) for every
   provider: ref; avx2, whose GEMM for M > 4 reuses decoded panels but sums and scales each
   block as its small-M kernel does; avx512, whose folded kernel serves every M with one
   per-row order (its exact kernels take only weights and rows it cannot fold, a row alone). */
static void test_linear_rows_independent_of_m(void)
{
    const int64_t shapes[][3] = {{33, 300, 1152}, {9, 100, 4304}, {96, 17, 64}, {5, 64, 33},
                                 {261, 40, 100}};
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!p->ops.mxfp8_linear) continue;
        if (!provider_runs(p)) { qk_test_skip(p->name, "CPU lacks its instructions"); continue; }
        for (int s = 0; s < COUNT(shapes); s++) {
            const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            if (!strcmp(p->name, "ref") && M * N * K > 4000000) continue; /* ref is slow */
            lin_case lc;
            lin_case_make(&lc, p, M, N, K, 300 + (uint64_t)s, 23);
            qk_mx_weight *mw = lc.mw;
            tbuf *x = &lc.x, *o1 = &lc.o1, *o2 = &lc.o2;
            qk_status a = mw ? qk_mxfp8_linear(&x->t, mw, NULL, &o1->t) : QK_ERR_NOMEM;
            CHECK(a == QK_OK, "%s: %s", p->name, qk_last_error());
            for (int64_t i = 0; i < M && a == QK_OK; i++) {
                int64_t xs[2] = {1, K}, os[2] = {1, N};
                qk_tensor xi = qk_tensor_make((uint16_t *)x->t.data + i * x->t.stride[0], QK_DTYPE_BF16, 2, xs);
                qk_tensor oi = qk_tensor_make((float *)o2->t.data + i * o2->t.stride[0], QK_DTYPE_F32, 2, os);
                CHECK(qk_mxfp8_linear(&xi, mw, NULL, &oi) == QK_OK, "%s: %s", p->name, qk_last_error());
            }
            long differ = 0;
            for (int64_t i = 0; i < M; i++)
                differ += memcmp((float *)o1->t.data + i * o1->t.stride[0],
                                 (float *)o2->t.data + i * o2->t.stride[0], (size_t)N * 4) != 0;
            CHECK(differ == 0, "%s M=%lld N=%lld K=%lld: %ld rows differ from the row computed alone",
                  p->name, (long long)M, (long long)N, (long long)K, differ);
            lin_case_free(&lc);
        }
    }
}

/* ---- bad inputs ---- */
static void expect(qk_status got, qk_status want, const char *what, const char *needle)
{
    CHECK(got == want, "%s: got %s, want %s (%s)", what, qk_status_name(got), qk_status_name(want),
          qk_last_error());
    if (needle && got == want)
        CHECK(strstr(qk_last_error(), needle) != NULL, "%s: message \"%s\" does not say \"%s\"",
              what, qk_last_error(), needle);
}

static void test_linear_weight_create_errors(void)
{
    enum { N = 3, K = 48, KB = 2 };
    uint8_t q[N * K], s[N * KB];
    memset(q, 0x38, sizeof q);
    memset(s, 120, sizeof s);
    int64_t qs[2] = {N, K}, ss[2] = {N, KB}, bad_ss[2] = {N, 1}, q1[1] = {N * K};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs);
    qk_tensor st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *w = (qk_mx_weight *)(uintptr_t)0x1;
    expect(qk_mx_weight_create(NULL, &st, &w), QK_ERR_INVALID_ARGUMENT, "q NULL", "q");
    expect(qk_mx_weight_create(&qt, NULL, &w), QK_ERR_INVALID_ARGUMENT, "scale NULL", "scale");
    expect(qk_mx_weight_create(&qt, &st, NULL), QK_ERR_INVALID_ARGUMENT, "w NULL", NULL);
    qk_tensor t = qt;
    t.dtype = QK_DTYPE_BF16;
    expect(qk_mx_weight_create(&t, &st, &w), QK_ERR_DTYPE, "q BF16", "F8_E4M3");
    t = st;
    t.dtype = QK_DTYPE_F32;
    expect(qk_mx_weight_create(&qt, &t, &w), QK_ERR_DTYPE, "scale F32", "E8M0");
    t = qk_tensor_make(s, QK_DTYPE_E8M0, 2, bad_ss);
    expect(qk_mx_weight_create(&qt, &t, &w), QK_ERR_SHAPE, "scale [N, K/32]", "[3, 2]");
    t = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 1, q1);
    expect(qk_mx_weight_create(&t, &st, &w), QK_ERR_SHAPE, "q 1-D", "[N, K]");
    t = qt;
    t.shape[1] = K / 2;
    t.stride[1] = 2;
    qk_tensor t2 = qk_tensor_make(s, QK_DTYPE_E8M0, 2, (int64_t[2]){N, 1});
    expect(qk_mx_weight_create(&t, &t2, &w), QK_ERR_LAYOUT, "q last dim strided", "contiguous");
    t = qt;
    t.data = NULL;
    expect(qk_mx_weight_create(&t, &st, &w), QK_ERR_INVALID_ARGUMENT, "q data NULL", "data");
    s[1 * KB + 1] = 0xFF;
    expect(qk_mx_weight_create(&qt, &st, &w), QK_ERR_FORMAT, "0xFF scale", "row 1, block 1");
    s[1 * KB + 1] = 120;
    q[2 * K + 37] = 0x7F;
    expect(qk_mx_weight_create(&qt, &st, &w), QK_ERR_FORMAT, "NaN code 0x7F", "row 2, element 37");
    q[2 * K + 37] = 0xFF;
    expect(qk_mx_weight_create(&qt, &st, &w), QK_ERR_FORMAT, "NaN code 0xFF", "row 2, element 37");
    q[2 * K + 37] = 0x38;
    CHECK(w == (qk_mx_weight *)(uintptr_t)0x1, "a failing create wrote *w");
    t = st;
    t.dtype = QK_DTYPE_U8;
    w = NULL;
    expect(qk_mx_weight_create(&qt, &t, &w), QK_OK, "U8 scale (checkpoint E8M0 bytes)", NULL);
    CHECK(w && qk_mx_weight_n(w) == N && qk_mx_weight_k(w) == K, "accessors");
    qk_mx_weight_destroy(w);
    qk_mx_weight_destroy(NULL);
    /* K = 4304: 135 blocks, the last one partial; K // 32 = 134 is refused */
    uint8_t *bq = calloc(2 * 4304, 1), *bs = calloc(2 * 135, 1);
    qk_tensor bqt = qk_tensor_make(bq, QK_DTYPE_F8_E4M3, 2, (int64_t[2]){2, 4304});
    qk_tensor bst = qk_tensor_make(bs, QK_DTYPE_U8, 2, (int64_t[2]){2, 134});
    expect(qk_mx_weight_create(&bqt, &bst, &w), QK_ERR_SHAPE, "K = 4304 with 134 blocks", "135");
    bst.shape[1] = 135;
    bst.stride[0] = 135;
    w = NULL;
    expect(qk_mx_weight_create(&bqt, &bst, &w), QK_OK, "K = 4304 with 135 blocks", NULL);
    qk_mx_weight_destroy(w);
    free(bq);
    free(bs);
}

static void test_linear_call_errors(void)
{
    enum { N = 5, K = 40, M = 3 };
    uint8_t q[N * K], s[N * 2];
    memset(q, 0x30, sizeof q);
    memset(s, 127, sizeof s);
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, (int64_t[2]){N, K});
    qk_tensor st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, (int64_t[2]){N, 2});
    qk_mx_weight *w = NULL;
    expect(qk_mx_weight_create(&qt, &st, &w), QK_OK, "create", NULL);
    if (!w) return;
    float x[M * K + 64], out[M * N + 64], bias[N + 1];
    for (int i = 0; i < M * K + 64; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N + 1; i++) bias[i] = 0.5f;
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 2, (int64_t[2]){M, K});
    qk_tensor ot = qk_tensor_make(out, QK_DTYPE_F32, 2, (int64_t[2]){M, N});
    qk_tensor bt = qk_tensor_make(bias, QK_DTYPE_F32, 1, (int64_t[1]){N});
    const float sentinel = -12345.0f;
#define RESET() for (int i_ = 0; i_ < M * N + 64; i_++) out[i_] = sentinel
#define UNTOUCHED() do { int ok_ = 1; for (int i_ = 0; i_ < M * N + 64; i_++) ok_ &= out[i_] == sentinel; \
        CHECK(ok_, "a failing call wrote out"); } while (0)
    qk_tensor t;
    RESET();
    t = xt; t.shape[1] = K - 1;
    expect(qk_mxfp8_linear(&t, w, NULL, &ot), QK_ERR_SHAPE, "K mismatch", "K = 40");
    UNTOUCHED();
    t = bt; t.dtype = QK_DTYPE_BF16;
    expect(qk_mxfp8_linear(&xt, w, &t, &ot), QK_ERR_DTYPE, "bias BF16", "bias");
    t = bt; t.shape[0] = N + 1;
    expect(qk_mxfp8_linear(&xt, w, &t, &ot), QK_ERR_SHAPE, "bias length N+1", "bias");
    t = ot; t.shape[1] = N + 1; t.stride[0] = N + 1;
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_SHAPE, "out [M, N+1]", "out");
    t = ot; t.shape[0] = M - 1;
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_SHAPE, "out [M-1, N]", "out");
    t = ot; t.dtype = QK_DTYPE_BF16;
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_DTYPE, "out BF16 for F32 x", "out");
    t = ot; t.dtype = QK_DTYPE_I32;
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_DTYPE, "out I32", "out");
    t = xt; t.dtype = QK_DTYPE_U8;
    expect(qk_mxfp8_linear(&t, w, NULL, &ot), QK_ERR_DTYPE, "x U8", "x");
    expect(qk_mxfp8_linear(&xt, NULL, NULL, &ot), QK_ERR_INVALID_ARGUMENT, "NULL weight", "w");
    expect(qk_mxfp8_linear(NULL, w, NULL, &ot), QK_ERR_INVALID_ARGUMENT, "NULL x", "x");
    expect(qk_mxfp8_linear(&xt, w, NULL, NULL), QK_ERR_INVALID_ARGUMENT, "NULL out", "out");
    t = xt; t.stride[1] = 2;
    expect(qk_mxfp8_linear(&t, w, NULL, &ot), QK_ERR_LAYOUT, "x strided last dim", "contiguous");
    t = ot; t.stride[0] = 0;
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_LAYOUT, "out rows aliasing", "overlap");
    t = ot; t.data = x + 8; /* out overlapping x */
    expect(qk_mxfp8_linear(&xt, w, NULL, &t), QK_ERR_LAYOUT, "out overlaps x", "overlaps x");
    UNTOUCHED();
    /* M = 0: OK, nothing written */
    t = xt; t.shape[0] = 0;
    qk_tensor o0 = ot; o0.shape[0] = 0;
    expect(qk_mxfp8_linear(&t, w, &bt, &o0), QK_OK, "M = 0", NULL);
    UNTOUCHED();
    /* 1-D x [K] -> out [N]; F32 out for F16 x */
    uint16_t xh[K];
    for (int i = 0; i < K; i++) xh[i] = qk_f16_from_f32((float)(i % 5) - 2.0f);
    qk_tensor x1 = qk_tensor_make(xh, QK_DTYPE_F16, 1, (int64_t[1]){K});
    qk_tensor o1 = qk_tensor_make(out, QK_DTYPE_F32, 1, (int64_t[1]){N});
    expect(qk_mxfp8_linear(&x1, w, &bt, &o1), QK_OK, "1-D x, F32 out for F16 x", NULL);
    /* sum over k of (k%5 - 2) * 0.5 + 0.5 (code 0x30 = 0.5, scale 1) */
    double want = 0.5;
    for (int i = 0; i < K; i++) want += 0.5 * ((i % 5) - 2);
    CHECK(out[0] == (float)want && out[N - 1] == (float)want, "1-D call: %g, want %g", (double)out[0], want);
    qk_mx_weight_destroy(w);
#undef RESET
#undef UNTOUCHED
}

int main(void)
{
    qk_test_require_cpu("test_linear");
    mx_oracle_init();
    tables_init();
    RUN(test_linear_weight_create_errors);
    RUN(test_linear_call_errors);
    RUN(test_linear_activation_is_qk_mx_quantize);
    RUN(test_linear_formula_bound);
    RUN(test_linear_vision_mlp_shapes);
    RUN(test_linear_extreme_scales);
    RUN(test_linear_fold_spans);
    RUN(test_linear_many_rows);
    RUN(test_linear_nan_rows);
    RUN(test_linear_threads_bit_identical);
    RUN(test_linear_rows_independent_of_m);
    return qk_test_finish();
}
