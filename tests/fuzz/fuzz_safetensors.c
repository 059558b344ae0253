/* libFuzzer target: the safetensors reader (the input as a whole file, and the input as a
 * JSON header followed by its data buffer), the ModelSlim description parser and the
 * shard-index parser. Every view of an accepted file is read end to end, so an accepted
 * out-of-bounds view shows up under AddressSanitizer. */
#include "io/io_internal.h"

#include <stdlib.h>
#include <string.h>

static volatile uint8_t qk_fuzz_sink;

static void touch_file(const qk_st_file *f)
{
    for (size_t i = 0; i < qk_st_count(f); i++) {
        qk_st_info info;
        if (qk_st_info_at(f, i, &info) != QK_OK) abort();
        const uint8_t *p = info.data;
        uint8_t acc = 0;
        for (uint64_t k = 0; k < info.nbytes; k++) acc ^= p[k];
        qk_fuzz_sink = acc;
        qk_st_info again;
        if (qk_st_find(f, info.name, &again) != QK_OK || again.data != info.data) abort();
        qk_tensor t;
        (void)qk_st_info_tensor(&info, &t);
    }
    for (size_t i = 0; i < qk_st_metadata_count(f); i++) {
        const char *k, *v;
        if (qk_st_metadata_at(f, i, &k, &v) != QK_OK) abort();
        if (qk_st_metadata_get(f, k) == NULL) abort();
    }
}

static void fuzz_reader(const uint8_t *data, size_t size)
{
    qk_st_file *f = NULL;
    if (qk_st_open_memory(data, size, "fuzz", &f) == QK_OK) {
        touch_file(f);
        qk_st_close(f);
    } else if (qk_last_error()[0] == 0) {
        abort();   /* a reject must say why */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader(data, size);

    /* the input as a header: JSON up to its last '}' then the data buffer */
    if (size && data[0] == '{') {
        size_t end = size;
        while (end && data[end - 1] != '}') end--;
        uint8_t *buf = malloc(size + 8);
        if (buf) {
            for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)end >> (8 * i));
            memcpy(buf + 8, data, size);
            fuzz_reader(buf, size + 8);
            free(buf);
        }
    }

    qk_ms_desc *d = NULL;
    if (qk_ms_desc_parse(data, size, "fuzz", &d) == QK_OK) {
        for (size_t i = 0; i < qk_ms_desc_count(d); i++) {
            const char *n, *q;
            if (qk_ms_desc_entry(d, i, &n, &q) != QK_OK) abort();
            if (qk_ms_desc_lookup(d, n) == NULL) abort();
        }
        qk_ms_desc_free(d);
    }

    qk_st_index idx;
    if (qk_st_index_parse(data, size, "fuzz", &idx) == QK_OK) qk_st_index_free(&idx);
    return 0;
}
