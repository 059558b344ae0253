/* RMSNorm family: one test body per op, run over every provider compiled into this build
 * (skipped visibly where the CPU lacks its instructions), against a double-precision
 * evaluation of norm.md with its exact bounds, over shapes that hit every tail, every
 * x/weight(/gate) dtype pairing, strided rows, in-place calls, zero/NaN/Inf rows and
 * eps = 0. Fused add+norm must equal add-then-norm bit for bit for every provider. */
#include "harness.h"
#include "internal.h"
#include "norm_check.h"

#include <math.h>
#include <stdlib.h>

static const int64_t Hs[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
                             255, 256, 1000, 1024, 2048, 4096, 4304, 5120};
static const int64_t Rows[] = {1, 2, 5, 16, 33, 0};
static const qk_dtype Dt[] = {QK_DTYPE_F32, QK_DTYPE_F16, QK_DTYPE_BF16};
#define NH (int)(sizeof Hs / sizeof Hs[0])

enum layout { L_CONTIG, L_STRIDED, L_3D, L_INPLACE, L_COUNT };

/* A tensor [rows, H] (or [a, b, H]) inside a larger buffer filled with a sentinel. */
typedef struct tbuf {
    qk_tensor t;
    unsigned char *mem;
    size_t bytes;
} tbuf;

static void tbuf_make(tbuf *b, qk_dtype dt, int64_t rows, int64_t H, enum layout lay)
{
    int64_t pad = (lay == L_STRIDED || lay == L_3D) ? 5 : 0;
    int64_t rs = H + pad, es = (int64_t)t_size(dt);
    b->bytes = (size_t)((rows ? rows : 1) * rs + 64) * (size_t)es * 2;
    b->mem = malloc(b->bytes);
    memset(b->mem, 0xA5, b->bytes);
    memset(&b->t, 0, sizeof b->t);
    b->t.data = b->mem + 16 * es;
    b->t.dtype = dt;
    if (lay == L_3D && rows % 2 == 0 && rows > 0) {
        /* [2, rows/2, H]: inner rows stride H + pad, outer stride skips one more row */
        b->t.ndim = 3;
        b->t.shape[0] = 2; b->t.shape[1] = rows / 2; b->t.shape[2] = H;
        b->t.stride[2] = 1; b->t.stride[1] = rs; b->t.stride[0] = rs * (rows / 2) + rs / 2;
    } else {
        b->t.ndim = 2;
        b->t.shape[0] = rows; b->t.shape[1] = H;
        b->t.stride[1] = 1; b->t.stride[0] = lay == L_3D ? rs + 3 : rs;
    }
}

static int64_t row_off(const qk_tensor *t, int64_t i) /* element offset of row i */
{
    if (t->ndim == 3) return (i / t->shape[1]) * t->stride[0] + (i % t->shape[1]) * t->stride[1];
    return i * t->stride[0];
}

/* the mean of the values fill() makes (non-zero in the long-row test, where it makes a sum of
   squares that a single f32 accumulator per lane gets wrong) */
static double fill_mean;

/* Fill with values exactly representable in dt. kind: 0 normal, rows may be edge rows. */
static void fill(tbuf *b, int64_t rows, int64_t H, uint64_t *rng, double scale, int edges)
{
    qk_dtype dt = b->t.dtype;
    for (int64_t i = 0; i < rows; i++) {
        int row_kind = edges ? (int)(i % 7) : 0; /* 3: zero row, 5: NaN/Inf, 6: wide range */
        for (int64_t k = 0; k < H; k++) {
            double v = qk_rand_normal(rng) * scale + fill_mean;
            if (row_kind == 3) v = 0.0;
            if (row_kind == 5 && k == H / 2) v = (i % 2) ? NAN : -INFINITY;
            if (row_kind == 6) v *= ldexp(1.0, (int)(qk_rand_u64(rng) % 40) - 20);
            t_store_bits(b->t.data, dt, row_off(&b->t, i) + k, t_encode(t_round(v, dt), dt));
        }
    }
}

static double get(const qk_tensor *t, int64_t i, int64_t k)
{
    return t_decode(t_load_bits(t->data, t->dtype, row_off(t, i) + k), t->dtype);
}

/* Every byte outside the tensor's elements still holds the sentinel. */
static int untouched_outside(const tbuf *b, int64_t rows, int64_t H)
{
    size_t es = t_size(b->t.dtype);
    unsigned char *mark = calloc(b->bytes, 1);
    for (int64_t i = 0; i < rows; i++)
        memset(mark + ((unsigned char *)b->t.data - b->mem) + (size_t)row_off(&b->t, i) * es, 1,
               (size_t)H * es);
    int ok = 1;
    for (size_t j = 0; j < b->bytes && ok; j++)
        if (!mark[j] && b->mem[j] != 0xA5) ok = 0;
    free(mark);
    return ok;
}

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

static int provider_runs(const qk_provider_set *p)
{
    return (p->cpu_features & ~qk_cpu_features()) == 0;
}

