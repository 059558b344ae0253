/* qk_modelslim_quantize: a BF16/F16/F32 safetensors checkpoint (a file, an index, or an HF
 * folder) -> a ModelSlim W8A8_MXFP8 folder, as msModelSlim exports it: the selected 2-D
 * *.weight tensors of linear layers as E4M3 codes and E8M0 scales (qk_mx_quantize),
 * quant_model_weights.safetensors or shards of at most shard_size bytes
 * (quant_model_weights-0000i-of-0000n.safetensors) with msModelSlim's index
 * ({"metadata": {"total_size"}, "weight_map"}), quant_model_description.json, and the input
 * folder's config (without its quantization_config), generation config, tokenizer files,
 * *.py, *.txt and *.jinja, so the folder is servable. Tensor by tensor, in row chunks spread
 * over all cores, so memory stays near one chunk; never overwrites its input; everything is
 * staged in a temporary folder and published at the end (see "staging"). `qk quantize` and
 * `qk demo` call it (tools/qk). */
#define _GNU_SOURCE
#include "io/ms_quantize.h"

#include "internal.h"
#include "io/io_internal.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

/* The first failure's status (its message is qk_last_error()'s): qmsg records a message of
   this file's, qmsg_keep keeps the message of the call that failed. */
static _Thread_local qk_status q_status;
#define qmsg(st, ...) ((void)(q_status = qk_fail((st), __VA_ARGS__)))
#define qmsg_keep() ((void)(q_status = QK_ERR_IO))

#define CHUNK_BYTES ((int64_t)64 << 20)

typedef struct {
    const regex_t *inc, *exc;
    int ninc, nexc;
} selection;

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* A linear layer's weight: 2-D float *.weight, not an embedding or a norm. */
static bool candidate(const qk_st_info *t)
{
    return t->ndim == 2 && t->shape[0] > 0 && t->shape[1] > 0 && ends_with(t->name, ".weight") &&
           (t->dtype == QK_DTYPE_BF16 || t->dtype == QK_DTYPE_F16 || t->dtype == QK_DTYPE_F32) &&
           !strstr(t->name, "embed") && !strstr(t->name, "norm");
}

static bool matches(const regex_t *r, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (regexec(&r[i], name, 0, NULL, 0) == 0) return true;
    return false;
}

static bool selected(const selection *sel, const qk_st_info *t)
{
    if (!candidate(t)) return false;
    if (sel->ninc ? !matches(sel->inc, sel->ninc, t->name) : strstr(t->name, "lm_head") != NULL)
        return false;
    return !matches(sel->exc, sel->nexc, t->name);
}

/* ---- progress ---- */
typedef struct {
    bool on;
    uint64_t total, done;
    double last;
} progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress_show(progress *p, const char *name, bool force)
{
    if (!p->on) return;
    double t = now_s();
    if (!force && t - p->last < 0.1) return;
    p->last = t;
    double f = p->total ? (double)p->done / (double)p->total : 1.0;
    if (f > 1) f = 1;
    char bar[31];
    int fill = (int)(f * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%3d%% [%s] %7.2f/%.2f GB  %-48.48s", (int)(f * 100), bar, (double)p->done / 1e9,
            (double)p->total / 1e9, name ? name : "");
    fflush(stderr);
}

/* ---- quantizing one tensor ---- */
typedef struct {
    const char *src;
    qk_dtype dt;
    int64_t K, kb;
    size_t esz;
    const qk_mx_options *opt;
    uint8_t *q, *s;
    pthread_mutex_t *lock;
    qk_status *st;
    char *msg;
} quant_ctx;

static void quant_rows(const void *vctx, int64_t begin, int64_t end)
{
    const quant_ctx *c = vctx;
    int64_t xs[2] = {end - begin, c->K}, ss[2] = {end - begin, c->kb};
    qk_tensor x = qk_tensor_make((void *)(uintptr_t)(c->src + (size_t)begin * (size_t)c->K * c->esz),
                                 c->dt, 2, xs);
    qk_tensor q = qk_tensor_make(c->q + begin * c->K, QK_DTYPE_F8_E4M3, 2, xs);
    qk_tensor s = qk_tensor_make(c->s + begin * c->kb, QK_DTYPE_E8M0, 2, ss);
    qk_status st = qk_mx_quantize(&x, c->opt, &q, &s);
    if (st != QK_OK) {
        pthread_mutex_lock(c->lock);
        if (*c->st == QK_OK) {
            *c->st = st;
            snprintf(c->msg, 512, "%s", qk_last_error());
        }
        pthread_mutex_unlock(c->lock);
    }
}

