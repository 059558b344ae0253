/* The MXFP8 linear weight life cycle of checkpoint.md: create_weights (placeholders,
 * ceil(K/32) scales all 0xFF), load (dtype then shape checked before any copy, the
 * dedicated floor-sized-scale message), process_weights_after_loading (0xFF check, then
 * qk_mx_weight_create and the optional scale-pair layout), apply; plus the tensor-parallel
 * partition of a weight (column: split N evenly; row: split K on block boundaries). */
#define _GNU_SOURCE
#include "io_internal.h"
#include "api/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qk_mx_linear {
    char *prefix;
    int64_t N, K, kb;               /* the full (unsharded) linear */
    qk_tp tp;
    qk_tp_part part;
    bool has_bias;
    int64_t bias_len;               /* part.n (column) or N */
    uint8_t *w;                     /* [part.n, part.pad + part.k] F8_E4M3 */
    uint8_t *s;                     /* [part.n, part.kb] E8M0 */
    float *bias;
    bool loaded_w, loaded_s, loaded_b;
    qk_mx_weight *prepared;
    uint8_t *pairs;                 /* [part.n, ceil(part.kb/2), 2] */
};

static int64_t qk_ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); } /* a >= 0, b > 0 */

/* The first element after block b (0 <= b <= kb): min(32 b, K) without 32 kb overflowing
   when K is near INT64_MAX (b < kb implies 32 b <= K - 1). */
static int64_t qk_block_end(int64_t b, int64_t K)
{
    return b >= qk_mx_blocks(K) ? K : b * QK_MX_BLOCK;
}

/* ---- tensor parallelism ---- */
/* "2176 + 2128 elements (68 + 67 blocks)" for the block-aligned split, or why none exists. */
static void qk_block_aligned_text(int64_t K, int32_t tp, char *buf, size_t n)
{
    int64_t kb = qk_ceil_div(K, QK_MX_BLOCK), B = qk_ceil_div(kb, tp);
    if ((int64_t)(tp - 1) * B >= kb) {
        snprintf(buf, n, "none exists: %lld blocks over tp=%d leave rank %lld with no block",
                 (long long)kb, tp, (long long)qk_ceil_div(kb, B));
        return;
    }
    char el[200] = "", bl[200] = "";
    size_t ke = 0, kbl = 0;
    for (int32_t r = 0; r < tp; r++) {
        if (r == 6 && tp > 8) {
            ke += (size_t)snprintf(el + ke, sizeof el - ke, " + ...");
            kbl += (size_t)snprintf(bl + kbl, sizeof bl - kbl, " + ...");
            r = tp - 2;
            continue;
        }
        /* (tp - 1) B < kb here, so r B and r B + B stay below kb + B <= 2 kb */
        int64_t b0 = r * B, b1 = b0 + B < kb ? b0 + B : kb;
        int64_t e1 = qk_block_end(b1, K);
        ke += (size_t)snprintf(el + ke, sizeof el - ke, r ? " + %lld" : "%lld", (long long)(e1 - b0 * QK_MX_BLOCK));
        kbl += (size_t)snprintf(bl + kbl, sizeof bl - kbl, r ? " + %lld" : "%lld", (long long)(b1 - b0));
        if (ke >= sizeof el || kbl >= sizeof bl) break;
    }
    snprintf(buf, n, "%s elements (%s blocks)", el, bl);
}

