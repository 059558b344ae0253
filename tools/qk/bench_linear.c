/* `qk bench linear`: the MXFP8 linear protocol of performance.md. Shapes (N, K) in
 * {(4304, 1152), (1152, 4304), (5120, 5120), (17408, 5120), (5120, 17408)} x M in
 * {1, 2, 4, 8, 16, 32, 64, 128, 512}, BF16 activations and output, with every compiled
 * provider this CPU runs (ref only at M = 1) and, when built with oneDNN, its BF16 matmul
 * on the same shapes. Per cell p10/p50/p90 and the staged provider's time relative to
 * M = 1 on the same shape; M = 1: effective weight bandwidth N·K·(1 + 1/32) / p50 against
 * the read bandwidth of a buffer of the same size (the best of one thread and all);
 * M >= 128: 2·M·N·K / p50 against the peak of the instruction the target's kernels rely
 * on, measured here with independent accumulator chains on all threads: vdpbf16ps
 * (x86-64-v4) or f32 vfmadd231ps (x86-64-v3, whose kernel decodes to f32). oneDNN's BF16
 * matmul is the peer; where this CPU has no oneDNN BF16 kernel (no AVX-512), its F32
 * matmul is, and every line says which. A cell's implementations, the staged provider at
 * M = 1 and (M = 1) the read bandwidth are timed interleaved, in turns, so that their ratios
 * hold on a shared host whose speed moves from minute to minute (run_shape). Reps adapt to
 * a per-cell time budget (at least 5 timed calls; the largest cells get the fewest). */
#include "bench_common.h"
#include "isa/bench_isa.h"

#include "internal.h"
#include "ref/mx_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef QK_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#define MAXP 4
#define CELL_BUDGET_S 1.2        /* timed seconds per (cell, implementation) */
#define MAX_REPS 50
#define MIN_REPS 5
/* performance.md, "Targets (round 2)" */
#define TARGET_M1_FRACTION 0.85      /* M = 1, weights >= 32 MiB, of read bandwidth */
#define TARGET_REL_M1 1.3            /* M = 4 and M = 16: time relative to M = 1, at most */
#define TARGET_SMALL_VS_ONEDNN 1.6   /* M <= 16, weights >= 32 MiB: x faster than oneDNN */
#define TARGET_PREFILL_VS_ONEDNN 1.0 /* M = 512 vs oneDNN BF16 (x86-64-v4) */
#define TARGET_PREFILL_PEAK 0.70     /* M = 512, of the FMA peak (x86-64-v3) */

static const int64_t shapes_full[][2] = {{4304, 1152}, {1152, 4304}, {5120, 5120},
                                         {17408, 5120}, {5120, 17408}};
