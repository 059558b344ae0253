/* Helpers shared by the `qk bench` protocols: timing, percentiles, residency, the
 * machine's copy/read bandwidth, comparisons, tables and JSON (contracts in
 * bench_common.h; the SVG plot is in svg_plot.c). */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "isa/bench_isa.h"

#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* ---- options ---- */
bool qkb_parse_options(const char *prog, int argc, char **argv, qkb_options *opt)
{
    memset(opt, 0, sizeof *opt);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json") && i + 1 < argc) {
            opt->json = argv[++i];
        } else if (!strcmp(a, "--plot") && i + 1 < argc) {
            opt->plot = argv[++i];
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            opt->threads = atoi(argv[++i]);
            if (opt->threads < 0) opt->threads = 0;
        } else if (!strcmp(a, "--quick")) {
            opt->quick = true;
        } else if (!strcmp(a, "--verbose")) {
            opt->verbose = true;
        } else {
            const char *pre = strncmp(prog, "qk ", 3) ? "qk bench " : ""; /* "norm" or "qk bench norm" */
            fprintf(stderr, "%s%s: unknown or incomplete option '%s'\n"
                            "usage: %s%s [--json FILE] [--plot FILE.svg] [--quick] "
                            "[--threads N] [--verbose]\n", pre, prog, a, pre, prog);
            return false;
        }
    }
    return true;
}

/* ---- timing ---- */
double qkb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double qkb_timer_overhead(void)
{
    enum { N = 1001 };
    double d[N];
    for (int i = 0; i < N; i++) {
        double t0 = qkb_now();
        d[i] = qkb_now() - t0;
    }
    qsort(d, N, sizeof d[0], cmp_double);
    return d[N / 2];
}

