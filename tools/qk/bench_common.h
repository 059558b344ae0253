/* Helpers shared by the `qk bench` protocols (bench_norm.c, bench_quant.c, bench_linear.c):
 * monotonic timing and percentiles, cache residency and buffer rotation, the machine's
 * copy / read bandwidth for a footprint, provider comparisons (geometric mean, worst
 * regression, gate), aligned text tables, a small JSON writer and a log-log SVG plot.
 * Everything prints to stdout and writes only the files it is given. */
#ifndef QK_BENCH_COMMON_H
#define QK_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the protocols: argv[0] is the protocol name ("norm"), then the options ---- */
int qk_bench_norm(int argc, char **argv);
int qk_bench_quant(int argc, char **argv);
int qk_bench_linear(int argc, char **argv);
int qk_bench_gemma_shift(int argc, char **argv);   /* bench_gemma_shift.c */

/* Options every protocol accepts: --json FILE, --plot FILE.svg, --quick (few reps, a
   smaller matrix: a smoke test, not the protocol), --threads N (0 = the library default),
   --verbose (p10/p90 of every run in the tables). */
typedef struct qkb_options {
    const char *json;      /* NULL: no JSON */
    const char *plot;      /* NULL: no SVG */
    bool quick;
    bool verbose;
    int threads;
} qkb_options;
/* Parses argv[1..argc-1]; on an unknown option prints a message naming `prog` and
   returns false. */
bool qkb_parse_options(const char *prog, int argc, char **argv, qkb_options *opt);

/* ---- timing ---- */
double qkb_now(void);                 /* monotonic seconds (CLOCK_MONOTONIC) */
double qkb_timer_overhead(void);      /* seconds one qkb_now() pair costs (median) */

typedef struct qkb_stats {
    double p10, p50, p90;             /* seconds per call */
    double min, mean;
    int reps, warmup;
    int batch;                        /* calls per timed sample (qkb_time_interleaved) */
} qkb_stats;

/* Percentile p in [0, 1] of sorted[0..n-1], linear interpolation between ranks. */
double qkb_percentile(const double *sorted, int n, double p);
/* Sorts samples[0..n-1] in place and summarises them. */
qkb_stats qkb_stats_of(double *samples, int n);

/* One call of the code under test; `iter` counts from 0 over warm-up and timed calls, so
   the callee can rotate buffers with iter % nbuf. */
typedef void (*qkb_call_fn)(void *ctx, int64_t iter);
/* warmup untimed calls, then reps calls each timed on its own. */
qkb_stats qkb_time_calls(qkb_call_fn fn, void *ctx, int warmup, int reps);
/* As qkb_time_calls, but stops timing once max_seconds have passed and at least min_reps
   calls were timed (a guard for loaded machines); stats.reps says how many were. */
qkb_stats qkb_time_calls_capped(qkb_call_fn fn, void *ctx, int warmup, int reps,
                                double max_seconds, int min_reps);
/* Several variants of one measurement (providers of one cell), timed interleaved: in turns,
   each sample timed on its own. A burst of load from other processes then hits
   every variant alike, so their ratios hold on a shared machine. The order of the turns is
   shuffled each round (a fixed seed), so no variant always follows the same one (in a fixed
   order the public quantize call, right after the copy limit, ran 5-10% slower than the
   same kernel on DRAM-resident cells). In its turn a variant makes
   `block` calls: warm-up turns are untimed; a timed turn first makes one untimed call, so
   the caches hold its data again after the other variants ran, then times `block` calls.
   Each variant makes its own warmup + reps timed-or-not calls (iter counts every call from
   0); variants with fewer turns join later, so all of them end together. A variant stops
   timing once its timed calls add up to max_seconds (0: no cap) and it has min_reps
   samples. st.warmup counts the untimed calls, st.reps the timed samples. A sample is one
   call, or, for a variant whose fastest warm-up call took under QKB_MIN_SAMPLE_S, a batch
   of back-to-back calls lasting about that long (at most QKB_MAX_BATCH; st.batch), divided
   by their number: the clock here reads in ~20 ns steps of 10 ns, which moved sub-us
   cells by 10-20%. */
#define QKB_MIN_SAMPLE_S 2e-6
#define QKB_MAX_BATCH 64
typedef struct qkb_variant {
    qkb_call_fn fn;
    void *ctx;
    int warmup, reps;
    double max_seconds;
    int min_reps;
    qkb_stats st;            /* out */
} qkb_variant;
void qkb_time_interleaved(qkb_variant *v, int n, int block);
/* The protocol's calls for one variant: 50 warm-ups + 200 timed calls, each run capped at
   QKB_RUN_CAP_S (and >= 40 calls); quick: 2 + 5. A variant that may be slow (probe_slow)
   is probed with one call, counted as a warm-up: where 250 calls would take longer than
   QKB_SLOW_RUN_S it gets slow_warmup + 40. Returns whether the variant got fewer calls. */
#define QKB_SLOW_RUN_S 1.5
#define QKB_RUN_CAP_S 3.0
bool qkb_plan_protocol(qkb_variant *v, qkb_call_fn fn, void *ctx, bool quick, bool probe_slow,
                       int slow_warmup);