qk_status qk_tp_partition(int64_t N, int64_t K, const qk_tp *tp, qk_tp_part *p)
{
    static const char who[] = "qk_tp_partition";
    if (!p) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: part is NULL", who);
    if (N <= 0 || K <= 0)
        return qk_fail(QK_ERR_SHAPE, "%s: N=%lld and K=%lld must be positive", who, (long long)N,
                       (long long)K);
    int64_t kb = qk_ceil_div(K, QK_MX_BLOCK);
    qk_tp_part r = {0, N, 0, K, 0, kb, 0};
    if (!tp || tp->kind == QK_TP_NONE) {
        *p = r;
        return QK_OK;
    }
    if (tp->kind != QK_TP_COLUMN && tp->kind != QK_TP_ROW)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown parallel kind %d", who, (int)tp->kind);
    if (tp->size < 1 || tp->rank < 0 || tp->rank >= tp->size)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: rank %d of tp=%d is out of range", who,
                       tp->rank, tp->size);
    if (tp->kind == QK_TP_COLUMN) {
        if (N % tp->size)
            return qk_fail(QK_ERR_SHAPE, "%s: column-parallel split of N=%lld over tp=%d: N must "
                           "divide evenly (N %% tp = %lld)", who, (long long)N, tp->size,
                           (long long)(N % tp->size));
        r.n = N / tp->size;
        r.n0 = r.n * tp->rank;
        *p = r;
        return QK_OK;
    }
    char alt[512];
    if (tp->policy == QK_TP_EVEN) {
        int64_t per = K / tp->size;
        if (K % tp->size) {
            qk_block_aligned_text(K, tp->size, alt, sizeof alt);
            return qk_fail(QK_ERR_SHAPE, "%s: row-parallel even split of K=%lld over tp=%d: K does "
                           "not divide evenly; the block-aligned split (policy block_aligned): %s",
                           who, (long long)K, tp->size, alt);
        }
        if (per % QK_MX_BLOCK) {
            qk_block_aligned_text(K, tp->size, alt, sizeof alt);
            return qk_fail(QK_ERR_SHAPE, "%s: row-parallel even split of K=%lld over tp=%d gives %lld "
                           "elements per rank, which breaks 32-element block %lld (two ranks would "
                           "share its scale); the block-aligned split (policy block_aligned): %s",
                           who, (long long)K, tp->size, (long long)per,
                           (long long)(per / QK_MX_BLOCK), alt);
        }
        r.k = per;
        r.k0 = per * tp->rank;
        r.kb = per / QK_MX_BLOCK;
        r.kb0 = r.kb * tp->rank;
        *p = r;
        return QK_OK;
    }
    if (tp->policy == QK_TP_SHARED_BLOCK) {
        if (K % tp->size)
            return qk_fail(QK_ERR_SHAPE, "%s: row-parallel shared_block split of K=%lld over tp=%d: K "
                           "must divide evenly (K %% tp = %lld)", who, (long long)K, tp->size,
                           (long long)(K % tp->size));
        r.k = K / tp->size;
        r.k0 = r.k * tp->rank;
        r.pad = r.k0 % QK_MX_BLOCK;
        r.kb0 = r.k0 / QK_MX_BLOCK;
        r.kb = qk_ceil_div(r.pad + r.k, QK_MX_BLOCK);
        *p = r;
        return QK_OK;
    }
    if (tp->policy != QK_TP_BLOCK_ALIGNED)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown row-parallel policy %d", who,
                       (int)tp->policy);
    int64_t B = qk_ceil_div(kb, tp->size);
    if ((int64_t)(tp->size - 1) * B >= kb)
        return qk_fail(QK_ERR_SHAPE, "%s: row-parallel block_aligned split of K=%lld (%lld blocks of "
                       "32) over tp=%d gives %lld blocks per rank and leaves rank %lld with no block "
                       "(rule: every rank needs at least one block; use a smaller tp)", who,
                       (long long)K, (long long)kb, tp->size, (long long)B,
                       (long long)qk_ceil_div(kb, B));
    /* (tp - 1) B < kb: rank B + B <= kb + B - 1, and b0 < kb, so 32 b0 <= K - 1 */
    int64_t b0 = tp->rank * B, b1 = b0 + B < kb ? b0 + B : kb;
    r.kb0 = b0;
    r.kb = b1 - b0;
    r.k0 = b0 * QK_MX_BLOCK;
    r.k = qk_block_end(b1, K) - r.k0;
    *p = r;
    return QK_OK;
}