double qkb_percentile(const double *sorted, int n, double p)
{
    if (n <= 0) return NAN;
    double pos = p * (n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    double f = pos - lo;
    return sorted[lo] * (1.0 - f) + sorted[lo + 1] * f;
}

qkb_stats qkb_stats_of(double *samples, int n)
{
    qkb_stats s;
    memset(&s, 0, sizeof s);
    s.reps = n;
    s.batch = 1;
    if (n <= 0) {
        s.p10 = s.p50 = s.p90 = s.min = s.mean = NAN;
        return s;
    }
    qsort(samples, (size_t)n, sizeof samples[0], cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += samples[i];
    s.p10 = qkb_percentile(samples, n, 0.10);
    s.p50 = qkb_percentile(samples, n, 0.50);
    s.p90 = qkb_percentile(samples, n, 0.90);
    s.min = samples[0];
    s.mean = sum / n;
    return s;
}

qkb_stats qkb_time_calls_capped(qkb_call_fn fn, void *ctx, int warmup, int reps,
                                double max_seconds, int min_reps)
{
    int64_t iter = 0;
    for (int i = 0; i < warmup; i++) fn(ctx, iter++);
    double *t = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    if (!t) abort();
    const double start = qkb_now();
    int n = 0;
    while (n < reps) {
        double t0 = qkb_now();
        fn(ctx, iter++);
        double t1 = qkb_now();
        t[n++] = t1 - t0;
        if (n >= min_reps && t1 - start > max_seconds) break;
    }
    qkb_stats s = qkb_stats_of(t, n);
    s.warmup = warmup;
    free(t);
    return s;
}

qkb_stats qkb_time_calls(qkb_call_fn fn, void *ctx, int warmup, int reps)
{
    return qkb_time_calls_capped(fn, ctx, warmup, reps, INFINITY, reps);
}

void qkb_time_interleaved(qkb_variant *v, int n, int block)
{
    if (block < 1) block = 1;
    const size_t nn = (size_t)(n > 0 ? n : 1);
    double **t = calloc(nn, sizeof(double *));
    int *got = calloc(nn, sizeof(int)), *warm_turns = calloc(nn, sizeof(int));
    int *turns = calloc(nn, sizeof(int)), *untimed = calloc(nn, sizeof(int));
    int64_t *iter = calloc(nn, sizeof(int64_t));
    double *spent = calloc(nn, sizeof(double)), *warm_min = calloc(nn, sizeof(double));
    int *batch = calloc(nn, sizeof(int));
    if (!t || !got || !warm_turns || !turns || !untimed || !iter || !spent || !warm_min || !batch)
        abort();
    int rounds = 0;
    for (int k = 0; k < n; k++) {
        warm_turns[k] = (v[k].warmup + block - 1) / block;
        turns[k] = warm_turns[k] + (v[k].reps + block - 1) / block;
        warm_min[k] = INFINITY;
        if (turns[k] > rounds) rounds = turns[k];
        t[k] = malloc(sizeof(double) * (size_t)(v[k].reps > 0 ? v[k].reps : 1));
        if (!t[k]) abort();
    }
    int *order = calloc(nn, sizeof(int));
    if (!order) abort();
    for (int k = 0; k < n; k++) order[k] = k;
    uint64_t seed = 0x243f6a8885a308d3ull;
    for (int r = 0; r < rounds; r++) {
        /* a fresh order each round (Fisher-Yates, fixed seed): no variant always follows
           the same one */
        for (int k = n - 1; k > 0; k--) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const int o = (int)((seed >> 33) % (uint64_t)(k + 1)), tmp = order[k];
            order[k] = order[o];
            order[o] = tmp;
        }
        for (int kk = 0; kk < n; kk++) {
            const int k = order[kk];
            const int turn = r - (rounds - turns[k]);
            if (turn < 0) continue;
            if (turn < warm_turns[k]) {
                const int64_t left = v[k].warmup - (int64_t)turn * block;
                for (int64_t c = 0; c < (left < block ? left : block); c++) {
                    const double t0 = qkb_now();
                    v[k].fn(v[k].ctx, iter[k]++);
                    const double d = qkb_now() - t0;
                    if (d < warm_min[k]) warm_min[k] = d;
                }
                untimed[k] += (int)(left < block ? left : block);
                continue;
            }
            if (!batch[k]) { /* calls per sample, from the fastest warm-up call */
                const double b = ceil(QKB_MIN_SAMPLE_S / warm_min[k]);
                batch[k] = !(b > 1.0) ? 1 : b > QKB_MAX_BATCH ? QKB_MAX_BATCH : (int)b;
            }
            const int want = v[k].reps - got[k] < block ? v[k].reps - got[k] : block;
            if (want <= 0) continue;
            if (v[k].max_seconds > 0 && got[k] >= v[k].min_reps && spent[k] > v[k].max_seconds)
                continue;
            v[k].fn(v[k].ctx, iter[k]++); /* brings the variant's data back into the caches */
            untimed[k]++;
            for (int c = 0; c < want; c++) {
                const double t0 = qkb_now();
                for (int b = 0; b < batch[k]; b++) v[k].fn(v[k].ctx, iter[k]++);
                const double d = qkb_now() - t0;
                t[k][got[k]++] = d / batch[k];
                spent[k] += d;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        v[k].st = qkb_stats_of(t[k], got[k]);
        v[k].st.warmup = untimed[k];
        v[k].st.batch = batch[k] ? batch[k] : 1;
        free(t[k]);
    }
    free(t);
    free(got);
    free(warm_turns);
    free(turns);
    free(untimed);
    free(iter);
    free(spent);
    free(warm_min);
    free(batch);
    free(order);
}

qkb_stats qkb_time_batched(qkb_call_fn fn, void *ctx, int warmup, int reps)
{
    int64_t iter = 0;
    double t0 = qkb_now();
    for (int i = 0; i < warmup; i++) fn(ctx, iter++);
    double per = warmup > 0 ? (qkb_now() - t0) / warmup : 1e-6;
    int64_t batch = per > 0 ? (int64_t)ceil(20e-6 / per) : 1000;
    if (batch < 1) batch = 1;
    if (batch > 100000) batch = 100000;
    double *t = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    if (!t) abort();
    for (int i = 0; i < reps; i++) {
        double b0 = qkb_now();
        for (int64_t k = 0; k < batch; k++) fn(ctx, iter++);
        t[i] = (qkb_now() - b0) / (double)batch;
    }
    qkb_stats s = qkb_stats_of(t, reps);
    s.warmup = warmup;
    free(t);
    return s;
}

/* ---- caches and residency ---- */
static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    else if (*end == 'G' || *end == 'g') v <<= 30;
    return (size_t)v;
}

static bool read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = 0;
    return ok;
}

size_t qkb_llc_bytes(void)
{
    static size_t cached;
    if (cached) return cached;
    int best_level = 0;
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_line(path, buf, sizeof buf)) continue;
        int level = atoi(buf);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, buf, sizeof buf) && !strcmp(buf, "Instruction")) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!read_line(path, buf, sizeof buf)) continue;
        size_t sz = parse_size(buf);
        if (level > best_level && sz > 0) {
            best_level = level;
            best = sz;
        }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (!best) {
        long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (v > 0) best = (size_t)v;
    }
