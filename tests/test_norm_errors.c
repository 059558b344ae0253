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


/* Every pair of tensors that must not overlap, overlapping, in three layouts: contiguous
   2-D rows, 2-D rows 8 elements apart beyond H, and 3-D (the two 2-D layouts take the
   library's short checks, the 3-D one its full sequence). Each call must fail with
   QK_ERR_LAYOUT naming both tensors and leave all memory as it was; the allowed in-place
   forms must pass in every layout, and an "in-place" output with other row strides fail. */
enum { T_X, T_W, T_RES, T_GATE, T_OUT, T_RO, T_RSTD, T_N };
static const char *const t_names[T_N] = {"x", "weight", "residual", "gate", "out", "residual_out", "rstd"};
#define AL_REG (R * (H + 8) + 64)
static float arena[2 * T_N * AL_REG], arena_copy[2 * T_N * AL_REG];

static qk_tensor al_tensor(int id, float *p, int layout)
{
    qk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = p;
    t.dtype = QK_DTYPE_F32;
    if (id == T_W) {
        t.ndim = 1; t.shape[0] = H; t.stride[0] = 1;
    } else if (id == T_RSTD) {
        t.ndim = layout == 2 ? 2 : 1;
        if (layout == 2) { t.shape[0] = 2; t.shape[1] = R / 2; t.stride[0] = R / 2; t.stride[1] = 1; }
        else { t.shape[0] = R; t.stride[0] = 1; }
    } else if (layout < 2) {
        t.ndim = 2; t.shape[0] = R; t.shape[1] = H;
        t.stride[0] = layout ? H + 8 : H; t.stride[1] = 1;
    } else {
        t.ndim = 3; t.shape[0] = 2; t.shape[1] = R / 2; t.shape[2] = H;
        t.stride[0] = (R / 2) * (H + 8); t.stride[1] = H + 8; t.stride[2] = 1;
    }
    return t;
}

/* op: 0 rms_norm with rstd, 1 gemma_rms_norm, 2 add_rms_norm, 3 add_gemma, 4 gated;
   tensor b's data is placed `shift` elements into tensor a's (-1: at a's last element;
   a < 0: none moved) */
static qk_status al_call(int op, int layout, int a, int b, int64_t shift, const qk_tensor *override_out)
{
    float *base[T_N];
    for (int k = 0; k < T_N; k++) base[k] = arena + (size_t)2 * k * AL_REG;
    qk_tensor t[T_N];
    if (a >= 0 && shift < 0) {   /* b starts at a's last element */
        const qk_tensor ta = al_tensor(a, base[a], layout);
        shift = 0;
        for (int32_t d = 0; d < ta.ndim; d++) shift += (ta.shape[d] - 1) * ta.stride[d];
    }
    if (a >= 0) base[b] = base[a] + shift;
    for (int k = 0; k < T_N; k++) t[k] = al_tensor(k, base[k], layout);
    if (override_out) { t[T_OUT] = *override_out; t[T_OUT].data = base[T_X]; }
    switch (op) {
    case 0: return qk_rms_norm(&t[T_X], &t[T_W], 1e-6f, &t[T_OUT], &t[T_RSTD]);
    case 1: return qk_gemma_rms_norm(&t[T_X], &t[T_W], 1e-6f, &t[T_OUT], NULL);
    case 2: return qk_add_rms_norm(&t[T_X], &t[T_W], &t[T_RES], 1e-6f, &t[T_OUT], &t[T_RO]);
    case 3: return qk_add_gemma_rms_norm(&t[T_X], &t[T_W], &t[T_RES], 1e-6f, &t[T_OUT], &t[T_RO]);
    default: return qk_rms_norm_gated(&t[T_X], &t[T_W], &t[T_GATE], 1e-6f, &t[T_OUT]);
    }
}

