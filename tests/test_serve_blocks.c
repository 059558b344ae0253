/* serving.md, "Qwen3.5 blocks": the text decoder MLP half (0.8B sizes) and the vision MLP
 * (K = 4304) loaded from a ModelSlim W8A8_MXFP8 folder that `qk quantize` wrote from
 * deterministic BF16 weights; target and reference within mxfp8.md's / norm.md's bounds on
 * every layer, the block call equal to its layers, both against the BF16 model evaluated in
 * double; and bad folders (a floor-sized scale, a 0xFF scale, a missing tensor, a wrong
 * dtype): a clear error naming the tensor, and nothing half-loaded.
 *
 * The bound against the BF16 model (QK_CHECK_BOUND_*, tools/qk/demo_check.h) is on the
 * normwise relative error sqrt(sum (out - model)^2 / sum model^2) of a layer's output:
 *  - each E4M3 rounding changes an element by a relative d with |d| <= 2^-4 (3 mantissa
 *    bits, round to nearest), or up to 2^-3 for a block maximum that FLOOR's scale rule
 *    saturates at 448; taking the worse case, d is spread over [0, 2^-3] and its RMS is at
 *    most 2^-3 / sqrt(3) = 0.072;
 *  - a product w_k x_k of two rounded operands moves by (1 + d)(1 + e) - 1, RMS at most
 *    sqrt(2) * 0.072 = 0.102; the roundings of different k are independent and the
 *    products' signs are random, so the errors add in quadrature and the output's error
 *    has an RMS of at most 0.102 times sqrt(sum_k (w_k x_k)^2), which is the output's own
 *    RMS (random signs again): 0.10 for a single linear;
 *  - silu(gate) * up multiplies two outputs each off by 0.10 (in quadrature: 0.14, and
 *    silu's relative gain stays near 1 where the products are large): 0.15; down_proj adds
 *    its own 0.10 in quadrature: sqrt(0.15^2 + 0.10^2) = 0.18 for the block's output;
 *    the vision MLP (gelu, gain <= 1.1) stays within the same 0.18;
 *  - the Gemma norm's output is two BF16 roundings (the residual sum, the output) and the
 *    rstd of the rounded sum away from the model: 3 * 2^-8 per element.
 * The bounds hold for a correct kernel with a margin of about 2 (measured: 0.045 for one
 * linear, 0.085 for the text block), while a wrong block scale (a factor of 2), a swapped
 * gate/up or a dropped partial block break them or the spec checks by far. */
#define _GNU_SOURCE
#include "harness.h"
#include "io_test_util.h"
#include "demo_check.h"

#include <math.h>

#ifdef QK_TOOL_PATH

enum { M = 4 };

/* ---- folders ---- */
/* Writes the demo model's BF16 file into dir and quantizes it with `qk quantize` into
   dir/ms. Returns 0 on success. */
