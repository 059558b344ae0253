/* Internal contracts between the API layer (src/api), the providers (src/ref, src/x86)
 * and the build targets' tables (src/targets). Not installed. The API layer validates
 * every argument; a provider receives only validated, flattened calls and never fails. */
#ifndef QK_INTERNAL_H
#define QK_INTERNAL_H

#include "qkern.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define QK_HIDDEN __attribute__((visibility("hidden")))

/* ---- errors ---- */
/* Records a message for qk_last_error() and returns st. */
QK_HIDDEN qk_status qk_fail(qk_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
QK_HIDDEN void qk_clear_error(void);
/* "[5120]" / "[2, 3, 5120]" into buf. */
QK_HIDDEN const char *qk_shape_str(const qk_tensor *t, char *buf, size_t n);

/* ---- rows: the leading dims of a tensor whose last dim is contiguous ---- */
/* qk_dtype_size, inline for the per-call checks (0 for an unknown dtype) */
static inline size_t qk_dtype_bytes(qk_dtype d)
{
    switch (d) {
    case QK_DTYPE_F32: case QK_DTYPE_I32: return 4;
    case QK_DTYPE_F16: case QK_DTYPE_BF16: return 2;
    case QK_DTYPE_F8_E4M3: case QK_DTYPE_F8_E5M2: case QK_DTYPE_E8M0:
    case QK_DTYPE_U8: case QK_DTYPE_I8: return 1;
    case QK_DTYPE_I64: return 8;
    default: return 0;
    }
}

typedef struct qk_rows {
    int32_t n;                       /* number of leading dims kept (0..3) */
    int64_t shape[QK_MAX_DIMS - 1];
    int64_t bstride[QK_MAX_DIMS - 1]; /* byte strides */
} qk_rows;

/* Byte offset of flattened row i. */
static inline int64_t qk_rows_offset(const qk_rows *r, int64_t i)
{
    if (r->n == 1) return i * r->bstride[0];
    int64_t off = 0;
    for (int32_t d = r->n - 1; d >= 0; d--) {
        off += (i % r->shape[d]) * r->bstride[d];
        i /= r->shape[d];
    }
    return off;
}

/* Leading-dim description of t (all dims but the last), merged where strides allow, written
   field by field into *r (entries past r->n are never read: qk_rows_offset). Not returned by
   value: the copy out of a by-value struct read its 4-byte n and the dims after it in one
   16-byte load, which no store forwards, a stall of ~10 ns per tensor in every small call. */
static inline __attribute__((always_inline)) void qk_rows_set(qk_rows *r, const qk_tensor *t)
{
    int32_t n = 0;
    const int64_t es = (int64_t)qk_dtype_bytes(t->dtype);
    for (int32_t d = 0; d + 1 < t->ndim; d++) {
        if (t->shape[d] == 1) continue; /* size-1 dims never move the pointer */
        if (n > 0 && r->bstride[n - 1] == t->shape[d] * t->stride[d] * es) {
            r->shape[n - 1] *= t->shape[d];        /* merge with the dim before */
            r->bstride[n - 1] = t->stride[d] * es;
            continue;
        }
        r->shape[n] = t->shape[d];
        r->bstride[n] = t->stride[d] * es;
        n++;
    }
    if (n == 0) { n = 1; r->shape[0] = 1; r->bstride[0] = 0; }
    r->n = n;
}
QK_HIDDEN int64_t qk_tensor_rows(const qk_tensor *t);   /* product of leading dims */
/* ceil(K / 32), the scale blocks of K >= 0 elements, without K + 31 overflowing at INT64_MAX:
   every block count in the library and the tool is this one expression */
static inline int64_t qk_mx_blocks(int64_t K) { return K / QK_MX_BLOCK + (K % QK_MX_BLOCK != 0); }
/* Byte range [lo, hi) spanned by t's elements (empty tensors: lo == hi). Inline, so lo and
   hi stay in registers (through memory they were stored as two words and read back as one
   16-byte load, which no store forwards). */
typedef struct qk_extent { uintptr_t lo, hi; } qk_extent;
static inline __attribute__((always_inline)) qk_extent qk_extent_of(const qk_tensor *t)
{
    const intptr_t es = (intptr_t)qk_dtype_bytes(t->dtype);
    intptr_t mn = 0, mx = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] <= 0) return (qk_extent){(uintptr_t)t->data, (uintptr_t)t->data};
        const intptr_t span = (intptr_t)(t->shape[d] - 1) * (intptr_t)t->stride[d];
        if (span < 0) mn += span; else mx += span;
    }
    return (qk_extent){(uintptr_t)t->data + (uintptr_t)(mn * es),
                       (uintptr_t)t->data + (uintptr_t)((mx + 1) * es)};
}
static inline bool qk_extents_overlap(qk_extent a, qk_extent b) { return a.lo < b.hi && b.lo < a.hi; }
/* true when a and b describe the same memory with the same layout */
QK_HIDDEN bool qk_tensor_same(const qk_tensor *a, const qk_tensor *b);
QK_HIDDEN bool qk_tensor_overlap(const qk_tensor *a, const qk_tensor *b);

