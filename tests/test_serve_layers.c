/* serving.md, "Layers": fresh weights (Gemma 0, plain and gated 1); load by name with dtype
 * then shape checked before any copy; forward of each layer equals the direct API call bit
 * for bit (and its reference backend the reference provider's); the residual form equals
 * the unfused path; the shifted weight 1 + w is kept beside the raw one and never replaces
 * it; MXFP8Linear follows the ModelSlim W8A8_MXFP8 life cycle (0xFF placeholders, the
 * floor-sized-scale message, 0xFF left after loading, tensor parallelism) and runs the
 * backends it was prepared for, strictly. */
#include "harness.h"
#include "serve/serve_internal.h"

#include <math.h>
#include <stdlib.h>

enum { ROWS = 5, H = 77 };

static uint16_t xb[ROWS * H], rb[ROWS * H], gb[ROWS * H], wraw[H];

static void fill(void)
{
    uint64_t s = 99;
    for (int i = 0; i < ROWS * H; i++) {
        xb[i] = qk_f32_to_bf16((float)qk_rand_normal(&s));
        rb[i] = qk_f32_to_bf16((float)(3.0 * qk_rand_normal(&s)));
        gb[i] = qk_f32_to_bf16((float)qk_rand_normal(&s));
    }
    /* small zero-centred offsets, some below BF16's resolution around 1 */
    for (int i = 0; i < H; i++) wraw[i] = qk_f32_to_bf16((float)(0.004 * qk_rand_normal(&s)));
}

static qk_tensor mat(uint16_t *p) { int64_t sh[2] = {ROWS, H}; return qk_tensor_make(p, QK_DTYPE_BF16, 2, sh); }
static qk_tensor vec(void *p, qk_dtype dt) { int64_t h = H; return qk_tensor_make(p, dt, 1, &h); }

static qk_norm_layer *make(qk_norm_layer_kind kind, unsigned flags, qk_backend b)
{
    qk_layer_options o = qk_layer_options_default();
    o.flags = flags;
    o.backend = b;
    qk_norm_layer *l = NULL;
    CHECK(qk_norm_layer_create(kind, "model.layers.3.post_attention_layernorm", H, 1e-6f, &o, &l) == QK_OK,
          "%s", qk_last_error());
    return l;
}

static void load_raw(qk_norm_layer *l)
{
    qk_tensor w = vec(wraw, QK_DTYPE_BF16);
    CHECK(qk_norm_layer_load(l, "model.layers.3.post_attention_layernorm.weight", &w) == QK_OK, "%s",
          qk_last_error());
}

static void fresh_weights_gemma_0_plain_1(void)
{
    const qk_dtype dts[] = {QK_DTYPE_BF16, QK_DTYPE_F16, QK_DTYPE_F32};
    for (int k = 0; k < QK_LAYER_NORM_KINDS; k++)
        for (int d = 0; d < 3; d++) {
            qk_layer_options o = qk_layer_options_default();
            o.weight_dtype = dts[d];
            qk_norm_layer *l = NULL;
            CHECK(qk_norm_layer_create((qk_norm_layer_kind)k, "n", H, 1e-6f, &o, &l) == QK_OK, "%s", qk_last_error());
            qk_tensor w;
            CHECK(qk_norm_layer_weight(l, &w) == QK_OK && w.dtype == dts[d] && w.shape[0] == H, "view");
            const float want = k <= QK_LAYER_GEMMA3_RMS_NORM ? 0.0f : 1.0f;
            bool ok = true;
            for (int i = 0; i < H; i++) ok &= qk_load_f32(w.data, w.dtype, i) == want;
            CHECK(ok, "%s fresh weight is not %g", qk_norm_layer_kind_name((qk_norm_layer_kind)k), (double)want);
            qk_norm_layer_destroy(l);
        }
    CHECK(!strcmp(qk_norm_layer_kind_name(QK_LAYER_GEMMA_RMS_NORM), "GemmaRMSNorm") &&
          !strcmp(qk_norm_layer_kind_name(QK_LAYER_RMS_NORM_GATED), "RMSNormGated"), "names");
    /* a fresh Gemma norm multiplies by 1: it equals a fresh RMSNorm */
    qk_norm_layer *g = make(QK_LAYER_GEMMA_RMS_NORM, 0, QK_BACKEND_DEFAULT), *p = make(QK_LAYER_RMS_NORM, 0, QK_BACKEND_DEFAULT);
    uint16_t o1[ROWS * H], o2[ROWS * H];
    qk_tensor x = mat(xb), t1 = mat(o1), t2 = mat(o2);
    CHECK(qk_norm_layer_forward(g, QK_BACKEND_DEFAULT, &x, &t1) == QK_OK, "%s", qk_last_error());
    CHECK(qk_norm_layer_forward(p, QK_BACKEND_DEFAULT, &x, &t2) == QK_OK, "%s", qk_last_error());
    CHECK(!memcmp(o1, o2, sizeof o1), "fresh Gemma != fresh plain");
    qk_norm_layer_destroy(g);
    qk_norm_layer_destroy(p);
}

