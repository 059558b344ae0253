/* `qk bench norm`: the norm protocol of performance.md. gemma_rms_norm and
 * add_gemma_rms_norm over {F16, BF16} x rows {1, 16, 128, 512} x hidden {256, 2048, 4096,
 * 5120}, with every compiled provider this CPU runs, the unfused add-then-norm path, and
 * the composite baseline; per cell p10/p50/p90, bytes moved / p50 against the copy
 * bandwidth of the same footprint; provider comparisons with their gates; the summary
 * against the targets. A missed target is reported, never an error exit. */
#include "bench_common.h"
#include "bench_composite.h"
#include "isa/bench_isa.h"

#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


#define EPS 1e-6f
#define MAXP 8                         /* providers */
#define FRACTION_MIN_BYTES (64 << 10)  /* cells in the fraction-of-copy geometric mean */
#define INTERLEAVE_BLOCK 10            /* timed calls per turn of a run (after one untimed) */
#define TARGET_FRACTION 0.80
#define TARGET_VS_COMPOSITE 5.0
#define TARGET_FUSED 1.2       /* performance.md round 2: geometric mean, and never slower in any cell */
#define TARGET_DRAM_FRACTION 0.85 /* performance.md round 2: add_gemma_rms_norm, every DRAM-resident cell */

enum { OP_GEMMA = 0, OP_ADD = 1, NOPS = 2 };
static const qk_norm_kind op_kind[NOPS] = {QK_NORM_GEMMA, QK_NORM_ADD_GEMMA};

static const qk_dtype dtypes[] = {QK_DTYPE_F16, QK_DTYPE_BF16};
static const int64_t rows_full[] = {1, 16, 128, 512}, rows_quick[] = {1, 16, 128};
static const int64_t hidden_full[] = {256, 2048, 4096, 5120}, hidden_quick[] = {256, 2048};

typedef struct run_result {
    qkb_stats st;
    double gbps;       /* bytes moved / p50 */
    double fraction;   /* of the copy bandwidth for the footprint */
    bool few_reps;     /* timed with fewer reps than the protocol (ref on big cells) */
} run_result;

typedef struct cell {
    qk_dtype dt;
    int64_t R, H;
    size_t bytes[NOPS];
    qkb_residency res[NOPS];
    int nbuf[NOPS];
    qkb_bandwidth copy[NOPS];
    run_result prov[NOPS][MAXP];
    run_result comp[NOPS];
    run_result unfused[MAXP];          /* add kernel + gemma_rms_norm, same provider */
    bool fused_equal[MAXP];            /* fused output bits == unfused */
    bool comp_agrees[NOPS];            /* composite within 2 ulp of the staged provider */
} cell;

typedef struct bench {
    qkb_options opt;
    const qk_provider_set *prov[MAXP];
    int np;
    int staged[NOPS];                  /* index into prov, -1 when not runnable */
    cell *cells;
    int ncells;
    double load0;                      /* load average when the run started */
    double other_load;                 /* cores other processes kept busy during the run */
} bench;

/* ---- buffers of one cell ---- */
typedef struct bufs {
    int nset;
    size_t bytes;                      /* of one [R, H] buffer */
    void **x, **res, **out, **ro;
    qk_tensor *tx, *tres, *tout, *tro;
    void *w;
    qk_tensor tw;
    void *check_out, *check_ro;        /* fused result, for the fused == unfused check */
} bufs;

static void bufs_make(bufs *b, const cell *c, int nset)
{
    memset(b, 0, sizeof *b);
    b->nset = nset;
    const size_t es = qk_dtype_size(c->dt);
    b->bytes = (size_t)(c->R * c->H) * es;
    void ***arrs[4] = {&b->x, &b->res, &b->out, &b->ro};
    qk_tensor **tens[4] = {&b->tx, &b->tres, &b->tout, &b->tro};
    const int64_t shape[2] = {c->R, c->H};
    qkb_rng rng = {0x1234567ull + (uint64_t)(c->R * 7919 + c->H) * 31 + (uint64_t)c->dt};
    for (int a = 0; a < 4; a++) {
        *arrs[a] = calloc((size_t)nset, sizeof(void *));
        *tens[a] = calloc((size_t)nset, sizeof(qk_tensor));
        if (!*arrs[a] || !*tens[a]) abort();
        for (int k = 0; k < nset; k++) {
            void *p = qkb_alloc(b->bytes);
            (*arrs[a])[k] = p;
            (*tens[a])[k] = qk_tensor_make(p, c->dt, 2, shape);
            if (a < 2)
                for (int64_t i = 0; i < c->R * c->H; i++)
                    qk_store_f32(p, c->dt, i, qkb_uniform(&rng, -2.0f, 2.0f));
        }
    }
    /* weight: BF16, small and zero-centred, as a Gemma checkpoint stores it */
    b->w = qkb_alloc((size_t)c->H * 2);
    for (int64_t i = 0; i < c->H; i++)
        ((uint16_t *)b->w)[i] = qk_f32_to_bf16(qkb_uniform(&rng, -0.1f, 0.1f));
    const int64_t wshape[1] = {c->H};
    b->tw = qk_tensor_make(b->w, QK_DTYPE_BF16, 1, wshape);
    b->check_out = qkb_alloc(b->bytes);
    b->check_ro = qkb_alloc(b->bytes);
}

static void bufs_free(bufs *b)
{
    for (int k = 0; k < b->nset; k++) {
        free(b->x[k]);
        free(b->res[k]);
        free(b->out[k]);
        free(b->ro[k]);
    }
    free(b->x); free(b->res); free(b->out); free(b->ro);
    free(b->tx); free(b->tres); free(b->tout); free(b->tro);
    free(b->w);
    free(b->check_out);
    free(b->check_ro);
}

