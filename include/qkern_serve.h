/* qkern serving layer — for inference-engine authors: the kernel backend registry, the
 * provider-library ABI, the layers with their weight life cycle (create, load,
 * process_weights_after_loading, forward) and the Qwen3.5 blocks. Semantics: the
 * specification's serving.md. Semi-public like qkern_io.h: installed, outside
 * QK_ABI_VERSION's promise except for the provider-library ABI below (qk_provider_info),
 * which follows QK_ABI_VERSION. Every failing call returns a non-zero qk_status, sets
 * qk_last_error() and changes nothing. */
#ifndef QKERN_SERVE_H
#define QKERN_SERVE_H

#include "qkern.h"
#include "qkern_io.h"

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Ops and backends
 * ====================================================================================== */

/* The ops the layers call (serving.md's names). */
typedef enum qk_serve_op {
    QK_OP_GEMMA_RMS_NORM = 0,
    QK_OP_ADD_GEMMA_RMS_NORM,
    QK_OP_RMS_NORM,
    QK_OP_ADD_RMS_NORM,
    QK_OP_RMS_NORM_GATED,
    QK_OP_MXFP8_QUANTIZE,
    QK_OP_MXFP8_LINEAR,
    QK_OP_COUNT
} qk_serve_op;

typedef enum qk_backend {
    QK_BACKEND_DEFAULT = 0,   /* no explicit choice: the forced backend, else the priority */
    QK_BACKEND_TARGET,        /* the library's staged provider for its build target */
    QK_BACKEND_REFERENCE,     /* the portable reference provider (the plain definition) */
    QK_BACKEND_LIBRARY,       /* a provider library loaded by explicit path */
    QK_BACKEND_COUNT
} qk_backend;

QK_API const char *qk_serve_op_name(qk_serve_op op);   /* "gemma_rms_norm"; NULL if unknown */
QK_API qk_status   qk_serve_op_parse(const char *name, qk_serve_op *op);
QK_API const char *qk_backend_name(qk_backend b);       /* "default", "target", "reference",
                                                           "library"; NULL if unknown */
QK_API qk_status   qk_backend_parse(const char *name, qk_backend *b);

/* Reads QK_FORCE_BACKEND (target | reference | library) and QK_PROVIDER_LIB (a path) from
 * the environment once and loads that library. Every registry call runs it implicitly and
 * then reports a failure once on stderr; calling it directly returns the (sticky)
 * status, with the loader's message in qk_last_error(). */
QK_API qk_status   qk_serve_init(void);

/* true when backend b (TARGET, REFERENCE or LIBRARY) implements op. */
QK_API bool        qk_backend_implements(qk_backend b, qk_serve_op op);
/* The backends registered for op (those that implement it), in priority order (library,
 * target, reference); returns how many (at most QK_BACKEND_COUNT - 1). */
QK_API size_t      qk_serve_backends(qk_serve_op op, qk_backend *out, size_t cap);
/* What backend b runs for op, e.g. "x86-64-v4/avx512", "ref",
 * "x86-64-v4/avx512 in libqkern-provider-x86-64-v4.so"; "-" where it implements nothing. */
QK_API const char *qk_backend_describe(qk_backend b, qk_serve_op op, char *buf, size_t n);

/* Selection (serving.md). `requested` != DEFAULT is an explicit choice and is strict: when
 * that backend does not implement op the result is QK_ERR_UNSUPPORTED with a message
 * naming the op, the backend and what would provide it. DEFAULT: the forced backend where
 * it implements op (where it does not, one line on stderr per op, then:) the provider
 * library if loaded and it implements op, else target, else reference. */
QK_API qk_status   qk_serve_select(qk_serve_op op, qk_backend requested, qk_backend *chosen);

/* The global debugging switch (QK_FORCE_BACKEND). DEFAULT clears it. Meant to be set at
 * start-up, before layers are processed (an MXFP8 layer prepares its weight for the
 * backend selected then; see QK_LAYER_ALL_BACKENDS). */
QK_API qk_status   qk_serve_force_backend(qk_backend b);
QK_API qk_backend  qk_serve_forced_backend(void);

/* Prints, for each op, its backends and which one is selected (qk info). */
QK_API void        qk_serve_print_registry(FILE *f);

/* ======================================================================================
 * Provider libraries (ABI QK_ABI_VERSION)
 * ====================================================================================== */