/* ---- create ---- */
qk_status qk_mx_linear_create_weights(const char *prefix, int64_t K, int64_t N, bool has_bias,
                                      const qk_tp *tp, qk_mx_linear **out)
{
    static const char who[] = "qk_mx_linear_create_weights";
    if (!out || !prefix) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    *out = NULL;
    qk_tp_part part;
    qk_status st = qk_tp_partition(N, K, tp, &part);
    if (st != QK_OK) return st;
    /* pad < 32 and k <= K - pad (shared_block: k = K / tp with tp >= 2 when pad > 0) */
    size_t wbytes, sbytes, bbytes = 0;
    const int64_t bias_len = tp && tp->kind == QK_TP_COLUMN ? part.n : N;
    if (!qk_ckd_bytes2(part.n, part.pad + part.k, 1, &wbytes) ||
        !qk_ckd_bytes2(part.n, part.kb, 1, &sbytes) ||
        (has_bias && !qk_ckd_bytes(bias_len, sizeof(float), &bbytes)))
        return qk_fail(QK_ERR_SHAPE, "%s: " QK_NAME_FMT ": this rank's weight [%lld, %lld] (or its "
                       "scales or bias) takes more bytes than one allocation can hold", who, prefix,
                       (long long)part.n, (long long)(part.pad + part.k));
    qk_mx_linear *l = calloc(1, sizeof *l);
    if (!l) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    l->prefix = qk_io_strdup(prefix);
    l->N = N;
    l->K = K;
    l->kb = qk_ceil_div(K, QK_MX_BLOCK);
    if (tp) l->tp = *tp;
    else l->tp.kind = QK_TP_NONE;
    l->part = part;
    l->has_bias = has_bias;
    l->bias_len = bias_len;
    l->w = calloc(wbytes ? wbytes : 1, 1);
    l->s = malloc(sbytes ? sbytes : 1);
    if (has_bias) l->bias = calloc(bbytes ? bbytes : 1, 1);
    if (!l->prefix || !l->w || !l->s || (has_bias && !l->bias)) {
        qk_mx_linear_destroy(l);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory for " QK_NAME_FMT, who, prefix);
    }
    memset(l->s, 0xFF, sbytes);   /* "not loaded" */
    *out = l;
    return QK_OK;
}

void qk_mx_linear_destroy(qk_mx_linear *l)
{
    if (!l) return;
    qk_mx_weight_destroy(l->prepared);
    free(l->w);
    free(l->s);
    free(l->bias);
    free(l->pairs);
    free(l->prefix);
    free(l);
}

const qk_tp_part *qk_mx_linear_part(const qk_mx_linear *l) { return l ? &l->part : NULL; }

/* ---- load ---- */
typedef enum { QK_PARAM_NONE, QK_PARAM_WEIGHT, QK_PARAM_SCALE, QK_PARAM_BIAS } qk_param;

static bool qk_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static qk_param qk_param_of(const char *name)
{
    if (qk_suffix(name, ".weight_scale")) return QK_PARAM_SCALE;
    if (qk_suffix(name, ".weight")) return QK_PARAM_WEIGHT;
    if (qk_suffix(name, ".bias")) return QK_PARAM_BIAS;
    return QK_PARAM_NONE;
}

static void qk_shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t d = 0; d < ndim && d < 8 && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (ndim > 8 && k < n) k += (size_t)snprintf(buf + k, n - k, ", ...");
    if (k < n) snprintf(buf + k, n - k, "]");
}