/* ---- the unfused path's elementwise add: residual_out = rnd(x + residual) ---- */
typedef struct add_job {
    qk_dtype dt;
    const uint16_t *x, *res;
    uint16_t *out;
    int64_t n;
} add_job;

#define ADD_BLOCK 1024 /* elements per parallel item */

static void add_range(const void *ctx, int64_t b, int64_t e)
{
    const add_job *j = (const add_job *)ctx;
    int64_t i = b * ADD_BLOCK, end = e * ADD_BLOCK < j->n ? e * ADD_BLOCK : j->n;
    i = qkb_isa_add_16(j->dt, j->x, j->res, j->out, i, end);   /* the ISA's vector part */
    for (; i < end; i++)
        qk_store_f32(j->out, j->dt, i, qk_load_f32(j->x, j->dt, i) + qk_load_f32(j->res, j->dt, i));
}

/* Threads as the provider's add_gemma_rms_norm would: one thread below its threshold. */
static void unfused_add(qk_dtype dt, const void *x, const void *res, void *out, int64_t n,
                        int64_t min_parallel_bytes)
{
    add_job j = {dt, (const uint16_t *)x, (const uint16_t *)res, (uint16_t *)out, n};
    int64_t items = (n + ADD_BLOCK - 1) / ADD_BLOCK;
    qk_parallel_for(items, ADD_BLOCK * 4 * (int64_t)qk_dtype_size(dt), min_parallel_bytes,
                    add_range, &j);
}

/* ---- the timed calls ---- */
typedef enum mode { M_PROVIDER, M_COMPOSITE, M_UNFUSED } mode;

typedef struct call_ctx {
    const cell *c;
    bufs *b;
    int op, nbuf;
    mode m;
    const qk_provider_set *p;
} call_ctx;

static void die_status(const char *what, qk_status st)
{
    fprintf(stderr, "qk bench norm: %s failed: %s: %s\n", what, qk_status_name(st), qk_last_error());
    exit(1);
}

static void call_once(const call_ctx *x, int k)
{
    const cell *c = x->c;
    bufs *b = x->b;
    const qk_norm_kind kind = op_kind[x->op];
    qk_status st;
    switch (x->m) {
    case M_PROVIDER:
        st = qk_norm_run(kind, &x->p->ops.norm[kind], &b->tx[k], &b->tw,
                         x->op == OP_ADD ? &b->tres[k] : NULL, EPS, &b->tout[k],
                         x->op == OP_ADD ? &b->tro[k] : NULL);
        if (st) die_status(x->p->name, st);
        break;
    case M_UNFUSED:
        unfused_add(c->dt, b->x[k], b->res[k], b->ro[k], c->R * c->H,
                    x->p->ops.norm[QK_NORM_ADD_GEMMA].min_parallel_bytes);
        st = qk_norm_run(QK_NORM_GEMMA, &x->p->ops.norm[QK_NORM_GEMMA], &b->tro[k], &b->tw, NULL,
                         EPS, &b->tout[k], NULL);
        if (st) die_status(x->p->name, st);
        break;
    case M_COMPOSITE:
        if (x->op == OP_GEMMA)
            qkb_composite_gemma_rms_norm(c->dt, c->R, c->H, b->x[k], QK_DTYPE_BF16, b->w, EPS,
                                         b->out[k]);
        else
            qkb_composite_add_gemma_rms_norm(c->dt, c->R, c->H, b->x[k], b->res[k], QK_DTYPE_BF16,
                                             b->w, EPS, b->out[k], b->ro[k]);
        break;
    }
}

static void timed_call(void *p, int64_t iter)
{
    const call_ctx *x = (const call_ctx *)p;
    call_once(x, (int)(iter % x->nbuf));
}

/* The protocol's calls for one variant (qkb_plan_protocol), ref probed for slowness. */
static void plan_variant(const bench *bn, call_ctx *x, qkb_variant *v, run_result *r)
{
    memset(r, 0, sizeof *r);
    r->few_reps = qkb_plan_protocol(v, timed_call, x, bn->opt.quick, x->m != M_COMPOSITE && !strcmp(x->p->name, "ref"), 10);
}

static void finish_variant(const bench *bn, const call_ctx *x, const qkb_variant *v,
                           run_result *r)
{
    r->st = v->st;
    if (!bn->opt.quick && x->m != M_COMPOSITE && !strcmp(x->p->name, "ref"))
        r->st.warmup++; /* the probing call */
    if (r->st.reps < v->reps) r->few_reps = true;
    r->gbps = (double)x->c->bytes[x->op] / r->st.p50 * 1e-9;
    r->fraction = r->gbps / x->c->copy[x->op].gbps;
}

/* Fused add_gemma_rms_norm and the unfused path give the same bits (norm.md). */
static bool check_fused_equals_unfused(call_ctx *x)
{
    bufs *b = x->b;
    call_ctx f = *x;
    f.m = M_PROVIDER;
    f.op = OP_ADD;
    call_once(&f, 0);
    memcpy(b->check_out, b->out[0], b->bytes);
    memcpy(b->check_ro, b->ro[0], b->bytes);
    f.m = M_UNFUSED;
    memset(b->out[0], 0xff, b->bytes);
    memset(b->ro[0], 0xff, b->bytes);
    call_once(&f, 0);
    return !memcmp(b->check_out, b->out[0], b->bytes) && !memcmp(b->check_ro, b->ro[0], b->bytes);
}

