/* Size arithmetic at the extremes (api.md: dims and byte spans must fit in int64): shapes and
 * strides of INT64_MAX, INT64_MIN, 2^62 and zero dims reach every op's checks without
 * signed overflow (this suite runs under UBSan with -fno-sanitize-recover), are refused with
 * QK_ERR_SHAPE / QK_ERR_LAYOUT naming the argument, and write nothing. */
#include "harness.h"
#include "qkern.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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

int main(void)
{
    qk_test_require_cpu("test_api_extremes");
    RUN(test_tensor_make_saturates);
    RUN(test_norm_extreme_shapes_and_strides);
    RUN(test_mx_extreme_k);
    return qk_test_finish();
}
