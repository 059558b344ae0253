/* ModelSlim W8A8_MXFP8 folders: quant_model_description.json (parsed with jansson and
 * validated), the weights (one file or shards with an index), and the cross-check of the
 * description against the tensors in both directions. */
#define _GNU_SOURCE
#include "io_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define QK_MS_DESC_FILE "quant_model_description.json"
#define QK_MS_WEIGHTS "quant_model_weights.safetensors"
#define QK_MS_INDEX "quant_model_weights.safetensors.index.json"
/* msModelSlim's alternative names, accepted when the usual ones are absent */
#define QK_MS_DESC_ALT "quant_model_description_w8a8_mxfp8.json"
#define QK_MS_WEIGHTS_ALT "quant_model_weight_w8a8_mxfp8.safetensors"
#define QK_MS_INDEX_ALT "quant_model_weight_w8a8_mxfp8.safetensors.index.json"

struct qk_ms_desc {
    char *quant_type, *version;
    int64_t group_size;
    size_t n;
    char **name, **qtype;     /* in file order */
    size_t *by_name;          /* sorted */
};

struct qk_ms_model {
    qk_ms_desc *desc;
    qk_st_set *set;
    qk_msgs problems;
};

void qk_ms_desc_free(qk_ms_desc *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->name[i]);
        free(d->qtype[i]);
    }
    free(d->name);
    free(d->qtype);
    free(d->by_name);
    free(d->quant_type);
    free(d->version);
    free(d);
}

typedef struct { const char *name; size_t idx; } qk_ms_ni;
static int qk_ms_cmp_ni(const void *a, const void *b)
{
    return strcmp(((const qk_ms_ni *)a)->name, ((const qk_ms_ni *)b)->name);
}

/* the description's own keys (checkpoint.md): the five it always has, and the KV-cache /
   attention quantization keys msModelSlim may add; none of them names a tensor */
static bool qk_ms_reserved(const char *k)
{
    return !strcmp(k, "model_quant_type") || !strcmp(k, "version") || !strcmp(k, "group_size") ||
           !strcmp(k, "metadata") || !strcmp(k, "optional") || !strcmp(k, "kv_cache_type") ||
           !strcmp(k, "kv_quant_type") || !strcmp(k, "fa_quant_type");
}

qk_status qk_ms_desc_parse(const void *json, size_t n, const char *label, qk_ms_desc **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_desc_parse: out is NULL");
    *out = NULL;
    if (!json && n) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_desc_parse: json is NULL");
    if (!label) label = QK_MS_DESC_FILE;
    json_error_t err;
    json_t *root = json_loadb(json ? json : "", n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return qk_fail(QK_ERR_FORMAT, "%s: not valid JSON: %s, at byte %d (rule: the description is "
                       "one JSON object without duplicate keys)", label, err.text, err.position);
    qk_status st = QK_OK;
    qk_ms_desc *d = calloc(1, sizeof *d);
    if (!d) { json_decref(root); return qk_fail(QK_ERR_NOMEM, "%s: out of memory", label); }
    if (!json_is_object(root)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: the description is not a JSON object", label);
        goto done;
    }
    json_t *qt = json_object_get(root, "model_quant_type"), *ver = json_object_get(root, "version"),
           *gs = json_object_get(root, "group_size");
    if (!json_is_string(qt)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: \"model_quant_type\" is %s (rule: a string such as "
                     "\"W8A8_MXFP8\")", label, qt ? "not a string" : "missing");
        goto done;
    }
    if (ver && !json_is_string(ver)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: \"version\" is not a string (rule: e.g. \"1.0.0\")", label);
        goto done;
    }
    if (gs && (!json_is_integer(gs) || json_integer_value(gs) <= 0)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: \"group_size\" is not a positive integer", label);
        goto done;
    }
    d->quant_type = qk_io_strdup(json_string_value(qt));
    d->version = qk_io_strdup(ver ? json_string_value(ver) : "");
    d->group_size = gs ? (int64_t)json_integer_value(gs) : 0;
    if (!d->quant_type || !d->version) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label); goto done; }
    if (!strcmp(d->quant_type, "W8A8_MXFP8") && gs && d->group_size != QK_MX_BLOCK) {
        st = qk_fail(QK_ERR_FORMAT, "%s: group_size is %lld but W8A8_MXFP8 uses blocks of %d", label,
                     (long long)d->group_size, QK_MX_BLOCK);
        goto done;
    }
    size_t m = json_object_size(root);
    d->name = calloc(m ? m : 1, sizeof(char *));
    d->qtype = calloc(m ? m : 1, sizeof(char *));
    d->by_name = calloc(m ? m : 1, sizeof(size_t));
    if (!d->name || !d->qtype || !d->by_name) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label); goto done; }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (qk_ms_reserved(k)) continue;
        if (!json_is_string(v) || !*json_string_value(v)) {
            st = qk_fail(QK_ERR_FORMAT, "%s: entry " QK_NAME_FMT " is not a non-empty string (rule: "
                         "each tensor maps to its quantization type, e.g. \"W8A8_MXFP8\" or "
                         "\"FLOAT\")", label, k);
            goto done;
        }
        d->name[d->n] = qk_io_strdup(k);
        d->qtype[d->n] = qk_io_strdup(json_string_value(v));
        d->n++;
        if (!d->name[d->n - 1] || !d->qtype[d->n - 1]) {
            st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label);
            goto done;
        }
    }
    qk_ms_ni *tmp = malloc((d->n ? d->n : 1) * sizeof *tmp);
    if (!tmp) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label); goto done; }
    for (size_t i = 0; i < d->n; i++) {
        tmp[i].name = d->name[i];
        tmp[i].idx = i;
    }
    qsort(tmp, d->n, sizeof *tmp, qk_ms_cmp_ni);
    for (size_t i = 0; i < d->n; i++) d->by_name[i] = tmp[i].idx;
    free(tmp);
