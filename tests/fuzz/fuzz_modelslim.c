/* libFuzzer target: the ModelSlim folder loader through the serving life cycle, and
 * qk_mx_weight_create with the linear on what it accepts.
 *
 * Input byte 0 picks the mode:
 *   even: a folder. The rest is split at the first 0x00 byte into the description JSON and
 *         the weights file; both are written into a private folder, qk_ms_open reads it, and
 *         every W8A8_MXFP8 "<prefix>.weight" is created from its own shape (bounded), loaded
 *         (weight, weight_scale, bias) and processed, then run on one row.
 *   odd:  a raw weight. Bytes 1-2 give N and K (1..64 each); then N*K E4M3 codes and
 *         N*ceil(K/32) scale bytes (short input is zero-filled). An accepted weight runs the
 *         linear on two rows and every output is read.
 * Every reject must say why (qk_last_error non-empty). */
#define _GNU_SOURCE
#include "qkern_io.h"
#include "qkern_serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile float qk_fuzz_sink;
static char dir[256];

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void run_linear(const qk_mx_weight *w, int64_t K, int64_t N)
{
    float x[2 * 64], out[2 * 64];
    for (int64_t i = 0; i < 2 * K; i++) x[i] = (float)(i % 7) - 3.0f;
    int64_t xs[2] = {2, K}, os[2] = {2, N};
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(out, QK_DTYPE_F32, 2, os);
    if (qk_mxfp8_linear(&xt, w, NULL, &ot) != QK_OK) abort(); /* an accepted weight runs */
    float acc = 0;
    for (int64_t i = 0; i < 2 * N; i++) acc += out[i];
    qk_fuzz_sink = acc;
}

static void fuzz_weight(const uint8_t *data, size_t size)
{
    if (size < 3) return;
    const int64_t N = 1 + data[1] % 64, K = 1 + data[2] % 64, kb = (K + 31) / 32;
    uint8_t q[64 * 64] = {0}, s[64 * 2] = {0};
    size_t off = 3, nq = (size_t)(N * K), ns = (size_t)(N * kb);
    memcpy(q, data + off, size - off < nq ? size - off : nq);
    off += nq;
    if (off < size) memcpy(s, data + off, size - off < ns ? size - off : ns);
    int64_t qs[2] = {N, K}, ss[2] = {N, kb};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs), st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *w = NULL;
    if (qk_mx_weight_create(&qt, &st, &w) == QK_OK) {
        if (qk_mx_weight_n(w) != N || qk_mx_weight_k(w) != K) abort();
        run_linear(w, K, N);
        qk_mx_weight_destroy(w);
    } else if (!qk_last_error()[0] || w) {
        abort();
    }
}

static void fuzz_folder(const uint8_t *data, size_t size)
{
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *z = memchr(p, 0, (size_t)(end - p));
    const size_t nd = z ? (size_t)(z - p) : (size_t)(end - p);
    write_file("quant_model_description.json", p, nd);
    const uint8_t *wt = z ? z + 1 : end;
    write_file("quant_model_weights.safetensors", wt, (size_t)(end - wt));
    qk_ms_model *m = NULL;
    if (qk_ms_open(dir, 0, &m) != QK_OK) {
        if (!qk_last_error()[0] || m) abort();
        return;
    }
    const qk_ms_desc *d = qk_ms_description(m);
    const qk_st_set *set = qk_ms_tensors(m);
    for (size_t i = 0; i < qk_ms_desc_count(d); i++) {
        const char *name, *qt;
        if (qk_ms_desc_entry(d, i, &name, &qt) != QK_OK) abort();
        size_t len = strlen(name);
        if (strcmp(qt, "W8A8_MXFP8") || len <= 7 || strcmp(name + len - 7, ".weight")) continue;
        qk_st_info wi;
        if (qk_st_set_find(set, name, &wi) != QK_OK || wi.ndim != 2) continue;
        const int64_t N = wi.shape[0], K = wi.shape[1];
        if (N < 1 || K < 1 || N > 64 || K > 64) continue; /* the linear's own buffers */
        char prefix[300], bias[320];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), name);
        snprintf(bias, sizeof bias, "%s.bias", prefix);
        qk_st_info bi;
        const bool has_bias = qk_st_set_find(set, bias, &bi) == QK_OK;
        qk_mxfp8_linear_layer *l = NULL;
        qk_status st = qk_mxfp8_linear_layer_create(prefix, K, N, has_bias, 1, 0, QK_TP_NONE, NULL, &l);
        if (st == QK_OK) st = qk_mxfp8_linear_layer_load_from(l, set);
        if (st == QK_OK) st = qk_mxfp8_linear_layer_process_weights_after_loading(l);
        if (st == QK_OK) {
            float x[64], out[64];
            for (int64_t k = 0; k < K; k++) x[k] = (float)k * 0.25f;
            int64_t xs[2] = {1, K}, os[2] = {1, N};
            qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(out, QK_DTYPE_F32, 2, os);
            if (qk_mxfp8_linear_layer_forward(l, QK_BACKEND_DEFAULT, &xt, &ot) != QK_OK) abort();
            qk_fuzz_sink = out[0];
        } else if (!qk_last_error()[0]) {
            abort();
        }
        qk_mxfp8_linear_layer_destroy(l);
    }
    qk_ms_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/qk-fuzz-ms-%ld", base, (long)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) abort();
    }
    if (size < 1) return 0;
    if (data[0] & 1) fuzz_weight(data, size);
    else fuzz_folder(data, size);
    return 0;
}