/* The composite is a baseline, not a reference, but it must compute the same thing:
   within 2 ulp of the output dtype of the staged provider (f32 accumulation order differs). */
static bool check_composite(const bench *bn, call_ctx *x)
{
    bufs *b = x->b;
    const cell *c = x->c;
    const int s = bn->staged[x->op];
    if (s < 0) return true;
    call_ctx v = *x;
    v.m = M_PROVIDER;
    v.p = bn->prov[s];
    call_once(&v, 0);
    memcpy(b->check_out, b->out[0], b->bytes);
    v.m = M_COMPOSITE;
    call_once(&v, 0);
    const float ulp = c->dt == QK_DTYPE_BF16 ? 0x1p-8f : 0x1p-11f;
    for (int64_t i = 0; i < c->R * c->H; i++) {
        const float a = qk_load_f32(b->check_out, c->dt, i), d = qk_load_f32(b->out[0], c->dt, i);
        if (!(fabsf(a - d) <= 2 * ulp * fmaxf(fabsf(a), 0x1p-14f))) return false;
    }
    return true;
}

static void run_cell(const bench *bn, cell *c)
{
    const size_t es = qk_dtype_size(c->dt), RH = (size_t)(c->R * c->H);
    c->bytes[OP_GEMMA] = 2 * RH * es + (size_t)c->H * 2;
    c->bytes[OP_ADD] = 4 * RH * es + (size_t)c->H * 2;
    int nset = 1;
    for (int o = 0; o < NOPS; o++) {
        c->res[o] = qkb_rotation(c->bytes[o], &c->nbuf[o]);
        if (c->nbuf[o] > nset) nset = c->nbuf[o];
    }
    bufs b;
    bufs_make(&b, c, nset);
    for (int o = 0; o < NOPS; o++) {
        /* the variants of this op: every provider, the unfused path per provider (add
           form), the composite; timed interleaved */
        enum { MAXV = 2 * MAXP + 1 + QKB_LIMIT_VARIANTS };
        call_ctx x[MAXV];
        qkb_variant v[MAXV];
        run_result *res[MAXV];
        int nv = 0;
        for (int p = 0; p < bn->np; p++) {
            x[nv] = (call_ctx){c, &b, o, c->nbuf[o], M_PROVIDER, bn->prov[p]};
            res[nv++] = &c->prov[o][p];
            if (o == OP_ADD) {
                x[nv] = (call_ctx){c, &b, o, c->nbuf[o], M_UNFUSED, bn->prov[p]};
                res[nv++] = &c->unfused[p];
            }
        }
        x[nv] = (call_ctx){c, &b, o, c->nbuf[o], M_COMPOSITE, NULL};
        res[nv++] = &c->comp[o];
        for (int k = 0; k < nv; k++) plan_variant(bn, &x[k], &v[k], res[k]);
        /* the limit: its modes are variants of the same interleaved run, so that it sees
           the machine the ops saw */
        qkb_limit lim;
        const int nl = qkb_limit_copy_begin(&lim, c->bytes[o], c->nbuf[o], bn->opt.quick ? 2 : 50,
                                            bn->opt.quick ? 5 : 200, &v[nv]);
        qkb_time_interleaved(v, nv + nl, bn->opt.quick ? 5 : INTERLEAVE_BLOCK);
        c->copy[o] = qkb_limit_end(&lim, &v[nv]);
        for (int k = 0; k < nv; k++) finish_variant(bn, &x[k], &v[k], res[k]);
        for (int p = 0; p < bn->np && o == OP_ADD; p++) {
            call_ctx f = {c, &b, o, c->nbuf[o], M_PROVIDER, bn->prov[p]};
            c->fused_equal[p] = check_fused_equals_unfused(&f);
        }
        call_ctx k = {c, &b, o, c->nbuf[o], M_COMPOSITE, NULL};
        c->comp_agrees[o] = check_composite(bn, &k);
    }
    bufs_free(&b);
}

/* ---- output ---- */
static const char *cell_name(const cell *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s %lldx%lld", qk_dtype_name(c->dt), (long long)c->R, (long long)c->H);
    return buf;
}

static void time_cell(qkb_table *t, const run_result *r)
{
    char a[32];
    qkb_table_cell(t, "%s%s", qkb_fmt_time(a, sizeof a, r->st.p50), r->few_reps ? "*" : "");
}

static void print_spread(const char *name, const run_result *r)
{
    char a[32], b[32];
    printf("  %s %s/%s", name, qkb_fmt_time(a, sizeof a, r->st.p10), qkb_fmt_time(b, sizeof b, r->st.p90));
}