static void create_and_load_errors(void)
{
    qk_norm_layer *l = NULL;
    CHECK(qk_norm_layer_create(QK_LAYER_RMS_NORM, "n", 0, 1e-6f, NULL, &l) == QK_ERR_SHAPE, "H = 0");
    CHECK(qk_norm_layer_create(QK_LAYER_RMS_NORM, "n", H, NAN, NULL, &l) == QK_ERR_INVALID_ARGUMENT, "eps NaN");
    CHECK(qk_norm_layer_create(QK_LAYER_RMS_NORM, "n", H, -1.0f, NULL, &l) == QK_ERR_INVALID_ARGUMENT, "eps < 0");
    CHECK(qk_norm_layer_create((qk_norm_layer_kind)9, "n", H, 1e-6f, NULL, &l) == QK_ERR_INVALID_ARGUMENT, "kind");
    qk_layer_options o = qk_layer_options_default();
    o.weight_dtype = QK_DTYPE_U8;
    CHECK(qk_norm_layer_create(QK_LAYER_RMS_NORM, "n", H, 1e-6f, &o, &l) == QK_ERR_DTYPE, "dtype");
    CHECK(l == NULL, "result written on failure");

    l = make(QK_LAYER_GEMMA_RMS_NORM, 0, QK_BACKEND_DEFAULT);
    float wf[H];
    for (int i = 0; i < H; i++) wf[i] = 0.5f;
    qk_tensor w32 = vec(wf, QK_DTYPE_F32), wb16 = vec(wraw, QK_DTYPE_BF16);
    CHECK(qk_norm_layer_load(l, "model.layers.3.input_layernorm.weight", &wb16) == QK_ERR_INVALID_ARGUMENT,
          "another tensor's name");
    CHECK(strstr(qk_last_error(), "model.layers.3.post_attention_layernorm.weight") != NULL, "%s", qk_last_error());
    CHECK(qk_norm_layer_load(l, "model.layers.3.post_attention_layernorm.weight", &w32) == QK_ERR_FORMAT, "dtype");
    CHECK(strstr(qk_last_error(), "post_attention_layernorm.weight") && strstr(qk_last_error(), "F32") &&
          strstr(qk_last_error(), "BF16"), "%s", qk_last_error());
    int64_t h2 = H - 1;
    qk_tensor short_w = qk_tensor_make(wraw, QK_DTYPE_BF16, 1, &h2);
    CHECK(qk_norm_layer_load(l, "model.layers.3.post_attention_layernorm.weight", &short_w) == QK_ERR_FORMAT, "shape");
    CHECK(strstr(qk_last_error(), "[76]") && strstr(qk_last_error(), "[77]"), "%s", qk_last_error());
    qk_tensor v;
    qk_norm_layer_weight(l, &v);
    bool zero = true;
    for (int i = 0; i < H; i++) zero &= ((uint16_t *)v.data)[i] == 0;
    CHECK(zero, "a rejected load changed the weight");
    /* a strided source loads */
    uint16_t strided[2 * H];
    for (int i = 0; i < H; i++) { strided[2 * i] = wraw[i]; strided[2 * i + 1] = 0xFFFF; }
    qk_tensor st = vec(strided, QK_DTYPE_BF16);
    st.stride[0] = 2;
    CHECK(qk_norm_layer_load(l, "model.layers.3.post_attention_layernorm.weight", &st) == QK_OK, "%s", qk_last_error());
    CHECK(!memcmp(v.data, wraw, sizeof wraw), "strided load");
    qk_norm_layer_destroy(l);
}

