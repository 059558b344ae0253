/* safetensors writer: tensors are declared first, laid out by element size (largest
 * first) so every tensor is aligned, the header is padded with spaces to a multiple of 8,
 * bytes stream into a temporary file beside the destination, and commit flushes and
 * renames it (never onto an open input, onto an existing file only when asked). */
#define _GNU_SOURCE
#include "io_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct qk_st_decl {
    char *name;
    const qk_st_dtype_desc *dt;
    int32_t ndim;
    int64_t *shape;
    uint64_t nbytes;
    const void *src;        /* contents given at declaration, or NULL */
    uint64_t off;           /* relative to the data buffer, once laid out */
    uint64_t written;
} qk_st_decl;

struct qk_st_writer {
    char *path;
    unsigned flags;
    qk_msgs meta_key, meta_val;
    qk_st_decl *d;
    size_t n, cap;
    size_t *slot, nslot;    /* open-addressing index of d by name: i + 1, 0 = empty */
    bool started, done, failed;
    int fd;
    char *tmp;
    uint64_t data_start;
};

static const char qk_w_who[] = "qk_st_writer";

qk_status qk_st_writer_create(const char *path, unsigned flags, qk_st_writer **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_create: out is NULL");
    *out = NULL;
    if (!path || !*path) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_create: empty path");
    if (flags & ~(unsigned)QK_ST_WRITE_REPLACE)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_create: unknown flags 0x%x", flags);
    qk_status st = qk_io_check_dest("qk_st_writer_create", path, flags);
    if (st != QK_OK) return st;
    qk_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = qk_io_strdup(path))) {
        free(w);
        return qk_fail(QK_ERR_NOMEM, "qk_st_writer_create: out of memory");
    }
    w->flags = flags;
    w->fd = -1;
    *out = w;
    return QK_OK;
}

void qk_st_writer_destroy(qk_st_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp && !w->done) unlink(w->tmp);
    for (size_t i = 0; i < w->n; i++) {
        free(w->d[i].name);
        free(w->d[i].shape);
    }
    free(w->d);
    free(w->slot);
    qk_msgs_free(&w->meta_key);
    qk_msgs_free(&w->meta_val);
    free(w->tmp);
    free(w->path);
    free(w);
}

static bool qk_w_valid_string(const char *s)
{
    size_t n = strlen(s);
    return qk_utf8_check((const uint8_t *)s, n) == n;
}

qk_status qk_st_writer_set_metadata(qk_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_set_metadata: NULL argument");
    if (w->started || w->done)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_set_metadata: the header is already written");
    if (!qk_w_valid_string(key) || !qk_w_valid_string(value))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_set_metadata: key or value is not UTF-8");
    for (size_t i = 0; i < w->meta_key.n; i++)
        if (!strcmp(w->meta_key.v[i], key)) {
            char *v = qk_io_strdup(value);
            if (!v) return qk_fail(QK_ERR_NOMEM, "qk_st_writer_set_metadata: out of memory");
            free(w->meta_val.v[i]);
            w->meta_val.v[i] = v;
            return QK_OK;
        }
    size_t before = w->meta_key.n;
    qk_msgs_add(&w->meta_key, "%s", key);
    qk_msgs_add(&w->meta_val, "%s", value);
    if (w->meta_key.n != before + 1 || w->meta_val.n != before + 1)
        return qk_fail(QK_ERR_NOMEM, "qk_st_writer_set_metadata: out of memory");
    return QK_OK;
}

/* names are found by hash, so that declaring and writing n tensors is linear in n */
static size_t qk_w_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)h;
}

static qk_st_decl *qk_w_find(qk_st_writer *w, const char *name)
{
    if (!w->nslot) return NULL;
    for (size_t i = qk_w_hash(name) & (w->nslot - 1);; i = (i + 1) & (w->nslot - 1)) {
        if (!w->slot[i]) return NULL;
        if (!strcmp(w->d[w->slot[i] - 1].name, name)) return &w->d[w->slot[i] - 1];
    }
}

/* indexes w->d[idx] (a new name); grows the table to keep it at most half full */
static bool qk_w_index(qk_st_writer *w, size_t idx)
{
    if (2 * (w->n + 1) > w->nslot) {
        size_t ns = w->nslot ? 2 * w->nslot : 64;
        size_t *t = calloc(ns, sizeof *t);
        if (!t) return false;
        free(w->slot);
        w->slot = t;
        w->nslot = ns;
        for (size_t k = 0; k < w->n; k++) {
            if (k == idx) continue;
            size_t i = qk_w_hash(w->d[k].name) & (ns - 1);
            while (t[i]) i = (i + 1) & (ns - 1);
            t[i] = k + 1;
        }
    }
    size_t i = qk_w_hash(w->d[idx].name) & (w->nslot - 1);
    while (w->slot[i]) i = (i + 1) & (w->nslot - 1);
    w->slot[i] = idx + 1;
    return true;
}

