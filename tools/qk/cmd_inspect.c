/* `qk inspect PATH [--json]`: a safetensors file, an index, or a folder (ModelSlim or HF):
 * every tensor with dtype, shape and bytes; every MXFP8 linear with N, K, kb, whether its
 * last block is partial, scale-exponent statistics; and every problem found (floor-sized
 * or misshapen scales, 0xFF scales, NaN weight codes, dtype/shape mismatches, description
 * entries without tensors and the reverse, index/shard disagreements). Exit status 1 when
 * a problem is found (or PATH cannot be read), 2 on a usage error, else 0. */
#define _GNU_SOURCE
#include "qk_tool.h"

#include "internal.h"
#include "qkern_io.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char **v;
    size_t n, cap;
} strlist;

static void sl_add(strlist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sl_add(strlist *l, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return;
        l->v = v;
        l->cap = cap;
    }
    size_t len = strlen(buf) + 1;
    char *s = malloc(len);
    if (!s) return;
    memcpy(s, buf, len);
    l->v[l->n++] = s;
}

static void sl_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int32_t d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- one MXFP8 linear ---- */
typedef struct {
    char *prefix;
    bool have_dims;
    int64_t N, K, kb;
    bool scale_scanned;
    int64_t scale_rows, scale_cols;
    uint64_t ff_count, zero_count, finite_count;
    int64_t ff_row, ff_block;
    int exp_min, exp_max;
    double exp_mean;
    bool weight_scanned;
    uint64_t nan_count;
    int64_t nan_row, nan_col;
} linear_report;

/* parallel scans: chunks of rows, one result slot per chunk */
typedef struct {
    const uint8_t *p;
    int64_t rows, cols, chunk;
    bool scale;                /* scale bytes (else E4M3 codes) */
    uint64_t *count, *zero, *finite;
    int64_t *first;            /* flat index of the first hit, -1 */
    int *emin, *emax;
    double *esum;
} scan_ctx;

static void scan_chunks(const void *vctx, int64_t begin, int64_t end)
{
    const scan_ctx *c = vctx;
    for (int64_t ch = begin; ch < end; ch++) {
        int64_t r0 = ch * c->chunk, r1 = r0 + c->chunk < c->rows ? r0 + c->chunk : c->rows;
        uint64_t cnt = 0, zero = 0, fin = 0;
        int64_t first = -1;
        int emin = 255, emax = -255;
        double esum = 0;
        const uint8_t *p = c->p + r0 * c->cols;
        int64_t n = (r1 - r0) * c->cols;
        for (int64_t i = 0; i < n; i++) {
            uint8_t b = p[i];
            if (c->scale) {
                if (b == 0xFF) {
                    if (first < 0) first = r0 * c->cols + i;
                    cnt++;
                    continue;
                }
                int e = (int)b - 127;
                if (b == 0) zero++;
                fin++;
                esum += e;
                if (e < emin) emin = e;
                if (e > emax) emax = e;
            } else if ((b & 0x7F) == 0x7F) {
                if (first < 0) first = r0 * c->cols + i;
                cnt++;
            }
        }
        c->count[ch] = cnt;
        c->first[ch] = first;
        if (c->scale) {
            c->zero[ch] = zero;
            c->finite[ch] = fin;
            c->emin[ch] = emin;
            c->emax[ch] = emax;
            c->esum[ch] = esum;
        }
    }
}

