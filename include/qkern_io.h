/* qkern I/O — safetensors reading and writing, ModelSlim W8A8_MXFP8 checkpoints and the
 * MXFP8 linear weight life cycle (create, load, post-process, apply) with tensor
 * parallelism. Semi-public: installed beside qkern.h, but outside QK_ABI_VERSION's
 * promise (it may change between minor versions). Semantics: the specification's
 * checkpoint.md. Every failing call returns a non-zero qk_status and sets
 * qk_last_error(); malformed files give QK_ERR_FORMAT with a message naming the file,
 * the tensor and the rule that was broken. */
#ifndef QKERN_IO_H
#define QKERN_IO_H

#include "qkern.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * safetensors: reading
 * ====================================================================================== */

/* An open, fully validated safetensors file. Opening maps the file read-only (mmap) and
 * checks every rule of checkpoint.md before returning: the 8-byte header length (at most
 * 100 MB and inside the file), a JSON object in valid UTF-8 without duplicate keys,
 * entries of exactly {dtype, shape, data_offsets} with known dtypes, non-negative integer
 * dims whose product fits 64 bits, data_offsets agreeing with the element count, tensors
 * tiling the data buffer exactly (no overlap, no hole, up to its end) and string-valued
 * __metadata__. Views point into the mapping: they stay valid until qk_st_close and must
 * not be written to. A qk_st_file is read-only after open and safe to share between
 * threads. If another process truncates the file while it is mapped, reading a view may
 * raise SIGBUS (as with any mmap reader). */
typedef struct qk_st_file qk_st_file;

/* One tensor of a file (or of a set of files). Every pointer in it lives as long as the
 * file. dtype is QK_DTYPE_INVALID for the safetensors dtypes that qk_dtype lacks (BOOL,
 * I16, U16, U32, U64, F64): those are still validated and described here by dtype_name and
 * elem_size, and their bytes are reachable through data. */
typedef struct qk_st_info {
    const char    *name;
    const char    *dtype_name;  /* the safetensors spelling: "BF16", "F8_E4M3", "BOOL", ... */
    qk_dtype       dtype;       /* QK_DTYPE_INVALID where qk_dtype has no equivalent */
    size_t         elem_size;   /* bytes per element (1, 2, 4 or 8) */
    int32_t        ndim;        /* 0 for a scalar; any number of dims is accepted */
    const int64_t *shape;       /* ndim entries */
    uint64_t       numel;       /* product of shape (1 for a scalar) */
    uint64_t       nbytes;      /* numel * elem_size */
    uint64_t       file_offset; /* absolute byte offset of the data in its file */
    const void    *data;        /* zero-copy view; alignment is whatever the file gives */
    const qk_st_file *file;     /* the file that holds it */
} qk_st_info;

/* Opens and validates PATH. QK_ERR_IO when it cannot be opened or mapped, QK_ERR_FORMAT
 * for any rule it breaks. */
QK_API qk_status qk_st_open(const char *path, qk_st_file **f);
/* The same checks over a caller-owned buffer, without copying it: the buffer must stay
 * valid and unchanged until qk_st_close. `label` names the source in messages (may be
 * NULL: "<memory>"). */
QK_API qk_status qk_st_open_memory(const void *buf, size_t n, const char *label,
                                   qk_st_file **f);
/* NULL is ignored. */
QK_API void qk_st_close(qk_st_file *f);

QK_API const char *qk_st_path(const qk_st_file *f);          /* the path or label */
QK_API uint64_t    qk_st_header_size(const qk_st_file *f);   /* N, the JSON length */
QK_API size_t      qk_st_count(const qk_st_file *f);         /* number of tensors */
/* Tensor i, in data order (by data_offsets). QK_ERR_INVALID_ARGUMENT when i is out of
   range. */
QK_API qk_status   qk_st_info_at(const qk_st_file *f, size_t i, qk_st_info *info);
/* Looks a tensor up by name; QK_ERR_INVALID_ARGUMENT (message naming it) when absent. */
QK_API qk_status   qk_st_find(const qk_st_file *f, const char *name, qk_st_info *info);
/* true when the file holds a tensor of that name; sets no error. */
QK_API bool        qk_st_has(const qk_st_file *f, const char *name);
/* A contiguous qk_tensor view of a tensor (no copy). QK_ERR_DTYPE when its dtype has no
 * qk_dtype, QK_ERR_SHAPE when it has more than QK_MAX_DIMS dims. A scalar becomes shape
 * [1]. The view's data is const in spirit: never write through it. */