#endif
    if (!best) best = (size_t)32 << 20;
    cached = best;
    return best;
}

qkb_residency qkb_rotation(size_t footprint, int *nbuf)
{
    size_t llc = qkb_llc_bytes();
    if (footprint == 0 || footprint <= llc / 2) {
        *nbuf = 1;
        return QKB_CACHE;
    }
    size_t n = (2 * llc + footprint - 1) / footprint;
    *nbuf = (int)(n < 2 ? 2 : n);
    return QKB_DRAM;
}

const char *qkb_residency_name(qkb_residency r) { return r == QKB_DRAM ? "DRAM" : "cache"; }

void *qkb_alloc(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (!p) {
        fprintf(stderr, "qk bench: out of memory allocating %zu bytes\n", n);
        exit(1);
    }
    memset(p, 0, n);
    return p;
}

float qkb_uniform(qkb_rng *r, float lo, float hi)
{
    uint64_t x = r->s ? r->s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return lo + (hi - lo) * (float)((x >> 40) * (1.0 / 16777216.0));
}

/* ---- bandwidth kernels ---- */
#define QKB_BLOCK 64 /* floats per parallel item (256 bytes, 64-byte aligned) */

/* the vector part of each loop is the ISA's (tools/qk/isa/<arch>.c); the tail is plain C */
static void scale_f32(const float *x, float *y, float a, int64_t begin, int64_t end, bool nt)
{
    for (int64_t i = qkb_isa_scale_f32(x, y, a, begin, end, nt); i < end; i++) y[i] = a * x[i];
}

static float sum_f32(const float *x, int64_t begin, int64_t end)
{
    float s = 0;
    for (int64_t i = qkb_isa_sum_f32(x, begin, end, &s); i < end; i++) s += x[i];
    return s;
}

struct qkb_bw_ctx {
    float **x, **y;        /* nbuf buffers each (y NULL: read only); shared by the modes */
    int nbuf;
    int64_t n;             /* floats per buffer */
    bool all_threads, nt;
    int64_t batch;         /* copies (reads) per call of the mode's variant */
    int64_t iter;          /* copies made, for the rotation */
    /* the current pair, for the parallel range function */
    const float *cx;
    float *cy;
    float sink[64];
};
typedef struct qkb_bw_ctx bw_ctx;

static void copy_range(const void *p, int64_t b, int64_t e)
{
    const bw_ctx *c = (const bw_ctx *)p;
    int64_t hi = e * QKB_BLOCK < c->n ? e * QKB_BLOCK : c->n;
    scale_f32(c->cx, c->cy, 1.0001f, b * QKB_BLOCK, hi, c->nt);
}

static void read_range(const void *p, int64_t b, int64_t e)
{
    bw_ctx *c = (bw_ctx *)(uintptr_t)p;
    int64_t hi = e * QKB_BLOCK < c->n ? e * QKB_BLOCK : c->n;
    float s = sum_f32(c->cx, b * QKB_BLOCK, hi);
    c->sink[(b * 7) & 63] += s; /* keeps the loads; races on the sink are harmless here */
}

static void bw_once(bw_ctx *c)
{
    int k = (int)(c->iter++ % c->nbuf);
    c->cx = c->x[k];
    c->cy = c->y ? c->y[k] : NULL;
    qk_range_fn fn = c->y ? copy_range : read_range;
    int64_t items = (c->n + QKB_BLOCK - 1) / QKB_BLOCK;
    if (c->all_threads) qk_parallel_for(items, QKB_BLOCK * 4, 0, fn, c);
    else fn(c, 0, items);
}