/* One call of op `kind` with provider p, checked element by element. */
static void check_case(const qk_provider_set *p, qk_norm_kind kind, qk_dtype xdt, qk_dtype wdt,
                       qk_dtype gdt, int64_t rows, int64_t H, enum layout lay, float eps,
                       uint64_t seed)
{
    const int add = kind == QK_NORM_ADD_RMS || kind == QK_NORM_ADD_GEMMA;
    const int gemma = kind == QK_NORM_GEMMA || kind == QK_NORM_ADD_GEMMA;
    const int gated = kind == QK_NORM_GATED;
    uint64_t rng = seed;
    tbuf x, res, gate, out, ro, wb;
    tbuf_make(&x, xdt, rows, H, lay);
    fill(&x, rows, H, &rng, 1.0, 1);
    tbuf_make(&res, xdt, rows, H, lay == L_INPLACE ? L_CONTIG : lay);
    fill(&res, rows, H, &rng, 0.5, 0);
    tbuf_make(&gate, gdt, rows, H, lay == L_INPLACE ? L_CONTIG : lay);
    fill(&gate, rows, H, &rng, 2.0, 0);
    tbuf_make(&wb, wdt, 1, H, L_CONTIG);
    for (int64_t k = 0; k < H; k++) {
        double w = gemma ? qk_rand_normal(&rng) * 0.05 : 1.0 + qk_rand_normal(&rng) * 0.1;
        t_store_bits(wb.t.data, wdt, k, t_encode(t_round(w, wdt), wdt));
    }
    qk_tensor w = qk_tensor_make(wb.t.data, wdt, 1, &H);
    tbuf_make(&out, xdt, rows, H, lay == L_INPLACE ? L_CONTIG : lay);
    tbuf_make(&ro, xdt, rows, H, lay == L_INPLACE ? L_CONTIG : lay);
    /* keep copies of the inputs (in-place calls overwrite them) */
    double *xin = malloc(sizeof(double) * (size_t)(rows * H + 1));
    double *rin = malloc(sizeof(double) * (size_t)(rows * H + 1));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < H; k++) {
            xin[i * H + k] = get(&x.t, i, k);
            rin[i * H + k] = get(&res.t, i, k);
        }
    qk_tensor *o = lay == L_INPLACE ? &x.t : &out.t;
    qk_tensor *o2 = lay == L_INPLACE && add ? &res.t : &ro.t;
    float *rstd = malloc(sizeof(float) * (size_t)(rows + 1));
    for (int64_t i = 0; i <= rows; i++) rstd[i] = -7.0f;
    int64_t rshape = rows;
    qk_tensor rt = qk_tensor_make(rstd, QK_DTYPE_F32, 1, &rshape);

    const qk_norm_impl *impl = &p->ops.norm[kind];
    qk_status st = qk_norm_run(kind, impl, &x.t, &w, add ? &res.t : gated ? &gate.t : NULL, eps, o,
                               add ? o2 : (gated ? NULL : &rt));
    CHECK(st == QK_OK, "%s %s x=%s w=%s H=%lld rows=%lld: status %s (%s)", p->name,
          qk_norm_op_name(kind), qk_dtype_name(xdt), qk_dtype_name(wdt), (long long)H,
          (long long)rows, qk_status_name(st), qk_last_error());

    long bad = 0, badres = 0, badrstd = 0;
    for (int64_t i = 0; i < rows && st == QK_OK; i++) {
        /* the row the norm sees: x, or s = rnd(fl32(x + residual)) */
        double ss = 0;
        double *srow = malloc(sizeof(double) * (size_t)H);
        for (int64_t k = 0; k < H; k++) {
            double v = xin[i * H + k];
            if (add) {
                v = t_round((double)((float)v + (float)rin[i * H + k]), xdt);
                uint32_t got = t_load_bits(o2->data, xdt, row_off(o2, i) + k);
                uint32_t want = t_encode(v, xdt);
                if (got != want && !(isnan(v) && isnan(t_decode(got, xdt)))) badres++;
            }
            srow[k] = v;
            ss += v * v;
        }
        double r = 1.0 / sqrt(ss / (double)H + (double)eps);
        if (!add && !gated) {
            double rg = rstd[i];
            if (!(isnan(r) ? isnan(rg) : isinf(r) ? rg == r : fabs(rg - r) <= ldexp(fabs(r), -20)))
                badrstd++;
        }
        for (int64_t k = 0; k < H; k++) {
            double wv = t_decode(t_load_bits(w.data, wdt, k), wdt);
            if (gemma) wv = 1.0 + wv;
            double e = srow[k] * r * wv;
            if (gated) e *= silu_d(get(&gate.t, i, k));
            uint32_t got = t_load_bits(o->data, xdt, row_off(o, i) + k);
            if (!t_within_bound(got, e, xdt)) {
                if (bad < 3)
                    fprintf(stderr, "  %s %s x=%s w=%s H=%lld row %lld k %lld: got %.9g want %.9g\n",
                            p->name, qk_norm_op_name(kind), qk_dtype_name(xdt), qk_dtype_name(wdt),
                            (long long)H, (long long)i, (long long)k, t_decode(got, xdt), e);
                bad++;
            }
        }
        free(srow);
    }
    CHECK(bad == 0, "%s %s x=%s w=%s g=%s H=%lld rows=%lld layout %d eps %g: %ld elements out of "
          "bound", p->name, qk_norm_op_name(kind), qk_dtype_name(xdt), qk_dtype_name(wdt),
          qk_dtype_name(gdt), (long long)H, (long long)rows, (int)lay, (double)eps, bad);
    CHECK(badres == 0, "%s %s: %ld residual_out elements differ from rnd(x + residual)", p->name,
          qk_norm_op_name(kind), badres);
    CHECK(badrstd == 0, "%s %s H=%lld: %ld rstd values out of bound", p->name,
          qk_norm_op_name(kind), (long long)H, badrstd);
    if (!add && !gated) CHECK(rstd[rows] == -7.0f, "rstd written past its end");
    CHECK(untouched_outside(lay == L_INPLACE ? &x : &out, rows, H),
          "%s %s: bytes outside out's elements were written", p->name, qk_norm_op_name(kind));

    /* fused == unfused, bit for bit: normalise the (checked) residual_out with the plain op */
    if (add && st == QK_OK && rows > 0) {
        tbuf o3;
        tbuf_make(&o3, xdt, rows, H, L_CONTIG);
        qk_norm_kind plain = gemma ? QK_NORM_GEMMA : QK_NORM_RMS;
        qk_status st2 = qk_norm_run(plain, &p->ops.norm[plain], o2, &w, NULL, eps, &o3.t, NULL);
        long diff = 0;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t k = 0; k < H; k++) {
                uint32_t a = t_load_bits(o->data, xdt, row_off(o, i) + k);
                uint32_t b = t_load_bits(o3.t.data, xdt, row_off(&o3.t, i) + k);
                if (a != b) diff++;
            }
        CHECK(st2 == QK_OK && diff == 0, "%s %s x=%s w=%s H=%lld: fused differs from unfused in "
              "%ld elements", p->name, qk_norm_op_name(kind), qk_dtype_name(xdt),
              qk_dtype_name(wdt), (long long)H, diff);
        free(o3.mem);
    }
    free(xin); free(rin); free(rstd);
    free(x.mem); free(res.mem); free(gate.mem); free(out.mem); free(ro.mem); free(wb.mem);
}