static const int64_t ms_full[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
static const int64_t ms_quick[] = {1, 4, 16};

typedef struct result {
    qkb_stats st;
    double gbps, fraction_bw, gflops, fraction_peak;
    bool done;
} result;

typedef struct cell {
    int64_t N, K, M;
    size_t wbytes;               /* MXFP8 weight bytes: N·K·(1 + 1/32) */
    qkb_residency res;
    int nbuf;
    double read_gbps;            /* read bandwidth, same footprint (the M = 1 cell's run) */
    result prov[MAXP];
    result dnnl;
    qkb_stats m1;                /* the staged provider at M = 1, timed in this cell's run */
} cell;

typedef struct bench {
    qkb_options opt;
    const qk_provider_set *prov[MAXP];
    int np, staged;
    double peak_gflops;
    cell *cells;
    int ncells;
    double other_load;           /* cores other processes kept busy during the run (NaN: unknown) */
} bench;

/* ---- the peak of the kernel's instruction: PEAK_CHAINS independent accumulator chains per
   thread, all of them and the two operands in registers (16 chains on AVX2 left two spilled
   and bound the loop by store-to-load forwarding: the peak read ~40% low on Zen 3) ---- */
#define PEAK_ITERS 200000
#define PEAK_NAME qkb_isa_peak_name

static void peak_range(const void *ctx, int64_t b, int64_t e)
{
    (void)ctx;
    for (int64_t t = b; t < e; t++) qkb_isa_peak_run(PEAK_ITERS);
}

/* GFLOP/s of the ISA's peak loop on every thread (NaN where the ISA has none) */
static double measure_peak(void)
{
    if (!qkb_isa_peak_flops_per_iter) return NAN;
    const int nt = qk_get_num_threads();
    double best = 0;
    for (int rep = 0; rep < 9; rep++) {
        double t0 = qkb_now();
        qk_parallel_for(nt, 1, 0, peak_range, NULL);
        double t = qkb_now() - t0;
        double g = (double)nt * PEAK_ITERS * qkb_isa_peak_flops_per_iter / t / 1e9;
        if (g > best) best = g;
    }
    return best;
}

/* ---- weights: codes of quantized N(0, 0.02) rows (a checkpoint's statistics) ---- */
static void make_weight(int64_t N, int64_t K, uint8_t *q, uint8_t *s)
{
    const int64_t kb = qk_mx_blocks(K);
    float *row = malloc(sizeof(float) * (size_t)K);
    qkb_rng r = {0x1234567ull + (uint64_t)N * 31 + (uint64_t)K};
    qk_mx_options opt = qk_mx_options_default();
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k += 2) {
            /* Box-Muller-free: sum of uniforms is close enough to normal for statistics */
            float u = qkb_uniform(&r, -1, 1) + qkb_uniform(&r, -1, 1) + qkb_uniform(&r, -1, 1);
            row[k] = 0.02f * u;
            if (k + 1 < K) row[k + 1] = -0.011f * u + 0.015f * qkb_uniform(&r, -1, 1);
        }
        qk_target_table_built.ops.mx_quantize.fn
            ? qk_target_table_built.ops.mx_quantize.fn(row, QK_DTYPE_F32, K, &opt, q + n * K, s + n * kb)
            : qk_mx_quantize_row_ref(row, QK_DTYPE_F32, K, &opt, q + n * K, s + n * kb);
    }
    free(row);
}

/* ---- one timed implementation ---- */
typedef struct lin_ctx {
    qk_mx_weight *w[16];
    int nbuf;
    qk_tensor x, out;
} lin_ctx;

static void lin_call(void *ctx, int64_t iter)
{
    lin_ctx *c = (lin_ctx *)ctx;
    qk_mxfp8_linear(&c->x, c->w[iter % c->nbuf], NULL, &c->out);
}

static int reps_for(double one_call)
{
    int reps = (int)(CELL_BUDGET_S / (one_call > 1e-7 ? one_call : 1e-7));
    return reps < MIN_REPS ? MIN_REPS : reps > MAX_REPS ? MAX_REPS : reps;
}

static void fill_result(result *r, const cell *c, double peak)
{
    r->gbps = (double)c->wbytes / r->st.p50 / 1e9;
    r->fraction_bw = r->gbps / c->read_gbps;
    r->gflops = 2.0 * (double)c->M * (double)c->N * (double)c->K / r->st.p50 / 1e9;
    r->fraction_peak = r->gflops / peak;
    r->done = true;
}

#ifdef QK_BENCH_ONEDNN
/* ---- oneDNN BF16 matmul: x [M, K] . W [K, N] -> [M, N], weights reordered once ---- */
typedef struct dnnl_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t src, dst, wei[16];
    int nbuf;
} dnnl_ctx;

static void dnnl_call(void *ctx, int64_t iter)
{
    dnnl_ctx *d = (dnnl_ctx *)ctx;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d->src}, {DNNL_ARG_WEIGHTS, d->wei[iter % d->nbuf]},
                               {DNNL_ARG_DST, d->dst}};
    dnnl_primitive_execute(d->prim, d->stream, 3, args);
    dnnl_stream_wait(d->stream);
}

/* the peer's data type: "BF16", or "F32" where oneDNN has no BF16 matmul for this CPU */
static const char *dnnl_dtype_used = "BF16";

