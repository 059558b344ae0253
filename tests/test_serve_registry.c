/* serving.md, "Kernel backend registry": which backends each op registers, explicit choice
 * is strict, the forced switch (environment and API; one stderr line per op it cannot
 * serve), priority library > target > reference, provider libraries loaded by path with
 * actionable errors (missing file, no entry point, ABI mismatch) and nothing half-loaded,
 * and qk info's listing. */
#define _GNU_SOURCE
#include "harness.h"
#include "serve/serve_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static const qk_serve_op norm_ops[] = {QK_OP_GEMMA_RMS_NORM, QK_OP_ADD_GEMMA_RMS_NORM,
                                       QK_OP_RMS_NORM, QK_OP_ADD_RMS_NORM, QK_OP_RMS_NORM_GATED};

/* ---- stderr capture ---- */
static int cap_fd = -1;
static char cap_path[64];

static void capture_begin(void)
{
    fflush(stderr);
    snprintf(cap_path, sizeof cap_path, "/tmp/qk_serve_stderr_XXXXXX");
    int fd = mkstemp(cap_path);
    cap_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Returns what was written to stderr since capture_begin (malloc'd). */
static char *capture_end(void)
{
    fflush(stderr);
    dup2(cap_fd, 2);
    close(cap_fd);
    FILE *f = fopen(cap_path, "rb");
    char *buf = calloc(1, 65536);
    if (f && buf) {
        size_t n = fread(buf, 1, 65535, f);
        buf[n] = 0;
    }
    if (f) fclose(f);
    unlink(cap_path);
    return buf;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* ---- small tensors ---- */
enum { ROWS = 3, H = 40 };
static uint16_t xb[ROWS * H], wb[H], ob[ROWS * H], ob2[ROWS * H];

static void fill_inputs(void)
{
    uint64_t s = 7;
    for (int i = 0; i < ROWS * H; i++) xb[i] = qk_f32_to_bf16((float)qk_rand_normal(&s));
    for (int i = 0; i < H; i++) wb[i] = qk_f32_to_bf16((float)(0.1 * qk_rand_normal(&s)));
}

static qk_tensor t2(uint16_t *p) { int64_t sh[2] = {ROWS, H}; return qk_tensor_make(p, QK_DTYPE_BF16, 2, sh); }
static qk_tensor t1(uint16_t *p) { int64_t h = H; return qk_tensor_make(p, QK_DTYPE_BF16, 1, &h); }

/* ---- cases ---- */
static void environment_force_backend(void)
{
    /* main() set QK_FORCE_BACKEND=reference before the first registry call */
    CHECK(qk_serve_init() == QK_OK, "%s", qk_last_error());
    CHECK(qk_serve_forced_backend() == QK_BACKEND_REFERENCE, "forced %d", qk_serve_forced_backend());
    qk_backend c = QK_BACKEND_DEFAULT;
    CHECK(qk_serve_select(QK_OP_GEMMA_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK &&
          c == QK_BACKEND_REFERENCE, "forced reference not applied: %d", c);
    CHECK(qk_serve_force_backend(QK_BACKEND_DEFAULT) == QK_OK, "clear");
    CHECK(qk_serve_forced_backend() == QK_BACKEND_DEFAULT, "not cleared");
}

static void each_op_registers_target_and_reference(void)
{
    for (int i = 0; i < QK_OP_COUNT; i++) {
        qk_serve_op op = (qk_serve_op)i;
        qk_backend v[QK_BACKEND_COUNT];
        size_t n = qk_serve_backends(op, v, QK_BACKEND_COUNT);
        bool ref = false, tgt = false, lib = false;
        for (size_t k = 0; k < n; k++) {
            ref |= v[k] == QK_BACKEND_REFERENCE;
            tgt |= v[k] == QK_BACKEND_TARGET;
            lib |= v[k] == QK_BACKEND_LIBRARY;
        }
        CHECK(ref, "%s: reference not registered", qk_serve_op_name(op));
        CHECK(!lib, "%s: library registered with none loaded", qk_serve_op_name(op));
        const bool staged = qk_provider(qk_serve_api_op_name(op)) != NULL;
        CHECK(tgt == staged, "%s: target registered %d, target stages %d", qk_serve_op_name(op),
              tgt, staged);
        char d[256], want[128];
        if (tgt) {
            snprintf(want, sizeof want, "%s/%s", qk_target(), qk_provider(qk_serve_api_op_name(op)));
            CHECK(!strcmp(qk_backend_describe(QK_BACKEND_TARGET, op, d, sizeof d), want),
                  "%s: target described as %s, expected %s", qk_serve_op_name(op), d, want);
        }
        CHECK(!strcmp(qk_backend_describe(QK_BACKEND_REFERENCE, op, d, sizeof d), "ref"), "%s", d);
    }
    /* the Gemma ops: exactly target and reference (no legacy or duplicate path) */
    for (int i = 0; i < 2; i++) {
        qk_backend v[QK_BACKEND_COUNT];
        size_t n = qk_serve_backends(norm_ops[i], v, QK_BACKEND_COUNT);
        CHECK(n == 2 && v[0] == QK_BACKEND_TARGET && v[1] == QK_BACKEND_REFERENCE,
              "%s registers %zu backends", qk_serve_op_name(norm_ops[i]), n);
    }
    CHECK(qk_serve_op_name(QK_OP_COUNT) == NULL && qk_backend_name(QK_BACKEND_COUNT) == NULL, "bounds");
    qk_serve_op op;
    CHECK(qk_serve_op_parse("mxfp8_linear", &op) == QK_OK && op == QK_OP_MXFP8_LINEAR, "parse");
    CHECK(qk_serve_op_parse("gemma", &op) == QK_ERR_INVALID_ARGUMENT, "parse bad");
    qk_backend b;
    CHECK(qk_backend_parse("reference", &b) == QK_OK && b == QK_BACKEND_REFERENCE, "parse backend");
    CHECK(qk_backend_parse("ref", &b) == QK_ERR_INVALID_ARGUMENT, "parse bad backend");
}

static void default_selection_is_target(void)
{
    for (size_t i = 0; i < sizeof norm_ops / sizeof norm_ops[0]; i++) {
        qk_backend c;
        CHECK(qk_serve_select(norm_ops[i], QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET,
              "%s selected %d", qk_serve_op_name(norm_ops[i]), c);
    }
    qk_backend c;
    CHECK(qk_serve_select(QK_OP_MXFP8_LINEAR, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET,
          "mxfp8_linear selected %d", c);
}

static void explicit_choice_is_strict(void)
{
    qk_backend c = QK_BACKEND_DEFAULT;
    qk_status st = qk_serve_select(QK_OP_GEMMA_RMS_NORM, QK_BACKEND_LIBRARY, &c);
    const char *m = qk_last_error();
    CHECK(st == QK_ERR_UNSUPPORTED, "status %s", qk_status_name(st));
    CHECK(c == QK_BACKEND_DEFAULT, "chosen written on failure");
    CHECK(strstr(m, "gemma_rms_norm") && strstr(m, "'library'") && strstr(m, "QK_PROVIDER_LIB") &&
          strstr(m, "target (") && strstr(m, "reference (ref)"), "message: %s", m);
    /* a per-call op with that choice fails and writes nothing */
    memset(ob, 0xAB, sizeof ob);
    qk_tensor x = t2(xb), w = t1(wb), o = t2(ob);
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_LIBRARY, &x, &w, 1e-6f, &o, NULL) == QK_ERR_UNSUPPORTED,
          "per-call explicit library");
    bool untouched = true;
    for (int i = 0; i < ROWS * H; i++) untouched &= ob[i] == 0xABAB;
    CHECK(untouched, "out written by a failing call");
    CHECK(qk_serve_select(QK_OP_RMS_NORM, (qk_backend)9, &c) == QK_ERR_INVALID_ARGUMENT, "bad backend");
}

static void per_call_ops_match_the_api(void)
{
    qk_tensor x = t2(xb), w = t1(wb), o = t2(ob), o2 = t2(ob2);
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_TARGET, &x, &w, 1e-6f, &o, NULL) == QK_OK, "%s", qk_last_error());
    CHECK(qk_gemma_rms_norm(&x, &w, 1e-6f, &o2, NULL) == QK_OK, "api");
    CHECK(!memcmp(ob, ob2, sizeof ob), "target differs from qk_gemma_rms_norm");
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_REFERENCE, &x, &w, 1e-6f, &o, NULL) == QK_OK, "ref");
    CHECK(qk_norm_run(QK_NORM_GEMMA, &qk_provider_ref.ops.norm[QK_NORM_GEMMA], &x, &w, NULL, 1e-6f,
                      &o2, NULL) == QK_OK, "ref direct");
    CHECK(!memcmp(ob, ob2, sizeof ob), "reference differs from the reference provider");
    /* a bad argument through the registry is the API's own error */
    int64_t bad = H + 1;
    qk_tensor wbad = qk_tensor_make(wb, QK_DTYPE_BF16, 1, &bad);
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_REFERENCE, &x, &wbad, 1e-6f, &o, NULL) == QK_ERR_SHAPE, "shape");
    /* mxfp8_quantize: reference equals the target (when staged) bit for bit */
    enum { K = 100, KB = 4 };
    float xf[2 * K];
    uint8_t q1[2 * K], s1[2 * KB], q2[2 * K], s2[2 * KB];
    uint64_t r = 3;
    for (int i = 0; i < 2 * K; i++) xf[i] = (float)qk_rand_normal(&r);
    int64_t xs[2] = {2, K}, ss[2] = {2, KB};
    qk_tensor xt = qk_tensor_make(xf, QK_DTYPE_F32, 2, xs);
    qk_tensor qt = qk_tensor_make(q1, QK_DTYPE_F8_E4M3, 2, xs), st1 = qk_tensor_make(s1, QK_DTYPE_E8M0, 2, ss);
    qk_tensor qt2 = qk_tensor_make(q2, QK_DTYPE_F8_E4M3, 2, xs), st2 = qk_tensor_make(s2, QK_DTYPE_E8M0, 2, ss);
    CHECK(qk_serve_mxfp8_quantize(QK_BACKEND_REFERENCE, &xt, NULL, &qt, &st1) == QK_OK, "%s", qk_last_error());
    if (qk_backend_implements(QK_BACKEND_TARGET, QK_OP_MXFP8_QUANTIZE)) {
        CHECK(qk_serve_mxfp8_quantize(QK_BACKEND_TARGET, &xt, NULL, &qt2, &st2) == QK_OK, "target");
        CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(s1, s2, sizeof s1), "quantize differs");
    } else {
        CHECK(qk_serve_mxfp8_quantize(QK_BACKEND_TARGET, &xt, NULL, &qt2, &st2) == QK_ERR_UNSUPPORTED,
              "target stages no quantize but the explicit call did not fail");
    }
    int64_t ssbad[2] = {2, KB - 1};
    qk_tensor stb = qk_tensor_make(s2, QK_DTYPE_E8M0, 2, ssbad);
    CHECK(qk_serve_mxfp8_quantize(QK_BACKEND_REFERENCE, &xt, NULL, &qt2, &stb) == QK_ERR_SHAPE,
          "floor-sized scale accepted");
}