done:
    json_decref(root);
    if (st != QK_OK) {
        qk_ms_desc_free(d);
        return st;
    }
    *out = d;
    return QK_OK;
}

qk_status qk_ms_desc_load(const char *path, qk_ms_desc **out)
{
    if (!out || !path) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_desc_load: NULL argument");
    *out = NULL;
    char *text;
    size_t n;
    qk_status st = qk_io_read_small(path, QK_ST_MAX_HEADER, &text, &n);
    if (st != QK_OK) return st;
    st = qk_ms_desc_parse(text, n, path, out);
    free(text);
    return st;
}

const char *qk_ms_desc_quant_type(const qk_ms_desc *d) { return d ? d->quant_type : NULL; }
const char *qk_ms_desc_version(const qk_ms_desc *d) { return d ? d->version : NULL; }
int64_t qk_ms_desc_group_size(const qk_ms_desc *d) { return d ? d->group_size : 0; }
size_t qk_ms_desc_count(const qk_ms_desc *d) { return d ? d->n : 0; }

qk_status qk_ms_desc_entry(const qk_ms_desc *d, size_t i, const char **name, const char **qtype)
{
    if (!d || i >= d->n) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_desc_entry: index out of range");
    if (name) *name = d->name[i];
    if (qtype) *qtype = d->qtype[i];
    return QK_OK;
}