/* As qkb_time_calls, but each sample times a batch of calls long enough (>= ~20 us) that
   the timer's own cost vanishes; the stats are per call. For limits, not for ops. */
qkb_stats qkb_time_batched(qkb_call_fn fn, void *ctx, int warmup, int reps);

/* ---- caches, residency and buffer rotation ---- */
/* Last-level cache size in bytes: /sys (index with the highest level), else
   sysconf(_SC_LEVEL3_CACHE_SIZE), else 32 MiB. */
size_t qkb_llc_bytes(void);

typedef enum qkb_residency { QKB_CACHE = 0, QKB_DRAM = 1 } qkb_residency;
/* A call touching `footprint` bytes is timed from DRAM when the footprint exceeds half the
   LLC (the L3 is shared with the other cores and, on AMD, is a victim cache that does not
   keep a stream filling it); its inputs are then rotated through enough distinct buffer
   sets that >= 2 x LLC is touched before a set comes back. Smaller calls use one set and
   are timed from cache, as in a model where the previous op just wrote the input.
   Returns the residency and writes the number of buffer sets to *nbuf. */
qkb_residency qkb_rotation(size_t footprint, int *nbuf);
const char *qkb_residency_name(qkb_residency r);   /* "cache" / "DRAM" */

/* 64-byte aligned, zero-filled (pages touched) allocation; exits with a message on
   failure. Free with free(). */
void *qkb_alloc(size_t bytes);
/* Deterministic pseudo-random numbers (xorshift), uniform in [lo, hi). */
typedef struct qkb_rng { uint64_t s; } qkb_rng;
float qkb_uniform(qkb_rng *r, float lo, float hi);

/* ---- the machine's limits, measured in this process ---- */
typedef struct qkb_bandwidth {
    double gbps;             /* the better of the variants below: the limit */
    double gbps_1t;          /* one thread */
    double gbps_all;         /* all threads (qk_get_num_threads()) */
    double gbps_nt;          /* non-temporal stores, all threads; 0 when not measured */
    int threads;             /* threads of the best variant */
    bool nt;                 /* the best variant used non-temporal stores */
    int nbuf;
} qkb_bandwidth;
/* The limits, timed inside an interleaved run. Copy bandwidth for a footprint: y = a*x in
   f32 over buffers whose in + out bytes equal `footprint` (x and y footprint/2 each),
   rotated through nbuf distinct (x, y) pairs, with 1 thread and with all threads (and, for
   DRAM-resident footprints, with non-temporal stores); bytes counted = footprint. Read
   bandwidth: a sum over a buffer of `bytes` (f32), nbuf rotated buffers, 1 thread and all
   threads. AVX-512 when compiled with __AVX512F__, else AVX2, else plain C; the limit is
   the best mode's p50. begin appends the limit's modes to v as variants (at most
   QKB_LIMIT_VARIANTS, each with warmup + reps calls, capped like the
   protocol's runs) and returns their number; after qkb_time_interleaved, end gives the
   limit from those variants' p50 and frees the buffers. Timed beside the ops it bounds, the
   limit sees the same machine: on a shared host the copy bandwidth of a DRAM footprint
   moves by up to 2x from one minute to the next, so a limit measured before or after the
   ops does not bound them. A mode's call makes enough copies (reads) to last >= ~20 us;
   the limit is per copy. */
#define QKB_LIMIT_VARIANTS 3
typedef struct qkb_limit {
    struct qkb_bw_ctx *ctx[QKB_LIMIT_VARIANTS];
    int n, nbuf;
    size_t counted;
} qkb_limit;
int qkb_limit_copy_begin(qkb_limit *l, size_t footprint, int nbuf, int warmup, int reps,
                         qkb_variant *v);
int qkb_limit_read_begin(qkb_limit *l, size_t bytes, int nbuf, int warmup, int reps, qkb_variant *v);
qkb_bandwidth qkb_limit_end(qkb_limit *l, const qkb_variant *v);

/* ---- comparisons of A against B over the same cells ---- */
typedef struct qkb_compare {
    double geomean;          /* geometric mean over cells of t_B / t_A (> 1: A faster) */
    double worst;            /* largest t_A / t_B - 1 (> 0: A slower there) */
    int worst_cell;          /* index of that cell */
    bool pass;               /* geomean >= 1 and worst <= 0.10 */
    int n;
} qkb_compare;
qkb_compare qkb_compare_times(const double *t_a, const double *t_b, int n);
/* Geometric mean of v[i] over the i with use[i] (all when use is NULL); NaN when none. */
double qkb_geomean(const double *v, const bool *use, int n);

/* ---- text output ---- */
/* "812ns", "12.3us", "4.56ms", "1.23s" */
const char *qkb_fmt_time(char *buf, size_t n, double seconds);
/* "768B", "12.0KiB", "20.0MiB" */
const char *qkb_fmt_bytes(char *buf, size_t n, double bytes);