QK_API qk_status   qk_st_tensor(const qk_st_file *f, const char *name, qk_tensor *view);
/* Same, from an info (e.g. one found through a qk_st_set). */
QK_API qk_status   qk_st_info_tensor(const qk_st_info *info, qk_tensor *view);

/* __metadata__: count, the i-th pair (in header order), and lookup (NULL when absent). */
QK_API size_t      qk_st_metadata_count(const qk_st_file *f);
QK_API qk_status   qk_st_metadata_at(const qk_st_file *f, size_t i, const char **key,
                                     const char **value);
QK_API const char *qk_st_metadata_get(const qk_st_file *f, const char *key);

/* Tells the kernel the pages of a tensor will not be read again soon (a streaming reader
 * calls it after each tensor so that memory stays near one tensor). Views stay valid:
 * reading them again maps the pages back in. No-op for qk_st_open_memory files. */
QK_API void        qk_st_release_pages(const qk_st_file *f, const qk_st_info *info);

/* Byte size of a safetensors dtype name, 0 for an unknown one; and its qk_dtype
 * (QK_DTYPE_INVALID when none). */
QK_API size_t   qk_st_dtype_size(const char *dtype_name);
QK_API qk_dtype qk_st_dtype_of(const char *dtype_name);

/* ======================================================================================
 * safetensors: a checkpoint of one or more files
 * ====================================================================================== */

/* A set of safetensors files seen as one checkpoint: a single file, or the shards an
 * index JSON ({"weight_map": {tensor: file}}) names. Shard file names must be plain names
 * in the index's folder ("../x", "/abs" or "a/b" are always QK_ERR_FORMAT), and a shard (or
 * the index or file found when PATH is a folder) that is a symlink resolving outside that
 * folder is QK_ERR_FORMAT naming the shard, where it resolves and the opt-in, unless
 * QK_ST_SET_ALLOW_EXTERNAL_SHARDS is given. The index and the shards are cross-checked: a
 * file the index names must exist (QK_ERR_FORMAT otherwise), every tensor the index maps must be in the
 * file it names, every tensor of a shard must be in the index pointing at that shard, and
 * no name may appear in two shards. */
typedef struct qk_st_set qk_st_set;

enum {
    /* Cross-check findings (index entries without tensors and the reverse) are recorded as
       problems instead of failing the open. Unreadable or invalid files still fail. */
    QK_ST_SET_LENIENT = 1u << 0,
    /* Follow shard symlinks out of the folder (a Hugging Face cache snapshot links every file
       into ../../blobs). Plain names are still required. */
    QK_ST_SET_ALLOW_EXTERNAL_SHARDS = 1u << 1,
};

/* PATH is a .safetensors file, an index .json, or a folder holding exactly one of:
 * an index (*.safetensors.index.json) or a single *.safetensors file. */
QK_API qk_status qk_st_set_open(const char *path, unsigned flags, qk_st_set **s);
QK_API void      qk_st_set_close(qk_st_set *s);
QK_API size_t    qk_st_set_file_count(const qk_st_set *s);
QK_API const qk_st_file *qk_st_set_file(const qk_st_set *s, size_t i);
QK_API const char *qk_st_set_index_path(const qk_st_set *s);  /* NULL for a single file */
QK_API size_t    qk_st_set_count(const qk_st_set *s);         /* tensors in all files */
/* Tensor i over all files (file by file, each in data order). */
QK_API qk_status qk_st_set_info_at(const qk_st_set *s, size_t i, qk_st_info *info);
QK_API qk_status qk_st_set_find(const qk_st_set *s, const char *name, qk_st_info *info);
QK_API size_t    qk_st_set_problem_count(const qk_st_set *s);
QK_API const char *qk_st_set_problem(const qk_st_set *s, size_t i);

/* ======================================================================================
 * safetensors: writing
 * ====================================================================================== */