static void run_op(qk_norm_kind kind)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p)) {
            char what[96];
            snprintf(what, sizeof what, "%s/%s", p->name, qk_norm_op_name(kind));
            qk_test_skip(what, "this CPU lacks the provider's instructions");
            continue;
        }
        if (!p->ops.norm[kind].fn) continue;
        /* every x dtype x weight dtype x H x rows; layouts, gate dtypes and eps rotate */
        int n = 0;
        for (int xi = 0; xi < 3; xi++)
            for (int wi = 0; wi < 3; wi++)
                for (int hi = 0; hi < NH; hi++)
                    for (int ri = 0; ri < 6; ri++, n++) {
                        int64_t H = Hs[hi], rows = Rows[ri];
                        if (H >= 4096 && rows > 5) continue; /* big rows: covered by 0..5 */
                        enum layout lay = (enum layout)(n % L_COUNT);
                        float eps = (n % 11 == 0) ? 0.0f : 1e-6f;
                        check_case(p, kind, Dt[xi], Dt[wi], Dt[(xi + hi + ri) % 3], rows, H, lay,
                                   eps, 0x9E3779B97F4A7C15ULL * (uint64_t)(n + 1) + (uint64_t)kind);
                    }
    }
}

static void test_rms_norm(void) { run_op(QK_NORM_RMS); }

/* norm.md: the sum of squares keeps its relative error below 2^-22 for every H up to 2^20.
   Rows of H = 2^20 with mean 4 (every square adds the same sign, so nothing cancels and a
   single f32 running sum per lane drifts past the F32 bound), F32 and BF16, every provider. */
static void test_long_rows_nonzero_mean(void)
{
    static const qk_norm_kind kinds[2] = {QK_NORM_RMS, QK_NORM_GEMMA};
    static const qk_dtype dts[2] = {QK_DTYPE_F32, QK_DTYPE_BF16};
    fill_mean = 4.0;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p)) {
            qk_test_skip(p->name, "this CPU lacks the provider's instructions");
            continue;
        }
        for (int k = 0; k < 2; k++)
            for (int d = 0; d < 2; d++)
                if (p->ops.norm[kinds[k]].fn)
                    check_case(p, kinds[k], dts[d], dts[d], dts[d], 2, (int64_t)1 << 20, L_CONTIG,
                               1e-6f, 77 + (uint64_t)(2 * k + d));
    }
    fill_mean = 0.0;
}
static void test_gemma_rms_norm(void) { run_op(QK_NORM_GEMMA); }
static void test_add_rms_norm(void) { run_op(QK_NORM_ADD_RMS); }
static void test_add_gemma_rms_norm(void) { run_op(QK_NORM_ADD_GEMMA); }
static void test_rms_norm_gated(void) { run_op(QK_NORM_GATED); }

