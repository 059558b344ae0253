/* safetensors reader: maps a file, validates every rule of checkpoint.md (header length,
 * UTF-8, one JSON object without duplicates, exact entries, known dtypes, dims, offsets
 * that tile the data buffer exactly, string metadata) and hands out zero-copy views.
 * Every reject is QK_ERR_FORMAT naming the file, the tensor and the rule. The JSON is
 * parsed by jansson; nothing here reads outside [base, base + size). */
#define _GNU_SOURCE
#include "io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const qk_st_dtype_desc qk_st_dtypes[] = {
    {"BOOL", 1, QK_DTYPE_INVALID}, {"U8", 1, QK_DTYPE_U8},     {"I8", 1, QK_DTYPE_I8},
    {"I16", 2, QK_DTYPE_INVALID},  {"U16", 2, QK_DTYPE_INVALID}, {"I32", 4, QK_DTYPE_I32},
    {"U32", 4, QK_DTYPE_INVALID},  {"I64", 8, QK_DTYPE_I64},   {"U64", 8, QK_DTYPE_INVALID},
    {"F16", 2, QK_DTYPE_F16},      {"BF16", 2, QK_DTYPE_BF16}, {"F32", 4, QK_DTYPE_F32},
    {"F64", 8, QK_DTYPE_INVALID},  {"F8_E4M3", 1, QK_DTYPE_F8_E4M3},
    {"F8_E5M2", 1, QK_DTYPE_F8_E5M2}, {"F8_E8M0", 1, QK_DTYPE_E8M0},
};

const qk_st_dtype_desc *qk_st_dtype_lookup(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof qk_st_dtypes / sizeof qk_st_dtypes[0]; i++)
        if (!strcmp(name, qk_st_dtypes[i].name)) return &qk_st_dtypes[i];
    return NULL;
}

size_t qk_st_dtype_size(const char *name)
{
    const qk_st_dtype_desc *d = qk_st_dtype_lookup(name);
    return d ? d->size : 0;
}

qk_dtype qk_st_dtype_of(const char *name)
{
    const qk_st_dtype_desc *d = qk_st_dtype_lookup(name);
    return d ? d->dtype : QK_DTYPE_INVALID;
}