/* A writer declares every tensor first (name, dtype, shape), then receives their bytes
 * (in any order, each tensor's bytes in order, in one or more pieces), then commits.
 * Layout: the JSON header is padded with spaces so that the data buffer starts at a
 * multiple of 8; tensors are laid out by element size, largest first (ties in declaration
 * order), so that every tensor's data is aligned to its element size; the header lists
 * __metadata__ first, then the tensors in layout order. Bytes go to a temporary file in
 * the destination folder (".NAME.tmp.XXXXXX") which commit flushes and renames onto PATH:
 * an interrupted write never leaves a truncated file under PATH. The writer never
 * replaces a file that is open in this process through qk_st_open (its input), and
 * replaces any other existing file only with QK_ST_WRITE_REPLACE. */
typedef struct qk_st_writer qk_st_writer;

enum {
    QK_ST_WRITE_REPLACE = 1u << 0,  /* an existing PATH (not an open input) may be replaced */
};

QK_API qk_status qk_st_writer_create(const char *path, unsigned flags, qk_st_writer **w);
QK_API qk_status qk_st_writer_set_metadata(qk_st_writer *w, const char *key,
                                           const char *value);
/* Declares a tensor. dtype_name is any safetensors dtype; shape has ndim (0..64) entries.
 * When data is not NULL it is the tensor's full contents (nbytes of shape x dtype); it is
 * not copied: it must stay valid until commit, which writes it. Declaring after the first
 * qk_st_writer_write is QK_ERR_INVALID_ARGUMENT. */
QK_API qk_status qk_st_writer_declare(qk_st_writer *w, const char *name,
                                      const char *dtype_name, int32_t ndim,
                                      const int64_t *shape, const void *data);
/* Declares a tensor from a qk_tensor (copied at commit; must be contiguous). */
QK_API qk_status qk_st_writer_add_tensor(qk_st_writer *w, const char *name,
                                         const qk_tensor *t);
/* Appends n bytes to the declared tensor `name` (which must not have been given data at
 * declaration). The first call creates the temporary file and writes the header. */
QK_API qk_status qk_st_writer_write(qk_st_writer *w, const char *name, const void *data,
                                    size_t n);
/* Writes what remains, checks every tensor is complete, flushes and renames onto PATH. */
QK_API qk_status qk_st_writer_commit(qk_st_writer *w);
/* Frees the writer; an uncommitted temporary file is removed. NULL is ignored. */
QK_API void      qk_st_writer_destroy(qk_st_writer *w);

/* Writes a small file (e.g. a JSON document) atomically with the same rules. */
QK_API qk_status qk_write_file_atomic(const char *path, const void *data, size_t n,
                                      unsigned flags);

/* ======================================================================================
 * ModelSlim W8A8_MXFP8 checkpoints
 * ====================================================================================== */

/* quant_model_description.json: "model_quant_type", "version", "group_size", "metadata",
 * "optional", and one entry per tensor mapping its name to a quantization type string
 * ("W8A8_MXFP8", "FLOAT", ...). */
typedef struct qk_ms_desc qk_ms_desc;

QK_API qk_status qk_ms_desc_parse(const void *json, size_t n, const char *label,
                                  qk_ms_desc **d);
QK_API qk_status qk_ms_desc_load(const char *path, qk_ms_desc **d);
QK_API void      qk_ms_desc_free(qk_ms_desc *d);
QK_API const char *qk_ms_desc_quant_type(const qk_ms_desc *d);  /* "W8A8_MXFP8" */
QK_API const char *qk_ms_desc_version(const qk_ms_desc *d);     /* "1.0.0" */
QK_API int64_t   qk_ms_desc_group_size(const qk_ms_desc *d);    /* 32; 0 when absent */
QK_API size_t    qk_ms_desc_count(const qk_ms_desc *d);         /* tensor entries */
QK_API qk_status qk_ms_desc_entry(const qk_ms_desc *d, size_t i, const char **name,
                                  const char **qtype);
/* The quantization type of a tensor, NULL when the description has no entry for it. */
QK_API const char *qk_ms_desc_lookup(const qk_ms_desc *d, const char *name);