qk_status qk_mx_linear_check_tensor(const char *name, const char *dtype_name, int32_t ndim,
                                    const int64_t *shape, int64_t N, int64_t K)
{
    if (!name || !dtype_name || (ndim > 0 && !shape))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_check_tensor: NULL argument");
    qk_param p = qk_param_of(name);
    if (p == QK_PARAM_NONE)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "load " QK_NAME_FMT ": not a .weight, .weight_scale "
                       "or .bias tensor of a W8A8_MXFP8 linear", name);
    int64_t kb = qk_ceil_div(K, QK_MX_BLOCK);
    const char *need = p == QK_PARAM_WEIGHT ? "F8_E4M3" : p == QK_PARAM_SCALE ? "U8" : "F32";
    bool dt_ok = p == QK_PARAM_SCALE ? (!strcmp(dtype_name, "U8") || !strcmp(dtype_name, "F8_E8M0"))
                                     : !strcmp(dtype_name, need);
    if (!dt_ok)
        return qk_fail(QK_ERR_FORMAT, "load " QK_NAME_FMT ": dtype is %s but the W8A8_MXFP8 linear's "
                       "%s must be %s%s (dtype mismatch; nothing was copied)", name, dtype_name,
                       p == QK_PARAM_WEIGHT ? "weight" : p == QK_PARAM_SCALE ? "weight_scale" : "bias",
                       need, p == QK_PARAM_SCALE ? " (E8M0 bytes) or F8_E8M0" : "");
    char have[160], want[64];
    qk_shape_text(shape, ndim, have, sizeof have);
    if (p == QK_PARAM_WEIGHT) {
        if (ndim == 2 && shape[0] == N && shape[1] == K) return QK_OK;
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)N, (long long)K);
    } else if (p == QK_PARAM_SCALE) {
        if (ndim == 2 && shape[0] == N && shape[1] == kb) return QK_OK;
        if (ndim == 2 && shape[0] == N && K % QK_MX_BLOCK && shape[1] == K / QK_MX_BLOCK)
            return qk_fail(QK_ERR_FORMAT, "load " QK_NAME_FMT ": the scale has %lld columns "
                           "(floor(%lld/32)) but K = %lld needs %lld (ceil(%lld/32)): the exporter "
                           "dropped the partial last block (%lld of 32 elements), so the checkpoint "
                           "must be re-exported with ceil(K/32) scales per row", name,
                           (long long)shape[1], (long long)K, (long long)K, (long long)kb,
                           (long long)K, (long long)(K % QK_MX_BLOCK));
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)N, (long long)kb);
    } else {
        if (ndim == 1 && shape[0] == N) return QK_OK;
        snprintf(want, sizeof want, "[%lld]", (long long)N);
    }
    return qk_fail(QK_ERR_FORMAT, "load " QK_NAME_FMT ": shape is %s but the W8A8_MXFP8 linear "
                   "(N=%lld, K=%lld) needs %s (shape mismatch; nothing was copied)", name, have,
                   (long long)N, (long long)K, want);
}

/* Copies rows [r0, r0+nr) x columns [c0, c0+nc) of a 2-D (or 1-D with nr = 1) tensor. */
/* rows [r0, r0 + nr), columns [c0, c0 + nc) of t into dst, whose rows are dpitch elements
   apart, starting doff elements into each. t passed qk_check_tensor (its byte span fits
   int64) and the ranges lie inside its shape, so no offset below can overflow. */
static void qk_copy_block(const qk_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                          void *dst, int64_t dpitch, int64_t doff)
{
    size_t es = qk_dtype_size(t->dtype);
    const char *src = t->data;
    char *d = (char *)dst + doff * (int64_t)es;
    int64_t rs = t->ndim == 2 ? t->stride[0] : 0, cs = t->stride[t->ndim - 1];
    for (int64_t r = 0; r < nr; r++) {
        const char *row = src + ((r0 + r) * rs + c0 * cs) * (int64_t)es;
        if (cs == 1) {
            memcpy(d, row, (size_t)nc * es);
        } else {
            for (int64_t c = 0; c < nc; c++) memcpy(d + c * (int64_t)es, row + c * cs * (int64_t)es, es);
        }
        d += dpitch * (int64_t)es;
    }
}