/* ---- freeing ---- */
static void qk_st_free_contents(qk_st_file *f)
{
    for (size_t i = 0; i < f->ntensors; i++) {
        free(f->t[i].name);
        free(f->t[i].shape);
    }
    free(f->t);
    free(f->by_name);
    for (size_t i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
    f->t = NULL;
    f->by_name = NULL;
    f->meta_key = f->meta_val = NULL;
    f->ntensors = f->nmeta = 0;
}

void qk_st_close(qk_st_file *f)
{
    if (!f) return;
    qk_st_free_contents(f);
    if (f->mapped) {
        munmap((void *)f->base, f->size);
        qk_io_unregister_input(f->dev, f->ino);
    }
    free(f->path);
    free(f);
}

/* ---- validation ---- */
#define FMT_FAIL(...) qk_fail(QK_ERR_FORMAT, __VA_ARGS__)

static int qk_st_cmp_offsets(const void *a, const void *b)
{
    const qk_st_rec *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

typedef struct { const char *name; size_t idx; } qk_name_idx;
static int qk_st_cmp_names(const void *a, const void *b)
{
    return strcmp(((const qk_name_idx *)a)->name, ((const qk_name_idx *)b)->name);
}

/* Formats a shape "[a, b]" (cut when long). */
static void qk_st_shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t d = 0; d < ndim && k + 24 < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k + 24 >= n && ndim > 0) k += (size_t)snprintf(buf + k, n - k, ", ...");
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Parses one tensor entry into r (name already set). */
static qk_status qk_st_parse_entry(const char *path, const char *name, json_t *e, qk_st_rec *r)
{
    if (!json_is_object(e))
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": entry is not a JSON object "
                        "(rule: each tensor maps to {dtype, shape, data_offsets})", path, name);
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return FMT_FAIL("%s: tensor " QK_NAME_FMT ": unexpected key \"%.40s\" (rule: an entry "
                            "holds exactly dtype, shape and data_offsets)", path, name, key);
    }
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *off = json_object_get(e, "data_offsets");
    const char *missing = !dt ? "dtype" : !sh ? "shape" : !off ? "data_offsets" : NULL;
    if (missing)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": missing \"%s\" (rule: an entry holds exactly "
                        "dtype, shape and data_offsets)", path, name, missing);
    if (!json_is_string(dt))
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": dtype is not a JSON string "
                        "(rule: entry fields must have the right JSON types)", path, name);
    r->dt = qk_st_dtype_lookup(json_string_value(dt));
    if (!r->dt)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": unknown dtype \"%.40s\" (rule: dtype must be "
                        "one of BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, "
                        "F8_E4M3, F8_E5M2, F8_E8M0)", path, name, json_string_value(dt));
    if (!json_is_array(sh))
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": shape is not a JSON array "
                        "(rule: entry fields must have the right JSON types)", path, name);
    size_t nd = json_array_size(sh);
    if (nd > INT32_MAX / 2)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": shape has %zu dims (rule: too many dims)", path,
                        name, nd);
    r->ndim = (int32_t)nd;
    if (nd) {
        r->shape = malloc(nd * sizeof *r->shape);
        if (!r->shape) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", path);
    }
    bool zero = false;
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(sh, d);
        if (!json_is_integer(x))
            return FMT_FAIL("%s: tensor " QK_NAME_FMT ": dim %zu of shape is not an integer "
                            "(rule: dims must be non-negative integers)", path, name, d);
        json_int_t v2 = json_integer_value(x);
        if (v2 < 0)
            return FMT_FAIL("%s: tensor " QK_NAME_FMT ": dim %zu of shape is %lld "
                            "(rule: dims must be non-negative integers)", path, name, d,
                            (long long)v2);
        r->shape[d] = (int64_t)v2;
        if (v2 == 0) zero = true;
    }
    /* the product of the non-zero dims must fit int64 even when a zero dim makes the count
       0: row-major strides are such products */
    uint64_t numel = 1;
    for (size_t d = 0; d < nd; d++)
        if (r->shape[d] && (!qk_ckd_mul_u64(numel, (uint64_t)r->shape[d], &numel) || numel > INT64_MAX))
            return FMT_FAIL("%s: tensor " QK_NAME_FMT ": the %s of its shape overflows 64 bits "
                            "(rule: element count must fit 64 bits)", path, name,
                            zero ? "product of the non-zero dims" : "element count");
    if (zero) numel = 0;
    r->numel = numel;
    if (!qk_ckd_mul_u64(numel, r->dt->size, &r->nbytes))
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": element count x %s size (%zu bytes) overflows "
                        "64 bits (rule: element count must fit 64 bits)", path, name, r->dt->name,
                        r->dt->size);
    if (!json_is_array(off) || json_array_size(off) != 2)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": data_offsets is not an array of two integers "
                        "(rule: entry fields must have the right JSON types)", path, name);
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < 0)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": data_offsets must be two non-negative integers "
                        "(rule: entry fields must have the right JSON types)", path, name);
    r->begin = (uint64_t)json_integer_value(b);
    r->end = (uint64_t)json_integer_value(en);
    if (r->begin > r->end)
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": data_offsets [%llu, %llu] has begin > end "
                        "(rule: begin must not exceed end)", path, name,
                        (unsigned long long)r->begin, (unsigned long long)r->end);
    if (r->end - r->begin != r->nbytes) {
        char s[160];
        qk_st_shape_text(r->shape, r->ndim, s, sizeof s);
        return FMT_FAIL("%s: tensor " QK_NAME_FMT ": data_offsets [%llu, %llu] span %llu bytes but "
                        "%s %s needs %llu (rule: end - begin must equal elements x dtype size)",
                        path, name, (unsigned long long)r->begin, (unsigned long long)r->end,
                        (unsigned long long)(r->end - r->begin), r->dt->name, s,
                        (unsigned long long)r->nbytes);
    }
    return QK_OK;
}

/* The JSON token text jansson quotes in "... near 'TOKEN'". */
static void qk_json_near(const char *text, char *out, size_t n)
{
    out[0] = 0;
    const char *p = strstr(text, "near '");
    if (!p) return;
    p += 6;
    const char *q = strrchr(p, '\'');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    if (len >= n) len = n - 1;
    memcpy(out, p, len);
    out[len] = 0;
}

