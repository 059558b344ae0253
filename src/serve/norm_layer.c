/* Norm layers (serving.md): GemmaRMSNorm, Gemma3RMSNorm, RMSNorm, RMSNormGated with the
 * weight life cycle create (fresh value: Gemma 0, others 1) / load (name, dtype, shape
 * checked before copying) / process_weights_after_loading / forward through the registry.
 * A Gemma norm run with a shifted weight keeps an f32 1 + w beside the raw weight (the raw
 * one is never replaced: reloading and saving see the checkpoint's value) and runs the
 * plain op with it, which is norm.md's Gemma formula with the same f32 multiplier. */
#include "serve/serve_internal.h"
#include "api/check.h"
#include "api/ckd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct qk_norm_layer {
    qk_norm_layer_kind kind;
    char *prefix, *name;     /* name = "<prefix>.weight" */
    int64_t H;
    float eps;
    qk_layer_options opt;
    void *w;                 /* raw weight [H], opt.weight_dtype */
    float *shifted;          /* f32 1 + w, or NULL */
};

static const char *const kind_names[QK_LAYER_NORM_KINDS] = {
    "GemmaRMSNorm", "Gemma3RMSNorm", "RMSNorm", "RMSNormGated",
};

const char *qk_norm_layer_kind_name(qk_norm_layer_kind kind)
{
    return (unsigned)kind < QK_LAYER_NORM_KINDS ? kind_names[kind] : NULL;
}

static bool is_gemma(const qk_norm_layer *l)
{
    return l->kind == QK_LAYER_GEMMA_RMS_NORM || l->kind == QK_LAYER_GEMMA3_RMS_NORM;
}

qk_layer_options qk_layer_options_default(void)
{
    qk_layer_options o;
    memset(&o, 0, sizeof o);
    o.backend = QK_BACKEND_DEFAULT;
    o.weight_dtype = QK_DTYPE_BF16;
    o.flags = 0;
    o.tp_policy = QK_TP_EVEN;
    return o;
}

qk_status qk_norm_layer_create(qk_norm_layer_kind kind, const char *prefix, int64_t hidden,
                               float eps, const qk_layer_options *opt, qk_norm_layer **out)
{
    static const char who[] = "qk_norm_layer_create";
    if (!prefix || !out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    if ((unsigned)kind >= QK_LAYER_NORM_KINDS)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown norm kind %d", who, (int)kind);
    if (hidden < 1)
        return qk_fail(QK_ERR_SHAPE, "%s: %s \"%.160s\": hidden size %lld must be >= 1", who,
                       kind_names[kind], prefix, (long long)hidden);
    if (!(eps >= 0.0f) || isinf(eps))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s \"%.160s\": eps %g must be finite and >= 0",
                       who, kind_names[kind], prefix, (double)eps);
    qk_layer_options o = opt ? *opt : qk_layer_options_default();
    if (!qk_is_float_dtype(o.weight_dtype))
        return qk_fail(QK_ERR_DTYPE, "%s: weight dtype %s; a norm weight is F32, F16 or BF16", who,
                       qk_dtype_name(o.weight_dtype));
    if (o.backend != QK_BACKEND_DEFAULT && !qk_backend_name(o.backend))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown backend %d", who, (int)o.backend);
    qk_norm_layer *l = calloc(1, sizeof *l);
    if (!l) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    l->kind = kind;
    l->H = hidden;
    l->eps = eps;
    l->opt = o;
    l->prefix = qk_serve_strdup(prefix);
    l->name = qk_serve_join(prefix, ".weight");
    size_t wbytes;
    if (!qk_ckd_bytes(hidden, qk_dtype_size(o.weight_dtype), &wbytes)) {
        qk_norm_layer_destroy(l);
        return qk_fail(QK_ERR_SHAPE, "%s: %s \"%.160s\": hidden size %lld x %s takes more bytes "
                       "than one allocation can hold", who, kind_names[kind], prefix,
                       (long long)hidden, qk_dtype_name(o.weight_dtype));
    }
    l->w = malloc(wbytes);
    if (!l->prefix || !l->name || !l->w) {
        qk_norm_layer_destroy(l);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    const float fresh = is_gemma(l) ? 0.0f : 1.0f;
    for (int64_t i = 0; i < hidden; i++) qk_store_f32(l->w, o.weight_dtype, i, fresh);
    *out = l;
    qk_serve_ok();
    return QK_OK;
}

void qk_norm_layer_destroy(qk_norm_layer *l)
{
    if (!l) return;
    free(l->prefix);
    free(l->name);
    free(l->w);
    free(l->shifted);
    free(l);
}

/* The checks of load, without copying. */
static qk_status check_tensor(const qk_norm_layer *l, const char *name, const char *dtype_name,
                              int32_t ndim, const int64_t *shape)
{
    if (strcmp(name, l->name))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "load \"%.160s\": not a tensor of %s \"%.160s\" "
                       "(its one tensor is \"%.160s\")", name, kind_names[l->kind], l->prefix,
                       l->name);
    const char *need = qk_dtype_name(l->opt.weight_dtype);
    if (strcmp(dtype_name, need))
        return qk_fail(QK_ERR_FORMAT, "load \"%.160s\": dtype is %s but the %s weight placeholder "
                       "is %s (dtype mismatch; nothing was copied; create the layer with weight "
                       "dtype %s to load it)", name, dtype_name, kind_names[l->kind], need,
                       dtype_name);
    if (ndim != 1 || shape[0] != l->H) {
        char have[96];
        size_t k = (size_t)snprintf(have, sizeof have, "[");
        for (int32_t d = 0; d < ndim && d < 6 && k < sizeof have; d++)
            k += (size_t)snprintf(have + k, sizeof have - k, d ? ", %lld" : "%lld", (long long)shape[d]);
        if (k < sizeof have) snprintf(have + k, sizeof have - k, "]");
        return qk_fail(QK_ERR_FORMAT, "load \"%.160s\": shape is %s but the %s(hidden=%lld) weight "
                       "is [%lld] (shape mismatch; nothing was copied)", name, have,
                       kind_names[l->kind], (long long)l->H, (long long)l->H);
    }
    return QK_OK;
}