/* "<name>_scale", for names of any length */
static char *scale_name_of(const char *name)
{
    size_t n = strlen(name);
    char *s = malloc(n + 7);
    if (s) {
        memcpy(s, name, n);
        memcpy(s + n, "_scale", 7);
    }
    return s;
}

/* the first NaN/Inf among n elements of a 16/32-bit float dtype, or -1 */
static int64_t first_nonfinite(const char *p, qk_dtype dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (dt == QK_DTYPE_F32) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return i;
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            const uint16_t e = dt == QK_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
            if ((h & e) == e) return i;
        }
    }
    return -1;
}

static int quantize_tensor(const qk_st_info *t, const char *scale_name, qk_st_writer *w,
                           const qk_mx_options *opt, bool allow_nonfinite, progress *pg)
{
    int64_t N = t->shape[0], K = t->shape[1], kb = qk_mx_blocks(K);
    size_t esz = t->elem_size;
    int64_t row_bytes = K * (int64_t)esz, rows = CHUNK_BYTES / row_bytes;
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    bool misaligned = ((uintptr_t)t->data % esz) != 0;
    uint8_t *q = malloc((size_t)(rows * K)), *s = malloc((size_t)(rows * kb));
    char *xb = misaligned ? malloc((size_t)(rows * row_bytes)) : NULL;
    if (!q || !s || (misaligned && !xb)) {
        free(q); free(s); free(xb);
        qmsg(QK_ERR_NOMEM, "out of memory for %s", t->name);
        return 1;
    }
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    qk_status st = QK_OK;
    char msg[512] = "";
    int rc = 0;
    for (int64_t r0 = 0; r0 < N && !rc; r0 += rows) {
        int64_t nr = N - r0 < rows ? N - r0 : rows;
        const char *src = (const char *)t->data + r0 * row_bytes;
        if (misaligned) {
            memcpy(xb, src, (size_t)(nr * row_bytes));
            src = xb;
        }
        const int64_t bad = allow_nonfinite ? -1 : first_nonfinite(src, t->dtype, nr * K);
        if (bad >= 0) {
            qmsg(QK_ERR_FORMAT, "%s has a NaN or Inf at [%lld, %lld]: its block would get a "
                    "NaN scale, which loaders refuse; fix the checkpoint, or pass --allow-nonfinite to "
                    "write it anyway", t->name, (long long)(r0 + bad / K),
                    (long long)(bad % K));
            rc = 1;
            break;
        }
        quant_ctx c = {src, t->dtype, K, kb, esz, opt, q, s, &lock, &st, msg};
        qk_parallel_for(nr, row_bytes, 1 << 18, quant_rows, &c);
        if (st != QK_OK) {
            qmsg(st, "%s: %s: %s", t->name,
                    qk_status_name(st), msg);
            rc = 1;
            break;
        }
        if (qk_st_writer_write(w, t->name, q, (size_t)(nr * K)) != QK_OK ||
            qk_st_writer_write(w, scale_name, s, (size_t)(nr * kb)) != QK_OK) {
            qmsg_keep();
            rc = 1;
            break;
        }
        pg->done += (uint64_t)(nr * row_bytes);
        progress_show(pg, t->name, false);
    }
    free(q);
    free(s);
    free(xb);
    return rc;
}