/* Each layer kind: forward == the stable API's call, bit for bit, out of place and in place,
   and its reference backend == the reference provider. */
static void forward_equals_the_api_call(void)
{
    uint16_t o1[ROWS * H], o2[ROWS * H], s1[ROWS * H], s2[ROWS * H], xi[ROWS * H], ri[ROWS * H];
    qk_tensor x = mat(xb), res = mat(rb), gate = mat(gb), w = vec(wraw, QK_DTYPE_BF16);
    qk_tensor t1 = mat(o1), t2 = mat(o2), u1 = mat(s1), u2 = mat(s2), ti = mat(xi), tr = mat(ri);
    for (int k = 0; k < QK_LAYER_NORM_KINDS; k++) {
        qk_norm_layer *l = make((qk_norm_layer_kind)k, 0, QK_BACKEND_DEFAULT);
        load_raw(l);
        CHECK(qk_norm_layer_process_weights_after_loading(l) == QK_OK, "%s", qk_last_error());
        const char *kn = qk_norm_layer_kind_name((qk_norm_layer_kind)k);
        const bool gemma = k <= QK_LAYER_GEMMA3_RMS_NORM;
        if (k == QK_LAYER_RMS_NORM_GATED) {
            CHECK(qk_norm_layer_forward_gated(l, QK_BACKEND_DEFAULT, &x, &gate, &t1) == QK_OK, "%s", qk_last_error());
            CHECK(qk_rms_norm_gated(&x, &w, &gate, 1e-6f, &t2) == QK_OK, "api");
            CHECK(!memcmp(o1, o2, sizeof o1), "%s forward != qk_rms_norm_gated", kn);
            CHECK(qk_norm_layer_forward_gated(l, QK_BACKEND_REFERENCE, &x, &gate, &t1) == QK_OK, "ref");
            qk_norm_run(QK_NORM_GATED, &qk_provider_ref.ops.norm[QK_NORM_GATED], &x, &w, &gate, 1e-6f, &t2, NULL);
            CHECK(!memcmp(o1, o2, sizeof o1), "%s reference forward", kn);
            CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_ERR_UNSUPPORTED, "gated without gate");
            qk_norm_layer_destroy(l);
            continue;
        }
        CHECK(qk_norm_layer_forward_gated(l, QK_BACKEND_DEFAULT, &x, &gate, &t1) == QK_ERR_UNSUPPORTED, "%s gated", kn);
        CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_OK, "%s", qk_last_error());
        CHECK((gemma ? qk_gemma_rms_norm : qk_rms_norm)(&x, &w, 1e-6f, &t2, NULL) == QK_OK, "api");
        CHECK(!memcmp(o1, o2, sizeof o1), "%s forward != the API", kn);
        qk_norm_kind nk = gemma ? QK_NORM_GEMMA : QK_NORM_RMS;
        CHECK(qk_norm_layer_forward(l, QK_BACKEND_REFERENCE, &x, &t1) == QK_OK, "ref");
        qk_norm_run(nk, &qk_provider_ref.ops.norm[nk], &x, &w, NULL, 1e-6f, &t2, NULL);
        CHECK(!memcmp(o1, o2, sizeof o1), "%s reference forward != the reference provider", kn);
        /* in place */
        memcpy(xi, xb, sizeof xb);
        CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &ti, &ti) == QK_OK, "in place");
        (gemma ? qk_gemma_rms_norm : qk_rms_norm)(&x, &w, 1e-6f, &t2, NULL);
        CHECK(!memcmp(xi, o2, sizeof xi), "%s in place differs", kn);
        if (k == QK_LAYER_GEMMA3_RMS_NORM) {
            CHECK(qk_norm_layer_forward_residual(l, QK_BACKEND_DEFAULT, &x, &res, &t1, &u1) == QK_ERR_UNSUPPORTED,
                  "Gemma3RMSNorm has no residual form");
            qk_norm_layer_destroy(l);
            continue;
        }
        CHECK(qk_norm_layer_forward_residual(l, QK_BACKEND_DEFAULT, &x, &res, &t1, &u1) == QK_OK, "%s", qk_last_error());
        CHECK((gemma ? qk_add_gemma_rms_norm : qk_add_rms_norm)(&x, &w, &res, 1e-6f, &t2, &u2) == QK_OK, "api");
        CHECK(!memcmp(o1, o2, sizeof o1) && !memcmp(s1, s2, sizeof s1), "%s residual form != the API", kn);
        /* the residual form equals the unfused path: s = rnd(x + r), then forward(s) */
        bool sum_ok = true;
        for (int i = 0; i < ROWS * H; i++)
            sum_ok &= s1[i] == qk_f32_to_bf16(qk_bf16_to_f32(xb[i]) + qk_bf16_to_f32(rb[i]));
        CHECK(sum_ok, "%s residual_out != rnd(x + residual)", kn);
        CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &u1, &t2) == QK_OK, "unfused");
        CHECK(!memcmp(o1, o2, sizeof o1), "%s fused != unfused", kn);
        /* in place: out = x, residual_out = residual */
        memcpy(xi, xb, sizeof xb);
        memcpy(ri, rb, sizeof rb);
        CHECK(qk_norm_layer_forward_residual(l, QK_BACKEND_DEFAULT, &ti, &tr, &ti, &tr) == QK_OK, "%s", qk_last_error());
        CHECK(!memcmp(xi, o1, sizeof xi) && !memcmp(ri, s1, sizeof ri), "%s in-place residual form", kn);
        qk_norm_layer_destroy(l);
    }
}

