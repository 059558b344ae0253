/* qkern — Gemma-style RMSNorm and MXFP8 W8A8 linear kernels for Qwen3.5 serving.
 * The one public header. Names, argument orders, enumerator values and the layout of
 * qk_tensor are the ABI (version QK_ABI_VERSION); see the specification's api.md. */
#ifndef QKERN_H
#define QKERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define QK_API
#else
#define QK_API __attribute__((visibility("default")))
#endif

#define QK_ABI_VERSION 1
#define QK_MAX_DIMS 4
#define QK_MX_BLOCK 32

typedef enum qk_dtype {
    QK_DTYPE_INVALID = 0,
    QK_DTYPE_F32, QK_DTYPE_F16, QK_DTYPE_BF16,
    QK_DTYPE_F8_E4M3,   /* OCP E4M3 ("e4m3fn"): no infinities, NaN = 0x7F / 0xFF, max 448 */
    QK_DTYPE_F8_E5M2,   /* OCP E5M2: IEEE-like, has inf, max 57344 */
    QK_DTYPE_E8M0,      /* power-of-two scale byte: 2^(b-127), 0xFF = NaN */
    QK_DTYPE_U8, QK_DTYPE_I8, QK_DTYPE_I32, QK_DTYPE_I64,
} qk_dtype;

/* Limits (every op checks them first): dims are >= 0; the product of the non-zero dims fits in
   int64 (QK_ERR_SHAPE otherwise); a tensor with elements spans at most INT64_MAX bytes, i.e.
   (sum over dims of |stride| * (dim - 1) + 1) * element size fits in int64 (QK_ERR_LAYOUT
   otherwise, which also covers a stride of INT64_MIN). */
typedef struct qk_tensor {
    void    *data;
    qk_dtype dtype;
    int32_t  ndim;                  /* 1 .. QK_MAX_DIMS */
    int64_t  shape[QK_MAX_DIMS];
    int64_t  stride[QK_MAX_DIMS];   /* in elements, not bytes */
} qk_tensor;

/* A contiguous (row-major) tensor descriptor. */
QK_API qk_tensor qk_tensor_make(void *data, qk_dtype dtype, int32_t ndim, const int64_t *shape);
QK_API size_t    qk_dtype_size(qk_dtype dtype);
/* safetensors names: "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", ...;
   "INVALID" for an unknown value. */
QK_API const char *qk_dtype_name(qk_dtype dtype);

typedef enum qk_status {
    QK_OK = 0,
    QK_ERR_INVALID_ARGUMENT,  /* NULL where not allowed, bad eps, bad option value */
    QK_ERR_SHAPE,             /* shapes disagree with the op's contract */
    QK_ERR_DTYPE,             /* dtype not supported for this argument, or mismatched */
    QK_ERR_LAYOUT,            /* last dim not contiguous, partial overlap of in/out */
    QK_ERR_UNSUPPORTED,       /* the op or option is not available in this build/backend */
    QK_ERR_CPU,               /* this CPU lacks an instruction set the build targets */
    QK_ERR_NOMEM,
    QK_ERR_IO,
    QK_ERR_FORMAT,            /* malformed or inconsistent file, checkpoint or scale data */
} qk_status;

QK_API const char *qk_status_name(qk_status s);  /* "QK_ERR_SHAPE" */
/* Thread-local: what the last failing call on this thread said, e.g.
   "qk_gemma_rms_norm: weight has shape [4096] but x's last dim is 5120". "" if none. */
QK_API const char *qk_last_error(void);

/* ---- Library information ---- */
QK_API const char *qk_version(void);            /* "MAJOR.MINOR.PATCH" */
QK_API int         qk_abi_version(void);        /* == QK_ABI_VERSION of the built library */
QK_API const char *qk_target(void);             /* e.g. "x86-64-v4" */
/* The provider the build target staged for an op, e.g. qk_provider("gemma_rms_norm") ->
   "avx512"; NULL for an unknown op name. Op names: rms_norm, gemma_rms_norm,
   add_rms_norm, add_gemma_rms_norm, rms_norm_gated, mx_quantize, mx_dequantize,
   mx_pack_scale_pairs, mxfp8_linear. */
QK_API const char *qk_provider(const char *op);
/* Checks the CPU against the target once; every op calls it implicitly. QK_ERR_CPU with a
   message naming the missing feature and the target to rebuild with. */
QK_API qk_status   qk_init(void);
/* 0 = default (QK_NUM_THREADS from the environment, else all cores). */
QK_API void        qk_set_num_threads(int n);
QK_API int         qk_get_num_threads(void);   /* the bound in force */

/* ---- RMSNorm family (semantics and accuracy bounds in norm.md) ----
 * x is [..., H]; leading dims may have any strides, the last dim must be contiguous.
 * weight is [H], contiguous, F32/F16/BF16 independent of x's dtype. out has x's shape and
 * dtype. rstd, when not NULL, is F32 with x's leading shape ([1] for 1-D x).
 * out may be x itself (same data and strides); any other overlap is QK_ERR_LAYOUT.
 * Accuracy: F16/BF16 out within 1 ulp of the correctly rounded double reference;
 * F32 out within 2^-19 relative. residual_out is exactly rnd(x + residual). */
