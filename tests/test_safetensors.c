/* safetensors reading and writing (checkpoint.md, "safetensors"): every corpus file gives
 * exactly its expected status and message, from a mapped file and from memory; accepted
 * files expose in-bounds views; truncations and byte flips of a valid file never crash;
 * the writer matches a hand-built file byte for byte, round-trips (write -> read ->
 * write gives identical bytes), aligns, and never replaces an input or leaves a partial
 * file; sets of shards and their index. */
#include "io_test_util.h"

#include "harness.h"
#include "qkern_io.h"

#include <stdint.h>

static char scratch[512];

static qk_status status_of(const char *name)
{
    for (int s = 0; s <= QK_ERR_FORMAT; s++)
        if (!strcmp(qk_status_name((qk_status)s), name)) return (qk_status)s;
    return (qk_status)-1;
}

/* Reads every byte of every view (ASan catches a view outside the file). */
static unsigned touch_views(const qk_st_file *f)
{
    unsigned acc = 0;
    for (size_t i = 0; i < qk_st_count(f); i++) {
        qk_st_info info;
        if (qk_st_info_at(f, i, &info) != QK_OK) return 0xdead;
        const unsigned char *p = info.data;
        for (uint64_t k = 0; k < info.nbytes; k++) acc += p[k];
    }
    return acc;
}

/* ---- the corpus ---- */
static void test_corpus_open_and_set(void)
{
    corpus_case *cs;
    size_t n = corpus_load(&cs);
    CHECK(n >= 30, "the manifest lists %zu cases", n);
    size_t files = 0;
    for (size_t i = 0; i < n; i++) {
        const corpus_case *c = &cs[i];
        bool is_open = !strcmp(c->check, "open"), ext = !strcmp(c->check, "set_ext");
        bool is_set = !strcmp(c->check, "set") || ext;
        if (!is_open && !is_set) continue;
        char path[512];
        corpus_path(c, path, sizeof path);
        qk_status want = status_of(c->expect);
        if (is_open) {
            files++;
            qk_st_file *f = NULL;
            qk_status st = qk_st_open(path, &f);
            CHECK(st == want, "%s: %s, expected %s (%s)", c->path, qk_status_name(st), c->expect, qk_last_error());
            CHECK(strstr(qk_last_error(), c->substring) != NULL, "%s: message \"%s\" lacks \"%s\"", c->path,
                  qk_last_error(), c->substring);
            if (st != QK_OK) CHECK(f == NULL, "%s: a failed open returned a file", c->path);
            if (st == QK_OK) {
                (void)touch_views(f);
                qk_st_close(f);
            } else {
                CHECK(strstr(qk_last_error(), "rule") != NULL || strstr(qk_last_error(), "JSON") != NULL,
                      "%s: the message names no rule: %s", c->path, qk_last_error());
            }
            /* the same bytes from memory, in a buffer of exactly their size */
            size_t len;
            unsigned char *buf = read_all(path, &len);
            CHECK(buf != NULL, "%s: unreadable", c->path);
            if (buf) {
                qk_st_file *m = NULL;
                qk_status sm = qk_st_open_memory(len ? buf : NULL, len, path, &m);
                CHECK(sm == want, "%s from memory: %s (%s)", c->path, qk_status_name(sm), qk_last_error());
                CHECK(strstr(qk_last_error(), c->substring) != NULL, "%s from memory: \"%s\" lacks \"%s\"",
                      c->path, qk_last_error(), c->substring);
                if (sm == QK_OK) {
                    (void)touch_views(m);
                    qk_st_close(m);
                }
                free(buf);
            }
        } else {
            qk_st_set *s = NULL;
            qk_status st = qk_st_set_open(path, ext ? QK_ST_SET_ALLOW_EXTERNAL_SHARDS : 0, &s);
            CHECK(st == want, "%s (set): %s, expected %s (%s)", c->path, qk_status_name(st), c->expect,
                  qk_last_error());
            CHECK(strstr(qk_last_error(), c->substring) != NULL, "%s (%s): \"%s\" lacks \"%s\"", c->path,
                  c->check, qk_last_error(), c->substring);
            CHECK(st == QK_OK || s == NULL, "%s (%s): a failed open returned a set", c->path, c->check);
            if (st == QK_OK) {
                /* every view of every shard is readable (ASan: inside its mapping) */
                for (size_t f = 0; f < qk_st_set_file_count(s); f++) (void)touch_views(qk_st_set_file(s, f));
            }
            qk_st_set_close(s);
        }
    }
    CHECK(files >= 30, "only %zu single-file corpus cases", files);
    free(cs);
}