static bool dnnl_setup_dt(const cell *c, const uint16_t *wplain, dnnl_engine_t eng,
                          dnnl_stream_t stream, dnnl_data_type_t dt, dnnl_ctx *d)
{
    dnnl_memory_desc_t smd, wmd_any, wmd_plain, dmd;
    dnnl_dims_t sd = {c->M, c->K}, wd = {c->K, c->N}, dd = {c->M, c->N};
    const size_t es = dt == dnnl_f32 ? 4 : 2;
    dnnl_memory_desc_init_by_tag(&smd, 2, sd, dt, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&wmd_any, 2, wd, dt, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wmd_plain, 2, wd, dt, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dt, dnnl_ab);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_matmul_desc_init(&md, &smd, &wmd_any, NULL, &dmd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success)
        return false;
    memset(d, 0, sizeof *d);
    d->eng = eng;
    d->stream = stream;
    d->pd = pd;
    dnnl_primitive_create(&d->prim, pd);
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    int nbuf = 1;
    (void)qkb_rotation((size_t)(c->N * c->K) * es, &nbuf);
    d->nbuf = nbuf > 16 ? 16 : nbuf;
    float *wf32 = NULL;
    if (dt == dnnl_f32) {
        wf32 = malloc(sizeof(float) * (size_t)(c->N * c->K));
        if (!wf32) abort();
        for (int64_t i = 0; i < c->N * c->K; i++) wf32[i] = qk_bf16_to_f32(wplain[i]);
    }
    dnnl_memory_t plain;
    dnnl_memory_create(&plain, &wmd_plain, eng, wf32 ? (void *)wf32 : (void *)(uintptr_t)wplain);
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    dnnl_reorder_primitive_desc_create(&rpd, &wmd_plain, eng, wmd, eng, NULL);
    dnnl_primitive_create(&reorder, rpd);
    for (int b = 0; b < d->nbuf; b++) {
        dnnl_memory_create(&d->wei[b], wmd, eng, DNNL_MEMORY_ALLOCATE);
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, d->wei[b]}};
        dnnl_primitive_execute(reorder, stream, 2, ra);
    }
    dnnl_stream_wait(stream);
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(plain);
    free(wf32);
    dnnl_memory_create(&d->src, &smd, eng, DNNL_MEMORY_ALLOCATE);
    dnnl_memory_create(&d->dst, &dmd, eng, DNNL_MEMORY_ALLOCATE);
    void *sp = NULL;
    dnnl_memory_get_data_handle(d->src, &sp);
    for (int64_t i = 0; i < c->M * c->K; i++) {
        const uint16_t v = (uint16_t)(0x3F00 + (i * 7919 % 255));
        if (dt == dnnl_f32) ((float *)sp)[i] = qk_bf16_to_f32(v);
        else ((uint16_t *)sp)[i] = v;
    }
    return true;
}

/* the peer for cell c (its BF16 matmul, else its F32 one), ready to time */
static bool dnnl_setup(const cell *c, const uint16_t *wplain, dnnl_engine_t eng, dnnl_stream_t stream,
                       dnnl_ctx *d)
{
    if (dnnl_setup_dt(c, wplain, eng, stream, dnnl_bf16, d)) {
        dnnl_dtype_used = "BF16";
        return true;
    }
    if (dnnl_setup_dt(c, wplain, eng, stream, dnnl_f32, d)) {
        dnnl_dtype_used = "F32";
        return true;
    }
    return false;
}

static void dnnl_teardown(dnnl_ctx *d)
{
    dnnl_primitive_destroy(d->prim);
    dnnl_primitive_desc_destroy(d->pd);
    for (int b = 0; b < d->nbuf; b++) dnnl_memory_destroy(d->wei[b]);
    dnnl_memory_destroy(d->src);
    dnnl_memory_destroy(d->dst);
}
#else
static const char *dnnl_dtype_used = "-";
#endif

/* ---- the protocol ---- */
#define INTERLEAVE_BLOCK 3   /* timed calls per variant per turn (after one untimed) */

/* a variant's calls from a probe of two (the first warms): enough for CELL_BUDGET_S */
static void plan(qkb_variant *v, qkb_call_fn fn, void *ctx)
{
    memset(v, 0, sizeof *v);
    v->fn = fn;
    v->ctx = ctx;
    fn(ctx, 0);
    const double t0 = qkb_now();
    fn(ctx, 1);
    v->reps = reps_for(qkb_now() - t0);
    v->warmup = 2;
    v->max_seconds = CELL_BUDGET_S;
    v->min_reps = MIN_REPS;
}

/* Each cell's implementations are timed interleaved (qkb_time_interleaved: in turns, round
   robin), so that a burst of load from other guests, or the DRAM bandwidth moving between
   regimes (43-129 GB/s within minutes on the Zen 5 of 2026-12-07), hits all of them alike:
   every provider but ref, oneDNN, the staged provider at M = 1 (for "vs M = 1") and, in the
   M = 1 cell, the read bandwidth of a buffer of the weights' size (the M = 1 limit). ref
   (M = 1 only, ~30 ms a call) is timed on its own before them. */