/* one call of a mode's variant: `batch` copies (reads), each on the next buffer set */
static void bw_call(void *p, int64_t iter)
{
    bw_ctx *c = (bw_ctx *)p;
    (void)iter;
    for (int64_t i = 0; i < c->batch; i++) bw_once(c);
}

static int limit_begin(qkb_limit *l, size_t buf_bytes, size_t counted, int nbuf, bool copy,
                       int warmup, int reps, qkb_variant *v)
{
    memset(l, 0, sizeof *l);
    if (nbuf < 1) nbuf = 1;
    l->counted = counted;
    l->nbuf = nbuf;
    int64_t n = (int64_t)(buf_bytes / sizeof(float));
    if (n < 16) n = 16;
    float **x = calloc((size_t)nbuf, sizeof(float *));
    float **y = copy ? calloc((size_t)nbuf, sizeof(float *)) : NULL;
    if (!x || (copy && !y)) abort();
    for (int k = 0; k < nbuf; k++) {
        x[k] = qkb_alloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) x[k][i] = (float)(i & 255) * 0.25f;
        if (copy) y[k] = qkb_alloc((size_t)n * sizeof(float));
    }
    /* 1 thread, all threads and, for copies whose buffers exceed the LLC, non-temporal
       stores */
    const bool dram = (size_t)nbuf * (copy ? 2 : 1) * buf_bytes > qkb_llc_bytes();
    const int modes = copy && dram ? 3 : 2;
    for (int m = 0; m < modes; m++) {
        bw_ctx *c = calloc(1, sizeof *c);
        if (!c) abort();
        c->x = x;
        c->y = y;
        c->nbuf = nbuf;
        c->n = n;
        c->all_threads = m > 0;
        c->nt = m == 2;
        c->batch = 1;
        /* enough copies per call to last >= ~20 us, so that the timer's cost vanishes */
        bw_once(c);
        const double t0 = qkb_now();
        bw_once(c);
        const double per = qkb_now() - t0;
        c->batch = per > 0 ? (int64_t)ceil(20e-6 / per) : 1000;
        if (c->batch < 1) c->batch = 1;
        if (c->batch > 100000) c->batch = 100000;
        l->ctx[m] = c;
        memset(&v[m], 0, sizeof v[m]);
        v[m].fn = bw_call;
        v[m].ctx = c;
        v[m].warmup = warmup;
        v[m].reps = reps;
        v[m].max_seconds = QKB_RUN_CAP_S;
        v[m].min_reps = reps < 40 ? reps : 40;
    }
    l->n = modes;
    return modes;
}

int qkb_limit_copy_begin(qkb_limit *l, size_t footprint, int nbuf, int warmup, int reps,
                         qkb_variant *v)
{
    return limit_begin(l, footprint / 2,
                       footprint / 2 / sizeof(float) < 16 ? 16 * 2 * sizeof(float) : footprint,
                       nbuf, true, warmup, reps, v);
}

int qkb_limit_read_begin(qkb_limit *l, size_t bytes, int nbuf, int warmup, int reps, qkb_variant *v)
{
    return limit_begin(l, bytes, bytes < 64 ? 64 : bytes, nbuf, false, warmup, reps, v);
}

qkb_bandwidth qkb_limit_end(qkb_limit *l, const qkb_variant *v)
{
    qkb_bandwidth r;
    memset(&r, 0, sizeof r);
    r.nbuf = l->nbuf;
    double g[3] = {0, 0, 0};
    for (int m = 0; m < l->n; m++)
        if (v[m].st.p50 > 0) g[m] = (double)l->counted / (v[m].st.p50 / (double)l->ctx[m]->batch) * 1e-9;
    r.gbps_1t = g[0];
    r.gbps_all = g[1];
    r.gbps_nt = g[2];
    r.gbps = r.gbps_1t;
    r.threads = 1;
    if (r.gbps_all > r.gbps) {
        r.gbps = r.gbps_all;
        r.threads = qk_get_num_threads();
    }
    if (r.gbps_nt > r.gbps) {
        r.gbps = r.gbps_nt;
        r.threads = qk_get_num_threads();
        r.nt = true;
    }
    if (l->n > 0) {
        bw_ctx *c = l->ctx[0];
        for (int k = 0; k < c->nbuf; k++) {
            free(c->x[k]);
            if (c->y) free(c->y[k]);
        }
        free(c->x);
        free(c->y);
    }
    for (int m = 0; m < l->n; m++) free(l->ctx[m]);
    memset(l, 0, sizeof *l);
    return r;
}