/* A ModelSlim folder: the description plus quant_model_weights.safetensors or its shards
 * with quant_model_weights.safetensors.index.json. Open cross-checks the description and
 * the tensors both ways (an entry without a tensor, a tensor without an entry). Every file it
 * reads (description, index, weights, shards) must resolve inside DIR unless
 * QK_MS_ALLOW_EXTERNAL_SHARDS is given (see qk_st_set_open). */
typedef struct qk_ms_model qk_ms_model;

enum {
    /* Record cross-check findings as problems instead of failing the open. */
    QK_MS_LENIENT = 1u << 0,
    /* Follow symlinks out of the folder (QK_ST_SET_ALLOW_EXTERNAL_SHARDS for its files). */
    QK_MS_ALLOW_EXTERNAL_SHARDS = 1u << 1,
};

QK_API qk_status qk_ms_open(const char *dir, unsigned flags, qk_ms_model **m);
QK_API void      qk_ms_close(qk_ms_model *m);
QK_API const qk_ms_desc *qk_ms_description(const qk_ms_model *m);
QK_API const qk_st_set  *qk_ms_tensors(const qk_ms_model *m);
QK_API size_t    qk_ms_problem_count(const qk_ms_model *m);
QK_API const char *qk_ms_problem(const qk_ms_model *m, size_t i);

/* ======================================================================================
 * The MXFP8 linear weight life cycle (checkpoint.md), with tensor parallelism
 * ====================================================================================== */

typedef enum qk_tp_kind {
    QK_TP_NONE = 0,     /* the whole weight */
    QK_TP_COLUMN,       /* split N: rank r takes rows [r*N/tp, (r+1)*N/tp); N % tp == 0 */
    QK_TP_ROW,          /* split K on 32-element block boundaries */
} qk_tp_kind;

typedef enum qk_tp_policy {
    QK_TP_EVEN = 0,         /* K/tp per rank; an error unless it is a multiple of 32 */
    QK_TP_BLOCK_ALIGNED,    /* rank r: blocks [r*B, min((r+1)*B, kb)), B = ceil(kb/tp) */
    /* SGLang 0.5.23's row-parallel split: K/tp columns per rank (K % tp == 0); a 32-block that
       straddles two ranks is kept by both (each holds its scale byte), and each rank's weight
       and activation are zero-padded to whole blocks: the rank's first column sits pad =
       k0 % 32 columns into its first block. The ranks' partial sums add up to the unsharded
       output where each rank's part of a shared block has that block's amax. */
    QK_TP_SHARED_BLOCK,
} qk_tp_policy;

typedef struct qk_tp {
    qk_tp_kind   kind;
    qk_tp_policy policy;    /* row-parallel only */
    int32_t      rank, size;
} qk_tp;

/* The part of a weight [N, K] that a rank holds: rows [n0, n0 + n), columns [k0, k0 + k),
 * scale blocks [kb0, kb0 + kb). pad (QK_TP_SHARED_BLOCK only, else 0): zero columns before
 * column k0, so that the rank's weight placeholder is [n, pad + k] and its activation
 * [..., k] is zero-padded the same way before the linear. */
typedef struct qk_tp_part {
    int64_t n0, n, k0, k, kb0, kb;
    int64_t pad;
} qk_tp_part;

/* Computes a rank's part (tp NULL or QK_TP_NONE: everything). QK_ERR_SHAPE with a clear
 * message when N does not divide evenly (column), when an even row split breaks a block
 * (the message names the block-aligned split), or when a rank is left with no block;
 * QK_ERR_INVALID_ARGUMENT for a bad rank/size/kind/policy. */
QK_API qk_status qk_tp_partition(int64_t N, int64_t K, const qk_tp *tp, qk_tp_part *part);

typedef struct qk_mx_linear qk_mx_linear;

enum {
    /* process_weights_after_loading also builds the [N, ceil(kb/2), 2] scale pair layout
       (qk_mx_pack_scale_pairs, odd kb padded with 0x00). */
    QK_MX_LINEAR_PAIR_SCALES = 1u << 0,
};