static void run_shape(bench *bn, int64_t N, int64_t K, const int64_t *ms, int nm, cell *cells)
{
    const int64_t kb = qk_mx_blocks(K);
    uint8_t *q = malloc((size_t)(N * K)), *s = malloc((size_t)(N * kb));
    make_weight(N, K, q, s);
    int64_t qs[2] = {N, K}, ss[2] = {N, kb};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs);
    qk_tensor st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    const size_t wbytes = (size_t)(N * K) + (size_t)(N * kb);
    int nbuf = 1;
    qkb_residency res = qkb_rotation(wbytes, &nbuf);
    if (nbuf > 16) nbuf = 16;
    /* every provider's weights, nbuf copies each (ref's only for its M = 1 cell) */
    qk_mx_weight *w[MAXP][16];
    bool have[MAXP];
    memset(w, 0, sizeof w);
    for (int p = 0; p < bn->np; p++) {
        have[p] = strcmp(bn->prov[p]->name, "ref") != 0;
        for (int b = 0; b < nbuf && have[p]; b++)
            have[p] = qk_mx_weight_create_with(bn->prov[p]->ops.mxfp8_linear, &qt, &st, &w[p][b]) == QK_OK;
    }
    const int sp = bn->staged;
    double read = 0;
#ifdef QK_BENCH_ONEDNN
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_engine_create(&eng, dnnl_cpu, 0);
    dnnl_stream_create(&stream, eng, dnnl_stream_default_flags);
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++)
        wb[i] = qk_f32_to_bf16(qk_e4m3_to_f32(q[i]) * 0x1p-7f);  /* values do not matter */
#endif
    /* x and out of the staged provider's M = 1 variant */
    uint16_t *x1 = malloc(sizeof(uint16_t) * (size_t)K), *o1 = malloc(sizeof(uint16_t) * (size_t)N);
    {
        qkb_rng r = {77};
        for (int64_t i = 0; i < K; i++) x1[i] = qk_f32_to_bf16(qkb_uniform(&r, -2, 2));
    }
    for (int mi = 0; mi < nm; mi++) {
        cell *c = &cells[mi];
        memset(c, 0, sizeof *c);
        c->N = N; c->K = K; c->M = ms[mi];
        c->wbytes = wbytes;
        c->res = res;
        c->nbuf = nbuf;
        const int64_t M = c->M;
        uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(M * K));
        uint16_t *o = malloc(sizeof(uint16_t) * (size_t)(M * N));
        qkb_rng r = {77};
        for (int64_t i = 0; i < M * K; i++) x[i] = qk_f32_to_bf16(qkb_uniform(&r, -2, 2));
        int64_t xs[2] = {M, K}, os[2] = {M, N}, xs1[2] = {1, K}, os1[2] = {1, N};
        enum { MAXV = MAXP + 2 + QKB_LIMIT_VARIANTS };
        lin_ctx lc[MAXP + 1];
        qkb_variant v[MAXV];
        result *out[MAXV];
        int nv = 0;
        for (int p = 0; p < bn->np; p++) {
            lin_ctx *l = &lc[p];
            memset(l, 0, sizeof *l);
            l->nbuf = nbuf;
            l->x = qk_tensor_make(x, QK_DTYPE_BF16, 2, xs);
            l->out = qk_tensor_make(o, QK_DTYPE_BF16, 2, os);
            if (have[p]) {
                memcpy(l->w, w[p], sizeof l->w);
                plan(&v[nv], lin_call, l);
                out[nv++] = &c->prov[p];
            } else if (M == 1 && !strcmp(bn->prov[p]->name, "ref")) {   /* minutes per call above */
                bool ok = true;
                for (int b = 0; b < nbuf && ok; b++)
                    ok = qk_mx_weight_create_with(bn->prov[p]->ops.mxfp8_linear, &qt, &st, &l->w[b]) == QK_OK;
                if (ok) {
                    lin_call(l, 0);
                    c->prov[p].st = qkb_time_calls(lin_call, l, 1, 3);
                    c->prov[p].done = true;
                }
                for (int b = 0; b < nbuf; b++) qk_mx_weight_destroy(l->w[b]);
            }
        }
        lin_ctx *l1 = &lc[MAXP];
        const int v1 = have[sp] && M > 1 ? nv : -1;
        if (v1 >= 0) {
            memset(l1, 0, sizeof *l1);
            l1->nbuf = nbuf;
            memcpy(l1->w, w[sp], sizeof l1->w);
            l1->x = qk_tensor_make(x1, QK_DTYPE_BF16, 2, xs1);
            l1->out = qk_tensor_make(o1, QK_DTYPE_BF16, 2, os1);
            plan(&v[nv], lin_call, l1);
            out[nv++] = NULL;
        }