/* A provider library (e.g. build/libqkern-provider-x86-64-v4.so) exports one function,
 * QK_PROVIDER_ENTRY, returning a pointer to a static qk_provider_info. abi_version is the
 * first member and never moves: a loader reads it before anything else. Each op has the
 * stable API's signature; NULL where the library does not implement it. The weight ops go
 * together: a weight made by mx_weight_create belongs to that library. */
#define QK_PROVIDER_ENTRY "qk_provider_entry"

typedef struct qk_provider_ops {
    qk_status (*rms_norm)(const qk_tensor *x, const qk_tensor *weight, float eps,
                          qk_tensor *out, qk_tensor *rstd);
    qk_status (*gemma_rms_norm)(const qk_tensor *x, const qk_tensor *weight, float eps,
                                qk_tensor *out, qk_tensor *rstd);
    qk_status (*add_rms_norm)(const qk_tensor *x, const qk_tensor *weight,
                              const qk_tensor *residual, float eps, qk_tensor *out,
                              qk_tensor *residual_out);
    qk_status (*add_gemma_rms_norm)(const qk_tensor *x, const qk_tensor *weight,
                                    const qk_tensor *residual, float eps, qk_tensor *out,
                                    qk_tensor *residual_out);
    qk_status (*rms_norm_gated)(const qk_tensor *x, const qk_tensor *weight,
                                const qk_tensor *gate, float eps, qk_tensor *out);
    qk_status (*mx_quantize)(const qk_tensor *x, const qk_mx_options *opt, qk_tensor *q,
                             qk_tensor *scale);
    qk_status (*mx_weight_create)(const qk_tensor *q, const qk_tensor *scale,
                                  qk_mx_weight **w);
    void      (*mx_weight_destroy)(qk_mx_weight *w);
    qk_status (*mxfp8_linear)(const qk_tensor *x, const qk_mx_weight *w,
                              const qk_tensor *bias, qk_tensor *out);
} qk_provider_ops;

typedef struct qk_provider_info {
    int32_t     abi_version;  /* QK_ABI_VERSION of the library's build */
    uint32_t    size;         /* sizeof(qk_provider_info) in the library's build */
    const char *target;       /* "x86-64-v4" */
    const char *version;      /* qk_version() of the library's build */
    qk_status (*init)(void);  /* checks this CPU against the library's target */
    const char *(*last_error)(void);        /* the library's own thread-local message */
    const char *(*provider)(const char *op); /* staged provider per op, as qk_provider() */
    qk_provider_ops ops;
} qk_provider_info;

typedef const qk_provider_info *(*qk_provider_entry_fn)(void);

/* Loads a provider library by explicit path (never by probing). QK_ERR_IO when the file
 * cannot be opened, QK_ERR_FORMAT when it has no QK_PROVIDER_ENTRY or its ABI differs,
 * QK_ERR_CPU when its target does not run here, QK_ERR_INVALID_ARGUMENT when one is
 * already loaded; each message names the file, what was found and what is required.
 * On failure nothing stays loaded. */
QK_API qk_status   qk_serve_provider_load(const char *path);
/* Unloads it; QK_ERR_INVALID_ARGUMENT while weights prepared by it are alive. */
QK_API qk_status   qk_serve_provider_unload(void);
QK_API const char *qk_serve_provider_path(void);   /* NULL when none is loaded */
QK_API const qk_provider_info *qk_serve_provider_info(void);

/* ======================================================================================
 * Per-call ops: the stable API's calls with a backend in front (DEFAULT = the registry's
 * choice; anything else is strict)
 * ====================================================================================== */

QK_API qk_status qk_serve_rms_norm(qk_backend b, const qk_tensor *x, const qk_tensor *weight,
                                   float eps, qk_tensor *out, qk_tensor *rstd);
QK_API qk_status qk_serve_gemma_rms_norm(qk_backend b, const qk_tensor *x,
                                         const qk_tensor *weight, float eps, qk_tensor *out,
                                         qk_tensor *rstd);
QK_API qk_status qk_serve_add_rms_norm(qk_backend b, const qk_tensor *x,
                                       const qk_tensor *weight, const qk_tensor *residual,
                                       float eps, qk_tensor *out, qk_tensor *residual_out);
QK_API qk_status qk_serve_add_gemma_rms_norm(qk_backend b, const qk_tensor *x,
                                             const qk_tensor *weight,
                                             const qk_tensor *residual, float eps,
                                             qk_tensor *out, qk_tensor *residual_out);
