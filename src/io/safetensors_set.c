/* A checkpoint of one or more safetensors files: a single file, or the shards an index
 * ({"weight_map": {tensor: file}}) names, cross-checked both ways (every mapped tensor is
 * in the file it names, every shard tensor is mapped to its shard, no name in two shards,
 * every named shard exists). */
#define _GNU_SOURCE
#include "io_internal.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct qk_set_ent {
    const char *name;
    size_t file, idx;
} qk_set_ent;

struct qk_st_set {
    char *index_path;
    size_t nfiles;
    qk_st_file **files;
    size_t n;              /* tensors over all files */
    qk_set_ent *ents;      /* sorted by name, then file */
    qk_msgs problems;
};

/* ---- index JSON ---- */
void qk_st_index_free(qk_st_index *idx)
{
    for (size_t i = 0; i < idx->n; i++) {
        free(idx->name[i]);
        free(idx->file[i]);
    }
    free(idx->name);
    free(idx->file);
    memset(idx, 0, sizeof *idx);
}

static bool qk_plain_file_name(const char *s)
{
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

qk_status qk_st_index_parse(const void *json, size_t n, const char *label, qk_st_index *idx)
{
    memset(idx, 0, sizeof *idx);
    if (!label) label = "<index>";
    json_error_t err;
    json_t *root = json_loadb(json, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return qk_fail(QK_ERR_FORMAT, "%s: not valid JSON: %s, at byte %d (rule: an index is one "
                       "JSON object without duplicate keys)", label, err.text, err.position);
    qk_status st = QK_OK;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: no \"weight_map\" object (rule: an index maps tensor names "
                     "to shard files in \"weight_map\")", label);
        goto done;
    }
    size_t m = json_object_size(wm);
    idx->name = calloc(m ? m : 1, sizeof(char *));
    idx->file = calloc(m ? m : 1, sizeof(char *));
    if (!idx->name || !idx->file) { st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label); goto done; }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        if (!json_is_string(v)) {
            st = qk_fail(QK_ERR_FORMAT, "%s: weight_map entry " QK_NAME_FMT " is not a string (rule: "
                         "weight_map values are shard file names)", label, k);
            goto done;
        }
        const char *file = json_string_value(v);
        if (!qk_plain_file_name(file)) {
            st = qk_fail(QK_ERR_FORMAT, "%s: weight_map entry " QK_NAME_FMT " names " QK_NAME_FMT
                         ", which is not a plain file name (rule: shards lie in the index's folder)",
                         label, k, file);
            goto done;
        }
        idx->name[idx->n] = qk_io_strdup(k);
        idx->file[idx->n] = qk_io_strdup(file);
        idx->n++;
        if (!idx->name[idx->n - 1] || !idx->file[idx->n - 1]) {
            st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", label);
            goto done;
        }
    }
done:
    json_decref(root);
    if (st != QK_OK) qk_st_index_free(idx);
    return st;
}

/* ---- the set ---- */
void qk_st_set_close(qk_st_set *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->nfiles; i++) qk_st_close(s->files[i]);
    free(s->files);
    free(s->ents);
    free(s->index_path);
    qk_msgs_free(&s->problems);
    free(s);
}

static int qk_cmp_ent(const void *a, const void *b)
{
    const qk_set_ent *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->file < y->file ? -1 : (x->file > y->file);
}

