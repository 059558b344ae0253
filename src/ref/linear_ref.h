/* Reference MXFP8 W8A8 linear (mxfp8.md, "The W8A8 linear"): the formula in portable C,
 * plus the pieces every provider shares: the activation quantizer a provider uses and
 * the per-call activation buffer (codes and scales of x, quantized per row). */
#ifndef QK_LINEAR_REF_H
#define QK_LINEAR_REF_H

#include "internal.h"

/* The reference provider: prepared layout = q [N, K] and scale [N, kb], contiguous. */
QK_HIDDEN extern const qk_linear_impl qk_linear_ref;

/* x's rows quantized for one call, bit for bit as qk_mx_quantize with default options
   (E4M3, FLOOR, NEAREST_EVEN): row m's codes at q + m*qstride (K real codes, then zeros
   up to qstride), its kb scale bytes at scale + m*sstride (then zeros up to sstride). */
typedef struct qk_linear_act {
    int64_t M, K, kb, qstride, sstride;
    uint8_t *q, *scale;
    void *mem;
} qk_linear_act;

/* Quantizes every row of c's x with quant (a qk_mx_quantize_row_fn of the provider's
   set, or the reference one when NULL), rows split over threads. Strides are rounded up
   to multiples of qalign / salign (powers of two, >= 1). QK_ERR_NOMEM on failure. */
QK_HIDDEN qk_status qk_linear_act_quantize(const qk_linear_call *c, qk_mx_quantize_row_fn quant,
                                           int64_t qalign, int64_t salign, qk_linear_act *a);
/* The two halves of qk_linear_act_quantize, for a provider that quantizes rows inside its
   own pass over them: alloc sets up a (nothing quantized; QK_ERR_NOMEM on failure), rows
   quantizes rows [m0, m1) of x into it (quant as above, not NULL). */
QK_HIDDEN qk_status qk_linear_act_alloc(const qk_linear_call *c, int64_t qalign, int64_t salign,
                                        qk_linear_act *a);
QK_HIDDEN void qk_linear_act_rows(const qk_linear_call *c, qk_mx_quantize_row_fn quant,
                                  const qk_linear_act *a, int64_t m0, int64_t m1);
QK_HIDDEN void qk_linear_act_free(qk_linear_act *a);

/* Work sharing over [0, groups) through the shared counter *next (0 at the start): a thread
   takes the run [*b, *e), the groups left over 4 x threads (at least one), and false when none
   is left. The runs shrink towards the end, so the threads finish within about one group of
   each other, and a thread the OS preempts holds up only its current run. */
QK_HIDDEN bool qk_linear_take_groups(int64_t *next, int64_t groups, int64_t threads, int64_t *b,
                                     int64_t *e);

/* A call's scratch: 64-byte aligned (NULL on failure); released buffers are cached for the
   next call (up to 16 buffers, 512 MiB), so a serving loop does not fault pages every call. */
QK_HIDDEN void *qk_linear_alloc(size_t bytes);
QK_HIDDEN void qk_linear_free(void *p);
/* A prepared weight: 64-byte aligned, or 2 MiB aligned and advised to use huge pages when
   large (streams through the weight then cross no 4 KiB page boundaries). */
QK_HIDDEN void *qk_linear_alloc_weights(size_t bytes);
QK_HIDDEN void qk_linear_free_weights(void *p);

#endif