static void scan_bytes(const uint8_t *p, int64_t rows, int64_t cols, bool scale, linear_report *r)
{
    int64_t chunk = rows / 256 + 1, nch = (rows + chunk - 1) / chunk;
    if (nch < 1) nch = 1;
    scan_ctx c = {p, rows, cols, chunk, scale, calloc((size_t)nch, 8), calloc((size_t)nch, 8),
                  calloc((size_t)nch, 8), calloc((size_t)nch, 8), calloc((size_t)nch, sizeof(int)),
                  calloc((size_t)nch, sizeof(int)), calloc((size_t)nch, sizeof(double))};
    if (c.count && c.zero && c.finite && c.first && c.emin && c.emax && c.esum) {
        qk_parallel_for(nch, chunk * cols, 1 << 20, scan_chunks, &c);
        uint64_t cnt = 0, zero = 0, fin = 0;
        int64_t first = -1;
        int emin = 255, emax = -255;
        double esum = 0;
        for (int64_t i = 0; i < nch; i++) {
            cnt += c.count[i];
            if (first < 0 && c.first[i] >= 0) first = c.first[i];
            if (scale) {
                zero += c.zero[i];
                fin += c.finite[i];
                esum += c.esum[i];
                if (c.finite[i]) {
                    if (c.emin[i] < emin) emin = c.emin[i];
                    if (c.emax[i] > emax) emax = c.emax[i];
                }
            }
        }
        if (scale) {
            r->scale_scanned = true;
            r->ff_count = cnt;
            r->zero_count = zero;
            r->finite_count = fin;
            r->ff_row = first >= 0 ? first / cols : -1;
            r->ff_block = first >= 0 ? first % cols : -1;
            r->exp_min = fin ? emin : 0;
            r->exp_max = fin ? emax : 0;
            r->exp_mean = fin ? esum / (double)fin : 0.0;
        } else {
            r->weight_scanned = true;
            r->nan_count = cnt;
            r->nan_row = first >= 0 ? first / cols : -1;
            r->nan_col = first >= 0 ? first % cols : -1;
        }
    }
    free(c.count); free(c.zero); free(c.finite); free(c.first); free(c.emin); free(c.emax); free(c.esum);
}

/* the loader's message, without its "load " prefix */
static const char *check_message(void)
{
    const char *m = qk_last_error();
    return strncmp(m, "load ", 5) ? m : m + 5;
}

static bool find(const qk_st_set *s, const char *name, qk_st_info *info)
{
    return qk_st_set_find(s, name, info) == QK_OK;
}

static void analyse_linear(const qk_st_set *s, const qk_ms_desc *desc, linear_report *r,
                           strlist *problems)
{
    char wn[1024], sn[1024], bn[1024];
    snprintf(wn, sizeof wn, "%s.weight", r->prefix);
    snprintf(sn, sizeof sn, "%s.weight_scale", r->prefix);
    snprintf(bn, sizeof bn, "%s.bias", r->prefix);
    qk_st_info w, sc, b;
    bool hw = find(s, wn, &w), hs = find(s, sn, &sc), hb = find(s, bn, &b);
    if (!hw) {
        sl_add(problems, "%s: has a weight_scale but no weight", r->prefix);
        return;
    }
    if (desc) {
        const char *qw = qk_ms_desc_lookup(desc, wn), *qs = hs ? qk_ms_desc_lookup(desc, sn) : NULL;
        if (qw && strcmp(qw, "W8A8_MXFP8"))
            sl_add(problems, "%s: described as %s, but it is an MXFP8 linear weight (%s)", wn, qw, w.dtype_name);
        if (qs && strcmp(qs, "W8A8_MXFP8"))
            sl_add(problems, "%s: described as %s, not W8A8_MXFP8", sn, qs);
    }
    if (w.ndim != 2) {
        char t[128];
        shape_text(w.shape, w.ndim, t, sizeof t);
        sl_add(problems, "%s: shape %s is not [N, K]", wn, t);
        return;
    }
    r->have_dims = true;
    r->N = w.shape[0];
    r->K = w.shape[1];
    r->kb = qk_mx_blocks(r->K); /* K may be INT64_MAX */
    if (qk_mx_linear_check_tensor(wn, w.dtype_name, w.ndim, w.shape, r->N, r->K) != QK_OK)
        sl_add(problems, "%s", check_message());
    else if (r->N > 0 && r->K > 0)
        scan_bytes(w.data, r->N, r->K, false, r);
    if (r->weight_scanned && r->nan_count)
        sl_add(problems, "%s: %llu NaN codes (0x7F/0xFF); the first at row %lld, column %lld", wn,
               (unsigned long long)r->nan_count, (long long)r->nan_row, (long long)r->nan_col);
    if (!hs) {
        sl_add(problems, "%s: has no %s.weight_scale", wn, r->prefix);
    } else {
        if (qk_mx_linear_check_tensor(sn, sc.dtype_name, sc.ndim, sc.shape, r->N, r->K) != QK_OK)
            sl_add(problems, "%s", check_message());
        if (sc.elem_size == 1 && sc.ndim == 2 && sc.shape[0] > 0 && sc.shape[1] > 0) {
            r->scale_rows = sc.shape[0];
            r->scale_cols = sc.shape[1];
            scan_bytes(sc.data, sc.shape[0], sc.shape[1], true, r);
            if (r->ff_count)
                sl_add(problems, "%s: %llu scale bytes are 0xFF (NaN); the first at row %lld, block %lld",
                       sn, (unsigned long long)r->ff_count, (long long)r->ff_row, (long long)r->ff_block);
        }
    }
    if (hb && qk_mx_linear_check_tensor(bn, b.dtype_name, b.ndim, b.shape, r->N, r->K) != QK_OK)
        sl_add(problems, "%s", check_message());
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *human(uint64_t n, char *buf, size_t len)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1000 && i < 4) { v /= 1000; i++; }
    if (i == 0) snprintf(buf, len, "%llu B", (unsigned long long)n);
    else snprintf(buf, len, "%.1f %s", v, u[i]);
    return buf;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: qk inspect PATH [--json] [--allow-external-shards]\n"
               "  PATH: a .safetensors file, an index .json, or a folder (ModelSlim W8A8_MXFP8\n"
               "  export or a folder with one index or one .safetensors file)\n"
               "  --allow-external-shards: follow shard symlinks that resolve outside the folder\n"
               "  (a Hugging Face cache snapshot); refused by default\n"
               "  exit status: 0 no problem, 1 problems found (or PATH unreadable), 2 usage\n");
    return f == stderr ? 2 : 0;
}