static void print_op_table(const bench *bn, int o)
{
    char spec[256] = "l4 r4 r6 r8 l5 r8", buf[64];
    const char *titles[QKB_MAX_COLS] = {"dt", "rows", "hidden", "bytes", "res", "copyGB/s"};
    int nt = 6;
    for (int p = 0; p < bn->np && nt + 2 < QKB_MAX_COLS - 3; p++) {
        strcat(spec, " r8 r5");
        titles[nt++] = bn->prov[p]->name;
        titles[nt++] = "frac";
    }
    strcat(spec, " r9 r5 r8");
    titles[nt++] = "composite";
    titles[nt++] = "frac";
    titles[nt++] = "vs comp";
    qkb_table t;
    qkb_table_init(&t, spec);
    printf("\n%s  (p50 per call; frac = bytes moved / p50 / copy bandwidth of the same "
           "footprint; vs comp = composite / staged)\n(copy: timed interleaved with the ops, best of 1 thread, all threads and, "
           "for DRAM, non-temporal stores (nt); res: cache- or DRAM-resident inputs)\n",
           qk_norm_op_name(op_kind[o]));
    qkb_table_header(&t, titles);
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        qkb_table_cell(&t, "%s", qk_dtype_name(c->dt));
        qkb_table_cell(&t, "%lld", (long long)c->R);
        qkb_table_cell(&t, "%lld", (long long)c->H);
        qkb_table_cell(&t, "%s", qkb_fmt_bytes(buf, sizeof buf, (double)c->bytes[o]));
        qkb_table_cell(&t, "%s", qkb_residency_name(c->res[o]));
        qkb_table_cell(&t, "%.1f%s", c->copy[o].gbps, c->copy[o].nt ? "nt" : "");
        for (int p = 0; p < bn->np; p++) {
            time_cell(&t, &c->prov[o][p]);
            qkb_table_cell(&t, "%.2f", c->prov[o][p].fraction);
        }
        time_cell(&t, &c->comp[o]);
        qkb_table_cell(&t, "%.2f", c->comp[o].fraction);
        int s = bn->staged[o];
        if (s >= 0) qkb_table_cell(&t, "%.1fx", c->comp[o].st.p50 / c->prov[o][s].st.p50);
        else qkb_table_cell(&t, "-");
        if (bn->opt.verbose) {
            printf("    p10/p90:");
            for (int p = 0; p < bn->np; p++) print_spread(bn->prov[p]->name, &c->prov[o][p]);
            print_spread("composite", &c->comp[o]);
            printf("\n");
        }
    }
}

static void print_unfused_table(const bench *bn)
{
    char spec[256] = "l4 r4 r6", unf[MAXP][48];
    const char *titles[QKB_MAX_COLS] = {"dt", "rows", "hidden"};
    int nt = 3;
    for (int p = 0; p < bn->np && nt + 3 < QKB_MAX_COLS; p++) {
        strcat(spec, " r10 r7 r5");
        snprintf(unf[p], sizeof unf[p], "unf.%s", bn->prov[p]->name);
        titles[nt++] = unf[p];
        titles[nt++] = "fused x";
        titles[nt++] = "bits";
    }
    qkb_table t;
    qkb_table_init(&t, spec);
    printf("\nadd_gemma_rms_norm unfused: elementwise add kernel (vectorised, in the bench) then "
           "gemma_rms_norm of the same provider\n(fused x = unfused p50 / fused p50; bits = fused "
           "output equals unfused bit for bit)\n");
    qkb_table_header(&t, titles);
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        qkb_table_cell(&t, "%s", qk_dtype_name(c->dt));
        qkb_table_cell(&t, "%lld", (long long)c->R);
        qkb_table_cell(&t, "%lld", (long long)c->H);
        for (int p = 0; p < bn->np; p++) {
            time_cell(&t, &c->unfused[p]);
            qkb_table_cell(&t, "%.2fx", c->unfused[p].st.p50 / c->prov[OP_ADD][p].st.p50);
            qkb_table_cell(&t, "%s", c->fused_equal[p] ? "same" : "DIFF");
        }
    }
}

/* One comparison: A's and B's p50 per cell. */
typedef struct comparison {
    int op;
    char a[48], b[48];
    qkb_compare r;
} comparison;

static void times_of(const bench *bn, int op, int which, double *t)
{
    /* which: provider index >= 0, -1 composite, -(2 + p) unfused with provider p */
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        if (which >= 0) t[i] = c->prov[op][which].st.p50;
        else if (which == -1) t[i] = c->comp[op].st.p50;
        else t[i] = c->unfused[-2 - which].st.p50;
    }
}

static int comparisons(const bench *bn, comparison *out, int max)
{
    int n = 0;
    double *ta = malloc(sizeof(double) * (size_t)bn->ncells);
    double *tb = malloc(sizeof(double) * (size_t)bn->ncells);
    if (!ta || !tb) abort();
    int ref = -1;
    for (int p = 0; p < bn->np; p++)
        if (!strcmp(bn->prov[p]->name, "ref")) ref = p;
    for (int o = 0; o < NOPS; o++) {
#define ADD_CMP(A, B, an, bn_)                                                   \
    do {                                                                         \
        if (n >= max) break;                                                     \
        times_of(bn, o, A, ta);                                                  \
        times_of(bn, o, B, tb);                                                  \
        out[n].op = o;                                                           \
        snprintf(out[n].a, sizeof out[n].a, "%s", an);                           \
        snprintf(out[n].b, sizeof out[n].b, "%s", bn_);                          \
        out[n].r = qkb_compare_times(ta, tb, bn->ncells);                        \
        n++;                                                                     \
    } while (0)
        /* every vector provider against ref, and each later provider against each earlier
           vector provider (avx512 vs avx2) */
        for (int p = 0; p < bn->np; p++) {
            if (p == ref) continue;
            if (ref >= 0) ADD_CMP(p, ref, bn->prov[p]->name, "ref");
            for (int q = 0; q < p; q++)
                if (q != ref) ADD_CMP(p, q, bn->prov[p]->name, bn->prov[q]->name);
        }
        int s = bn->staged[o];
        if (s >= 0) {
            char sn[48];
            snprintf(sn, sizeof sn, "%s (staged)", bn->prov[s]->name);
            ADD_CMP(s, -1, sn, "composite");
        }
        if (o == OP_ADD)
            for (int p = 0; p < bn->np; p++) {
                char fa[48], fb[48];
                snprintf(fa, sizeof fa, "fused %s", bn->prov[p]->name);
                snprintf(fb, sizeof fb, "unfused %s", bn->prov[p]->name);
                ADD_CMP(p, -2 - p, fa, fb);
            }
#undef ADD_CMP
    }
    free(ta);
    free(tb);
    return n;
}