/* Every reject rule of the safetensors section has at least one corpus case. */
static void test_corpus_covers_every_rule(void)
{
    static const char *const rules[] = {
        "shorter than 8", "exceeds the 100 MB limit", "is larger than the", "not valid UTF-8",
        "not valid JSON", "not an object", "duplicate key", "missing \"", "unexpected key",
        "is not a JSON string", "unknown dtype", "of shape is -", "of shape is not an integer",
        "overflows 64 bits", "needs 8", "has begin > end", "inside tensor", "hole of",
        "follow the last tensor", "run past the end", "metadata value for key", "data_offsets is not",
    };
    corpus_case *cs;
    size_t n = corpus_load(&cs);
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = !strcmp(cs[i].check, "open") && strstr(cs[i].substring, rules[r]);
        CHECK(found, "no corpus case for the rule \"%s\"", rules[r]);
    }
    free(cs);
}

/* ---- robustness: every truncation and many byte flips of a valid file ---- */
static void test_truncations_and_flips_never_crash(void)
{
    size_t len;
    unsigned char *good = read_all(CORPUS_DIR "/ok_zero_size.safetensors", &len);
    CHECK(good != NULL, "missing ok_zero_size.safetensors");
    if (!good) return;
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *b = malloc(cut ? cut : 1);
        memcpy(b, good, cut);
        qk_st_file *f = NULL;
        qk_status st = qk_st_open_memory(cut ? b : NULL, cut, "cut", &f);
        CHECK(st == QK_ERR_FORMAT, "truncated to %zu bytes: %s", cut, qk_status_name(st));
        qk_st_close(f);
        free(b);
    }
    uint64_t seed = 12345;
    unsigned char *b = malloc(len);
    for (size_t pos = 0; pos < len; pos++) {
        for (int rep = 0; rep < 3; rep++) {
            memcpy(b, good, len);
            b[pos] ^= (unsigned char)(1u << (qk_rand_u64(&seed) % 8));
            qk_st_file *f = NULL;
            qk_status st = qk_st_open_memory(b, len, "flip", &f);
            CHECK(st == QK_OK || st == QK_ERR_FORMAT, "flip at %zu: %s", pos, qk_status_name(st));
            if (st == QK_OK) {
                (void)touch_views(f);
                qk_st_close(f);
            }
        }
    }
    free(b);
    free(good);
}

