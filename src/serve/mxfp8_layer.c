/* MXFP8Linear (serving.md): the ModelSlim W8A8_MXFP8 scheme on top of src/io's linear life
 * cycle (qk_mx_linear: ceil(K/32) placeholders all 0xFF, dtype-then-shape checks before
 * any copy, the floor-sized-scale message, the 0xFF check, tensor parallelism). This file
 * adds the backends: process_weights_after_loading prepares the weight for the target (the
 * io linear's own prepared weight) and for the other backends the layer may run, and
 * forward runs the one the registry selects. Every failure leaves the layer unchanged. */
#include "serve/serve_internal.h"
#include "io/io_internal.h"

#include <stdio.h>
#include <stdlib.h>

struct qk_mxfp8_linear_layer {
    char *prefix;
    int64_t in, out;
    bool has_bias;
    qk_tp tp;
    qk_layer_options opt;
    qk_mx_linear *io;
    qk_serve_weight *w;      /* NULL until processed */
};

qk_status qk_mxfp8_linear_layer_create(const char *prefix, int64_t in, int64_t out, bool bias,
                                       int32_t tp, int32_t rank, qk_tp_kind parallel,
                                       const qk_layer_options *opt, qk_mxfp8_linear_layer **res)
{
    static const char who[] = "qk_mxfp8_linear_layer_create";
    if (!prefix || !res) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    qk_layer_options o = opt ? *opt : qk_layer_options_default();
    if (o.backend != QK_BACKEND_DEFAULT && !qk_backend_name(o.backend))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown backend %d", who, (int)o.backend);
    if (tp < 1 || rank < 0 || rank >= tp)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: \"%.160s\": rank %d of tp=%d is out of range",
                       who, prefix, (int)rank, (int)tp);
    qk_tp t = {parallel, o.tp_policy, rank, tp};
    qk_mx_linear *io = NULL;
    qk_status st = qk_mx_linear_create_weights(prefix, in, out, bias, &t, &io);
    if (st != QK_OK) return st;
    qk_mxfp8_linear_layer *l = calloc(1, sizeof *l);
    char *p = qk_serve_strdup(prefix);
    if (!l || !p) {
        free(l);
        free(p);
        qk_mx_linear_destroy(io);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    l->prefix = p;
    l->in = in;
    l->out = out;
    l->has_bias = bias;
    l->tp = t;
    l->opt = o;
    l->io = io;
    *res = l;
    qk_serve_ok();
    return QK_OK;
}

void qk_mxfp8_linear_layer_destroy(qk_mxfp8_linear_layer *l)
{
    if (!l) return;
    qk_serve_weight_destroy(l->w);   /* before the io linear: its target weight is borrowed */
    qk_mx_linear_destroy(l->io);
    free(l->prefix);
    free(l);
}

const qk_mx_linear *qk_mxfp8_linear_layer_scheme(const qk_mxfp8_linear_layer *l)
{
    return l ? l->io : NULL;
}

const qk_serve_weight *qk_mxfp8_linear_layer_weight(const qk_mxfp8_linear_layer *l)
{
    return l ? l->w : NULL;
}

const char *qk_mxfp8_linear_layer_prefix(const qk_mxfp8_linear_layer *l)
{
    return l ? l->prefix : NULL;
}

static qk_status not_after_processing(const qk_mxfp8_linear_layer *l, const char *name)
{
    return qk_fail(QK_ERR_INVALID_ARGUMENT, "load \"%.160s\": MXFP8Linear \"%.160s\" was already "
                   "processed (its raw placeholders are released)", name, l->prefix);
}

qk_status qk_mxfp8_linear_layer_load(qk_mxfp8_linear_layer *l, const char *name, const qk_tensor *t)
{
    if (!l || !name || !t)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mxfp8_linear_layer_load: NULL argument");
    if (l->w) return not_after_processing(l, name);
    return qk_mx_linear_load(l->io, name, t);
}

qk_status qk_mxfp8_linear_layer_load_from(qk_mxfp8_linear_layer *l, const qk_st_set *s)
{
    if (!l || !s)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mxfp8_linear_layer_load_from: NULL argument");
    static const char *const sfx[] = {".weight", ".weight_scale", ".bias"};
    const int n = l->has_bias ? 3 : 2;
    /* every tensor is found and checked before the first byte is copied */
    for (int i = 0; i < n; i++) {
        char *name = qk_serve_join(l->prefix, sfx[i]);
        if (!name) return qk_fail(QK_ERR_NOMEM, "qk_mxfp8_linear_layer_load_from: out of memory");
        if (l->w) {
            qk_status st = not_after_processing(l, name);
            free(name);
            return st;
        }
        qk_st_info info;
        qk_status st = QK_OK;
        if (qk_st_set_find(s, name, &info) != QK_OK)
            st = qk_fail(QK_ERR_FORMAT, "load \"%.160s\": the checkpoint has no such tensor "
                         "(MXFP8Linear \"%.160s\" needs it)", name, l->prefix);
        else
            st = qk_mx_linear_check_tensor(name, info.dtype_name, info.ndim, info.shape, l->out,
                                           l->in);
        free(name);
        if (st != QK_OK) return st;
    }
    return qk_mx_linear_load_all(l->io, s);
}