QK_API qk_status qk_serve_rms_norm_gated(qk_backend b, const qk_tensor *x,
                                         const qk_tensor *weight, const qk_tensor *gate,
                                         float eps, qk_tensor *out);
QK_API qk_status qk_serve_mxfp8_quantize(qk_backend b, const qk_tensor *x,
                                         const qk_mx_options *opt, qk_tensor *q,
                                         qk_tensor *scale);

/* An MXFP8 weight prepared for one or more backends (each keeps its own layout). */
typedef struct qk_serve_weight qk_serve_weight;
/* `backends`: a mask of (1u << qk_backend) bits, each of which must implement mxfp8_linear
 * (strict); 0 = the backend selected for mxfp8_linear now. */
QK_API qk_status qk_serve_weight_create(const qk_tensor *q, const qk_tensor *scale,
                                        unsigned backends, qk_serve_weight **w);
QK_API void      qk_serve_weight_destroy(qk_serve_weight *w);
QK_API unsigned  qk_serve_weight_backends(const qk_serve_weight *w);  /* prepared mask */
/* The W8A8 linear with the selected backend; QK_ERR_INVALID_ARGUMENT when w was not
 * prepared for it (the message says how to prepare it). */
QK_API qk_status qk_serve_mxfp8_linear(qk_backend b, const qk_tensor *x,
                                       const qk_serve_weight *w, const qk_tensor *bias,
                                       qk_tensor *out);

/* Activations of the Qwen3.5 MLPs (not registry ops: plain C, identical for every backend).
 * Computed in f32 from exactly converted inputs, rounded once (RNE) to out's dtype; out has
 * the input's dtype (F32/F16/BF16), its last dim contiguous.
 * silu_and_mul: gate_up [..., 2I] -> out [..., I] = silu(gate) * up, silu(g) = g/(1+e^-g).
 * gelu_tanh: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may be x. */
QK_API qk_status qk_serve_silu_and_mul(const qk_tensor *gate_up, qk_tensor *out);
QK_API qk_status qk_serve_gelu_tanh(const qk_tensor *x, qk_tensor *out);

/* ======================================================================================
 * Layers
 * ====================================================================================== */

enum {
    /* MXFP8 layers: prepare the weight for every backend that implements mxfp8_linear, so
       that any per-call choice can run (default: target and the backend selected at
       process_weights_after_loading). */
    QK_LAYER_ALL_BACKENDS = 1u << 0,
    /* Gemma norms: keep the f32 shifted weight 1 + w beside the raw one and run the plain
       op with it, as for a provider that prefers a shifted weight (none does today). */
    QK_LAYER_SHIFTED_WEIGHT = 1u << 1,
};

typedef struct qk_layer_options {
    qk_backend   backend;       /* per-layer choice; DEFAULT: the registry's */
    qk_dtype     weight_dtype;  /* norms' weight placeholder: BF16 (default), F16 or F32 */
    unsigned     flags;         /* QK_LAYER_* */
    qk_tp_policy tp_policy;     /* row-parallel MXFP8 layers (default QK_TP_EVEN) */
} qk_layer_options;
QK_API qk_layer_options qk_layer_options_default(void);

/* ---- the RMSNorm family ---- */
typedef enum qk_norm_layer_kind {
    QK_LAYER_GEMMA_RMS_NORM = 0, /* GemmaRMSNorm(hidden, eps): weight 0; forward, residual */
    QK_LAYER_GEMMA3_RMS_NORM,    /* Gemma3RMSNorm(dim, eps): weight 0; forward only */
    QK_LAYER_RMS_NORM,           /* RMSNorm(hidden, eps): weight 1; forward, residual */
    QK_LAYER_RMS_NORM_GATED,     /* RMSNormGated(hidden, eps): weight 1; forward_gated */
    QK_LAYER_NORM_KINDS
} qk_norm_layer_kind;

typedef struct qk_norm_layer qk_norm_layer;

QK_API const char *qk_norm_layer_kind_name(qk_norm_layer_kind kind);  /* "GemmaRMSNorm" */
/* create: the weight placeholder [hidden] holds the fresh value (Gemma 0, others 1).
 * `prefix` is the checkpoint prefix ("model.layers.0.post_attention_layernorm"); the
 * layer's one tensor is "<prefix>.weight". eps: finite, >= 0 (serving.md's default 1e-6). */