/* ---- views and metadata of a valid file ---- */
static void test_views_and_metadata(void)
{
    qk_st_file *f = NULL;
    qk_status st = qk_st_open(CORPUS_DIR "/ok_zero_size.safetensors", &f);
    CHECK(st == QK_OK, "%s", qk_last_error());
    if (st) return;
    CHECK(qk_st_count(f) == 5, "count %zu", qk_st_count(f));
    qk_st_info info;
    CHECK(qk_st_find(f, "a", &info) == QK_OK && info.nbytes == 4 && info.ndim == 1, "a");
    const unsigned char *p = info.data;
    CHECK(p[0] == 1 && p[3] == 4, "a's bytes");
    CHECK(qk_st_find(f, "s", &info) == QK_OK && info.ndim == 0 && info.numel == 1, "scalar");
    qk_tensor t;
    CHECK(qk_st_tensor(f, "s", &t) == QK_OK && t.ndim == 1 && t.shape[0] == 1 && t.dtype == QK_DTYPE_F32,
          "scalar as [1]");
    float one;
    memcpy(&one, t.data, 4);
    CHECK(one == 1.0f, "scalar value %g", (double)one);
    CHECK(qk_st_find(f, "z1", &info) == QK_OK && info.numel == 0 && info.nbytes == 0, "zero-size");
    /* data order: offsets ascending */
    uint64_t prev = 0;
    for (size_t i = 0; i < qk_st_count(f); i++) {
        qk_st_info_at(f, i, &info);
        CHECK(info.file_offset >= prev, "data order at %zu", i);
        prev = info.file_offset;
    }
    CHECK(qk_st_find(f, "nope", &info) == QK_ERR_INVALID_ARGUMENT, "absent name");
    CHECK(strstr(qk_last_error(), "\"nope\"") != NULL, "absent name message: %s", qk_last_error());
    CHECK(!qk_st_has(f, "nope") && qk_st_has(f, "a"), "has");
    CHECK(qk_st_info_at(f, 5, &info) == QK_ERR_INVALID_ARGUMENT, "index out of range");
    qk_st_close(f);

    st = qk_st_open(CORPUS_DIR "/ok_all_dtypes.safetensors", &f);
    CHECK(st == QK_OK, "%s", qk_last_error());
    if (st) return;
    CHECK(qk_st_count(f) == 16, "16 dtypes, got %zu", qk_st_count(f));
    static const struct { const char *name, *dt; size_t es; qk_dtype q; } want[] = {
        {"t_bool", "BOOL", 1, QK_DTYPE_INVALID}, {"t_i16", "I16", 2, QK_DTYPE_INVALID},
        {"t_u16", "U16", 2, QK_DTYPE_INVALID},   {"t_u32", "U32", 4, QK_DTYPE_INVALID},
        {"t_u64", "U64", 8, QK_DTYPE_INVALID},   {"t_f64", "F64", 8, QK_DTYPE_INVALID},
        {"t_f8_e8m0", "F8_E8M0", 1, QK_DTYPE_E8M0}, {"t_bf16", "BF16", 2, QK_DTYPE_BF16},
        {"t_u8", "U8", 1, QK_DTYPE_U8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(qk_st_find(f, want[i].name, &info) == QK_OK, "%s", want[i].name);
        CHECK(!strcmp(info.dtype_name, want[i].dt) && info.elem_size == want[i].es && info.dtype == want[i].q,
              "%s: %s %zu %d", want[i].name, info.dtype_name, info.elem_size, (int)info.dtype);
        CHECK(info.nbytes == info.numel * info.elem_size, "%s bytes", want[i].name);
        st = qk_st_tensor(f, want[i].name, &t);
        CHECK(want[i].q == QK_DTYPE_INVALID ? st == QK_ERR_DTYPE : st == QK_OK, "%s view: %s", want[i].name,
              qk_status_name(st));
    }
    CHECK(qk_st_metadata_count(f) == 2, "metadata count");
    CHECK(qk_st_metadata_get(f, "note") && !strcmp(qk_st_metadata_get(f, "note"), "all 16 dtypes"), "metadata");
    const char *k, *v;
    CHECK(qk_st_metadata_at(f, 0, &k, &v) == QK_OK && !strcmp(k, "format") && !strcmp(v, "pt"),
          "metadata in header order");
    CHECK(qk_st_metadata_get(f, "absent") == NULL, "absent metadata");
    qk_st_info_at(f, 0, &info);
    qk_st_release_pages(f, &info);   /* views stay valid */
    CHECK(touch_views(f) != 0xdead, "views after release_pages");
    qk_st_close(f);

    CHECK(qk_st_dtype_size("F8_E4M3") == 1 && qk_st_dtype_size("U64") == 8 && qk_st_dtype_size("F7") == 0,
          "dtype sizes");
    CHECK(qk_st_dtype_of("F8_E8M0") == QK_DTYPE_E8M0 && qk_st_dtype_of("BOOL") == QK_DTYPE_INVALID,
          "dtype mapping");
}

static void test_open_io_errors(void)
{
    qk_st_file *f = (qk_st_file *)1;
    CHECK(qk_st_open("/nonexistent/x.safetensors", &f) == QK_ERR_IO && f == NULL, "missing file");
    CHECK(qk_st_open(CORPUS_DIR, &f) == QK_ERR_IO, "a folder is not a file");
    CHECK(qk_st_open(NULL, &f) == QK_ERR_INVALID_ARGUMENT, "NULL path");
}

/* ---- writer ---- */
/* The writer's bytes against a file built by hand from checkpoint.md's format. */
static void test_writer_matches_hand_built_file(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/golden.safetensors", scratch);
    qk_st_writer *w = NULL;
    CHECK(qk_st_writer_create(path, 0, &w) == QK_OK, "%s", qk_last_error());
    if (!w) return;
    const unsigned char b8[3] = {1, 2, 3};
    const float f1[1] = {1.0f};
    int64_t s3[1] = {3}, s1[1] = {1};
    CHECK(qk_st_writer_set_metadata(w, "format", "pt") == QK_OK, "metadata");
    CHECK(qk_st_writer_declare(w, "b", "U8", 1, s3, b8) == QK_OK, "declare b");
    CHECK(qk_st_writer_declare(w, "a", "F32", 1, s1, f1) == QK_OK, "declare a");
    CHECK(qk_st_writer_commit(w) == QK_OK, "%s", qk_last_error());
    qk_st_writer_destroy(w);
    /* F32 "a" (4-byte elements) is laid out before U8 "b"; header padded with spaces */
    const char json[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    unsigned char want[512];
    for (int i = 0; i < 8; i++) want[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(want + 8, json, jl);
    memset(want + 8 + jl, ' ', padded - jl);
    memcpy(want + 8 + padded, f1, 4);
    memcpy(want + 8 + padded + 4, b8, 3);
    size_t wl = 8 + padded + 7, got;
    unsigned char *have = read_all(path, &got);
    CHECK(have && got == wl && !memcmp(have, want, wl), "bytes differ from the hand-built file (%zu vs %zu)",
          got, wl);
    free(have);
}

/* Writes a file with every dtype, zero-size tensors, a scalar, metadata, data given at
   declaration and streamed in pieces. */
static const char *const all_dt[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64",
                                     "U64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2",
                                     "F8_E8M0"};

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(qk_rand_u64(&seed) >> 56);
}

static qk_status write_sample(const char *path, unsigned flags)
{
    qk_st_writer *w = NULL;
    qk_status st = qk_st_writer_create(path, flags, &w);
    if (st) return st;
    unsigned char *bufs[16];
    int64_t shapes[16][3];
    for (int i = 0; i < 16; i++) {
        size_t es = qk_st_dtype_size(all_dt[i]);
        shapes[i][0] = 3 + i % 4;
        shapes[i][1] = 5;
        shapes[i][2] = 1 + i % 3;
        size_t nb = (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]) * es;
        bufs[i] = malloc(nb);
        fill(bufs[i], nb, 100 + (uint64_t)i);
        char name[64];
        snprintf(name, sizeof name, "layer.%d.%s", i, all_dt[i]);
        st = qk_st_writer_declare(w, name, all_dt[i], 1 + i % 3, shapes[i], i % 2 ? bufs[i] : NULL);
        if (st) break;
    }
    int64_t zero[2] = {0, 7};
    if (!st) st = qk_st_writer_declare(w, "empty", "F32", 2, zero, NULL);
    float sc = 2.5f;
    if (!st) st = qk_st_writer_declare(w, "scalar", "F32", 0, NULL, &sc);
    if (!st) st = qk_st_writer_set_metadata(w, "format", "pt");
    if (!st) st = qk_st_writer_set_metadata(w, "ünïcode", "välue ✓");
    for (int i = 0; !st && i < 16; i += 2) {  /* the streamed ones, in 3 pieces, reverse order */
        int j = 14 - i;
        size_t es = qk_st_dtype_size(all_dt[j]);
        int64_t ne = 1;
        for (int d = 0; d < 1 + j % 3; d++) ne *= shapes[j][d];
        size_t nb = (size_t)ne * es, a = nb / 3, b = nb / 2;
        char name[64];
        snprintf(name, sizeof name, "layer.%d.%s", j, all_dt[j]);
        st = qk_st_writer_write(w, name, bufs[j], a);
        if (!st) st = qk_st_writer_write(w, name, bufs[j] + a, b - a);
        if (!st) st = qk_st_writer_write(w, name, bufs[j] + b, nb - b);
    }
    if (!st) st = qk_st_writer_commit(w);
    qk_st_writer_destroy(w);
    for (int i = 0; i < 16; i++) free(bufs[i]);
    return st;
}

static void test_writer_round_trip(void)
{
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/rt1.safetensors", scratch);
    snprintf(p2, sizeof p2, "%s/rt2.safetensors", scratch);
    qk_status st = write_sample(p1, 0);
    CHECK(st == QK_OK, "write: %s", qk_last_error());
    if (st) return;
    qk_st_file *f = NULL;
    st = qk_st_open(p1, &f);
    CHECK(st == QK_OK, "read back: %s", qk_last_error());
    if (st) return;
    CHECK(qk_st_count(f) == 18, "count %zu", qk_st_count(f));
    CHECK((8 + qk_st_header_size(f)) % 8 == 0, "data buffer starts at %llu",
          (unsigned long long)(8 + qk_st_header_size(f)));
    /* the header's padding is spaces */
    size_t len;
    unsigned char *raw = read_all(p1, &len);
    size_t hn = (size_t)qk_st_header_size(f);
    CHECK(raw && (raw[8 + hn - 1] == ' ' || raw[8 + hn - 1] == '}'), "header ends in spaces or }");
    free(raw);
    /* contents equal what was written; every tensor aligned to its element size */
    for (int i = 0; i < 16; i++) {
        char name[64];
        snprintf(name, sizeof name, "layer.%d.%s", i, all_dt[i]);
        qk_st_info info;
        CHECK(qk_st_find(f, name, &info) == QK_OK, "%s missing", name);
        size_t es = qk_st_dtype_size(all_dt[i]);
        CHECK(!strcmp(info.dtype_name, all_dt[i]) && info.ndim == 1 + i % 3, "%s meta", name);
        unsigned char *want = malloc((size_t)info.nbytes);
        fill(want, (size_t)info.nbytes, 100 + (uint64_t)i);
        CHECK(!memcmp(want, info.data, (size_t)info.nbytes), "%s bytes", name);
        free(want);
        CHECK(info.file_offset % es == 0, "%s at offset %llu, not aligned to %zu", name,
              (unsigned long long)info.file_offset, es);
    }
    qk_st_info sc;
    CHECK(qk_st_find(f, "scalar", &sc) == QK_OK && sc.ndim == 0 && sc.nbytes == 4, "scalar");
    CHECK(qk_st_metadata_get(f, "ünïcode") && !strcmp(qk_st_metadata_get(f, "ünïcode"), "välue ✓"), "utf-8 metadata");
    /* re-write from the reader, in data order: identical bytes */
    qk_st_writer *w = NULL;
    CHECK(qk_st_writer_create(p2, 0, &w) == QK_OK, "%s", qk_last_error());
    for (size_t m = 0; w && m < qk_st_metadata_count(f); m++) {
        const char *k, *v;
        qk_st_metadata_at(f, m, &k, &v);
        qk_st_writer_set_metadata(w, k, v);
    }
    for (size_t i = 0; w && i < qk_st_count(f); i++) {
        qk_st_info info;
        qk_st_info_at(f, i, &info);
        CHECK(qk_st_writer_declare(w, info.name, info.dtype_name, info.ndim, info.shape, info.data) == QK_OK,
              "%s", qk_last_error());
    }
    CHECK(w && qk_st_writer_commit(w) == QK_OK, "%s", qk_last_error());
    qk_st_writer_destroy(w);
    qk_st_close(f);
    size_t l1, l2;
    unsigned char *b1 = read_all(p1, &l1), *b2 = read_all(p2, &l2);
    CHECK(b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1), "re-written file differs (%zu vs %zu bytes)", l1, l2);
    free(b1);
    free(b2);
}