static void shifted_weight_never_replaces_the_raw_one(void)
{
    /* the target prefers a shifted weight exactly when its table says so (measured per
       target); the reference backend never does, so a reference-bound norm keeps none */
    CHECK(qk_serve_prefers_shifted(QK_BACKEND_TARGET, QK_OP_GEMMA_RMS_NORM) ==
          qk_target_table_built.gemma_shifted_weight, "target preference != its table");
    CHECK(!qk_serve_prefers_shifted(QK_BACKEND_REFERENCE, QK_OP_GEMMA_RMS_NORM), "reference prefers shifted");
    qk_norm_layer *plain = make(QK_LAYER_GEMMA_RMS_NORM, 0, QK_BACKEND_REFERENCE);
    load_raw(plain);
    CHECK(qk_norm_layer_process_weights_after_loading(plain) == QK_OK, "process");
    qk_tensor v;
    CHECK(qk_norm_layer_shifted_weight(plain, &v) == QK_ERR_INVALID_ARGUMENT, "unexpected shifted weight");
    qk_norm_layer *tgt = make(QK_LAYER_GEMMA_RMS_NORM, 0, QK_BACKEND_TARGET);
    load_raw(tgt);
    CHECK(qk_norm_layer_process_weights_after_loading(tgt) == QK_OK, "process");
    CHECK((qk_norm_layer_shifted_weight(tgt, &v) == QK_OK) == qk_target_table_built.gemma_shifted_weight,
          "a target-bound Gemma norm keeps a shifted weight iff the target prefers one");
    qk_norm_layer_destroy(tgt);

    /* the flag takes the path a provider preferring it would */
    qk_norm_layer *l = make(QK_LAYER_GEMMA_RMS_NORM, QK_LAYER_SHIFTED_WEIGHT, QK_BACKEND_DEFAULT);
    load_raw(l);
    CHECK(qk_norm_layer_shifted_weight(l, &v) == QK_ERR_INVALID_ARGUMENT, "shifted before processing");
    CHECK(qk_norm_layer_process_weights_after_loading(l) == QK_OK, "process");
    CHECK(qk_norm_layer_shifted_weight(l, &v) == QK_OK && v.dtype == QK_DTYPE_F32 && v.shape[0] == H, "view");
    bool shifted_ok = true, tiny_kept = false;
    for (int i = 0; i < H; i++) {
        const float want = 1.0f + qk_bf16_to_f32(wraw[i]);   /* formed in f32 */
        shifted_ok &= ((const float *)v.data)[i] == want;
        /* in BF16 these offsets would vanish: 1 + w rounds back to 1 */
        tiny_kept |= want != 1.0f && qk_bf16_to_f32(qk_f32_to_bf16(want)) == 1.0f;
    }
    CHECK(shifted_ok, "shifted weight is not 1 + w in f32");
    CHECK(tiny_kept, "the test weights should include offsets BF16 cannot hold around 1");
    qk_tensor raw;
    CHECK(qk_norm_layer_weight(l, &raw) == QK_OK && raw.dtype == QK_DTYPE_BF16 &&
          !memcmp(raw.data, wraw, sizeof wraw), "the raw weight was replaced");
    /* forward runs the plain op with the f32 shifted weight: the Gemma formula, same bits */
    uint16_t o1[ROWS * H], o2[ROWS * H], o3[ROWS * H], s1[ROWS * H], s2[ROWS * H];
    qk_tensor x = mat(xb), res = mat(rb), t1 = mat(o1), t2 = mat(o2), t3 = mat(o3), u1 = mat(s1), u2 = mat(s2);
    qk_tensor w = vec(wraw, QK_DTYPE_BF16);
    CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_OK, "%s", qk_last_error());
    CHECK(qk_rms_norm(&x, &v, 1e-6f, &t2, NULL) == QK_OK, "api");
    CHECK(!memcmp(o1, o2, sizeof o1), "shifted forward != qk_rms_norm(x, 1 + w)");
    CHECK(qk_gemma_rms_norm(&x, &w, 1e-6f, &t3, NULL) == QK_OK, "gemma");
    CHECK(!memcmp(o1, o3, sizeof o1), "shifted path != native (1 + w) kernel");
    CHECK(qk_norm_layer_forward_residual(l, QK_BACKEND_DEFAULT, &x, &res, &t1, &u1) == QK_OK, "res");
    CHECK(qk_add_gemma_rms_norm(&x, &w, &res, 1e-6f, &t2, &u2) == QK_OK, "api");
    CHECK(!memcmp(o1, o2, sizeof o1) && !memcmp(s1, s2, sizeof s1), "shifted residual form");
    /* reloading sees (and replaces) the raw value; the stale shifted weight is dropped */
    uint16_t w2[H];
    for (int i = 0; i < H; i++) w2[i] = qk_f32_to_bf16(0.25f);
    qk_tensor wt2 = vec(w2, QK_DTYPE_BF16);
    CHECK(qk_norm_layer_load(l, "model.layers.3.post_attention_layernorm.weight", &wt2) == QK_OK, "reload");
    CHECK(qk_norm_layer_weight(l, &raw) == QK_OK && !memcmp(raw.data, w2, sizeof w2), "reloaded raw");
    CHECK(qk_norm_layer_shifted_weight(l, &v) == QK_ERR_INVALID_ARGUMENT, "stale shifted weight kept");
    CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_OK, "forward after reload");
    CHECK(qk_gemma_rms_norm(&x, &wt2, 1e-6f, &t2, NULL) == QK_OK && !memcmp(o1, o2, sizeof o1), "after reload");
    CHECK(qk_norm_layer_process_weights_after_loading(l) == QK_OK, "reprocess");
    CHECK(qk_norm_layer_shifted_weight(l, &v) == QK_OK && ((const float *)v.data)[0] == 1.25f, "reprocessed");
    qk_norm_layer_destroy(l);
    qk_norm_layer_destroy(plain);
}

