/* What `qk demo` and the block tests share (hidden, not installed): the deterministic BF16
 * Qwen3.5 MLP weights of the demo, written as a safetensors file; the double-precision
 * evaluation of the blocks; an MXFP8 decoder independent of the providers; and the
 * measures the checks use (relative error against the double model, each backend's
 * distance to the spec's bound). */
#ifndef QK_DEMO_CHECK_H
#define QK_DEMO_CHECK_H

#include "serve/serve_internal.h"

/* ---- the demo model: deterministic BF16 weights ---- */
typedef struct qk_demo_tensor {
    char name[128];
    qk_dtype dtype;            /* BF16 */
    int32_t ndim;
    int64_t shape[2];
    uint16_t *data;
} qk_demo_tensor;

typedef struct qk_demo_model {
    qk_qwen35_config c;
    int32_t layer, block;
    size_t n;
    qk_demo_tensor t[12];
} qk_demo_model;

/* Text MLP half of `layer` (norm, gate_proj, up_proj, down_proj) and vision MLP of `block`
   (linear_fc1/2 with biases), HF/Qwen3.5 names, from `seed`. */
QK_HIDDEN qk_status qk_demo_model_build(const qk_qwen35_config *c, int32_t layer, int32_t block,
                                        uint64_t seed, qk_demo_model *m);
QK_HIDDEN void qk_demo_model_free(qk_demo_model *m);
/* The tensor whose name ends with `suffix` ("mlp.gate_proj.weight"), or NULL. */
QK_HIDDEN const qk_demo_tensor *qk_demo_model_find(const qk_demo_model *m, const char *suffix);
/* Writes every tensor into one BF16 safetensors file. */
QK_HIDDEN qk_status qk_demo_model_write(const qk_demo_model *m, const char *path);
/* Deterministic N(0, sigma) BF16 activations. */
QK_HIDDEN void qk_demo_activations(uint16_t *x, int64_t n, double sigma, uint64_t seed);

/* ---- MXFP8 decoding (mxfp8.md), independent of the providers ---- */
QK_HIDDEN double qk_check_e4m3(uint8_t b);                 /* NaN for 0x7F / 0xFF */
/* w[N, K] = dec(q) * 2^(s - 127), scales [N, ceil(K/32)] (exact in f32 for every scale a
   weight meets in practice: 2^-136 .. 2^121) */
QK_HIDDEN void qk_check_dequantize(const uint8_t *q, const uint8_t *s, int64_t N, int64_t K,
                                   float *w);
/* The weight of an MXFP8 linear as loaded from a checkpoint set ("<prefix>.weight" and
   ".weight_scale"), dequantized into w[N, K] (malloc'd by the caller). */
QK_HIDDEN qk_status qk_check_dequantize_from(const qk_st_set *s, const char *prefix, int64_t N,
                                             int64_t K, float *w);
QK_HIDDEN void qk_check_bf16_to_f32(const uint16_t *x, int64_t n, float *y);
QK_HIDDEN void qk_check_to_f64(const void *x, qk_dtype dt, int64_t n, double *y);

/* ---- double-precision evaluation ---- */
/* y[M, N] = x[M, K] w[N, K]^T (+ bias[N]); when abs_sum is not NULL it receives
   sum_k |x[m,k] w[n,k]| (the S of mxfp8.md's bound). */
QK_HIDDEN void qk_check_linear_f64(const double *x, int64_t M, int64_t K, const float *w,
                                   int64_t N, const float *bias, double *y, double *abs_sum);
/* add_gemma_rms_norm: s = x + res (residual_out, unrounded), h = s r (1 + w) */
QK_HIDDEN void qk_check_add_gemma_norm_f64(const double *x, const double *res, const float *w,
                                           int64_t M, int64_t H, double eps, double *h,
                                           double *s);
QK_HIDDEN void qk_check_silu_mul_f64(const double *gu, int64_t M, int64_t I, double *a);
QK_HIDDEN void qk_check_gelu_tanh_f64(const double *x, int64_t n, double *y);
/* The activation quantization of the W8A8 linear (FLOOR, nearest-even, E4M3) of x[M, K]
   in dtype dt, dequantized into xq[M, K] (reference backend, bit-exact by the spec). */
QK_HIDDEN qk_status qk_check_quantized_activations(const void *x, qk_dtype dt, int64_t M,
                                                   int64_t K, double *xq);

/* ---- bounds against the double model (normwise relative error, qk_check_rms_rel) ----
 * A Gemma norm's BF16 output is two roundings (the residual sum, the output) and the rstd
 * of the rounded sum away from the double model: at most 3 * 2^-8 per element. An MXFP8
 * linear perturbs each product w_k x_k by (1 + d)(1 + e) - 1, d and e the relative errors
 * of the two E4M3 roundings: at most 2^-4 with round-to-nearest, 2^-3 for a FLOOR-saturated
 * block maximum, so each has an RMS of at most 2^-3 / sqrt(3) (uniform on [0, 2^-3], the
 * worse case). Errors of different products are uncorrelated (independent roundings, random
 * signs), so the output's error has an RMS of at most sqrt(2) 2^-3 / sqrt(3) = 0.102 times
 * the root-sum-square of its products, which is the output's own RMS: 0.10 for one linear.
 * silu(gate) * up multiplies two such outputs (sqrt(2) 0.10 = 0.14, with silu's gain
 * <= 1.1 on the values that dominate: 0.15); a second linear adds its own 0.10 in
 * quadrature: sqrt(0.15^2 + 0.10^2) = 0.18. gelu's gain is below 1.1 too. */
#define QK_CHECK_BOUND_NORM (3.0 * 0x1.0p-8)
#define QK_CHECK_BOUND_LINEAR 0.10
#define QK_CHECK_BOUND_ACT 0.15
#define QK_CHECK_BOUND_BLOCK 0.18

/* ---- measures ---- */
/* max over rows of max_n |y - ref| / max_n |ref| (a row of zeros in ref counts its max |y|). */
QK_HIDDEN double qk_check_rel_err(const void *y, qk_dtype dt, const double *ref, int64_t M,
                                  int64_t N);
/* The normwise relative error sqrt(sum (y - ref)^2 / sum ref^2) over n elements. */
QK_HIDDEN double qk_check_rms_rel(const void *y, qk_dtype dt, const double *ref, int64_t n);
/* mxfp8.md's bound: the largest |out - exact| / (2^-16 S + ulp(exact)) over the elements
   (<= 1 conforms). NaN in out or exact counts as +inf unless both are NaN. */
QK_HIDDEN double qk_check_mxfp8_bound_ratio(const void *out, qk_dtype dt, const double *exact,
                                            const double *S, int64_t n);
/* norm.md's bound: for F16/BF16, the largest distance in codes between out and the
   correctly rounded exact value (<= 1 conforms); for F32 the largest relative error
   divided by 2^-19. */
QK_HIDDEN double qk_check_norm_bound_ratio(const void *out, qk_dtype dt, const double *exact,
                                           int64_t n);
/* The dtype rounding of a double value, correctly rounded (nearest, ties to even). */
QK_HIDDEN double qk_check_round(double v, qk_dtype dt);
/* Largest |a - b| / max(|b|) over n elements of two tensors of dtype dt. */
QK_HIDDEN double qk_check_max_diff(const void *a, const void *b, qk_dtype dt, int64_t n);

#endif /* QK_QWEN35_CHECK_H */