qk_status qk_norm_layer_load(qk_norm_layer *l, const char *name, const qk_tensor *t)
{
    if (!l || !name || !t) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_load: NULL argument");
    if (t->ndim < 1 || t->ndim > QK_MAX_DIMS)
        return qk_fail(QK_ERR_FORMAT, "load \"%.160s\": ndim %d", name, (int)t->ndim);
    qk_status st = check_tensor(l, name, qk_dtype_name(t->dtype), t->ndim, t->shape);
    if (st != QK_OK) return st;
    /* the copy's offsets come from the stride: its span must fit int64 bytes */
    if ((st = qk_check_tensor("qk_norm_layer_load", name, t)) != QK_OK) return st;
    if (!t->data) return qk_fail(QK_ERR_INVALID_ARGUMENT, "load \"%.160s\": data is NULL", name);
    const size_t es = qk_dtype_size(t->dtype);
    for (int64_t i = 0; i < l->H; i++)
        memcpy((char *)l->w + i * (int64_t)es, (const char *)t->data + i * t->stride[0] * (int64_t)es, es);
    free(l->shifted);   /* stale until the next process_weights_after_loading */
    l->shifted = NULL;
    qk_serve_ok();
    return QK_OK;
}

static qk_status find_checked(const qk_norm_layer *l, const qk_st_set *s, qk_st_info *info)
{
    if (qk_st_set_find(s, l->name, info) != QK_OK)
        return qk_fail(QK_ERR_FORMAT, "load \"%.160s\": the checkpoint has no such tensor (%s "
                       "\"%.160s\" needs it)", l->name, kind_names[l->kind], l->prefix);
    return check_tensor(l, l->name, info->dtype_name, info->ndim, info->shape);
}

qk_status qk_norm_layer_check_from(const qk_norm_layer *l, const qk_st_set *s)
{
    qk_st_info info;
    return find_checked(l, s, &info);
}

qk_status qk_norm_layer_load_from(qk_norm_layer *l, const qk_st_set *s)
{
    if (!l || !s) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_load_from: NULL argument");
    qk_st_info info;
    qk_status st = find_checked(l, s, &info);
    if (st != QK_OK) return st;
    int64_t h = l->H;
    qk_tensor t = qk_tensor_make((void *)(uintptr_t)info.data, l->opt.weight_dtype, 1, &h);
    return qk_norm_layer_load(l, l->name, &t);   /* byte copies: any alignment */
}