static qk_status qk_st_parse(qk_st_file *f)
{
    const char *path = f->path;
    if (f->size < 8)
        return FMT_FAIL("%s: file is %zu bytes, shorter than 8 (rule: a file starts with an 8-byte "
                        "header length)", path, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | f->base[i];
    if (n > QK_ST_MAX_HEADER)
        return FMT_FAIL("%s: header length %llu exceeds the 100 MB limit (rule: header length at "
                        "most 100 MB)", path, (unsigned long long)n);
    if (n > f->size - 8)
        return FMT_FAIL("%s: header length %llu is larger than the %zu bytes after it "
                        "(rule: the header must lie inside the file)", path, (unsigned long long)n,
                        f->size - 8);
    f->header_n = n;
    const uint8_t *hdr = f->base + 8;
    f->data = hdr + n;
    uint64_t bufsize = f->size - 8 - n;
    size_t bad = qk_utf8_check(hdr, (size_t)n);
    if (bad != n)
        return FMT_FAIL("%s: header is not valid UTF-8 (byte %zu of the header is 0x%02x) "
                        "(rule: the header is UTF-8 JSON)", path, bad, hdr[bad]);
    json_error_t err;
    json_t *root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                              &err);
    if (!root) {
        if (json_error_code(&err) == json_error_duplicate_key) {
            char near[200];
            qk_json_near(err.text, near, sizeof near);
            return FMT_FAIL("%s: duplicate key %s in the header at byte %d (rule: tensor names "
                            "and entry keys must be unique)", path, near, err.position);
        }
        return FMT_FAIL("%s: header is not valid JSON: %s, at byte %d (rule: the header is one "
                        "JSON object)", path, err.text, err.position);
    }
    if (!json_is_object(root)) {
        const char *kind = json_is_array(root) ? "array" : "scalar";
        json_decref(root);
        return FMT_FAIL("%s: header is a JSON %s, not an object (rule: the header is one JSON "
                        "object)", path, kind);
    }
    qk_status st = QK_OK;
    size_t cap = json_object_size(root);
    f->t = calloc(cap ? cap : 1, sizeof *f->t);
    if (!f->t) { json_decref(root); return qk_fail(QK_ERR_NOMEM, "%s: out of memory", path); }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                st = FMT_FAIL("%s: __metadata__ is not a JSON object (rule: metadata maps strings "
                              "to strings)", path);
                break;
            }
            size_t m = json_object_size(val);
            f->meta_key = calloc(m ? m : 1, sizeof(char *));
            f->meta_val = calloc(m ? m : 1, sizeof(char *));
            if (!f->meta_key || !f->meta_val) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", path); break; }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    st = FMT_FAIL("%s: metadata value for key " QK_NAME_FMT " is not a string "
                                  "(rule: metadata values must be strings)", path, mk);
                    break;
                }
                f->meta_key[f->nmeta] = qk_io_strdup(mk);
                f->meta_val[f->nmeta] = qk_io_strdup(json_string_value(mv));
                f->nmeta++;
                if (!f->meta_key[f->nmeta - 1] || !f->meta_val[f->nmeta - 1]) {
                    st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", path);
                    break;
                }
            }
            if (st != QK_OK) break;
            continue;
        }
        qk_st_rec *r = &f->t[f->ntensors++];
        r->name = qk_io_strdup(key);
        if (!r->name) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", path); break; }
        st = qk_st_parse_entry(path, key, val, r);
        if (st != QK_OK) break;
        if (r->end > bufsize) {
            st = FMT_FAIL("%s: tensor " QK_NAME_FMT ": data_offsets [%llu, %llu] run past the end of "
                          "the %llu-byte data buffer (rule: tensors must lie inside the buffer)",
                          path, key, (unsigned long long)r->begin, (unsigned long long)r->end,
                          (unsigned long long)bufsize);
            break;
        }
    }
    json_decref(root);
    if (st != QK_OK) return st;

    /* tiling: sorted by offsets, each tensor begins where the previous one ended */
    qsort(f->t, f->ntensors, sizeof *f->t, qk_st_cmp_offsets);
    uint64_t pos = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < f->ntensors; i++) {
        const qk_st_rec *r = &f->t[i];
        if (r->begin < pos)
            return FMT_FAIL("%s: tensor " QK_NAME_FMT " begins at %llu, inside tensor " QK_NAME_FMT
                            " which ends at %llu (rule: tensors must not overlap)", path, r->name,
                            (unsigned long long)r->begin, prev, (unsigned long long)pos);
        if (r->begin > pos)
            return FMT_FAIL("%s: hole of %llu bytes in the data buffer before tensor " QK_NAME_FMT
                            " (bytes [%llu, %llu) belong to no tensor) (rule: tensors must leave no "
                            "holes)", path, (unsigned long long)(r->begin - pos), r->name,
                            (unsigned long long)pos, (unsigned long long)r->begin);
        if (r->end > pos || !prev) prev = r->name;
        pos = r->end;
    }
    if (pos != bufsize) {
        if (prev)
            return FMT_FAIL("%s: %llu bytes of the data buffer follow the last tensor " QK_NAME_FMT
                            " (rule: tensors must cover the buffer exactly to its end)", path,
                            (unsigned long long)(bufsize - pos), prev);
        return FMT_FAIL("%s: the header names no tensor but the data buffer holds %llu bytes "
                        "(rule: tensors must cover the buffer exactly to its end)", path,
                        (unsigned long long)bufsize);
    }
    size_t nt = f->ntensors ? f->ntensors : 1;
    f->by_name = malloc(nt * sizeof *f->by_name);
    qk_name_idx *tmp = malloc(nt * sizeof *tmp);
    if (!f->by_name || !tmp) {
        free(tmp);
        return qk_fail(QK_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < f->ntensors; i++) {
        tmp[i].name = f->t[i].name;
        tmp[i].idx = i;
    }
    qsort(tmp, f->ntensors, sizeof *tmp, qk_st_cmp_names);
    for (size_t i = 0; i < f->ntensors; i++) f->by_name[i] = tmp[i].idx;
    free(tmp);
    return QK_OK;
}