static int quantized_folder(const qk_demo_model *dm, const char *dir, char *ms, size_t n)
{
    char bf16[1024], cmd[2400];
    snprintf(bf16, sizeof bf16, "%s/model.safetensors", dir);
    snprintf(ms, n, "%s/ms", dir);
    if (qk_demo_model_write(dm, bf16) != QK_OK) return -1;
    snprintf(cmd, sizeof cmd, "%s quantize %s %s --quiet > %s/quantize.log 2>&1", QK_TOOL_PATH, bf16, ms, dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A changed copy of a ModelSlim folder: `edit` may rename, drop (return false), retype or
   reshape a tensor and change its bytes (a malloc'd copy it owns). */
typedef struct tensor_out {
    char name[160];
    char dtype[16];
    int32_t ndim;
    int64_t shape[4];
    uint8_t *data;
    size_t nbytes;
} tensor_out;
typedef bool (*edit_fn)(tensor_out *t, void *ctx);

static int write_edited(const qk_st_set *src, const char *dst, edit_fn edit, void *ctx)
{
    mkdir(dst, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/quant_model_weights.safetensors", dst);
    qk_st_writer *w = NULL;
    if (qk_st_writer_create(path, QK_ST_WRITE_REPLACE, &w) != QK_OK) return -1;
    size_t n = qk_st_set_count(src), kept = 0;
    tensor_out *ts = calloc(n, sizeof *ts);
    char *desc = malloc(65536);
    size_t dl = (size_t)snprintf(desc, 65536, "{\"model_quant_type\": \"W8A8_MXFP8\", \"version\": \"1.0.0\", "
                                 "\"group_size\": 32, \"metadata\": {}, \"optional\": {}");
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        qk_st_info info;
        qk_st_set_info_at(src, i, &info);
        tensor_out *t = &ts[kept];
        snprintf(t->name, sizeof t->name, "%s", info.name);
        snprintf(t->dtype, sizeof t->dtype, "%s", info.dtype_name);
        t->ndim = info.ndim;
        for (int d = 0; d < info.ndim; d++) t->shape[d] = info.shape[d];
        t->nbytes = (size_t)info.nbytes;
        t->data = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(t->data, info.data, t->nbytes);
        if (edit && !edit(t, ctx)) {
            free(t->data);
            continue;
        }
        const bool q = strstr(t->name, ".weight_scale") || !strcmp(t->dtype, "F8_E4M3") ||
                       (strstr(t->name, "proj.weight") || strstr(t->name, "fc1.weight") || strstr(t->name, "fc2.weight"));
        dl += (size_t)snprintf(desc + dl, 65536 - dl, ", \"%s\": \"%s\"", t->name, q ? "W8A8_MXFP8" : "FLOAT");
        if (qk_st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape, t->data) != QK_OK) rc = -1;
        kept++;
    }
    snprintf(desc + dl, 65536 - dl, "}");
    if (rc == 0 && qk_st_writer_commit(w) != QK_OK) rc = -1;
    qk_st_writer_destroy(w);
    for (size_t i = 0; i < kept; i++) free(ts[i].data);
    free(ts);
    snprintf(path, sizeof path, "%s/quant_model_description.json", dst);
    if (rc == 0 && write_all(path, desc, strlen(desc)) != 0) rc = -1;
    free(desc);
    return rc;
}

/* ---- checks shared by the two blocks ---- */
static double *f64(const uint16_t *x, int64_t n)
{
    double *y = malloc((size_t)n * sizeof(double));
    qk_check_to_f64(x, QK_DTYPE_BF16, n, y);
    return y;
}

/* Both backends' outputs of one linear on the same input within mxfp8.md's bound. */
static void linear_within_spec(const char *what, const uint16_t *x, int64_t K, const float *wq,
                               const float *bias, int64_t N, const uint16_t *yt, const uint16_t *yr)
{
    double *xq = malloc((size_t)(M * K) * sizeof(double)), *ex = malloc((size_t)(M * N) * sizeof(double));
    double *S = malloc((size_t)(M * N) * sizeof(double));
    CHECK(qk_check_quantized_activations(x, QK_DTYPE_BF16, M, K, xq) == QK_OK, "%s", qk_last_error());
    qk_check_linear_f64(xq, M, K, wq, N, bias, ex, S);
    double rt = qk_check_mxfp8_bound_ratio(yt, QK_DTYPE_BF16, ex, S, M * N);
    double rr = qk_check_mxfp8_bound_ratio(yr, QK_DTYPE_BF16, ex, S, M * N);
    CHECK(rt <= 1.0, "%s: target is %.3g x mxfp8.md's bound", what, rt);
    CHECK(rr <= 1.0, "%s: reference is %.3g x mxfp8.md's bound", what, rr);
    free(xq);
    free(ex);
    free(S);
}

static uint16_t *bf16_buf(int64_t n) { return calloc((size_t)n, 2); }
static qk_tensor bt(uint16_t *p, int64_t rows, int64_t cols)
{
    int64_t sh[2] = {rows, cols};
    return qk_tensor_make(p, QK_DTYPE_BF16, 2, sh);
}
static float *to_f32(const qk_demo_tensor *t, int64_t n)
{
    float *y = malloc((size_t)n * sizeof(float));
    qk_check_bf16_to_f32(t->data, n, y);
    return y;
}

static char root[512], ms08[700];
static qk_demo_model dm08;
static qk_ms_model *ms08_model;

static void setup_08b(void)
{
    qk_qwen35_config c;
    qk_qwen35_config_get("0.8B", &c);
    scratch_dir(root, sizeof root, "serve_blocks");
    CHECK(root[0], "scratch folder");
    CHECK(qk_demo_model_build(&c, 0, 0, 77, &dm08) == QK_OK, "%s", qk_last_error());
    CHECK(quantized_folder(&dm08, root, ms08, sizeof ms08) == 0, "qk quantize failed (see %s/quantize.log)", root);
    CHECK(qk_ms_open(ms08, 0, &ms08_model) == QK_OK, "%s", qk_last_error());
}

static void text_mlp_half_from_modelslim(void)
{
    if (!ms08_model) return;
    const qk_st_set *set = qk_ms_tensors(ms08_model);
    qk_qwen35_config c = dm08.c;
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    qk_layer_options o = qk_layer_options_default();
    o.flags = QK_LAYER_ALL_BACKENDS;
    qk_qwen35_text_mlp *b = NULL;
    CHECK(qk_qwen35_text_mlp_create(&c, 0, &o, &b) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(b, set) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_process_weights_after_loading(b) == QK_OK, "%s", qk_last_error());

    uint16_t *x = bf16_buf(M * H), *res = bf16_buf(M * H);
    qk_demo_activations(x, M * H, 1.0, 1);
    qk_demo_activations(res, M * H, 2.0, 2);
    uint16_t *h[3], *s[3], *gu[3], *a[3], *y[3], *yb[3], *sb[3];
    for (int k = 1; k <= 2; k++) {
        h[k] = bf16_buf(M * H); s[k] = bf16_buf(M * H); gu[k] = bf16_buf(M * 2 * I);
        a[k] = bf16_buf(M * I); y[k] = bf16_buf(M * H); yb[k] = bf16_buf(M * H); sb[k] = bf16_buf(M * H);
    }
    qk_tensor xt = bt(x, M, H), rt = bt(res, M, H);
    /* layer by layer: target, and the reference on the target's inputs */
    const qk_backend T = QK_BACKEND_TARGET, R = QK_BACKEND_REFERENCE;
    for (int k = (int)T; k <= (int)R; k++) {
        qk_tensor ht = bt(h[k], M, H), st = bt(s[k], M, H);
        CHECK(qk_norm_layer_forward_residual(qk_qwen35_text_mlp_norm(b), (qk_backend)k, &xt, &rt, &ht, &st) == QK_OK,
              "%s", qk_last_error());
        qk_tensor hin = bt(h[T], M, H), gut = bt(gu[k], M, 2 * I);
        CHECK(qk_mxfp8_linear_layer_forward(qk_qwen35_text_mlp_gate_up(b), (qk_backend)k, &hin, &gut) == QK_OK,
              "%s", qk_last_error());
        qk_tensor gin = bt(gu[T], M, 2 * I), at = bt(a[k], M, I);
        CHECK(qk_serve_silu_and_mul(&gin, &at) == QK_OK, "%s", qk_last_error());
        qk_tensor ain = bt(a[T], M, I), yt = bt(y[k], M, H);
        CHECK(qk_mxfp8_linear_layer_forward(qk_qwen35_text_mlp_down(b), (qk_backend)k, &ain, &yt) == QK_OK,
              "%s", qk_last_error());
    }
    /* norm: residual_out exact and equal; out within 1 ulp of the exact norm of it */
    CHECK(!memcmp(s[T], s[R], (size_t)(M * H) * 2), "residual_out differs between backends");
    float *wn = to_f32(qk_demo_model_find(&dm08, "post_attention_layernorm.weight"), H);
    double *sx = f64(s[T], M * H), *zero = calloc((size_t)(M * H), 8), *ex = malloc((size_t)(M * H) * 8),
           *tmp = malloc((size_t)(M * H) * 8);
    qk_check_add_gemma_norm_f64(sx, zero, wn, M, H, c.rms_norm_eps, ex, tmp);
    CHECK(qk_check_norm_bound_ratio(h[T], QK_DTYPE_BF16, ex, M * H) <= 1.0, "target norm beyond 1 ulp");
    CHECK(qk_check_norm_bound_ratio(h[R], QK_DTYPE_BF16, ex, M * H) <= 1.0, "reference norm beyond 1 ulp");
    /* the linears: both backends within mxfp8.md's bound of the exact W8A8 result */
    float *wq_gu = malloc((size_t)(2 * I * H) * 4), *wq_down = malloc((size_t)(H * I) * 4);
    CHECK(qk_check_dequantize_from(qk_ms_tensors(ms08_model), "model.layers.0.mlp.gate_proj", I, H, wq_gu) == QK_OK &&
          qk_check_dequantize_from(qk_ms_tensors(ms08_model), "model.layers.0.mlp.up_proj", I, H, wq_gu + I * H) == QK_OK &&
          qk_check_dequantize_from(qk_ms_tensors(ms08_model), "model.layers.0.mlp.down_proj", H, I, wq_down) == QK_OK,
          "%s", qk_last_error());
    linear_within_spec("gate_up_proj", h[T], H, wq_gu, NULL, 2 * I, gu[T], gu[R]);
    CHECK(!memcmp(a[T], a[R], (size_t)(M * I) * 2), "silu * up is not deterministic");
    linear_within_spec("down_proj", a[T], I, wq_down, NULL, H, y[T], y[R]);
    /* the block call equals its layers (target), and the reference block runs end to end */
    for (int k = (int)T; k <= (int)R; k++) {
        qk_tensor ybt = bt(yb[k], M, H), sbt = bt(sb[k], M, H);
        CHECK(qk_qwen35_text_mlp_forward(b, (qk_backend)k, &xt, &rt, &ybt, &sbt) == QK_OK, "%s", qk_last_error());
    }
    CHECK(!memcmp(yb[T], y[T], (size_t)(M * H) * 2) && !memcmp(sb[T], s[T], (size_t)(M * H) * 2),
          "text block != its layers");
    /* against the BF16 model in double */
    float *wgu = malloc((size_t)(2 * I * H) * 4), *wdown = to_f32(qk_demo_model_find(&dm08, "mlp.down_proj.weight"), H * I);
    qk_check_bf16_to_f32(qk_demo_model_find(&dm08, "mlp.gate_proj.weight")->data, I * H, wgu);
    qk_check_bf16_to_f32(qk_demo_model_find(&dm08, "mlp.up_proj.weight")->data, I * H, wgu + I * H);
    double *xd = f64(x, M * H), *rd = f64(res, M * H), *hd = malloc((size_t)(M * H) * 8), *sd = malloc((size_t)(M * H) * 8);
    double *gud = malloc((size_t)(M * 2 * I) * 8), *ad = malloc((size_t)(M * I) * 8), *yd = malloc((size_t)(M * H) * 8);
    qk_check_add_gemma_norm_f64(xd, rd, wn, M, H, c.rms_norm_eps, hd, sd);
    qk_check_linear_f64(hd, M, H, wgu, 2 * I, NULL, gud, NULL);
    qk_check_silu_mul_f64(gud, M, I, ad);
    qk_check_linear_f64(ad, M, I, wdown, H, NULL, yd, NULL);
    double e_h = qk_check_rms_rel(h[T], QK_DTYPE_BF16, hd, M * H);
    double e_gu = qk_check_rms_rel(gu[T], QK_DTYPE_BF16, gud, M * 2 * I);
    double e_t = qk_check_rms_rel(yb[T], QK_DTYPE_BF16, yd, M * H), e_r = qk_check_rms_rel(yb[R], QK_DTYPE_BF16, yd, M * H);
    CHECK(e_h <= QK_CHECK_BOUND_NORM, "norm vs BF16 model: %.4g", e_h);
    CHECK(e_gu <= QK_CHECK_BOUND_LINEAR, "gate_up vs BF16 model: %.4g", e_gu);
    CHECK(e_t <= QK_CHECK_BOUND_BLOCK, "target block vs BF16 model: %.4g", e_t);
    CHECK(e_r <= QK_CHECK_BOUND_BLOCK, "reference block vs BF16 model: %.4g", e_r);
    /* and it is not trivially small: the quantization is really there */
    CHECK(e_gu > 0.005, "gate_up error %.4g is implausibly small for MXFP8", e_gu);
    printf("     text MLP half vs BF16 model (normwise): norm %.4f, gate_up %.4f, block target %.4f, "
           "reference %.4f\n", e_h, e_gu, e_t, e_r);

    free(wn); free(sx); free(zero); free(ex); free(tmp); free(wq_gu); free(wq_down); free(wgu); free(wdown);
    free(xd); free(rd); free(hd); free(sd); free(gud); free(ad); free(yd); free(x); free(res);
    for (int k = 1; k <= 2; k++) { free(h[k]); free(s[k]); free(gu[k]); free(a[k]); free(y[k]); free(yb[k]); free(sb[k]); }
    qk_qwen35_text_mlp_destroy(b);
}

static void vision_mlp_k4304_from_modelslim(void)
{
    if (!ms08_model) return;
    const qk_st_set *set = qk_ms_tensors(ms08_model);
    qk_qwen35_config c = dm08.c;
    const int64_t H = c.vision_hidden_size, I = c.vision_intermediate_size;
    qk_st_info si;
    CHECK(qk_st_set_find(set, "model.visual.blocks.0.mlp.linear_fc2.weight_scale", &si) == QK_OK &&
          si.shape[1] == 135, "the quantized fc2 scale has %lld columns, not ceil(4304/32)", (long long)si.shape[1]);
    qk_layer_options o = qk_layer_options_default();
    o.flags = QK_LAYER_ALL_BACKENDS;
    qk_qwen35_vision_mlp *b = NULL;
    CHECK(qk_qwen35_vision_mlp_create(&c, 0, &o, &b) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_vision_mlp_load(b, set) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_vision_mlp_process_weights_after_loading(b) == QK_OK, "%s", qk_last_error());
    uint16_t *x = bf16_buf(M * H), *t1[3], *g[3], *y[3], *yb[3];
    qk_demo_activations(x, M * H, 1.0, 3);
    for (int k = 1; k <= 2; k++) { t1[k] = bf16_buf(M * I); g[k] = bf16_buf(M * I); y[k] = bf16_buf(M * H); yb[k] = bf16_buf(M * H); }
    const qk_backend T = QK_BACKEND_TARGET, R = QK_BACKEND_REFERENCE;
    qk_tensor xt = bt(x, M, H);
    for (int k = (int)T; k <= (int)R; k++) {
        qk_tensor tt = bt(t1[k], M, I), gin = bt(t1[T], M, I), gt = bt(g[k], M, I), g2 = bt(g[T], M, I), yt = bt(y[k], M, H);
        CHECK(qk_mxfp8_linear_layer_forward(qk_qwen35_vision_mlp_fc1(b), (qk_backend)k, &xt, &tt) == QK_OK, "%s", qk_last_error());
        CHECK(qk_serve_gelu_tanh(&gin, &gt) == QK_OK, "%s", qk_last_error());
        CHECK(qk_mxfp8_linear_layer_forward(qk_qwen35_vision_mlp_fc2(b), (qk_backend)k, &g2, &yt) == QK_OK, "%s", qk_last_error());
        qk_tensor ybt = bt(yb[k], M, H);
        CHECK(qk_qwen35_vision_mlp_forward(b, (qk_backend)k, &xt, &ybt) == QK_OK, "%s", qk_last_error());
    }
    float *w1q = malloc((size_t)(I * H) * 4), *w2q = malloc((size_t)(H * I) * 4);
    float *b1 = to_f32(qk_demo_model_find(&dm08, "linear_fc1.bias"), I), *b2 = to_f32(qk_demo_model_find(&dm08, "linear_fc2.bias"), H);
    CHECK(qk_check_dequantize_from(set, "model.visual.blocks.0.mlp.linear_fc1", I, H, w1q) == QK_OK &&
          qk_check_dequantize_from(set, "model.visual.blocks.0.mlp.linear_fc2", H, I, w2q) == QK_OK, "%s", qk_last_error());
    linear_within_spec("linear_fc1", x, H, w1q, b1, I, t1[T], t1[R]);
    linear_within_spec("linear_fc2 (K = 4304)", g[T], I, w2q, b2, H, y[T], y[R]);
    CHECK(!memcmp(yb[T], y[T], (size_t)(M * H) * 2), "vision block != its layers");
    /* against the BF16 model in double */
    float *w1 = to_f32(qk_demo_model_find(&dm08, "linear_fc1.weight"), I * H), *w2 = to_f32(qk_demo_model_find(&dm08, "linear_fc2.weight"), H * I);
    double *xd = f64(x, M * H), *t1d = malloc((size_t)(M * I) * 8), *gd = malloc((size_t)(M * I) * 8), *yd = malloc((size_t)(M * H) * 8);
    qk_check_linear_f64(xd, M, H, w1, I, b1, t1d, NULL);
    qk_check_gelu_tanh_f64(t1d, M * I, gd);
    qk_check_linear_f64(gd, M, I, w2, H, b2, yd, NULL);
    double e1 = qk_check_rms_rel(t1[T], QK_DTYPE_BF16, t1d, M * I);
    double et = qk_check_rms_rel(yb[T], QK_DTYPE_BF16, yd, M * H), er = qk_check_rms_rel(yb[R], QK_DTYPE_BF16, yd, M * H);
    CHECK(e1 <= QK_CHECK_BOUND_LINEAR && e1 > 0.005, "fc1 vs BF16 model: %.4g", e1);
    CHECK(et <= QK_CHECK_BOUND_BLOCK, "target vision block vs BF16 model: %.4g", et);
    CHECK(er <= QK_CHECK_BOUND_BLOCK, "reference vision block vs BF16 model: %.4g", er);
    printf("     vision MLP vs BF16 model (normwise): fc1 %.4f, block target %.4f, reference %.4f\n", e1, et, er);
    free(w1q); free(w2q); free(b1); free(b2); free(w1); free(w2); free(xd); free(t1d); free(gd); free(yd); free(x);
    for (int k = 1; k <= 2; k++) { free(t1[k]); free(g[k]); free(y[k]); free(yb[k]); }
    qk_qwen35_vision_mlp_destroy(b);
}

/* ---- bad folders (a small config that keeps K = 4304 for the vision fc2) ---- */
static char small_root[512], small_ms[700];
static qk_qwen35_config small_cfg = {64, 96, 1e-6f, 64, 4304};

static void setup_small(void)
{
    qk_demo_model dm;
    scratch_dir(small_root, sizeof small_root, "serve_bad");
    CHECK(qk_demo_model_build(&small_cfg, 2, 1, 5, &dm) == QK_OK, "%s", qk_last_error());
    CHECK(quantized_folder(&dm, small_root, small_ms, sizeof small_ms) == 0, "qk quantize failed");
    qk_demo_model_free(&dm);
}

typedef struct edit_ctx { const char *name; int kind; const qk_st_set *src; } edit_ctx;
enum { FLOOR_SCALE, FF_SCALE, DROP, WRONG_DTYPE, STACK_GATE_UP };

/* gate_proj + up_proj -> one stacked gate_up_proj (what an engine's loader builds) */
static bool stack_gate_up(tensor_out *t, const qk_st_set *src)
{
    char *g = strstr(t->name, ".gate_proj.");
    if (strstr(t->name, ".up_proj.")) return false;
    if (!g) return true;
    char up[160], fused[160];
    snprintf(up, sizeof up, "%.*s.up_proj.%s", (int)(g - t->name), t->name, g + strlen(".gate_proj."));
    snprintf(fused, sizeof fused, "%.*s.gate_up_proj.%s", (int)(g - t->name), t->name, g + strlen(".gate_proj."));
    qk_st_info ui;
    if (qk_st_set_find(src, up, &ui) != QK_OK) return true;
    uint8_t *both = malloc(t->nbytes * 2);
    memcpy(both, t->data, t->nbytes);
    memcpy(both + t->nbytes, ui.data, t->nbytes);
    free(t->data);
    t->data = both;
    t->nbytes *= 2;
    t->shape[0] *= 2;
    snprintf(t->name, sizeof t->name, "%s", fused);
    return true;
}

static bool do_edit(tensor_out *t, void *vctx)
{
    const edit_ctx *e = vctx;
    if (e->kind == STACK_GATE_UP) return stack_gate_up(t, e->src);
    if (strcmp(t->name, e->name)) return true;
    switch (e->kind) {
    case FLOOR_SCALE: {   /* [N, 135] -> [N, 134]: the exporter's K // 32 */
        const int64_t N = t->shape[0], kb = t->shape[1];
        for (int64_t n = 0; n < N; n++) memmove(t->data + n * (kb - 1), t->data + n * kb, (size_t)(kb - 1));
        t->shape[1] = kb - 1;
        return true;
    }
    case FF_SCALE: t->data[1 * t->shape[1] + 1] = 0xFF; return true;
    case DROP: return false;
    case WRONG_DTYPE:
        if (!strcmp(t->dtype, "F8_E4M3")) snprintf(t->dtype, sizeof t->dtype, "U8");
        else if (!strcmp(t->dtype, "BF16")) {   /* 2 bytes per element -> F16 */
            snprintf(t->dtype, sizeof t->dtype, "F16");
        }
        return true;
    default: return true;
    }
}

static qk_ms_model *open_edited(const char *tag, const char *name, int kind)
{
    char dst[800];
    snprintf(dst, sizeof dst, "%s/%s", small_root, tag);
    qk_ms_model *src = NULL, *m = NULL;
    CHECK(qk_ms_open(small_ms, 0, &src) == QK_OK, "%s", qk_last_error());
    if (!src) return NULL;
    edit_ctx e = {name, kind, qk_ms_tensors(src)};
    CHECK(write_edited(qk_ms_tensors(src), dst, do_edit, &e) == 0, "writing %s", dst);
    qk_ms_close(src);
    CHECK(qk_ms_open(dst, 0, &m) == QK_OK, "%s", qk_last_error());
    return m;
}

static bool all_ff(const qk_mxfp8_linear_layer *l)
{
    qk_tensor v;
    if (qk_mx_linear_placeholder(qk_mxfp8_linear_layer_scheme(l), "weight_scale", &v) != QK_OK) return false;
    for (int64_t i = 0; i < v.shape[0] * v.shape[1]; i++)
        if (((const uint8_t *)v.data)[i] != 0xFF) return false;
    return true;
}

static bool norm_fresh(const qk_norm_layer *l)
{
    qk_tensor v;
    qk_norm_layer_weight(l, &v);
    for (int64_t i = 0; i < v.shape[0]; i++)
        if (qk_load_f32(v.data, v.dtype, i) != 0.0f) return false;
    return true;
}

static void small_folder_loads(void)
{
    qk_ms_model *m = NULL;
    CHECK(qk_ms_open(small_ms, 0, &m) == QK_OK, "%s", qk_last_error());
    if (!m) return;
    qk_qwen35_text_mlp *t = NULL;
    qk_qwen35_vision_mlp *v = NULL;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(t, qk_ms_tensors(m)) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_process_weights_after_loading(t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_process_weights_after_loading(t) == QK_ERR_INVALID_ARGUMENT, "twice");
    CHECK(qk_qwen35_vision_mlp_create(&small_cfg, 1, NULL, &v) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_vision_mlp_load(v, qk_ms_tensors(m)) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_vision_mlp_process_weights_after_loading(v) == QK_OK, "%s", qk_last_error());
    /* the wrong layer index finds nothing */
    qk_qwen35_text_mlp *t0 = NULL;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 0, NULL, &t0) == QK_OK, "create");
    CHECK(qk_qwen35_text_mlp_load(t0, qk_ms_tensors(m)) == QK_ERR_FORMAT, "layer 0 of a layer-2 folder");
    CHECK(strstr(qk_last_error(), "model.layers.0.post_attention_layernorm.weight") != NULL, "%s", qk_last_error());
    /* a checkpoint with a stacked gate_up_proj loads to the same block */
    qk_ms_model *fm = open_edited("stacked", "", STACK_GATE_UP);
    qk_qwen35_text_mlp *tf = NULL;
    if (fm) {
        qk_st_info gi;
        CHECK(qk_st_set_find(qk_ms_tensors(fm), "model.layers.2.mlp.gate_up_proj.weight", &gi) == QK_OK &&
              qk_st_set_find(qk_ms_tensors(fm), "model.layers.2.mlp.up_proj.weight", &gi) != QK_OK, "fused folder");
        CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &tf) == QK_OK, "create");
        CHECK(qk_qwen35_text_mlp_load(tf, qk_ms_tensors(fm)) == QK_OK, "%s", qk_last_error());
        CHECK(qk_qwen35_text_mlp_process_weights_after_loading(tf) == QK_OK, "%s", qk_last_error());
        uint16_t x[3 * 64], r[3 * 64], y1[3 * 64], y2[3 * 64], s1[3 * 64], s2[3 * 64];
        qk_demo_activations(x, 3 * 64, 1.0, 8);
        qk_demo_activations(r, 3 * 64, 1.0, 9);
        qk_tensor xt = bt(x, 3, 64), rt = bt(r, 3, 64), a1 = bt(y1, 3, 64), a2 = bt(y2, 3, 64),
                  b1 = bt(s1, 3, 64), b2 = bt(s2, 3, 64);
        CHECK(qk_qwen35_text_mlp_forward(t, QK_BACKEND_DEFAULT, &xt, &rt, &a1, &b1) == QK_OK, "%s", qk_last_error());
        CHECK(qk_qwen35_text_mlp_forward(tf, QK_BACKEND_DEFAULT, &xt, &rt, &a2, &b2) == QK_OK, "%s", qk_last_error());
        CHECK(!memcmp(y1, y2, sizeof y1) && !memcmp(s1, s2, sizeof s1), "stacked and fused checkpoints differ");
        qk_qwen35_text_mlp_destroy(tf);
        qk_ms_close(fm);
    }
    qk_qwen35_text_mlp_destroy(t0);
    qk_qwen35_text_mlp_destroy(t);
    qk_qwen35_vision_mlp_destroy(v);
    qk_ms_close(m);
}