qk_status qk_mx_linear_pad_input(const qk_mx_linear *l, const qk_tensor *x, qk_tensor *xp,
                                 void **buf)
{
    *buf = NULL;
    *xp = *x;
    const qk_tp_part *q = &l->part;
    if (q->pad == 0) return QK_OK;
    if (x->ndim < 1 || x->ndim > QK_MAX_DIMS || !qk_is_float_dtype(x->dtype))
        return QK_OK; /* the linear's own checks report it */
    /* the linear's own first check, before any size below is computed from x */
    qk_status cs = qk_check_tensor("qk_mxfp8_linear", "x", x);
    if (cs != QK_OK) return cs;
    const int32_t nd = x->ndim;
    if (x->shape[nd - 1] != q->k)
        return qk_fail(QK_ERR_SHAPE, "linear " QK_NAME_FMT ": x's last dim is %lld but this rank's "
                       "part (shared_block split) has %lld columns", l->prefix,
                       (long long)x->shape[nd - 1], (long long)q->k);
    if (q->k > 1 && x->stride[nd - 1] != 1)
        return qk_fail(QK_ERR_LAYOUT, "linear " QK_NAME_FMT ": x's last dim must be contiguous",
                       l->prefix);
    int64_t rows = 0;   /* the dims passed qk_check_tensor: their product fits int64 */
    (void)qk_ckd_numel(x->shape, nd - 1, &rows);
    const int64_t w = q->pad + q->k;
    const size_t es = qk_dtype_size(x->dtype);
    size_t bytes;
    if (!qk_ckd_bytes2(rows, w, es, &bytes))
        return qk_fail(QK_ERR_SHAPE, "linear " QK_NAME_FMT ": x's %lld rows padded to %lld columns "
                       "take more bytes than one allocation can hold", l->prefix, (long long)rows,
                       (long long)w);
    char *b = calloc(bytes + 1, 1);
    if (!b) return qk_fail(QK_ERR_NOMEM, "linear " QK_NAME_FMT ": out of memory", l->prefix);
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rem = r;
        for (int32_t d = nd - 2; d >= 0; d--) {
            off += (rem % x->shape[d]) * x->stride[d];
            rem /= x->shape[d];
        }
        memcpy(b + (size_t)(r * w + q->pad) * es, (const char *)x->data + off * (int64_t)es,
               (size_t)q->k * es);
    }
    xp->data = b;
    xp->shape[nd - 1] = w;
    xp->stride[nd - 1] = 1;
    int64_t st = w;   /* products of the leading dims and w: at most bytes */
    for (int32_t d = nd - 2; d >= 0; d--) {
        xp->stride[d] = st;
        st = qk_sat_mul_i64(st, x->shape[d]);
    }
    *buf = b;
    return QK_OK;
}

qk_status qk_mx_linear_load(qk_mx_linear *l, const char *name, const qk_tensor *t)
{
    static const char who[] = "qk_mx_linear_load";
    if (!l || !name || !t) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    if (l->prepared || !l->w)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT ": the linear was already "
                       "post-processed", who, name);
    size_t plen = strlen(l->prefix);
    qk_param p = QK_PARAM_NONE;
    if (!strncmp(name, l->prefix, plen) && name[plen] == '.') {
        const char *rest = name + plen + 1;
        p = !strcmp(rest, "weight") ? QK_PARAM_WEIGHT : !strcmp(rest, "weight_scale") ? QK_PARAM_SCALE
          : !strcmp(rest, "bias") ? QK_PARAM_BIAS : QK_PARAM_NONE;
    }
    if (p == QK_PARAM_NONE)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT " is not a tensor of linear "
                       QK_NAME_FMT " (expected .weight, .weight_scale or .bias)", who, name, l->prefix);
    if (p == QK_PARAM_BIAS && !l->has_bias)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: linear " QK_NAME_FMT " was created without a "
                       "bias, but " QK_NAME_FMT " was given", who, l->prefix, name);
    if (t->ndim < 0 || t->ndim > QK_MAX_DIMS)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT ": ndim %d", who, name, t->ndim);
    qk_status st = qk_mx_linear_check_tensor(name, qk_dtype_name(t->dtype), t->ndim, t->shape, l->N, l->K);
    if (st != QK_OK) return st;
    /* strides: the copy's offsets are computed from them */
    if ((st = qk_check_tensor(who, name, t)) != QK_OK) return st;
    if (!t->data)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT ": data is NULL", who, name);
    const qk_tp_part *q = &l->part;
    if (p == QK_PARAM_WEIGHT) {
        qk_copy_block(t, q->n0, q->n, q->k0, q->k, l->w, q->pad + q->k, q->pad);
        l->loaded_w = true;
    } else if (p == QK_PARAM_SCALE) {
        qk_copy_block(t, q->n0, q->n, q->kb0, q->kb, l->s, q->kb, 0);
        l->loaded_s = true;
    } else {
        int64_t b0 = l->tp.kind == QK_TP_COLUMN ? q->n0 : 0;
        qk_copy_block(t, 0, 1, b0, l->bias_len, l->bias, l->bias_len, 0);
        l->loaded_b = true;
    }
    qk_clear_error();
    return QK_OK;
}