/* ---- threads ---- */
QK_HIDDEN int qk_threads(void);
/* Runs fn(ctx, begin, end) over [0, n) split into contiguous chunks, on up to
   qk_threads() threads, using one thread only when n * bytes_per_item < min_bytes. */
typedef void (*qk_range_fn)(const void *ctx, int64_t begin, int64_t end);
QK_HIDDEN void qk_parallel_for(int64_t n, int64_t bytes_per_item, int64_t min_bytes,
                               qk_range_fn fn, const void *ctx);

/* ---- CPU features: the bits, and the per-architecture query in src/cpu/<arch>.c ---- */
#include "cpu/cpu.h"
/* what this CPU has: the architecture's query, or the test fake */
QK_HIDDEN unsigned qk_cpu_features(void);
/* Test hooks: replace the feature query (NULL restores the real one) and forget qk_init's
   result. */
QK_HIDDEN void qk_test_set_cpu_query(unsigned (*query)(void));
QK_HIDDEN void qk_test_reset_init(void);

/* ---- dtype helpers (exact conversions, RNE) ---- */
static inline float qk_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t qk_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
QK_HIDDEN float qk_f16_to_f32(uint16_t h);
QK_HIDDEN uint16_t qk_f16_from_f32(float f);

static inline float qk_load_f32(const void *p, qk_dtype dt, int64_t i)
{
    switch (dt) {
    case QK_DTYPE_F16: return qk_f16_to_f32(((const uint16_t *)p)[i]);
    case QK_DTYPE_BF16: return qk_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static inline void qk_store_f32(void *p, qk_dtype dt, int64_t i, float v)
{
    switch (dt) {
    case QK_DTYPE_F16: ((uint16_t *)p)[i] = qk_f16_from_f32(v); break;
    case QK_DTYPE_BF16: ((uint16_t *)p)[i] = qk_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}
static inline bool qk_is_float_dtype(qk_dtype d)
{
    return d == QK_DTYPE_F32 || d == QK_DTYPE_F16 || d == QK_DTYPE_BF16;
}

/* ---- RMSNorm family ---- */
typedef enum qk_norm_kind {
    QK_NORM_RMS = 0, QK_NORM_GEMMA, QK_NORM_ADD_RMS, QK_NORM_ADD_GEMMA, QK_NORM_GATED,
    QK_NORM_KINDS
} qk_norm_kind;

/* A validated norm call. Pointers are bytes; rows are addressed through qk_rows. */
typedef struct qk_norm_call {
    qk_norm_kind kind;
    int64_t rows, H;
    float eps;
    qk_dtype xdt, wdt, gdt;          /* x (= out, residual, residual_out), weight, gate */
    const char *x;    qk_rows xr;
    const void *w;
    const char *res;  qk_rows rr;    /* residual (add forms) */
    const char *gate; qk_rows gr;    /* gate (gated form) */
    char *out;        qk_rows outr;
    char *res_out;    qk_rows ror;   /* residual_out (add forms) */
    char *rstd;       qk_rows rsr;   /* rstd (plain forms), F32, or NULL */
} qk_norm_call;

/* Processes rows [begin, end) of the call. Never fails. */
typedef void (*qk_norm_fn)(const qk_norm_call *c, int64_t begin, int64_t end);

typedef struct qk_norm_impl {
    const char *provider;   /* "ref", "avx2", "avx512", ... */
    qk_norm_fn fn;
    int64_t min_parallel_bytes; /* below this many bytes moved, one thread */
} qk_norm_impl;

/* Validates and runs a norm op with the given provider (the public API passes its
   target's). `extra` is residual (add forms) or gate (gated); `out2` is residual_out
   (add forms) or rstd (plain forms). */
QK_HIDDEN qk_status qk_norm_run(qk_norm_kind kind, const qk_norm_impl *impl,
                                const qk_tensor *x, const qk_tensor *weight,
                                const qk_tensor *extra, float eps,
                                qk_tensor *out, qk_tensor *out2);
QK_HIDDEN const char *qk_norm_op_name(qk_norm_kind kind);

/* ---- MXFP8 provider interfaces (row kernels; the API layer loops and threads) ---- */
/* x row of K elements (dtype xdt) -> q row (K bytes), scale row (ceil(K/32) bytes). */
typedef void (*qk_mx_quantize_row_fn)(const void *x, qk_dtype xdt, int64_t K,
                                      const qk_mx_options *opt, uint8_t *q, uint8_t *scale);
/* q row (elem dtype qdt), scale row -> out row (dtype odt). */
typedef void (*qk_mx_dequantize_row_fn)(const uint8_t *q, qk_dtype qdt, const uint8_t *scale,
                                        int64_t K, void *out, qk_dtype odt);
typedef struct qk_mx_quantize_impl { const char *provider; qk_mx_quantize_row_fn fn; } qk_mx_quantize_impl;
/* The API's MX ops run rows on one thread below this many bytes moved (qk bench quant
   threads its row kernels the same way). */
#define QK_MX_MIN_PARALLEL_BYTES (128 << 10)
typedef struct qk_mx_dequantize_impl { const char *provider; qk_mx_dequantize_row_fn fn; } qk_mx_dequantize_impl;
/* qk_mx_quantize with a given provider (the public call passes its target's; the serving
   layer's reference backend passes ref's): the same checks, then impl's row kernel. */
QK_HIDDEN qk_status qk_mx_quantize_with(const qk_mx_quantize_impl *impl, const qk_tensor *x,
                                        const qk_mx_options *opt, qk_tensor *q, qk_tensor *scale);

/* The W8A8 linear: a provider prepares the weight into its own layout and runs it.
   qk_linear_call describes a validated call (x rows flattened through qk_rows). */
typedef struct qk_linear_call {
    const qk_mx_weight *w;
    int64_t M, N, K;
    qk_dtype xdt, odt;
    const char *x; qk_rows xr;
    const float *bias;               /* [N] or NULL */
    char *out; qk_rows outr;
} qk_linear_call;
struct qk_linear_impl;
typedef struct qk_linear_impl {
    const char *provider;
    /* Builds w's provider-private layout from validated q [N, K] (row stride qs bytes)
       and scale [N, kb] (row stride ss bytes). Returns QK_OK or QK_ERR_NOMEM. */
    qk_status (*prepare)(qk_mx_weight *w, const uint8_t *q, int64_t qs,
                         const uint8_t *scale, int64_t ss);
    void (*release)(qk_mx_weight *w);
    /* Returns QK_OK or QK_ERR_NOMEM (scratch), writing nothing on failure. */
    qk_status (*run)(const qk_linear_call *c);
} qk_linear_impl;

/* The prepared weight. `layout` is the preparing provider's; `impl` remembers it. */
struct qk_mx_weight {
    int64_t N, K, kb;
    const qk_linear_impl *impl;
    void *layout;
    size_t layout_bytes;
};
/* qk_mx_weight_create with a given provider (the public call passes its target's; tests
   prepare one weight per provider). The weight remembers impl and runs with it. */
QK_HIDDEN qk_status qk_mx_weight_create_with(const qk_linear_impl *impl, const qk_tensor *q,
                                             const qk_tensor *scale, qk_mx_weight **w);

/* ---- provider op sets and build-target tables ---- */
typedef struct qk_ops {
    qk_norm_impl norm[QK_NORM_KINDS];        /* indexed by qk_norm_kind */
    qk_mx_quantize_impl mx_quantize;
    qk_mx_dequantize_impl mx_dequantize;
    const char *mx_pack_scale_pairs;         /* provider name (the op is a byte shuffle) */
    const qk_linear_impl *mxfp8_linear;
} qk_ops;

typedef struct qk_provider_set {     /* one compiled provider: what it implements */
    const char *name;                 /* "ref", "avx2", "avx512" */
    unsigned cpu_features;            /* QK_CPU_* it needs */
    qk_ops ops;                       /* NULL fn where it does not implement an op */
} qk_provider_set;

/* Every provider compiled into this build, ref first; NULL-terminated (src/api/providers.c,
   from the list the target's CMake fragment generates). */
QK_HIDDEN extern const qk_provider_set *const qk_all_providers[];
QK_HIDDEN extern const qk_provider_set qk_provider_ref;
/* each ISA provider's set, qk_provider_<name> (defined in its folder's provider_<name>.c) */
#define QK_PROVIDER(name) QK_HIDDEN extern const qk_provider_set qk_provider_##name;
#include "qk_providers.h"
#undef QK_PROVIDER

/* A build target, as a BLIS config is: the reference provider's ops with the overrides the
   target names, each override pointing at a provider's own set (src/targets/<target>.c).
   NULL keeps the reference provider's op. */
typedef struct qk_target_overrides {
    const qk_provider_set *norm[QK_NORM_KINDS];   /* indexed by qk_norm_kind */
    const qk_provider_set *mx_quantize, *mx_dequantize, *mx_pack_scale_pairs, *mxfp8_linear;
} qk_target_overrides;
#define QK_NORM_ALL(set) {(set), (set), (set), (set), (set)}

typedef struct qk_target_config {
    const char *name;                 /* "generic", "x86-64-v3", "x86-64-v4", "aarch64", ... */
    qk_target_overrides overrides;
    /* Measured per target (`qk bench gemma-shift`): when true, a serving layer that keeps a
       Gemma weight should also keep the f32 1 + w and run (add_)rms_norm with it instead of
       the native (1 + w) kernel — same bits, less work per call. */
    bool gemma_shifted_weight;
} qk_target_config;

/* The config of the target this library was built for (src/targets/<target>.c). */
QK_HIDDEN extern const qk_target_config qk_target_config_built;

/* The staged table, resolved from qk_target_config_built when the library loads
   (src/api/target.c): every op from its provider's own set, and the CPU features the
   target needs = the union of those its providers need. Written once, by the library's
   constructor, before any call can read it. */
typedef struct qk_target_table {
    const char *name;
    unsigned cpu_features;
    qk_ops ops;                       /* complete: every op has a provider */
    bool gemma_shifted_weight;
} qk_target_table;
QK_HIDDEN extern qk_target_table qk_target_table_built;
/* Resolves a config into a table (the loader's step; tests check it on the built config). */
QK_HIDDEN void qk_target_resolve(const qk_target_config *cfg, qk_target_table *t);

/* Op names in the order of qk_provider(): used by qk info and the table test. */
QK_HIDDEN extern const char *const qk_op_names[];
QK_HIDDEN const char *qk_ops_provider(const qk_ops *ops, const char *op);

#endif /* QK_INTERNAL_H */