/* A row of zeros: eps > 0 gives out = 0 and rstd = 1/sqrt(eps); eps = 0 gives NaN. */
static void test_zero_row_rule(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_GEMMA].fn) continue; /* (some have no norm op) */
        for (int64_t H = 1; H <= 70; H += 23) {
            uint16_t x[70] = {0}, out[70];
            float w[70], r = 0;
            for (int k = 0; k < H; k++) w[k] = 0.25f;
            qk_tensor xt = qk_tensor_make(x, QK_DTYPE_BF16, 1, &H);
            qk_tensor wt = qk_tensor_make(w, QK_DTYPE_F32, 1, &H);
            qk_tensor ot = qk_tensor_make(out, QK_DTYPE_BF16, 1, &H);
            int64_t one = 1;
            qk_tensor rt = qk_tensor_make(&r, QK_DTYPE_F32, 1, &one);
            CHECK(qk_norm_run(QK_NORM_GEMMA, &p->ops.norm[QK_NORM_GEMMA], &xt, &wt, NULL, 1e-6f,
                              &ot, &rt) == QK_OK, "%s", qk_last_error());
            int allzero = 1;
            for (int k = 0; k < H; k++) allzero &= (out[k] & 0x7fff) == 0;
            CHECK(allzero, "%s: zero row with eps > 0 must give zeros", p->name);
            CHECK(fabs(r - 1.0 / sqrt((double)1e-6f)) <= 1e-6 * r, "%s: rstd %g for a zero row",
                  p->name, (double)r);
            CHECK(qk_norm_run(QK_NORM_GEMMA, &p->ops.norm[QK_NORM_GEMMA], &xt, &wt, NULL, 0.0f,
                              &ot, &rt) == QK_OK, "%s", qk_last_error());
            int allnan = 1;
            for (int k = 0; k < H; k++) allnan &= (out[k] & 0x7fff) > 0x7f80;
            CHECK(allnan, "%s: zero row with eps = 0 must give NaN", p->name);
        }
    }
}

/* 1 + w is formed in f32: a BF16 weight of 2^-8 must act as 1.00390625, not 1. */
static void test_gemma_offset_in_f32(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_GEMMA].fn) continue; /* (some have no norm op) */
        int64_t H = 40;
        float x[40], out[40];
        uint16_t w[40];
        for (int k = 0; k < H; k++) { x[k] = 1.0f; w[k] = 0x3b80; /* 2^-8 in BF16 */ }
        qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 1, &H);
        qk_tensor wt = qk_tensor_make(w, QK_DTYPE_BF16, 1, &H);
        qk_tensor ot = qk_tensor_make(out, QK_DTYPE_F32, 1, &H);
        CHECK(qk_norm_run(QK_NORM_GEMMA, &p->ops.norm[QK_NORM_GEMMA], &xt, &wt, NULL, 0.0f, &ot,
                          NULL) == QK_OK, "%s", qk_last_error());
        for (int k = 0; k < H; k++)
            CHECK(out[k] == 1.00390625f, "%s: out[%d] = %.9g, want 1.00390625", p->name, k,
                  (double)out[k]);
    }
}

/* Add forms on rows so small that the sum of squares of s = rnd(x + residual) is below 2^-60
   (where the BF16 dot-product sums are redone in the generic code, which must sum s, not
   x), eps = 0 so r depends on it: single rows and pipelined ones, every tail. */