static void floor_sized_scale_is_refused(void)
{
    qk_ms_model *m = open_edited("floor", "model.visual.blocks.1.mlp.linear_fc2.weight_scale", FLOOR_SCALE);
    if (!m) return;
    qk_qwen35_vision_mlp *v = NULL;
    CHECK(qk_qwen35_vision_mlp_create(&small_cfg, 1, NULL, &v) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_vision_mlp_load(v, qk_ms_tensors(m)) == QK_ERR_FORMAT, "floor-sized scale loaded");
    const char *e = qk_last_error();
    CHECK(strstr(e, "model.visual.blocks.1.mlp.linear_fc2.weight_scale") && strstr(e, "134") &&
          strstr(e, "135") && strstr(e, "re-exported"), "%s", e);
    CHECK(all_ff(qk_qwen35_vision_mlp_fc1(v)) && all_ff(qk_qwen35_vision_mlp_fc2(v)), "half-loaded: fc1 was copied");
    qk_qwen35_vision_mlp_destroy(v);
    qk_ms_close(m);
}

static void ff_scale_is_refused_at_processing(void)
{
    qk_ms_model *m = open_edited("ff", "model.layers.2.mlp.down_proj.weight_scale", FF_SCALE);
    if (!m) return;
    qk_qwen35_text_mlp *t = NULL;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(t, qk_ms_tensors(m)) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_process_weights_after_loading(t) == QK_ERR_FORMAT, "0xFF processed");
    const char *e = qk_last_error();
    CHECK(strstr(e, "model.layers.2.mlp.down_proj.weight_scale") && strstr(e, "row 1, block 1"), "%s", e);
    CHECK(qk_mxfp8_linear_layer_weight(qk_qwen35_text_mlp_gate_up(t)) == NULL &&
          qk_mxfp8_linear_layer_weight(qk_qwen35_text_mlp_down(t)) == NULL, "half-processed");
    qk_qwen35_text_mlp_destroy(t);
    qk_ms_close(m);
}

