/* Internal contracts of src/io: the parsed safetensors file, the index parser, message
 * lists, the registry of open inputs the writer must never replace, atomic file placement.
 * Not installed. */
#ifndef QK_IO_INTERNAL_H
#define QK_IO_INTERNAL_H

#include "internal.h"
#include "api/ckd.h"
#include "qkern_io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The activation a linear's rank part takes: x itself, or (QK_TP_SHARED_BLOCK with pad > 0)
   a zero-padded contiguous copy [..., pad + k] in *buf (free it after the call). */
QK_HIDDEN qk_status qk_mx_linear_pad_input(const qk_mx_linear *l, const qk_tensor *x,
                                           qk_tensor *xp, void **buf);

/* Names in messages are cut to this many bytes so that the rule always fits. */
#define QK_NAME_FMT "\"%.160s\""

#define QK_ST_MAX_HEADER 100000000ull   /* 100 MB, as the reference implementation */
#define QK_ST_MAX_DIMS_WRITE 64

/* ---- dtypes ---- */
typedef struct qk_st_dtype_desc {
    const char *name;
    size_t size;
    qk_dtype dtype;
} qk_st_dtype_desc;
QK_HIDDEN const qk_st_dtype_desc *qk_st_dtype_lookup(const char *name);

/* ---- a parsed file ---- */
typedef struct qk_st_rec {
    char *name;
    const qk_st_dtype_desc *dt;
    int32_t ndim;
    int64_t *shape;                 /* ndim entries (NULL when ndim == 0) */
    uint64_t numel, nbytes;
    uint64_t begin, end;            /* relative to the data buffer */
} qk_st_rec;

struct qk_st_file {
    char *path;
    const uint8_t *base;            /* whole file (mapped or caller memory) */
    size_t size;
    bool mapped;
    dev_t dev;
    ino_t ino;
    uint64_t header_n;              /* N */
    const uint8_t *data;            /* base + 8 + N */
    size_t ntensors;
    qk_st_rec *t;                   /* in data order */
    size_t *by_name;                /* indices into t sorted by name */
    size_t nmeta;
    char **meta_key, **meta_val;
};

QK_HIDDEN void qk_st_fill_info(const qk_st_file *f, size_t i, qk_st_info *info);
/* Index of a tensor in f->t, or -1. */
QK_HIDDEN long qk_st_lookup(const qk_st_file *f, const char *name);

/* ---- growable list of messages (problems found) ---- */
typedef struct qk_msgs {
    char **v;
    size_t n, cap;
} qk_msgs;
QK_HIDDEN void qk_msgs_add(qk_msgs *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
QK_HIDDEN void qk_msgs_free(qk_msgs *m);

/* ---- index JSON ({"weight_map": {tensor: file}}) ---- */
typedef struct qk_st_index {
    size_t n;
    char **name, **file;            /* in the JSON's order */
} qk_st_index;
QK_HIDDEN qk_status qk_st_index_parse(const void *json, size_t n, const char *label,
                                      qk_st_index *idx);
QK_HIDDEN void qk_st_index_free(qk_st_index *idx);

/* ---- files ---- */
/* Reads a whole small file (at most max bytes) into a malloc'd buffer. */
QK_HIDDEN qk_status qk_io_read_small(const char *path, size_t max, char **buf, size_t *n);
/* Opens PATH for reading only when it is a regular file (a FIFO, device, socket or folder is
   QK_ERR_IO naming what it is, without blocking); "permission denied" says so. */
QK_HIDDEN qk_status qk_io_open_regular(const char *who, const char *path, int *fd, struct stat *st);
QK_HIDDEN const char *qk_io_file_kind(mode_t m);
/* The registry of files open through qk_st_open (the inputs a writer must not replace). */
QK_HIDDEN void qk_io_register_input(dev_t dev, ino_t ino);
QK_HIDDEN void qk_io_unregister_input(dev_t dev, ino_t ino);
QK_HIDDEN bool qk_io_is_open_input(dev_t dev, ino_t ino);
/* Checks that PATH may be written under the writer rules (not an open input; not
   existing unless QK_ST_WRITE_REPLACE). `who` prefixes the message. */
QK_HIDDEN qk_status qk_io_check_dest(const char *who, const char *path, unsigned flags);
/* Creates a temporary file beside PATH; *tmp is malloc'd. */
QK_HIDDEN qk_status qk_io_tmp_create(const char *who, const char *path, char **tmp, int *fd);
/* Flushes fd, closes it and moves tmp onto path (the writer rules). On failure tmp is
   removed. fd is closed in every case. */
QK_HIDDEN qk_status qk_io_place(const char *who, int fd, const char *tmp, const char *path,
                                unsigned flags);
/* Writes all n bytes at offset off (path: the file being written, for the message). */
QK_HIDDEN qk_status qk_io_pwrite_all(const char *who, const char *path, int fd, const void *buf,
                                     size_t n, uint64_t off);

/* "a/b/c.json" -> "a/b" ("." when no slash); malloc'd. */
QK_HIDDEN char *qk_io_dirname(const char *path);
/* dir + "/" + name, malloc'd. */
QK_HIDDEN char *qk_io_join(const char *dir, const char *name);
QK_HIDDEN char *qk_io_strdup(const char *s);
/* Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF); returns the offset of the
   first bad byte, or n when valid. */
QK_HIDDEN size_t qk_utf8_check(const uint8_t *s, size_t n);
/* Checks that PATH, a file the loader reads from the model folder DIR (a shard an index
   names, the index or weights found in a folder), resolves inside DIR once symlinks are
   followed; WHAT names it in the message ("shard", "weights file", ...). Lexical escapes
   never reach here (names are plain). With allow_external the check is skipped. On success
   *real (malloc'd, may be NULL when skipped) is the resolved path, for qk_io_same_file. */
QK_HIDDEN qk_status qk_io_check_inside(const char *who, const char *dir, const char *path,
                                       const char *what, bool allow_external, char **real);
/* After opening a checked file: the open file is still the one the check resolved (a link
   swapped in between is QK_ERR_IO). real NULL: nothing to compare. */
QK_HIDDEN qk_status qk_io_same_file(const char *who, const char *path, const char *real,
                                    dev_t dev, ino_t ino);

#endif /* QK_IO_INTERNAL_H */