#ifdef QK_BENCH_ONEDNN
        dnnl_ctx d;
        const bool dn = dnnl_setup(c, wb, eng, stream, &d);
        if (dn) {
            plan(&v[nv], dnnl_call, &d);
            out[nv++] = &c->dnnl;
        }
#endif
        qkb_limit lim;
        const int nl = M == 1 ? qkb_limit_read_begin(&lim, wbytes, nbuf, 2, bn->opt.quick ? 5 : 30, &v[nv]) : 0;
        qkb_time_interleaved(v, nv + nl, INTERLEAVE_BLOCK);
        if (nl) {
            const qkb_bandwidth rb = qkb_limit_end(&lim, &v[nv]);
            read = rb.gbps;
        }
        c->read_gbps = read;
        for (int k = 0; k < nv; k++) {
            if (!out[k]) continue;
            out[k]->st = v[k].st;
            fill_result(out[k], c, bn->peak_gflops);
        }
        for (int p = 0; p < bn->np; p++)
            if (c->prov[p].done && !have[p]) fill_result(&c->prov[p], c, bn->peak_gflops);
        c->m1 = v1 >= 0 ? v[v1].st : c->prov[sp].st;
#ifdef QK_BENCH_ONEDNN
        if (dn) dnnl_teardown(&d);
#endif
        free(x);
        free(o);
        fprintf(stderr, "  done N=%lld K=%lld M=%lld\n", (long long)N, (long long)K, (long long)M);
    }
    for (int p = 0; p < bn->np; p++)
        for (int b = 0; b < nbuf; b++) qk_mx_weight_destroy(w[p][b]);
    free(x1);
    free(o1);
#ifdef QK_BENCH_ONEDNN
    free(wb);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
#endif
    free(q);
    free(s);
}

/* The staged provider's p50 at c over its p50 at M = 1 in the same interleaved run (0: not
   measured). */
static double rel_m1(const bench *bn, const cell *c)
{
    if (!c->prov[bn->staged].done || !(c->m1.p50 > 0)) return 0;
    return c->prov[bn->staged].st.p50 / c->m1.p50;
}

static void print_table(const bench *bn)
{
    char buf[32], t1[32], t2[32];
    char spec[160] = "r6 r6 r4 r9 l6 r7";
    const char *titles[QKB_MAX_COLS] = {"N", "K", "M", "weights", "from", "readGB/s"};
    int nt = 6;
    for (int p = 0; p < bn->np; p++) {
        strcat(spec, " r22 r12");
        titles[nt++] = bn->prov[p]->name;
        titles[nt++] = "limit";
    }
    strcat(spec, " r7");
    titles[nt++] = "vs M=1";
#ifdef QK_BENCH_ONEDNN
    strcat(spec, " r10 r9");
    titles[nt++] = "oneDNN";
    titles[nt++] = "vs oneDNN";
#endif
    qkb_table t;
    qkb_table_init(&t, spec);
    qkb_table_header(&t, titles);
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        qkb_table_cell(&t, "%lld", (long long)c->N);
        qkb_table_cell(&t, "%lld", (long long)c->K);
        qkb_table_cell(&t, "%lld", (long long)c->M);
        qkb_table_cell(&t, "%s", qkb_fmt_bytes(buf, sizeof buf, (double)c->wbytes));
        qkb_table_cell(&t, "%s", qkb_residency_name(c->res));
        qkb_table_cell(&t, "%.1f", c->read_gbps);
        for (int p = 0; p < bn->np; p++) {
            const result *r = &c->prov[p];
            if (!r->done) { qkb_table_cell(&t, "-"); qkb_table_cell(&t, "-"); continue; }
            qkb_table_cell(&t, "%s (%s..%s)", qkb_fmt_time(buf, sizeof buf, r->st.p50),
                           qkb_fmt_time(t1, sizeof t1, r->st.p10), qkb_fmt_time(t2, sizeof t2, r->st.p90));
            if (c->M == 1) qkb_table_cell(&t, "%.2f of rd", r->fraction_bw);
            else qkb_table_cell(&t, "%.2f of pk", r->fraction_peak);
        }
        const double rel = rel_m1(bn, c);
        if (rel > 0) qkb_table_cell(&t, "%.2fx", rel);
        else qkb_table_cell(&t, "-");
#ifdef QK_BENCH_ONEDNN
        qkb_table_cell(&t, "%s", c->dnnl.done ? qkb_fmt_time(buf, sizeof buf, c->dnnl.st.p50) : "-");
        if (c->dnnl.done && c->prov[bn->staged].done)
            qkb_table_cell(&t, "%.2fx", c->dnnl.st.p50 / c->prov[bn->staged].st.p50);
        else qkb_table_cell(&t, "-");
#endif
    }
    printf("limit: M = 1, effective weight bandwidth N·K·(1+1/32)/p50 as a fraction of read "
           "bandwidth (\"of rd\"); M > 1, 2·M·N·K/p50 as a fraction of the measured %s "
           "peak (\"of pk\"). vs oneDNN: oneDNN %s matmul p50 / %s p50%s.\n", PEAK_NAME, dnnl_dtype_used,
           bn->prov[bn->staged]->name,
           strcmp(dnnl_dtype_used, "F32") ? "" : " (oneDNN has no BF16 matmul for this CPU: its F32 one)");
}