static void test_add_tiny_rows(void)
{
    static const int64_t Ht[] = {1, 31, 32, 33, 127, 128, 129, 300, 4304};
    static const qk_dtype dts[2] = {QK_DTYPE_BF16, QK_DTYPE_F32};
    static const qk_norm_kind kinds[2] = {QK_NORM_ADD_RMS, QK_NORM_ADD_GEMMA};
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_ADD_GEMMA].fn) continue;
        for (int d = 0; d < 2; d++)
            for (int ki = 0; ki < 2; ki++)
                for (int hi = 0; hi < (int)(sizeof Ht / sizeof Ht[0]); hi++)
                    for (int64_t rows = 1; rows <= 3; rows += 2) {
                        const qk_dtype dt = dts[d];
                        const qk_norm_kind kind = kinds[ki];
                        const int64_t H = Ht[hi], n = rows * H, es = (int64_t)t_size(dt);
                        uint64_t rng = 101 + (uint64_t)(hi * 4 + ki * 2 + d);
                        unsigned char *x = malloc((size_t)(n * es)), *res = malloc((size_t)(n * es));
                        unsigned char *o = malloc((size_t)(n * es)), *ro = malloc((size_t)(n * es));
                        uint16_t *w = malloc((size_t)H * 2);
                        for (int64_t i = 0; i < n; i++) {
                            t_store_bits(x, dt, i, t_encode(t_round(qk_rand_normal(&rng) * 0x1p-40, dt), dt));
                            t_store_bits(res, dt, i, t_encode(t_round(qk_rand_normal(&rng) * 0x1p-40, dt), dt));
                        }
                        for (int64_t k = 0; k < H; k++)
                            w[k] = (uint16_t)t_encode(t_round(qk_rand_normal(&rng) * 0.1, QK_DTYPE_BF16),
                                                      QK_DTYPE_BF16);
                        int64_t sh[2] = {rows, H};
                        qk_tensor xt = qk_tensor_make(x, dt, 2, sh), rt = qk_tensor_make(res, dt, 2, sh);
                        qk_tensor wt = qk_tensor_make(w, QK_DTYPE_BF16, 1, &H);
                        qk_tensor ot = qk_tensor_make(o, dt, 2, sh), rot = qk_tensor_make(ro, dt, 2, sh);
                        CHECK(qk_norm_run(kind, &p->ops.norm[kind], &xt, &wt, &rt, 0.0f, &ot, &rot) == QK_OK,
                              "%s: %s", p->name, qk_last_error());
                        long bad = 0, badres = 0;
                        for (int64_t i = 0; i < rows; i++) {
                            double ss = 0;
                            for (int64_t k = 0; k < H; k++) {
                                const int64_t e = i * H + k;
                                double v = t_round((double)((float)t_decode(t_load_bits(x, dt, e), dt) +
                                                            (float)t_decode(t_load_bits(res, dt, e), dt)), dt);
                                if (t_load_bits(ro, dt, e) != t_encode(v, dt)) badres++;
                                ss += v * v;
                            }
                            const double r = 1.0 / sqrt(ss / (double)H);
                            for (int64_t k = 0; k < H; k++) {
                                const int64_t e = i * H + k;
                                double wv = t_decode(w[k], QK_DTYPE_BF16);
                                if (kind == QK_NORM_ADD_GEMMA) wv += 1.0;
                                if (!t_within_bound(t_load_bits(o, dt, e), t_decode(t_load_bits(ro, dt, e), dt) * r * wv, dt))
                                    bad++;
                            }
                        }
                        CHECK(bad == 0 && badres == 0, "%s %s x=%s H=%lld rows=%lld, |x| ~ 2^-40: %ld "
                              "elements out of bound, %ld residual_out elements wrong", p->name,
                              qk_norm_op_name(kind), qk_dtype_name(dt), (long long)H, (long long)rows,
                              bad, badres);
                        free(x); free(res); free(o); free(ro); free(w);
                    }
    }
}

/* NaN/Inf in one row leave the other rows exactly as computed without them. */
static void test_nonfinite_rows_isolated(void)
{
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_GEMMA].fn) continue; /* (some have no norm op) */
        int64_t shape[2] = {3, 100}, H = 100;
        float x[300], out1[300], out2[300], w[100];
        uint64_t rng = 7;
        for (int k = 0; k < 300; k++) x[k] = (float)qk_rand_normal(&rng);
        for (int k = 0; k < 100; k++) w[k] = 0.01f * (float)k;
        qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 2, shape);
        qk_tensor wt = qk_tensor_make(w, QK_DTYPE_F32, 1, &H);
        qk_tensor o1 = qk_tensor_make(out1, QK_DTYPE_F32, 2, shape);
        qk_tensor o2 = qk_tensor_make(out2, QK_DTYPE_F32, 2, shape);
        qk_norm_run(QK_NORM_GEMMA, &p->ops.norm[QK_NORM_GEMMA], &xt, &wt, NULL, 1e-6f, &o1, NULL);
        x[150] = NAN;
        qk_norm_run(QK_NORM_GEMMA, &p->ops.norm[QK_NORM_GEMMA], &xt, &wt, NULL, 1e-6f, &o2, NULL);
        CHECK(!memcmp(out1, out2, 400) && !memcmp(out1 + 200, out2 + 200, 400),
              "%s: a NaN in row 1 changed rows 0 or 2", p->name);
        CHECK(isnan(out2[150]), "%s: NaN input did not give NaN", p->name);
    }
}

/* elements of a and b (n of dtype dt) whose bits differ, both NaN counting as equal (NaN
   payloads may follow operand order) */
static long count_differ(const unsigned char *a, const unsigned char *b, qk_dtype dt, int64_t n)
{
    long differ = 0;
    for (int64_t e = 0; e < n; e++) {
        const uint32_t b1 = t_load_bits(a, dt, e), b2 = t_load_bits(b, dt, e);
        differ += b1 != b2 && !(isnan(t_decode(b1, dt)) && isnan(t_decode(b2, dt)));
    }
    return differ;
}