qk_status qk_st_writer_declare(qk_st_writer *w, const char *name, const char *dtype_name,
                               int32_t ndim, const int64_t *shape, const void *data)
{
    static const char who[] = "qk_st_writer_declare";
    if (!w || !name || !dtype_name || (ndim > 0 && !shape))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    if (w->started || w->done)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT " declared after the first write",
                       who, name);
    if (!*name || !strcmp(name, "__metadata__") || !qk_w_valid_string(name))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT " is not a valid tensor name "
                       "(empty, \"__metadata__\" or not UTF-8)", who, name);
    const qk_st_dtype_desc *dt = qk_st_dtype_lookup(dtype_name);
    if (!dt)
        return qk_fail(QK_ERR_DTYPE, "%s: " QK_NAME_FMT ": unknown dtype \"%.40s\"", who, name,
                       dtype_name);
    if (ndim < 0 || ndim > QK_ST_MAX_DIMS_WRITE)
        return qk_fail(QK_ERR_SHAPE, "%s: " QK_NAME_FMT ": ndim %d outside [0, %d]", who, name,
                       ndim, QK_ST_MAX_DIMS_WRITE);
    uint64_t numel = 1, nbytes;
    bool zero = false;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return qk_fail(QK_ERR_SHAPE, "%s: " QK_NAME_FMT ": dim %d is negative", who, name, i);
        if (shape[i] == 0) zero = true;
    }
    for (int32_t i = 0; i < ndim; i++)
        if (shape[i] && (!qk_ckd_mul_u64(numel, (uint64_t)shape[i], &numel) || numel > INT64_MAX))
            return qk_fail(QK_ERR_SHAPE, "%s: " QK_NAME_FMT ": element count overflows", who, name);
    if (zero) numel = 0;
    if (!qk_ckd_mul_u64(numel, dt->size, &nbytes) || nbytes > (uint64_t)INT64_MAX)
        return qk_fail(QK_ERR_SHAPE, "%s: " QK_NAME_FMT ": byte size overflows", who, name);
    if (qk_w_find(w, name))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT " is already declared", who, name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        qk_st_decl *d = realloc(w->d, cap * sizeof *d);
        if (!d) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
        w->d = d;
        w->cap = cap;
    }
    qk_st_decl *d = &w->d[w->n];
    memset(d, 0, sizeof *d);
    d->name = qk_io_strdup(name);
    if (ndim) d->shape = malloc((size_t)ndim * sizeof *d->shape);
    if (!d->name || (ndim && !d->shape)) {
        free(d->name);
        free(d->shape);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    if (ndim) memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
    d->dt = dt;
    d->ndim = ndim;
    d->nbytes = nbytes;
    d->src = data;
    if (!qk_w_index(w, w->n)) {
        free(d->name);
        free(d->shape);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    w->n++;
    return QK_OK;
}

qk_status qk_st_writer_add_tensor(qk_st_writer *w, const char *name, const qk_tensor *t)
{
    if (!t) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_add_tensor: t is NULL");
    if (t->ndim < 1 || t->ndim > QK_MAX_DIMS)
        return qk_fail(QK_ERR_SHAPE, "qk_st_writer_add_tensor: " QK_NAME_FMT ": ndim %d", name ? name : "",
                       t->ndim);
    int64_t expect = 1;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] > 1 && t->stride[d] != expect)
            return qk_fail(QK_ERR_LAYOUT, "qk_st_writer_add_tensor: " QK_NAME_FMT " is not contiguous",
                           name ? name : "");
        /* saturated: a count past INT64_MAX is refused by declare's own check */
        expect = qk_sat_mul_i64(expect, t->shape[d] > 0 ? t->shape[d] : 1);
    }
    const char *dn = qk_dtype_name(t->dtype);
    if (t->dtype == QK_DTYPE_INVALID || !qk_st_dtype_lookup(dn))
        return qk_fail(QK_ERR_DTYPE, "qk_st_writer_add_tensor: invalid dtype");
    return qk_st_writer_declare(w, name, dn, t->ndim, t->shape, t->data);
}

static int qk_w_cmp_layout(const void *a, const void *b)
{
    const qk_st_decl *const *x = a, *const *y = b;
    if ((*x)->dt->size != (*y)->dt->size) return (*x)->dt->size > (*y)->dt->size ? -1 : 1;
    return *x < *y ? -1 : (*x > *y);   /* declaration order (array order) */
}