static void missing_tensor_is_named(void)
{
    qk_ms_model *m = open_edited("missing", "model.layers.2.mlp.up_proj.weight_scale", DROP);
    if (!m) return;
    qk_qwen35_text_mlp *t = NULL;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(t, qk_ms_tensors(m)) == QK_ERR_FORMAT, "loaded without up_proj.weight_scale");
    const char *e = qk_last_error();
    CHECK(strstr(e, "model.layers.2.mlp.up_proj.weight_scale") && strstr(e, "no such tensor"), "%s", e);
    CHECK(norm_fresh(qk_qwen35_text_mlp_norm(t)) && all_ff(qk_qwen35_text_mlp_gate_up(t)) &&
          all_ff(qk_qwen35_text_mlp_down(t)), "half-loaded");
    qk_qwen35_text_mlp_destroy(t);
    qk_ms_close(m);
}

static void wrong_dtype_is_named(void)
{
    qk_ms_model *m = open_edited("dtype", "model.layers.2.mlp.down_proj.weight", WRONG_DTYPE);
    if (!m) return;
    qk_qwen35_text_mlp *t = NULL;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(t, qk_ms_tensors(m)) == QK_ERR_FORMAT, "U8 weight loaded");
    const char *e = qk_last_error();
    CHECK(strstr(e, "model.layers.2.mlp.down_proj.weight") && strstr(e, "U8") && strstr(e, "F8_E4M3"), "%s", e);
    CHECK(norm_fresh(qk_qwen35_text_mlp_norm(t)) && all_ff(qk_qwen35_text_mlp_gate_up(t)), "half-loaded");
    qk_qwen35_text_mlp_destroy(t);
    qk_ms_close(m);
    /* the norm weight in another dtype than the layer's placeholder */
    m = open_edited("dtype_norm", "model.layers.2.post_attention_layernorm.weight", WRONG_DTYPE);
    if (!m) return;
    CHECK(qk_qwen35_text_mlp_create(&small_cfg, 2, NULL, &t) == QK_OK, "%s", qk_last_error());
    CHECK(qk_qwen35_text_mlp_load(t, qk_ms_tensors(m)) == QK_ERR_FORMAT, "F16 norm loaded into BF16");
    e = qk_last_error();
    CHECK(strstr(e, "post_attention_layernorm.weight") && strstr(e, "F16") && strstr(e, "BF16"), "%s", e);
    qk_qwen35_text_mlp_destroy(t);
    qk_ms_close(m);
}

static void teardown(void)
{
    qk_ms_close(ms08_model);
    qk_demo_model_free(&dm08);
    if (root[0]) remove_tree(root);
    if (small_root[0]) remove_tree(small_root);
}

int main(void)
{
    qk_test_require_cpu("test_serve_blocks");
    RUN(setup_08b);
    RUN(text_mlp_half_from_modelslim);
    RUN(vision_mlp_k4304_from_modelslim);
    RUN(setup_small);
    RUN(small_folder_loads);
    RUN(floor_sized_scale_is_refused);
    RUN(ff_scale_is_refused_at_processing);
    RUN(missing_tensor_is_named);
    RUN(wrong_dtype_is_named);
    teardown();
    return qk_test_finish();
}

#else
int main(void)
{
    qk_test_skip("serve blocks", "QK_TOOL_PATH (the qk tool, for qk quantize) not defined by the build");
    return qk_test_finish();
}
#endif