qk_status qk_mxfp8_linear_layer_precheck(qk_mxfp8_linear_layer *l)
{
    if (l->w) return QK_OK;
    qk_tensor q, s;
    if (qk_mx_linear_placeholder(l->io, "weight", &q) != QK_OK ||
        qk_mx_linear_placeholder(l->io, "weight_scale", &s) != QK_OK)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "MXFP8Linear \"%.160s\": no placeholders",
                       l->prefix);
    size_t sb, qb;   /* the placeholders were allocated with these sizes (create_weights) */
    if (!qk_ckd_bytes2(s.shape[0], s.shape[1], 1, &sb) || !qk_ckd_bytes2(q.shape[0], q.shape[1], 1, &qb))
        return qk_fail(QK_ERR_SHAPE, "MXFP8Linear \"%.160s\": placeholder sizes overflow", l->prefix);
    bool bad = memchr(s.data, 0xFF, sb) != NULL;
    const uint8_t *qd = q.data;
    for (size_t i = 0; !bad && i < qb; i++) bad = (qd[i] & 0x7F) == 0x7F;
    if (!bad) return QK_OK;
    /* the io linear's own check gives the message (tensor, row, block) and changes nothing */
    qk_status st = qk_mx_linear_process_weights_after_loading(l->io, 0);
    return st != QK_OK ? st : qk_fail(QK_ERR_FORMAT, "MXFP8Linear \"%.160s\": NaN data", l->prefix);
}

qk_status qk_mxfp8_linear_layer_process_weights_after_loading(qk_mxfp8_linear_layer *l)
{
    static const char who[] = "process_weights_after_loading";
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL layer", who);
    if (l->w)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: MXFP8Linear \"%.160s\" was already processed",
                       who, l->prefix);
    qk_backend chosen;
    qk_status st = qk_serve_select(QK_OP_MXFP8_LINEAR, l->opt.backend, &chosen);
    if (st != QK_OK) return st;
    unsigned want = (l->opt.flags & QK_LAYER_ALL_BACKENDS) ? qk_serve_linear_backends()
                                                         : QK_BACKEND_BIT(chosen);
    want |= QK_BACKEND_BIT(QK_BACKEND_TARGET);   /* the io linear always prepares it */
    const bool ref_is_target =
        qk_serve_linear_impl(QK_BACKEND_REFERENCE) == qk_serve_linear_impl(QK_BACKEND_TARGET);
    unsigned extra = want & ~QK_BACKEND_BIT(QK_BACKEND_TARGET);
    if (ref_is_target) extra &= ~QK_BACKEND_BIT(QK_BACKEND_REFERENCE);

    if ((st = qk_mxfp8_linear_layer_precheck(l)) != QK_OK) return st;
    const qk_tp_part *part = qk_mx_linear_part(l->io);
    qk_serve_weight *w = qk_serve_weight_new(part->n, part->pad + part->k);
    if (!w) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    if (extra) {
        qk_tensor q, s;
        qk_mx_linear_placeholder(l->io, "weight", &q);
        qk_mx_linear_placeholder(l->io, "weight_scale", &s);
        if ((st = qk_serve_weight_prepare(w, &q, &s, extra)) != QK_OK) {
            qk_serve_weight_destroy(w);
            return st;
        }
    }
    if ((st = qk_mx_linear_process_weights_after_loading(l->io, 0)) != QK_OK) {
        qk_serve_weight_destroy(w);
        return st;
    }
    qk_mx_weight *target = (qk_mx_weight *)(uintptr_t)qk_mx_linear_weight(l->io);
    qk_serve_weight_borrow(w, QK_BACKEND_TARGET, target);
    if (ref_is_target) qk_serve_weight_borrow(w, QK_BACKEND_REFERENCE, target);   /* one provider */
    l->w = w;
    qk_serve_ok();
    return QK_OK;
}

qk_status qk_mxfp8_linear_layer_forward(const qk_mxfp8_linear_layer *l, qk_backend b,
                                        const qk_tensor *x, qk_tensor *out)
{
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mxfp8_linear_layer_forward: NULL layer");
    if (!l->w)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "MXFP8Linear \"%.160s\" is not processed (call "
                       "process_weights_after_loading first)", l->prefix);
    const bool add_bias = l->has_bias && (l->tp.kind != QK_TP_ROW || l->tp.rank == 0);
    qk_tensor bias;
    if (add_bias && qk_mx_linear_placeholder(l->io, "bias", &bias) != QK_OK) return QK_ERR_INVALID_ARGUMENT;
    qk_tensor xp;
    void *buf;
    qk_status st = qk_mx_linear_pad_input(l->io, x, &xp, &buf);
    if (st == QK_OK)
        st = qk_serve_mxfp8_linear(b != QK_BACKEND_DEFAULT ? b : l->opt.backend, &xp, l->w,
                                   add_bias ? &bias : NULL, out);
    free(buf);
    if (st != QK_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", qk_last_error());
        return qk_fail(st, "MXFP8Linear \"%.160s\": %s", l->prefix, msg);
    }
    return QK_OK;
}