qk_status qk_mx_linear_load_from(qk_mx_linear *l, const qk_st_set *s, const char *name)
{
    if (!l || !s || !name) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_load_from: NULL argument");
    qk_st_info info;
    if (qk_st_set_find(s, name, &info) != QK_OK)
        return qk_fail(QK_ERR_FORMAT, "load " QK_NAME_FMT ": the checkpoint has no such tensor", name);
    if (qk_param_of(name) != QK_PARAM_NONE) {
        qk_status st = qk_mx_linear_check_tensor(name, info.dtype_name, info.ndim, info.shape, l->N, l->K);
        if (st != QK_OK) return st;
    }
    qk_tensor t;
    qk_status st = qk_st_info_tensor(&info, &t);
    if (st != QK_OK) return st;
    if (info.dtype == QK_DTYPE_F32 && ((uintptr_t)info.data & 3u)) {
        /* a misaligned F32 bias: copy it through an aligned buffer */
        float *tmp = malloc((size_t)info.nbytes ? (size_t)info.nbytes : 1);
        if (!tmp) return qk_fail(QK_ERR_NOMEM, "qk_mx_linear_load_from: out of memory");
        memcpy(tmp, info.data, (size_t)info.nbytes);
        t.data = tmp;
        st = qk_mx_linear_load(l, name, &t);
        free(tmp);
        return st;
    }
    return qk_mx_linear_load(l, name, &t);
}

qk_status qk_mx_linear_load_all(qk_mx_linear *l, const qk_st_set *s)
{
    if (!l || !s) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_load_all: NULL argument");
    static const char *const sfx[] = {".weight", ".weight_scale", ".bias"};
    for (int i = 0; i < (l->has_bias ? 3 : 2); i++) {
        size_t n = strlen(l->prefix) + strlen(sfx[i]) + 1;
        char *name = malloc(n);
        if (!name) return qk_fail(QK_ERR_NOMEM, "qk_mx_linear_load_all: out of memory");
        snprintf(name, n, "%s%s", l->prefix, sfx[i]);
        qk_status st = qk_mx_linear_load_from(l, s, name);
        free(name);
        if (st != QK_OK) return st;
    }
    return QK_OK;
}

qk_status qk_mx_linear_placeholder(const qk_mx_linear *l, const char *which, qk_tensor *view)
{
    if (!l || !which || !view)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_placeholder: NULL argument");
    if (!strcmp(which, "weight") && l->w) {
        int64_t sh[2] = {l->part.n, l->part.pad + l->part.k};
        *view = qk_tensor_make(l->w, QK_DTYPE_F8_E4M3, 2, sh);
    } else if (!strcmp(which, "weight_scale") && l->s) {
        int64_t sh[2] = {l->part.n, l->part.kb};
        *view = qk_tensor_make(l->s, QK_DTYPE_E8M0, 2, sh);
    } else if (!strcmp(which, "bias") && l->bias) {
        int64_t sh[1] = {l->bias_len};
        *view = qk_tensor_make(l->bias, QK_DTYPE_F32, 1, sh);
    } else {
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_placeholder: " QK_NAME_FMT " has no "
                       "placeholder \"%.20s\" (absent or released)", l->prefix, which);
    }
    return QK_OK;
}