static const qk_set_ent *qk_set_lookup(const qk_st_set *s, const char *name)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {   /* first entry with that name */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(s->ents[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n && !strcmp(s->ents[lo].name, name) ? &s->ents[lo] : NULL;
}

/* Builds the name table and records shards sharing a name. */
static qk_status qk_set_build(qk_st_set *s)
{
    size_t total = 0;
    for (size_t i = 0; i < s->nfiles; i++) total += qk_st_count(s->files[i]);
    s->ents = malloc((total ? total : 1) * sizeof *s->ents);
    if (!s->ents) return qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < s->nfiles; i++)
        for (size_t j = 0; j < s->files[i]->ntensors; j++) {
            s->ents[k].name = s->files[i]->t[j].name;
            s->ents[k].file = i;
            s->ents[k].idx = j;
            k++;
        }
    s->n = total;
    qsort(s->ents, total, sizeof *s->ents, qk_cmp_ent);
    for (size_t i = 1; i < total; i++)
        if (!strcmp(s->ents[i].name, s->ents[i - 1].name))
            qk_msgs_add(&s->problems, "tensor " QK_NAME_FMT " is in both %s and %s (rule: a name "
                        "lives in one shard)", s->ents[i].name, qk_st_path(s->files[s->ents[i - 1].file]),
                        qk_st_path(s->files[s->ents[i].file]));
    return QK_OK;
}

static qk_status qk_set_finish(qk_st_set *s, unsigned flags, qk_st_set **out)
{
    if (s->problems.n && !(flags & QK_ST_SET_LENIENT)) {
        qk_status st;
        if (s->problems.n > 1)
            st = qk_fail(QK_ERR_FORMAT, "%s (and %zu more problems)", s->problems.v[0], s->problems.n - 1);
        else
            st = qk_fail(QK_ERR_FORMAT, "%s", s->problems.v[0]);
        qk_st_set_close(s);
        return st;
    }
    *out = s;
    qk_clear_error();
    return QK_OK;
}

/* Opens PATH and checks it is still the file that qk_io_check_inside resolved (real). */
static qk_status qk_set_open_checked(const char *path, const char *real, qk_st_file **f)
{
    qk_status st = qk_st_open(path, f);
    if (st == QK_OK && (st = qk_io_same_file("qk_st_set_open", path, real, (*f)->dev, (*f)->ino)) != QK_OK) {
        qk_st_close(*f);
        *f = NULL;
    }
    return st;
}

/* folder: the folder PATH was found in (it must resolve inside it), or NULL when PATH was
   named by the caller */
static qk_status qk_set_open_file(const char *path, const char *folder, unsigned flags,
                                  qk_st_set **out)
{
    char *real = NULL;
    if (folder) {
        qk_status st = qk_io_check_inside("qk_st_set_open", folder, path, "file",
                                          flags & QK_ST_SET_ALLOW_EXTERNAL_SHARDS, &real);
        if (st != QK_OK) return st;
    }
    qk_st_set *s = calloc(1, sizeof *s);
    if (s) s->files = calloc(1, sizeof *s->files);
    if (!s || !s->files) {
        free(s);
        free(real);
        return qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory");
    }
    qk_status st = qk_set_open_checked(path, real, &s->files[0]);
    free(real);
    if (st != QK_OK) { qk_st_set_close(s); return st; }
    s->nfiles = 1;
    st = qk_set_build(s);
    if (st != QK_OK) { qk_st_set_close(s); return st; }
    return qk_set_finish(s, flags, out);
}

static int qk_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static qk_status qk_set_open_index(const char *index_path, const char *folder, unsigned flags,
                                   qk_st_set **out)
{
    const bool external = flags & QK_ST_SET_ALLOW_EXTERNAL_SHARDS;
    char *text, *real = NULL;
    size_t n;
    if (folder) {
        qk_status st = qk_io_check_inside("qk_st_set_open", folder, index_path, "index", external, &real);
        if (st != QK_OK) return st;
        free(real);
        real = NULL;
    }
    qk_status st = qk_io_read_small(index_path, QK_ST_MAX_HEADER, &text, &n);
    if (st != QK_OK) return st;
    qk_st_index idx;
    st = qk_st_index_parse(text, n, index_path, &idx);
    free(text);
    if (st != QK_OK) return st;
    qk_st_set *s = calloc(1, sizeof *s);
    char *dir = qk_io_dirname(index_path);
    const char **names = malloc((idx.n ? idx.n : 1) * sizeof *names);
    if (!s || !dir || !names || !(s->index_path = qk_io_strdup(index_path))) {
        free(names);
        free(dir);
        if (s) qk_st_set_close(s);
        qk_st_index_free(&idx);
        return qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory");
    }
    /* the distinct shard names, sorted */
    size_t nf = 0;
    for (size_t i = 0; i < idx.n; i++) names[i] = idx.file[i];
    qsort(names, idx.n, sizeof *names, qk_cmp_str);
    for (size_t i = 0; i < idx.n; i++)
        if (!nf || strcmp(names[nf - 1], names[i])) names[nf++] = names[i];
    s->files = calloc(nf ? nf : 1, sizeof *s->files);
    if (!s->files) st = qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory");
    for (size_t i = 0; st == QK_OK && i < nf; i++) {
        char *p = qk_io_join(dir, names[i]);
        if (!p) { st = qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory"); break; }
        struct stat sb;
        if (stat(p, &sb) != 0 && errno == ENOENT) {
            size_t users = 0;
            const char *first = NULL;
            for (size_t j = 0; j < idx.n; j++)
                if (!strcmp(idx.file[j], names[i])) {
                    if (!first) first = idx.name[j];
                    users++;
                }
            st = qk_fail(QK_ERR_FORMAT, "%s maps tensor " QK_NAME_FMT " (and %zu more) to %s, which "
                         "does not exist in %s (rule: every shard the index names must exist)",
                         index_path, first, users - 1, names[i], dir);
        } else if ((st = qk_io_check_inside("qk_st_set_open", dir, p, "shard", external, &real)) == QK_OK) {
            st = qk_set_open_checked(p, real, &s->files[i]);
            if (st == QK_OK) s->nfiles++;
            free(real);
            real = NULL;
        }
        free(p);
    }
    if (st == QK_OK) st = qk_set_build(s);
    if (st == QK_OK) {
        for (size_t j = 0; j < idx.n; j++) {
            const qk_set_ent *e = qk_set_lookup(s, idx.name[j]);
            if (!e) {
                qk_msgs_add(&s->problems, "%s maps tensor " QK_NAME_FMT " to %s, which has no such "
                            "tensor (rule: index entries and shard tensors must agree)", index_path,
                            idx.name[j], idx.file[j]);
                continue;
            }
            const char *holder = strrchr(qk_st_path(s->files[e->file]), '/');
            holder = holder ? holder + 1 : qk_st_path(s->files[e->file]);
            if (strcmp(holder, idx.file[j]))
                qk_msgs_add(&s->problems, "%s maps tensor " QK_NAME_FMT " to %s, but it is in %s "
                            "(rule: index entries and shard tensors must agree)", index_path,
                            idx.name[j], idx.file[j], holder);
        }
        /* shard tensors the index does not map */
        const char **mapped = malloc((idx.n ? idx.n : 1) * sizeof *mapped);
        if (!mapped) st = qk_fail(QK_ERR_NOMEM, "qk_st_set_open: out of memory");
        for (size_t j = 0; mapped && j < idx.n; j++) mapped[j] = idx.name[j];
        if (mapped) qsort(mapped, idx.n, sizeof *mapped, qk_cmp_str);
        for (size_t i = 0; mapped && i < s->n; i++) {
            const char *key = s->ents[i].name;
            if (!bsearch(&key, mapped, idx.n, sizeof *mapped, qk_cmp_str))
                qk_msgs_add(&s->problems, "tensor " QK_NAME_FMT " in %s is not in the weight_map of %s "
                            "(rule: index entries and shard tensors must agree)", key,
                            qk_st_path(s->files[s->ents[i].file]), index_path);
        }
        free(mapped);
    }
    free(names);
    free(dir);
    qk_st_index_free(&idx);
    if (st != QK_OK) {
        qk_st_set_close(s);
        return st;
    }
    return qk_set_finish(s, flags, out);
}

static bool qk_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

qk_status qk_st_set_open(const char *path, unsigned flags, qk_st_set **out)
{
    if (!out) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_open: out is NULL");
    *out = NULL;
    if (!path) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_open: path is NULL");
    if (flags & ~(unsigned)(QK_ST_SET_LENIENT | QK_ST_SET_ALLOW_EXTERNAL_SHARDS))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_open: unknown flags 0x%x", flags);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qk_fail(QK_ERR_IO, "qk_st_set_open: cannot open %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (qk_ends_with(path, ".json")) return qk_set_open_index(path, NULL, flags, out);
        return qk_set_open_file(path, NULL, flags, out);
    }
    DIR *d = opendir(path);
    if (!d) return qk_fail(QK_ERR_IO, "qk_st_set_open: cannot list %s: %s", path, strerror(errno));
    char *index = NULL, *single = NULL;
    size_t nindex = 0, nsingle = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (qk_ends_with(e->d_name, ".safetensors.index.json")) {
            if (!nindex++) index = qk_io_strdup(e->d_name);
        } else if (qk_ends_with(e->d_name, ".safetensors")) {
            if (!nsingle++) single = qk_io_strdup(e->d_name);
        }
    }
    closedir(d);
    qk_status st;
    if (nindex == 1 && index) {
        char *p = qk_io_join(path, index);
        st = p ? qk_set_open_index(p, path, flags, out) : qk_fail(QK_ERR_NOMEM, "out of memory");
        free(p);
    } else if (nindex == 0 && nsingle == 1 && single) {
        char *p = qk_io_join(path, single);
        st = p ? qk_set_open_file(p, path, flags, out) : qk_fail(QK_ERR_NOMEM, "out of memory");
        free(p);
    } else {
        st = qk_fail(QK_ERR_FORMAT, "qk_st_set_open: folder %s holds %zu *.safetensors.index.json "
                     "and %zu *.safetensors files; expected one index, or one file without an index "
                     "(give the file or the index instead)", path, nindex, nsingle);
    }
    free(index);
    free(single);
    return st;
}

