/* `qk demo`: the main job on an embedded default (serving.md). Builds deterministic BF16
 * weights for one Qwen3.5-0.8B text MLP half and one vision MLP, quantizes them with
 * `qk quantize` into a real ModelSlim W8A8_MXFP8 folder in a temporary directory, loads it
 * through the layers' create / load / process_weights_after_loading, runs a batch through
 * both blocks with the target and the reference backends, and checks every layer against
 * the spec's bounds and against a double-precision evaluation of the BF16 model. Exits 1
 * when a check fails. `--model DIR` runs the same on a user's ModelSlim folder (the double
 * model is then the checkpoint's own dequantized weights). QK_DEMO_FORCE_FAIL=1 perturbs one
 * output of the target backend, to prove that the checks catch it. */
#define _GNU_SOURCE
#include "qk_tool.h"

#include "bench_common.h"
#include "demo_check.h"
#include "io/ms_quantize.h"

#include <dirent.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds against the double model: the normwise relative error of each layer's output,
 * QK_CHECK_BOUND_* (their derivation is in tools/qk/demo_check.h). */
#define BOUND_NORM QK_CHECK_BOUND_NORM
#define BOUND_LINEAR1 QK_CHECK_BOUND_LINEAR
#define BOUND_ACT QK_CHECK_BOUND_ACT
#define BOUND_BLOCK QK_CHECK_BOUND_BLOCK

typedef struct row {
    char name[128], shape[32];
    double vs_max, vs_rms, bound;     /* errors against the double model; bound on vs_rms */
    double spec_t, spec_r;            /* distance to the spec's bound (<= 1); < 0: n/a */
    const char *spec_kind;            /* "ulp", "mxfp8", "same" */
    int64_t differ;                   /* target/reference outputs that are not bit-identical */
    int max_ulp;                      /* largest target/reference distance in BF16 codes */
    double ms_t, ms_r;
    bool ok;
    char why[200];
} row;

typedef struct demo {
    int M, reps;
    bool force_fail, dequantized_model;
    row rows[16];
    int nrows;
    int failures;
} demo;

static row *add_row(demo *d, const char *name, const char *shape)
{
    row *r = &d->rows[d->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->spec_t = r->spec_r = -1;
    r->bound = -1;
    r->differ = -1;
    r->ok = true;
    return r;
}

static void fail_row(demo *d, row *r, const char *fmt, const char *detail)
{
    if (r->ok) d->failures++;
    r->ok = false;
    size_t n = strlen(r->why);
    snprintf(r->why + n, sizeof r->why - n, n ? "; " : "");
    n = strlen(r->why);
    snprintf(r->why + n, sizeof r->why - n, fmt, detail);
}

/* ---- timing ---- */
typedef qk_status (*stage_fn)(void *ctx, qk_backend b);

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs f reps times after one warm-up call when reps > 1; the median time in ms. */
static double timed(stage_fn f, void *ctx, qk_backend b, int reps, qk_status *st)
{
    double v[32];
    int n = 0;
    *st = reps > 1 ? f(ctx, b) : QK_OK;
    if (*st != QK_OK) return 0.0;
    for (int i = 0; i < reps && i < 32; i++) {
        double t0 = qkb_now();
        qk_status s = f(ctx, b);
        v[n++] = qkb_now() - t0;
        if (s != QK_OK) {
            *st = s;
            break;
        }
    }
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return 1e3 * v[n / 2];
}

/* ---- buffers ---- */
typedef struct buf {
    uint16_t *p;
    qk_tensor t;
} buf;

static bool buf_make(buf *b, int64_t M, int64_t n)
{
    b->p = calloc((size_t)(M * n), 2);
    int64_t sh[2] = {M, n};
    b->t = qk_tensor_make(b->p, QK_DTYPE_BF16, 2, sh);
    return b->p != NULL;
}

/* BF16 codes as integers ordered like their values. */
static int32_t ordered(uint16_t c) { return (c & 0x8000) ? -(int32_t)(c & 0x7FFF) : (int32_t)c; }

static void agreement(row *r, const buf *t, const buf *ref, int64_t n)
{
    int64_t same = 0;
    int32_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t dlt = ordered(t->p[i]) - ordered(ref->p[i]);
        if (dlt < 0) dlt = -dlt;
        same += dlt == 0;
        if (dlt > worst) worst = dlt;
    }
    r->differ = n - same;
    r->max_ulp = worst;
}

/* ---- stages ---- */
typedef struct norm_stage {
    const qk_norm_layer *l;
    const qk_tensor *x, *res;
    qk_tensor *out[QK_BACKEND_COUNT], *res_out[QK_BACKEND_COUNT];
} norm_stage;

static qk_status run_norm(void *c, qk_backend b)
{
    norm_stage *s = c;
    return qk_norm_layer_forward_residual(s->l, b, s->x, s->res, s->out[b], s->res_out[b]);
}

typedef struct lin_stage {
    const qk_mxfp8_linear_layer *l;
    const qk_tensor *x;
    qk_tensor *out[QK_BACKEND_COUNT];
} lin_stage;

static qk_status run_lin(void *c, qk_backend b)
{
    lin_stage *s = c;
    return qk_mxfp8_linear_layer_forward(s->l, b, s->x, s->out[b]);
}

typedef struct act_stage {
    bool gelu;
    const qk_tensor *in;
    qk_tensor *out[QK_BACKEND_COUNT];
} act_stage;

static qk_status run_act(void *c, qk_backend b)
{
    act_stage *s = c;
    return s->gelu ? qk_serve_gelu_tanh(s->in, s->out[b]) : qk_serve_silu_and_mul(s->in, s->out[b]);
}

typedef struct text_stage {
    const qk_qwen35_text_mlp *blk;
    const qk_tensor *x, *res;
    qk_tensor *out[QK_BACKEND_COUNT], *res_out[QK_BACKEND_COUNT];
} text_stage;

static qk_status run_text(void *c, qk_backend b)
{
    text_stage *s = c;
    return qk_qwen35_text_mlp_forward(s->blk, b, s->x, s->res, s->out[b], s->res_out[b]);
}