/* copies a tensor (or converts a 16-bit float bias to F32) in chunks */
static int copy_tensor(const qk_st_info *t, bool to_f32, qk_st_writer *w, progress *pg)
{
    const char *src = t->data;
    uint64_t left = t->nbytes;
    float *buf = NULL;
    if (to_f32) {
        buf = malloc(CHUNK_BYTES);
        if (!buf) { qmsg(QK_ERR_NOMEM, "out of memory"); return 1; }
    }
    while (left) {
        size_t n = left > (uint64_t)CHUNK_BYTES / 2 ? (size_t)CHUNK_BYTES / 2 : (size_t)left;
        qk_status st;
        if (to_f32) {
            size_t cnt = n / 2;
            for (size_t i = 0; i < cnt; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * i, 2);
                buf[i] = t->dtype == QK_DTYPE_BF16 ? qk_bf16_to_f32(h) : qk_f16_to_f32(h);
            }
            st = qk_st_writer_write(w, t->name, buf, cnt * 4);
        } else {
            st = qk_st_writer_write(w, t->name, src, n);
        }
        if (st != QK_OK) {
            qmsg_keep();
            free(buf);
            return 1;
        }
        src += n;
        left -= n;
        pg->done += n;
        progress_show(pg, t->name, false);
    }
    free(buf);
    return 0;
}

/* ---- output paths ---- */
static int mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat sb;
    return stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}

typedef struct {
    dev_t dev;
    ino_t ino;
} file_id;

/* refuses an output path that is an input, or that exists without --force */
static int check_output(const char *path, const file_id *inputs, size_t nin, bool force)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    for (size_t i = 0; i < nin; i++)
        if (inputs[i].dev == sb.st_dev && inputs[i].ino == sb.st_ino) {
            qmsg(QK_ERR_INVALID_ARGUMENT, "refusing to overwrite %s: it is part of the input", path);
            return 1;
        }
    if (!force) {
        qmsg(QK_ERR_INVALID_ARGUMENT, "%s exists (pass --force to replace it)", path);
        return 1;
    }
    return 0;
}

/* ---- the files that make the output folder servable ---- */

/* IN's folder: IN itself when it is one, else the folder holding the file */
static char *input_folder(const char *in)
{
    struct stat sb;
    if (stat(in, &sb) == 0 && S_ISDIR(sb.st_mode)) return strdup(in);
    return qk_io_dirname(in);
}

/* what an engine needs beside the weights: the model and generation configs, the tokenizer
   and processor files, remote code (*.py), *.txt (merges, licences) and chat templates */
static bool servable_name(const char *n)
{
    static const char *const exact[] = {
        "config.json", "generation_config.json", "special_tokens_map.json", "added_tokens.json",
        "vocab.json", "chat_template.json", "preprocessor_config.json",
        "video_preprocessor_config.json",
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (!strcmp(n, exact[i])) return true;
    return !strncmp(n, "tokenizer", 9) || ends_with(n, ".py") || ends_with(n, ".txt") ||
           ends_with(n, ".jinja");
}

/* Copies the servable files of src into out (config.json without quantization_config).
   check_only: refuse existing outputs (as for the weights) and copy nothing. Nothing is
   copied when out is src itself. */
static int copy_servable_files(const char *src, const char *out, const file_id *ids, size_t nin,
                               bool force, bool check_only, bool allow_external)
{
    char rs[PATH_MAX], ro[PATH_MAX];
    if (realpath(src, rs) && realpath(out, ro) && !strcmp(rs, ro)) return 0;
    DIR *d = opendir(src);
    if (!d) return 0; /* a single input file in an unreadable folder: nothing to copy */
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !servable_name(e->d_name)) continue;
        char sp[4096], dp[4096];
        snprintf(sp, sizeof sp, "%s/%s", src, e->d_name);
        snprintf(dp, sizeof dp, "%s/%s", out, e->d_name);
        struct stat sb;
        if (stat(sp, &sb) != 0 || S_ISDIR(sb.st_mode)) continue; /* a folder is not a file to copy */
        if (check_only) {
            /* a servable file the output would lack, or one from outside the folder, is refused
               before anything is written: a FIFO, socket or device, or a link out */
            if (!S_ISREG(sb.st_mode)) {
                qmsg(QK_ERR_IO, "%s: not a regular file (%s); the output needs the model's servable "
                        "files copied", sp, qk_io_file_kind(sb.st_mode));
                err = 1;
                continue;
            }
            char *real = NULL;
            if (qk_io_check_inside("qk quantize", src, sp, "file", allow_external, &real) != QK_OK) {
                qmsg_keep();
                err = 1;
                continue;
            }
            free(real);
            err = check_output(dp, ids, nin, force);
            continue;
        }
        size_t n = 0;
        char *data = NULL, *text = NULL;
        if (qk_io_read_small(sp, (size_t)1 << 30, &data, &n) != QK_OK) {
            qmsg_keep();
            err = 1;
            break;
        }
        if (!strcmp(e->d_name, "config.json")) {
            json_error_t je;
            json_t *cfg = json_loadb(data, n, 0, &je);
            if (!json_is_object(cfg)) {
                qmsg(QK_ERR_FORMAT, "%s: not a JSON object (%s at byte %d); the output needs "
                        "a valid config.json", sp, cfg ? "not an object" : je.text, je.position);
                json_decref(cfg);
                free(data);
                err = 1;
                break;
            }
            json_object_del(cfg, "quantization_config"); /* the output is not the input's scheme */
            text = json_dumps(cfg, JSON_INDENT(2));
            json_decref(cfg);
        }
        if (qk_write_file_atomic(dp, text ? text : data, text ? strlen(text) : n,
                                 force ? QK_ST_WRITE_REPLACE : 0) != QK_OK) {
            qmsg_keep();
            err = 1;
        }
        free(text);
        free(data);
    }
    closedir(d);
    return err;
}