static void test_aliasing_every_pair(void)
{
    /* {op, tensor a, tensor b (one of them an output), shift of b into a} */
    static const struct { int op, a, b, shift; } cases[] = {
        {0, T_OUT, T_X, 1}, {0, T_OUT, T_W, H / 2}, {0, T_RSTD, T_X, 1}, {0, T_RSTD, T_W, 1},
        {0, T_RSTD, T_OUT, 1},
        {1, T_OUT, T_X, 1}, {1, T_OUT, T_X, H / 2}, {1, T_OUT, T_W, 3},
        {2, T_OUT, T_X, H + 1}, {2, T_OUT, T_W, H / 2}, {2, T_RO, T_RES, 1}, {2, T_RO, T_X, 0},
        {2, T_RO, T_X, H / 2}, {2, T_RO, T_W, 5}, {2, T_OUT, T_RES, 0}, {2, T_OUT, T_RES, 7},
        {2, T_OUT, T_RO, 0}, {2, T_OUT, T_RO, H},
        {3, T_OUT, T_X, 1}, {3, T_OUT, T_W, 1}, {3, T_RO, T_RES, H / 2}, {3, T_RO, T_X, 3},
        {3, T_RO, T_W, H - 1}, {3, T_OUT, T_RES, 1}, {3, T_OUT, T_RO, 2 * H},
        {4, T_OUT, T_X, 1}, {4, T_OUT, T_W, H / 2}, {4, T_OUT, T_GATE, 0}, {4, T_OUT, T_GATE, 9},
        /* b from a's last element on (shift -1): a's extent must reach its last byte */
        {0, T_OUT, T_W, -1}, {0, T_RSTD, T_W, -1}, {1, T_OUT, T_X, -1}, {2, T_RO, T_RES, -1},
        {2, T_OUT, T_RES, -1}, {3, T_RO, T_X, -1}, {3, T_OUT, T_RO, -1}, {3, T_RO, T_W, -1},
        {4, T_OUT, T_GATE, -1},
        /* an output from an input's last element on */
        {1, T_W, T_OUT, -1}, {0, T_W, T_RSTD, -1}, {3, T_W, T_RO, -1}, {3, T_X, T_RO, -1},
        {2, T_RES, T_OUT, -1}, {4, T_GATE, T_OUT, -1}, {0, T_X, T_RSTD, -1},
    };
    for (size_t i = 0; i < sizeof arena / sizeof arena[0]; i++) arena[i] = 0.25f + (float)(i % 7);
    memcpy(arena_copy, arena, sizeof arena);
    for (int layout = 0; layout < 3; layout++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int a = cases[c].a, b = cases[c].b;
            /* the message names the output first */
            const int on = a == T_OUT || a == T_RO || a == T_RSTD ? a : b, in = on == a ? b : a;
            qk_status st = al_call(cases[c].op, layout, a, b, cases[c].shift, NULL);
            const char *msg = qk_last_error();
            char an[32], bn[32];
            snprintf(an, sizeof an, ": %s ", t_names[on]);
            snprintf(bn, sizeof bn, "overlaps %s", t_names[in]);
            CHECK(st == QK_ERR_LAYOUT && strstr(msg, an) && strstr(msg, bn),
                  "layout %d op %d: %s placed %d into %s: %s (%s)", layout, cases[c].op,
                  t_names[b], cases[c].shift, t_names[a], qk_status_name(st), msg);
            CHECK(!memcmp(arena, arena_copy, sizeof arena), "layout %d case %zu: memory written",
                  layout, c);
            memcpy(arena, arena_copy, sizeof arena);
        }
        /* the in-place forms: out = x, residual_out = residual */
        for (int op = 0; op < 5; op++) {
            CHECK(al_call(op, layout, T_X, T_OUT, 0, NULL) == QK_OK, "layout %d op %d out = x: %s",
                  layout, op, qk_last_error());
            if (op == 2 || op == 3)
                CHECK(al_call(op, layout, T_RES, T_RO, 0, NULL) == QK_OK,
                      "layout %d op %d residual_out = residual: %s", layout, op, qk_last_error());
            memcpy(arena, arena_copy, sizeof arena);
        }
        /* out on x's data but with other row strides is a partial overlap, not in place */
        qk_tensor o = al_tensor(T_OUT, NULL, layout == 1 ? 0 : 1);
        if (layout == 2) { o = al_tensor(T_OUT, NULL, 2); o.stride[0] += 1; }
        for (int op = 0; op < 5; op++) {
            qk_status st = al_call(op, layout, -1, 0, 0, &o);
            CHECK(st == QK_ERR_LAYOUT && strstr(qk_last_error(), "out partially overlaps x"),
                  "layout %d op %d: out on x with other strides: %s (%s)", layout, op,
                  qk_status_name(st), qk_last_error());
            CHECK(!memcmp(arena, arena_copy, sizeof arena), "layout %d op %d: memory written", layout, op);
            memcpy(arena, arena_copy, sizeof arena);
        }
    }
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
    RUN(test_aliasing_every_pair);
    RUN(test_null_arguments);
    return qk_test_finish();
}
