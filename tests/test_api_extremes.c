/* Size arithmetic at the extremes (api.md: dims and byte spans must fit in int64): shapes and
 * strides of INT64_MAX, INT64_MIN, 2^62 and zero dims reach every op's checks without
 * signed overflow (this suite runs under UBSan with -fno-sanitize-recover), are refused with
 * QK_ERR_SHAPE / QK_ERR_LAYOUT naming the argument, and write nothing. The same for the
 * checked helpers themselves (src/api/ckd.h) and for the sizes src/io and src/serve compute
 * from callers' shapes: tensor-parallel splits of K = INT64_MAX, layer and block sizes whose
 * byte counts wrap 64 bits, activations whose padded or intermediate copies would, strides
 * of INT64_MIN on tensors given to load. */
#define _GNU_SOURCE
#include "harness.h"
#include "qkern.h"
#include "qkern_io.h"
#include "qkern_serve.h"
#include "api/ckd.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P2(n) ((int64_t)1 << (n))

enum { H = 8, ROWS = 3 };
static uint16_t xbuf[ROWS * H], wbuf[H], obuf[ROWS * H];

static void fill(void)
{
    for (int i = 0; i < ROWS * H; i++) xbuf[i] = 0x3f80; /* 1.0 */
    for (int i = 0; i < H; i++) wbuf[i] = 0;
    for (int i = 0; i < ROWS * H; i++) obuf[i] = 0x7777;
}

static bool out_untouched(void)
{
    for (int i = 0; i < ROWS * H; i++)
        if (obuf[i] != 0x7777) return false;
    return true;
}

static void expect_refused(const char *what, qk_status st, qk_status want, const char *needle)
{
    CHECK(st == want, "%s: %s, expected %s (%s)", what, qk_status_name(st), qk_status_name(want),
          qk_last_error());
    CHECK(strstr(qk_last_error(), needle) != NULL, "%s: \"%s\" lacks \"%s\"", what, qk_last_error(),
          needle);
    CHECK(out_untouched(), "%s: out was written", what);
}

static void test_tensor_make_saturates(void)
{
    const int64_t big[2] = {INT64_MAX, 4}, big3[3] = {1 << 30, 1 << 30, 1 << 30};
    qk_tensor t = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, big);
    CHECK(t.stride[1] == 1 && t.stride[0] == 4, "strides of [INT64_MAX, 4]: %lld %lld",
          (long long)t.stride[0], (long long)t.stride[1]);
    t = qk_tensor_make(xbuf, QK_DTYPE_BF16, 3, big3);
    CHECK(t.stride[0] == (int64_t)1 << 60, "2^30 cubed: stride %lld", (long long)t.stride[0]);
    const int64_t huge[4] = {INT64_MAX, INT64_MAX, INT64_MAX, 2};
    t = qk_tensor_make(xbuf, QK_DTYPE_BF16, 4, huge); /* no overflow: saturated, not wrapped */
    CHECK(t.stride[0] == INT64_MAX, "saturated stride %lld", (long long)t.stride[0]);
}