#define QKB_MAX_COLS 24
/* An aligned table: qkb_table_init(&t, "l5 r6 r8"), one column per token (l/r = align,
   then width); qkb_table_header with the column titles, then qkb_table_cell per cell:
   the row ends (newline) after the last column. */
typedef struct qkb_table {
    int ncol, col;
    int width[QKB_MAX_COLS];
    bool left[QKB_MAX_COLS];
} qkb_table;
void qkb_table_init(qkb_table *t, const char *spec);
void qkb_table_header(qkb_table *t, const char *const *titles);
void qkb_table_cell(qkb_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void qkb_table_rule(const qkb_table *t);     /* a line of dashes as wide as the table */

/* ---- gates: each protocol's targets (performance.md), judged, printed and written the
   same way: a line "  <label>  <value>  (target >= <target>)  PASS|MISS" (n/a when nothing
   was measured) and an entry {figure, label, value, target, bound, result} of the JSON's
   "summary" array ---- */
#define QKB_MAX_GATES 48
typedef struct qkb_gate {
    const char *figure;        /* "fraction_of_copy", "vs_composite", "time_vs_m1", ... */
    char label[128];
    double value, target;
    bool at_most;              /* the target is an upper bound (value <= target passes) */
    bool valid, pass;          /* valid: measured in this run */
} qkb_gate;
typedef struct qkb_gates {
    qkb_gate g[QKB_MAX_GATES];
    int n;
} qkb_gates;
/* Judges, prints and records one gate; unit ("x" or "") follows value and target. Returns
   whether it passed (false when !valid). */
bool qkb_gate_report(qkb_gates *gs, const char *figure, const char *label, bool valid,
                     double value, double target, bool at_most, const char *unit);
/* The recorded gates as the JSON's "summary" array. */
struct qkb_json;
void qkb_json_gates(struct qkb_json *j, const qkb_gates *gs);

/* ---- JSON output ---- */
/* A streaming writer: objects and arrays nest; `key` is the member name inside an object
   and NULL inside an array. Non-finite numbers are written as null. */
typedef struct qkb_json {
    FILE *f;
    int depth;
    bool first[32];          /* no member written yet at this depth */
    char close[32];          /* '}' or ']' closing each depth */
    bool ok;
} qkb_json;
/* Opens `path` and begins the top-level object; false (with a message) on failure. */
bool qkb_json_open(qkb_json *j, const char *path);
/* Ends the top-level object and closes the file; false when any write failed. */
bool qkb_json_close(qkb_json *j);
void qkb_json_object(qkb_json *j, const char *key);   /* begin */
void qkb_json_array(qkb_json *j, const char *key);    /* begin */
void qkb_json_end(qkb_json *j);                       /* end the innermost object/array */
void qkb_json_num(qkb_json *j, const char *key, double v);
void qkb_json_int(qkb_json *j, const char *key, int64_t v);
void qkb_json_str(qkb_json *j, const char *key, const char *s);   /* NULL -> null */
void qkb_json_bool(qkb_json *j, const char *key, bool v);
/* Writes `text`, already valid JSON, as a value. */
void qkb_json_raw(qkb_json *j, const char *key, const char *text);
/* "machine": CPU model, cores, LLC, threads; "library": version, ABI, target. */
void qkb_json_environment(qkb_json *j, const qkb_options *opt);
void qkb_json_stats(qkb_json *j, const char *key, const qkb_stats *s);
void qkb_json_bandwidth(qkb_json *j, const char *key, const qkb_bandwidth *b);

/* CPU model name (/proc/cpuinfo "model name"), e.g. "AMD EPYC". */
const char *qkb_cpu_model(void);
/* The 1-minute load average (/proc/loadavg), NaN when unknown. */
double qkb_loadavg(void);
/* How busy other processes kept the machine: take a mark before and after a run; the
   average number of cores they used in between is the machine's busy time (/proc/stat,
   steal included) less this process's CPU time, over the wall time. A run during which
   others used a noticeable share (> 0.25 core) gives noisy figures and should say so. */
typedef struct qkb_cpu_mark { double wall, self, busy; bool ok; } qkb_cpu_mark;
qkb_cpu_mark qkb_cpu_mark_now(void);
double qkb_other_load(const qkb_cpu_mark *before, const qkb_cpu_mark *after); /* NaN: unknown */

/* ---- SVG plot (log-log), written by the tool itself ---- */
typedef struct qkb_series {
    const char *name;
    const char *color;       /* "#1f77b4" */
    bool dashed;
    bool square;             /* square markers instead of circles */
    int n;
    double *x, *y;           /* n points, x and y > 0 (others are skipped) */
} qkb_series;
/* Draws every series as markers joined in order of x, ticks labelled with SI prefixes
   and the unit ("10kB", "1ms"); false (with a message) when the file cannot be written. */
bool qkb_svg_plot(const char *path, const char *title, const char *xlabel, const char *xunit,
                  const char *ylabel, const char *yunit, const qkb_series *series, int nseries);
/* A colour from a fixed palette, by index. */
const char *qkb_color(int i);

#endif
