/* norm.md's edge-case table, one test per row: the status, a message naming the argument,
 * and outputs left exactly as they were (filled with a sentinel before the call). */
#include "harness.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#define R 4
#define H 40
static float xb[R * H], resb[R * H], gateb[R * H], wb[H], outb[R * H], rob[R * H], rstdb[R];
static qk_tensor x, w, res, gate, out, ro, rstd;

static void setup(void)
{
    int64_t s2[2] = {R, H}, s1[1] = {H}, sr[1] = {R};
    for (int i = 0; i < R * H; i++) xb[i] = resb[i] = gateb[i] = 0.5f;
    for (int i = 0; i < H; i++) wb[i] = 0.1f;
    memset(outb, 0x5A, sizeof outb);
    memset(rob, 0x5A, sizeof rob);
    memset(rstdb, 0x5A, sizeof rstdb);
    x = qk_tensor_make(xb, QK_DTYPE_F32, 2, s2);
    res = qk_tensor_make(resb, QK_DTYPE_F32, 2, s2);
    gate = qk_tensor_make(gateb, QK_DTYPE_F32, 2, s2);
    out = qk_tensor_make(outb, QK_DTYPE_F32, 2, s2);
    ro = qk_tensor_make(rob, QK_DTYPE_F32, 2, s2);
    w = qk_tensor_make(wb, QK_DTYPE_F32, 1, s1);
    rstd = qk_tensor_make(rstdb, QK_DTYPE_F32, 1, sr);
}

static int outputs_untouched(void)
{
    const unsigned char *p[3] = {(const unsigned char *)outb, (const unsigned char *)rob,
                                 (const unsigned char *)rstdb};
    size_t n[3] = {sizeof outb, sizeof rob, sizeof rstdb};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n[k]; i++)
            if (p[k][i] != 0x5A) return 0;
    /* inputs too */
    for (int i = 0; i < R * H; i++)
        if (xb[i] != 0.5f || resb[i] != 0.5f) return 0;
    return 1;
}

/* Runs all five ops (each with the arguments as currently set up) and checks each one. */
static void expect_all(qk_status want, const char *needle, const char *what)
{
    qk_status got[5];
    const char *fn[5] = {"qk_rms_norm", "qk_gemma_rms_norm", "qk_add_rms_norm",
                         "qk_add_gemma_rms_norm", "qk_rms_norm_gated"};
    for (int op = 0; op < 5; op++) {
        qk_tensor xs = x, ws = w, rs = res, gs = gate, os = out, r2 = ro, rt = rstd;
        switch (op) {
        case 0: got[op] = qk_rms_norm(&xs, &ws, 1e-6f, &os, &rt); break;
        case 1: got[op] = qk_gemma_rms_norm(&xs, &ws, 1e-6f, &os, &rt); break;
        case 2: got[op] = qk_add_rms_norm(&xs, &ws, &rs, 1e-6f, &os, &r2); break;
        case 3: got[op] = qk_add_gemma_rms_norm(&xs, &ws, &rs, 1e-6f, &os, &r2); break;
        default: got[op] = qk_rms_norm_gated(&xs, &ws, &gs, 1e-6f, &os); break;
        }
        const char *msg = qk_last_error();
        CHECK(got[op] == want, "%s: %s gave %s, want %s (%s)", what, fn[op],
              qk_status_name(got[op]), qk_status_name(want), msg);
        if (want != QK_OK) {
            CHECK(strstr(msg, fn[op]) == msg, "%s: message does not start with %s: '%s'", what,
                  fn[op], msg);
            CHECK(strstr(msg, needle) != NULL, "%s: %s's message '%s' does not name '%s'", what,
                  fn[op], msg, needle);
            CHECK(outputs_untouched(), "%s: %s wrote to an output", what, fn[op]);
        }
        memset(outb, 0x5A, sizeof outb);
        memset(rob, 0x5A, sizeof rob);
        memset(rstdb, 0x5A, sizeof rstdb);
    }
}

