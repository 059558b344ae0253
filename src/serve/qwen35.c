/* Qwen3.5 blocks (serving.md), shaped by a small config so that one code path runs a
 * 0.8B-sized MLP in a test and a 27B-sized one in a benchmark:
 *   text decoder MLP half: h, residual = post_attention_layernorm(x, residual) (GemmaRMSNorm,
 *     residual form) -> gate_up_proj (MXFP8 [2I, H]) -> silu(gate) * up -> down_proj
 *     (MXFP8 [H, I]);
 *   vision MLP: linear_fc1 (MXFP8 + bias [4304, 1152]) -> gelu (tanh) -> linear_fc2 (MXFP8 +
 *     bias [1152, 4304], K = 4304: 135 blocks, the last one partial).
 * Loading finds and checks every tensor of a block before copying any; processing checks
 * every linear before processing any. Intermediates are in x's dtype. */
#include "serve/serve_internal.h"
#include "api/check.h"
#include "api/ckd.h"

#include <stdio.h>
#include <stdlib.h>

qk_status qk_qwen35_config_get(const char *name, qk_qwen35_config *c)
{
    if (!name || !c) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_qwen35_config_get: NULL argument");
    qk_qwen35_config v = {0, 0, 1e-6f, 1152, 4304};
    if (!strcmp(name, "0.8B")) {
        v.hidden_size = 1024;
        v.intermediate_size = 3584;
    } else if (!strcmp(name, "27B")) {
        v.hidden_size = 5120;
        v.intermediate_size = 17408;
    } else {
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_qwen35_config_get: unknown size \"%.32s\"; "
                       "known: 0.8B (hidden 1024, intermediate 3584), 27B (5120, 17408)", name);
    }
    *c = v;
    return QK_OK;
}

static qk_status check_config(const char *who, const qk_qwen35_config *c, bool text)
{
    if (!c) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: config is NULL", who);
    const int64_t a = text ? c->hidden_size : c->vision_hidden_size;
    const int64_t b = text ? c->intermediate_size : c->vision_intermediate_size;
    if (a < 1 || b < 1)
        return qk_fail(QK_ERR_SHAPE, "%s: %s sizes %lld / %lld must be >= 1", who,
                       text ? "hidden / intermediate" : "vision hidden / intermediate",
                       (long long)a, (long long)b);
    int64_t two;   /* the text block stacks gate and up: gate_up_proj has 2 x intermediate rows */
    if (text && !qk_ckd_mul_i64(2, b, &two))
        return qk_fail(QK_ERR_SHAPE, "%s: intermediate size %lld: gate_up_proj's 2 x %lld rows do "
                       "not fit int64", who, (long long)b, (long long)b);
    return QK_OK;
}

/* A contiguous scratch tensor with x's leading dims and last dim n, in x's dtype. */
static qk_status scratch_like(const char *who, const qk_tensor *x, int64_t n, qk_tensor *t, void **mem)
{
    int64_t shape[QK_MAX_DIMS];
    for (int32_t d = 0; d < x->ndim; d++) shape[d] = x->shape[d];
    shape[x->ndim - 1] = n;
    const int64_t rows = qk_tensor_rows(x);   /* x passed check_input: it fits int64 */
    size_t bytes;
    if (!qk_ckd_bytes2(rows > 0 ? rows : 1, n, qk_dtype_size(x->dtype), &bytes))
        return qk_fail(QK_ERR_SHAPE, "%s: a [%lld, %lld] %s intermediate of x's rows takes more "
                       "bytes than one allocation can hold", who, (long long)rows, (long long)n,
                       qk_dtype_name(x->dtype));
    *mem = malloc(bytes);
    if (!*mem) return qk_fail(QK_ERR_NOMEM, "out of memory for a [%lld, %lld] intermediate",
                              (long long)rows, (long long)n);
    *t = qk_tensor_make(*mem, x->dtype, x->ndim, shape);
    return QK_OK;
}