static void test_norm_extreme_shapes_and_strides(void)
{
    const int64_t xs[2] = {ROWS, H}, ws[1] = {H};
    qk_tensor w = qk_tensor_make(wbuf, QK_DTYPE_BF16, 1, ws);
    struct { const char *what; int64_t s0; qk_status want; const char *needle; } strides[] = {
        {"x row stride INT64_MIN", INT64_MIN, QK_ERR_LAYOUT, "stride"},
        {"x row stride 2^62", (int64_t)1 << 62, QK_ERR_LAYOUT, "INT64_MAX"},
        {"x row stride INT64_MAX", INT64_MAX, QK_ERR_LAYOUT, "INT64_MAX"},
        {"x row stride -2^62", -((int64_t)1 << 62), QK_ERR_LAYOUT, "INT64_MAX"},
    };
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++) {
        fill();
        qk_tensor x = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, xs), o = qk_tensor_make(obuf, QK_DTYPE_BF16, 2, xs);
        x.stride[0] = strides[i].s0;
        expect_refused(strides[i].what, qk_gemma_rms_norm(&x, &w, 1e-6f, &o, NULL), strides[i].want,
                       strides[i].needle);
        /* the same stride on the output (the self-overlap check must not overflow either) */
        x = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, xs);
        o.stride[0] = strides[i].s0;
        expect_refused(strides[i].what, qk_gemma_rms_norm(&x, &w, 1e-6f, &o, NULL), strides[i].want,
                       strides[i].needle);
    }
    /* dims whose product overflows, and a weight of INT64_MAX elements */
    fill();
    const int64_t xb[3] = {(int64_t)1 << 40, (int64_t)1 << 40, H};
    qk_tensor x = qk_tensor_make(xbuf, QK_DTYPE_BF16, 3, xb), o = qk_tensor_make(obuf, QK_DTYPE_BF16, 3, xb);
    expect_refused("x [2^40, 2^40, 8]", qk_gemma_rms_norm(&x, &w, 1e-6f, &o, NULL), QK_ERR_SHAPE,
                   "INT64_MAX elements");
    const int64_t x0[2] = {0, INT64_MAX}, wmax[1] = {INT64_MAX};
    x = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, x0);
    o = qk_tensor_make(obuf, QK_DTYPE_BF16, 2, x0);
    qk_tensor wm = qk_tensor_make(wbuf, QK_DTYPE_BF16, 1, wmax);
    expect_refused("weight [INT64_MAX] (x has no rows)", qk_gemma_rms_norm(&x, &wm, 1e-6f, &o, NULL),
                   QK_ERR_LAYOUT, "weight spans more than INT64_MAX bytes");
    /* zero rows of any width with a matching empty-shaped weight: nothing to do */
    const int64_t xz[2] = {0, H};
    x = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, xz);
    o = qk_tensor_make(obuf, QK_DTYPE_BF16, 2, xz);
    CHECK(qk_gemma_rms_norm(&x, &w, 1e-6f, &o, NULL) == QK_OK && out_untouched(), "0 rows: %s",
          qk_last_error());
}

static void test_mx_extreme_k(void)
{
    /* x [0, INT64_MAX]: the scale count ceil(INT64_MAX / 32) is computed without overflow */
    const int64_t xs[2] = {0, INT64_MAX}, ss[2] = {0, INT64_MAX / 32 + 1}, sbad[2] = {0, INT64_MAX / 32};
    float xf[1] = {0};
    uint8_t q[1] = {0}, s[1] = {0};
    qk_tensor x = qk_tensor_make(xf, QK_DTYPE_F32, 2, xs), tq = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, xs),
              ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    CHECK(qk_mx_quantize(&x, NULL, &tq, &ts) == QK_OK, "[0, INT64_MAX] quantize: %s", qk_last_error());
    ts = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sbad);
    CHECK(qk_mx_quantize(&x, NULL, &tq, &ts) == QK_ERR_SHAPE && strstr(qk_last_error(), "ceil"),
          "floor-sized scale for K = INT64_MAX: %s", qk_last_error());
    /* a weight [2^62, 2^62] is refused before anything is allocated */
    const int64_t wq[2] = {(int64_t)1 << 62, (int64_t)1 << 62}, wsc[2] = {(int64_t)1 << 62, (int64_t)1 << 57};
    qk_tensor q2 = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, wq), s2 = qk_tensor_make(s, QK_DTYPE_E8M0, 2, wsc);
    qk_mx_weight *w = NULL;
    CHECK(qk_mx_weight_create(&q2, &s2, &w) == QK_ERR_SHAPE && w == NULL, "[2^62, 2^62] weight: %s",
          qk_last_error());
    /* a row stride of INT64_MIN on the codes */
    const int64_t q3[2] = {2, 32}, s3[2] = {2, 1};
    uint8_t qq[64] = {0}, sc[2] = {127, 127};
    qk_tensor q4 = qk_tensor_make(qq, QK_DTYPE_F8_E4M3, 2, q3), s4 = qk_tensor_make(sc, QK_DTYPE_E8M0, 2, s3);
    q4.stride[0] = INT64_MIN;
    CHECK(qk_mx_weight_create(&q4, &s4, &w) == QK_ERR_LAYOUT && w == NULL, "q row stride INT64_MIN: %s",
          qk_last_error());
}