/* ---- staging: everything is written into a temporary folder, published at the end ----
 * A new OUT_DIR is staged as a sibling ".qk-quantize.<pid>.XXXXXX" and renamed into place in
 * one step; into an existing one, the staged files are renamed in, the description last. A
 * failure removes the staging folder, so no half-written output is ever left for `qk inspect`
 * to accept; staging folders of dead runs (their pid is gone) are removed first. */
#define STAGE_PREFIX ".qk-quantize."

static void remove_tree1(const char *dir) /* a staging folder: files, one level */
{
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void remove_stale_stages(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, STAGE_PREFIX, strlen(STAGE_PREFIX))) continue;
        const long pid = strtol(e->d_name + strlen(STAGE_PREFIX), NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        remove_tree1(p);
    }
    closedir(d);
}

/* publishes stage into out: one rename when out is new (sibling), else file by file with
   the description last */
static int publish(const char *stage, const char *out, bool sibling, const file_id *ids, size_t nin)
{
    if (sibling) {
        if (rename(stage, out) == 0) return 0;
        qmsg(QK_ERR_IO, "cannot move %s to %s: %s", stage, out, strerror(errno));
        return 1;
    }
    /* an earlier run's weights that this one does not replace (another shard count) go, so
       that the folder never mixes two runs */
    DIR *o = opendir(out);
    for (struct dirent *e; o && (e = readdir(o));) {
        if (strncmp(e->d_name, "quant_model_weights", 19)) continue;
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/%s", stage, e->d_name);
        snprintf(b, sizeof b, "%s/%s", out, e->d_name);
        struct stat sb, ob;
        bool input = false;
        if (stat(b, &ob) == 0)
            for (size_t i = 0; i < nin; i++) input |= ids[i].dev == ob.st_dev && ids[i].ino == ob.st_ino;
        if (stat(a, &sb) != 0 && !input) unlink(b);
    }
    if (o) closedir(o);
    DIR *d = opendir(stage);
    if (!d) return 1;
    int err = 0;
    for (int pass = 0; pass < 2 && !err; pass++) {
        rewinddir(d);
        for (struct dirent *e; !err && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            const bool desc = !strcmp(e->d_name, "quant_model_description.json");
            if (desc != (pass == 1)) continue;
            char a[4200], b[4200];
            snprintf(a, sizeof a, "%s/%s", stage, e->d_name);
            snprintf(b, sizeof b, "%s/%s", out, e->d_name);
            if (rename(a, b) != 0) {
                qmsg(QK_ERR_IO, "cannot move %s to %s: %s", a, b, strerror(errno));
                err = 1;
            }
        }
    }
    closedir(d);
    if (!err) rmdir(stage);
    return err;
}

static const char *rule_name(qk_mx_scale_rule r)
{
    return r == QK_MX_SCALE_MODELSLIM ? "modelslim" : r == QK_MX_SCALE_RCEIL ? "rceil" : "floor";
}