/* create_weights: placeholders for the rank's part of a linear with full input size K and
 * output size N: weight [n, k] (F8_E4M3), weight_scale [n, ceil(k/32)] (E8M0 bytes, every
 * byte 0xFF = "not loaded") and, when has_bias, bias F32 (column-parallel: the rank's [n]
 * rows; otherwise the full [N], applied by rank 0 only under row parallelism). `prefix` is
 * the checkpoint prefix ("model.visual.blocks.0.mlp.linear_fc2"). */
QK_API qk_status qk_mx_linear_create_weights(const char *prefix, int64_t K, int64_t N,
                                             bool has_bias, const qk_tp *tp,
                                             qk_mx_linear **l);
QK_API void      qk_mx_linear_destroy(qk_mx_linear *l);
QK_API const qk_tp_part *qk_mx_linear_part(const qk_mx_linear *l);

/* load: copies one checkpoint tensor, given in full (unsharded), into its placeholder.
 * `name` is "<prefix>.weight", "<prefix>.weight_scale" or "<prefix>.bias"
 * (QK_ERR_INVALID_ARGUMENT otherwise). Before any byte is copied the tensor is checked:
 * dtype first (weight F8_E4M3; weight_scale U8 or F8_E8M0; bias F32), then shape against
 * the full [N, K] / [N, ceil(K/32)] / [N]; a mismatch is QK_ERR_FORMAT naming the tensor,
 * what it has and what is needed. A weight_scale with floor(K/32) columns where
 * ceil(K/32) are needed gets its own message (the exporter dropped the partial last block;
 * the checkpoint must be re-exported). The source may have any strides. */
QK_API qk_status qk_mx_linear_load(qk_mx_linear *l, const char *name, const qk_tensor *t);
/* The checks load applies, without copying: a checkpoint tensor `name` (by its suffix:
 * .weight, .weight_scale or .bias) with that safetensors dtype and shape, against a full
 * linear of input size K and output size N. QK_OK, or QK_ERR_FORMAT with load's message;
 * QK_ERR_INVALID_ARGUMENT for another suffix. */
QK_API qk_status qk_mx_linear_check_tensor(const char *name, const char *dtype_name,
                                           int32_t ndim, const int64_t *shape, int64_t N,
                                           int64_t K);
/* load from a checkpoint: looks `name` up in the set; dtypes qk_dtype lacks are reported
 * by their safetensors name. */
QK_API qk_status qk_mx_linear_load_from(qk_mx_linear *l, const qk_st_set *s,
                                        const char *name);
/* Loads <prefix>.weight, .weight_scale and (when has_bias) .bias from the set. */
QK_API qk_status qk_mx_linear_load_all(qk_mx_linear *l, const qk_st_set *s);

/* The raw placeholders (for tests and inspection), before post-processing: which is
 * "weight", "weight_scale" or "bias". QK_ERR_INVALID_ARGUMENT once released or absent. */
QK_API qk_status qk_mx_linear_placeholder(const qk_mx_linear *l, const char *which,
                                          qk_tensor *view);

/* process_weights_after_loading: a weight or bias never loaded, or any 0xFF scale byte
 * left, is QK_ERR_FORMAT naming the tensor and (for scales) the first (row, block), in the
 * rank's and in the checkpoint's coordinates. Then qk_mx_weight_create prepares the
 * weight (its errors are passed on), the pair layout is built when asked for, and the raw
 * placeholders are released. On failure nothing changes and the call may be repeated. */
QK_API qk_status qk_mx_linear_process_weights_after_loading(qk_mx_linear *l, unsigned flags);
QK_API const qk_mx_weight *qk_mx_linear_weight(const qk_mx_linear *l); /* NULL before */
/* The [n, ceil(kb/2), 2] pair layout (QK_MX_LINEAR_PAIR_SCALES), else
   QK_ERR_INVALID_ARGUMENT. */
QK_API qk_status qk_mx_linear_scale_pairs(const qk_mx_linear *l, qk_tensor *view);
/* apply: out [..., n] = the W8A8 linear of x [..., k] (mxfp8.md) plus the bias where this
 * rank adds it. Under row parallelism each rank's out is a partial sum; the caller sums
 * them (all-reduce). */
QK_API qk_status qk_mx_linear_apply(const qk_mx_linear *l, const qk_tensor *x,
                                    qk_tensor *out);

#ifdef __cplusplus
}
#endif
#endif /* QKERN_IO_H */