static void test_checked_helpers(void)
{
    int64_t r;
    uint64_t u;
    size_t z;
    CHECK(qk_ckd_mul_i64(P2(31), P2(31), &r) && r == P2(62), "2^31 x 2^31");
    CHECK(!qk_ckd_mul_i64(P2(31), P2(32), &r), "2^31 x 2^32 overflows");
    CHECK(!qk_ckd_mul_i64(INT64_MIN, -1, &r), "INT64_MIN x -1 overflows");
    CHECK(!qk_ckd_add_i64(INT64_MAX, 1, &r) && qk_ckd_add_i64(INT64_MAX, 0, &r) && r == INT64_MAX, "add");
    CHECK(!qk_ckd_sub_i64(INT64_MIN, 1, &r), "INT64_MIN - 1");
    CHECK(!qk_ckd_mul_u64(UINT64_MAX, 2, &u) && qk_ckd_mul_u64(P2(32), P2(31), &u) && u == (uint64_t)1 << 63,
          "u64 mul");
    CHECK(!qk_ckd_add_u64(UINT64_MAX, 1, &u), "u64 add");
    CHECK(qk_ckd_bytes(INT64_MAX, 1, &z) && z == (size_t)INT64_MAX, "INT64_MAX bytes");
    CHECK(!qk_ckd_bytes(P2(62), 2, &z) && !qk_ckd_bytes(P2(62), 4, &z), "2^62 x 2 / 4 bytes (2^64 wraps to 0)");
    CHECK(!qk_ckd_bytes(-1, 1, &z), "a negative count");
    CHECK(qk_ckd_bytes(0, 8, &z) && z == 0, "zero elements");
    CHECK(!qk_ckd_bytes2(P2(57), 128, 4, &z), "2^57 x 128 x 4 (wraps to 0)");
    CHECK(!qk_ckd_bytes2(P2(32), P2(32), 1, &z) && qk_ckd_bytes2(P2(31), P2(31), 1, &z) && z == (size_t)P2(62),
          "2-D byte counts");
    const int64_t zero_first[3] = {0, INT64_MAX, 2}, zero_ok[3] = {5, 0, P2(40)}, big[2] = {P2(62), 2},
                  neg[2] = {3, -1};
    CHECK(!qk_ckd_numel(zero_first, 3, &r), "[0, INT64_MAX, 2]: the non-zero dims overflow");
    CHECK(qk_ckd_numel(zero_ok, 3, &r) && r == 0, "[5, 0, 2^40] has 0 elements");
    const int64_t fits[2] = {P2(31), P2(31)};
    CHECK(!qk_ckd_numel(big, 2, &r), "[2^62, 2] has 2^63 elements");
    CHECK(qk_ckd_numel(fits, 2, &r) && r == P2(62), "[2^31, 2^31] has 2^62 elements");
    CHECK(!qk_ckd_numel(neg, 2, &r), "a negative dim");
    CHECK(qk_sat_mul_i64(P2(40), P2(40)) == INT64_MAX && qk_sat_mul_i64(3, 4) == 12, "saturating");
}

/* Row-parallel splits of K = INT64_MAX: the last rank's end, 32 x ceil(K / 32), is past
   INT64_MAX and must not be computed */
