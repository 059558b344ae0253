/* Internal contracts of src/serve: the registry's view of a backend (what it runs for each
 * op), the loaded provider library, the multi-backend MXFP8 weight, and the helpers the
 * layers share. Not installed. The serving layer sits on the stable API (and on the
 * providers' tables through qk_norm_run / qk_mx_weight_create_with); it never looks at
 * the CPU. */
#ifndef QK_SERVE_INTERNAL_H
#define QK_SERVE_INTERNAL_H

#include "internal.h"
#include "qkern_io.h"
#include "qkern_serve.h"

#define QK_BACKEND_BIT(b) (1u << (unsigned)(b))

/* ---- registry ---- */
/* qk_serve_init for the calls that run it implicitly: an error of the environment is
   printed once on stderr unless qk_serve_init already returned it. */
QK_HIDDEN void qk_serve_init_implicit(void);
/* The provider library loaded now, or NULL. */
QK_HIDDEN const qk_provider_info *qk_serve_lib(void);
/* Weights prepared by the library hold a reference so that it cannot be unloaded. */
QK_HIDDEN void qk_serve_lib_ref(int delta);
/* The stable-API op name behind a serving op (for qk_provider()): "mx_quantize" for
   mxfp8_quantize, the same name otherwise. */
QK_HIDDEN const char *qk_serve_api_op_name(qk_serve_op op);
/* The norm kind of a norm op; QK_NORM_KINDS for the MXFP8 ops. */
QK_HIDDEN qk_norm_kind qk_serve_norm_kind(qk_serve_op op);
/* The libqkern linear implementation of TARGET or REFERENCE (NULL otherwise). */
QK_HIDDEN const qk_linear_impl *qk_serve_linear_impl(qk_backend b);
/* Whether a backend's Gemma kernel prefers a precomputed f32 shifted weight (1 + w).
   No provider does today: they all run a native (1 + w) kernel. */
QK_HIDDEN bool qk_serve_prefers_shifted(qk_backend b, qk_serve_op op);
/* The loader (provider_lib.c) without the implicit environment read (registry.c calls it
   from that read). */
QK_HIDDEN qk_status qk_serve_provider_load_path(const char *path);
/* Copies the library's message for a failed call into qk_last_error(). */
QK_HIDDEN qk_status qk_serve_lib_fail(qk_status st, const char *what);

/* ---- the multi-backend weight ---- */
struct qk_serve_weight {
    int64_t N, K;
    qk_mx_weight *h[QK_BACKEND_COUNT];   /* per backend; TARGET/REFERENCE may share one */
    bool owned[QK_BACKEND_COUNT];        /* false: borrowed (e.g. the io linear's) */
};
/* Creates a weight with no handle yet (N, K set). */
QK_HIDDEN qk_serve_weight *qk_serve_weight_new(int64_t N, int64_t K);
/* Prepares q/scale for each backend of `mask` not present yet. On failure the weight is
   as before. */
QK_HIDDEN qk_status qk_serve_weight_prepare(qk_serve_weight *w, const qk_tensor *q,
                                            const qk_tensor *scale, unsigned mask);
/* Adds a borrowed handle for b (not destroyed with w). */
QK_HIDDEN void qk_serve_weight_borrow(qk_serve_weight *w, qk_backend b, qk_mx_weight *h);
/* The mask of backends that implement mxfp8_linear. */
QK_HIDDEN unsigned qk_serve_linear_backends(void);

/* ---- small helpers shared by the layer files ---- */
QK_HIDDEN char *qk_serve_strdup(const char *s);
/* "<prefix><suffix>", malloc'd. */
QK_HIDDEN char *qk_serve_join(const char *prefix, const char *suffix);
/* Forgets the current thread's message (a successful call leaves none). */
QK_HIDDEN void qk_serve_ok(void);

/* MXFP8 layer internals used by the blocks: checks that would make process fail, without
   changing anything (QK_OK, or the error process_weights_after_loading would give). */
QK_HIDDEN qk_status qk_mxfp8_linear_layer_precheck(qk_mxfp8_linear_layer *l);
/* load_from's checks (the tensor is there, dtype, shape) without copying. */
QK_HIDDEN qk_status qk_norm_layer_check_from(const qk_norm_layer *l, const qk_st_set *s);

#endif /* QK_SERVE_INTERNAL_H */