qk_status qk_modelslim_quantize(const char *in, const char *out, const qk_ms_quantize_options *o,
                                qk_ms_quantize_report *rep)
{
    if (!in || !out || !o)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_modelslim_quantize: %s is NULL",
                       !in ? "in" : !out ? "out" : "opt");
    q_status = QK_OK;
    const qk_mx_options opt = o->mx;
    const selection sel = {o->include, o->exclude, o->ninclude, o->nexclude};
    const uint64_t shard_size = o->shard_size;
    const bool force = o->force, allow_nonfinite = o->allow_nonfinite;
    qk_st_set *set = NULL;
    const qk_status ost =
        qk_st_set_open(in, o->allow_external_shards ? QK_ST_SET_ALLOW_EXTERNAL_SHARDS : 0u, &set);
    if (ost != QK_OK) return ost;
    size_t nfiles = qk_st_set_file_count(set), nt = qk_st_set_count(set);
    file_id *ids = calloc(nfiles + 1, sizeof *ids);
    /* every tensor's output bytes, then shards in order: a new shard when the next tensor
       would take the current one past --shard-size */
    uint64_t *obytes = calloc(nt + 1, sizeof *obytes);
    size_t *shard_of = calloc(nt + 1, sizeof *shard_of), nf = 1;
    json_t *desc = json_object(), *wmap = json_object();
    int err = !ids || !obytes || !shard_of || !desc || !wmap;
    if (!err && nt == 0) {
        qmsg(QK_ERR_FORMAT, "%s holds no tensors (an empty weight_map?); nothing to quantize", in);
        err = 1;
    }
    for (size_t i = 0; !err && i < nt; i++) {
        qk_st_info t;
        qk_st_set_info_at(set, i, &t);
        if (t.dtype == QK_DTYPE_F8_E4M3 || t.dtype == QK_DTYPE_F8_E5M2 || t.dtype == QK_DTYPE_U8 ||
            t.dtype == QK_DTYPE_E8M0 || t.dtype == QK_DTYPE_I8) {
            qmsg(QK_ERR_FORMAT, "%s is already quantized: tensor %s is %s; quantize the "
                    "BF16/F16/F32 original instead", in, t.name, t.dtype_name);
            err = 1;
        }
    }
    uint64_t acc = 0, out_total = 0;
    for (size_t i = 0; !err && i < nt; i++) {
        qk_st_info t;
        qk_st_set_info_at(set, i, &t);
        if (selected(&sel, &t))
            obytes[i] = (uint64_t)(t.shape[0] * t.shape[1] +
                                   t.shape[0] * qk_mx_blocks(t.shape[1]));
        else
            obytes[i] = ends_with(t.name, ".bias") && (t.dtype == QK_DTYPE_BF16 || t.dtype == QK_DTYPE_F16)
                            ? t.nbytes * 2 : t.nbytes;
        if (acc && acc + obytes[i] > shard_size) {
            nf++;
            acc = 0;
        }
        shard_of[i] = nf - 1;
        acc += obytes[i];
        out_total += obytes[i];
    }
    char **names = calloc(nf, sizeof *names);
    err = err || !names;
    size_t nin = 0;
    for (size_t f = 0; !err && f < nfiles; f++) {
        struct stat sb;
        if (stat(qk_st_path(qk_st_set_file(set, f)), &sb) == 0) ids[nin++] = (file_id){sb.st_dev, sb.st_ino};
    }
    if (!err && qk_st_set_index_path(set)) {
        struct stat sb;
        if (stat(qk_st_set_index_path(set), &sb) == 0) ids[nin++] = (file_id){sb.st_dev, sb.st_ino};
    }
    /* where the files are written first (see "staging" above) */
    char stage[4200] = "";
    struct stat osb;
    const bool sibling = stat(out, &osb) != 0;
    if (!err && !sibling && !S_ISDIR(osb.st_mode)) {
        qmsg(QK_ERR_INVALID_ARGUMENT, "%s exists and is not a folder", out);
        err = 1;
    }
    if (!err) {
        char *parent = sibling ? input_folder(out) : strdup(out);
        if (!parent || (sibling && mkdirs(parent) != 0)) {
            qmsg(QK_ERR_IO, "cannot create %s: %s", parent ? parent : out, strerror(errno));
            err = 1;
        } else {
            remove_stale_stages(parent);
            if (!sibling) remove_stale_stages(out);
            /* mkdir, not mkdtemp: the folder renamed into place gets the umask's mode, as any
               folder the user makes (mkdtemp's is 0700) */
            int made = -1;
            for (unsigned k = 0; made != 0 && k < 1000; k++) {
                snprintf(stage, sizeof stage, "%s/" STAGE_PREFIX "%ld.%u", parent, (long)getpid(), k);
                made = mkdir(stage, 0777);
                if (made != 0 && errno != EEXIST) break;
            }
            if (made != 0) {
                qmsg(QK_ERR_IO, "cannot create a staging folder in %s: %s", parent,
                        strerror(errno));
                stage[0] = 0;
                err = 1;
            }
        }
        free(parent);
    }
    char descpath[4096], indexpath[4096], sdesc[4400], sindex[4400];
    snprintf(descpath, sizeof descpath, "%s/quant_model_description.json", out);
    snprintf(indexpath, sizeof indexpath, "%s/quant_model_weights.safetensors.index.json", out);
    snprintf(sdesc, sizeof sdesc, "%s/quant_model_description.json", stage);
    snprintf(sindex, sizeof sindex, "%s/quant_model_weights.safetensors.index.json", stage);
    for (size_t f = 0; !err && f < nf; f++) {
        char buf[4200];
        if (nf == 1) snprintf(buf, sizeof buf, "%s/quant_model_weights.safetensors", out);
        else snprintf(buf, sizeof buf, "%s/quant_model_weights-%05zu-of-%05zu.safetensors", out, f + 1, nf);
        names[f] = strdup(buf);
        if (!names[f] || check_output(names[f], ids, nin, force)) err = 1;
    }
    if (!err && (check_output(descpath, ids, nin, force) ||
                 (nf > 1 && check_output(indexpath, ids, nin, force))))
        err = 1;
    char *src_dir = err ? NULL : input_folder(in);
    if (!err && src_dir && copy_servable_files(src_dir, out, ids, nin, force, true, o->allow_external_shards) != 0) err = 1;

    progress pg = {o->progress, 0, 0, 0};
    for (size_t i = 0; i < nt; i++) {
        qk_st_info t;
        qk_st_set_info_at(set, i, &t);
        pg.total += t.nbytes;
    }
    json_object_set_new(desc, "model_quant_type", json_string("W8A8_MXFP8"));
    json_object_set_new(desc, "version", json_string("1.0.0"));
    json_object_set_new(desc, "group_size", json_integer(QK_MX_BLOCK));
    json_object_set_new(desc, "metadata",
                        json_pack("{s:s, s:s, s:s}", "producer", "qk quantize", "scale_rule",
                                  rule_name(opt.scale_rule), "round",
                                  opt.round == QK_ROUND_NEAREST_AWAY ? "away" : "even"));
    json_object_set_new(desc, "optional", json_object());
    size_t nq = 0, nkept = 0, first = 0;
    for (size_t f = 0; !err && f < nf; f++) {
        size_t last = first;
        while (last < nt && shard_of[last] == f) last++;
        qk_st_writer *w = NULL;
        char staged[4600];
        snprintf(staged, sizeof staged, "%s/%s", stage, strrchr(names[f], '/') + 1);
        if (qk_st_writer_create(staged, 0, &w) != QK_OK) {
            qmsg_keep();
            err = 1;
            break;
        }
        const qk_st_file *file0 = nfiles ? qk_st_set_file(set, 0) : NULL;
        for (size_t m = 0; file0 && m < qk_st_metadata_count(file0); m++) {
            const char *k, *v;
            qk_st_metadata_at(file0, m, &k, &v);
            qk_st_writer_set_metadata(w, k, v);
        }
        qk_st_writer_set_metadata(w, "quantized_by", "qk quantize (W8A8_MXFP8)");
        const char *base = strrchr(names[f], '/') + 1;
        /* declare */
        for (size_t i = first; !err && i < last; i++) {
            qk_st_info t;
            qk_st_set_info_at(set, i, &t);
            qk_status st;
            if (selected(&sel, &t)) {
                char *sn = scale_name_of(t.name);
                int64_t ss[2] = {t.shape[0], qk_mx_blocks(t.shape[1])};
                st = sn ? qk_st_writer_declare(w, t.name, "F8_E4M3", 2, t.shape, NULL) : QK_ERR_NOMEM;
                if (st == QK_OK) st = qk_st_writer_declare(w, sn, "U8", 2, ss, NULL);
                if (!sn) {
                    qmsg(QK_ERR_NOMEM, "out of memory");
                    err = 1;
                    break;
                }
                json_object_set_new(desc, t.name, json_string("W8A8_MXFP8"));
                json_object_set_new(desc, sn, json_string("W8A8_MXFP8"));
                json_object_set_new(wmap, t.name, json_string(base));
                json_object_set_new(wmap, sn, json_string(base));
                free(sn);
            } else {
                bool to_f32 = ends_with(t.name, ".bias") &&
                              (t.dtype == QK_DTYPE_BF16 || t.dtype == QK_DTYPE_F16);
                st = qk_st_writer_declare(w, t.name, to_f32 ? "F32" : t.dtype_name, t.ndim, t.shape, NULL);
                json_object_set_new(desc, t.name, json_string("FLOAT"));
                json_object_set_new(wmap, t.name, json_string(base));
            }
            if (st != QK_OK) {
                qmsg_keep();
                err = 1;
            }
        }
        /* stream */
        for (size_t i = first; !err && i < last; i++) {
            qk_st_info t;
            qk_st_set_info_at(set, i, &t);
            progress_show(&pg, t.name, false);
            if (selected(&sel, &t)) {
                char *sn = scale_name_of(t.name);
                err = sn ? quantize_tensor(&t, sn, w, &opt, allow_nonfinite, &pg) : 1;
                free(sn);
                nq++;
            } else {
                bool to_f32 = ends_with(t.name, ".bias") &&
                              (t.dtype == QK_DTYPE_BF16 || t.dtype == QK_DTYPE_F16);
                err = copy_tensor(&t, to_f32, w, &pg);
                nkept++;
            }
            qk_st_release_pages(t.file, &t);
        }
        if (!err && qk_st_writer_commit(w) != QK_OK) {
            qmsg_keep();
            err = 1;
        }
        qk_st_writer_destroy(w);
        first = last;
    }
    if (!err && nf > 1) {
        json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)out_total,
                                "weight_map", wmap);
        char *text = idx ? json_dumps(idx, JSON_INDENT(2)) : NULL;
        if (!text || qk_write_file_atomic(sindex, text, strlen(text), 0) != QK_OK) {
            if (text) qmsg_keep();
            else qmsg(QK_ERR_NOMEM, "cannot encode the index");
            err = 1;
        }
        free(text);
        json_decref(idx);
    }
    if (!err && src_dir && copy_servable_files(src_dir, stage, ids, nin, false, false, true) != 0) err = 1;
    if (!err) {
        char *text = json_dumps(desc, JSON_INDENT(2));
        if (!text || qk_write_file_atomic(sdesc, text, strlen(text), 0) != QK_OK) {
            if (text) qmsg_keep();
            else qmsg(QK_ERR_NOMEM, "cannot encode the description");
            err = 1;
        }
        free(text);
    }
    if (!err && stage[0]) err = publish(stage, out, sibling, ids, nin);
    if (err && stage[0]) remove_tree1(stage); /* nothing half-written is left */
    if (pg.on) {
        if (!err) pg.done = pg.total;
        progress_show(&pg, err ? "failed" : "done", true);
        fputc('\n', stderr);
    }
    if (!err && rep) *rep = (qk_ms_quantize_report){nq, nkept, nf};
    const qk_status rst = err ? (q_status != QK_OK ? q_status : QK_ERR_IO) : QK_OK;
    for (size_t f = 0; names && f < nf; f++) free(names[f]);
    free(names);
    free(ids);
    free(obytes);
    free(shard_of);
    free(src_dir);
    json_decref(desc);
    json_decref(wmap);
    qk_st_set_close(set);
    return rst;
}

qk_ms_quantize_options qk_ms_quantize_defaults(void)
{
    qk_ms_quantize_options o;
    memset(&o, 0, sizeof o);
    o.mx = qk_mx_options_default();
    o.mx.scale_rule = QK_MX_SCALE_MODELSLIM;
    o.mx.round = QK_ROUND_NEAREST_AWAY;
    o.shard_size = 4000000000ull;
    return o;
}