static void test_tp_split_of_int64_max(void)
{
    qk_tp tp = {QK_TP_ROW, QK_TP_BLOCK_ALIGNED, 1, 2};
    qk_tp_part p;
    CHECK(qk_tp_partition(1, INT64_MAX, &tp, &p) == QK_OK, "block_aligned, rank 1 of 2: %s", qk_last_error());
    CHECK(p.kb0 == P2(57) && p.kb == P2(57) && p.k0 == P2(62) && p.k == INT64_MAX - P2(62),
          "rank 1: blocks [%lld, +%lld), columns [%lld, +%lld)", (long long)p.kb0, (long long)p.kb,
          (long long)p.k0, (long long)p.k);
    tp.rank = 0;
    CHECK(qk_tp_partition(1, INT64_MAX, &tp, &p) == QK_OK && p.k0 == 0 && p.k == P2(62) && p.kb == P2(57),
          "rank 0: [%lld, +%lld)", (long long)p.k0, (long long)p.k);
    /* the even split is refused (K is odd), and its message states the block-aligned one */
    tp.policy = QK_TP_EVEN;
    CHECK(qk_tp_partition(1, INT64_MAX, &tp, &p) == QK_ERR_SHAPE &&
              strstr(qk_last_error(), "block_aligned): 4611686018427387904 + 4611686018427387903 elements "
                                      "(144115188075855872 + 144115188075855872 blocks)"),
          "even split of INT64_MAX: %s", qk_last_error());
    tp.policy = QK_TP_SHARED_BLOCK;
    tp.rank = 1;
    CHECK(qk_tp_partition(1, INT64_MAX - 1, &tp, &p) == QK_OK && p.k == P2(62) - 1 && p.pad == 31 && p.kb == P2(57) + 1,
          "shared_block of INT64_MAX - 1: k %lld pad %lld (%s)", (long long)p.k, (long long)p.pad, qk_last_error());
    /* placeholders of [1, 2^62] are refused before allocating: they are 2^62 bytes, which one
       allocation holds, but not a scale of [2^62, ceil(2^62/32)] */
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("p", P2(40), P2(40), false, NULL, &l) == QK_ERR_SHAPE && l == NULL &&
              strstr(qk_last_error(), "\"p\": this rank's weight [1099511627776, 1099511627776]"),
          "[2^40, 2^40] linear: %s", qk_last_error());
    CHECK(qk_mx_linear_create_weights("p", 64, P2(62), true, NULL, &l) == QK_ERR_SHAPE && l == NULL &&
              strstr(qk_last_error(), "more bytes than one allocation can hold"),
          "[2^62, 64] linear with a bias: %s", qk_last_error());
}

/* a norm layer of 2^62 F32 elements is 2^64 bytes: wrapped, that is a malloc(0) filled with
   2^62 floats */
static void test_layer_sizes_that_wrap(void)
{
    qk_layer_options o = qk_layer_options_default();
    o.weight_dtype = QK_DTYPE_F32;
    qk_norm_layer *n = NULL;
    CHECK(qk_norm_layer_create(QK_LAYER_RMS_NORM, "model.norm", P2(62), 1e-6f, &o, &n) == QK_ERR_SHAPE &&
              n == NULL && strstr(qk_last_error(), "\"model.norm\": hidden size 4611686018427387904 x F32 "
                                                   "takes more bytes than one allocation can hold"),
          "RMSNorm of 2^62 F32: %s", qk_last_error());
    o.weight_dtype = QK_DTYPE_BF16;
    CHECK(qk_norm_layer_create(QK_LAYER_GEMMA_RMS_NORM, "g", INT64_MAX, 1e-6f, &o, &n) == QK_ERR_SHAPE && n == NULL,
          "GemmaRMSNorm of INT64_MAX BF16: %s", qk_last_error());
    /* a text block whose gate_up_proj would have 2 x INT64_MAX rows */
    qk_qwen35_config c;
    CHECK(qk_qwen35_config_get("0.8B", &c) == QK_OK, "%s", qk_last_error());
    qk_qwen35_text_mlp *b = NULL;
    c.intermediate_size = P2(62);
    CHECK(qk_qwen35_text_mlp_create(&c, 0, NULL, &b) == QK_ERR_SHAPE && b == NULL &&
              strstr(qk_last_error(), "intermediate size 4611686018427387904: gate_up_proj's 2 x"),
          "intermediate 2^62: %s", qk_last_error());
    c.intermediate_size = INT64_MAX;
    CHECK(qk_qwen35_text_mlp_create(&c, 0, NULL, &b) == QK_ERR_SHAPE && b == NULL, "intermediate INT64_MAX: %s",
          qk_last_error());
}

/* Inputs whose own sizes fit, but whose copies made inside a call would wrap: a broadcast
   x (row stride 0) of 2^57 rows x 32 F32 is a valid 128-byte tensor; its [2^57, 32] F32
   intermediate is 2^64 bytes */