QK_API qk_status qk_norm_layer_create(qk_norm_layer_kind kind, const char *prefix,
                                      int64_t hidden, float eps, const qk_layer_options *opt,
                                      qk_norm_layer **l);
QK_API void      qk_norm_layer_destroy(qk_norm_layer *l);
/* load: `name` must be "<prefix>.weight"; dtype (the placeholder's) then shape ([hidden])
 * are checked before any byte is copied (QK_ERR_FORMAT naming the tensor). Loading again
 * drops the shifted weight until the next process_weights_after_loading. */
QK_API qk_status qk_norm_layer_load(qk_norm_layer *l, const char *name, const qk_tensor *t);
QK_API qk_status qk_norm_layer_load_from(qk_norm_layer *l, const qk_st_set *s);
QK_API qk_status qk_norm_layer_process_weights_after_loading(qk_norm_layer *l);
/* The raw weight (what reloading and saving see) and, when kept, the f32 1 + w. */
QK_API qk_status qk_norm_layer_weight(const qk_norm_layer *l, qk_tensor *view);
QK_API qk_status qk_norm_layer_shifted_weight(const qk_norm_layer *l, qk_tensor *view);
/* forward(x) -> out (out may be x). b: per-call backend (DEFAULT: the layer's). */
QK_API qk_status qk_norm_layer_forward(const qk_norm_layer *l, qk_backend b,
                                       const qk_tensor *x, qk_tensor *out);
/* forward(x, residual) -> (out, residual_out = rnd(x + residual)); out may be x and
 * residual_out may be residual (in place). GemmaRMSNorm and RMSNorm. */
QK_API qk_status qk_norm_layer_forward_residual(const qk_norm_layer *l, qk_backend b,
                                                const qk_tensor *x, const qk_tensor *residual,
                                                qk_tensor *out, qk_tensor *residual_out);
/* forward(x, gate) -> out. RMSNormGated. */
QK_API qk_status qk_norm_layer_forward_gated(const qk_norm_layer *l, qk_backend b,
                                             const qk_tensor *x, const qk_tensor *gate,
                                             qk_tensor *out);

/* ---- MXFP8Linear: the ModelSlim W8A8_MXFP8 scheme (checkpoint.md's life cycle) ---- */
typedef struct qk_mxfp8_linear_layer qk_mxfp8_linear_layer;

/* MXFP8Linear(in, out, bias, tp, rank, parallel): full sizes in (K) and out (N); tp ranks
 * (1 = unsharded) and this rank; parallel QK_TP_NONE / QK_TP_COLUMN / QK_TP_ROW (policy in
 * opt->tp_policy). Tensors: "<prefix>.weight", ".weight_scale", ".bias". */
QK_API qk_status qk_mxfp8_linear_layer_create(const char *prefix, int64_t in, int64_t out,
                                              bool bias, int32_t tp, int32_t rank,
                                              qk_tp_kind parallel,
                                              const qk_layer_options *opt,
                                              qk_mxfp8_linear_layer **l);
QK_API void      qk_mxfp8_linear_layer_destroy(qk_mxfp8_linear_layer *l);
QK_API qk_status qk_mxfp8_linear_layer_load(qk_mxfp8_linear_layer *l, const char *name,
                                            const qk_tensor *t);
QK_API qk_status qk_mxfp8_linear_layer_load_from(qk_mxfp8_linear_layer *l,
                                                 const qk_st_set *s);
/* 0xFF scales left -> QK_ERR_FORMAT naming the tensor and (row, block); then the weight is
 * prepared for its backends and the raw placeholders are released. */
QK_API qk_status qk_mxfp8_linear_layer_process_weights_after_loading(qk_mxfp8_linear_layer *l);
QK_API const qk_mx_linear *qk_mxfp8_linear_layer_scheme(const qk_mxfp8_linear_layer *l);
QK_API const qk_serve_weight *qk_mxfp8_linear_layer_weight(const qk_mxfp8_linear_layer *l);
QK_API const char *qk_mxfp8_linear_layer_prefix(const qk_mxfp8_linear_layer *l);
/* forward(x [..., k]) -> out [..., n] (the rank's part; row-parallel: a partial sum). */
QK_API qk_status qk_mxfp8_linear_layer_forward(const qk_mxfp8_linear_layer *l, qk_backend b,
                                               const qk_tensor *x, qk_tensor *out);

/* ======================================================================================
 * Qwen3.5 blocks (unsharded)
 * ====================================================================================== */