qk_status qk_norm_layer_process_weights_after_loading(qk_norm_layer *l)
{
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "process_weights_after_loading: NULL layer");
    qk_backend c = QK_BACKEND_TARGET;
    bool want = false;
    if (is_gemma(l)) {
        if (l->opt.flags & QK_LAYER_SHIFTED_WEIGHT) {
            want = true;
        } else {
            qk_status st = qk_serve_select(QK_OP_GEMMA_RMS_NORM, l->opt.backend, &c);
            if (st != QK_OK) return st;
            want = qk_serve_prefers_shifted(c, QK_OP_GEMMA_RMS_NORM);
        }
    }
    float *sh = NULL;
    if (want) {
        size_t sbytes;
        sh = qk_ckd_bytes(l->H, sizeof(float), &sbytes) ? malloc(sbytes) : NULL;
        if (!sh) return qk_fail(QK_ERR_NOMEM, "process_weights_after_loading: out of memory");
        for (int64_t i = 0; i < l->H; i++) sh[i] = 1.0f + qk_load_f32(l->w, l->opt.weight_dtype, i);
    }
    free(l->shifted);
    l->shifted = sh;
    qk_serve_ok();
    return QK_OK;
}

qk_status qk_norm_layer_weight(const qk_norm_layer *l, qk_tensor *view)
{
    if (!l || !view) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_weight: NULL argument");
    int64_t h = l->H;
    *view = qk_tensor_make(l->w, l->opt.weight_dtype, 1, &h);
    return QK_OK;
}

qk_status qk_norm_layer_shifted_weight(const qk_norm_layer *l, qk_tensor *view)
{
    if (!l || !view)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_shifted_weight: NULL argument");
    if (!l->shifted)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s \"%.160s\" keeps no shifted weight (only a Gemma "
                       "norm whose provider prefers one, or created with QK_LAYER_SHIFTED_WEIGHT, "
                       "after process_weights_after_loading)", kind_names[l->kind], l->prefix);
    int64_t h = l->H;
    *view = qk_tensor_make(l->shifted, QK_DTYPE_F32, 1, &h);
    return QK_OK;
}

static qk_backend layer_backend(const qk_norm_layer *l, qk_backend b)
{
    return b != QK_BACKEND_DEFAULT ? b : l->opt.backend;
}

/* The weight tensor a forward passes, and whether it is the shifted one. */
static qk_tensor weight_arg(const qk_norm_layer *l, bool *shifted)
{
    int64_t h = l->H;
    *shifted = l->shifted != NULL;
    return *shifted ? qk_tensor_make(l->shifted, QK_DTYPE_F32, 1, &h)
                    : qk_tensor_make(l->w, l->opt.weight_dtype, 1, &h);
}

qk_status qk_norm_layer_forward(const qk_norm_layer *l, qk_backend b, const qk_tensor *x,
                                qk_tensor *out)
{
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_forward: NULL layer");
    if (l->kind == QK_LAYER_RMS_NORM_GATED)
        return qk_fail(QK_ERR_UNSUPPORTED, "RMSNormGated \"%.160s\": forward needs the gate "
                       "(qk_norm_layer_forward_gated)", l->prefix);
    bool sh;
    qk_tensor w = weight_arg(l, &sh);
    b = layer_backend(l, b);
    if (is_gemma(l) && !sh) return qk_serve_gemma_rms_norm(b, x, &w, l->eps, out, NULL);
    return qk_serve_rms_norm(b, x, &w, l->eps, out, NULL);
}

qk_status qk_norm_layer_forward_residual(const qk_norm_layer *l, qk_backend b, const qk_tensor *x,
                                         const qk_tensor *residual, qk_tensor *out,
                                         qk_tensor *residual_out)
{
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_forward_residual: NULL layer");
    if (l->kind != QK_LAYER_GEMMA_RMS_NORM && l->kind != QK_LAYER_RMS_NORM)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s \"%.160s\" has no residual form (GemmaRMSNorm and "
                       "RMSNorm have)", kind_names[l->kind], l->prefix);
    bool sh;
    qk_tensor w = weight_arg(l, &sh);
    b = layer_backend(l, b);
    if (is_gemma(l) && !sh)
        return qk_serve_add_gemma_rms_norm(b, x, &w, residual, l->eps, out, residual_out);
    return qk_serve_add_rms_norm(b, x, &w, residual, l->eps, out, residual_out);
}

qk_status qk_norm_layer_forward_gated(const qk_norm_layer *l, qk_backend b, const qk_tensor *x,
                                      const qk_tensor *gate, qk_tensor *out)
{
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_norm_layer_forward_gated: NULL layer");
    if (l->kind != QK_LAYER_RMS_NORM_GATED)
        return qk_fail(QK_ERR_UNSUPPORTED, "%s \"%.160s\" has no gated form (RMSNormGated has)",
                       kind_names[l->kind], l->prefix);
    bool sh;
    qk_tensor w = weight_arg(l, &sh);
    return qk_serve_rms_norm_gated(layer_backend(l, b), x, &w, gate, l->eps, out);
}
