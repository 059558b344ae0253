/* The demo model and the checks `qk demo` and the block tests share (demo_check.h; tool and test code, not part of the library):
 * deterministic BF16 Qwen3.5 MLP weights (per-row and per-channel magnitudes that vary, so
 * that the MXFP8 scales spread over many exponents), their double-precision evaluation,
 * an E4M3 / E8M0 decoder written from mxfp8.md alone, and the error measures. */
#include "demo_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- deterministic numbers (splitmix64 + Box-Muller) ---- */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s)
{
    double u1 = ((double)(mix(s) >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(mix(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static qk_status add_tensor(qk_demo_model *m, const char *name, int32_t ndim, int64_t d0,
                            int64_t d1, double sigma, uint64_t seed, bool spread)
{
    qk_demo_tensor *t = &m->t[m->n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = QK_DTYPE_BF16;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    const int64_t rows = ndim == 2 ? d0 : 1, cols = ndim == 2 ? d1 : d0;
    t->data = malloc((size_t)(rows * cols) * 2);
    double *colscale = spread ? malloc((size_t)cols * sizeof(double)) : NULL;
    if (!t->data || (spread && !colscale)) {
        free(t->data);
        t->data = NULL;
        free(colscale);
        return qk_fail(QK_ERR_NOMEM, "demo model: out of memory for %s", name);
    }
    uint64_t s = seed;
    /* a few input channels several times larger than the rest, as in trained models */
    for (int64_t k = 0; spread && k < cols; k++) colscale[k] = (mix(&s) % 61 == 0) ? 6.0 : 1.0;
    for (int64_t r = 0; r < rows; r++) {
        const double rs = spread ? exp(0.5 * normal(&s)) : 1.0;
        for (int64_t k = 0; k < cols; k++) {
            const double v = sigma * rs * (spread ? colscale[k] : 1.0) * normal(&s);
            t->data[r * cols + k] = qk_f32_to_bf16((float)v);
        }
    }
    free(colscale);
    m->n++;
    return QK_OK;
}

qk_status qk_demo_model_build(const qk_qwen35_config *c, int32_t layer, int32_t block,
                              uint64_t seed, qk_demo_model *m)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->layer = layer;
    m->block = block;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t VH = c->vision_hidden_size, VI = c->vision_intermediate_size;
    char n[128];
    qk_status st = QK_OK;
#define ADD(fmt, idx, nd, a, b, sig, sp)                                                   \
    if (st == QK_OK) {                                                                     \
        snprintf(n, sizeof n, fmt, (int)(idx));                                            \
        st = add_tensor(m, n, nd, a, b, sig, seed + 1000003ull * (m->n + 1), sp);          \
    }
    ADD("model.layers.%d.post_attention_layernorm.weight", layer, 1, H, 0, 0.1, false)
    ADD("model.layers.%d.mlp.gate_proj.weight", layer, 2, I, H, 1.0 / sqrt((double)H), true)
    ADD("model.layers.%d.mlp.up_proj.weight", layer, 2, I, H, 1.0 / sqrt((double)H), true)
    ADD("model.layers.%d.mlp.down_proj.weight", layer, 2, H, I, 1.0 / sqrt((double)I), true)
    ADD("model.visual.blocks.%d.mlp.linear_fc1.weight", block, 2, VI, VH, 1.0 / sqrt((double)VH), true)
    ADD("model.visual.blocks.%d.mlp.linear_fc1.bias", block, 1, VI, 0, 0.02, false)
    ADD("model.visual.blocks.%d.mlp.linear_fc2.weight", block, 2, VH, VI, 1.0 / sqrt((double)VI), true)
    ADD("model.visual.blocks.%d.mlp.linear_fc2.bias", block, 1, VH, 0, 0.02, false)
#undef ADD
    if (st != QK_OK) qk_demo_model_free(m);
    return st;
}

void qk_demo_model_free(qk_demo_model *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->t[i].data);
    m->n = 0;
}

const qk_demo_tensor *qk_demo_model_find(const qk_demo_model *m, const char *suffix)
{
    const size_t b = strlen(suffix);
    for (size_t i = 0; i < m->n; i++) {
        const size_t a = strlen(m->t[i].name);
        if (a >= b && !strcmp(m->t[i].name + a - b, suffix)) return &m->t[i];
    }
    return NULL;
}

qk_status qk_demo_model_write(const qk_demo_model *m, const char *path)
{
    qk_st_writer *w = NULL;
    qk_status st = qk_st_writer_create(path, QK_ST_WRITE_REPLACE, &w);
    if (st == QK_OK) st = qk_st_writer_set_metadata(w, "format", "pt");
    if (st == QK_OK) st = qk_st_writer_set_metadata(w, "producer", "qk demo (deterministic Qwen3.5 MLP weights)");
    for (size_t i = 0; st == QK_OK && i < m->n; i++)
        st = qk_st_writer_declare(w, m->t[i].name, "BF16", m->t[i].ndim, m->t[i].shape, m->t[i].data);
    if (st == QK_OK) st = qk_st_writer_commit(w);
    qk_st_writer_destroy(w);
    return st;
}

void qk_demo_activations(uint16_t *x, int64_t n, double sigma, uint64_t seed)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) x[i] = qk_f32_to_bf16((float)(sigma * normal(&s)));
}

/* ---- MXFP8 decoding ---- */
double qk_check_e4m3(uint8_t b)
{
    const int sign = b >> 7, e = (b >> 3) & 15, mant = b & 7;
    if (e == 15 && mant == 7) return NAN;
    const double mag = e == 0 ? ldexp((double)mant, -9) : ldexp(1.0 + mant / 8.0, e - 7);
    return sign ? -mag : mag;
}

void qk_check_dequantize(const uint8_t *q, const uint8_t *s, int64_t N, int64_t K, float *w)
{
    const int64_t kb = qk_mx_blocks(K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const uint8_t b = s[n * kb + k / 32];
            w[n * K + k] = b == 0xFF ? NAN : (float)ldexp(qk_check_e4m3(q[n * K + k]), (int)b - 127);
        }
}

qk_status qk_check_dequantize_from(const qk_st_set *s, const char *prefix, int64_t N, int64_t K,
                                   float *w)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.weight_scale", prefix);
    qk_st_info qi, si;
    if (qk_st_set_find(s, a, &qi) != QK_OK || qk_st_set_find(s, b, &si) != QK_OK)
        return qk_fail(QK_ERR_FORMAT, "%s: weight or weight_scale missing", prefix);
    qk_status st = qk_mx_linear_check_tensor(a, qi.dtype_name, qi.ndim, qi.shape, N, K);
    if (st == QK_OK) st = qk_mx_linear_check_tensor(b, si.dtype_name, si.ndim, si.shape, N, K);
    if (st == QK_OK) qk_check_dequantize(qi.data, si.data, N, K, w);
    return st;
}

void qk_check_bf16_to_f32(const uint16_t *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = qk_bf16_to_f32(x[i]);
}

void qk_check_to_f64(const void *x, qk_dtype dt, int64_t n, double *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = qk_load_f32(x, dt, i);
}

/* ---- double-precision evaluation ---- */
typedef struct lin_job {
    const double *x;
    const float *w, *bias;
    int64_t M, K, N;
    double *y, *S;
} lin_job;

static void lin_range(const void *ctx, int64_t n0, int64_t n1)
{
    const lin_job *j = ctx;
    for (int64_t n = n0; n < n1; n++) {
        const float *w = j->w + n * j->K;
        for (int64_t m = 0; m < j->M; m++) {
            const double *x = j->x + m * j->K;
            double acc = 0.0, abs_acc = 0.0;
            for (int64_t k = 0; k < j->K; k++) {
                const double p = x[k] * (double)w[k];
                acc += p;
                abs_acc += fabs(p);
            }
            j->y[m * j->N + n] = acc + (j->bias ? (double)j->bias[n] : 0.0);
            if (j->S) j->S[m * j->N + n] = abs_acc;
        }
    }
}

void qk_check_linear_f64(const double *x, int64_t M, int64_t K, const float *w, int64_t N,
                         const float *bias, double *y, double *abs_sum)
{
    lin_job j = {x, w, bias, M, K, N, y, abs_sum};
    qk_parallel_for(N, M * K * 16, 1 << 16, lin_range, &j);
}

void qk_check_add_gemma_norm_f64(const double *x, const double *res, const float *w, int64_t M,
                                 int64_t H, double eps, double *h, double *s)
{
    for (int64_t m = 0; m < M; m++) {
        double ss = 0.0;
        for (int64_t k = 0; k < H; k++) {
            s[m * H + k] = x[m * H + k] + res[m * H + k];
            ss += s[m * H + k] * s[m * H + k];
        }
        const double r = 1.0 / sqrt(ss / (double)H + eps);
        for (int64_t k = 0; k < H; k++) h[m * H + k] = s[m * H + k] * r * (1.0 + (double)w[k]);
    }
}

void qk_check_silu_mul_f64(const double *gu, int64_t M, int64_t I, double *a)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < I; i++) {
            const double g = gu[m * 2 * I + i], u = gu[m * 2 * I + I + i];
            a[m * I + i] = g / (1.0 + exp(-g)) * u;
        }
}