static void test_rows_zero_is_ok_and_writes_nothing(void)
{
    setup();
    x.shape[0] = out.shape[0] = res.shape[0] = gate.shape[0] = ro.shape[0] = 0;
    rstd.shape[0] = 0;
    expect_all(QK_OK, "", "rows = 0");
    CHECK(outputs_untouched(), "rows = 0 wrote something");
}

static void test_h_zero_is_shape_error(void)
{
    setup();
    x.shape[1] = out.shape[1] = res.shape[1] = gate.shape[1] = ro.shape[1] = 0;
    w.shape[0] = 0;
    expect_all(QK_ERR_SHAPE, "x", "H = 0");
}

static void test_weight_length_mismatch(void)
{
    setup();
    w.shape[0] = H - 1;
    expect_all(QK_ERR_SHAPE, "weight has shape [39] but x's last dim is 40", "weight length");
}

static void test_out_shape_mismatch(void)
{
    setup();
    out.shape[0] = R - 1;
    expect_all(QK_ERR_SHAPE, "out has shape [3, 40] but x has shape [4, 40]", "out shape");
}

static void test_eps_invalid(void)
{
    const float bad[3] = {-1e-6f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        setup();
        int64_t s1[1] = {H};
        qk_tensor x1 = qk_tensor_make(xb, QK_DTYPE_F32, 1, s1), o1 = qk_tensor_make(outb, QK_DTYPE_F32, 1, s1);
        qk_status st = qk_gemma_rms_norm(&x1, &w, bad[i], &o1, NULL);
        CHECK(st == QK_ERR_INVALID_ARGUMENT && strstr(qk_last_error(), "eps"),
              "eps %g: %s (%s)", (double)bad[i], qk_status_name(st), qk_last_error());
        qk_status st2 = qk_add_gemma_rms_norm(&x, &w, &res, bad[i], &out, &ro);
        CHECK(st2 == QK_ERR_INVALID_ARGUMENT, "add form, eps %g: %s", (double)bad[i],
              qk_status_name(st2));
        CHECK(outputs_untouched(), "eps %g: outputs written", (double)bad[i]);
    }
}

static void test_x_dtype_unsupported(void)
{
    setup();
    x.dtype = QK_DTYPE_I32;
    expect_all(QK_ERR_DTYPE, "x has dtype I32", "x dtype");
    setup();
    x.dtype = out.dtype = res.dtype = ro.dtype = QK_DTYPE_F8_E4M3;
    expect_all(QK_ERR_DTYPE, "x has dtype F8_E4M3", "x dtype F8");
}

static void test_out_dtype_differs(void)
{
    setup();
    out.dtype = QK_DTYPE_BF16;
    expect_all(QK_ERR_DTYPE, "out has dtype BF16 but x has dtype F32", "out dtype");
}

static void test_weight_dtype_unsupported(void)
{
    setup();
    w.dtype = QK_DTYPE_U8;
    expect_all(QK_ERR_DTYPE, "weight has dtype U8", "weight dtype");
}

static void test_residual_and_gate_checks(void)
{
    setup();
    res.dtype = QK_DTYPE_BF16;
    qk_status st = qk_add_gemma_rms_norm(&x, &w, &res, 1e-6f, &out, &ro);
    CHECK(st == QK_ERR_DTYPE && strstr(qk_last_error(), "residual has dtype BF16"), "%s",
          qk_last_error());
    setup();
    ro.shape[1] = H - 8;
    st = qk_add_rms_norm(&x, &w, &res, 1e-6f, &out, &ro);
    CHECK(st == QK_ERR_SHAPE && strstr(qk_last_error(), "residual_out has shape"), "%s",
          qk_last_error());
    setup();
    gate.dtype = QK_DTYPE_I8;
    st = qk_rms_norm_gated(&x, &w, &gate, 1e-6f, &out);
    CHECK(st == QK_ERR_DTYPE && strstr(qk_last_error(), "gate has dtype I8"), "%s", qk_last_error());
    setup();
    rstd.shape[0] = R + 1;
    st = qk_rms_norm(&x, &w, 1e-6f, &out, &rstd);
    CHECK(st == QK_ERR_SHAPE && strstr(qk_last_error(), "rstd has shape [5]"), "%s", qk_last_error());
    setup();
    rstd.dtype = QK_DTYPE_BF16;
    st = qk_rms_norm(&x, &w, 1e-6f, &out, &rstd);
    CHECK(st == QK_ERR_DTYPE && strstr(qk_last_error(), "rstd"), "%s", qk_last_error());
    CHECK(outputs_untouched(), "outputs written");
}