static void explicit_layer_backend_is_strict(void)
{
    qk_norm_layer *l = make(QK_LAYER_GEMMA_RMS_NORM, 0, QK_BACKEND_LIBRARY);
    uint16_t o[ROWS * H];
    memset(o, 0x11, sizeof o);
    qk_tensor x = mat(xb), t = mat(o);
    CHECK(qk_norm_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t) == QK_ERR_UNSUPPORTED, "layer's explicit library");
    CHECK(strstr(qk_last_error(), "gemma_rms_norm") && strstr(qk_last_error(), "'library'"), "%s", qk_last_error());
    CHECK(o[0] == 0x1111, "written");
    /* a per-call choice overrides the layer's */
    CHECK(qk_norm_layer_forward(l, QK_BACKEND_TARGET, &x, &t) == QK_OK, "%s", qk_last_error());
    qk_norm_layer_destroy(l);
}

/* ---- MXFP8Linear ---- */
enum { N = 48, K = 100, KB = 4, M = 3 };
static uint8_t qw[N * K], sw[N * KB];
static float bias[N], xf[M * K];

static void fill_linear(void)
{
    uint64_t s = 5;
    for (int i = 0; i < N * K; i++) {
        uint8_t c = (uint8_t)(qk_rand_u64(&s) & 0xFF);
        qw[i] = (c & 0x7F) == 0x7F ? 0x3F : c;
    }
    for (int i = 0; i < N * KB; i++) sw[i] = (uint8_t)(118 + qk_rand_u64(&s) % 12);
    for (int i = 0; i < N; i++) bias[i] = (float)qk_rand_normal(&s);
    for (int i = 0; i < M * K; i++) xf[i] = (float)qk_rand_normal(&s);
}