void qk_check_gelu_tanh_f64(const double *x, int64_t n, double *y)
{
    const double c = sqrt(2.0 / 3.141592653589793);
    for (int64_t i = 0; i < n; i++)
        y[i] = 0.5 * x[i] * (1.0 + tanh(c * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
}

qk_status qk_check_quantized_activations(const void *x, qk_dtype dt, int64_t M, int64_t K,
                                         double *xq)
{
    const int64_t kb = qk_mx_blocks(K);
    uint8_t *q = malloc((size_t)(M * K) + 1), *s = malloc((size_t)(M * kb) + 1);
    if (!q || !s) {
        free(q);
        free(s);
        return qk_fail(QK_ERR_NOMEM, "out of memory");
    }
    int64_t xs[2] = {M, K}, ss[2] = {M, kb};
    qk_tensor xt = qk_tensor_make((void *)(uintptr_t)x, dt, 2, xs);
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, xs), st_ = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_status st = qk_serve_mxfp8_quantize(QK_BACKEND_REFERENCE, &xt, NULL, &qt, &st_);
    for (int64_t m = 0; st == QK_OK && m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            const uint8_t b = s[m * kb + k / 32];
            xq[m * K + k] = b == 0xFF ? NAN : ldexp(qk_check_e4m3(q[m * K + k]), (int)b - 127);
        }
    free(q);
    free(s);
    return st;
}

/* ---- measures ---- */
double qk_check_rel_err(const void *y, qk_dtype dt, const double *ref, int64_t M, int64_t N)
{
    double worst = 0.0;
    for (int64_t m = 0; m < M; m++) {
        double emax = 0.0, rmax = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const double v = qk_load_f32(y, dt, m * N + n), r = ref[m * N + n];
            const double e = fabs(v - r);
            if (!(e <= emax)) emax = e;   /* NaN propagates */
            if (fabs(r) > rmax) rmax = fabs(r);
        }
        const double rel = rmax > 0 ? emax / rmax : emax;
        if (!(rel <= worst)) worst = rel;
    }
    return worst;
}