static bool write_json(const bench *bn, const qkb_gates *gates)
{
    qkb_json j;
    if (!qkb_json_open(&j, bn->opt.json)) return false;
    qkb_json_environment(&j, &bn->opt);
    qkb_json_str(&j, "protocol", "linear");
    qkb_json_str(&j, "peak_instruction", PEAK_NAME);
    qkb_json_num(&j, "peak_gflops", bn->peak_gflops);
    qkb_json_num(&j, "other_processes_cores_busy", bn->other_load);
    qkb_json_str(&j, "onednn_dtype", dnnl_dtype_used);
    qkb_json_str(&j, "staged", bn->prov[bn->staged]->name);
    qkb_json_array(&j, "cells");
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        qkb_json_object(&j, NULL);
        qkb_json_int(&j, "N", c->N);
        qkb_json_int(&j, "K", c->K);
        qkb_json_int(&j, "M", c->M);
        qkb_json_int(&j, "weight_bytes", (int64_t)c->wbytes);
        qkb_json_str(&j, "residency", qkb_residency_name(c->res));
        qkb_json_int(&j, "nbuf", c->nbuf);
        qkb_json_num(&j, "read_gbps", c->read_gbps);
        if (rel_m1(bn, c) > 0) qkb_json_num(&j, "staged_time_vs_m1", rel_m1(bn, c));
        qkb_json_object(&j, "providers");
        for (int p = 0; p < bn->np; p++) {
            const result *r = &c->prov[p];
            if (!r->done) continue;
            qkb_json_object(&j, bn->prov[p]->name);
            qkb_json_stats(&j, "time", &r->st);
            qkb_json_num(&j, "weight_gbps", r->gbps);
            qkb_json_num(&j, "fraction_of_read", r->fraction_bw);
            qkb_json_num(&j, "gflops", r->gflops);
            qkb_json_num(&j, "fraction_of_peak", r->fraction_peak);
            qkb_json_end(&j);
        }
        qkb_json_end(&j);
        if (c->dnnl.done) {
            qkb_json_object(&j, "onednn");
            qkb_json_stats(&j, "time", &c->dnnl.st);
            qkb_json_num(&j, "gflops", c->dnnl.gflops);
            if (c->prov[bn->staged].done)
                qkb_json_num(&j, "speedup_staged_vs_onednn", c->dnnl.st.p50 / c->prov[bn->staged].st.p50);
            qkb_json_end(&j);
        }
        qkb_json_end(&j);
    }
    qkb_json_end(&j);
    qkb_json_gates(&j, gates);
    return qkb_json_close(&j);
}