static const char *const PFX = "model.visual.blocks.0.mlp.linear_fc1";

static qk_mxfp8_linear_layer *make_linear(unsigned flags, int32_t tp, int32_t rank, qk_tp_kind kind)
{
    qk_layer_options o = qk_layer_options_default();
    o.flags = flags;
    qk_mxfp8_linear_layer *l = NULL;
    CHECK(qk_mxfp8_linear_layer_create(PFX, K, N, true, tp, rank, kind, &o, &l) == QK_OK, "%s", qk_last_error());
    return l;
}

static void load_linear(qk_mxfp8_linear_layer *l)
{
    int64_t qs[2] = {N, K}, ss[2] = {N, KB}, bs = N;
    qk_tensor q = qk_tensor_make(qw, QK_DTYPE_F8_E4M3, 2, qs), s = qk_tensor_make(sw, QK_DTYPE_U8, 2, ss);
    qk_tensor b = qk_tensor_make(bias, QK_DTYPE_F32, 1, &bs);
    char n[128];
    snprintf(n, sizeof n, "%s.weight", PFX);
    CHECK(qk_mxfp8_linear_layer_load(l, n, &q) == QK_OK, "%s", qk_last_error());
    snprintf(n, sizeof n, "%s.weight_scale", PFX);
    CHECK(qk_mxfp8_linear_layer_load(l, n, &s) == QK_OK, "%s", qk_last_error());
    snprintf(n, sizeof n, "%s.bias", PFX);
    CHECK(qk_mxfp8_linear_layer_load(l, n, &b) == QK_OK, "%s", qk_last_error());
}

