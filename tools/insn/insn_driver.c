/* insn_driver — runs one qkern kernel call, chosen on the command line, for an instruction
 * counter (the QEMU plugin qemu_insn_count.so, callgrind, or ptrace_insn_count).
 *
 *   insn_driver [-r REPS] [-w WARMUP] KERNEL DTYPE DIMS...
 *     rms_norm | gemma_rms_norm | add_rms_norm | add_gemma_rms_norm |
 *     rms_norm_gated (alias gated_rms_norm)   DTYPE ROWS H      elements = ROWS*H
 *     mx_quantize   DTYPE ROWS K   (DTYPE: x)                   elements = ROWS*K quantized
 *     mx_dequantize DTYPE ROWS K   (DTYPE: out)                 elements = ROWS*K dequantized
 *     mxfp8_linear  DTYPE M N K    (DTYPE: x and out)           elements = M*N*K MACs
 *   DTYPE: f32 | f16 | bf16. Norm weights are BF16, eps 1e-6; MX options are the defaults.
 *
 * Inputs are built and WARMUP calls (default 1) made first, so that one-time costs (qk_init,
 * lazy tables) stay outside. Then qk_insn_region() runs the call REPS times (default 1)
 * between two markers: qk_insn_mark_begin() and qk_insn_mark_end(), tiny leaf functions
 * whose entries a counter can watch (plugin begin=/end=, ptrace addresses), and the whole
 * qk_insn_region() is what callgrind's --toggle-collect sees. Counting two runs with
 * different REPS and dividing the difference by the REPS difference cancels whatever is
 * fixed per run. The library runs single-threaded (qk_set_num_threads(1)).
 *
 * Prints one line: kernel=... dtype=... shape=... elements=... unit=... reps=... target=...
 * provider=... Uses only the public API (qkern.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qkern.h"

typedef enum kind {
    K_RMS, K_GEMMA, K_ADD_RMS, K_ADD_GEMMA, K_GATED, K_QUANT, K_DEQUANT, K_LINEAR
} kind;

static const struct { const char *name; kind k; const char *op; } kernels[] = {
    {"rms_norm", K_RMS, "rms_norm"},
    {"gemma_rms_norm", K_GEMMA, "gemma_rms_norm"},
    {"add_rms_norm", K_ADD_RMS, "add_rms_norm"},
    {"add_gemma_rms_norm", K_ADD_GEMMA, "add_gemma_rms_norm"},
    {"rms_norm_gated", K_GATED, "rms_norm_gated"},
    {"gated_rms_norm", K_GATED, "rms_norm_gated"},
    {"mx_quantize", K_QUANT, "mx_quantize"},
    {"mx_dequantize", K_DEQUANT, "mx_dequantize"},
    {"mxfp8_linear", K_LINEAR, "mxfp8_linear"},
};

typedef struct job {
    kind k;
    qk_tensor x, w, res, res_out, gate, out, q, scale;
    qk_mx_weight *mw;
} job;

/* ---- markers: distinct bodies so that no pass folds them together ---- */
static volatile int qk_insn_mark_sink;
__attribute__((noinline, noclone, used)) void qk_insn_mark_begin(void) { qk_insn_mark_sink = 1; }
__attribute__((noinline, noclone, used)) void qk_insn_mark_end(void) { qk_insn_mark_sink = 2; }

static qk_status run_once(job *j)
{
    const float eps = 1e-6f;
    switch (j->k) {
    case K_RMS: return qk_rms_norm(&j->x, &j->w, eps, &j->out, NULL);
    case K_GEMMA: return qk_gemma_rms_norm(&j->x, &j->w, eps, &j->out, NULL);
    case K_ADD_RMS: return qk_add_rms_norm(&j->x, &j->w, &j->res, eps, &j->out, &j->res_out);
    case K_ADD_GEMMA:
        return qk_add_gemma_rms_norm(&j->x, &j->w, &j->res, eps, &j->out, &j->res_out);
    case K_GATED: return qk_rms_norm_gated(&j->x, &j->w, &j->gate, eps, &j->out);
    case K_QUANT: return qk_mx_quantize(&j->x, NULL, &j->q, &j->scale);
    case K_DEQUANT: return qk_mx_dequantize(&j->q, &j->scale, &j->out);
    case K_LINEAR: return qk_mxfp8_linear(&j->x, j->mw, NULL, &j->out);
    }
    return QK_ERR_INVALID_ARGUMENT;
}