const char *qk_ms_desc_lookup(const qk_ms_desc *d, const char *name)
{
    if (!d || !name) return NULL;
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(d->name[d->by_name[mid]], name);
        if (c == 0) return d->qtype[d->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- the folder ---- */
void qk_ms_close(qk_ms_model *m)
{
    if (!m) return;
    qk_ms_desc_free(m->desc);
    qk_st_set_close(m->set);
    qk_msgs_free(&m->problems);
    free(m);
}

static bool qk_ms_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* the folder's files can be looked up at all (a mode-000 folder, say, cannot) */
static qk_status qk_ms_access(const char *dir, const char *desc)
{
    struct stat sb;
    if (stat(desc, &sb) != 0 && errno != ENOENT)
        return qk_fail(QK_ERR_IO, "qk_ms_open: cannot look into %s: %s", dir,
                       errno == EACCES ? "permission denied" : strerror(errno));
    return QK_OK;
}

qk_status qk_ms_open(const char *dir, unsigned flags, qk_ms_model **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_open: out is NULL");
    *out = NULL;
    if (!dir) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_open: dir is NULL");
    if (flags & ~(unsigned)(QK_MS_LENIENT | QK_MS_ALLOW_EXTERNAL_SHARDS))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_ms_open: unknown flags 0x%x", flags);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qk_fail(QK_ERR_IO, "qk_ms_open: %s is not a folder", dir);
    qk_ms_model *m = calloc(1, sizeof *m);
    char *desc = qk_io_join(dir, QK_MS_DESC_FILE), *index = qk_io_join(dir, QK_MS_INDEX),
         *single = qk_io_join(dir, QK_MS_WEIGHTS);
    qk_status st = QK_OK;
    if (!m || !desc || !index || !single) {
        st = qk_fail(QK_ERR_NOMEM, "qk_ms_open: out of memory");
        goto done;
    }
    if ((st = qk_ms_access(dir, desc)) != QK_OK) goto done;
    /* msModelSlim's alternative names, each where the usual one is absent */
    static const char *const alt[3][2] = {{QK_MS_DESC_FILE, QK_MS_DESC_ALT},
                                          {QK_MS_INDEX, QK_MS_INDEX_ALT},
                                          {QK_MS_WEIGHTS, QK_MS_WEIGHTS_ALT}};
    char **paths[3] = {&desc, &index, &single};
    for (int i = 0; i < 3; i++) {
        if (qk_ms_exists(*paths[i])) continue;
        char *a = qk_io_join(dir, alt[i][1]);
        if (a && qk_ms_exists(a)) {
            free(*paths[i]);
            *paths[i] = a;
        } else {
            free(a);
        }
    }
    if (!qk_ms_exists(desc)) {
        st = qk_fail(QK_ERR_FORMAT, "qk_ms_open: %s has no " QK_MS_DESC_FILE " (nor " QK_MS_DESC_ALT
                     ") (rule: a ModelSlim folder holds the description and the weights)", dir);
        goto done;
    }
    /* the files read from the folder lie in it (the index's shards: qk_st_set_open) */
    const bool external = flags & QK_MS_ALLOW_EXTERNAL_SHARDS;
    char *real = NULL;
    if ((st = qk_io_check_inside("qk_ms_open", dir, desc, "description", external, &real)) != QK_OK)
        goto done;
    free(real);
    st = qk_ms_desc_load(desc, &m->desc);
    if (st != QK_OK) goto done;
    unsigned sflags = ((flags & QK_MS_LENIENT) ? QK_ST_SET_LENIENT : 0) |
                      (external ? QK_ST_SET_ALLOW_EXTERNAL_SHARDS : 0);
    const char *weights = qk_ms_exists(index) ? index : qk_ms_exists(single) ? single : NULL;
    if (weights) {
        st = qk_io_check_inside("qk_ms_open", dir, weights, weights == index ? "index" : "weights file",
                                external, &real);
        free(real);
        if (st == QK_OK) st = qk_st_set_open(weights, sflags, &m->set);
    } else {
        st = qk_fail(QK_ERR_FORMAT, "qk_ms_open: %s has neither " QK_MS_WEIGHTS " nor " QK_MS_INDEX
                     " (rule: a ModelSlim folder holds the description and the weights)", dir);
    }
    if (st != QK_OK) goto done;
    for (size_t i = 0; i < qk_st_set_problem_count(m->set); i++)
        qk_msgs_add(&m->problems, "%s", qk_st_set_problem(m->set, i));
    /* description entries without tensors */
    for (size_t i = 0; i < m->desc->n; i++) {
        qk_st_info info;
        if (qk_st_set_find(m->set, m->desc->name[i], &info) != QK_OK)
            qk_msgs_add(&m->problems, QK_MS_DESC_FILE " names tensor " QK_NAME_FMT " (%.40s), which "
                        "is not in the weights (rule: description entries and tensors must match)",
                        m->desc->name[i], m->desc->qtype[i]);
    }
    /* tensors without description entries */
    for (size_t i = 0; i < qk_st_set_count(m->set); i++) {
        qk_st_info info;
        qk_st_set_info_at(m->set, i, &info);
        if (!qk_ms_desc_lookup(m->desc, info.name))
            qk_msgs_add(&m->problems, "tensor " QK_NAME_FMT " (%s, in %s) has no entry in "
                        QK_MS_DESC_FILE " (rule: description entries and tensors must match)",
                        info.name, info.dtype_name, qk_st_path(info.file));
    }
    qk_clear_error();
    if (m->problems.n && !(flags & QK_MS_LENIENT)) {
        if (m->problems.n > 1)
            st = qk_fail(QK_ERR_FORMAT, "%s: %s (and %zu more problems)", dir, m->problems.v[0],
                         m->problems.n - 1);
        else
            st = qk_fail(QK_ERR_FORMAT, "%s: %s", dir, m->problems.v[0]);
    }
done:
    free(desc);
    free(index);
    free(single);
    if (st != QK_OK) {
        qk_ms_close(m);
        return st;
    }
    *out = m;
    return QK_OK;
}

const qk_ms_desc *qk_ms_description(const qk_ms_model *m) { return m ? m->desc : NULL; }
const qk_st_set *qk_ms_tensors(const qk_ms_model *m) { return m ? m->set : NULL; }
size_t qk_ms_problem_count(const qk_ms_model *m) { return m ? m->problems.n : 0; }
const char *qk_ms_problem(const qk_ms_model *m, size_t i)
{
    return m && i < m->problems.n ? m->problems.v[i] : NULL;
}