static void test_intermediates_that_wrap(void)
{
    static float xs[64];
    static uint16_t outb[64];
    for (int i = 0; i < 64; i++) outb[i] = 0x7777;
    qk_qwen35_config c = {32, 32, 1e-6f, 32, 64};
    qk_qwen35_text_mlp *tb = NULL;
    CHECK(qk_qwen35_text_mlp_create(&c, 0, NULL, &tb) == QK_OK, "%s", qk_last_error());
    const int64_t xsh[2] = {P2(57), 32};
    qk_tensor x = qk_tensor_make(xs, QK_DTYPE_F32, 2, xsh), out = qk_tensor_make(outb, QK_DTYPE_BF16, 2, xsh);
    x.stride[0] = 0;
    out.stride[0] = 0;
    if (tb) {
        CHECK(qk_qwen35_text_mlp_forward(tb, QK_BACKEND_DEFAULT, &x, NULL, &out, NULL) == QK_ERR_SHAPE &&
                  strstr(qk_last_error(), "qk_qwen35_text_mlp_forward: a [144115188075855872, 32] F32 "
                                          "intermediate of x's rows takes more bytes"),
              "text block on 2^57 broadcast rows: %s", qk_last_error());
        /* x's own dims past INT64_MAX elements: refused by the tensor check, naming x */
        const int64_t huge[3] = {P2(40), P2(40), 32};
        qk_tensor xh = qk_tensor_make(xs, QK_DTYPE_F32, 3, huge);
        xh.stride[0] = xh.stride[1] = 0;
        CHECK(qk_qwen35_text_mlp_forward(tb, QK_BACKEND_DEFAULT, &xh, NULL, &out, NULL) == QK_ERR_SHAPE &&
                  strstr(qk_last_error(), "qk_qwen35_text_mlp_forward: x's dims multiply to more than INT64_MAX"),
              "x of 2^85 elements: %s", qk_last_error());
    }
    qk_qwen35_text_mlp_destroy(tb);
    qk_qwen35_vision_mlp *vb = NULL;
    CHECK(qk_qwen35_vision_mlp_create(&c, 0, NULL, &vb) == QK_OK, "%s", qk_last_error());
    if (vb)
        CHECK(qk_qwen35_vision_mlp_forward(vb, QK_BACKEND_DEFAULT, &x, &out) == QK_ERR_SHAPE &&
                  strstr(qk_last_error(), "qk_qwen35_vision_mlp_forward: a [144115188075855872, 64] F32"),
              "vision block on 2^57 broadcast rows: %s", qk_last_error());
    qk_qwen35_vision_mlp_destroy(vb);
    /* the activations: a row count past INT64_MAX */
    const int64_t gsh[3] = {P2(62), 2, 4}, osh[3] = {P2(62), 2, 2};
    qk_tensor g = qk_tensor_make(xs, QK_DTYPE_F32, 3, gsh), o = qk_tensor_make(outb, QK_DTYPE_BF16, 3, osh);
    g.stride[0] = g.stride[1] = 0;
    CHECK(qk_serve_silu_and_mul(&g, &o) == QK_ERR_SHAPE &&
              strstr(qk_last_error(), "qk_serve_silu_and_mul: gate_up's dims multiply to more than INT64_MAX"),
          "silu_and_mul of 2^63 rows: %s", qk_last_error());
    bool untouched = true;
    for (int i = 0; i < 64; i++) untouched = untouched && outb[i] == 0x7777;
    CHECK(untouched, "an output was written");
}

/* A processed row-parallel (shared_block) linear pads x to whole blocks: 2^56 broadcast
   rows of 48 F32 are a valid x, padded to 64 columns they are 2^64 bytes */