/* ---- comparisons ---- */
double qkb_geomean(const double *v, const bool *use, int n)
{
    double s = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (use && !use[i]) continue;
        if (!(v[i] > 0) || isinf(v[i])) continue;
        s += log(v[i]);
        k++;
    }
    return k ? exp(s / k) : NAN;
}

qkb_compare qkb_compare_times(const double *t_a, const double *t_b, int n)
{
    qkb_compare c;
    memset(&c, 0, sizeof c);
    c.worst = -INFINITY;
    c.worst_cell = -1;
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (!(t_a[i] > 0) || !(t_b[i] > 0)) continue;
        s += log(t_b[i] / t_a[i]);
        c.n++;
        double reg = t_a[i] / t_b[i] - 1.0;
        if (reg > c.worst) {
            c.worst = reg;
            c.worst_cell = i;
        }
    }
    c.geomean = c.n ? exp(s / c.n) : NAN;
    c.pass = c.n > 0 && c.geomean >= 1.0 && c.worst <= 0.10;
    return c;
}

/* ---- text ---- */
const char *qkb_fmt_time(char *buf, size_t n, double s)
{
    static const char *const unit[] = {"ns", "us", "ms", "s"};
    if (!(s >= 0) || isinf(s)) {
        snprintf(buf, n, "-");
        return buf;
    }
    double v = s * 1e9;
    int u = 0;
    while (v >= 999.5 && u < 3) {
        v /= 1000;
        u++;
    }
    if (u == 0 || v >= 99.95) snprintf(buf, n, "%.0f%s", v, unit[u]);
    else if (v >= 9.995) snprintf(buf, n, "%.1f%s", v, unit[u]);
    else snprintf(buf, n, "%.2f%s", v, unit[u]);
    return buf;
}