double qk_check_rms_rel(const void *y, qk_dtype dt, const double *ref, int64_t n)
{
    double e2 = 0.0, r2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = qk_load_f32(y, dt, i) - ref[i];
        e2 += d * d;
        r2 += ref[i] * ref[i];
    }
    return r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
}

/* One unit in the last place of dtype dt at magnitude |v| (for |v| = 0: the smallest step). */
static double ulp_at(double v, qk_dtype dt)
{
    const int mant = dt == QK_DTYPE_F32 ? 23 : dt == QK_DTYPE_F16 ? 10 : 7;
    const int emin = dt == QK_DTYPE_F16 ? -14 : -126;
    int e;
    frexp(fabs(v), &e);               /* |v| in [2^(e-1), 2^e) */
    e -= 1;
    if (v == 0.0 || e < emin) e = emin;
    return ldexp(1.0, e - mant);
}

double qk_check_round(double v, qk_dtype dt)
{
    if (dt == QK_DTYPE_F32 || isnan(v)) return (double)(float)v;
    /* the two neighbours of v in dt around its float image, then the nearest (ties: even) */
    const double u = ulp_at(v, dt);
    double lo = floor(v / u) * u, hi = lo + u;
    double pick = (v - lo < hi - v) ? lo : (hi - v < v - lo) ? hi : (fmod(lo / u, 2.0) == 0.0 ? lo : hi);
    const double maxv = dt == QK_DTYPE_F16 ? 65504.0 : 0x1.FEp127;
    if (fabs(pick) > maxv) pick = copysign(INFINITY, v);
    return pick;
}

double qk_check_mxfp8_bound_ratio(const void *out, qk_dtype dt, const double *exact,
                                  const double *S, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double o = qk_load_f32(out, dt, i), e = exact[i];
        if (isnan(o) && isnan(e)) continue;
        const double bound = 0x1.0p-16 * S[i] + ulp_at(e, dt);
        const double r = fabs(o - e) / bound;
        if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
    }
    return worst;
}

double qk_check_norm_bound_ratio(const void *out, qk_dtype dt, const double *exact, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double o = qk_load_f32(out, dt, i), e = exact[i];
        if (isnan(o) && isnan(e)) continue;
        double r;
        if (dt == QK_DTYPE_F32) {
            r = e == 0.0 ? (o == 0.0 ? 0.0 : INFINITY) : fabs(o - e) / fabs(e) / 0x1.0p-19;
        } else {
            const double c = qk_check_round(e, dt);
            r = fabs(o - c) / ulp_at(fmin(fabs(o), fabs(c)), dt);   /* codes apart */
        }
        if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
    }
    return worst;
}

double qk_check_max_diff(const void *a, const void *b, qk_dtype dt, int64_t n)
{
    double d = 0.0, mb = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = qk_load_f32(a, dt, i), y = qk_load_f32(b, dt, i);
        if (!(fabs(x - y) <= d)) d = fabs(x - y);
        if (fabs(y) > mb) mb = fabs(y);
    }
    return mb > 0 ? d / mb : d;
}