static bool write_plot(const bench *bn)
{
    qkb_series ser[MAXP + 1];
    int ns = 0;
    for (int p = 0; p <= bn->np; p++) {
        qkb_series *s = &ser[ns];
        memset(s, 0, sizeof *s);
        s->name = p < bn->np ? bn->prov[p]->name : (strcmp(dnnl_dtype_used, "F32") ? "oneDNN bf16" : "oneDNN f32");
        s->color = qkb_color(p);
        s->dashed = p == bn->np;
        s->x = malloc(sizeof(double) * (size_t)bn->ncells);
        s->y = malloc(sizeof(double) * (size_t)bn->ncells);
        for (int i = 0; i < bn->ncells; i++) {
            const cell *c = &bn->cells[i];
            const result *r = p < bn->np ? &c->prov[p] : &c->dnnl;
            if (!r->done) continue;
            s->x[s->n] = 2.0 * (double)c->M * (double)c->N * (double)c->K;
            s->y[s->n] = r->st.p50;
            s->n++;
        }
        if (s->n) ns++;
        else { free(s->x); free(s->y); }
    }
    bool ok = qkb_svg_plot(bn->opt.plot, "qk bench linear: p50 latency vs 2MNK (BF16 x, BF16 out)",
                           "2·M·N·K", "flop", "p50", "s", ser, ns);
    for (int i = 0; i < ns; i++) { free(ser[i].x); free(ser[i].y); }
    return ok;
}

/* performance.md "Targets (round 2)", judged on the staged provider's cells of this run. */
static void summary(const bench *bn, qkb_gates *gates)
{
    const int s = bn->staged;
    const bool v4 = !strcmp(PEAK_NAME, "vdpbf16ps");
    /* the load of other processes (the run's own threads do not count, as the load average
       did: it read ~1.5 after every run on an idle 2-core host) */
    printf("\nsummary (staged provider %s, target %s; %s peak %.0f GFLOP/s on %d threads, "
           "the best of the start and the end of the run; other processes kept %.2f cores busy "
           "on average%s)\n",
           bn->prov[s]->name, qk_target(), PEAK_NAME, bn->peak_gflops, qk_get_num_threads(), bn->other_load,
           !(bn->other_load <= 0.25) ? ": they shared the cores, so the figures are noisy" : "");
    double small_vs = INFINITY, pre_vs = INFINITY, pre_pk = INFINITY;
    char label[128];
    for (int i = 0; i < bn->ncells; i++) {
        const cell *c = &bn->cells[i];
        const result *r = &c->prov[s];
        if (!r->done) continue;
        const bool big = c->wbytes >= (32u << 20);
        if (c->M == 1 && big) {
            snprintf(label, sizeof label, "M=1 (%lld, %lld) fraction of read bandwidth",
                     (long long)c->N, (long long)c->K);
            qkb_gate_report(gates, "fraction_of_read", label, true, r->fraction_bw, TARGET_M1_FRACTION,
                            false, "");
        }
        if (c->M == 4 || c->M == 16) {
            const double rel = rel_m1(bn, c);
            /* the least time the measured peak allows, relative to this shape's M = 1 */
            const double floor = 2.0 * (double)c->M * (double)c->N * (double)c->K /
                                 (bn->peak_gflops * 1e9) / (r->st.p50 / rel);
            snprintf(label, sizeof label, "M=%lld (%lld, %lld) time vs M=1 (peak allows %.2fx)",
                     (long long)c->M, (long long)c->N, (long long)c->K, floor);
            if (rel > 0) qkb_gate_report(gates, "time_vs_m1", label, true, rel, TARGET_REL_M1, true, "x");
        }
        if (c->dnnl.done && c->M <= 16 && big && c->dnnl.st.p50 / r->st.p50 < small_vs)
            small_vs = c->dnnl.st.p50 / r->st.p50;
        if (c->M == 512) {
            if (c->dnnl.done && c->dnnl.st.p50 / r->st.p50 < pre_vs) pre_vs = c->dnnl.st.p50 / r->st.p50;
            if (r->fraction_peak < pre_pk) pre_pk = r->fraction_peak;
        }
    }
    if (isfinite(small_vs)) {
        snprintf(label, sizeof label, "M<=16 vs oneDNN %s (weights >= 32 MiB), worst cell", dnnl_dtype_used);
        qkb_gate_report(gates, "vs_onednn", label, true, small_vs, TARGET_SMALL_VS_ONEDNN, false, "x");
    }
    if (v4 && isfinite(pre_vs)) {
        snprintf(label, sizeof label, "M=512 vs oneDNN %s, worst shape", dnnl_dtype_used);
        qkb_gate_report(gates, "vs_onednn", label, true, pre_vs, TARGET_PREFILL_VS_ONEDNN, false, "x");
    } else if (isfinite(pre_vs)) {
        snprintf(label, sizeof label, "M=512 vs oneDNN %s, worst shape (no target on this ISA)", dnnl_dtype_used);
        printf("  %-56s %7.2fx\n", label, pre_vs);
    }
    if (isfinite(pre_pk)) {
        snprintf(label, sizeof label, "M=512 fraction of %s peak, worst shape%s", PEAK_NAME,
                 v4 ? " (target on x86-64-v3 only)" : "");
        if (v4) printf("  %-56s %7.2f\n", label, pre_pk);
        else qkb_gate_report(gates, "fraction_of_peak", label, true, pre_pk, TARGET_PREFILL_PEAK, false, "");
    }
#ifndef QK_BENCH_ONEDNN
    printf("  oneDNN comparison: not built (install libdnnl-dev and reconfigure: make bench-deps)\n");
#endif
}