typedef struct vision_stage {
    const qk_qwen35_vision_mlp *blk;
    const qk_tensor *x;
    qk_tensor *out[QK_BACKEND_COUNT];
} vision_stage;

static qk_status run_vision(void *c, qk_backend b)
{
    vision_stage *s = c;
    return qk_qwen35_vision_mlp_forward(s->blk, b, s->x, s->out[b]);
}

#define T QK_BACKEND_TARGET
#define R QK_BACKEND_REFERENCE

/* Times a stage on both backends; a failing call fails the row. */
static bool time_both(demo *d, row *r, stage_fn f, void *ctx)
{
    qk_status st;
    r->ms_t = timed(f, ctx, T, d->reps, &st);
    if (st == QK_OK) r->ms_r = timed(f, ctx, R, d->reps > 3 ? 3 : d->reps, &st);
    if (st != QK_OK) {
        fail_row(d, r, "%s", qk_last_error());
        return false;
    }
    return true;
}

static void check_vs_model(demo *d, row *r, const buf *y, const double *ref, int64_t n, double bound)
{
    r->vs_max = qk_check_rel_err(y->p, QK_DTYPE_BF16, ref, d->M, n);
    r->vs_rms = qk_check_rms_rel(y->p, QK_DTYPE_BF16, ref, d->M * n);
    r->bound = bound;
    if (!(r->vs_rms <= bound)) {
        char b[96];
        snprintf(b, sizeof b, "%.3g > %.3g", r->vs_rms, bound);
        fail_row(d, r, "normwise error against the %s", d->dequantized_model ? "dequantized model" : "BF16 model");
        fail_row(d, r, "%s", b);
    }
}

/* The spec's bound of the W8A8 linear (mxfp8.md) for both backends' outputs on input x. */
static void check_linear_spec(demo *d, row *r, const buf *x, int64_t K, const float *wq,
                              const float *bias, int64_t N, const buf *yt, const buf *yr)
{
    const int64_t M = d->M;
    double *xq = malloc((size_t)(M * K) * sizeof(double));
    double *ex = malloc((size_t)(M * N) * sizeof(double)), *S = malloc((size_t)(M * N) * sizeof(double));
    if (!xq || !ex || !S || qk_check_quantized_activations(x->p, QK_DTYPE_BF16, M, K, xq) != QK_OK) {
        fail_row(d, r, "%s", "cannot evaluate the spec's bound");
    } else {
        qk_check_linear_f64(xq, M, K, wq, N, bias, ex, S);
        r->spec_t = qk_check_mxfp8_bound_ratio(yt->p, QK_DTYPE_BF16, ex, S, M * N);
        r->spec_r = qk_check_mxfp8_bound_ratio(yr->p, QK_DTYPE_BF16, ex, S, M * N);
        r->spec_kind = "mxfp8";
        agreement(r, yt, yr, M * N);
        if (!(r->spec_t <= 1.0)) fail_row(d, r, "%s exceeds mxfp8.md's bound", "target");
        if (!(r->spec_r <= 1.0)) fail_row(d, r, "%s exceeds mxfp8.md's bound", "reference");
    }
    free(xq);
    free(ex);
    free(S);
}

/* ---- the model the checks compare with ---- */
typedef struct model_f32 {
    int64_t H, I, VH, VI;
    float eps;
    float *norm, *gu, *down, *fc1, *b1, *fc2, *b2;   /* as served (the double model's) */
    float *q_gu, *q_down, *q_fc1, *q_fc2;             /* dequantized checkpoint weights */
    bool text, vision;
} model_f32;

static void model_free(model_f32 *m)
{
    float **v[] = {&m->norm, &m->gu, &m->down, &m->fc1, &m->b1, &m->fc2, &m->b2,
                   &m->q_gu, &m->q_down, &m->q_fc1, &m->q_fc2};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        free(*v[i]);
        *v[i] = NULL;
    }
}