/* Geometric mean of the fraction of copy bandwidth over the cells >= 64 KiB. */
static double fraction_geomean(const bench *bn, int op, int which, int *ncells)
{
    double *v = malloc(sizeof(double) * (size_t)bn->ncells);
    bool *use = malloc(sizeof(bool) * (size_t)bn->ncells);
    if (!v || !use) abort();
    *ncells = 0;
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        v[i] = which >= 0 ? c->prov[op][which].fraction : c->comp[op].fraction;
        use[i] = c->bytes[op] >= FRACTION_MIN_BYTES;
        *ncells += use[i];
    }
    double g = qkb_geomean(v, use, bn->ncells);
    free(v);
    free(use);
    return g;
}

static void write_run(qkb_json *j, const char *key, const run_result *r)
{
    qkb_json_object(j, key);
    qkb_json_num(j, "p10_s", r->st.p10);
    qkb_json_num(j, "p50_s", r->st.p50);
    qkb_json_num(j, "p90_s", r->st.p90);
    qkb_json_num(j, "min_s", r->st.min);
    qkb_json_num(j, "mean_s", r->st.mean);
    qkb_json_int(j, "warmup", r->st.warmup);
    qkb_json_int(j, "reps", r->st.reps);
    qkb_json_int(j, "calls_per_sample", r->st.batch);
    qkb_json_bool(j, "fewer_reps", r->few_reps);
    qkb_json_num(j, "gbps", r->gbps);
    qkb_json_num(j, "fraction_of_copy", r->fraction);
    qkb_json_end(j);
}

/* a summary figure before it is judged (qkb_gate_report) */
typedef struct summary_line {
    const char *figure;
    char label[96];
    double value, target;
    bool valid;
} summary_line;

static bool write_json(const bench *bn, const comparison *cmp, int ncmp, const qkb_gates *gates,
                       double timer)
{
    qkb_json j;
    if (!qkb_json_open(&j, bn->opt.json)) return false;
    qkb_json_str(&j, "bench", "norm");
    qkb_json_environment(&j, &bn->opt);
    qkb_json_object(&j, "protocol");
    qkb_json_num(&j, "eps", EPS);
    qkb_json_str(&j, "weight", "BF16, uniform in [-0.1, 0.1)");
    qkb_json_str(&j, "x_residual", "uniform in [-2, 2)");
    qkb_json_int(&j, "warmup", bn->opt.quick ? 2 : 50);
    qkb_json_int(&j, "reps", bn->opt.quick ? 5 : 200);
    qkb_json_num(&j, "ref_fewer_reps_above_run_s", QKB_SLOW_RUN_S);
    qkb_json_num(&j, "run_cap_s", QKB_RUN_CAP_S);
    qkb_json_str(&j, "timing", "the runs of one cell and op take turns (their order shuffled each round): in a "
                 "turn a run makes one untimed call, then 10 timed samples: one call each, or for "
                 "calls under 2 us a batch of back-to-back calls lasting ~2 us, per call "
                 "(calls_per_sample); the "
                 "warmup count includes those untimed calls; the copy limit's modes (1 thread, "
                 "all threads, non-temporal stores) are runs of the same rotation, each call "
                 "a batch of >= 20 us, and the limit is the best mode's p50");
    qkb_json_int(&j, "fraction_min_bytes", FRACTION_MIN_BYTES);
    qkb_json_str(&j, "residency_rule", "DRAM when the footprint exceeds LLC/2; then buffers "
                 "rotate so that >= 2 x LLC is touched before a set repeats");
    qkb_json_num(&j, "timer_overhead_s", timer);
    qkb_json_num(&j, "loadavg_1min_at_start", bn->load0);
    qkb_json_num(&j, "other_processes_cores_busy", bn->other_load);
    qkb_json_end(&j);
    qkb_json_array(&j, "providers");
    for (int p = 0; p < bn->np; p++) qkb_json_str(&j, NULL, bn->prov[p]->name);
    qkb_json_end(&j);
    qkb_json_object(&j, "staged");
    for (int o = 0; o < NOPS; o++)
        qkb_json_str(&j, qk_norm_op_name(op_kind[o]), qk_provider(qk_norm_op_name(op_kind[o])));
    qkb_json_end(&j);

    qkb_json_array(&j, "cells");
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        qkb_json_object(&j, NULL);
        qkb_json_str(&j, "dtype", qk_dtype_name(c->dt));
        qkb_json_int(&j, "rows", c->R);
        qkb_json_int(&j, "hidden", c->H);
        for (int o = 0; o < NOPS; o++) {
            qkb_json_object(&j, qk_norm_op_name(op_kind[o]));
            qkb_json_int(&j, "bytes", (int64_t)c->bytes[o]);
            qkb_json_str(&j, "residency", qkb_residency_name(c->res[o]));
            qkb_json_int(&j, "buffer_sets", c->nbuf[o]);
            qkb_json_bandwidth(&j, "copy", &c->copy[o]);
            qkb_json_object(&j, "runs");
            for (int p = 0; p < bn->np; p++) write_run(&j, bn->prov[p]->name, &c->prov[o][p]);
            write_run(&j, "composite", &c->comp[o]);
            if (o == OP_ADD)
                for (int p = 0; p < bn->np; p++) {
                    char k[64];
                    snprintf(k, sizeof k, "unfused_%s", bn->prov[p]->name);
                    write_run(&j, k, &c->unfused[p]);
                }
            qkb_json_end(&j);
            qkb_json_bool(&j, "composite_agrees_with_staged", c->comp_agrees[o]);
            if (o == OP_ADD) {
                qkb_json_object(&j, "fused_equals_unfused");
                for (int p = 0; p < bn->np; p++)
                    qkb_json_bool(&j, bn->prov[p]->name, c->fused_equal[p]);
                qkb_json_end(&j);
            }
            qkb_json_end(&j);
        }
        qkb_json_end(&j);
    }
    qkb_json_end(&j);

    qkb_json_array(&j, "comparisons");
    for (int k = 0; k < ncmp; k++) {
        const comparison *m = &cmp[k];
        qkb_json_object(&j, NULL);
        qkb_json_str(&j, "op", qk_norm_op_name(op_kind[m->op]));
        qkb_json_str(&j, "a", m->a);
        qkb_json_str(&j, "b", m->b);
        qkb_json_num(&j, "geomean_speedup", m->r.geomean);
        qkb_json_num(&j, "worst_regression", m->r.worst);
        if (m->r.worst_cell >= 0) {
            char nm[64];
            qkb_json_str(&j, "worst_cell", cell_name(&bn->cells[m->r.worst_cell], nm, sizeof nm));
        }
        qkb_json_bool(&j, "gate_pass", m->r.pass);
        qkb_json_int(&j, "cells", m->r.n);
        qkb_json_end(&j);
    }
    qkb_json_end(&j);

    qkb_json_array(&j, "fraction_of_copy");
    for (int o = 0; o < NOPS; o++)
        for (int p = -1; p < bn->np; p++) {
            int nc;
            double g = fraction_geomean(bn, o, p, &nc);
            qkb_json_object(&j, NULL);
            qkb_json_str(&j, "op", qk_norm_op_name(op_kind[o]));
            qkb_json_str(&j, "provider", p >= 0 ? bn->prov[p]->name : "composite");
            qkb_json_num(&j, "geomean", g);
            qkb_json_int(&j, "cells", nc);
            qkb_json_end(&j);
        }
    qkb_json_end(&j);

    qkb_json_gates(&j, gates);
    if (!qkb_json_close(&j)) {
        fprintf(stderr, "qk bench norm: error writing %s\n", bn->opt.json);
        return false;
    }
    return true;
}