static void mxfp8_linear_life_cycle_and_forward(void)
{
    qk_mxfp8_linear_layer *l = make_linear(QK_LAYER_ALL_BACKENDS, 1, 0, QK_TP_NONE);
    qk_tensor ph;
    CHECK(qk_mx_linear_placeholder(qk_mxfp8_linear_layer_scheme(l), "weight_scale", &ph) == QK_OK &&
          ph.shape[1] == KB, "placeholder shape");
    bool ff = true;
    for (int i = 0; i < N * KB; i++) ff &= ((uint8_t *)ph.data)[i] == 0xFF;
    CHECK(ff, "placeholder scales are not 0xFF");
    int64_t xs[2] = {M, K};
    qk_tensor x = qk_tensor_make(xf, QK_DTYPE_F32, 2, xs);
    float y1[M * N], y2[M * N];
    int64_t ys[2] = {M, N};
    qk_tensor t1 = qk_tensor_make(y1, QK_DTYPE_F32, 2, ys), t2 = qk_tensor_make(y2, QK_DTYPE_F32, 2, ys);
    CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_ERR_INVALID_ARGUMENT, "before processing");
    /* never loaded: named; the scale's 0xFF placeholders are named with row and block;
       nothing changes */
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_ERR_FORMAT, "unloaded");
    CHECK(strstr(qk_last_error(), "linear_fc1.weight\" was never loaded"), "%s", qk_last_error());
    {
        int64_t qs0[2] = {N, K};
        qk_tensor q0 = qk_tensor_make(qw, QK_DTYPE_F8_E4M3, 2, qs0);
        char n0[128];
        snprintf(n0, sizeof n0, "%s.weight", PFX);
        CHECK(qk_mxfp8_linear_layer_load(l, n0, &q0) == QK_OK, "%s", qk_last_error());
    }
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_ERR_FORMAT, "scale unloaded");
    CHECK(strstr(qk_last_error(), "linear_fc1.weight_scale") && strstr(qk_last_error(), "row 0, block 0"),
          "%s", qk_last_error());
    CHECK(qk_mxfp8_linear_layer_weight(l) == NULL, "processed after a failure");
    load_linear(l);
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_OK, "%s", qk_last_error());
    const qk_serve_weight *w = qk_mxfp8_linear_layer_weight(l);
    CHECK(w && (qk_serve_weight_backends(w) & QK_BACKEND_BIT(QK_BACKEND_REFERENCE)) &&
          (qk_serve_weight_backends(w) & QK_BACKEND_BIT(QK_BACKEND_TARGET)), "prepared for both");
    CHECK(qk_mx_linear_placeholder(qk_mxfp8_linear_layer_scheme(l), "weight", &ph) == QK_ERR_INVALID_ARGUMENT,
          "raw placeholders not released");
    /* forward == qk_mxfp8_linear on the same weight, bit for bit; the reference likewise */
    int64_t qs[2] = {N, K}, ss[2] = {N, KB}, bs = N;
    qk_tensor qt = qk_tensor_make(qw, QK_DTYPE_F8_E4M3, 2, qs), st = qk_tensor_make(sw, QK_DTYPE_E8M0, 2, ss);
    qk_tensor bt = qk_tensor_make(bias, QK_DTYPE_F32, 1, &bs);
    qk_mx_weight *mw = NULL, *rw = NULL;
    CHECK(qk_mx_weight_create(&qt, &st, &mw) == QK_OK, "create");
    CHECK(qk_mx_weight_create_with(qk_provider_ref.ops.mxfp8_linear, &qt, &st, &rw) == QK_OK, "create ref");
    CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_DEFAULT, &x, &t1) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear(&x, mw, &bt, &t2) == QK_OK, "api");
    CHECK(!memcmp(y1, y2, sizeof y1), "MXFP8Linear forward != qk_mxfp8_linear");
    CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_REFERENCE, &x, &t1) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear(&x, rw, &bt, &t2) == QK_OK, "api ref");
    CHECK(!memcmp(y1, y2, sizeof y1), "reference forward != the reference provider");
    /* loading after processing is refused */
    char n[128];
    snprintf(n, sizeof n, "%s.weight", PFX);
    CHECK(qk_mxfp8_linear_layer_load(l, n, &qt) == QK_ERR_INVALID_ARGUMENT, "load after processing");
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_ERR_INVALID_ARGUMENT, "twice");
    qk_mxfp8_linear_layer_destroy(l);

    /* prepared for the selected backend only: another backend is a clear error */
    l = make_linear(0, 1, 0, QK_TP_NONE);
    load_linear(l);
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_OK, "%s", qk_last_error());
    if (qk_serve_linear_impl(QK_BACKEND_REFERENCE) != qk_serve_linear_impl(QK_BACKEND_TARGET)) {
        CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_REFERENCE, &x, &t1) == QK_ERR_INVALID_ARGUMENT, "unprepared");
        CHECK(strstr(qk_last_error(), PFX) && strstr(qk_last_error(), "QK_LAYER_ALL_BACKENDS"), "%s", qk_last_error());
    } else {
        CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_REFERENCE, &x, &t1) == QK_OK, "shared weight");
    }
    qk_mxfp8_linear_layer_destroy(l);

    /* column-parallel rank 1 of 2 computes rows [N/2, N) of the full output */
    l = make_linear(0, 2, 1, QK_TP_COLUMN);
    load_linear(l);
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_OK, "%s", qk_last_error());
    float yh[M * N / 2];
    int64_t hs[2] = {M, N / 2};
    qk_tensor th = qk_tensor_make(yh, QK_DTYPE_F32, 2, hs);
    CHECK(qk_mxfp8_linear_layer_forward(l, QK_BACKEND_DEFAULT, &x, &th) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear(&x, mw, &bt, &t2) == QK_OK, "api");
    bool slice = true;
    for (int m = 0; m < M; m++) slice &= !memcmp(&yh[m * N / 2], &y2[m * N + N / 2], sizeof(float) * N / 2);
    CHECK(slice, "column-parallel rank 1 is not the second half");
    qk_mxfp8_linear_layer_destroy(l);
    qk_mx_weight_destroy(mw);
    qk_mx_weight_destroy(rw);

    /* create errors */
    CHECK(qk_mxfp8_linear_layer_create(PFX, K, N, true, 2, 2, QK_TP_COLUMN, NULL, &l) == QK_ERR_INVALID_ARGUMENT, "rank");
    CHECK(qk_mxfp8_linear_layer_create(PFX, 4304, 1152, true, 2, 0, QK_TP_ROW, NULL, &l) == QK_ERR_SHAPE, "even split");
    CHECK(strstr(qk_last_error(), "2176 + 2128") != NULL, "%s", qk_last_error());
}