const char *qkb_fmt_bytes(char *buf, size_t n, double b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (b >= 1024 && u < 3) {
        b /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%.0f%s", b, unit[u]);
    else snprintf(buf, n, "%.*f%s", b >= 100 ? 0 : 1, b, unit[u]);
    return buf;
}

void qkb_table_init(qkb_table *t, const char *spec)
{
    memset(t, 0, sizeof *t);
    const char *p = spec;
    while (*p && t->ncol < QKB_MAX_COLS) {
        while (*p == ' ') p++;
        if (!*p) break;
        t->left[t->ncol] = *p == 'l';
        p++;
        t->width[t->ncol] = (int)strtol(p, (char **)&p, 10);
        t->ncol++;
    }
}

void qkb_table_cell(qkb_table *t, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int w = t->width[t->col];
    if (t->col > 0) putchar(' ');
    if (t->left[t->col]) printf("%-*s", w, buf);
    else printf("%*s", w, buf);
    if (++t->col == t->ncol) {
        putchar('\n');
        t->col = 0;
    }
}

void qkb_table_rule(const qkb_table *t)
{
    int w = 0;
    for (int i = 0; i < t->ncol; i++) w += t->width[i] + (i > 0);
    for (int i = 0; i < w; i++) putchar('-');
    putchar('\n');
}

void qkb_table_header(qkb_table *t, const char *const *titles)
{
    for (int i = 0; i < t->ncol; i++) qkb_table_cell(t, "%s", titles[i]);
    qkb_table_rule(t);
}

bool qkb_gate_report(qkb_gates *gs, const char *figure, const char *label, bool valid,
                     double value, double target, bool at_most, const char *unit)
{
    const bool pass = valid && (at_most ? value <= target : value >= target);
    const char *rel = at_most ? "<=" : ">=";
    if (valid)
        printf("  %-56s %7.2f%-1s  (target %s %.2f%s)  %s\n", label, value, unit, rel, target, unit,
               pass ? "PASS" : "MISS");
    else
        printf("  %-56s %8s  (target %s %.2f%s)  n/a\n", label, "-", rel, target, unit);
    if (gs && gs->n < QKB_MAX_GATES) {
        qkb_gate *g = &gs->g[gs->n++];
        g->figure = figure;
        snprintf(g->label, sizeof g->label, "%s", label);
        g->value = value;
        g->target = target;
        g->at_most = at_most;
        g->valid = valid;
        g->pass = pass;
    }
    return pass;
}

/* ---- JSON ---- */
static void json_indent(qkb_json *j)
{
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++) fputs("  ", j->f);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Separator, indentation and "key": before a value. */
static void json_member(qkb_json *j, const char *key)
{
    if (!j->f) return;
    if (!j->first[j->depth]) fputc(',', j->f);
    j->first[j->depth] = false;
    json_indent(j);
    if (key) {
        json_string(j->f, key);
        fputs(": ", j->f);
    }
}

bool qkb_json_open(qkb_json *j, const char *path)
{
    memset(j, 0, sizeof *j);
    j->f = fopen(path, "w");
    if (!j->f) {
        fprintf(stderr, "qk bench: cannot write %s\n", path);
        return false;
    }
    j->ok = true;
    fputc('{', j->f);
    j->depth = 1;
    j->first[1] = true;
    return true;
}

bool qkb_json_close(qkb_json *j)
{
    if (!j->f) return false;
    while (j->depth > 1) qkb_json_end(j);
    fputs("\n}\n", j->f);
    bool ok = !ferror(j->f);
    if (fclose(j->f) != 0) ok = false;
    j->f = NULL;
    return ok && j->ok;
}

static void json_begin(qkb_json *j, const char *key, char c)
{
    if (!j->f) return;
    json_member(j, key);
    fputc(c, j->f);
    if (j->depth < 31) j->depth++;
    else j->ok = false;
    j->first[j->depth] = true;
    j->close[j->depth] = c == '{' ? '}' : ']';
}

void qkb_json_object(qkb_json *j, const char *key) { json_begin(j, key, '{'); }
void qkb_json_array(qkb_json *j, const char *key) { json_begin(j, key, '['); }

void qkb_json_end(qkb_json *j)
{
    if (!j->f || j->depth <= 1) return;
    bool empty = j->first[j->depth];
    char k = j->close[j->depth];
    j->depth--;
    if (!empty) json_indent(j);
    fputc(k, j->f);
}

void qkb_json_num(qkb_json *j, const char *key, double v)
{
    if (!j->f) return;
    json_member(j, key);
    if (isfinite(v)) fprintf(j->f, "%.6g", v);
    else fputs("null", j->f);
}

void qkb_json_int(qkb_json *j, const char *key, int64_t v)
{
    if (!j->f) return;
    json_member(j, key);
    fprintf(j->f, "%lld", (long long)v);
}

void qkb_json_str(qkb_json *j, const char *key, const char *s)
{
    if (!j->f) return;
    json_member(j, key);
    if (s) json_string(j->f, s);
    else fputs("null", j->f);
}

void qkb_json_bool(qkb_json *j, const char *key, bool v)
{
    if (!j->f) return;
    json_member(j, key);
    fputs(v ? "true" : "false", j->f);
}

void qkb_json_raw(qkb_json *j, const char *key, const char *text)
{
    if (!j->f) return;
    json_member(j, key);
    fputs(text, j->f);
}

const char *qkb_cpu_model(void)
{
    static char model[128];
    if (model[0]) return model;
    snprintf(model, sizeof model, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return model;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(model, sizeof model, "%s", c);
        break;
    }
    fclose(f);
    return model;
}

double qkb_loadavg(void)
{
    char buf[128];
    if (!read_line("/proc/loadavg", buf, sizeof buf)) return NAN;
    return strtod(buf, NULL);
}

qkb_cpu_mark qkb_cpu_mark_now(void)
{
    qkb_cpu_mark m;
    memset(&m, 0, sizeof m);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    m.self = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    m.wall = qkb_now();
    char buf[256];
    unsigned long long v[8] = {0};
    if (read_line("/proc/stat", buf, sizeof buf) &&
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        /* user nice system idle iowait irq softirq steal */
        const double hz = (double)sysconf(_SC_CLK_TCK);
        m.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (hz > 0 ? hz : 100);
        m.ok = true;
    }
    return m;
}

double qkb_other_load(const qkb_cpu_mark *a, const qkb_cpu_mark *b)
{
    if (!a->ok || !b->ok || b->wall <= a->wall) return NAN;
    double other = (b->busy - a->busy) - (b->self - a->self);
    return other > 0 ? other / (b->wall - a->wall) : 0.0;
}

void qkb_json_environment(qkb_json *j, const qkb_options *opt)
{
    char when[64];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    qkb_json_str(j, "date", when);
    qkb_json_object(j, "machine");
    qkb_json_str(j, "cpu_model", qkb_cpu_model());
    qkb_json_int(j, "cores", sysconf(_SC_NPROCESSORS_ONLN));
    qkb_json_int(j, "llc_bytes", (int64_t)qkb_llc_bytes());
    qkb_json_int(j, "threads", qk_get_num_threads());
    qkb_json_num(j, "loadavg_1min", qkb_loadavg());
    qkb_json_end(j);
    qkb_json_object(j, "library");
    qkb_json_str(j, "version", qk_version());
    qkb_json_int(j, "abi", qk_abi_version());
    qkb_json_str(j, "target", qk_target());
    qkb_json_end(j);
    qkb_json_object(j, "options");
    qkb_json_bool(j, "quick", opt->quick);
    qkb_json_int(j, "threads", opt->threads);
    qkb_json_end(j);
}

void qkb_json_stats(qkb_json *j, const char *key, const qkb_stats *s)
{
    qkb_json_object(j, key);
    qkb_json_num(j, "p10_s", s->p10);
    qkb_json_num(j, "p50_s", s->p50);
    qkb_json_num(j, "p90_s", s->p90);
    qkb_json_num(j, "min_s", s->min);
    qkb_json_num(j, "mean_s", s->mean);
    qkb_json_int(j, "warmup", s->warmup);
    qkb_json_int(j, "reps", s->reps);
    qkb_json_int(j, "calls_per_sample", s->batch);
    qkb_json_end(j);
}

void qkb_json_bandwidth(qkb_json *j, const char *key, const qkb_bandwidth *b)
{
    qkb_json_object(j, key);
    qkb_json_num(j, "gbps", b->gbps);
    qkb_json_num(j, "gbps_1_thread", b->gbps_1t);
    qkb_json_num(j, "gbps_all_threads", b->gbps_all);
    if (b->gbps_nt > 0) qkb_json_num(j, "gbps_nontemporal", b->gbps_nt);
    qkb_json_int(j, "threads", b->threads);
    qkb_json_bool(j, "nontemporal", b->nt);
    qkb_json_int(j, "buffers", b->nbuf);
    qkb_json_end(j);
}

bool qkb_plan_protocol(qkb_variant *v, qkb_call_fn fn, void *ctx, bool quick, bool probe_slow,
                       int slow_warmup)
{
    bool fewer = false;
    memset(v, 0, sizeof *v);
    v->fn = fn;
    v->ctx = ctx;
    v->warmup = 50;
    v->reps = 200;
    v->max_seconds = QKB_RUN_CAP_S;
    v->min_reps = 40;
    if (quick) {
        v->warmup = 2;
        v->reps = 5;
    } else if (probe_slow) {
        const double t0 = qkb_now();
        fn(ctx, 0);
        if ((qkb_now() - t0) * (v->warmup + v->reps) > QKB_SLOW_RUN_S) {
            v->warmup = slow_warmup;
            v->reps = 40;
            fewer = true;
        }
        v->warmup--;
    }
    return fewer;
}

void qkb_json_gates(qkb_json *j, const qkb_gates *gs)
{
    qkb_json_array(j, "summary");
    for (int k = 0; k < gs->n; k++) {
        const qkb_gate *g = &gs->g[k];
        qkb_json_object(j, NULL);
        qkb_json_str(j, "figure", g->figure);
        qkb_json_str(j, "label", g->label);
        qkb_json_num(j, "value", g->valid ? g->value : NAN);
        qkb_json_num(j, "target", g->target);
        qkb_json_str(j, "bound", g->at_most ? "at_most" : "at_least");
        qkb_json_str(j, "result", !g->valid ? "n/a" : g->pass ? "PASS" : "MISS");
        qkb_json_end(j);
    }
    qkb_json_end(j);
}