static bool write_plot(const bench *bn)
{
    /* one series per (provider or composite, op, dtype), and the copy limit */
    enum { MAXS = 2 * 2 * (MAXP + 1) + 1 };
    qkb_series s[MAXS];
    char names[MAXS][64];
    int ns = 0, n = bn->ncells;
    double *xs = malloc(sizeof(double) * (size_t)(n * MAXS * 2));
    if (!xs) abort();
    double *cur = xs;
    for (int o = 0; o < NOPS; o++)
        for (int d = 0; d < 2; d++)
            for (int p = -1; p < bn->np; p++) {
                qkb_series *sr = &s[ns];
                snprintf(names[ns], sizeof names[ns], "%s %s %s",
                         p >= 0 ? bn->prov[p]->name : "composite",
                         o == OP_GEMMA ? "norm" : "add+norm", qk_dtype_name(dtypes[d]));
                sr->name = names[ns];
                sr->color = qkb_color(p + 1);
                sr->dashed = o == OP_ADD;
                sr->square = dtypes[d] == QK_DTYPE_F16;
                sr->n = 0;
                sr->x = cur; cur += n;
                sr->y = cur; cur += n;
                for (int i = 0; i < n; i++) {
                    const cell *c = &bn->cells[i];
                    if (c->dt != dtypes[d]) continue;
                    sr->x[sr->n] = (double)c->bytes[o];
                    sr->y[sr->n++] = p >= 0 ? c->prov[o][p].st.p50 : c->comp[o].st.p50;
                }
                ns++;
            }
    /* the copy limit: bytes / copy bandwidth, both ops */
    qkb_series *lim = &s[ns++];
    lim->name = "copy limit";
    lim->color = "#000000";
    lim->dashed = true;
    lim->square = false;
    lim->n = 2 * n;
    lim->x = cur; cur += 2 * n;
    lim->y = cur;
    for (int o = 0; o < NOPS; o++)
        for (int i = 0; i < n; i++) {
            const cell *c = &bn->cells[i];
            lim->x[o * n + i] = (double)c->bytes[o];
            lim->y[o * n + i] = (double)c->bytes[o] / (c->copy[o].gbps * 1e9);
        }
    bool ok = qkb_svg_plot(bn->opt.plot, "qk bench norm: p50 latency vs bytes moved "
                           "(solid: norm, dashed: add+norm; circles BF16, squares F16)",
                           "bytes moved per call", "B", "p50 latency per call", "s", s, ns);
    free(xs);
    return ok;
}