int qk_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool as_json = false, external = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) as_json = true;
        else if (!strcmp(argv[i], "--allow-external-shards")) external = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "qk inspect: unknown option %s\n", argv[i]);
            return usage(stderr);
        } else if (!path) path = argv[i];
        else return usage(stderr);
    }
    if (!path) return usage(stderr);

    strlist problems = {0};
    qk_ms_model *ms = NULL;
    qk_st_set *own = NULL;
    const qk_st_set *set = NULL;
    const qk_ms_desc *desc = NULL;
    struct stat sb;
    char descpath[4096];
    snprintf(descpath, sizeof descpath, "%s/quant_model_description.json", path);
    bool is_ms = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(descpath, &sb) == 0;
    qk_status st;
    if (is_ms) {
        st = qk_ms_open(path, QK_MS_LENIENT | (external ? QK_MS_ALLOW_EXTERNAL_SHARDS : 0u), &ms);
        if (st == QK_OK) {
            set = qk_ms_tensors(ms);
            desc = qk_ms_description(ms);
            for (size_t i = 0; i < qk_ms_problem_count(ms); i++) sl_add(&problems, "%s", qk_ms_problem(ms, i));
        }
    } else {
        st = qk_st_set_open(path, QK_ST_SET_LENIENT | (external ? QK_ST_SET_ALLOW_EXTERNAL_SHARDS : 0u),
                            &own);
        if (st == QK_OK) {
            set = own;
            for (size_t i = 0; i < qk_st_set_problem_count(own); i++)
                sl_add(&problems, "%s", qk_st_set_problem(own, i));
        }
    }
    if (st != QK_OK) sl_add(&problems, "%s: %s", qk_status_name(st), qk_last_error());

    /* the MXFP8 linears: every prefix with a .weight_scale, an F8_E4M3 .weight, or a
       .weight described W8A8_MXFP8 */
    size_t nt = set ? qk_st_set_count(set) : 0, nl = 0;
    char **prefixes = calloc(nt ? nt : 1, sizeof *prefixes);
    for (size_t i = 0; prefixes && i < nt; i++) {
        qk_st_info info;
        qk_st_set_info_at(set, i, &info);
        size_t len = strlen(info.name), cut = 0;
        if (ends_with(info.name, ".weight_scale")) cut = len - 13;
        else if (ends_with(info.name, ".weight") &&
                 (info.dtype == QK_DTYPE_F8_E4M3 ||
                  (desc && qk_ms_desc_lookup(desc, info.name) &&
                   !strcmp(qk_ms_desc_lookup(desc, info.name), "W8A8_MXFP8"))))
            cut = len - 7;
        else continue;
        char *p = malloc(cut + 1);
        if (!p) continue;
        memcpy(p, info.name, cut);
        p[cut] = 0;
        prefixes[nl++] = p;
    }
    if (prefixes) qsort(prefixes, nl, sizeof *prefixes, cmp_str);
    size_t nu = 0;
    for (size_t i = 0; i < nl; i++) {
        if (nu && !strcmp(prefixes[nu - 1], prefixes[i])) { free(prefixes[i]); continue; }
        prefixes[nu++] = prefixes[i];
    }
    linear_report *lin = calloc(nu ? nu : 1, sizeof *lin);
    for (size_t i = 0; lin && i < nu; i++) {
        lin[i].prefix = prefixes[i];
        analyse_linear(set, desc, &lin[i], &problems);
    }

    uint64_t total = 0;
    for (size_t i = 0; i < nt; i++) {
        qk_st_info info;
        qk_st_set_info_at(set, i, &info);
        total += info.nbytes;
    }
    char hb[32], sh[256];
    if (as_json) {
        json_t *root = json_object();
        json_object_set_new(root, "path", json_string(path));
        json_object_set_new(root, "kind", json_string(is_ms ? "modelslim" : "safetensors"));
        if (desc) {
            json_t *d = json_object();
            json_object_set_new(d, "model_quant_type", json_string(qk_ms_desc_quant_type(desc)));
            json_object_set_new(d, "version", json_string(qk_ms_desc_version(desc)));
            json_object_set_new(d, "group_size", json_integer(qk_ms_desc_group_size(desc)));
            json_object_set_new(d, "entries", json_integer((json_int_t)qk_ms_desc_count(desc)));
            json_object_set_new(root, "description", d);
        }
        json_t *files = json_array();
        for (size_t f = 0; set && f < qk_st_set_file_count(set); f++) {
            const qk_st_file *file = qk_st_set_file(set, f);
            json_t *jf = json_object(), *meta = json_object();
            json_object_set_new(jf, "path", json_string(qk_st_path(file)));
            json_object_set_new(jf, "tensors", json_integer((json_int_t)qk_st_count(file)));
            json_object_set_new(jf, "header_bytes", json_integer((json_int_t)qk_st_header_size(file)));
            for (size_t m = 0; m < qk_st_metadata_count(file); m++) {
                const char *k, *v;
                qk_st_metadata_at(file, m, &k, &v);
                json_object_set_new(meta, k, json_string(v));
            }
            json_object_set_new(jf, "metadata", meta);
            json_array_append_new(files, jf);
        }
        json_object_set_new(root, "files", files);
        json_t *ts = json_array();
        for (size_t i = 0; i < nt; i++) {
            qk_st_info info;
            qk_st_set_info_at(set, i, &info);
            json_t *t = json_object(), *shape = json_array();
            for (int32_t d = 0; d < info.ndim; d++) json_array_append_new(shape, json_integer(info.shape[d]));
            json_object_set_new(t, "name", json_string(info.name));
            json_object_set_new(t, "dtype", json_string(info.dtype_name));
            json_object_set_new(t, "shape", shape);
            json_object_set_new(t, "bytes", json_integer((json_int_t)info.nbytes));
            const char *q = desc ? qk_ms_desc_lookup(desc, info.name) : NULL;
            json_object_set_new(t, "quant_type", q ? json_string(q) : json_null());
            json_array_append_new(ts, t);
        }
        json_object_set_new(root, "tensors", ts);
        json_object_set_new(root, "total_bytes", json_integer((json_int_t)total));
        json_t *ls = json_array();
        for (size_t i = 0; lin && i < nu; i++) {
            linear_report *r = &lin[i];
            json_t *l = json_object();
            json_object_set_new(l, "prefix", json_string(r->prefix));
            if (r->have_dims) {
                json_object_set_new(l, "N", json_integer(r->N));
                json_object_set_new(l, "K", json_integer(r->K));
                json_object_set_new(l, "kb", json_integer(r->kb));
                json_object_set_new(l, "partial_last_block", json_boolean(r->K % QK_MX_BLOCK != 0));
                json_object_set_new(l, "last_block_elements",
                                    json_integer(r->K - QK_MX_BLOCK * (r->kb - 1)));
            }
            if (r->scale_scanned) {
                json_t *e = json_object();
                json_object_set_new(e, "min", json_integer(r->exp_min));
                json_object_set_new(e, "max", json_integer(r->exp_max));
                json_object_set_new(e, "mean", json_real(r->exp_mean));
                json_object_set_new(e, "zero_bytes", json_integer((json_int_t)r->zero_count));
                json_object_set_new(e, "nan_bytes", json_integer((json_int_t)r->ff_count));
                json_object_set_new(l, "scale_exponent", e);
                json_object_set_new(l, "scale_shape", json_pack("[II]", (json_int_t)r->scale_rows,
                                                                (json_int_t)r->scale_cols));
            }
            if (r->weight_scanned)
                json_object_set_new(l, "nan_weight_codes", json_integer((json_int_t)r->nan_count));
            json_array_append_new(ls, l);
        }
        json_object_set_new(root, "linears", ls);
        json_t *ps = json_array();
        for (size_t i = 0; i < problems.n; i++) json_array_append_new(ps, json_string(problems.v[i]));
        json_object_set_new(root, "problems", ps);
        json_object_set_new(root, "ok", json_boolean(problems.n == 0));
        char *text = json_dumps(root, JSON_INDENT(2));
        if (text) {
            puts(text);
            free(text);
        }
        json_decref(root);
    } else {
        if (set) {
            if (desc)
                printf("%s: ModelSlim %s (version %s, group_size %lld), ", path,
                       qk_ms_desc_quant_type(desc), qk_ms_desc_version(desc),
                       (long long)qk_ms_desc_group_size(desc));
            else
                printf("%s: safetensors, ", path);
            printf("%zu file%s, %zu tensors, %s\n", qk_st_set_file_count(set),
                   qk_st_set_file_count(set) == 1 ? "" : "s", nt, human(total, hb, sizeof hb));
            for (size_t f = 0; f < qk_st_set_file_count(set); f++) {
                const qk_st_file *file = qk_st_set_file(set, f);
                printf("  %s: %zu tensors, header %llu bytes", qk_st_path(file), qk_st_count(file),
                       (unsigned long long)qk_st_header_size(file));
                for (size_t m = 0; m < qk_st_metadata_count(file); m++) {
                    const char *k, *v;
                    qk_st_metadata_at(file, m, &k, &v);
                    printf("%s%s=%s", m ? ", " : "; metadata: ", k, v);
                }
                printf("\n");
            }
            printf("\ntensors:\n");
            for (size_t i = 0; i < nt; i++) {
                qk_st_info info;
                qk_st_set_info_at(set, i, &info);
                shape_text(info.shape, info.ndim, sh, sizeof sh);
                const char *q = desc ? qk_ms_desc_lookup(desc, info.name) : NULL;
                printf("  %-56s %-8s %-18s %14llu%s%s\n", info.name, info.dtype_name, sh,
                       (unsigned long long)info.nbytes, q ? "  " : "", q ? q : "");
            }
        }
        if (nu) {
            printf("\nmxfp8 linears:\n");
            for (size_t i = 0; i < nu; i++) {
                linear_report *r = &lin[i];
                printf("  %s:", r->prefix);
                if (r->have_dims) {
                    printf(" N=%lld K=%lld kb=%lld", (long long)r->N, (long long)r->K, (long long)r->kb);
                    if (r->K % QK_MX_BLOCK)
                        printf(", last block partial (%lld of 32)", (long long)(r->K - QK_MX_BLOCK * (r->kb - 1)));
                    else
                        printf(", no partial block");
                }
                if (r->scale_scanned)
                    printf(", scales [%lld, %lld] exponent min %d max %d mean %.2f (%llu zero, %llu 0xFF)",
                           (long long)r->scale_rows, (long long)r->scale_cols, r->exp_min, r->exp_max,
                           r->exp_mean, (unsigned long long)r->zero_count, (unsigned long long)r->ff_count);
                if (r->weight_scanned) printf(", %llu NaN weight codes", (unsigned long long)r->nan_count);
                printf("\n");
            }
        }
        if (problems.n) {
            printf("\nproblems (%zu):\n", problems.n);
            for (size_t i = 0; i < problems.n; i++) printf("  - %s\n", problems.v[i]);
        } else {
            printf("\nno problems found\n");
        }
    }
    int rc = problems.n ? 1 : 0;
    for (size_t i = 0; lin && i < nu; i++) free(lin[i].prefix);
    if (!lin)
        for (size_t i = 0; i < nu; i++) free(prefixes[i]);
    free(lin);
    free(prefixes);
    sl_free(&problems);
    qk_ms_close(ms);
    qk_st_set_close(own);
    return rc;
}
