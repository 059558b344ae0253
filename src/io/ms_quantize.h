/* qk_modelslim_quantize: checkpoint -> servable ModelSlim W8A8_MXFP8 folder (ms_quantize.c).
 * Internal to the library and its tool (`qk quantize`, `qk demo`); not installed. */
#ifndef QK_IO_MS_QUANTIZE_H
#define QK_IO_MS_QUANTIZE_H

#include "qkern.h"

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct qk_ms_quantize_options {
    qk_mx_options mx;            /* the elements' scale rule and rounding (msModelSlim: the
                                    modelslim rule, nearest-away) */
    uint64_t shard_size;         /* the largest output shard, in bytes */
    /* which linear weights are quantized: those matching an include (none given: every
       linear weight but lm_head), less those matching an exclude (POSIX extended) */
    const regex_t *include, *exclude;
    int ninclude, nexclude;
    bool force;                  /* replace existing output files (never the input) */
    bool allow_nonfinite;        /* quantize weights holding NaN/Inf (refused otherwise) */
    bool allow_external_shards;  /* follow input shards linking out of IN's folder, as in a
                                    Hugging Face cache snapshot (QK_ST_SET_ALLOW_EXTERNAL_SHARDS;
                                    refused otherwise) */
    bool progress;               /* draw a progress bar on stderr */
} qk_ms_quantize_options;

/* msModelSlim's defaults: modelslim scale rule, nearest-away, 4 GB shards, no selection. */
__attribute__((visibility("hidden"))) qk_ms_quantize_options qk_ms_quantize_defaults(void);

typedef struct qk_ms_quantize_report {
    size_t quantized, kept, files;   /* linear weights quantized, tensors kept FLOAT, shards */
} qk_ms_quantize_report;

/* Writes OUT (created if missing) from IN. On failure: a status, qk_last_error() naming the
   tensor or file and what is wrong, and nothing left in OUT that a loader would accept. */
__attribute__((visibility("hidden"))) qk_status
qk_modelslim_quantize(const char *in, const char *out, const qk_ms_quantize_options *opt,
                      qk_ms_quantize_report *rep);

#endif