static void test_writer_never_replaces_input_or_leaves_partial_files(void)
{
    char p[600], other[600];
    snprintf(p, sizeof p, "%s/in.safetensors", scratch);
    snprintf(other, sizeof other, "%s/other.safetensors", scratch);
    CHECK(write_sample(p, 0) == QK_OK, "%s", qk_last_error());
    size_t l0;
    unsigned char *before = read_all(p, &l0);

    /* existing file, no REPLACE: refused at create and nothing changes */
    qk_st_writer *w = NULL;
    qk_status st = qk_st_writer_create(p, 0, &w);
    CHECK(st == QK_ERR_IO && w == NULL, "create over an existing file: %s", qk_status_name(st));
    CHECK(strstr(qk_last_error(), "refusing to overwrite") != NULL, "%s", qk_last_error());
    CHECK(write_sample(p, 0) == QK_ERR_IO, "write_sample over an existing file");

    /* an open input is never replaced, even with REPLACE */
    qk_st_file *in = NULL;
    CHECK(qk_st_open(p, &in) == QK_OK, "%s", qk_last_error());
    st = qk_st_writer_create(p, QK_ST_WRITE_REPLACE, &w);
    CHECK(st == QK_ERR_IO && strstr(qk_last_error(), "open as an input"), "create over an open input: %s",
          qk_last_error());
    CHECK(qk_write_file_atomic(p, "x", 1, QK_ST_WRITE_REPLACE) == QK_ERR_IO, "atomic write over an input");
    /* ... nor when it is opened after the writer was created */
    qk_st_close(in);
    st = qk_st_writer_create(p, QK_ST_WRITE_REPLACE, &w);
    CHECK(st == QK_OK, "%s", qk_last_error());
    CHECK(qk_st_open(p, &in) == QK_OK, "%s", qk_last_error());
    int64_t one[1] = {1};
    unsigned char z = 0;
    qk_st_writer_declare(w, "x", "U8", 1, one, &z);
    st = qk_st_writer_commit(w);
    CHECK(st == QK_ERR_IO, "commit onto an input opened meanwhile: %s", qk_status_name(st));
    qk_st_writer_destroy(w);
    size_t l1;
    unsigned char *after = read_all(p, &l1);
    CHECK(before && after && l0 == l1 && !memcmp(before, after, l0), "the input changed");
    free(after);
    CHECK(touch_views(in) != 0xdead, "input views");
    qk_st_close(in);

    /* REPLACE replaces a file that is not an input */
    CHECK(write_sample(p, QK_ST_WRITE_REPLACE) == QK_OK, "replace: %s", qk_last_error());

    /* abandoned writers leave nothing behind: not the file, not a temporary */
    size_t entries = count_entries(scratch);
    st = qk_st_writer_create(other, 0, &w);
    qk_st_writer_declare(w, "x", "U8", 1, one, NULL);
    unsigned char zz[1] = {7};
    CHECK(qk_st_writer_write(w, "x", zz, 1) == QK_OK, "%s", qk_last_error());
    CHECK(count_entries(scratch) == entries + 1, "the temporary file exists while writing");
    qk_st_writer_destroy(w);
    CHECK(access(other, F_OK) != 0, "an uncommitted writer created the file");
    CHECK(count_entries(scratch) == entries, "a temporary file was left behind");

    /* an incomplete tensor fails the commit and leaves nothing */
    st = qk_st_writer_create(other, 0, &w);
    int64_t four[1] = {4};
    qk_st_writer_declare(w, "x", "U8", 1, four, NULL);
    qk_st_writer_write(w, "x", zz, 1);
    st = qk_st_writer_commit(w);
    CHECK(st != QK_OK && strstr(qk_last_error(), "has 1 of its 4 bytes"), "incomplete commit: %s", qk_last_error());
    qk_st_writer_destroy(w);
    CHECK(access(other, F_OK) != 0 && count_entries(scratch) == entries, "incomplete write left files");

    /* misuse */
    st = qk_st_writer_create(other, 0, &w);
    CHECK(qk_st_writer_declare(w, "x", "U8", 1, four, NULL) == QK_OK, "declare");
    CHECK(qk_st_writer_declare(w, "x", "U8", 1, four, NULL) == QK_ERR_INVALID_ARGUMENT, "duplicate name");
    CHECK(qk_st_writer_declare(w, "__metadata__", "U8", 1, four, NULL) == QK_ERR_INVALID_ARGUMENT, "reserved name");
    CHECK(qk_st_writer_declare(w, "", "U8", 1, four, NULL) == QK_ERR_INVALID_ARGUMENT, "empty name");
    CHECK(qk_st_writer_declare(w, "bad\xff", "U8", 1, four, NULL) == QK_ERR_INVALID_ARGUMENT, "non-UTF-8 name");
    CHECK(qk_st_writer_declare(w, "y", "F7", 1, four, NULL) == QK_ERR_DTYPE, "unknown dtype");
    int64_t neg[1] = {-1};
    CHECK(qk_st_writer_declare(w, "y", "U8", 1, neg, NULL) == QK_ERR_SHAPE, "negative dim");
    unsigned char five[5] = {0};
    CHECK(qk_st_writer_write(w, "x", five, 5) == QK_ERR_INVALID_ARGUMENT, "too many bytes");
    qk_st_writer_destroy(w);
    CHECK(count_entries(scratch) == entries, "misuse left files");
    free(before);
}