static void mxfp8_linear_bad_checkpoint_tensors(void)
{
    /* the K = 4304 layer: a floor-sized scale [N, 134] gets its own message */
    qk_mxfp8_linear_layer *l = NULL;
    enum { N2 = 4, K2 = 4304 };
    CHECK(qk_mxfp8_linear_layer_create("model.visual.blocks.0.mlp.linear_fc2", K2, N2, false, 1, 0,
                                       QK_TP_NONE, NULL, &l) == QK_OK, "%s", qk_last_error());
    static uint8_t s2[N2 * 135], q2[N2 * K2];
    memset(s2, 127, sizeof s2);
    int64_t fs[2] = {N2, 134}, gs[2] = {N2, 135}, qs[2] = {N2, K2};
    qk_tensor floor_s = qk_tensor_make(s2, QK_DTYPE_U8, 2, fs), good_s = qk_tensor_make(s2, QK_DTYPE_U8, 2, gs);
    qk_tensor q = qk_tensor_make(q2, QK_DTYPE_F8_E4M3, 2, qs);
    CHECK(qk_mxfp8_linear_layer_load(l, "model.visual.blocks.0.mlp.linear_fc2.weight_scale", &floor_s) == QK_ERR_FORMAT, "floor");
    CHECK(strstr(qk_last_error(), "linear_fc2.weight_scale") && strstr(qk_last_error(), "134") &&
          strstr(qk_last_error(), "135") && strstr(qk_last_error(), "re-exported"), "%s", qk_last_error());
    /* a wrong dtype is named before any copy */
    qk_tensor bad_dt = qk_tensor_make(q2, QK_DTYPE_BF16, 2, qs);
    CHECK(qk_mxfp8_linear_layer_load(l, "model.visual.blocks.0.mlp.linear_fc2.weight", &bad_dt) == QK_ERR_FORMAT, "dtype");
    CHECK(strstr(qk_last_error(), "linear_fc2.weight") && strstr(qk_last_error(), "F8_E4M3"), "%s", qk_last_error());
    /* a 0xFF left in a loaded scale: process names (row, block) and changes nothing */
    s2[2 * 135 + 134] = 0xFF;
    CHECK(qk_mxfp8_linear_layer_load(l, "model.visual.blocks.0.mlp.linear_fc2.weight", &q) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear_layer_load(l, "model.visual.blocks.0.mlp.linear_fc2.weight_scale", &good_s) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_ERR_FORMAT, "0xFF");
    CHECK(strstr(qk_last_error(), "row 2, block 134") != NULL, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear_layer_weight(l) == NULL, "processed");
    /* fixed and reloaded, it processes */
    s2[2 * 135 + 134] = 127;
    CHECK(qk_mxfp8_linear_layer_load(l, "model.visual.blocks.0.mlp.linear_fc2.weight_scale", &good_s) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mxfp8_linear_layer_process_weights_after_loading(l) == QK_OK, "%s", qk_last_error());
    qk_mxfp8_linear_layer_destroy(l);
}

int main(void)
{
    qk_test_require_cpu("test_serve_layers");
    fill();
    fill_linear();
    RUN(fresh_weights_gemma_0_plain_1);
    RUN(create_and_load_errors);
    RUN(forward_equals_the_api_call);
    RUN(shifted_weight_never_replaces_the_raw_one);
    RUN(explicit_layer_backend_is_strict);
    RUN(mxfp8_linear_life_cycle_and_forward);
    RUN(mxfp8_linear_bad_checkpoint_tensors);
    return qk_test_finish();
}