static qk_status check_input(const char *who, const char *name, const qk_tensor *x, int64_t H)
{
    if (!x) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, name);
    if (x->ndim >= 1 && x->ndim <= QK_MAX_DIMS && x->shape[x->ndim - 1] == H) {
        /* the row count and scratch sizes are computed from x's dims and strides */
        qk_status st = qk_check_tensor(who, name, x);
        if (st != QK_OK) return st;
    }
    if (x->ndim < 1 || x->ndim > QK_MAX_DIMS || x->shape[x->ndim - 1] != H)
        return qk_fail(QK_ERR_SHAPE, "%s: %s must be [..., %lld]", who, name, (long long)H);
    if (!qk_is_float_dtype(x->dtype))
        return qk_fail(QK_ERR_DTYPE, "%s: %s has dtype %s; expected F32, F16 or BF16", who, name,
                       qk_dtype_name(x->dtype));
    return QK_OK;
}

/* "... no such tensor" for a name the block needs. */
static qk_status find_checked_linear(const qk_st_set *s, const char *name, int64_t N, int64_t K,
                                     qk_st_info *info)
{
    if (qk_st_set_find(s, name, info) != QK_OK)
        return qk_fail(QK_ERR_FORMAT, "load \"%.200s\": the checkpoint has no such tensor", name);
    return qk_mx_linear_check_tensor(name, info->dtype_name, info->ndim, info->shape, N, K);
}

/* ======================================================================================
 * Text decoder MLP half
 * ====================================================================================== */
struct qk_qwen35_text_mlp {
    qk_qwen35_config c;
    char mlp[96];                       /* "model.layers.N.mlp" */
    qk_norm_layer *norm;
    qk_mxfp8_linear_layer *gate_up, *down;
};

qk_status qk_qwen35_text_mlp_create(const qk_qwen35_config *c, int32_t layer,
                                    const qk_layer_options *opt, qk_qwen35_text_mlp **out)
{
    static const char who[] = "qk_qwen35_text_mlp_create";
    qk_status st = check_config(who, c, true);
    if (st != QK_OK) return st;
    if (!out || layer < 0) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: bad layer or NULL", who);
    qk_qwen35_text_mlp *b = calloc(1, sizeof *b);
    if (!b) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    b->c = *c;
    char p[128];
    snprintf(b->mlp, sizeof b->mlp, "model.layers.%d.mlp", (int)layer);
    snprintf(p, sizeof p, "model.layers.%d.post_attention_layernorm", (int)layer);
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    st = qk_norm_layer_create(QK_LAYER_GEMMA_RMS_NORM, p, H, c->rms_norm_eps, opt, &b->norm);
    if (st == QK_OK) {
        snprintf(p, sizeof p, "%s.gate_up_proj", b->mlp);
        st = qk_mxfp8_linear_layer_create(p, H, 2 * I, false, 1, 0, QK_TP_NONE, opt, &b->gate_up);
    }
    if (st == QK_OK) {
        snprintf(p, sizeof p, "%s.down_proj", b->mlp);
        st = qk_mxfp8_linear_layer_create(p, I, H, false, 1, 0, QK_TP_NONE, opt, &b->down);
    }
    if (st != QK_OK) {
        qk_qwen35_text_mlp_destroy(b);
        return st;
    }
    *out = b;
    return QK_OK;
}

void qk_qwen35_text_mlp_destroy(qk_qwen35_text_mlp *b)
{
    if (!b) return;
    qk_norm_layer_destroy(b->norm);
    qk_mxfp8_linear_layer_destroy(b->gate_up);
    qk_mxfp8_linear_layer_destroy(b->down);
    free(b);
}

const qk_norm_layer *qk_qwen35_text_mlp_norm(const qk_qwen35_text_mlp *b) { return b ? b->norm : NULL; }
const qk_mxfp8_linear_layer *qk_qwen35_text_mlp_gate_up(const qk_qwen35_text_mlp *b)
{
    return b ? b->gate_up : NULL;
}
const qk_mxfp8_linear_layer *qk_qwen35_text_mlp_down(const qk_qwen35_text_mlp *b)
{
    return b ? b->down : NULL;
}