static void test_mixed_weight_dtypes_supported(void)
{
    /* weight F32 with x BF16, and every other mix */
    const qk_dtype d[3] = {QK_DTYPE_F32, QK_DTYPE_F16, QK_DTYPE_BF16};
    static uint16_t x16[H], o16[H], w16[H];
    for (int i = 0; i < H; i++) { x16[i] = 0x3f80; w16[i] = 0; }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            int64_t s1[1] = {H};
            void *xp = d[a] == QK_DTYPE_F32 ? (void *)xb : (void *)x16;
            void *op = d[a] == QK_DTYPE_F32 ? (void *)outb : (void *)o16;
            void *wp = d[b] == QK_DTYPE_F32 ? (void *)wb : (void *)w16;
            qk_tensor xt = qk_tensor_make(xp, d[a], 1, s1), wt = qk_tensor_make(wp, d[b], 1, s1);
            qk_tensor ot = qk_tensor_make(op, d[a], 1, s1);
            CHECK(qk_gemma_rms_norm(&xt, &wt, 1e-6f, &ot, NULL) == QK_OK, "x %s w %s: %s",
                  qk_dtype_name(d[a]), qk_dtype_name(d[b]), qk_last_error());
        }
}

static void test_last_dim_not_contiguous(void)
{
    setup();
    x.shape[1] = H / 2;
    x.stride[1] = 2;
    out.shape[1] = res.shape[1] = gate.shape[1] = ro.shape[1] = H / 2;
    w.shape[0] = H / 2;
    expect_all(QK_ERR_LAYOUT, "x's last dim has stride 2", "x stride");
    setup();
    out.shape[1] = H / 2; out.stride[1] = 2;
    x.shape[1] = res.shape[1] = gate.shape[1] = ro.shape[1] = H / 2;
    w.shape[0] = H / 2;
    expect_all(QK_ERR_LAYOUT, "out's last dim has stride 2", "out stride");
}

static void test_partial_overlap(void)
{
    setup();
    out.data = xb + 1; /* shifted by one element: partial overlap with x */
    out.shape[0] = R - 1; x.shape[0] = R - 1; res.shape[0] = gate.shape[0] = ro.shape[0] = R - 1;
    rstd.shape[0] = R - 1;
    qk_status st = qk_gemma_rms_norm(&x, &w, 1e-6f, &out, &rstd);
    CHECK(st == QK_ERR_LAYOUT && strstr(qk_last_error(), "out partially overlaps x"), "%s (%s)",
          qk_status_name(st), qk_last_error());
    for (int i = 0; i < (R - 1) * H; i++) CHECK(xb[i] == 0.5f, "x modified at %d", i);
    setup();
    /* residual_out aliasing x is not an allowed in-place form */
    qk_status st2 = qk_add_gemma_rms_norm(&x, &w, &res, 1e-6f, &out, &x);
    CHECK(st2 == QK_ERR_LAYOUT && strstr(qk_last_error(), "residual_out overlaps x"), "%s",
          qk_last_error());
    setup();
    /* rows written twice (stride 0) */
    out.stride[0] = 0;
    qk_status st3 = qk_rms_norm(&x, &w, 1e-6f, &out, NULL);
    CHECK(st3 == QK_ERR_LAYOUT && strstr(qk_last_error(), "out"), "%s", qk_last_error());
    CHECK(outputs_untouched(), "outputs written");
}