typedef struct qk_qwen35_config {
    int64_t hidden_size;              /* text: 1024 (0.8B), 5120 (27B) */
    int64_t intermediate_size;        /* text: 3584 (0.8B), 17408 (27B) */
    float   rms_norm_eps;             /* 1e-6 */
    int64_t vision_hidden_size;       /* 1152 */
    int64_t vision_intermediate_size; /* 4304 (K of linear_fc2: 134.5 blocks) */
} qk_qwen35_config;

/* "0.8B" or "27B"; QK_ERR_INVALID_ARGUMENT naming the known ones otherwise. */
QK_API qk_status qk_qwen35_config_get(const char *name, qk_qwen35_config *c);

/* Text decoder MLP half of layer N: h, residual = post_attention_layernorm(x, residual)
 * (GemmaRMSNorm, residual form); gate_up_proj (MXFP8, [2I, H]); silu(gate) * up;
 * down_proj (MXFP8, [H, I]). Tensors: model.layers.N.post_attention_layernorm.weight and
 * model.layers.N.mlp.{gate_proj, up_proj, down_proj}.{weight, weight_scale} (gate_proj and
 * up_proj are stacked into gate_up_proj; a checkpoint with mlp.gate_up_proj also loads). */
typedef struct qk_qwen35_text_mlp qk_qwen35_text_mlp;
QK_API qk_status qk_qwen35_text_mlp_create(const qk_qwen35_config *c, int32_t layer,
                                           const qk_layer_options *opt,
                                           qk_qwen35_text_mlp **b);
QK_API void      qk_qwen35_text_mlp_destroy(qk_qwen35_text_mlp *b);
/* Every tensor is found and checked (dtype, shape) before any is copied. */
QK_API qk_status qk_qwen35_text_mlp_load(qk_qwen35_text_mlp *b, const qk_st_set *s);
/* Every linear is checked (0xFF scales, NaN codes) before any is processed. */
QK_API qk_status qk_qwen35_text_mlp_process_weights_after_loading(qk_qwen35_text_mlp *b);
/* x, residual [..., H] (F32/F16/BF16, same dtype) -> out [..., H] (x's dtype) and
 * residual_out = rnd(x + residual) (may be residual). Intermediates in x's dtype. */
QK_API qk_status qk_qwen35_text_mlp_forward(const qk_qwen35_text_mlp *b, qk_backend be,
                                            const qk_tensor *x, const qk_tensor *residual,
                                            qk_tensor *out, qk_tensor *residual_out);
QK_API const qk_norm_layer *qk_qwen35_text_mlp_norm(const qk_qwen35_text_mlp *b);
QK_API const qk_mxfp8_linear_layer *qk_qwen35_text_mlp_gate_up(const qk_qwen35_text_mlp *b);
QK_API const qk_mxfp8_linear_layer *qk_qwen35_text_mlp_down(const qk_qwen35_text_mlp *b);

/* Vision MLP of block N: linear_fc1 (MXFP8 + bias, [4304, 1152]) -> gelu (tanh) ->
 * linear_fc2 (MXFP8 + bias, [1152, 4304]). Tensors: model.visual.blocks.N.mlp.linear_fc1
 * and .linear_fc2 .{weight, weight_scale, bias}. */
typedef struct qk_qwen35_vision_mlp qk_qwen35_vision_mlp;
QK_API qk_status qk_qwen35_vision_mlp_create(const qk_qwen35_config *c, int32_t block,
                                             const qk_layer_options *opt,
                                             qk_qwen35_vision_mlp **b);
QK_API void      qk_qwen35_vision_mlp_destroy(qk_qwen35_vision_mlp *b);
QK_API qk_status qk_qwen35_vision_mlp_load(qk_qwen35_vision_mlp *b, const qk_st_set *s);
QK_API qk_status qk_qwen35_vision_mlp_process_weights_after_loading(qk_qwen35_vision_mlp *b);
QK_API qk_status qk_qwen35_vision_mlp_forward(const qk_qwen35_vision_mlp *b, qk_backend be,
                                              const qk_tensor *x, qk_tensor *out);
QK_API const qk_mxfp8_linear_layer *qk_qwen35_vision_mlp_fc1(const qk_qwen35_vision_mlp *b);
QK_API const qk_mxfp8_linear_layer *qk_qwen35_vision_mlp_fc2(const qk_qwen35_vision_mlp *b);

#ifdef __cplusplus
}
#endif
#endif /* QKERN_SERVE_H */