static void test_padded_activation_that_wraps(void)
{
    qk_tp tp = {QK_TP_ROW, QK_TP_SHARED_BLOCK, 1, 2};
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("lin", 96, 1, false, &tp, &l) == QK_OK, "%s", qk_last_error());
    if (!l) return;
    CHECK(qk_mx_linear_part(l)->pad == 16 && qk_mx_linear_part(l)->k == 48, "pad %lld",
          (long long)qk_mx_linear_part(l)->pad);
    static uint8_t w[96], sc[3] = {127, 127, 127};
    const int64_t wsh[2] = {1, 96}, ssh[2] = {1, 3};
    qk_tensor tw = qk_tensor_make(w, QK_DTYPE_F8_E4M3, 2, wsh), ts = qk_tensor_make(sc, QK_DTYPE_U8, 2, ssh);
    /* a weight whose row stride is INT64_MIN: refused before the copy computes an offset */
    qk_tensor bad = tw;
    bad.stride[1] = INT64_MIN;
    CHECK(qk_mx_linear_load(l, "lin.weight", &bad) == QK_ERR_LAYOUT &&
              strstr(qk_last_error(), "qk_mx_linear_load: lin.weight's dim 1 has stride -9223372036854775808"),
          "weight column stride INT64_MIN: %s", qk_last_error());
    CHECK(qk_mx_linear_load(l, "lin.weight", &tw) == QK_OK, "%s", qk_last_error());
    CHECK(qk_mx_linear_load(l, "lin.weight_scale", &ts) == QK_OK, "%s", qk_last_error());
    qk_status st = qk_mx_linear_process_weights_after_loading(l, 0);
    if (st == QK_ERR_UNSUPPORTED) {
        qk_test_skip("padded activation", "qk_mx_weight_create is not in this build");
    } else {
        CHECK(st == QK_OK, "process: %s", qk_last_error());
        static float xs[48];
        static float ob[4] = {7, 7, 7, 7};
        const int64_t xsh[2] = {P2(56), 48}, osh[2] = {P2(56), 1};
        qk_tensor x = qk_tensor_make(xs, QK_DTYPE_F32, 2, xsh), out = qk_tensor_make(ob, QK_DTYPE_F32, 2, osh);
        x.stride[0] = 0;
        out.stride[0] = 0;
        CHECK(qk_mx_linear_apply(l, &x, &out) == QK_ERR_SHAPE &&
                  strstr(qk_last_error(), "linear \"lin\": x's 72057594037927936 rows padded to 64 columns take "
                                          "more bytes than one allocation can hold"),
              "2^56 rows padded: %s", qk_last_error());
        CHECK(ob[0] == 7 && ob[1] == 7, "out was written");
    }
    qk_mx_linear_destroy(l);
}

/* the safetensors writer: a contiguous [INT64_MAX, 4] tensor, and a file past 2^63 bytes */
static void test_writer_extremes(void)
{
    const char *t = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/qk_extremes_XXXXXX", t && *t ? t : "/tmp");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    qk_st_writer *w = NULL;
    CHECK(qk_st_writer_create(path, 0, &w) == QK_OK, "%s", qk_last_error());
    if (!w) return;
    const int64_t sh[2] = {INT64_MAX, 4};
    qk_tensor big = qk_tensor_make(xbuf, QK_DTYPE_BF16, 2, sh);
    CHECK(qk_st_writer_add_tensor(w, "big", &big) == QK_ERR_SHAPE &&
              strstr(qk_last_error(), "\"big\": element count overflows"),
          "[INT64_MAX, 4]: %s", qk_last_error());
    /* INT64_MAX bytes of data after an 8-byte length and a header: past what an off_t holds */
    const int64_t one[1] = {INT64_MAX};
    CHECK(qk_st_writer_declare(w, "u8", "U8", 1, one, NULL) == QK_OK, "%s", qk_last_error());
    CHECK(qk_st_writer_write(w, "u8", xbuf, 0) == QK_ERR_SHAPE &&
              strstr(qk_last_error(), "the file would exceed 2^63 bytes"),
          "an INT64_MAX-byte tensor: %s", qk_last_error());
    qk_st_writer_destroy(w);
    /* nothing was written: no file, no temporary file */
    CHECK(rmdir(dir) == 0, "%s is not empty after the refused writes", dir);
}

int main(void)
{
    qk_test_require_cpu("test_api_extremes");
    RUN(test_tensor_make_saturates);
    RUN(test_norm_extreme_shapes_and_strides);
    RUN(test_mx_extreme_k);
    RUN(test_checked_helpers);
    RUN(test_tp_split_of_int64_max);
    RUN(test_layer_sizes_that_wrap);
    RUN(test_intermediates_that_wrap);
    RUN(test_padded_activation_that_wraps);
    RUN(test_writer_extremes);
    return qk_test_finish();
}