/* ---- process_weights_after_loading ---- */
qk_status qk_mx_linear_process_weights_after_loading(qk_mx_linear *l, unsigned flags)
{
    static const char who[] = "process_weights_after_loading";
    if (!l) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL linear", who);
    if (flags & ~(unsigned)QK_MX_LINEAR_PAIR_SCALES)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", who, flags);
    if (l->prepared)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT " was already processed", who,
                       l->prefix);
    const qk_tp_part *q = &l->part;
    if (!l->loaded_w)
        return qk_fail(QK_ERR_FORMAT, "%s: \"%.160s.weight\" was never loaded", who, l->prefix);
    size_t sbytes = 0;   /* allocated by create_weights, so it fits */
    (void)qk_ckd_bytes2(q->n, q->kb, 1, &sbytes);
    const uint8_t *ff = memchr(l->s, 0xFF, sbytes);
    if (ff) {
        size_t i = (size_t)(ff - l->s), count = 0;
        for (size_t j = i; j < sbytes; j++) count += l->s[j] == 0xFF;
        int64_t row = (int64_t)i / q->kb, blk = (int64_t)i % q->kb;
        char where[96] = "";
        if (l->tp.kind != QK_TP_NONE)
            snprintf(where, sizeof where, " (checkpoint row %lld, block %lld)",
                     (long long)(row + q->n0), (long long)(blk + q->kb0));
        return qk_fail(QK_ERR_FORMAT, "%s: \"%.160s.weight_scale\" holds 0xFF (a scale never "
                       "loaded, or NaN) at row %lld, block %lld%s%s; %zu such bytes in all",
                       who, l->prefix, (long long)row, (long long)blk, where,
                       l->loaded_s ? "" : " (the scale was never loaded)", count);
    }
    if (l->has_bias && !l->loaded_b)
        return qk_fail(QK_ERR_FORMAT, "%s: \"%.160s.bias\" was never loaded", who, l->prefix);
    int64_t ws[2] = {q->n, q->pad + q->k}, ss[2] = {q->n, q->kb};
    qk_tensor qt = qk_tensor_make(l->w, QK_DTYPE_F8_E4M3, 2, ws);
    qk_tensor st_ = qk_tensor_make(l->s, QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *mw = NULL;
    qk_status st = qk_mx_weight_create(&qt, &st_, &mw);
    if (st != QK_OK) return st;   /* its message names the row and block or element */
    uint8_t *pairs = NULL;
    if (flags & QK_MX_LINEAR_PAIR_SCALES) {
        int64_t half = (q->kb + 1) / 2, ps[3] = {q->n, half, 2};
        size_t pbytes;
        pairs = qk_ckd_bytes2(q->n, half, 2, &pbytes) ? malloc(pbytes ? pbytes : 1) : NULL;
        if (!pairs) {
            qk_mx_weight_destroy(mw);
            return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
        }
        qk_tensor pt = qk_tensor_make(pairs, QK_DTYPE_E8M0, 3, ps);
        st = qk_mx_pack_scale_pairs(&st_, &pt);
        if (st != QK_OK) {
            free(pairs);
            qk_mx_weight_destroy(mw);
            return st;
        }
    }
    l->prepared = mw;
    l->pairs = pairs;
    free(l->w);
    free(l->s);
    l->w = NULL;
    l->s = NULL;
    qk_clear_error();
    return QK_OK;
}

const qk_mx_weight *qk_mx_linear_weight(const qk_mx_linear *l) { return l ? l->prepared : NULL; }

qk_status qk_mx_linear_scale_pairs(const qk_mx_linear *l, qk_tensor *view)
{
    if (!l || !view) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_scale_pairs: NULL argument");
    if (!l->pairs)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_scale_pairs: " QK_NAME_FMT " has no pair "
                       "layout (process it with QK_MX_LINEAR_PAIR_SCALES)", l->prefix);
    int64_t ps[3] = {l->part.n, (l->part.kb + 1) / 2, 2};
    *view = qk_tensor_make(l->pairs, QK_DTYPE_E8M0, 3, ps);
    return QK_OK;
}

qk_status qk_mx_linear_apply(const qk_mx_linear *l, const qk_tensor *x, qk_tensor *out)
{
    if (!l || !x || !out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_apply: NULL argument");
    if (!l->prepared)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_mx_linear_apply: " QK_NAME_FMT " is not processed "
                       "(call process_weights_after_loading first)", l->prefix);
    bool add_bias = l->has_bias && (l->tp.kind != QK_TP_ROW || l->tp.rank == 0);
    qk_tensor b;
    if (add_bias) {
        int64_t sh[1] = {l->bias_len};
        b = qk_tensor_make(l->bias, QK_DTYPE_F32, 1, sh);
    }
    qk_tensor xp;
    void *buf;
    qk_status st = qk_mx_linear_pad_input(l, x, &xp, &buf);
    if (st == QK_OK) st = qk_mxfp8_linear(&xp, l->prepared, add_bias ? &b : NULL, out);
    free(buf);
    return st;
}