int qk_bench_linear(int argc, char **argv)
{
    bench bn;
    memset(&bn, 0, sizeof bn);
    if (!qkb_parse_options("qk bench linear", argc, argv, &bn.opt)) return 2;
    if (bn.opt.threads > 0) qk_set_num_threads(bn.opt.threads);
    if (qk_init() != QK_OK) {
        fprintf(stderr, "qk bench linear: %s\n", qk_last_error());
        return 1;
    }
    const qk_linear_impl *staged = qk_target_table_built.ops.mxfp8_linear;
    for (int i = 0; qk_all_providers[i] && bn.np < MAXP; i++) {
        const qk_provider_set *p = qk_all_providers[i];
        if (!p->ops.mxfp8_linear || (p->cpu_features & ~qk_cpu_features())) continue;
        if (p->ops.mxfp8_linear == staged) bn.staged = bn.np;
        bn.prov[bn.np++] = p;
    }
    const int nshapes = bn.opt.quick ? 2 : 5;
    const int64_t *ms = bn.opt.quick ? ms_quick : ms_full;
    const int nm = bn.opt.quick ? (int)(sizeof ms_quick / sizeof ms_quick[0])
                                : (int)(sizeof ms_full / sizeof ms_full[0]);
    bn.ncells = nshapes * nm;
    bn.cells = calloc((size_t)bn.ncells, sizeof(cell));
    const qkb_cpu_mark mark0 = qkb_cpu_mark_now();
    bn.peak_gflops = measure_peak();
    const double load0 = qkb_loadavg();
    printf("qk bench linear: target %s, %d threads, load average %.2f at start; reps per cell "
           "adapt to ~%.1f s (%d..%d timed calls, fewer for the largest cells)%s\n", qk_target(),
           qk_get_num_threads(), load0, CELL_BUDGET_S, MIN_REPS, MAX_REPS,
           bn.opt.quick ? "; --quick: a smoke test, not the protocol" : "");
    for (int si = 0; si < nshapes; si++)
        run_shape(&bn, shapes_full[si][0], shapes_full[si][1], ms, nm, bn.cells + si * nm);
    /* the peak again at the end: the best this shared machine showed is its limit */
    const double peak2 = measure_peak();
    if (peak2 > bn.peak_gflops) {
        bn.peak_gflops = peak2;
        for (int i = 0; i < bn.ncells; i++) {
            for (int p = 0; p < MAXP; p++)
                if (bn.cells[i].prov[p].done) fill_result(&bn.cells[i].prov[p], &bn.cells[i], peak2);
            if (bn.cells[i].dnnl.done) fill_result(&bn.cells[i].dnnl, &bn.cells[i], peak2);
        }
    }
    const qkb_cpu_mark mark1 = qkb_cpu_mark_now();
    bn.other_load = qkb_other_load(&mark0, &mark1);
    print_table(&bn);
    qkb_gates gates = {.n = 0};
    summary(&bn, &gates);
    bool ok = true;
    if (bn.opt.json) ok &= write_json(&bn, &gates);
    if (bn.opt.plot) ok &= write_plot(&bn);
    free(bn.cells);
    return ok ? 0 : 1;
}