/* Large calls (12-13 MiB of x, residual, out and residual_out: above NORM_STREAM_MIN_BYTES,
   so the providers with streaming stores take them; 2 threads' pipelined rows over hundreds
   of rows): every provider's rows equal, bit for bit, the same rows computed one call each
   (the single-row path), nothing written between the rows, and residual_out in place of
   residual in a second pass. Two layouts of out, residual and residual_out: rows at
   addresses that are not 64-byte aligned (row stride H + 3, base off by one element: most
   rows store as usual), and every row 64-byte aligned (stride 3136, base off by 64 bytes:
   every row streams). H = 3100 leaves tails of every path. */
static void test_large_calls(void)
{
    static const qk_norm_kind kinds[] = {QK_NORM_GEMMA, QK_NORM_ADD_GEMMA};
    const int64_t H = 3100;
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_GEMMA].fn) continue;
        for (int aligned = 0; aligned < 2; aligned++)
        for (int di = 0; di < 3; di++)
            for (int ki = 0; ki < 2; ki++)
                for (int inplace = 0; inplace < 1 + (ki == 1); inplace++) {
                    const qk_dtype dt = Dt[di];
                    const qk_norm_kind kind = kinds[ki];
                    const int add = kind == QK_NORM_ADD_GEMMA;
                    const int64_t es = (int64_t)t_size(dt);
                    const int64_t rs = aligned ? 3136 : H + 3, off = aligned ? 64 / es : 1;
                    const int64_t R = add ? 520 : 1040, n = R * rs + off;
                    uint64_t rng = 5 + (uint64_t)(di * 4 + ki * 2 + inplace);
                    const size_t nb = (size_t)(n * es + 63) & ~(size_t)63;
                    unsigned char *x = malloc((size_t)(R * H * es)), *res = aligned_alloc(64, nb);
                    unsigned char *o = aligned_alloc(64, nb), *ro = aligned_alloc(64, nb);
                    unsigned char *res2 = malloc((size_t)(n * es));
                    unsigned char *o1 = malloc((size_t)(H * es)), *ro1 = malloc((size_t)(H * es));
                    uint16_t *w = malloc((size_t)H * 2);
                    memset(o, 0xA5, (size_t)(n * es));
                    memset(ro, 0xA5, (size_t)(n * es));
                    memset(res, 0xA5, (size_t)(n * es));
                    for (int64_t i = 0; i < R; i++)
                        for (int64_t k = 0; k < H; k++) {
                            t_store_bits(x, dt, i * H + k, t_encode(t_round(qk_rand_normal(&rng), dt), dt));
                            t_store_bits(res, dt, off + i * rs + k,
                                         t_encode(t_round(qk_rand_normal(&rng) * 0.5, dt), dt));
                        }
                    memcpy(res2, res, (size_t)(n * es));
                    for (int64_t k = 0; k < H; k++)
                        w[k] = (uint16_t)t_encode(t_round(qk_rand_normal(&rng) * 0.1, QK_DTYPE_BF16), QK_DTYPE_BF16);
                    int64_t sh[2] = {R, H}, sh1[2] = {1, H};
                    qk_tensor xt = qk_tensor_make(x, dt, 2, sh), wt = qk_tensor_make(w, QK_DTYPE_BF16, 1, &H);
                    qk_tensor rt = qk_tensor_make(res + off * es, dt, 2, sh);
                    qk_tensor ot = qk_tensor_make(o + off * es, dt, 2, sh);
                    qk_tensor rot = qk_tensor_make((inplace ? res : ro) + off * es, dt, 2, sh);
                    rt.stride[0] = ot.stride[0] = rot.stride[0] = rs;
                    CHECK(qk_norm_run(kind, &p->ops.norm[kind], &xt, &wt, add ? &rt : NULL, 1e-6f, &ot,
                                      add ? &rot : NULL) == QK_OK, "%s: %s", p->name, qk_last_error());
                    long differ = 0, touched = 0;
                    for (int64_t i = 0; i < R; i++) {
                        qk_tensor x1 = qk_tensor_make(x + i * H * es, dt, 2, sh1);
                        qk_tensor r1 = qk_tensor_make(res2 + (off + i * rs) * es, dt, 2, sh1);
                        qk_tensor a1 = qk_tensor_make(o1, dt, 2, sh1), b1 = qk_tensor_make(ro1, dt, 2, sh1);
                        CHECK(qk_norm_run(kind, &p->ops.norm[kind], &x1, &wt, add ? &r1 : NULL, 1e-6f, &a1,
                                          add ? &b1 : NULL) == QK_OK, "%s: %s", p->name, qk_last_error());
                        const unsigned char *rrow = (inplace ? res : ro) + (off + i * rs) * es;
                        differ += count_differ(o + (off + i * rs) * es, o1, dt, H);
                        if (add) differ += count_differ(rrow, ro1, dt, H);
                    }
                    for (int64_t e = 0; e < n; e++) {   /* the gaps between rows, and before */
                        const int64_t k = (e - off) % rs;
                        if (e >= off && k < H) continue;
                        touched += t_load_bits(o, dt, e) != (es == 4 ? 0xA5A5A5A5u : 0xA5A5u);
                        if (add && !inplace) touched += t_load_bits(ro, dt, e) != (es == 4 ? 0xA5A5A5A5u : 0xA5A5u);
                    }
                    CHECK(differ == 0 && touched == 0, "%s %s x=%s %lldx%lld%s%s: %ld elements differ from "
                          "one-row calls, %ld written between rows", p->name, qk_norm_op_name(kind),
                          qk_dtype_name(dt), (long long)R, (long long)H, inplace ? " in place" : "",
                          aligned ? ", rows 64-byte aligned" : "", differ, touched);
                    free(x); free(res); free(o); free(ro); free(res2); free(o1); free(ro1); free(w);
                }
    }
}