size_t qk_st_set_file_count(const qk_st_set *s) { return s ? s->nfiles : 0; }
const qk_st_file *qk_st_set_file(const qk_st_set *s, size_t i)
{
    return s && i < s->nfiles ? s->files[i] : NULL;
}
const char *qk_st_set_index_path(const qk_st_set *s) { return s ? s->index_path : NULL; }
size_t qk_st_set_count(const qk_st_set *s) { return s ? s->n : 0; }

qk_status qk_st_set_info_at(const qk_st_set *s, size_t i, qk_st_info *info)
{
    if (!s || !info) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_info_at: NULL argument");
    for (size_t f = 0; f < s->nfiles; f++) {
        size_t c = s->files[f]->ntensors;
        if (i < c) {
            qk_st_fill_info(s->files[f], i, info);
            return QK_OK;
        }
        i -= c;
    }
    return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_info_at: index out of range (%zu tensors)", s->n);
}

qk_status qk_st_set_find(const qk_st_set *s, const char *name, qk_st_info *info)
{
    if (!s || !name || !info) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_find: NULL argument");
    const qk_set_ent *e = qk_set_lookup(s, name);
    if (!e)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_st_set_find: the checkpoint has no tensor " QK_NAME_FMT,
                       name);
    qk_st_fill_info(s->files[e->file], e->idx, info);
    return QK_OK;
}

size_t qk_st_set_problem_count(const qk_st_set *s) { return s ? s->problems.n : 0; }
const char *qk_st_set_problem(const qk_st_set *s, size_t i)
{
    return s && i < s->problems.n ? s->problems.v[i] : NULL;
}