static void test_writer_add_tensor(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s/addt.safetensors", scratch);
    qk_st_writer *w = NULL;
    CHECK(qk_st_writer_create(p, 0, &w) == QK_OK, "%s", qk_last_error());
    uint16_t h[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0};
    int64_t sh[2] = {2, 3};
    qk_tensor t = qk_tensor_make(h, QK_DTYPE_BF16, 2, sh);
    CHECK(qk_st_writer_add_tensor(w, "bf", &t) == QK_OK, "%s", qk_last_error());
    qk_tensor strided = t;
    strided.stride[0] = 4;
    CHECK(qk_st_writer_add_tensor(w, "s", &strided) == QK_ERR_LAYOUT, "non-contiguous");
    CHECK(qk_st_writer_commit(w) == QK_OK, "%s", qk_last_error());
    qk_st_writer_destroy(w);
    qk_st_file *f = NULL;
    CHECK(qk_st_open(p, &f) == QK_OK, "%s", qk_last_error());
    qk_tensor v;
    CHECK(f && qk_st_tensor(f, "bf", &v) == QK_OK && v.dtype == QK_DTYPE_BF16 && v.shape[1] == 3 &&
          !memcmp(v.data, h, sizeof h), "add_tensor round trip");
    qk_st_close(f);
}