/* Stacks gate_proj and up_proj (each [I, cols] bytes) into one [2I, cols] tensor and loads it
   into gate_up_proj as `suffix`. */
static qk_status load_stacked(qk_qwen35_text_mlp *b, const qk_st_info *g, const qk_st_info *u,
                              const char *suffix, qk_dtype dt)
{
    const int64_t rows = g->shape[0], cols = g->shape[1];   /* [I, H] or [I, kb], checked */
    size_t half, both;   /* both tensors are in the file: their bytes fit */
    uint8_t *buf = qk_ckd_bytes2(rows, cols, 1, &half) && qk_ckd_bytes2(2, rows, (size_t)cols, &both)
                       ? malloc(both) : NULL;
    if (!buf) return qk_fail(QK_ERR_NOMEM, "load %s.gate_up_proj: out of memory", b->mlp);
    memcpy(buf, g->data, half);
    memcpy(buf + half, u->data, half);
    int64_t shape[2] = {2 * rows, cols};
    qk_tensor t = qk_tensor_make(buf, dt, 2, shape);
    char name[160];
    snprintf(name, sizeof name, "%s.gate_up_proj%s", b->mlp, suffix);
    qk_status st = qk_mxfp8_linear_layer_load(b->gate_up, name, &t);
    free(buf);
    return st;
}

qk_status qk_qwen35_text_mlp_load(qk_qwen35_text_mlp *b, const qk_st_set *s)
{
    if (!b || !s) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_qwen35_text_mlp_load: NULL argument");
    if (qk_mxfp8_linear_layer_weight(b->gate_up) || qk_mxfp8_linear_layer_weight(b->down))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "load %s: the block was already processed", b->mlp);
    const int64_t H = b->c.hidden_size, I = b->c.intermediate_size;
    char n[4][160];
    qk_st_info inf[4];
    qk_status st = qk_norm_layer_check_from(b->norm, s);
    if (st != QK_OK) return st;
    /* gate_proj + up_proj (a Qwen3.5 checkpoint), or an already stacked gate_up_proj */
    snprintf(n[0], sizeof n[0], "%s.gate_proj.weight", b->mlp);
    char fused[160];
    snprintf(fused, sizeof fused, "%s.gate_up_proj.weight", b->mlp);
    const bool stacked = qk_st_set_find(s, n[0], &inf[0]) == QK_OK || qk_st_set_find(s, fused, &inf[0]) != QK_OK;
    if (stacked) {
        static const char *const sfx[4] = {"gate_proj.weight", "gate_proj.weight_scale",
                                           "up_proj.weight", "up_proj.weight_scale"};
        for (int i = 0; i < 4; i++) {
            snprintf(n[i], sizeof n[i], "%s.%s", b->mlp, sfx[i]);
            if ((st = find_checked_linear(s, n[i], I, H, &inf[i])) != QK_OK) return st;
        }
    } else {
        snprintf(n[0], sizeof n[0], "%s.gate_up_proj.weight", b->mlp);
        snprintf(n[1], sizeof n[1], "%s.gate_up_proj.weight_scale", b->mlp);
        for (int i = 0; i < 2; i++)
            if ((st = find_checked_linear(s, n[i], 2 * I, H, &inf[i])) != QK_OK) return st;
    }
    for (int i = 0; i < 2; i++) {
        char dn[160];
        qk_st_info di;
        snprintf(dn, sizeof dn, "%s.down_proj.%s", b->mlp, i ? "weight_scale" : "weight");
        if ((st = find_checked_linear(s, dn, H, I, &di)) != QK_OK) return st;
    }
    /* everything is there and well-formed: copy */
    if ((st = qk_norm_layer_load_from(b->norm, s)) != QK_OK) return st;
    if (stacked) {
        if ((st = load_stacked(b, &inf[0], &inf[2], ".weight", QK_DTYPE_F8_E4M3)) != QK_OK) return st;
        if ((st = load_stacked(b, &inf[1], &inf[3], ".weight_scale", QK_DTYPE_U8)) != QK_OK) return st;
    } else if ((st = qk_mxfp8_linear_layer_load_from(b->gate_up, s)) != QK_OK) {
        return st;
    }
    return qk_mxfp8_linear_layer_load_from(b->down, s);
}