static void forced_backend_applies_and_warns_once(void)
{
    qk_backend c;
    CHECK(qk_serve_force_backend(QK_BACKEND_REFERENCE) == QK_OK, "force");
    for (size_t i = 0; i < sizeof norm_ops / sizeof norm_ops[0]; i++)
        CHECK(qk_serve_select(norm_ops[i], QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_REFERENCE,
              "forced reference not applied to %s", qk_serve_op_name(norm_ops[i]));
    /* an explicit choice still wins over the forced switch */
    CHECK(qk_serve_select(QK_OP_RMS_NORM, QK_BACKEND_TARGET, &c) == QK_OK && c == QK_BACKEND_TARGET, "explicit");
    /* forced library with none loaded: one line per op, then the normal choice */
    CHECK(qk_serve_force_backend(QK_BACKEND_LIBRARY) == QK_OK, "force library");
    capture_begin();
    for (int rep = 0; rep < 3; rep++) {
        CHECK(qk_serve_select(QK_OP_GEMMA_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK &&
              c == QK_BACKEND_TARGET, "normal choice after the warning: %d", c);
        CHECK(qk_serve_select(QK_OP_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET,
              "normal choice: %d", c);
    }
    char *err = capture_end();
    CHECK(count_lines(err) == 2, "expected one line per op, got:\n%s", err);
    CHECK(strstr(err, "forced backend 'library' does not implement gemma_rms_norm") != NULL, "%s", err);
    CHECK(strstr(err, "runs on 'target'") != NULL, "%s", err);
    free(err);
    CHECK(qk_serve_force_backend(QK_BACKEND_DEFAULT) == QK_OK, "clear");
    CHECK(qk_serve_force_backend((qk_backend)7) == QK_ERR_INVALID_ARGUMENT, "bad force");
}

static void check_nothing_loaded(const char *what)
{
    CHECK(qk_serve_provider_path() == NULL, "%s: a path stayed loaded", what);
    CHECK(qk_serve_provider_info() == NULL, "%s: info stayed loaded", what);
    for (int i = 0; i < QK_OP_COUNT; i++)
        CHECK(!qk_backend_implements(QK_BACKEND_LIBRARY, (qk_serve_op)i), "%s: half-loaded op %d", what, i);
}

static void provider_library_errors(void)
{
#ifdef QK_PROVIDER_LIB_PATH
    const char *missing = "/nonexistent/libqkern-provider-x.so";
    CHECK(qk_serve_provider_load(missing) == QK_ERR_IO, "missing file");
    CHECK(strstr(qk_last_error(), missing) && strstr(qk_last_error(), "No such file"), "%s", qk_last_error());
    check_nothing_loaded("missing");

    CHECK(qk_serve_provider_load(QK_FIXTURE_NO_ENTRY_PATH) == QK_ERR_FORMAT, "no entry point");
    CHECK(strstr(qk_last_error(), QK_FIXTURE_NO_ENTRY_PATH) && strstr(qk_last_error(), "qk_provider_entry") &&
          strstr(qk_last_error(), "ABI 1"), "%s", qk_last_error());
    check_nothing_loaded("no entry");

    char want[1024];
    snprintf(want, sizeof want, "requires a qkern provider library with ABI 1; found ABI 0 in %s; "
             "rebuild it from this release", QK_FIXTURE_ABI0_PATH);
    CHECK(qk_serve_provider_load(QK_FIXTURE_ABI0_PATH) == QK_ERR_FORMAT, "ABI 0");
    CHECK(strstr(qk_last_error(), want) != NULL, "message: %s", qk_last_error());
    check_nothing_loaded("ABI 0");

    const char *not_so = "harness.c";   /* in the tests' folder: not a shared library */
    if (access(not_so, R_OK) == 0) {
        CHECK(qk_serve_provider_load(not_so) == QK_ERR_FORMAT, "not a library");
        check_nothing_loaded("not a library");
    }
    CHECK(qk_serve_provider_load("") == QK_ERR_INVALID_ARGUMENT, "empty path");
    CHECK(qk_serve_provider_unload() == QK_ERR_INVALID_ARGUMENT, "unload with none");
#else
    qk_test_skip("provider library errors", "fixture paths not defined by the build");
#endif
}

static void partial_library_priority_strictness_and_force(void)
{
#ifdef QK_FIXTURE_PARTIAL_PATH
    CHECK(qk_serve_provider_load(QK_FIXTURE_PARTIAL_PATH) == QK_OK, "%s", qk_last_error());
    void *h = dlopen(QK_FIXTURE_PARTIAL_PATH, RTLD_NOW | RTLD_NOLOAD);
    int (*calls)(void) = NULL;
    if (h) {
        void *sym = dlsym(h, "qk_fixture_calls");
        memcpy(&calls, &sym, sizeof calls);
    }
    CHECK(calls != NULL, "fixture counter");
    CHECK(qk_backend_implements(QK_BACKEND_LIBRARY, QK_OP_GEMMA_RMS_NORM), "gemma in library");
    CHECK(!qk_backend_implements(QK_BACKEND_LIBRARY, QK_OP_RMS_NORM), "rms in library");
    qk_backend v[QK_BACKEND_COUNT], c;
    size_t n = qk_serve_backends(QK_OP_GEMMA_RMS_NORM, v, QK_BACKEND_COUNT);
    CHECK(n == 3 && v[0] == QK_BACKEND_LIBRARY, "gemma backends %zu", n);
    /* priority: the library where it implements the op, else target */
    CHECK(qk_serve_select(QK_OP_GEMMA_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_LIBRARY, "prio");
    CHECK(qk_serve_select(QK_OP_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET, "prio2");
    qk_tensor x = t2(xb), w = t1(wb), o = t2(ob);
    int before = calls ? calls() : 0;
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_DEFAULT, &x, &w, 1e-6f, &o, NULL) == QK_OK, "call");
    CHECK(calls && calls() == before + 1, "the library's gemma_rms_norm did not run");
    /* explicit library on an op it lacks: strict, naming op, backend and who provides it */
    CHECK(qk_serve_rms_norm(QK_BACKEND_LIBRARY, &x, &w, 1e-6f, &o, NULL) == QK_ERR_UNSUPPORTED, "strict");
    const char *m = qk_last_error();
    CHECK(strstr(m, "op rms_norm") && strstr(m, "'library'") && strstr(m, "does not implement it") &&
          strstr(m, "target (") && strstr(m, "fixture"), "message: %s", m);
    /* forced library: applied where it implements the op, one line for rms_norm_gated */
    CHECK(qk_serve_force_backend(QK_BACKEND_LIBRARY) == QK_OK, "force");
    capture_begin();
    CHECK(qk_serve_select(QK_OP_GEMMA_RMS_NORM, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_LIBRARY, "f1");
    CHECK(qk_serve_select(QK_OP_RMS_NORM_GATED, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET, "f2");
    CHECK(qk_serve_select(QK_OP_RMS_NORM_GATED, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_TARGET, "f3");
    char *err = capture_end();
    CHECK(count_lines(err) == 1 && strstr(err, "rms_norm_gated") && strstr(err, "fixture"),
          "expected one line for rms_norm_gated, got:\n%s", err);
    free(err);
    qk_serve_force_backend(QK_BACKEND_DEFAULT);
    /* a second library cannot be loaded over the first */
    CHECK(qk_serve_provider_load(QK_FIXTURE_PARTIAL_PATH) == QK_ERR_INVALID_ARGUMENT, "double load");
    if (h) dlclose(h);
    CHECK(qk_serve_provider_unload() == QK_OK, "%s", qk_last_error());
    check_nothing_loaded("after unload");
#else
    qk_test_skip("partial provider library", "fixture paths not defined by the build");
#endif
}

static void good_library_runs_the_stable_api(void)
{
#ifdef QK_PROVIDER_LIB_PATH
    CHECK(qk_serve_provider_load(QK_PROVIDER_LIB_PATH) == QK_OK, "%s", qk_last_error());
    const qk_provider_info *info = qk_serve_provider_info();
    CHECK(info && info->abi_version == QK_ABI_VERSION && !strcmp(info->target, qk_target()),
          "info target %s", info ? info->target : "-");
    for (int i = 0; i < QK_OP_COUNT; i++) {
        qk_serve_op op = (qk_serve_op)i;
        CHECK(qk_backend_implements(QK_BACKEND_LIBRARY, op) == qk_backend_implements(QK_BACKEND_TARGET, op),
              "%s: the library (same target) differs from target", qk_serve_op_name(op));
        if (!qk_backend_implements(QK_BACKEND_LIBRARY, op)) continue;
        qk_backend c;
        CHECK(qk_serve_select(op, QK_BACKEND_DEFAULT, &c) == QK_OK && c == QK_BACKEND_LIBRARY,
              "%s: a loaded library has priority", qk_serve_op_name(op));
        char d[256];
        CHECK(strstr(qk_backend_describe(QK_BACKEND_LIBRARY, op, d, sizeof d), "libqkern-provider-") != NULL, "%s", d);
    }
    /* the same target's kernels in the library give the same bits */
    qk_tensor x = t2(xb), w = t1(wb), o = t2(ob), o2 = t2(ob2);
    CHECK(qk_serve_add_gemma_rms_norm(QK_BACKEND_LIBRARY, &x, &w, &x, 1e-6f, &o, &o2) == QK_OK, "%s", qk_last_error());
    uint16_t o3[ROWS * H], o4[ROWS * H];
    qk_tensor t3 = t2(o3), t4 = t2(o4);
    CHECK(qk_add_gemma_rms_norm(&x, &w, &x, 1e-6f, &t3, &t4) == QK_OK, "api");
    CHECK(!memcmp(ob, o3, sizeof o3) && !memcmp(ob2, o4, sizeof o4), "library bits differ");
    /* library errors come back with the library's message */
    int64_t bad = H + 1;
    qk_tensor wbad = qk_tensor_make(wb, QK_DTYPE_BF16, 1, &bad);
    CHECK(qk_serve_gemma_rms_norm(QK_BACKEND_LIBRARY, &x, &wbad, 1e-6f, &o, NULL) == QK_ERR_SHAPE, "shape");
    CHECK(strstr(qk_last_error(), "provider library") && strstr(qk_last_error(), "weight"), "%s", qk_last_error());
    /* an MXFP8 weight for every backend; the library's equals the target's */
    enum { N = 24, K = 70, KB = 3, M = 5 };
    uint8_t q[N * K], s[N * KB];
    float xf[M * K], y1[M * N], y2[M * N], y3[M * N];
    uint64_t r = 11;
    for (int i = 0; i < N * K; i++) q[i] = (uint8_t)(qk_rand_u64(&r) & 0x7E);
    for (int i = 0; i < N * KB; i++) s[i] = (uint8_t)(120 + qk_rand_u64(&r) % 8);
    for (int i = 0; i < M * K; i++) xf[i] = (float)qk_rand_normal(&r);
    int64_t qs[2] = {N, K}, ss[2] = {N, KB}, xs[2] = {M, K}, ys[2] = {M, N};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs), st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_tensor xt = qk_tensor_make(xf, QK_DTYPE_F32, 2, xs);
    qk_tensor yt1 = qk_tensor_make(y1, QK_DTYPE_F32, 2, ys), yt2 = qk_tensor_make(y2, QK_DTYPE_F32, 2, ys),
              yt3 = qk_tensor_make(y3, QK_DTYPE_F32, 2, ys);
    qk_serve_weight *sw = NULL;
    unsigned all = QK_BACKEND_BIT(QK_BACKEND_TARGET) | QK_BACKEND_BIT(QK_BACKEND_REFERENCE) |
                   QK_BACKEND_BIT(QK_BACKEND_LIBRARY);
    CHECK(qk_serve_weight_create(&qt, &st, all, &sw) == QK_OK, "%s", qk_last_error());
    CHECK(qk_serve_weight_backends(sw) == all, "prepared 0x%x", qk_serve_weight_backends(sw));
    CHECK(qk_serve_mxfp8_linear(QK_BACKEND_LIBRARY, &xt, sw, NULL, &yt1) == QK_OK, "%s", qk_last_error());
    CHECK(qk_serve_mxfp8_linear(QK_BACKEND_TARGET, &xt, sw, NULL, &yt2) == QK_OK, "%s", qk_last_error());
    CHECK(qk_serve_mxfp8_linear(QK_BACKEND_REFERENCE, &xt, sw, NULL, &yt3) == QK_OK, "%s", qk_last_error());
    CHECK(!memcmp(y1, y2, sizeof y1), "library linear differs from target");
    /* unloading is refused while a weight of the library is alive */
    CHECK(qk_serve_provider_unload() == QK_ERR_INVALID_ARGUMENT, "unload with a live weight");
    CHECK(strstr(qk_last_error(), "alive") != NULL, "%s", qk_last_error());
    qk_serve_weight_destroy(sw);
    /* a weight prepared for the target only cannot run on the reference */
    CHECK(qk_serve_weight_create(&qt, &st, QK_BACKEND_BIT(QK_BACKEND_TARGET), &sw) == QK_OK, "%s", qk_last_error());
    if (qk_serve_linear_impl(QK_BACKEND_TARGET) != qk_serve_linear_impl(QK_BACKEND_REFERENCE)) {
        CHECK(qk_serve_mxfp8_linear(QK_BACKEND_REFERENCE, &xt, sw, NULL, &yt3) == QK_ERR_INVALID_ARGUMENT, "unprepared");
        CHECK(strstr(qk_last_error(), "prepared for target only") != NULL, "%s", qk_last_error());
    }
    qk_serve_weight_destroy(sw);
    CHECK(qk_serve_provider_unload() == QK_OK, "%s", qk_last_error());
    check_nothing_loaded("after unload");
#else
    qk_test_skip("provider library", "QK_PROVIDER_LIB_PATH not defined by the build");
#endif
}

static void info_lists_the_registry(void)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    qk_serve_print_registry(f);
    fclose(f);
    CHECK(buf && strstr(buf, "serving backends"), "%s", buf ? buf : "");
    for (int i = 0; i < QK_OP_COUNT; i++) {
        char line[128];
        snprintf(line, sizeof line, "\n%-20s ", qk_serve_op_name((qk_serve_op)i));
        CHECK(buf && strstr(buf, line), "op %s missing from:\n%s", qk_serve_op_name((qk_serve_op)i), buf);
    }
    char want[160];
    snprintf(want, sizeof want, "%-20s %-10s target = %s/%s, reference = ref", "gemma_rms_norm", "target",
             qk_target(), qk_provider("gemma_rms_norm"));
    CHECK(buf && strstr(buf, want), "expected \"%s\" in:\n%s", want, buf);
    free(buf);
}

int main(void)
{
    qk_test_require_cpu("test_serve_registry");
    setenv("QK_FORCE_BACKEND", "reference", 1);
    fill_inputs();
    RUN(environment_force_backend);
    RUN(each_op_registers_target_and_reference);
    RUN(default_selection_is_target);
    RUN(explicit_choice_is_strict);
    RUN(per_call_ops_match_the_api);
    RUN(forced_backend_applies_and_warns_once);
    RUN(provider_library_errors);
    RUN(partial_library_priority_strictness_and_force);
    RUN(good_library_runs_the_stable_api);
    RUN(info_lists_the_registry);
    return qk_test_finish();
}