static qk_status qk_st_finish_open(qk_st_file *f, qk_st_file **out)
{
    qk_status st = qk_st_parse(f);
    if (st != QK_OK) {
        qk_st_close(f);
        return st;
    }
    *out = f;
    qk_clear_error();
    return QK_OK;
}

qk_status qk_st_open_memory(const void *buf, size_t n, const char *label, qk_st_file **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_open_memory: out is NULL");
    *out = NULL;
    if (!buf && n) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_open_memory: buf is NULL");
    qk_st_file *f = calloc(1, sizeof *f);
    if (!f) return qk_fail(QK_ERR_NOMEM, "qk_st_open_memory: out of memory");
    f->path = qk_io_strdup(label ? label : "<memory>");
    if (!f->path) { free(f); return qk_fail(QK_ERR_NOMEM, "qk_st_open_memory: out of memory"); }
    static const uint8_t empty[1];
    f->base = buf ? buf : empty;
    f->size = n;
    return qk_st_finish_open(f, out);
}

qk_status qk_st_open(const char *path, qk_st_file **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_open: out is NULL");
    *out = NULL;
    if (!path) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_open: path is NULL");
    int fd;
    struct stat sb;
    qk_status os = qk_io_open_regular("qk_st_open", path, &fd, &sb);
    if (os != QK_OK) return os;
    if ((uint64_t)sb.st_size < 8) {
        close(fd);
        return FMT_FAIL("%s: file is %lld bytes, shorter than 8 (rule: a file starts with an 8-byte "
                        "header length)", path, (long long)sb.st_size);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return qk_fail(QK_ERR_IO, "qk_st_open: %s is too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return qk_fail(QK_ERR_IO, "qk_st_open: cannot map %s: %s", path, strerror(e));
    qk_st_file *f = calloc(1, sizeof *f);
    if (f) f->path = qk_io_strdup(path);
    if (!f || !f->path) {
        free(f);
        munmap(m, size);
        return qk_fail(QK_ERR_NOMEM, "qk_st_open: out of memory");
    }
    f->base = m;
    f->size = size;
    f->mapped = true;
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    qk_io_register_input(f->dev, f->ino);
    return qk_st_finish_open(f, out);
}

/* ---- queries ---- */
const char *qk_st_path(const qk_st_file *f) { return f ? f->path : NULL; }
uint64_t qk_st_header_size(const qk_st_file *f) { return f ? f->header_n : 0; }
size_t qk_st_count(const qk_st_file *f) { return f ? f->ntensors : 0; }

void qk_st_fill_info(const qk_st_file *f, size_t i, qk_st_info *info)
{
    const qk_st_rec *r = &f->t[i];
    info->name = r->name;
    info->dtype_name = r->dt->name;
    info->dtype = r->dt->dtype;
    info->elem_size = r->dt->size;
    info->ndim = r->ndim;
    info->shape = r->shape;
    info->numel = r->numel;
    info->nbytes = r->nbytes;
    info->file_offset = 8 + f->header_n + r->begin;
    info->data = f->data + r->begin;
    info->file = f;
}

qk_status qk_st_info_at(const qk_st_file *f, size_t i, qk_st_info *info)
{
    if (!f || !info) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_info_at: NULL argument");
    if (i >= f->ntensors)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_info_at: index %zu out of range (%zu tensors)",
                       i, f->ntensors);
    qk_st_fill_info(f, i, info);
    return QK_OK;
}

long qk_st_lookup(const qk_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return (long)f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

bool qk_st_has(const qk_st_file *f, const char *name)
{
    return f && name && qk_st_lookup(f, name) >= 0;
}

qk_status qk_st_find(const qk_st_file *f, const char *name, qk_st_info *info)
{
    if (!f || !name || !info) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_find: NULL argument");
    long i = qk_st_lookup(f, name);
    if (i < 0)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_find: %s has no tensor " QK_NAME_FMT, f->path,
                       name);
    qk_st_fill_info(f, (size_t)i, info);
    return QK_OK;
}

qk_status qk_st_info_tensor(const qk_st_info *info, qk_tensor *view)
{
    if (!info || !view) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_info_tensor: NULL argument");
    if (info->dtype == QK_DTYPE_INVALID)
        return qk_fail(QK_ERR_DTYPE, "tensor " QK_NAME_FMT " has dtype %s, which qk_tensor cannot "
                       "describe (use qk_st_info's data, dtype_name and elem_size)", info->name,
                       info->dtype_name);
    if (info->ndim > QK_MAX_DIMS)
        return qk_fail(QK_ERR_SHAPE, "tensor " QK_NAME_FMT " has %d dims, more than the %d a "
                       "qk_tensor holds", info->name, info->ndim, QK_MAX_DIMS);
    static const int64_t one[1] = {1};
    *view = qk_tensor_make((void *)(uintptr_t)info->data, info->dtype, info->ndim ? info->ndim : 1,
                           info->ndim ? info->shape : one);
    return QK_OK;
}

qk_status qk_st_tensor(const qk_st_file *f, const char *name, qk_tensor *view)
{
    qk_st_info info;
    qk_status st = qk_st_find(f, name, &info);
    if (st != QK_OK) return st;
    return qk_st_info_tensor(&info, view);
}

size_t qk_st_metadata_count(const qk_st_file *f) { return f ? f->nmeta : 0; }

qk_status qk_st_metadata_at(const qk_st_file *f, size_t i, const char **key, const char **value)
{
    if (!f || i >= f->nmeta)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_metadata_at: index out of range");
    if (key) *key = f->meta_key[i];
    if (value) *value = f->meta_val[i];
    return QK_OK;
}

const char *qk_st_metadata_get(const qk_st_file *f, const char *key)
{
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
    return NULL;
}

void qk_st_release_pages(const qk_st_file *f, const qk_st_info *info)
{
    if (!f || !info || !f->mapped || !info->nbytes || info->file != f) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t lo = (uintptr_t)info->data, hi = lo + (uintptr_t)info->nbytes;
    lo &= ~(uintptr_t)(pg - 1);
    hi = (hi + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    uintptr_t base = (uintptr_t)f->base, top = (base + f->size + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    if (lo < base) lo = base;
    if (hi > top) hi = top;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