static float *fmalloc(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

/* ---- the text MLP half ---- */
static void run_text_block(demo *d, const qk_qwen35_text_mlp *blk, const model_f32 *m, int layer)
{
    const int64_t M = d->M, H = m->H, I = m->I;
    buf x, res, h[QK_BACKEND_COUNT], s[QK_BACKEND_COUNT], gu[QK_BACKEND_COUNT], a[QK_BACKEND_COUNT],
        y[QK_BACKEND_COUNT], yb[QK_BACKEND_COUNT], sb[QK_BACKEND_COUNT];
    memset(h, 0, sizeof h); memset(s, 0, sizeof s); memset(gu, 0, sizeof gu);
    memset(a, 0, sizeof a); memset(y, 0, sizeof y); memset(yb, 0, sizeof yb); memset(sb, 0, sizeof sb);
    bool ok = buf_make(&x, M, H) && buf_make(&res, M, H);
    for (int b = T; b <= R; b++)
        ok = ok && buf_make(&h[b], M, H) && buf_make(&s[b], M, H) && buf_make(&gu[b], M, 2 * I) &&
             buf_make(&a[b], M, I) && buf_make(&y[b], M, H) && buf_make(&yb[b], M, H) &&
             buf_make(&sb[b], M, H);
    double *xd = malloc((size_t)(M * H) * 8), *rd = malloc((size_t)(M * H) * 8);
    double *hd = malloc((size_t)(M * H) * 8), *sd = malloc((size_t)(M * H) * 8);
    double *gud = malloc((size_t)(M * 2 * I) * 8), *ad = malloc((size_t)(M * I) * 8);
    double *yd = malloc((size_t)(M * H) * 8);
    char nm[96], sh[32];
    if (!ok || !xd || !rd || !hd || !sd || !gud || !ad || !yd) {
        row *r = add_row(d, "text MLP", "");
        fail_row(d, r, "%s", "out of memory");
        goto out;
    }
    qk_demo_activations(x.p, M * H, 1.0, 101);
    qk_demo_activations(res.p, M * H, 2.0, 202);

    /* the double model */
    qk_check_to_f64(x.p, QK_DTYPE_BF16, M * H, xd);
    qk_check_to_f64(res.p, QK_DTYPE_BF16, M * H, rd);
    qk_check_add_gemma_norm_f64(xd, rd, m->norm, M, H, m->eps, hd, sd);
    qk_check_linear_f64(hd, M, H, m->gu, 2 * I, NULL, gud, NULL);
    qk_check_silu_mul_f64(gud, M, I, ad);
    qk_check_linear_f64(ad, M, I, m->down, H, NULL, yd, NULL);

    /* post_attention_layernorm */
    snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm", layer);
    snprintf(sh, sizeof sh, "[%lld]", (long long)H);
    row *r = add_row(d, nm, sh);
    norm_stage ns = {qk_qwen35_text_mlp_norm(blk), &x.t, &res.t, {0}, {0}};
    for (int b = T; b <= R; b++) { ns.out[b] = &h[b].t; ns.res_out[b] = &s[b].t; }
    if (time_both(d, r, run_norm, &ns)) {
        /* residual_out is exactly rnd(x + residual); out within 1 ulp of the exact norm of it */
        bool exact_sum = !memcmp(s[T].p, s[R].p, (size_t)(M * H) * 2);
        for (int64_t i = 0; exact_sum && i < M * H; i++)
            exact_sum = s[T].p[i] == qk_f32_to_bf16(qk_bf16_to_f32(x.p[i]) + qk_bf16_to_f32(res.p[i]));
        if (!exact_sum) fail_row(d, r, "%s", "residual_out is not rnd(x + residual)");
        double *sx = malloc((size_t)(M * H) * 8), *ex = malloc((size_t)(M * H) * 8), *zero = calloc((size_t)(M * H), 8);
        if (sx && ex && zero) {
            qk_check_to_f64(s[T].p, QK_DTYPE_BF16, M * H, sx);
            double *tmp = malloc((size_t)(M * H) * 8);
            if (tmp) qk_check_add_gemma_norm_f64(sx, zero, m->norm, M, H, m->eps, ex, tmp);
            free(tmp);
            r->spec_t = qk_check_norm_bound_ratio(h[T].p, QK_DTYPE_BF16, ex, M * H);
            r->spec_r = qk_check_norm_bound_ratio(h[R].p, QK_DTYPE_BF16, ex, M * H);
            r->spec_kind = "ulp";
            agreement(r, &h[T], &h[R], M * H);
            if (!(r->spec_t <= 1.0)) fail_row(d, r, "%s is beyond 1 ulp (norm.md)", "target");
            if (!(r->spec_r <= 1.0)) fail_row(d, r, "%s is beyond 1 ulp (norm.md)", "reference");
        }
        free(sx); free(ex); free(zero);
        check_vs_model(d, r, &h[T], hd, H, BOUND_NORM);
    }

    /* gate_up_proj (both backends on the target's h) */
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_up_proj", layer);
    snprintf(sh, sizeof sh, "[%lld, %lld]", (long long)(2 * I), (long long)H);
    r = add_row(d, nm, sh);
    lin_stage ls = {qk_qwen35_text_mlp_gate_up(blk), &h[T].t, {0}};
    for (int b = T; b <= R; b++) ls.out[b] = &gu[b].t;
    if (time_both(d, r, run_lin, &ls)) {
        check_linear_spec(d, r, &h[T], H, m->q_gu, NULL, 2 * I, &gu[T], &gu[R]);
        check_vs_model(d, r, &gu[T], gud, 2 * I, BOUND_LINEAR1);
    }

    /* silu(gate) * up: the same code for both backends */
    snprintf(nm, sizeof nm, "model.layers.%d.mlp act: silu(gate) * up", layer);
    snprintf(sh, sizeof sh, "[%lld]", (long long)I);
    r = add_row(d, nm, sh);
    act_stage as = {false, &gu[T].t, {0}};
    for (int b = T; b <= R; b++) as.out[b] = &a[b].t;
    if (time_both(d, r, run_act, &as)) {
        r->spec_kind = "same";
        agreement(r, &a[T], &a[R], M * I);
        if (memcmp(a[T].p, a[R].p, (size_t)(M * I) * 2)) fail_row(d, r, "%s", "not deterministic");
        check_vs_model(d, r, &a[T], ad, I, BOUND_ACT);
    }

    /* down_proj (both backends on the target's a) */
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj", layer);
    snprintf(sh, sizeof sh, "[%lld, %lld]", (long long)H, (long long)I);
    r = add_row(d, nm, sh);
    lin_stage ds = {qk_qwen35_text_mlp_down(blk), &a[T].t, {0}};
    for (int b = T; b <= R; b++) ds.out[b] = &y[b].t;
    if (time_both(d, r, run_lin, &ds)) {
        if (d->force_fail) {
            y[T].p[3] = qk_f32_to_bf16(qk_bf16_to_f32(y[T].p[3]) + 0.5f);
            fprintf(stderr, "qk demo: QK_DEMO_FORCE_FAIL=1: added 0.5 to one output of the target's "
                            "down_proj\n");
        }
        check_linear_spec(d, r, &a[T], I, m->q_down, NULL, H, &y[T], &y[R]);
        check_vs_model(d, r, &y[T], yd, H, BOUND_BLOCK);
    }

    /* the block as one call: the same bits as the layer-by-layer pipeline */
    snprintf(nm, sizeof nm, "text MLP half (qk_qwen35_text_mlp_forward)");
    snprintf(sh, sizeof sh, "[%d, %lld]", d->M, (long long)H);
    r = add_row(d, nm, sh);
    text_stage ts = {blk, &x.t, &res.t, {0}, {0}};
    for (int b = T; b <= R; b++) { ts.out[b] = &yb[b].t; ts.res_out[b] = &sb[b].t; }
    if (time_both(d, r, run_text, &ts)) {
        r->spec_kind = "block";
        agreement(r, &yb[T], &yb[R], M * H);
        if (memcmp(sb[T].p, s[T].p, (size_t)(M * H) * 2) ||
            (!d->force_fail && memcmp(yb[T].p, y[T].p, (size_t)(M * H) * 2)))
            fail_row(d, r, "%s", "the block's bits differ from its layers'");
        check_vs_model(d, r, &yb[T], yd, H, BOUND_BLOCK);
        /* the reference backend end to end, against the same model */
        double e = qk_check_rms_rel(yb[R].p, QK_DTYPE_BF16, yd, M * H);
        if (!(e <= BOUND_BLOCK)) fail_row(d, r, "%s", "reference block beyond the model bound");
    }
out:
    free(x.p); free(res.p);
    for (int b = T; b <= R; b++) {
        free(h[b].p); free(s[b].p); free(gu[b].p); free(a[b].p); free(y[b].p); free(yb[b].p); free(sb[b].p);
    }
    free(xd); free(rd); free(hd); free(sd); free(gud); free(ad); free(yd);
}

/* ---- the vision MLP ---- */
static void run_vision_block(demo *d, const qk_qwen35_vision_mlp *blk, const model_f32 *m, int block)
{
    const int64_t M = d->M, H = m->VH, I = m->VI;
    buf x, t1[QK_BACKEND_COUNT], g[QK_BACKEND_COUNT], y[QK_BACKEND_COUNT], yb[QK_BACKEND_COUNT];
    memset(t1, 0, sizeof t1); memset(g, 0, sizeof g); memset(y, 0, sizeof y); memset(yb, 0, sizeof yb);
    bool ok = buf_make(&x, M, H);
    for (int b = T; b <= R; b++)
        ok = ok && buf_make(&t1[b], M, I) && buf_make(&g[b], M, I) && buf_make(&y[b], M, H) &&
             buf_make(&yb[b], M, H);
    double *xd = malloc((size_t)(M * H) * 8), *t1d = malloc((size_t)(M * I) * 8);
    double *gd = malloc((size_t)(M * I) * 8), *yd = malloc((size_t)(M * H) * 8);
    char nm[96], sh[32];
    if (!ok || !xd || !t1d || !gd || !yd) {
        row *r = add_row(d, "vision MLP", "");
        fail_row(d, r, "%s", "out of memory");
        goto out;
    }
    qk_demo_activations(x.p, M * H, 1.0, 303);
    qk_check_to_f64(x.p, QK_DTYPE_BF16, M * H, xd);
    qk_check_linear_f64(xd, M, H, m->fc1, I, m->b1, t1d, NULL);
    qk_check_gelu_tanh_f64(t1d, M * I, gd);
    qk_check_linear_f64(gd, M, I, m->fc2, H, m->b2, yd, NULL);

    snprintf(nm, sizeof nm, "model.visual.blocks.%d.mlp.linear_fc1", block);
    snprintf(sh, sizeof sh, "[%lld, %lld]", (long long)I, (long long)H);
    row *r = add_row(d, nm, sh);
    lin_stage l1 = {qk_qwen35_vision_mlp_fc1(blk), &x.t, {0}};
    for (int b = T; b <= R; b++) l1.out[b] = &t1[b].t;
    if (time_both(d, r, run_lin, &l1)) {
        check_linear_spec(d, r, &x, H, m->q_fc1, m->b1, I, &t1[T], &t1[R]);
        check_vs_model(d, r, &t1[T], t1d, I, BOUND_LINEAR1);
    }

    snprintf(nm, sizeof nm, "model.visual.blocks.%d.mlp act: gelu (tanh)", block);
    snprintf(sh, sizeof sh, "[%lld]", (long long)I);
    r = add_row(d, nm, sh);
    act_stage as = {true, &t1[T].t, {0}};
    for (int b = T; b <= R; b++) as.out[b] = &g[b].t;
    if (time_both(d, r, run_act, &as)) {
        r->spec_kind = "same";
        agreement(r, &g[T], &g[R], M * I);
        if (memcmp(g[T].p, g[R].p, (size_t)(M * I) * 2)) fail_row(d, r, "%s", "not deterministic");
        check_vs_model(d, r, &g[T], gd, I, BOUND_ACT);
    }

    snprintf(nm, sizeof nm, "model.visual.blocks.%d.mlp.linear_fc2 (K = %lld)", block, (long long)I);
    snprintf(sh, sizeof sh, "[%lld, %lld]", (long long)H, (long long)I);
    r = add_row(d, nm, sh);
    lin_stage l2 = {qk_qwen35_vision_mlp_fc2(blk), &g[T].t, {0}};
    for (int b = T; b <= R; b++) l2.out[b] = &y[b].t;
    if (time_both(d, r, run_lin, &l2)) {
        check_linear_spec(d, r, &g[T], I, m->q_fc2, m->b2, H, &y[T], &y[R]);
        check_vs_model(d, r, &y[T], yd, H, BOUND_BLOCK);
    }

    snprintf(nm, sizeof nm, "vision MLP (qk_qwen35_vision_mlp_forward)");
    snprintf(sh, sizeof sh, "[%d, %lld]", d->M, (long long)H);
    r = add_row(d, nm, sh);
    vision_stage vs = {blk, &x.t, {0}};
    for (int b = T; b <= R; b++) vs.out[b] = &yb[b].t;
    if (time_both(d, r, run_vision, &vs)) {
        r->spec_kind = "block";
        agreement(r, &yb[T], &yb[R], M * H);
        if (memcmp(yb[T].p, y[T].p, (size_t)(M * H) * 2)) fail_row(d, r, "%s", "the block's bits differ from its layers'");
        check_vs_model(d, r, &yb[T], yd, H, BOUND_BLOCK);
        double e = qk_check_rms_rel(yb[R].p, QK_DTYPE_BF16, yd, M * H);
        if (!(e <= BOUND_BLOCK)) fail_row(d, r, "%s", "reference block beyond the model bound");
    }
out:
    free(x.p);
    for (int b = T; b <= R; b++) { free(t1[b].p); free(g[b].p); free(y[b].p); free(yb[b].p); }
    free(xd); free(t1d); free(gd); free(yd);
}

/* ---- output ---- */
static void print_table(const demo *d)
{
    printf("\n%-48s %-13s %-7s %-16s %-13s %-16s %9s %8s  %s\n", "layer", "shape [N, K]",
           "max rel", "rms rel (bound)", "t|r / spec", "target vs ref", "target ms", "ref ms",
           "check");
    for (int i = 0; i < d->nrows; i++) {
        const row *r = &d->rows[i];
        char mx[24] = "-", vm[40] = "-", sp[40] = "-", ag[40] = "-";
        if (r->bound >= 0) {
            snprintf(mx, sizeof mx, "%.4f", r->vs_max);
            snprintf(vm, sizeof vm, "%.4f (%.4f)", r->vs_rms, r->bound);
        }
        if (r->spec_kind && !strcmp(r->spec_kind, "same")) snprintf(sp, sizeof sp, "same code");
        else if (r->spec_kind && !strcmp(r->spec_kind, "block")) snprintf(sp, sizeof sp, "= layers");
        else if (r->spec_t >= 0) snprintf(sp, sizeof sp, "%.2f | %.2f", r->spec_t, r->spec_r);
        if (r->differ == 0) snprintf(ag, sizeof ag, "identical");
        else if (r->differ > 0)
            snprintf(ag, sizeof ag, "%lld differ, %d ulp", (long long)r->differ, r->max_ulp);
        printf("%-48s %-13s %-7s %-16s %-13s %-16s %9.3f %8.3f  %s\n", r->name, r->shape, mx, vm,
               sp, ag, r->ms_t, r->ms_r, r->ok ? "ok" : "FAIL");
        if (!r->ok) printf("    %s\n", r->why);
    }
    printf("\nmax rel, rms rel: the layer's output against the %s evaluated in double:\n"
           "  max over tokens of max|out - model| / max|model|, and the normwise\n"
           "  sqrt(sum (out - model)^2 / sum model^2), which is checked (bounds: tools/qk/demo_check.h).\n"
           "t|r / spec: the target's and the reference's largest error on the same input over the "
           "spec's bound\n  (<= 1 passes; norm.md: codes from the correctly rounded value; mxfp8.md: "
           "|out - exact| / (2^-16 S + 1 ulp)).\ntarget vs ref: outputs that are not "
           "bit-identical, and their largest distance in BF16 codes.\ntimes: median of %d target "
           "and %d reference calls after a warm-up, %d thread%s.\n",
           d->dequantized_model ? "checkpoint's dequantized weights" : "BF16 model", d->reps,
           d->reps > 3 ? 3 : d->reps, qk_get_num_threads(), qk_get_num_threads() == 1 ? "" : "s");
}

/* ---- temporary folders ---- */
static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *dir = opendir(path);
        if (dir) {
            struct dirent *e;
            while ((e = readdir(dir))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char p[4096];
                if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p) remove_tree(p);
            }
            closedir(dir);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* ---- --model: find the Qwen3.5 layers of a user's folder ---- */
static bool find_index(const qk_st_set *s, const char *pattern, int *idx)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED) != 0) return false;
    bool found = false;
    for (size_t i = 0; i < qk_st_set_count(s); i++) {
        qk_st_info t;
        regmatch_t mm[2];
        if (qk_st_set_info_at(s, i, &t) != QK_OK || regexec(&re, t.name, 2, mm, 0) != 0) continue;
        int v = atoi(t.name + mm[1].rm_so);
        if (!found || v < *idx) *idx = v;
        found = true;
    }
    regfree(&re);
    return found;
}