qk_status qk_qwen35_text_mlp_process_weights_after_loading(qk_qwen35_text_mlp *b)
{
    if (!b) return qk_fail(QK_ERR_INVALID_ARGUMENT, "process_weights_after_loading: NULL block");
    if (qk_mxfp8_linear_layer_weight(b->gate_up) || qk_mxfp8_linear_layer_weight(b->down))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "process_weights_after_loading: %s was already "
                       "processed", b->mlp);
    qk_status st;
    if ((st = qk_mxfp8_linear_layer_precheck(b->gate_up)) != QK_OK) return st;
    if ((st = qk_mxfp8_linear_layer_precheck(b->down)) != QK_OK) return st;
    if ((st = qk_norm_layer_process_weights_after_loading(b->norm)) != QK_OK) return st;
    if ((st = qk_mxfp8_linear_layer_process_weights_after_loading(b->gate_up)) != QK_OK) return st;
    return qk_mxfp8_linear_layer_process_weights_after_loading(b->down);
}

qk_status qk_qwen35_text_mlp_forward(const qk_qwen35_text_mlp *b, qk_backend be, const qk_tensor *x,
                                     const qk_tensor *residual, qk_tensor *out,
                                     qk_tensor *residual_out)
{
    static const char who[] = "qk_qwen35_text_mlp_forward";
    if (!b) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL block", who);
    qk_status st = check_input(who, "x", x, b->c.hidden_size);
    if (st != QK_OK) return st;
    qk_tensor h, gu, a;
    void *mh = NULL, *mgu = NULL, *ma = NULL;
    if ((st = scratch_like(who, x, b->c.hidden_size, &h, &mh)) == QK_OK &&
        (st = scratch_like(who, x, 2 * b->c.intermediate_size, &gu, &mgu)) == QK_OK &&
        (st = scratch_like(who, x, b->c.intermediate_size, &a, &ma)) == QK_OK &&
        (st = qk_norm_layer_forward_residual(b->norm, be, x, residual, &h, residual_out)) == QK_OK &&
        (st = qk_mxfp8_linear_layer_forward(b->gate_up, be, &h, &gu)) == QK_OK &&
        (st = qk_serve_silu_and_mul(&gu, &a)) == QK_OK)
        st = qk_mxfp8_linear_layer_forward(b->down, be, &a, out);
    free(mh);
    free(mgu);
    free(ma);
    return st;
}

/* ======================================================================================
 * Vision MLP
 * ====================================================================================== */
struct qk_qwen35_vision_mlp {
    qk_qwen35_config c;
    char mlp[96];                       /* "model.visual.blocks.N.mlp" */
    qk_mxfp8_linear_layer *fc1, *fc2;
};

qk_status qk_qwen35_vision_mlp_create(const qk_qwen35_config *c, int32_t block,
                                      const qk_layer_options *opt, qk_qwen35_vision_mlp **out)
{
    static const char who[] = "qk_qwen35_vision_mlp_create";
    qk_status st = check_config(who, c, false);
    if (st != QK_OK) return st;
    if (!out || block < 0) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: bad block or NULL", who);
    qk_qwen35_vision_mlp *b = calloc(1, sizeof *b);
    if (!b) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    b->c = *c;
    snprintf(b->mlp, sizeof b->mlp, "model.visual.blocks.%d.mlp", (int)block);
    char p[128];
    const int64_t H = c->vision_hidden_size, I = c->vision_intermediate_size;
    snprintf(p, sizeof p, "%s.linear_fc1", b->mlp);
    st = qk_mxfp8_linear_layer_create(p, H, I, true, 1, 0, QK_TP_NONE, opt, &b->fc1);
    if (st == QK_OK) {
        snprintf(p, sizeof p, "%s.linear_fc2", b->mlp);
        st = qk_mxfp8_linear_layer_create(p, I, H, true, 1, 0, QK_TP_NONE, opt, &b->fc2);
    }
    if (st != QK_OK) {
        qk_qwen35_vision_mlp_destroy(b);
        return st;
    }
    *out = b;
    return QK_OK;
}