int qk_bench_norm(int argc, char **argv)
{
    bench bn;
    memset(&bn, 0, sizeof bn);
    if (!qkb_parse_options("norm", argc, argv, &bn.opt)) return 2;
    if (bn.opt.threads > 0) qk_set_num_threads(bn.opt.threads);
    qk_status st = qk_init();
    if (st) {
        fprintf(stderr, "qk bench norm: %s\n", qk_last_error());
        return 1;
    }
    const unsigned have = qk_cpu_features();
    for (int p = 0; qk_all_providers[p]; p++) {
        const qk_provider_set *ps = qk_all_providers[p];
        bool runs = (ps->cpu_features & ~have) == 0 && ps->ops.norm[QK_NORM_GEMMA].fn &&
                    ps->ops.norm[QK_NORM_ADD_GEMMA].fn;
        if (!runs) {
            printf("skipping provider %s: %s\n", ps->name,
                   (ps->cpu_features & ~have) ? "this CPU lacks its instructions"
                                              : "it does not implement the Gemma norms");
            continue;
        }
        if (bn.np < MAXP) bn.prov[bn.np++] = ps;
    }
    for (int o = 0; o < NOPS; o++) {
        const char *sn = qk_provider(qk_norm_op_name(op_kind[o]));
        bn.staged[o] = -1;
        for (int p = 0; sn && p < bn.np; p++)
            if (!strcmp(bn.prov[p]->name, sn)) bn.staged[o] = p;
    }

    const int64_t *rows = bn.opt.quick ? rows_quick : rows_full;
    const int64_t *hid = bn.opt.quick ? hidden_quick : hidden_full;
    const int nr = bn.opt.quick ? 3 : 4, nh = bn.opt.quick ? 2 : 4;
    bn.ncells = 2 * nr * nh;
    bn.cells = calloc((size_t)bn.ncells, sizeof(cell));
    if (!bn.cells) return 1;

    const double timer = qkb_timer_overhead();
    char b1[32], b2[32];
    const double load0 = bn.load0 = qkb_loadavg();
    printf("qk bench norm: target %s, %d threads, CPU %s, LLC %s, timer overhead %s per call, "
           "load average %.2f\n", qk_target(), qk_get_num_threads(), qkb_cpu_model(),
           qkb_fmt_bytes(b1, sizeof b1, (double)qkb_llc_bytes()), qkb_fmt_time(b2, sizeof b2, timer),
           load0);
    printf("providers:");
    for (int p = 0; p < bn.np; p++) printf(" %s", bn.prov[p]->name);
    printf("; staged: gemma_rms_norm %s, add_gemma_rms_norm %s\n",
           qk_provider("gemma_rms_norm"), qk_provider("add_gemma_rms_norm"));
    if (bn.opt.quick)
        printf("--quick: 2 warm-ups + 5 timed calls, %d cells: a smoke test, not the protocol\n",
               bn.ncells);
    else
        printf("protocol: 50 warm-ups + 200 timed calls per run; the runs of a cell take turns "
               "(1 untimed + 10 timed calls each); eps 1e-6, BF16 weight in [-0.1, 0.1)\n* = fewer timed calls: ref with 10 + 40 where 250 would take > %.1f s; "
               "any run stopped after %.0f s (a loaded machine)\n", QKB_SLOW_RUN_S, QKB_RUN_CAP_S);
    fflush(stdout);

    const double t_start = qkb_now();
    const qkb_cpu_mark mark0 = qkb_cpu_mark_now();
    int ci = 0;
    for (int d = 0; d < 2; d++)
        for (int r = 0; r < nr; r++)
            for (int h = 0; h < nh; h++) {
                cell *c = &bn.cells[ci++];
                c->dt = dtypes[d];
                c->R = rows[r];
                c->H = hid[h];
                run_cell(&bn, c);
                fprintf(stderr, "\r  cell %d/%d", ci, bn.ncells);
            }
    fprintf(stderr, "\r");

    for (int o = 0; o < NOPS; o++) print_op_table(&bn, o);
    print_unfused_table(&bn);

    comparison cmp[64];
    int ncmp = comparisons(&bn, cmp, 64);
    qkb_table t;
    qkb_table_init(&t, "l18 l28 l16 r8 r9 l14 l4");
    static const char *const ctitles[] = {"op", "A", "B", "geo-mean", "worst", "worst cell", "gate"};
    printf("\ncomparisons (speedup = p50 of B / p50 of A per cell; worst = largest A/B - 1; "
           "gate PASS: geo-mean >= 1 and worst <= +10%%)\n");
    qkb_table_header(&t, ctitles);
    for (int k = 0; k < ncmp; k++) {
        char nm[64] = "-";
        if (cmp[k].r.worst_cell >= 0) cell_name(&bn.cells[cmp[k].r.worst_cell], nm, sizeof nm);
        qkb_table_cell(&t, "%s", qk_norm_op_name(op_kind[cmp[k].op]));
        qkb_table_cell(&t, "%s", cmp[k].a);
        qkb_table_cell(&t, "%s", cmp[k].b);
        qkb_table_cell(&t, "%.2fx", cmp[k].r.geomean);
        qkb_table_cell(&t, "%+.1f%%", 100 * cmp[k].r.worst);
        qkb_table_cell(&t, "%s", nm);
        qkb_table_cell(&t, "%s", cmp[k].r.pass ? "PASS" : "FAIL");
    }

    printf("\nfraction of copy bandwidth, geometric mean over the cells moving >= 64 KiB\n");
    for (int o = 0; o < NOPS; o++) {
        printf("  %-20s", qk_norm_op_name(op_kind[o]));
        for (int p = -1; p < bn.np; p++) {
            int nc;
            double g = fraction_geomean(&bn, o, p, &nc);
            printf("  %s %.2f", p >= 0 ? bn.prov[p]->name : "composite", g);
            if (p == bn.np - 1) printf("  (%d cells)", nc);
        }
        printf("\n");
    }

    /* summary against the targets, for the staged provider */
    summary_line sl[16];
    int nsl = 0;
    for (int o = 0; o < NOPS; o++) {
        summary_line *l = &sl[nsl++];
        int s = bn.staged[o], nc = 0;
        l->figure = "fraction_of_copy";
        snprintf(l->label, sizeof l->label, "%s (%s): fraction of copy bandwidth",
                 qk_norm_op_name(op_kind[o]), s >= 0 ? bn.prov[s]->name : "-");
        l->valid = s >= 0;
        l->value = s >= 0 ? fraction_geomean(&bn, o, s, &nc) : NAN;
        l->valid = l->valid && nc > 0;
        l->target = TARGET_FRACTION;
    }
    for (int o = 0; o < NOPS; o++) {
        summary_line *l = &sl[nsl++];
        l->figure = "vs_composite";
        l->target = TARGET_VS_COMPOSITE;
        l->valid = false;
        snprintf(l->label, sizeof l->label, "%s: staged vs composite", qk_norm_op_name(op_kind[o]));
        for (int k = 0; k < ncmp; k++)
            if (cmp[k].op == o && !strcmp(cmp[k].b, "composite")) {
                l->value = cmp[k].r.geomean;
                l->valid = true;
            }
    }
    {
        summary_line *l = &sl[nsl++];
        int s = bn.staged[OP_ADD];
        l->figure = "fused_vs_unfused";
        l->target = TARGET_FUSED;
        l->valid = false;
        snprintf(l->label, sizeof l->label, "add_gemma_rms_norm (%s): fused vs unfused",
                 s >= 0 ? bn.prov[s]->name : "-");
        char fa[48];
        if (s >= 0) {
            snprintf(fa, sizeof fa, "fused %s", bn.prov[s]->name);
            for (int k = 0; k < ncmp; k++)
                if (cmp[k].op == OP_ADD && !strcmp(cmp[k].a, fa)) {
                    l->value = cmp[k].r.geomean;
                    l->valid = true;
                }
        }
    }
    {
        /* never slower: the worst cell's speedup of fused over unfused, >= 1 */
        summary_line *l = &sl[nsl++];
        int s = bn.staged[OP_ADD];
        l->figure = "fused_vs_unfused_worst_cell";
        l->target = 1.0;
        l->valid = false;
        snprintf(l->label, sizeof l->label, "add_gemma_rms_norm (%s): fused vs unfused, worst cell",
                 s >= 0 ? bn.prov[s]->name : "-");
        char fa[48];
        if (s >= 0) {
            snprintf(fa, sizeof fa, "fused %s", bn.prov[s]->name);
            for (int k = 0; k < ncmp; k++)
                if (cmp[k].op == OP_ADD && !strcmp(cmp[k].a, fa)) {
                    l->value = 1.0 / (1.0 + cmp[k].r.worst);
                    l->valid = true;
                }
        }
    }
    {
        /* DRAM-resident cells: the lowest fraction of copy bandwidth among them */
        summary_line *l = &sl[nsl++];
        int s = bn.staged[OP_ADD];
        l->figure = "fraction_of_copy";
        l->target = TARGET_DRAM_FRACTION;
        l->valid = false;
        l->value = INFINITY;
        snprintf(l->label, sizeof l->label, "add_gemma_rms_norm (%s): DRAM cells, lowest fraction of copy",
                 s >= 0 ? bn.prov[s]->name : "-");
        for (int i = 0; s >= 0 && i < bn.ncells; i++)
            if (bn.cells[i].res[OP_ADD] == QKB_DRAM && bn.cells[i].prov[OP_ADD][s].fraction < l->value) {
                l->value = bn.cells[i].prov[OP_ADD][s].fraction;
                l->valid = true;
            }
    }
    printf("\nsummary (targets of performance.md; staged providers)%s\n",
           bn.opt.quick ? " -- --quick run, not the protocol" : "");
    qkb_gates gates = {.n = 0};
    for (int k = 0; k < nsl; k++)
        qkb_gate_report(&gates, sl[k].figure, sl[k].label, sl[k].valid, sl[k].value, sl[k].target,
                        false, strcmp(sl[k].figure, "fraction_of_copy") ? "x" : "");
    int bad = 0;
    for (int i = 0; i < bn.ncells; i++)
        for (int p = 0; p < bn.np; p++) bad += !bn.cells[i].fused_equal[p];
    printf("  fused == unfused bit for bit: %s\n", bad ? "NO (see the unfused table)" : "yes, every cell and provider");
    int comp_bad = 0;
    for (int i = 0; i < bn.ncells; i++)
        for (int o = 0; o < NOPS; o++) comp_bad += !bn.cells[i].comp_agrees[o];
    if (comp_bad) printf("  composite differs from the staged provider by > 2 ulp in %d runs\n", comp_bad);
    else printf("  composite agrees with the staged provider within 2 ulp: yes, every cell\n");
    const qkb_cpu_mark mark1 = qkb_cpu_mark_now();
    bn.other_load = qkb_other_load(&mark0, &mark1);
    printf("  (%.0f s; other processes kept %.2f cores busy on average%s)\n", qkb_now() - t_start,
           bn.other_load,
           !(bn.other_load <= 0.25) ? ": they shared the cores, so the figures are noisy"
                                     : "; absolute times drift between runs, ratios within one run hold");

    int status = 0;
    if (bn.opt.json) {
        if (write_json(&bn, cmp, ncmp, &gates, timer)) printf("wrote %s\n", bn.opt.json);
        else status = 1;
    }
    if (bn.opt.plot) {
        if (write_plot(&bn)) printf("wrote %s\n", bn.opt.plot);
        else status = 1;
    }
    free(bn.cells);
    return status;
}