static void print_found(const qk_st_set *s)
{
    size_t n = qk_st_set_count(s);
    fprintf(stderr, "found %zu tensors:\n", n);
    for (size_t i = 0; i < n && i < 16; i++) {
        qk_st_info t;
        if (qk_st_set_info_at(s, i, &t) == QK_OK) fprintf(stderr, "  %s (%s)\n", t.name, t.dtype_name);
    }
    if (n > 16) fprintf(stderr, "  ... and %zu more\n", n - 16);
}

static void print_expected(int layer, int block)
{
    fprintf(stderr, "expected (Qwen3.5 names):\n"
            "  model.layers.%d.post_attention_layernorm.weight\n"
            "  model.layers.%d.mlp.gate_proj.{weight, weight_scale}  (or mlp.gate_up_proj)\n"
            "  model.layers.%d.mlp.up_proj.{weight, weight_scale}\n"
            "  model.layers.%d.mlp.down_proj.{weight, weight_scale}\n"
            "and/or\n"
            "  model.visual.blocks.%d.mlp.linear_fc1.{weight, weight_scale, bias}\n"
            "  model.visual.blocks.%d.mlp.linear_fc2.{weight, weight_scale, bias}\n",
            layer, layer, layer, layer, block, block);
}

static bool shape_of(const qk_st_set *s, const char *name, int64_t *d0, int64_t *d1)
{
    qk_st_info t;
    if (qk_st_set_find(s, name, &t) != QK_OK) return false;
    *d0 = t.ndim >= 1 ? t.shape[0] : 0;
    *d1 = t.ndim >= 2 ? t.shape[1] : 0;
    return true;
}