/* A row's bits do not depend on the rows beside it: every provider gives each row of a
   5-row call (which takes the pipelined multi-row paths) exactly what the same row gives
   alone (the single-row path), for every x dtype, plain/Gemma/add forms and tail lengths,
   with a NaN row, an Inf row, a zero row and, in a second pass, a NaN weight element. The
   5-row call runs on 2 threads (split where the provider's one-thread limit allows) and on
   1 thread, with the same bits. */
static void test_row_bits_independent_of_batch(void)
{
    static const int64_t Hb[] = {1, 7, 16, 17, 33, 64, 100, 129, 1000, 4304};
    static const qk_norm_kind kinds[] = {QK_NORM_RMS, QK_NORM_GEMMA, QK_NORM_ADD_GEMMA};
    enum { R = 5 };
    for (int pi = 0; qk_all_providers[pi]; pi++) {
        const qk_provider_set *p = qk_all_providers[pi];
        if (!provider_runs(p) || !p->ops.norm[QK_NORM_GEMMA].fn) continue; /* (some have no norm op) */
        for (int di = 0; di < 3; di++)
            for (int ki = 0; ki < 3; ki++)
                for (int hi = 0; hi < (int)(sizeof Hb / sizeof Hb[0]); hi++)
                    for (int wv = 0; wv < 4; wv++) {
                        const int wnan = wv & 1;
                        const qk_dtype wdt = wv & 2 ? QK_DTYPE_BF16 : QK_DTYPE_F32;
                        const qk_dtype dt = Dt[di];
                        const qk_norm_kind kind = kinds[ki];
                        const int add = kind == QK_NORM_ADD_GEMMA;
                        const int64_t H = Hb[hi], es = (int64_t)t_size(dt);
                        uint64_t rng = 11 + (uint64_t)(hi * 7 + ki * 3 + di);
                        unsigned char *x = malloc((size_t)(R * H * es)), *res = malloc((size_t)(R * H * es));
                        unsigned char *o1 = malloc((size_t)(R * H * es)), *o2 = malloc((size_t)(R * H * es));
                        unsigned char *r1 = malloc((size_t)(R * H * es)), *r2 = malloc((size_t)(R * H * es));
                        unsigned char *o3 = malloc((size_t)(R * H * es)), *r3 = malloc((size_t)(R * H * es));
                        float *w = malloc((size_t)H * sizeof(float));
                        for (int64_t i = 0; i < R * H; i++) {
                            double v = qk_rand_normal(&rng), u = qk_rand_normal(&rng) * 0.5;
                            if (i / H == 1) v = i % H == H / 2 ? NAN : v;
                            if (i / H == 2) v = i % H == 0 ? INFINITY : v;
                            if (i / H == 3) v = u = 0.0;
                            t_store_bits(x, dt, i, t_encode(t_round(v, dt), dt));
                            t_store_bits(res, dt, i, t_encode(t_round(u, dt), dt));
                        }
                        for (int64_t k = 0; k < H; k++)
                            t_store_bits(w, wdt, k, t_encode(t_round(qk_rand_normal(&rng) * 0.1, wdt), wdt));
                        if (wnan) /* a NaN whose payload carries when rounded to 16 bits (F32) */
                            t_store_bits(w, wdt, H - 1, wdt == QK_DTYPE_F32 ? 0x7fffffffu : 0x7fffu);
                        int64_t sh[2] = {R, H};
                        qk_tensor xt = qk_tensor_make(x, dt, 2, sh), rt = qk_tensor_make(res, dt, 2, sh);
                        qk_tensor wt = qk_tensor_make(w, wdt, 1, &H);
                        qk_tensor ot = qk_tensor_make(o1, dt, 2, sh), rot = qk_tensor_make(r1, dt, 2, sh);
                        float rs1[R], rs2[R], rs3[R];
                        int64_t nr = R, one = 1;
                        qk_tensor rst = qk_tensor_make(rs1, QK_DTYPE_F32, 1, &nr);
                        qk_set_num_threads(2);
                        qk_status st = qk_norm_run(kind, &p->ops.norm[kind], &xt, &wt, add ? &rt : NULL,
                                                   1e-6f, &ot, add ? &rot : &rst);
                        CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
                        {
                            qk_tensor ot3 = qk_tensor_make(o3, dt, 2, sh), rot3 = qk_tensor_make(r3, dt, 2, sh);
                            qk_tensor rst3 = qk_tensor_make(rs3, QK_DTYPE_F32, 1, &nr);
                            qk_set_num_threads(1);
                            st = qk_norm_run(kind, &p->ops.norm[kind], &xt, &wt, add ? &rt : NULL, 1e-6f,
                                             &ot3, add ? &rot3 : &rst3);
                            qk_set_num_threads(0);
                            CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
                            CHECK(count_differ(o1, o3, dt, R * H) == 0 &&
                                  (!add || !memcmp(r1, r3, (size_t)(R * H * es))) &&
                                  (add || !memcmp(rs1, rs3, sizeof rs1)),
                                  "%s %s x=%s w=%s H=%lld: the 5-row call on 2 threads differs from 1 thread",
                                  p->name, qk_norm_op_name(kind), qk_dtype_name(dt), qk_dtype_name(wdt),
                                  (long long)H);
                        }
                        for (int64_t i = 0; i < R; i++) {
                            qk_tensor x1 = qk_tensor_make(x + i * H * es, dt, 1, &H);
                            qk_tensor re1 = qk_tensor_make(res + i * H * es, dt, 1, &H);
                            qk_tensor ot1 = qk_tensor_make(o2 + i * H * es, dt, 1, &H);
                            qk_tensor ro1 = qk_tensor_make(r2 + i * H * es, dt, 1, &H);
                            qk_tensor rs1t = qk_tensor_make(rs2 + i, QK_DTYPE_F32, 1, &one);
                            st = qk_norm_run(kind, &p->ops.norm[kind], &x1, &wt, add ? &re1 : NULL, 1e-6f,
                                             &ot1, add ? &ro1 : &rs1t);
                            CHECK(st == QK_OK, "%s: %s", p->name, qk_last_error());
                        }
                        const long differ = count_differ(o1, o2, dt, R * H);
                        CHECK(differ == 0,
                              "%s %s x=%s w=%s H=%lld%s: %ld elements of a 5-row call differ from the rows alone",
                              p->name, qk_norm_op_name(kind), qk_dtype_name(dt), qk_dtype_name(wdt),
                              (long long)H, wnan ? " (NaN weight)" : "", differ);
                        CHECK(!add || !memcmp(r1, r2, (size_t)(R * H * es)), "%s: residual_out differs",
                              p->name);
                        CHECK(add || !memcmp(rs1, rs2, sizeof rs1), "%s %s x=%s H=%lld: rstd of a "
                              "5-row call differs from the rows alone", p->name,
                              qk_norm_op_name(kind), qk_dtype_name(dt), (long long)H);
                        for (int64_t i = 0; wnan && i < R; i++) {
                            qk_tensor ot1 = qk_tensor_make(o1 + i * H * es, dt, 1, &H);
                            CHECK(isnan(get(&ot1, 0, H - 1)), "%s %s x=%s H=%lld: a NaN weight "
                                  "gave a non-NaN output in row %lld", p->name,
                                  qk_norm_op_name(kind), qk_dtype_name(dt), (long long)H,
                                  (long long)i);
                        }
                        free(x); free(res); free(o1); free(o2); free(o3); free(r1); free(r2); free(r3); free(w);
                    }
    }
}