static void test_in_place_forms_allowed(void)
{
    setup();
    float keep[R * H];
    memcpy(keep, xb, sizeof keep);
    CHECK(qk_gemma_rms_norm(&x, &w, 1e-6f, &x, NULL) == QK_OK, "%s", qk_last_error());
    memcpy(xb, keep, sizeof keep);
    CHECK(qk_add_gemma_rms_norm(&x, &w, &res, 1e-6f, &x, &res) == QK_OK, "%s", qk_last_error());
    setup();
}

static void test_null_arguments(void)
{
    setup();
    CHECK(qk_gemma_rms_norm(NULL, &w, 1e-6f, &out, NULL) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "x is NULL"), "%s", qk_last_error());
    CHECK(qk_gemma_rms_norm(&x, NULL, 1e-6f, &out, NULL) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "weight is NULL"), "%s", qk_last_error());
    CHECK(qk_gemma_rms_norm(&x, &w, 1e-6f, NULL, NULL) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "out is NULL"), "%s", qk_last_error());
    CHECK(qk_add_gemma_rms_norm(&x, &w, NULL, 1e-6f, &out, &ro) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "residual is NULL"), "%s", qk_last_error());
    CHECK(qk_add_gemma_rms_norm(&x, &w, &res, 1e-6f, &out, NULL) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "residual_out is NULL"), "%s", qk_last_error());
    CHECK(qk_rms_norm_gated(&x, &w, NULL, 1e-6f, &out) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "gate is NULL"), "%s", qk_last_error());
    x.data = NULL;
    CHECK(qk_rms_norm(&x, &w, 1e-6f, &out, NULL) == QK_ERR_INVALID_ARGUMENT &&
          strstr(qk_last_error(), "x->data is NULL"), "%s", qk_last_error());
    setup();
    x.ndim = 5;
    CHECK(qk_rms_norm(&x, &w, 1e-6f, &out, NULL) == QK_ERR_SHAPE && strstr(qk_last_error(), "ndim"),
          "%s", qk_last_error());
    CHECK(outputs_untouched(), "outputs written");
}

static void test_status_names(void)
{
    CHECK(!strcmp(qk_status_name(QK_ERR_SHAPE), "QK_ERR_SHAPE"), "status name");
    CHECK(!strcmp(qk_status_name(QK_OK), "QK_OK"), "status name");
    CHECK(!strcmp(qk_status_name(QK_ERR_FORMAT), "QK_ERR_FORMAT"), "status name");
    CHECK(QK_ERR_FORMAT == 9 && QK_DTYPE_I64 == 10 && QK_DTYPE_E8M0 == 6, "enumerator values");
    CHECK(sizeof(qk_tensor) == 80, "qk_tensor is %zu bytes", sizeof(qk_tensor));
    CHECK(!strcmp(qk_dtype_name(QK_DTYPE_E8M0), "F8_E8M0"), "dtype name");
    CHECK(qk_abi_version() == QK_ABI_VERSION, "abi");
}

int main(void)
{
    qk_test_require_cpu("test_norm_errors");
    RUN(test_status_names);
    RUN(test_rows_zero_is_ok_and_writes_nothing);
    RUN(test_h_zero_is_shape_error);
    RUN(test_weight_length_mismatch);
    RUN(test_out_shape_mismatch);
    RUN(test_eps_invalid);
    RUN(test_x_dtype_unsupported);
    RUN(test_out_dtype_differs);
    RUN(test_weight_dtype_unsupported);
    RUN(test_residual_and_gate_checks);
    RUN(test_mixed_weight_dtypes_supported);
    RUN(test_last_dim_not_contiguous);
    RUN(test_partial_overlap);
    RUN(test_in_place_forms_allowed);
    RUN(test_null_arguments);
    return qk_test_finish();
}