static bool load_f32(const qk_st_set *s, const char *name, int64_t n, float **out)
{
    qk_st_info t;
    qk_tensor v;
    if (qk_st_set_find(s, name, &t) != QK_OK || t.numel != (uint64_t)n ||
        qk_st_info_tensor(&t, &v) != QK_OK || !qk_is_float_dtype(v.dtype))
        return false;
    *out = fmalloc(n);
    if (!*out) return false;
    for (int64_t i = 0; i < n; i++) {
        uint32_t raw = 0;   /* little-endian: a 16-bit value sits in the low half */
        memcpy(&raw, (const char *)t.data + i * (int64_t)t.elem_size, t.elem_size);
        (*out)[i] = qk_load_f32(&raw, v.dtype, 0);
    }
    return true;
}

/* Before anything is allocated from a user's folder: every tensor the blocks load exists
 * with the shape the sizes imply (weights and scales by the loader's own rule), and the
 * sizes are positive and plausible. A lying header (a 0-byte [1, 2^62, 0] tensor, say)
 * fails here instead of sizing placeholders. */
#define DEMO_MAX_DIM ((int64_t)1 << 20)
static bool check_mlp_tensors(const qk_st_set *s, const qk_qwen35_config *c, bool text, int layer,
                              bool vision, int block)
{
    const int64_t dims[4] = {text ? c->hidden_size : 1, text ? c->intermediate_size : 1,
                             vision ? c->vision_hidden_size : 1, vision ? c->vision_intermediate_size : 1};
    for (int i = 0; i < 4; i++)
        if (dims[i] < 1 || dims[i] > DEMO_MAX_DIM) {
            fprintf(stderr, "qk demo: the folder's MLP sizes (hidden %lld, intermediate %lld, vision %lld "
                    "/ %lld) must be in 1..%lld\n", (long long)dims[0], (long long)dims[1],
                    (long long)dims[2], (long long)dims[3], (long long)DEMO_MAX_DIM);
            return false;
        }
    struct { const char *fmt; int idx; int64_t n, k; bool bias; } want[5] = {
        {"model.layers.%d.mlp.up_proj", layer, c->intermediate_size, c->hidden_size, false},
        {"model.layers.%d.mlp.down_proj", layer, c->hidden_size, c->intermediate_size, false},
        {"model.visual.blocks.%d.mlp.linear_fc1", block, c->vision_intermediate_size, c->vision_hidden_size, true},
        {"model.visual.blocks.%d.mlp.linear_fc2", block, c->vision_hidden_size, c->vision_intermediate_size, true},
        {"model.layers.%d.mlp.gate_proj", layer, c->intermediate_size, c->hidden_size, false},
    };
    char pre[160], name[200];
    for (int i = 0; i < 5; i++) {
        if ((i < 2 || i == 4) ? !text : !vision) continue;
        snprintf(pre, sizeof pre, want[i].fmt, want[i].idx);
        if (i == 4 || i == 0) { /* gate_proj + up_proj, or a stacked gate_up_proj */
            char gu[200];
            snprintf(gu, sizeof gu, "model.layers.%d.mlp.gate_up_proj.weight", layer);
            qk_st_info g;
            if (qk_st_set_find(s, gu, &g) == QK_OK) continue;
        }
        static const char *const sfx[3] = {".weight", ".weight_scale", ".bias"};
        for (int k = 0; k < (want[i].bias ? 3 : 2); k++) {
            snprintf(name, sizeof name, "%s%s", pre, sfx[k]);
            qk_st_info t;
            if (qk_st_set_find(s, name, &t) != QK_OK) {
                fprintf(stderr, "qk demo: the folder has no %s\n", name);
                return false;
            }
            if (qk_mx_linear_check_tensor(name, t.dtype_name, t.ndim, t.shape, want[i].n, want[i].k) != QK_OK) {
                fprintf(stderr, "qk demo: %s\n", qk_last_error());
                return false;
            }
        }
    }
    if (text) {
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", layer);
        qk_st_info t;
        if (qk_st_set_find(s, name, &t) != QK_OK || t.ndim != 1 || t.shape[0] != c->hidden_size) {
            fprintf(stderr, "qk demo: the folder needs %s of shape [%lld]\n", name, (long long)c->hidden_size);
            return false;
        }
    }
    return true;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: qk demo [--model DIR] [--allow-external-shards] [--tokens N] [--quick] [--keep]\n"
               "  (no arguments)  build deterministic BF16 Qwen3.5-0.8B MLP weights (text MLP half:\n"
               "                  hidden 1024, intermediate 3584; vision MLP 1152/4304), quantize them\n"
               "                  with qk quantize into a ModelSlim W8A8_MXFP8 folder, load it through\n"
               "                  the layers, run 16 tokens on the target and reference backends and\n"
               "                  check every layer; exit 1 when a check fails\n"
               "  --model DIR     the same on a ModelSlim folder with Qwen3.5 layer names (the model\n"
               "                  the checks use is then its own dequantized weights)\n"
               "  --allow-external-shards  read --model's files that link out of DIR (a Hugging\n"
               "                  Face cache snapshot); refused by default\n"
               "  --tokens N      batch size (default 16)\n"
               "  --quick         4 tokens, one timed call per layer (for tests)\n"
               "  --keep          keep the temporary folder\n"
               "  QK_DEMO_FORCE_FAIL=1 perturbs one target output (the checks must catch it)\n");
    return f == stderr ? 2 : 0;
}