/* ---- sets: single file, index, folder ---- */
static void test_sets(void)
{
    qk_st_set *s = NULL;
    CHECK(qk_st_set_open(CORPUS_DIR "/ms_shards_ok", 0, &s) == QK_OK, "%s", qk_last_error());
    if (s) {
        CHECK(qk_st_set_file_count(s) == 2, "two shards");
        CHECK(qk_st_set_index_path(s) != NULL, "index path");
        CHECK(qk_st_set_count(s) == 4, "four tensors, got %zu", qk_st_set_count(s));
        qk_st_info info;
        CHECK(qk_st_set_find(s, "model.norm.weight", &info) == QK_OK && info.ndim == 1, "find across shards");
        CHECK(qk_st_set_find(s, "model.layers.0.mlp.down_proj.weight", &info) == QK_OK &&
              strstr(qk_st_path(info.file), "00001-of-00002"), "the weight is in shard 1");
        for (size_t i = 0; i < qk_st_set_count(s); i++)
            CHECK(qk_st_set_info_at(s, i, &info) == QK_OK, "info_at %zu", i);
        CHECK(qk_st_set_info_at(s, 4, &info) == QK_ERR_INVALID_ARGUMENT, "out of range");
        qk_st_set_close(s);
    }
    s = NULL;
    CHECK(qk_st_set_open(CORPUS_DIR "/ms_ok/quant_model_weights.safetensors", 0, &s) == QK_OK, "single file");
    CHECK(s && qk_st_set_index_path(s) == NULL && qk_st_set_file_count(s) == 1, "single file set");
    qk_st_set_close(s);
    /* lenient: problems recorded, open succeeds */
    s = NULL;
    CHECK(qk_st_set_open(CORPUS_DIR "/ms_shard_wrong_file", QK_ST_SET_LENIENT, &s) == QK_OK, "%s", qk_last_error());
    CHECK(s && qk_st_set_problem_count(s) == 1 && strstr(qk_st_set_problem(s, 0), "but it is in"),
          "one problem recorded");
    qk_st_set_close(s);
    /* a folder with several files and no index is ambiguous */
    s = NULL;
    CHECK(qk_st_set_open(CORPUS_DIR, 0, &s) == QK_ERR_FORMAT && strstr(qk_last_error(), "expected one index"),
          "ambiguous folder: %s", qk_last_error());
}

int main(void)
{
    scratch_dir(scratch, sizeof scratch, "st");
    if (!scratch[0]) {
        fprintf(stderr, "cannot create a scratch folder\n");
        return 1;
    }
    RUN(test_corpus_open_and_set);
    RUN(test_corpus_covers_every_rule);
    RUN(test_truncations_and_flips_never_crash);
    RUN(test_views_and_metadata);
    RUN(test_open_io_errors);
    RUN(test_writer_matches_hand_built_file);
    RUN(test_writer_round_trip);
    RUN(test_writer_never_replaces_input_or_leaves_partial_files);
    RUN(test_writer_add_tensor);
    RUN(test_sets);
    remove_tree(scratch);
    return qk_test_finish();
}