/* The oracle's own bit-level helpers agree with libm's ldexp/frexp (they replace them for
   speed under qemu), over every exponent they are used at and random values of every scale. */
static void test_oracle_pow2_and_exponent(void)
{
    for (int n = -1022; n <= 1023; n++)
        CHECK(t_pow2(n) == ldexp(1.0, n), "t_pow2(%d) = %a", n, t_pow2(n));
    uint64_t rng = 99;
    for (int i = 0; i < 100000; i++) {
        double v = qk_rand_normal(&rng) * ldexp(1.0, (int)(qk_rand_u64(&rng) % 2100) - 1070);
        int e;
        if (v == 0 || !isfinite(v)) continue; /* (t_exponent is for finite v != 0) */
        frexp(v, &e);
        CHECK(t_exponent(v) == e, "t_exponent(%a) = %d, frexp says %d", v, t_exponent(v), e);
    }
}

int main(void)
{
    qk_test_require_cpu("test_norm");
    if (qk_init() != QK_OK) {
        printf("qk_init: %s\n", qk_last_error());
        return 1;
    }
    RUN(test_oracle_pow2_and_exponent);
    RUN(test_rms_norm);
    RUN(test_long_rows_nonzero_mean);
    RUN(test_gemma_rms_norm);
    RUN(test_add_rms_norm);
    RUN(test_add_gemma_rms_norm);
    RUN(test_rms_norm_gated);
    RUN(test_zero_row_rule);
    RUN(test_gemma_offset_in_f32);
    RUN(test_nonfinite_rows_isolated);
    RUN(test_row_bits_independent_of_batch);
    RUN(test_add_tiny_rows);
    RUN(test_large_calls);
    return qk_test_finish();
}