/* Lays the tensors out, writes the header into a new temporary file. */
static qk_status qk_w_start(qk_st_writer *w)
{
    static const char *who = qk_w_who;
    if (w->started) return QK_OK;
    if (w->failed) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: an earlier call failed", who);
    qk_st_decl **order = malloc((w->n ? w->n : 1) * sizeof *order);
    if (!order) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    for (size_t i = 0; i < w->n; i++) order[i] = &w->d[i];
    qsort(order, w->n, sizeof *order, qk_w_cmp_layout);
    uint64_t pos = 0;
    json_t *root = json_object();
    qk_status st = root ? QK_OK : qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    if (st == QK_OK && w->meta_key.n) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m)) st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
        for (size_t i = 0; st == QK_OK && i < w->meta_key.n; i++)
            if (json_object_set_new(m, w->meta_key.v[i], json_string(w->meta_val.v[i])))
                st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    for (size_t i = 0; st == QK_OK && i < w->n; i++) {
        qk_st_decl *d = order[i];
        d->off = pos;
        if (d->nbytes > (uint64_t)INT64_MAX - pos) {
            st = qk_fail(QK_ERR_SHAPE, "%s: the data buffer would exceed 2^63 bytes", who);
            break;
        }
        pos += d->nbytes;
        json_t *e = json_object(), *sh = json_array(), *off = json_array();
        if (!e || !sh || !off) { json_decref(e); json_decref(sh); json_decref(off); st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", who); break; }
        for (int32_t k = 0; k < d->ndim; k++) json_array_append_new(sh, json_integer(d->shape[k]));
        json_array_append_new(off, json_integer((json_int_t)d->off));
        json_array_append_new(off, json_integer((json_int_t)(d->off + d->nbytes)));
        json_object_set_new(e, "dtype", json_string(d->dt->name));
        json_object_set_new(e, "shape", sh);
        json_object_set_new(e, "data_offsets", off);
        if (json_object_set_new(root, d->name, e)) st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    }
    free(order);
    char *text = NULL;
    if (st == QK_OK) {
        text = json_dumps(root, JSON_COMPACT);
        if (!text) st = qk_fail(QK_ERR_NOMEM, "%s: cannot encode the header", who);
    }
    json_decref(root);
    if (st != QK_OK) { free(text); w->failed = true; return st; }
    size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8;
    uint64_t end;   /* the file's size, as an off_t */
    if (!qk_ckd_add_u64(8 + (uint64_t)padded, pos, &end) || end > (uint64_t)INT64_MAX) {
        free(text);
        w->failed = true;
        return qk_fail(QK_ERR_SHAPE, "%s: the file would exceed 2^63 bytes", who);
    }
    uint8_t *hdr = malloc(8 + padded);
    if (!hdr) { free(text); w->failed = true; return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who); }
    uint64_t N = padded;
    for (int i = 0; i < 8; i++) hdr[i] = (uint8_t)(N >> (8 * i));
    memcpy(hdr + 8, text, len);
    memset(hdr + 8 + len, ' ', padded - len);
    free(text);
    st = qk_io_check_dest(who, w->path, w->flags);
    if (st == QK_OK) st = qk_io_tmp_create(who, w->path, &w->tmp, &w->fd);
    if (st == QK_OK) st = qk_io_pwrite_all(who, w->path, w->fd, hdr, 8 + padded, 0);
    free(hdr);
    if (st != QK_OK) { w->failed = true; return st; }
    w->data_start = 8 + padded;
    w->started = true;
    return QK_OK;
}

static qk_status qk_w_append(qk_st_writer *w, qk_st_decl *d, const void *data, size_t n)
{
    if (n > d->nbytes - d->written) {
        w->failed = true;
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: " QK_NAME_FMT ": %zu more bytes would exceed its "
                       "%llu bytes (%llu already written)", qk_w_who, d->name, n,
                       (unsigned long long)d->nbytes, (unsigned long long)d->written);
    }
    if (!n) return QK_OK;
    qk_status st = qk_io_pwrite_all(qk_w_who, w->path, w->fd, data, n, w->data_start + d->off + d->written);
    if (st != QK_OK) { w->failed = true; return st; }
    d->written += n;
    return QK_OK;
}

qk_status qk_st_writer_write(qk_st_writer *w, const char *name, const void *data, size_t n)
{
    if (!w || !name || (!data && n))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_write: NULL argument");
    if (w->done) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_write: already committed");
    qk_st_decl *d = qk_w_find(w, name);
    if (!d)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_write: " QK_NAME_FMT " was not declared",
                       name);
    if (d->src)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_write: " QK_NAME_FMT " was declared "
                       "with its data", name);
    qk_status st = qk_w_start(w);
    if (st != QK_OK) return st;
    return qk_w_append(w, d, data, n);
}

qk_status qk_st_writer_commit(qk_st_writer *w)
{
    if (!w) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_commit: NULL writer");
    if (w->done) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_commit: already committed");
    qk_status st = qk_w_start(w);
    if (st != QK_OK) return st;
    for (size_t i = 0; i < w->n; i++) {
        qk_st_decl *d = &w->d[i];
        if (d->src && d->written == 0 && d->nbytes) {
            st = qk_w_append(w, d, d->src, (size_t)d->nbytes);
            if (st != QK_OK) return st;
        }
        if (d->written != d->nbytes) {
            w->failed = true;
            return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_writer_commit: " QK_NAME_FMT " has %llu of "
                           "its %llu bytes", d->name, (unsigned long long)d->written,
                           (unsigned long long)d->nbytes);
        }
    }
    int fd = w->fd;
    w->fd = -1;
    st = qk_io_place(qk_w_who, fd, w->tmp, w->path, w->flags);
    w->done = true;   /* placed, or tmp removed by qk_io_place */
    if (st != QK_OK) w->failed = true;
    return st;
}