QK_API qk_status qk_rms_norm        (const qk_tensor *x, const qk_tensor *weight, float eps,
                                     qk_tensor *out, qk_tensor *rstd);
QK_API qk_status qk_gemma_rms_norm  (const qk_tensor *x, const qk_tensor *weight, float eps,
                                     qk_tensor *out, qk_tensor *rstd);
QK_API qk_status qk_add_rms_norm    (const qk_tensor *x, const qk_tensor *weight,
                                     const qk_tensor *residual, float eps,
                                     qk_tensor *out, qk_tensor *residual_out);
QK_API qk_status qk_add_gemma_rms_norm(const qk_tensor *x, const qk_tensor *weight,
                                     const qk_tensor *residual, float eps,
                                     qk_tensor *out, qk_tensor *residual_out);
QK_API qk_status qk_rms_norm_gated  (const qk_tensor *x, const qk_tensor *weight,
                                     const qk_tensor *gate, float eps, qk_tensor *out);

/* ---- MXFP8 (semantics in mxfp8.md) ---- */
/* MODELSLIM: what msModelSlim's exporter writes (mxfp8.md): FLOOR with log2(amax) rounded
   to the input's dtype (BF16/F16; F32 input: FLOOR); a NaN/Inf block gets scale 0x00 and
   elements 0xFF. */
typedef enum qk_mx_scale_rule {
    QK_MX_SCALE_FLOOR = 0, QK_MX_SCALE_RCEIL = 1, QK_MX_SCALE_MODELSLIM = 2
} qk_mx_scale_rule;
typedef enum qk_round { QK_ROUND_NEAREST_EVEN = 0, QK_ROUND_NEAREST_AWAY = 1 } qk_round;

typedef struct qk_mx_options {
    qk_dtype         elem;        /* QK_DTYPE_F8_E4M3 (default) or QK_DTYPE_F8_E5M2 */
    qk_mx_scale_rule scale_rule;  /* default FLOOR */
    qk_round         round;       /* default NEAREST_EVEN */
} qk_mx_options;
/* A NULL options pointer means these defaults; an out-of-range enum value is
   QK_ERR_INVALID_ARGUMENT; q's dtype must equal opt->elem (else QK_ERR_DTYPE). */
QK_API qk_mx_options qk_mx_options_default(void);

/* x [..., K] F32/F16/BF16 -> q [..., K] (elem dtype), scale [..., ceil(K/32)] E8M0 */
QK_API qk_status qk_mx_quantize  (const qk_tensor *x, const qk_mx_options *opt,
                                  qk_tensor *q, qk_tensor *scale);
/* q, scale -> out [..., K] F32/F16/BF16 */
QK_API qk_status qk_mx_dequantize(const qk_tensor *q, const qk_tensor *scale, qk_tensor *out);
/* scale [N, kb] E8M0 -> packed [N, ceil(kb/2), 2] E8M0, odd kb padded with 0x00 */
QK_API qk_status qk_mx_pack_scale_pairs(const qk_tensor *scale, qk_tensor *packed);

/* A weight prepared for the linear: created once after loading, read-only after that,
   safe to share between threads. The library copies q and scale into its own internal
   layout; the caller's buffers may be freed after create returns. scale may also have
   dtype U8 (checkpoints store E8M0 bytes as U8): the bytes mean the same. A 0xFF scale or
   an E4M3 NaN code (0x7F/0xFF) is QK_ERR_FORMAT naming the row and block / element;
   scale's shape must be [N, ceil(K/32)] exactly. */
typedef struct qk_mx_weight qk_mx_weight;
QK_API qk_status qk_mx_weight_create(const qk_tensor *q /* [N, K] F8_E4M3 */,
                                     const qk_tensor *scale /* [N, ceil(K/32)] E8M0 */,
                                     qk_mx_weight **w);
/* NULL is ignored. Destroying the same weight twice is undefined behaviour, as with free(). */
QK_API void      qk_mx_weight_destroy(qk_mx_weight *w);
QK_API int64_t   qk_mx_weight_n(const qk_mx_weight *w);
QK_API int64_t   qk_mx_weight_k(const qk_mx_weight *w);

/* out[..., N] = W8A8 linear of x[..., K] (x quantized per row per 32-block on the fly),
   plus bias [N] F32 when bias is not NULL. out dtype: x's dtype or F32.
   Accuracy (mxfp8.md): |out - exact| <= 2^-16 * sum |scaled terms| + 1 ulp of out's dtype,
   x's quantization bit for bit qk_mx_quantize's (defaults); NaN/Inf in a row of x makes
   that row's outputs NaN; results do not depend on the thread count. */
QK_API qk_status qk_mxfp8_linear(const qk_tensor *x, const qk_mx_weight *w,
                                 const qk_tensor *bias, qk_tensor *out);

#ifdef __cplusplus
}
#endif
#endif /* QKERN_H */
