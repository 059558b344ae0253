/* Helpers shared by test_safetensors.c and test_modelslim.c: the corpus manifest
 * (corpus/safetensors/EXPECTED.txt), scratch folders, whole-file reads. */
#ifndef QK_IO_TEST_UTIL_H
#define QK_IO_TEST_UTIL_H

#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CORPUS_DIR "corpus/safetensors"

typedef struct corpus_case {
    char path[256], check[256], expect[64], substring[512];
} corpus_case;

/* Reads the manifest; returns the number of cases (0 when it cannot be read). */
/* dst = src, cut to fit (a corpus manifest field longer than its slot is truncated). */
static inline void copy_field(char *dst, size_t size, const char *src)
{
    size_t l = strlen(src);
    if (l >= size) l = size - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

static inline size_t corpus_load(corpus_case **out)
{
    FILE *f = fopen(CORPUS_DIR "/EXPECTED.txt", "r");
    *out = NULL;
    if (!f) return 0;
    size_t n = 0, cap = 0;
    corpus_case *v = NULL;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        char *fields[4] = {0};
        char *p = line;
        for (int i = 0; i < 4 && p; i++) {
            fields[i] = p;
            p = strchr(p, '\t');
            if (p) *p++ = 0;
        }
        if (!fields[3]) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            v = realloc(v, cap * sizeof *v);
            if (!v) { fclose(f); return 0; }
        }
        copy_field(v[n].path, sizeof v[n].path, fields[0]);
        copy_field(v[n].check, sizeof v[n].check, fields[1]);
        copy_field(v[n].expect, sizeof v[n].expect, fields[2]);
        copy_field(v[n].substring, sizeof v[n].substring, strcmp(fields[3], "-") ? fields[3] : "");
        n++;
    }
    fclose(f);
    *out = v;
    return n;
}

static inline void corpus_path(const corpus_case *c, char *buf, size_t n)
{
    snprintf(buf, n, CORPUS_DIR "/%s", c->path);
}

/* A fresh scratch folder under $TMPDIR (or /tmp). */
static inline void scratch_dir(char *buf, size_t n, const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/qk_%s_XXXXXX", t && *t ? t : "/tmp", tag);
    if (!mkdtemp(buf)) buf[0] = 0;
}

static inline void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char p[4096];
                if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p) remove_tree(p);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Whole file into a malloc'd buffer of exactly its size (NULL on failure; *n = size). */
static inline unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    if (b && sz > 0 && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) *n = (size_t)(sz > 0 ? sz : 0);
    return b;
}

static inline int write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static inline size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

#endif