int qk_cmd_demo(int argc, char **argv)
{
    const char *model_dir = NULL;
    demo d;
    memset(&d, 0, sizeof d);
    d.M = 16;
    d.reps = 7;
    bool keep = false, external = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) d.M = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) { d.M = 4; d.reps = 1; }
        else if (!strcmp(argv[i], "--keep")) keep = true;
        else if (!strcmp(argv[i], "--allow-external-shards")) external = true;
        else { fprintf(stderr, "qk demo: unknown option '%s'\n", argv[i]); return usage(stderr); }
    }
    if (d.M < 1 || d.M > 4096) { fprintf(stderr, "qk demo: --tokens takes 1..4096\n"); return 2; }
    const char *ff = getenv("QK_DEMO_FORCE_FAIL");
    d.force_fail = ff && *ff && strcmp(ff, "0");
    if (qk_init() != QK_OK || qk_serve_init() != QK_OK) {
        fprintf(stderr, "qk demo: %s\n", qk_last_error());
        return 1;
    }

    int rc = 1, layer = 0, block = 0;
    char tmp[4096] = "", folder[4200], bf16[4200];
    qk_demo_model dm;
    memset(&dm, 0, sizeof dm);
    model_f32 m;
    memset(&m, 0, sizeof m);
    qk_ms_model *ms = NULL;
    qk_qwen35_text_mlp *tb = NULL;
    qk_qwen35_vision_mlp *vb = NULL;
    qk_qwen35_config cfg;
    qk_qwen35_config_get("0.8B", &cfg);

    if (!model_dir) {
        /* 1. deterministic BF16 weights */
        const char *td = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/qk-demo-XXXXXX", td && *td ? td : "/tmp");
        if (!mkdtemp(tmp)) { perror("qk demo: mkdtemp"); return 1; }
        snprintf(bf16, sizeof bf16, "%s/model.safetensors", tmp);
        snprintf(folder, sizeof folder, "%s/w8a8_mxfp8", tmp);
        printf("qk demo: Qwen3.5-0.8B text MLP half (layer 0: hidden %lld, intermediate %lld, "
               "GemmaRMSNorm) and vision MLP\n(block 0: %lld -> %lld -> %lld, biases), %d tokens, "
               "BF16 activations; target %s\n", (long long)cfg.hidden_size,
               (long long)cfg.intermediate_size, (long long)cfg.vision_hidden_size,
               (long long)cfg.vision_intermediate_size, (long long)cfg.vision_hidden_size, d.M,
               qk_target());
        double t0 = qkb_now();
        if (qk_demo_model_build(&cfg, 0, 0, 2026, &dm) != QK_OK ||
            qk_demo_model_write(&dm, bf16) != QK_OK) {
            fprintf(stderr, "qk demo: %s\n", qk_last_error());
            goto done;
        }
        struct stat sb;
        stat(bf16, &sb);
        printf("  1. deterministic BF16 weights: %zu tensors, %.1f MB -> %s (%.2f s)\n", dm.n,
               (double)sb.st_size / 1e6, bf16, qkb_now() - t0);
        /* 2. qk quantize's own code */
        printf("  2. ");
        fflush(stdout);
        t0 = qkb_now();
        const qk_ms_quantize_options qo = qk_ms_quantize_defaults();
        qk_ms_quantize_report qr;
        if (qk_modelslim_quantize(bf16, folder, &qo, &qr) != QK_OK) {
            fprintf(stderr, "qk demo: qk quantize: %s\n", qk_last_error());
            goto done;
        }
        qk_quantize_print_summary(&qr, &qo.mx, folder);
        printf("     (%.2f s)\n", qkb_now() - t0);
        model_dir = folder;
        d.dequantized_model = false;
    } else {
        d.dequantized_model = true;
        printf("qk demo --model %s: target %s\n", model_dir, qk_target());
    }

    /* 3. load through the layers' life cycle */
    double t0 = qkb_now();
    if (qk_ms_open(model_dir, external ? QK_MS_ALLOW_EXTERNAL_SHARDS : 0, &ms) != QK_OK) {
        fprintf(stderr, "qk demo: %s\n", qk_last_error());
        goto done;
    }
    const qk_st_set *set = qk_ms_tensors(ms);
    bool has_text = true, has_vision = true;
    if (d.dequantized_model) {
        has_text = find_index(set, "^model\\.layers\\.([0-9]+)\\.mlp\\.", &layer);
        has_vision = find_index(set, "^model\\.visual\\.blocks\\.([0-9]+)\\.mlp\\.linear_fc", &block);
        if (!has_text && !has_vision) {
            fprintf(stderr, "qk demo: %s has no Qwen3.5 MLP layer names\n", model_dir);
            print_expected(0, 0);
            print_found(set);
            goto done;
        }
        int64_t a, b;
        char n[160];
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", layer);
        if (has_text && shape_of(set, n, &a, &b)) {
            cfg.hidden_size = a;
            cfg.intermediate_size = b;
        } else if (has_text) {
            fprintf(stderr, "qk demo: %s: no %s\n", model_dir, n);
            print_expected(layer, block);
            print_found(set);
            goto done;
        }
        snprintf(n, sizeof n, "model.visual.blocks.%d.mlp.linear_fc1.weight", block);
        if (has_vision && shape_of(set, n, &a, &b)) {
            cfg.vision_intermediate_size = a;
            cfg.vision_hidden_size = b;
        } else if (has_vision) {
            fprintf(stderr, "qk demo: %s: no %s\n", model_dir, n);
            print_expected(layer, block);
            print_found(set);
            goto done;
        }
    }
    if (d.dequantized_model && !check_mlp_tensors(set, &cfg, has_text, layer, has_vision, block)) {
        print_expected(layer, block);
        print_found(set);
        goto done;
    }
    qk_layer_options opt = qk_layer_options_default();
    opt.flags = QK_LAYER_ALL_BACKENDS;   /* both backends run the same loaded weights */
    if (has_text) {
        char n[160];
        qk_st_info ni;
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", layer);
        if (qk_st_set_find(set, n, &ni) == QK_OK && qk_st_dtype_of(ni.dtype_name) != QK_DTYPE_INVALID &&
            qk_is_float_dtype(qk_st_dtype_of(ni.dtype_name)))
            opt.weight_dtype = qk_st_dtype_of(ni.dtype_name);
    }
    qk_status st = QK_OK;
    if (has_text && (st = qk_qwen35_text_mlp_create(&cfg, layer, &opt, &tb)) == QK_OK &&
        (st = qk_qwen35_text_mlp_load(tb, set)) == QK_OK)
        st = qk_qwen35_text_mlp_process_weights_after_loading(tb);
    if (st == QK_OK && has_vision && (st = qk_qwen35_vision_mlp_create(&cfg, block, &opt, &vb)) == QK_OK &&
        (st = qk_qwen35_vision_mlp_load(vb, set)) == QK_OK)
        st = qk_qwen35_vision_mlp_process_weights_after_loading(vb);
    if (st != QK_OK) {
        fprintf(stderr, "qk demo: loading %s: %s: %s\n", model_dir, qk_status_name(st), qk_last_error());
        if (d.dequantized_model) {
            print_expected(layer, block);
            print_found(set);
        }
        goto done;
    }
    printf("  3. loaded %s through create / load / process_weights_after_loading: %s%s%s (%.2f s)\n",
           model_dir, has_text ? "GemmaRMSNorm + gate_up_proj + down_proj" : "",
           has_text && has_vision ? "; " : "",
           has_vision ? "linear_fc1 + linear_fc2 (K = 4304: 135 scales per row, the last block "
                        "holds 16 elements)" : "",
           qkb_now() - t0);

    /* the model the checks compare with, and the dequantized checkpoint weights */
    m.H = cfg.hidden_size; m.I = cfg.intermediate_size;
    m.VH = cfg.vision_hidden_size; m.VI = cfg.vision_intermediate_size;
    m.eps = cfg.rms_norm_eps;
    bool mok = true;
    char pfx[160], n2[200];
    if (has_text) {
        m.norm = fmalloc(m.H); m.gu = fmalloc(2 * m.I * m.H); m.down = fmalloc(m.H * m.I);
        m.q_gu = fmalloc(2 * m.I * m.H); m.q_down = fmalloc(m.H * m.I);
        mok = m.norm && m.gu && m.down && m.q_gu && m.q_down;
        snprintf(pfx, sizeof pfx, "model.layers.%d.mlp", layer);
        snprintf(n2, sizeof n2, "%s.gate_proj", pfx);
        bool stacked = mok && qk_check_dequantize_from(set, n2, m.I, m.H, m.q_gu) == QK_OK;
        if (stacked) {
            snprintf(n2, sizeof n2, "%s.up_proj", pfx);
            mok = qk_check_dequantize_from(set, n2, m.I, m.H, m.q_gu + m.I * m.H) == QK_OK;
        } else if (mok) {
            snprintf(n2, sizeof n2, "%s.gate_up_proj", pfx);
            mok = qk_check_dequantize_from(set, n2, 2 * m.I, m.H, m.q_gu) == QK_OK;
        }
        snprintf(n2, sizeof n2, "%s.down_proj", pfx);
        mok = mok && qk_check_dequantize_from(set, n2, m.H, m.I, m.q_down) == QK_OK;
        float *nw = NULL;
        snprintf(n2, sizeof n2, "model.layers.%d.post_attention_layernorm.weight", layer);
        mok = mok && load_f32(set, n2, m.H, &nw);
        if (mok) { memcpy(m.norm, nw, (size_t)m.H * 4); free(nw); }
        if (mok && !d.dequantized_model) {
            qk_check_bf16_to_f32(qk_demo_model_find(&dm, "mlp.gate_proj.weight")->data, m.I * m.H, m.gu);
            qk_check_bf16_to_f32(qk_demo_model_find(&dm, "mlp.up_proj.weight")->data, m.I * m.H, m.gu + m.I * m.H);
            qk_check_bf16_to_f32(qk_demo_model_find(&dm, "mlp.down_proj.weight")->data, m.H * m.I, m.down);
        } else if (mok) {
            memcpy(m.gu, m.q_gu, (size_t)(2 * m.I * m.H) * 4);
            memcpy(m.down, m.q_down, (size_t)(m.H * m.I) * 4);
        }
    }
    if (mok && has_vision) {
        m.fc1 = fmalloc(m.VI * m.VH); m.fc2 = fmalloc(m.VH * m.VI);
        m.q_fc1 = fmalloc(m.VI * m.VH); m.q_fc2 = fmalloc(m.VH * m.VI);
        mok = m.fc1 && m.fc2 && m.q_fc1 && m.q_fc2;
        snprintf(pfx, sizeof pfx, "model.visual.blocks.%d.mlp", block);
        snprintf(n2, sizeof n2, "%s.linear_fc1", pfx);
        mok = mok && qk_check_dequantize_from(set, n2, m.VI, m.VH, m.q_fc1) == QK_OK;
        snprintf(n2, sizeof n2, "%s.linear_fc2", pfx);
        mok = mok && qk_check_dequantize_from(set, n2, m.VH, m.VI, m.q_fc2) == QK_OK;
        snprintf(n2, sizeof n2, "%s.linear_fc1.bias", pfx);
        mok = mok && load_f32(set, n2, m.VI, &m.b1);
        snprintf(n2, sizeof n2, "%s.linear_fc2.bias", pfx);
        mok = mok && load_f32(set, n2, m.VH, &m.b2);
        if (mok && !d.dequantized_model) {
            qk_check_bf16_to_f32(qk_demo_model_find(&dm, "linear_fc1.weight")->data, m.VI * m.VH, m.fc1);
            qk_check_bf16_to_f32(qk_demo_model_find(&dm, "linear_fc2.weight")->data, m.VH * m.VI, m.fc2);
        } else if (mok) {
            memcpy(m.fc1, m.q_fc1, (size_t)(m.VI * m.VH) * 4);
            memcpy(m.fc2, m.q_fc2, (size_t)(m.VH * m.VI) * 4);
        }
    }
    if (!mok) {
        fprintf(stderr, "qk demo: cannot read the checkpoint's weights for the checks: %s\n", qk_last_error());
        goto done;
    }
    char dt[256], dr[256];
    qk_backend_describe(T, QK_OP_MXFP8_LINEAR, dt, sizeof dt);
    qk_backend_describe(R, QK_OP_MXFP8_LINEAR, dr, sizeof dr);
    printf("  4. %d tokens through both blocks: target backend (mxfp8_linear %s) and reference "
           "backend (%s),\n     against the %s evaluated in double\n", d.M, dt, dr,
           d.dequantized_model ? "checkpoint's dequantized weights" : "BF16 model");

    if (has_text) run_text_block(&d, tb, &m, layer);
    if (has_vision) run_vision_block(&d, vb, &m, block);
    print_table(&d);
    if (d.failures) {
        printf("\nqk demo: FAILED (%d check%s)\n", d.failures, d.failures == 1 ? "" : "s");
    } else {
        printf("\nqk demo: all checks passed\n");
        rc = 0;
    }
done:
    qk_qwen35_text_mlp_destroy(tb);
    qk_qwen35_vision_mlp_destroy(vb);
    qk_ms_close(ms);
    model_free(&m);
    qk_demo_model_free(&dm);
    if (tmp[0]) {
        if (keep) printf("kept %s\n", tmp);
        else remove_tree(tmp);
    }
    return rc;
}