void qk_qwen35_vision_mlp_destroy(qk_qwen35_vision_mlp *b)
{
    if (!b) return;
    qk_mxfp8_linear_layer_destroy(b->fc1);
    qk_mxfp8_linear_layer_destroy(b->fc2);
    free(b);
}

const qk_mxfp8_linear_layer *qk_qwen35_vision_mlp_fc1(const qk_qwen35_vision_mlp *b)
{
    return b ? b->fc1 : NULL;
}
const qk_mxfp8_linear_layer *qk_qwen35_vision_mlp_fc2(const qk_qwen35_vision_mlp *b)
{
    return b ? b->fc2 : NULL;
}

qk_status qk_qwen35_vision_mlp_load(qk_qwen35_vision_mlp *b, const qk_st_set *s)
{
    if (!b || !s) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_qwen35_vision_mlp_load: NULL argument");
    if (qk_mxfp8_linear_layer_weight(b->fc1) || qk_mxfp8_linear_layer_weight(b->fc2))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "load %s: the block was already processed", b->mlp);
    const int64_t H = b->c.vision_hidden_size, I = b->c.vision_intermediate_size;
    static const char *const sfx[3] = {"weight", "weight_scale", "bias"};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 3; i++) {
            char n[160];
            qk_st_info info;
            snprintf(n, sizeof n, "%s.linear_fc%d.%s", b->mlp, l + 1, sfx[i]);
            qk_status st = find_checked_linear(s, n, l ? H : I, l ? I : H, &info);
            if (st != QK_OK) return st;
        }
    qk_status st = qk_mxfp8_linear_layer_load_from(b->fc1, s);
    return st != QK_OK ? st : qk_mxfp8_linear_layer_load_from(b->fc2, s);
}

qk_status qk_qwen35_vision_mlp_process_weights_after_loading(qk_qwen35_vision_mlp *b)
{
    if (!b) return qk_fail(QK_ERR_INVALID_ARGUMENT, "process_weights_after_loading: NULL block");
    if (qk_mxfp8_linear_layer_weight(b->fc1) || qk_mxfp8_linear_layer_weight(b->fc2))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "process_weights_after_loading: %s was already "
                       "processed", b->mlp);
    qk_status st;
    if ((st = qk_mxfp8_linear_layer_precheck(b->fc1)) != QK_OK) return st;
    if ((st = qk_mxfp8_linear_layer_precheck(b->fc2)) != QK_OK) return st;
    if ((st = qk_mxfp8_linear_layer_process_weights_after_loading(b->fc1)) != QK_OK) return st;
    return qk_mxfp8_linear_layer_process_weights_after_loading(b->fc2);
}

qk_status qk_qwen35_vision_mlp_forward(const qk_qwen35_vision_mlp *b, qk_backend be,
                                       const qk_tensor *x, qk_tensor *out)
{
    static const char who[] = "qk_qwen35_vision_mlp_forward";
    if (!b) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL block", who);
    qk_status st = check_input(who, "x", x, b->c.vision_hidden_size);
    if (st != QK_OK) return st;
    qk_tensor t;
    void *mt = NULL;
    if ((st = scratch_like(who, x, b->c.vision_intermediate_size, &t, &mt)) == QK_OK &&
        (st = qk_mxfp8_linear_layer_forward(b->fc1, be, x, &t)) == QK_OK &&
        (st = qk_serve_gelu_tanh(&t, &t)) == QK_OK)
        st = qk_mxfp8_linear_layer_forward(b->fc2, be, &t, out);
    free(mt);
    return st;
}