__attribute__((noinline, noclone, used)) int qk_insn_region(job *j, int reps)
{
    int bad = 0;
    qk_insn_mark_begin();
    for (int r = 0; r < reps; r++) bad |= run_once(j) != QK_OK;
    qk_insn_mark_end();
    return bad;
}

/* ---- inputs ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static double rnd_unit(void)   /* [0, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static uint16_t to_bf16(float f)   /* round to nearest even; finite inputs */
{
    uint32_t u = f32_bits(f);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float f)    /* normal-range inputs (|f| in [2^-14, 65504)) */
{
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
    uint32_t m = u & 0x7FFFFFu;
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    uint32_t rest = m & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static void *xalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) { fprintf(stderr, "insn_driver: out of memory\n"); exit(2); }
    return p;
}

/* A [rows, cols] tensor of dtype dt with values of magnitude in [lo, hi), random sign. */
static qk_tensor make_filled(qk_dtype dt, int64_t rows, int64_t cols, double lo, double hi)
{
    int64_t shape[2] = {rows, cols};
    size_t n = (size_t)(rows * cols), es = qk_dtype_size(dt);
    unsigned char *p = xalloc(n * es);
    for (size_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * rnd_unit();
        float f = (float)(rnd_unit() < 0.5 ? -v : v);
        if (dt == QK_DTYPE_F32) memcpy(p + 4 * i, &f, 4);
        else {
            uint16_t h = dt == QK_DTYPE_BF16 ? to_bf16(f) : to_f16(f);
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return qk_tensor_make(p, dt, 2, shape);
}

static qk_tensor make_zero(qk_dtype dt, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return qk_tensor_make(xalloc((size_t)(rows * cols) * qk_dtype_size(dt)), dt, 2, shape);
}

/* Codes and scales as a checkpoint has them: BF16 values of a bell-shaped spread (the sum of
   four uniforms, as weights are near-normal) quantized by qk_mx_quantize with the defaults.
   Uniformly random codes would put an E4M3 subnormal (1 in 16 codes) in nearly every block,
   which real weights have in few (|w| below 2^-14 of its block's maximum), and so would
   count the kernels' rare exact-decode paths instead of their main ones. */
static void make_weights(int64_t rows, int64_t cols, qk_tensor *q, qk_tensor *scale)
{
    int64_t shape[2] = {rows, cols};
    uint16_t *v = xalloc((size_t)(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; i++)
        v[i] = to_bf16((float)(0.02 * (rnd_unit() + rnd_unit() + rnd_unit() + rnd_unit() - 2.0)));
    qk_tensor x = qk_tensor_make(v, QK_DTYPE_BF16, 2, shape);
    *q = make_zero(QK_DTYPE_F8_E4M3, rows, cols);
    *scale = make_zero(QK_DTYPE_E8M0, rows, (cols + 31) / 32);
    if (qk_mx_quantize(&x, NULL, q, scale) != QK_OK) {
        fprintf(stderr, "insn_driver: qk_mx_quantize: %s\n", qk_last_error());
        exit(3);
    }
    free(v);
}

static int parse_dtype(const char *s, qk_dtype *dt)
{
    if (!strcmp(s, "f32")) *dt = QK_DTYPE_F32;
    else if (!strcmp(s, "f16")) *dt = QK_DTYPE_F16;
    else if (!strcmp(s, "bf16")) *dt = QK_DTYPE_BF16;
    else return 0;
    return 1;
}

static int parse_dim(const char *s, int64_t *v)
{
    char *e;
    long long x = strtoll(s, &e, 10);
    if (e == s || *e || x <= 0 || x > (1LL << 40)) return 0;
    *v = x;
    return 1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: insn_driver [-r REPS] [-w WARMUP] KERNEL DTYPE DIMS...\n"
            "  rms_norm|gemma_rms_norm|add_rms_norm|add_gemma_rms_norm|rms_norm_gated DTYPE ROWS H\n"
            "  mx_quantize DTYPE ROWS K | mx_dequantize DTYPE ROWS K | mxfp8_linear DTYPE M N K\n"
            "  DTYPE: f32|f16|bf16\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int reps = 1, warm = 1, a = 1;
    while (a + 1 < argc && argv[a][0] == '-') {
        if (!strcmp(argv[a], "-r")) reps = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-w")) warm = atoi(argv[a + 1]);
        else usage();
        a += 2;
    }
    if (argc - a < 4 || reps < 0 || warm < 0) usage();
    const char *kname = argv[a];
    int ki = -1;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (!strcmp(kernels[i].name, kname)) ki = (int)i;
    qk_dtype dt;
    if (ki < 0 || !parse_dtype(argv[a + 1], &dt)) usage();
    job j;
    memset(&j, 0, sizeof j);
    j.k = kernels[ki].k;
    int64_t d0, d1, d2 = 0;
    if (!parse_dim(argv[a + 2], &d0) || !parse_dim(argv[a + 3], &d1)) usage();
    if (j.k == K_LINEAR && (argc - a < 5 || !parse_dim(argv[a + 4], &d2))) usage();

    qk_set_num_threads(1);
    if (qk_init() != QK_OK) {
        fprintf(stderr, "insn_driver: qk_init: %s\n", qk_last_error());
        return 3;
    }

    char shape[96];
    const char *unit;
    int64_t elements;
    switch (j.k) {
    case K_QUANT: case K_DEQUANT:
        snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, d0, d1);
        elements = d0 * d1;
        unit = j.k == K_QUANT ? "element quantized (rows*K)" : "element dequantized (rows*K)";
        if (j.k == K_QUANT) {
            j.scale = make_zero(QK_DTYPE_E8M0, d0, (d1 + 31) / 32);
            j.x = make_filled(dt, d0, d1, 0.01, 4.0);
            j.q = make_zero(QK_DTYPE_F8_E4M3, d0, d1);
        } else {
            make_weights(d0, d1, &j.q, &j.scale);
            j.out = make_zero(dt, d0, d1);
        }
        break;
    case K_LINEAR: {
        snprintf(shape, sizeof shape, "M%" PRId64 " N%" PRId64 " K%" PRId64, d0, d1, d2);
        elements = d0 * d1 * d2;
        unit = "MAC (M*N*K)";
        j.x = make_filled(dt, d0, d2, 0.01, 4.0);
        j.out = make_zero(dt, d0, d1);
        qk_tensor wq, ws;
        make_weights(d1, d2, &wq, &ws);
        if (qk_mx_weight_create(&wq, &ws, &j.mw) != QK_OK) {
            fprintf(stderr, "insn_driver: qk_mx_weight_create: %s\n", qk_last_error());
            return 3;
        }
        free(wq.data);
        free(ws.data);
        break;
    }
    default: {
        snprintf(shape, sizeof shape, "%" PRId64 "x%" PRId64, d0, d1);
        elements = d0 * d1;
        unit = "element (rows*H)";
        j.x = make_filled(dt, d0, d1, 0.01, 2.0);
        qk_tensor w = make_filled(QK_DTYPE_BF16, 1, d1, 0.0, 0.25);
        int64_t wshape[1] = {d1};
        j.w = qk_tensor_make(w.data, QK_DTYPE_BF16, 1, wshape);
        j.out = make_zero(dt, d0, d1);
        if (j.k == K_ADD_RMS || j.k == K_ADD_GEMMA) {
            j.res = make_filled(dt, d0, d1, 0.01, 2.0);
            j.res_out = make_zero(dt, d0, d1);
        }
        if (j.k == K_GATED) j.gate = make_filled(dt, d0, d1, 0.01, 4.0);
        break;
    }
    }

    for (int i = 0; i < warm; i++) {
        if (run_once(&j) != QK_OK) {
            fprintf(stderr, "insn_driver: %s: %s\n", kname, qk_last_error());
            return 3;
        }
    }
    if (qk_insn_region(&j, reps)) {
        fprintf(stderr, "insn_driver: %s failed: %s\n", kname, qk_last_error());
        return 3;
    }
    const char *prov = qk_provider(kernels[ki].op);
    printf("kernel=%s dtype=%s shape=%s elements=%" PRId64 " unit=\"%s\" reps=%d target=%s "
           "provider=%s\n", kernels[ki].op, argv[a + 1], shape, elements, unit, reps,
           qk_target(), prov ? prov : "?");
    qk_mx_weight_destroy(j.mw);
    return 0;
}
