/* ModelSlim W8A8_MXFP8 checkpoints and the MXFP8 linear life cycle (checkpoint.md):
 * the corpus folders (description/tensor cross-checks, shard indexes, floor-sized,
 * misshapen and 0xFF scales, dtype mismatches) give their expected statuses and messages
 * through qk_ms_open, the loader and `qk inspect`; create_weights / load /
 * process_weights_after_loading follow their rules; tensor-parallel partitions hold the
 * right slices and their partial outputs sum to the unsharded output (an independent
 * double-precision reference here, the library's linear once it exists); `qk quantize`
 * never overwrites its input and matches an independent MXFP8 reference bit for bit.
 *
 * Parts that need qk_mx_weight_create / qk_mxfp8_linear / qk_mx_quantize print SKIP while
 * those return QK_ERR_UNSUPPORTED in this build; everything else runs unconditionally. */
#include "io_test_util.h"

#include "harness.h"
#include "mx_oracle.h"
#include "qkern_io.h"
#include "qkern_serve.h"
#include "io/ms_quantize.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>

static char scratch[512];

static qk_status status_of(const char *name)
{
    for (int s = 0; s <= QK_ERR_FORMAT; s++)
        if (!strcmp(qk_status_name((qk_status)s), name)) return (qk_status)s;
    return (qk_status)-1;
}

/* ---- the MXFP8 reference: the test-side oracle (mx_oracle.h) ---- */
#define e4m3_value mxo_e4m3

static bool e4m3_is_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }

/* quantizes one row of K values: q (K codes) and scales (ceil(K/32) bytes) */
static void ref_quantize_row(const double *x, int64_t K, bool rceil, bool away, uint8_t *q, uint8_t *s)
{
    for (int64_t j = 0; j * 32 < K; j++) {
        int64_t k0 = j * 32, k1 = k0 + 32 < K ? k0 + 32 : K;
        double amax = 0;
        for (int64_t k = k0; k < k1; k++) amax = fmax(amax, fabs(x[k]));
        const int b = mxo_scale(amax, rceil ? QK_MX_SCALE_RCEIL : QK_MX_SCALE_FLOOR, &E4M3);
        s[j] = (uint8_t)b;
        for (int64_t k = k0; k < k1; k++)
            q[k] = (uint8_t)mxo_encode(&E4M3, ldexp(x[k], 127 - b),
                                       away ? QK_ROUND_NEAREST_AWAY : QK_ROUND_NEAREST_EVEN);
    }
}

static void ref_linear(const double *x, int64_t M, int64_t K, const uint8_t *qw, const uint8_t *sw,
                       int64_t N, const float *bias, double *out, double *mag)
{
    int64_t kb = (K + 31) / 32;
    uint8_t *qx = malloc((size_t)K), *sx = malloc((size_t)kb);
    for (int64_t m = 0; m < M; m++) {
        ref_quantize_row(x + m * K, K, false, false, qx, sx);
        for (int64_t n = 0; n < N; n++) {
            double acc = 0, ab = 0;
            for (int64_t j = 0; j < kb; j++) {
                double sc = ldexp(1.0, sx[j] - 127) * ldexp(1.0, sw[n * kb + j] - 127), part = 0, pa = 0;
                for (int64_t k = j * 32; k < K && k < j * 32 + 32; k++) {
                    double t = e4m3_value(qx[k]) * e4m3_value(qw[n * K + k]);
                    part += t;
                    pa += fabs(t);
                }
                acc += sc * part;
                ab += sc * pa;
            }
            out[m * N + n] = acc + (bias ? bias[n] : 0.0);
            if (mag) mag[m * N + n] = ab;
        }
    }
    free(qx);
    free(sx);
}

static bool lib_has_weight_create(void)
{
    uint8_t q[32] = {0}, s[1] = {127};
    int64_t qs[2] = {1, 32}, ss[2] = {1, 1};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs), st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *w = NULL;
    qk_status r = qk_mx_weight_create(&qt, &st, &w);
    qk_mx_weight_destroy(w);
    return r != QK_ERR_UNSUPPORTED;
}

static bool lib_has_pack_pairs(void)
{
    uint8_t s[3] = {1, 2, 3}, p[4];
    int64_t ss[2] = {1, 3}, ps[3] = {1, 2, 2};
    qk_tensor st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss), pt = qk_tensor_make(p, QK_DTYPE_E8M0, 3, ps);
    return qk_mx_pack_scale_pairs(&st, &pt) != QK_ERR_UNSUPPORTED;
}

static bool lib_has_linear(void)
{
    if (!lib_has_weight_create()) return false;
    uint8_t q[32] = {0}, s[1] = {127};
    int64_t qs[2] = {1, 32}, ss[2] = {1, 1};
    qk_tensor qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, qs), st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, ss);
    qk_mx_weight *w = NULL;
    if (qk_mx_weight_create(&qt, &st, &w) != QK_OK) return false;
    float x[32] = {0}, o[1];
    int64_t xs[2] = {1, 32}, os[2] = {1, 1};
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(o, QK_DTYPE_F32, 2, os);
    qk_status r = qk_mxfp8_linear(&xt, w, NULL, &ot);
    qk_mx_weight_destroy(w);
    return r != QK_ERR_UNSUPPORTED;
}

static bool lib_has_quantize(void)
{
    float x[32] = {1};
    uint8_t q[32], s[1];
    int64_t xs[1] = {32}, ss[1] = {1};
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 1, xs), qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 1, xs),
              st = qk_tensor_make(s, QK_DTYPE_E8M0, 1, ss);
    return qk_mx_quantize(&xt, NULL, &qt, &st) != QK_ERR_UNSUPPORTED;
}

/* ---- the corpus (ms / load / post) ---- */
static bool parse_linear_check(const char *check, const char *kind, char *prefix, size_t n,
                               int64_t *K, int64_t *N)
{
    size_t kl = strlen(kind);
    if (strncmp(check, kind, kl) || check[kl] != ':') return false;
    const char *p = check + kl + 1, *c2 = strchr(p, ':');
    if (!c2) return false;
    snprintf(prefix, n, "%.*s", (int)(c2 - p), p);
    return sscanf(c2 + 1, "%lld:%lld", (long long *)K, (long long *)N) == 2;
}

static void test_corpus_modelslim(void)
{
    corpus_case *cs;
    size_t n = corpus_load(&cs), ran = 0;
    CHECK(n > 0, "no manifest");
    bool have_create = lib_has_weight_create();
    unsigned post_flags = lib_has_pack_pairs() ? QK_MX_LINEAR_PAIR_SCALES : 0;
    for (size_t i = 0; i < n; i++) {
        const corpus_case *c = &cs[i];
        char path[512], prefix[256];
        int64_t K = 0, N = 0;
        corpus_path(c, path, sizeof path);
        qk_status want = status_of(c->expect);
        /* the _ext forms open with QK_MS_ALLOW_EXTERNAL_SHARDS */
        bool ext = false;
        bool is_load = parse_linear_check(c->check, "load", prefix, sizeof prefix, &K, &N);
        bool is_post = parse_linear_check(c->check, "post", prefix, sizeof prefix, &K, &N);
        if (!is_post && parse_linear_check(c->check, "post_ext", prefix, sizeof prefix, &K, &N))
            is_post = ext = true;
        bool is_ms = !strcmp(c->check, "ms") || (!strcmp(c->check, "ms_ext") && (ext = true));
        if (!is_ms && !is_load && !is_post) continue;
        ran++;
        qk_ms_model *m = NULL;
        qk_status st = qk_ms_open(path, ext ? QK_MS_ALLOW_EXTERNAL_SHARDS : 0, &m);
        if (is_ms) {
            CHECK(st == want, "%s: %s, expected %s (%s)", c->path, qk_status_name(st), c->expect, qk_last_error());
            CHECK(strstr(qk_last_error(), c->substring) != NULL, "%s: \"%s\" lacks \"%s\"", c->path,
                  qk_last_error(), c->substring);
            CHECK(st == QK_OK || m == NULL, "%s: failed open returned a model", c->path);
            qk_ms_close(m);
            continue;
        }
        CHECK(st == QK_OK, "%s: qk_ms_open: %s", c->path, qk_last_error());
        if (st) continue;
        char bias[300];
        snprintf(bias, sizeof bias, "%s.bias", prefix);
        qk_st_info bi;
        bool has_bias = qk_st_set_find(qk_ms_tensors(m), bias, &bi) == QK_OK;
        qk_mx_linear *l = NULL;
        st = qk_mx_linear_create_weights(prefix, K, N, has_bias, NULL, &l);
        CHECK(st == QK_OK, "%s: create: %s", c->path, qk_last_error());
        if (!st) st = qk_mx_linear_load_all(l, qk_ms_tensors(m));
        if (is_post && st == QK_OK) {
            st = qk_mx_linear_process_weights_after_loading(l, post_flags);
            if (want == QK_OK && st == QK_ERR_UNSUPPORTED && !have_create) {
                qk_test_skip(c->path, "post-processing needs qk_mx_weight_create (QK_ERR_UNSUPPORTED here)");
                st = QK_OK;
            }
        }
        CHECK(st == want, "%s [%s]: %s, expected %s (%s)", c->path, c->check, qk_status_name(st), c->expect,
              qk_last_error());
        if (st != QK_OK || want != QK_OK)
            CHECK(strstr(qk_last_error(), c->substring) != NULL, "%s [%s]: \"%s\" lacks \"%s\"", c->path,
                  c->check, qk_last_error(), c->substring);
        qk_mx_linear_destroy(l);
        qk_ms_close(m);
    }
    CHECK(ran >= 20, "only %zu ModelSlim corpus cases ran", ran);
    free(cs);
}

/* ---- the description parser ---- */
static void test_description(void)
{
    const char *j = "{\"model_quant_type\":\"W8A8_MXFP8\",\"version\":\"1.0.0\",\"group_size\":32,"
                    "\"metadata\":{\"x\":1},\"optional\":[],\"b.weight\":\"W8A8_MXFP8\",\"a.bias\":\"FLOAT\"}";
    qk_ms_desc *d = NULL;
    CHECK(qk_ms_desc_parse(j, strlen(j), NULL, &d) == QK_OK, "%s", qk_last_error());
    if (!d) return;
    CHECK(!strcmp(qk_ms_desc_quant_type(d), "W8A8_MXFP8") && !strcmp(qk_ms_desc_version(d), "1.0.0") &&
          qk_ms_desc_group_size(d) == 32, "header fields");
    CHECK(qk_ms_desc_count(d) == 2, "two entries, got %zu", qk_ms_desc_count(d));
    const char *name, *qt;
    CHECK(qk_ms_desc_entry(d, 0, &name, &qt) == QK_OK && !strcmp(name, "b.weight") && !strcmp(qt, "W8A8_MXFP8"),
          "entries in file order");
    CHECK(qk_ms_desc_lookup(d, "a.bias") && !strcmp(qk_ms_desc_lookup(d, "a.bias"), "FLOAT"), "lookup");
    CHECK(qk_ms_desc_lookup(d, "metadata") == NULL && qk_ms_desc_lookup(d, "zzz") == NULL, "reserved/absent");
    qk_ms_desc_free(d);
    static const char *const bad[] = {"", "[]", "{\"version\":\"1\"}", "{\"model_quant_type\":3}",
                                      "{\"model_quant_type\":\"W8A8_MXFP8\",\"x\":\"\"}",
                                      "{\"model_quant_type\":\"W8A8_MXFP8\",\"group_size\":\"32\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = NULL;
        CHECK(qk_ms_desc_parse(bad[i], strlen(bad[i]), NULL, &d) == QK_ERR_FORMAT && !d, "bad[%zu] accepted", i);
    }
}

/* ---- life cycle ---- */
static void fill_e4m3(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c;
        do c = (uint8_t)(qk_rand_u64(&seed) >> 56); while (e4m3_is_nan(c));
        p[i] = c;
    }
}

static void fill_scales(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(112 + qk_rand_u64(&seed) % 16);
}

static void test_create_weights_placeholders(void)
{
    static const int64_t Ks[] = {4304, 1152, 1, 31, 32, 33, 5120};
    static const int64_t kbs[] = {135, 36, 1, 1, 1, 2, 160};
    for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++) {
        qk_mx_linear *l = NULL;
        CHECK(qk_mx_linear_create_weights("p", Ks[i], 3, true, NULL, &l) == QK_OK, "%s", qk_last_error());
        if (!l) continue;
        qk_tensor w, s, b;
        CHECK(qk_mx_linear_placeholder(l, "weight", &w) == QK_OK && w.shape[0] == 3 && w.shape[1] == Ks[i] &&
              w.dtype == QK_DTYPE_F8_E4M3, "weight placeholder K=%lld", (long long)Ks[i]);
        CHECK(qk_mx_linear_placeholder(l, "weight_scale", &s) == QK_OK && s.shape[1] == kbs[i] &&
              s.dtype == QK_DTYPE_E8M0, "K=%lld: %lld scale columns, expected %lld", (long long)Ks[i],
              (long long)s.shape[1], (long long)kbs[i]);
        bool all_ff = true;
        for (int64_t k = 0; k < 3 * kbs[i]; k++) all_ff &= ((uint8_t *)s.data)[k] == 0xFF;
        CHECK(all_ff, "K=%lld: scale placeholder is not all 0xFF", (long long)Ks[i]);
        CHECK(qk_mx_linear_placeholder(l, "bias", &b) == QK_OK && b.shape[0] == 3, "bias placeholder");
        qk_mx_linear_destroy(l);
    }
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("p", 0, 3, false, NULL, &l) == QK_ERR_SHAPE, "K=0");
    CHECK(qk_mx_linear_create_weights("p", 32, 0, false, NULL, &l) == QK_ERR_SHAPE, "N=0");
}

static void test_load_checks_dtype_then_shape_and_copies_nothing_on_error(void)
{
    const int64_t N = 2, K = 4304, kb = 135;
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("m.fc2", K, N, false, NULL, &l) == QK_OK, "%s", qk_last_error());
    if (!l) return;
    uint8_t *w = malloc((size_t)(N * K)), *s = malloc((size_t)(N * kb));
    fill_e4m3(w, (size_t)(N * K), 1);
    fill_scales(s, (size_t)(N * kb), 2);
    int64_t ws[2] = {N, K}, ss[2] = {N, kb}, floor_s[2] = {N, 134}, wrong[2] = {N + 1, 7};
    qk_tensor wt = qk_tensor_make(w, QK_DTYPE_F8_E4M3, 2, ws), st = qk_tensor_make(s, QK_DTYPE_U8, 2, ss);
    /* wrong dtype and wrong shape: the dtype is reported */
    qk_tensor bad = qk_tensor_make(s, QK_DTYPE_BF16, 2, wrong);
    qk_status r = qk_mx_linear_load(l, "m.fc2.weight_scale", &bad);
    CHECK(r == QK_ERR_FORMAT && strstr(qk_last_error(), "dtype is BF16"), "dtype first: %s", qk_last_error());
    /* the floor-sized scale: its own message naming the tensor and both counts */
    qk_tensor fl = qk_tensor_make(s, QK_DTYPE_U8, 2, floor_s);
    r = qk_mx_linear_load(l, "m.fc2.weight_scale", &fl);
    CHECK(r == QK_ERR_FORMAT, "floor-sized scale accepted");
    const char *msg = qk_last_error();
    CHECK(strstr(msg, "\"m.fc2.weight_scale\"") && strstr(msg, "134") && strstr(msg, "135") &&
          strstr(msg, "dropped the partial last block") && strstr(msg, "re-exported"), "floor message: %s", msg);
    qk_tensor ph;
    qk_mx_linear_placeholder(l, "weight_scale", &ph);
    bool untouched = true;
    for (int64_t i = 0; i < N * kb; i++) untouched &= ((uint8_t *)ph.data)[i] == 0xFF;
    CHECK(untouched, "a rejected load copied bytes");
    /* a weight with a wrong dtype */
    qk_tensor wbad = qk_tensor_make(w, QK_DTYPE_I8, 2, ws);
    r = qk_mx_linear_load(l, "m.fc2.weight", &wbad);
    CHECK(r == QK_ERR_FORMAT && strstr(qk_last_error(), "must be F8_E4M3"), "weight dtype: %s", qk_last_error());
    /* names that are not this linear's */
    CHECK(qk_mx_linear_load(l, "m.fc1.weight", &wt) == QK_ERR_INVALID_ARGUMENT, "other prefix");
    CHECK(qk_mx_linear_load(l, "m.fc2.weight.x", &wt) == QK_ERR_INVALID_ARGUMENT, "extra suffix");
    CHECK(qk_mx_linear_load(l, "m.fc2.bias", &wt) == QK_ERR_INVALID_ARGUMENT, "bias on a bias-less linear");
    /* good loads copy exactly; a strided source works */
    CHECK(qk_mx_linear_load(l, "m.fc2.weight", &wt) == QK_OK, "%s", qk_last_error());
    uint8_t *s2 = malloc((size_t)(N * kb * 2));
    for (int64_t i = 0; i < N * kb; i++) s2[2 * i] = s[i];
    qk_tensor sst = qk_tensor_make(s2, QK_DTYPE_E8M0, 2, ss);
    sst.stride[0] = 2 * kb;
    sst.stride[1] = 2;
    CHECK(qk_mx_linear_load(l, "m.fc2.weight_scale", &sst) == QK_OK, "strided scale: %s", qk_last_error());
    qk_mx_linear_placeholder(l, "weight", &ph);
    CHECK(!memcmp(ph.data, w, (size_t)(N * K)), "weight bytes");
    qk_mx_linear_placeholder(l, "weight_scale", &ph);
    CHECK(!memcmp(ph.data, s, (size_t)(N * kb)), "scale bytes (strided source)");
    (void)st;
    free(s2);
    free(w);
    free(s);
    qk_mx_linear_destroy(l);
}

static void test_post_processing_rejects_unloaded_scales(void)
{
    const int64_t N = 3, K = 100, kb = 4;
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("x.proj", K, N, false, NULL, &l) == QK_OK, "%s", qk_last_error());
    if (!l) return;
    CHECK(qk_mx_linear_process_weights_after_loading(l, 0) == QK_ERR_FORMAT &&
          strstr(qk_last_error(), "\"x.proj.weight\" was never loaded"), "weight never loaded: %s", qk_last_error());
    uint8_t w[300], s[12];
    fill_e4m3(w, sizeof w, 3);
    fill_scales(s, sizeof s, 4);
    int64_t ws[2] = {N, K}, ss[2] = {N, kb};
    qk_tensor wt = qk_tensor_make(w, QK_DTYPE_F8_E4M3, 2, ws);
    CHECK(qk_mx_linear_load(l, "x.proj.weight", &wt) == QK_OK, "%s", qk_last_error());
    qk_status r = qk_mx_linear_process_weights_after_loading(l, 0);
    CHECK(r == QK_ERR_FORMAT && strstr(qk_last_error(), "\"x.proj.weight_scale\" holds 0xFF") &&
          strstr(qk_last_error(), "row 0, block 0") && strstr(qk_last_error(), "never loaded") &&
          strstr(qk_last_error(), "12 such bytes"), "scale never loaded: %s", qk_last_error());
    s[2 * kb + 3] = 0xFF;   /* row 2, block 3 */
    s[2 * kb + 1] = 0xFF;   /* row 2, block 1: the first */
    qk_tensor stt = qk_tensor_make(s, QK_DTYPE_U8, 2, ss);
    CHECK(qk_mx_linear_load(l, "x.proj.weight_scale", &stt) == QK_OK, "%s", qk_last_error());
    r = qk_mx_linear_process_weights_after_loading(l, 0);
    CHECK(r == QK_ERR_FORMAT && strstr(qk_last_error(), "row 2, block 1") && strstr(qk_last_error(), "2 such bytes"),
          "0xFF at (2, 1): %s", qk_last_error());
    /* nothing was released: placeholders still there, and a fixed reload passes the check */
    qk_tensor ph;
    CHECK(qk_mx_linear_placeholder(l, "weight", &ph) == QK_OK, "placeholders kept after a failure");
    s[2 * kb + 3] = s[2 * kb + 1] = 120;
    CHECK(qk_mx_linear_load(l, "x.proj.weight_scale", &stt) == QK_OK, "%s", qk_last_error());
    bool pairs = lib_has_pack_pairs();
    r = qk_mx_linear_process_weights_after_loading(l, pairs ? QK_MX_LINEAR_PAIR_SCALES : 0);
    if (!pairs) qk_test_skip("the pair layout after loading", "qk_mx_pack_scale_pairs returns QK_ERR_UNSUPPORTED");
    if (r == QK_ERR_UNSUPPORTED && !lib_has_weight_create()) {
        qk_test_skip("post-processing success path", "qk_mx_weight_create returns QK_ERR_UNSUPPORTED");
    } else {
        CHECK(r == QK_OK, "process: %s", qk_last_error());
        CHECK(qk_mx_linear_weight(l) && qk_mx_weight_n(qk_mx_linear_weight(l)) == N &&
              qk_mx_weight_k(qk_mx_linear_weight(l)) == K, "prepared weight N, K");
        CHECK(qk_mx_linear_placeholder(l, "weight", &ph) == QK_ERR_INVALID_ARGUMENT &&
              qk_mx_linear_placeholder(l, "weight_scale", &ph) == QK_ERR_INVALID_ARGUMENT,
              "raw placeholders released");
        /* the pair layout, against packing done here: [N, ceil(kb/2), 2], odd kb padded 0x00 */
        qk_tensor pv;
        bool ok = pairs && qk_mx_linear_scale_pairs(l, &pv) == QK_OK;
        CHECK(!pairs || (ok && pv.shape[1] == 2 && pv.shape[2] == 2), "pairs shape");
        if (!pairs) CHECK(qk_mx_linear_scale_pairs(l, &pv) == QK_ERR_INVALID_ARGUMENT, "no pairs unless asked");
        for (int64_t n = 0; ok && n < N; n++)
            for (int64_t j = 0; j < 2; j++)
                for (int t = 0; t < 2; t++)
                    CHECK(((uint8_t *)pv.data)[(n * 2 + j) * 2 + t] == s[n * kb + 2 * j + t], "pair (%lld,%lld,%d)",
                          (long long)n, (long long)j, t);
        CHECK(qk_mx_linear_load(l, "x.proj.weight", &wt) == QK_ERR_INVALID_ARGUMENT, "load after processing");
    }
    qk_mx_linear_destroy(l);
}

/* the pair layout for odd kb (K = 4304: 135 scales -> 68 pairs, last padded with 0x00) */
static void test_pairs_odd_kb(void)
{
    if (!lib_has_weight_create() || !lib_has_pack_pairs()) {
        qk_test_skip("test_pairs_odd_kb", "qk_mx_weight_create or qk_mx_pack_scale_pairs returns QK_ERR_UNSUPPORTED");
        return;
    }
    const int64_t N = 2, K = 4304, kb = 135;
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("v.fc2", K, N, false, NULL, &l) == QK_OK, "%s", qk_last_error());
    uint8_t *w = malloc((size_t)(N * K)), s[270];
    fill_e4m3(w, (size_t)(N * K), 7);
    fill_scales(s, sizeof s, 8);
    int64_t ws[2] = {N, K}, ss[2] = {N, kb};
    qk_tensor wt = qk_tensor_make(w, QK_DTYPE_F8_E4M3, 2, ws), stt = qk_tensor_make(s, QK_DTYPE_U8, 2, ss);
    qk_mx_linear_load(l, "v.fc2.weight", &wt);
    qk_mx_linear_load(l, "v.fc2.weight_scale", &stt);
    CHECK(qk_mx_linear_process_weights_after_loading(l, QK_MX_LINEAR_PAIR_SCALES) == QK_OK, "%s", qk_last_error());
    qk_tensor pv;
    bool ok = qk_mx_linear_scale_pairs(l, &pv) == QK_OK && pv.shape[1] == 68;
    CHECK(ok, "68 pairs");
    const uint8_t *p = ok ? pv.data : NULL;
    for (int64_t n = 0; ok && n < N; n++) {
        CHECK(p[n * 136 + 134] == s[n * kb + 134] && p[n * 136 + 135] == 0x00, "row %lld: last pair %u %u",
              (long long)n, p[n * 136 + 134], p[n * 136 + 135]);
        CHECK(!memcmp(p + n * 136, s + n * kb, 134), "row %lld pairs", (long long)n);
    }
    free(w);
    qk_mx_linear_destroy(l);
}

/* ---- tensor parallelism ---- */
static void test_tp_partition_rules(void)
{
    qk_tp_part p;
    qk_tp col = {QK_TP_COLUMN, QK_TP_EVEN, 1, 2};
    CHECK(qk_tp_partition(1152, 4304, &col, &p) == QK_OK && p.n0 == 576 && p.n == 576 && p.k == 4304 &&
          p.kb == 135, "column rank 1");
    CHECK(qk_tp_partition(1153, 4304, &col, &p) == QK_ERR_SHAPE && strstr(qk_last_error(), "N must divide evenly"),
          "column N odd: %s", qk_last_error());
    qk_tp row = {QK_TP_ROW, QK_TP_EVEN, 0, 2};
    qk_status r = qk_tp_partition(1152, 4304, &row, &p);
    CHECK(r == QK_ERR_SHAPE, "even split of 4304 over 2 accepted");
    CHECK(strstr(qk_last_error(), "2152") && strstr(qk_last_error(), "2176 + 2128 elements (68 + 67 blocks)"),
          "even split message: %s", qk_last_error());
    row.policy = QK_TP_BLOCK_ALIGNED;
    CHECK(qk_tp_partition(1152, 4304, &row, &p) == QK_OK && p.k0 == 0 && p.k == 2176 && p.kb0 == 0 && p.kb == 68 &&
          p.n == 1152, "block_aligned rank 0: k0 %lld k %lld kb %lld", (long long)p.k0, (long long)p.k, (long long)p.kb);
    row.rank = 1;
    CHECK(qk_tp_partition(1152, 4304, &row, &p) == QK_OK && p.k0 == 2176 && p.k == 2128 && p.kb0 == 68 && p.kb == 67,
          "block_aligned rank 1: k0 %lld k %lld kb0 %lld kb %lld", (long long)p.k0, (long long)p.k,
          (long long)p.kb0, (long long)p.kb);
    qk_tp even = {QK_TP_ROW, QK_TP_EVEN, 1, 2};
    CHECK(qk_tp_partition(8, 4096, &even, &p) == QK_OK && p.k0 == 2048 && p.k == 2048 && p.kb0 == 64 && p.kb == 64,
          "even split of 4096");
    even.size = 3;
    even.rank = 0;
    CHECK(qk_tp_partition(8, 4096, &even, &p) == QK_ERR_SHAPE && strstr(qk_last_error(), "does not divide evenly"),
          "4096 over 3: %s", qk_last_error());
    qk_tp empty = {QK_TP_ROW, QK_TP_BLOCK_ALIGNED, 0, 4};
    CHECK(qk_tp_partition(8, 64, &empty, &p) == QK_ERR_SHAPE && strstr(qk_last_error(), "no block"),
          "a rank with no block (K=64, tp=4): %s", qk_last_error());
    qk_tp five = {QK_TP_ROW, QK_TP_BLOCK_ALIGNED, 4, 5};   /* kb = 9, B = 2: ranks take 2,2,2,2,1 */
    CHECK(qk_tp_partition(8, 280, &five, &p) == QK_OK && p.kb0 == 8 && p.kb == 1 && p.k0 == 256 && p.k == 24,
          "last rank of 5 over K=280");
    qk_tp badrank = {QK_TP_COLUMN, QK_TP_EVEN, 2, 2};
    CHECK(qk_tp_partition(8, 64, &badrank, &p) == QK_ERR_INVALID_ARGUMENT, "rank out of range");
    CHECK(qk_tp_partition(8, 64, NULL, &p) == QK_OK && p.n == 8 && p.k == 64 && p.kb == 2, "no parallelism");
}

typedef struct {
    int64_t N, K, kb;
    uint8_t *w, *s;
    float *bias;
} full_linear;

static full_linear make_full(int64_t N, int64_t K, uint64_t seed)
{
    full_linear f = {N, K, (K + 31) / 32, malloc((size_t)(N * K)), malloc((size_t)(N * ((K + 31) / 32))),
                     malloc((size_t)N * sizeof(float))};
    fill_e4m3(f.w, (size_t)(N * K), seed);
    fill_scales(f.s, (size_t)(N * f.kb), seed + 1);
    for (int64_t n = 0; n < N; n++) f.bias[n] = (float)qk_rand_uniform(&seed, -1, 1);
    return f;
}

static void free_full(full_linear *f)
{
    free(f->w);
    free(f->s);
    free(f->bias);
}

static qk_mx_linear *load_rank(const char *prefix, const full_linear *f, const qk_tp *tp)
{
    qk_mx_linear *l = NULL;
    if (qk_mx_linear_create_weights(prefix, f->K, f->N, true, tp, &l) != QK_OK) return NULL;
    int64_t ws[2] = {f->N, f->K}, ss[2] = {f->N, f->kb}, bs[1] = {f->N};
    qk_tensor wt = qk_tensor_make(f->w, QK_DTYPE_F8_E4M3, 2, ws), st = qk_tensor_make(f->s, QK_DTYPE_U8, 2, ss),
              bt = qk_tensor_make(f->bias, QK_DTYPE_F32, 1, bs);
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    qk_status r = qk_mx_linear_load(l, name, &wt);
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    if (!r) r = qk_mx_linear_load(l, name, &st);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (!r) r = qk_mx_linear_load(l, name, &bt);
    if (r) {
        qk_mx_linear_destroy(l);
        return NULL;
    }
    return l;
}

/* Row-parallel K = 4304 over tp = 2 (block_aligned): each rank's placeholders hold its
   slice, and the partial outputs sum to the unsharded output (double reference), then
   through the library's linear when it exists. */
static void test_tp_row_parallel_sums_to_unsharded(void)
{
    const int64_t N = 4, K = 4304, M = 3;
    full_linear f = make_full(N, K, 11);
    double *x = malloc((size_t)(M * K) * sizeof *x), full[12], mag[12], part[2][12];
    uint64_t seed = 5;
    for (int64_t i = 0; i < M * K; i++) x[i] = qk_rand_normal(&seed) * (i % 97 == 0 ? 30.0 : 1.0);
    ref_linear(x, M, K, f.w, f.s, N, f.bias, full, mag);
    qk_mx_linear *ranks[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        qk_tp tp = {QK_TP_ROW, QK_TP_BLOCK_ALIGNED, r, 2};
        ranks[r] = load_rank("v.fc2", &f, &tp);
        CHECK(ranks[r] != NULL, "rank %d: %s", r, qk_last_error());
        if (!ranks[r]) goto out;
        const qk_tp_part *p = qk_mx_linear_part(ranks[r]);
        qk_tensor w, s, b;
        qk_mx_linear_placeholder(ranks[r], "weight", &w);
        qk_mx_linear_placeholder(ranks[r], "weight_scale", &s);
        qk_mx_linear_placeholder(ranks[r], "bias", &b);
        CHECK(w.shape[1] == (r ? 2128 : 2176) && s.shape[1] == (r ? 67 : 68) && b.shape[0] == N, "rank %d shapes", r);
        for (int64_t n = 0; n < N; n++) {
            CHECK(!memcmp((uint8_t *)w.data + n * p->k, f.w + n * K + p->k0, (size_t)p->k), "rank %d weight row %lld",
                  r, (long long)n);
            CHECK(!memcmp((uint8_t *)s.data + n * p->kb, f.s + n * f.kb + p->kb0, (size_t)p->kb),
                  "rank %d scale row %lld", r, (long long)n);
        }
        /* this rank's partial output: its x slice against its placeholders; bias on rank 0 */
        double *xs = malloc((size_t)(M * p->k) * sizeof *xs);
        for (int64_t m = 0; m < M; m++) memcpy(xs + m * p->k, x + m * K + p->k0, (size_t)p->k * sizeof *xs);
        ref_linear(xs, M, p->k, w.data, s.data, N, r == 0 ? f.bias : NULL, part[r], NULL);
        free(xs);
    }
    for (int64_t i = 0; i < M * N; i++)
        CHECK(fabs(part[0][i] + part[1][i] - full[i]) <= 1e-12 * (mag[i] + 1), "reference sum at %lld: %g vs %g",
              (long long)i, part[0][i] + part[1][i], full[i]);
    if (!lib_has_linear()) {
        qk_test_skip("row-parallel sum through qk_mxfp8_linear", "qk_mxfp8_linear / qk_mx_weight_create unavailable");
        goto out;
    }
    {
        float *xf = malloc((size_t)(M * K) * sizeof *xf), outs[2][12], outfull[12];
        for (int64_t i = 0; i < M * K; i++) xf[i] = (float)x[i];
        for (int64_t i = 0; i < M * K; i++) x[i] = xf[i];   /* the reference sees the f32 inputs */
        ref_linear(x, M, K, f.w, f.s, N, f.bias, full, mag);
        for (int r = 0; r < 2; r++) {
            CHECK(qk_mx_linear_process_weights_after_loading(ranks[r], 0) == QK_OK, "%s", qk_last_error());
            const qk_tp_part *p = qk_mx_linear_part(ranks[r]);
            int64_t xs[2] = {M, p->k}, os[2] = {M, N};
            qk_tensor xt = qk_tensor_make(xf + p->k0, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(outs[r], QK_DTYPE_F32, 2, os);
            xt.stride[0] = K;
            CHECK(qk_mx_linear_apply(ranks[r], &xt, &ot) == QK_OK, "rank %d apply: %s", r, qk_last_error());
        }
        qk_tp none = {QK_TP_NONE, QK_TP_EVEN, 0, 1};
        qk_mx_linear *whole = load_rank("v.fc2", &f, &none);
        CHECK(whole && qk_mx_linear_process_weights_after_loading(whole, 0) == QK_OK, "%s", qk_last_error());
        int64_t xs[2] = {M, K}, os[2] = {M, N};
        qk_tensor xt = qk_tensor_make(xf, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(outfull, QK_DTYPE_F32, 2, os);
        CHECK(whole && qk_mx_linear_apply(whole, &xt, &ot) == QK_OK, "apply: %s", qk_last_error());
        for (int64_t i = 0; i < M * N; i++) {
            double tol = 0x1p-16 * mag[i] + 2 * ldexp(1.0, ilogb(full[i] == 0 ? 1e-30 : full[i]) - 23);
            CHECK(fabs(outfull[i] - full[i]) <= tol, "unsharded %lld: %.9g vs %.9g", (long long)i, outfull[i], full[i]);
            CHECK(fabs((double)outs[0][i] + outs[1][i] - full[i]) <= 2 * tol, "rank sum %lld: %.9g vs %.9g",
                  (long long)i, (double)outs[0][i] + outs[1][i], full[i]);
        }
        qk_mx_linear_destroy(whole);
        free(xf);
    }
out:
    qk_mx_linear_destroy(ranks[0]);
    qk_mx_linear_destroy(ranks[1]);
    free(x);
    free_full(&f);
}

/* QK_TP_SHARED_BLOCK (SGLang 0.5.23): K/tp columns per rank; a block that straddles two ranks
   is kept by both, weight and activation zero-padded to whole blocks. Where each rank's part
   of a shared block holds that block's amax (so that both quantize it with the unsharded
   scale), the ranks' partial sums equal the unsharded output to f32 accumulation accuracy;
   through qk_mx_linear_apply and through the serving layer's MXFP8Linear. */
static void test_tp_shared_block_sums_to_unsharded(void)
{
    const int64_t N = 4, K = 4304, M = 3;
    full_linear f = make_full(N, K, 21);
    float *xf = malloc((size_t)(M * K) * sizeof *xf);
    double *x = malloc((size_t)(M * K) * sizeof *x), full[12], mag[12];
    uint64_t seed = 9;
    for (int64_t i = 0; i < M * K; i++) xf[i] = (float)qk_rand_normal(&seed);
    for (int tpi = 0; tpi < 2; tpi++) {
        const int tp = tpi ? 4 : 2;
        const int64_t per = K / tp;
        /* each shared block's maximum at its first and its last element (one on each side) */
        for (int r = 1; r < tp; r++)
            for (int64_t m = 0; m < M; m++) {
                const int64_t j0 = (per * r) / 32 * 32;
                if ((per * r) % 32 == 0) continue;
                xf[m * K + j0] = 40.0f;
                xf[m * K + j0 + 31] = -40.0f;
            }
        for (int64_t i = 0; i < M * K; i++) x[i] = xf[i];
        ref_linear(x, M, K, f.w, f.s, N, f.bias, full, mag);
        float sum[12] = {0}, sum_layer[12] = {0};
        for (int r = 0; r < tp; r++) {
            qk_tp t = {QK_TP_ROW, QK_TP_SHARED_BLOCK, r, tp};
            qk_tp_part p;
            CHECK(qk_tp_partition(N, K, &t, &p) == QK_OK, "%s", qk_last_error());
            const int64_t k0 = per * r;
            CHECK(p.k0 == k0 && p.k == per && p.pad == k0 % 32 && p.kb0 == k0 / 32 &&
                  p.kb == (p.pad + per + 31) / 32, "tp %d rank %d part: k0 %lld k %lld pad %lld kb0 %lld kb %lld",
                  tp, r, (long long)p.k0, (long long)p.k, (long long)p.pad, (long long)p.kb0, (long long)p.kb);
            if (tp == 2)
                CHECK(r ? (p.pad == 8 && p.kb0 == 67 && p.kb == 68) : (p.pad == 0 && p.kb == 68),
                      "K = 4304 over 2: both ranks keep block 67 (rank %d: pad %lld, kb %lld)", r,
                      (long long)p.pad, (long long)p.kb);
            qk_mx_linear *l = load_rank("v.fc2", &f, &t);
            CHECK(l != NULL, "rank %d: %s", r, qk_last_error());
            if (!l) continue;
            qk_tensor w, sc;
            qk_mx_linear_placeholder(l, "weight", &w);
            qk_mx_linear_placeholder(l, "weight_scale", &sc);
            CHECK(w.shape[1] == p.pad + per && sc.shape[1] == p.kb, "rank %d placeholder shapes", r);
            for (int64_t n = 0; n < N; n++) {
                const uint8_t *row = (const uint8_t *)w.data + n * (p.pad + per);
                bool zero = true;
                for (int64_t c = 0; c < p.pad; c++) zero = zero && row[c] == 0;
                CHECK(zero && !memcmp(row + p.pad, f.w + n * K + k0, (size_t)per), "rank %d weight row %lld", r,
                      (long long)n);
                CHECK(!memcmp((uint8_t *)sc.data + n * p.kb, f.s + n * f.kb + p.kb0, (size_t)p.kb),
                      "rank %d scale row %lld: the shared blocks' bytes on both ranks", r, (long long)n);
            }
            if (!lib_has_linear()) {
                qk_mx_linear_destroy(l);
                continue;
            }
            CHECK(qk_mx_linear_process_weights_after_loading(l, 0) == QK_OK, "%s", qk_last_error());
            float o[12];
            int64_t xs[2] = {M, per}, os[2] = {M, N};
            qk_tensor xt = qk_tensor_make(xf + k0, QK_DTYPE_F32, 2, xs), ot = qk_tensor_make(o, QK_DTYPE_F32, 2, os);
            xt.stride[0] = K;
            CHECK(qk_mx_linear_apply(l, &xt, &ot) == QK_OK, "rank %d apply: %s", r, qk_last_error());
            for (int i = 0; i < 12; i++) sum[i] += o[i];
            qk_tensor bad = xt;
            bad.shape[1] = per + 1;
            CHECK(qk_mx_linear_apply(l, &bad, &ot) == QK_ERR_SHAPE &&
                  strstr(qk_last_error(), p.pad ? "columns" : "must be K"),
                  "x wider than the rank's part: %s", qk_last_error());
            qk_mx_linear_destroy(l);
            /* the serving layer's MXFP8Linear, row-parallel with the same policy */
            qk_layer_options lo = qk_layer_options_default();
            lo.tp_policy = QK_TP_SHARED_BLOCK;
            qk_mxfp8_linear_layer *ly = NULL;
            CHECK(qk_mxfp8_linear_layer_create("v.fc2", K, N, true, tp, r, QK_TP_ROW, &lo, &ly) == QK_OK,
                  "%s", qk_last_error());
            if (!ly) continue;
            int64_t ws[2] = {N, K}, ss[2] = {N, f.kb}, bs[1] = {N};
            qk_tensor wt = qk_tensor_make(f.w, QK_DTYPE_F8_E4M3, 2, ws), st = qk_tensor_make(f.s, QK_DTYPE_U8, 2, ss),
                      bt = qk_tensor_make(f.bias, QK_DTYPE_F32, 1, bs);
            CHECK(qk_mxfp8_linear_layer_load(ly, "v.fc2.weight", &wt) == QK_OK &&
                  qk_mxfp8_linear_layer_load(ly, "v.fc2.weight_scale", &st) == QK_OK &&
                  qk_mxfp8_linear_layer_load(ly, "v.fc2.bias", &bt) == QK_OK &&
                  qk_mxfp8_linear_layer_process_weights_after_loading(ly) == QK_OK, "layer: %s", qk_last_error());
            CHECK(qk_mxfp8_linear_layer_forward(ly, QK_BACKEND_DEFAULT, &xt, &ot) == QK_OK, "layer forward: %s",
                  qk_last_error());
            for (int i = 0; i < 12; i++) sum_layer[i] += o[i];
            qk_mxfp8_linear_layer_destroy(ly);
        }
        if (!lib_has_linear()) {
            qk_test_skip("shared_block rank sums through qk_mxfp8_linear", "qk_mxfp8_linear unavailable");
            break;
        }
        for (int64_t i = 0; i < M * N; i++) {
            double tol = 2 * (0x1p-16 * mag[i] + tp * ldexp(1.0, ilogb(full[i] == 0 ? 1e-30 : full[i]) - 23));
            CHECK(fabs((double)sum[i] - full[i]) <= tol, "tp %d rank sum %lld: %.9g vs %.9g", tp, (long long)i,
                  (double)sum[i], full[i]);
            CHECK(sum_layer[i] == sum[i], "tp %d: the serving layer gives the io linear's bits (%lld)", tp,
                  (long long)i);
        }
    }
    qk_tp odd = {QK_TP_ROW, QK_TP_SHARED_BLOCK, 0, 3};
    qk_tp_part p;
    CHECK(qk_tp_partition(N, 4304, &odd, &p) == QK_ERR_SHAPE && strstr(qk_last_error(), "divide evenly"),
          "K %% tp != 0: %s", qk_last_error());
    free(x);
    free(xf);
    free_full(&f);
}

static void test_tp_column_parallel_slices(void)
{
    const int64_t N = 6, K = 80;
    full_linear f = make_full(N, K, 21);
    for (int r = 0; r < 3; r++) {
        qk_tp tp = {QK_TP_COLUMN, QK_TP_EVEN, r, 3};
        qk_mx_linear *l = load_rank("c.up", &f, &tp);
        CHECK(l != NULL, "rank %d: %s", r, qk_last_error());
        if (!l) continue;
        qk_tensor w, s, b;
        qk_mx_linear_placeholder(l, "weight", &w);
        qk_mx_linear_placeholder(l, "weight_scale", &s);
        qk_mx_linear_placeholder(l, "bias", &b);
        CHECK(w.shape[0] == 2 && w.shape[1] == K && s.shape[1] == 3 && b.shape[0] == 2, "rank %d shapes", r);
        CHECK(!memcmp(w.data, f.w + 2 * r * K, (size_t)(2 * K)), "rank %d weight rows", r);
        CHECK(!memcmp(s.data, f.s + 2 * r * 3, 6), "rank %d scale rows", r);
        CHECK(!memcmp(b.data, f.bias + 2 * r, 2 * sizeof(float)), "rank %d bias rows", r);
        qk_mx_linear_destroy(l);
    }
    qk_tp bad = {QK_TP_COLUMN, QK_TP_EVEN, 0, 4};
    qk_mx_linear *l = NULL;
    CHECK(qk_mx_linear_create_weights("c.up", K, N, true, &bad, &l) == QK_ERR_SHAPE && !l, "N=6 over tp=4");
    free_full(&f);
}

/* ---- the qk tool ---- */
#ifdef QK_TOOL_PATH
static int run_tool(const char *args, char *out, size_t n)
{
    char cmd[4096], log[600];
    snprintf(log, sizeof log, "%s/tool.log", scratch);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", QK_TOOL_PATH, args, log);
    int st = system(cmd);
    size_t len;
    unsigned char *b = read_all(log, &len);
    if (out && n) {
        size_t k = b ? (len < n - 1 ? len : n - 1) : 0;
        if (b) memcpy(out, b, k);
        out[k] = 0;
    }
    free(b);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_tool_inspect_corpus(void)
{
    corpus_case *cs;
    size_t n = corpus_load(&cs), ran = 0;
    static char out[1 << 16];
    for (size_t i = 0; i < n; i++) {
        const corpus_case *c = &cs[i];
        const bool ext = !strcmp(c->check, "inspect_ext");
        if (strcmp(c->check, "inspect") && !ext) continue;
        char args[1024];
        snprintf(args, sizeof args, "inspect %s" CORPUS_DIR "/%s", ext ? "--allow-external-shards " : "",
                 c->path);
        int rc = run_tool(args, out, sizeof out);
        CHECK(rc == atoi(c->expect), "qk inspect %s: exit %d, expected %s\n%s", c->path, rc, c->expect, out);
        CHECK(strstr(out, c->substring) != NULL, "qk inspect %s: output lacks \"%s\"\n%s", c->path, c->substring, out);
        /* --json before the path */
        snprintf(args, sizeof args, "inspect --json " CORPUS_DIR "/%s%s", c->path,
                 ext ? " --allow-external-shards" : "");
        rc = run_tool(args, out, sizeof out);
        CHECK(rc == atoi(c->expect), "qk inspect --json %s: exit %d", c->path, rc);
        CHECK(strstr(out, "\"problems\"") && strstr(out, rc ? "\"ok\": false" : "\"ok\": true"),
              "qk inspect --json %s output:\n%s", c->path, out);
        ran++;
    }
    CHECK(ran >= 10, "only %zu inspect cases", ran);
    /* every rejected single file: exit 1 and the reader's message */
    for (size_t i = 0; i < n; i++) {
        const corpus_case *c = &cs[i];
        if (strcmp(c->check, "open") || !strcmp(c->expect, "QK_OK")) continue;
        char args[1024];
        snprintf(args, sizeof args, "inspect " CORPUS_DIR "/%s", c->path);
        int rc = run_tool(args, out, sizeof out);
        CHECK(rc == 1 && strstr(out, c->substring), "qk inspect %s: exit %d\n%s", c->path, rc, out);
    }
    CHECK(run_tool("inspect", out, sizeof out) == 2, "no PATH is a usage error");
    CHECK(run_tool("inspect --bogus x", out, sizeof out) == 2, "unknown option");
    free(cs);
}

/* a BF16/F32 checkpoint with known special values */
static void write_input(const char *path, int64_t N, int64_t K, float *w32, uint16_t *wbf, uint16_t *bias_bf,
                        float *norm)
{
    uint64_t seed = 99;
    for (int64_t i = 0; i < N * K; i++) w32[i] = (float)(qk_rand_normal(&seed) * (i % 41 == 0 ? 8.0 : 0.5));
    /* row 0: amax 1.0 (scale 2^-8) and exact ties between E4M3 neighbours at v = x * 256 */
    for (int64_t k = 0; k < K; k++) w32[k] = 0;
    w32[0] = 1.0f;
    w32[1] = (float)(1.0625 / 256);     /* 1.0 | 1.125: even -> 1.0, away -> 1.125 */
    w32[2] = (float)(-1.1875 / 256);    /* 1.125 | 1.25: even -> 1.25, away -> 1.25 */
    w32[3] = (float)(0x1p-10 * 5 / 256);/* subnormal tie: 2^-8 | 3 x 2^-9: even -> 2^-8 */
    w32[4] = (float)(-0.0);
    w32[K - 1] = (float)(2.71828 / 256);
    /* row 1: amax in (448, 512) x 2^e saturates under FLOOR */
    w32[K] = 500.0f;
    for (int64_t i = 0; i < N * 40; i++) wbf[i] = (uint16_t)(0x3c00 + (qk_rand_u64(&seed) % 0x800));
    for (int64_t i = 0; i < N; i++) bias_bf[i] = (uint16_t)(0xbf80 + i);
    for (int64_t i = 0; i < K; i++) norm[i] = 1.0f + (float)i;
    qk_st_writer *w = NULL;
    qk_st_writer_create(path, 0, &w);
    int64_t s32[2] = {N, K}, sbf[2] = {N, 40}, sb[1] = {N}, sn[1] = {K}, se[2] = {7, 8};
    static float emb[56];
    qk_st_writer_declare(w, "model.layers.0.mlp.down_proj.weight", "F32", 2, s32, w32);
    qk_st_writer_declare(w, "model.layers.0.mlp.down_proj.bias", "BF16", 1, sb, bias_bf);
    qk_st_writer_declare(w, "model.layers.0.self_attn.o_proj.weight", "BF16", 2, sbf, wbf);
    qk_st_writer_declare(w, "model.layers.0.input_layernorm.weight", "F32", 1, sn, norm);
    qk_st_writer_declare(w, "model.embed_tokens.weight", "F32", 2, se, emb);
    qk_st_writer_declare(w, "lm_head.weight", "F32", 2, se, emb);
    qk_st_writer_set_metadata(w, "format", "pt");
    if (qk_st_writer_commit(w) != QK_OK) fprintf(stderr, "write_input: %s\n", qk_last_error());
    qk_st_writer_destroy(w);
}

static void check_quantized(const qk_st_set *s, const char *name, const double *x, int64_t N, int64_t K,
                            bool rceil, bool away)
{
    char sn[256];
    snprintf(sn, sizeof sn, "%s_scale", name);
    qk_st_info qi, si;
    CHECK(qk_st_set_find(s, name, &qi) == QK_OK && !strcmp(qi.dtype_name, "F8_E4M3") && qi.shape[0] == N &&
          qi.shape[1] == K, "%s: F8_E4M3 [N, K]", name);
    CHECK(qk_st_set_find(s, sn, &si) == QK_OK && !strcmp(si.dtype_name, "U8") && si.shape[1] == (K + 31) / 32,
          "%s: U8 [N, ceil(K/32)]", sn);
    if (qi.ndim != 2 || si.ndim != 2) return;
    int64_t kb = (K + 31) / 32;
    uint8_t *q = malloc((size_t)K), *sc = malloc((size_t)kb);
    long bad = 0;
    for (int64_t n = 0; n < N; n++) {
        ref_quantize_row(x + n * K, K, rceil, away, q, sc);
        for (int64_t j = 0; j < kb; j++)
            if (sc[j] != ((const uint8_t *)si.data)[n * kb + j] && bad++ < 5)
                CHECK(false, "%s row %lld block %lld: scale %u, reference %u", name, (long long)n, (long long)j,
                      ((const uint8_t *)si.data)[n * kb + j], sc[j]);
        for (int64_t k = 0; k < K; k++)
            if (q[k] != ((const uint8_t *)qi.data)[n * K + k] && bad++ < 5)
                CHECK(false, "%s (%s, %s) row %lld col %lld: code 0x%02x, reference 0x%02x (x = %a)", name,
                      rceil ? "rceil" : "floor", away ? "away" : "even", (long long)n, (long long)k,
                      ((const uint8_t *)qi.data)[n * K + k], q[k], x[n * K + k]);
    }
    CHECK(bad == 0, "%s: %ld mismatches", name, bad);
    free(q);
    free(sc);
}

static void test_tool_quantize(void)
{
    static char out[1 << 14];
    const int64_t N = 5, K = 80;
    char in[600], dir[600], args[2048];
    snprintf(in, sizeof in, "%s/model.safetensors", scratch);
    float *w32 = malloc((size_t)(N * K) * sizeof *w32), norm[80];
    uint16_t wbf[200], bias[5];
    write_input(in, N, K, w32, wbf, bias, norm);
    size_t in_len;
    unsigned char *in_bytes = read_all(in, &in_len);

    /* never overwrites its input, even with --force (OUT_DIR = the input's folder); usage errors */
    char victim[600];
    snprintf(victim, sizeof victim, "%s/quant_model_weights.safetensors", scratch);
    CHECK(rename(in, victim) == 0, "rename");
    snprintf(args, sizeof args, "quantize %s %s --force", victim, scratch);
    int rc = run_tool(args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "refusing to overwrite"), "quantize onto its input: %d\n%s", rc, out);
    size_t l2;
    unsigned char *after = read_all(victim, &l2);
    CHECK(after && l2 == in_len && !memcmp(after, in_bytes, in_len), "the input changed");
    free(after);
    CHECK(rename(victim, in) == 0, "rename back");
    snprintf(args, sizeof args, "quantize %s %s/o --include '('", in, scratch);
    CHECK(run_tool(args, out, sizeof out) == 2 && strstr(out, "bad regular expression"), "bad regex:\n%s", out);
    snprintf(args, sizeof args, "quantize %s %s/o --round up", in, scratch);
    CHECK(run_tool(args, out, sizeof out) == 2, "bad --round");
    CHECK(run_tool("quantize onlyone", out, sizeof out) == 2, "missing OUT_DIR");

    if (!lib_has_quantize()) {
        qk_test_skip("qk quantize output checks", "qk_mx_quantize returns QK_ERR_UNSUPPORTED in this build");
        free(w32);
        free(in_bytes);
        return;
    }
    double *x32 = malloc((size_t)(N * K) * sizeof *x32), xbf[200];
    for (int64_t i = 0; i < N * K; i++) x32[i] = w32[i];
    for (int i = 0; i < 200; i++) {
        uint32_t u = (uint32_t)wbf[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        xbf[i] = f;
    }
    static const struct { const char *opts; bool rceil, away; } modes[] = {
        /* the default rule (modelslim) is checked byte for byte against an independent
           msModelSlim quantizer in tests/python/test_qkern_package.py */
        {"--scale-rule floor", false, true}, {"--scale-rule=floor --round even", false, false},
        {"--scale-rule rceil", true, true},
        {"--scale-rule=rceil --round=even", true, false},
    };
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        snprintf(dir, sizeof dir, "%s/out%zu", scratch, mi);
        snprintf(args, sizeof args, "quantize %s %s %s", in, dir, modes[mi].opts);
        rc = run_tool(args, out, sizeof out);
        CHECK(rc == 0, "qk %s: %d\n%s", args, rc, out);
        if (rc) continue;
        qk_ms_model *m = NULL;
        CHECK(qk_ms_open(dir, 0, &m) == QK_OK, "the output is a valid ModelSlim folder: %s", qk_last_error());
        if (!m) continue;
        const qk_st_set *s = qk_ms_tensors(m);
        const qk_ms_desc *d = qk_ms_description(m);
        CHECK(!strcmp(qk_ms_desc_quant_type(d), "W8A8_MXFP8") && qk_ms_desc_group_size(d) == 32, "description header");
        check_quantized(s, "model.layers.0.mlp.down_proj.weight", x32, N, K, modes[mi].rceil, modes[mi].away);
        check_quantized(s, "model.layers.0.self_attn.o_proj.weight", xbf, N, 40, modes[mi].rceil, modes[mi].away);
        CHECK(!strcmp(qk_ms_desc_lookup(d, "model.layers.0.mlp.down_proj.weight"), "W8A8_MXFP8") &&
              !strcmp(qk_ms_desc_lookup(d, "model.layers.0.mlp.down_proj.weight_scale"), "W8A8_MXFP8"),
              "quantized entries");
        static const char *const kept[] = {"model.embed_tokens.weight", "lm_head.weight",
                                           "model.layers.0.input_layernorm.weight", "model.layers.0.mlp.down_proj.bias"};
        for (int k = 0; k < 4; k++)
            CHECK(qk_ms_desc_lookup(d, kept[k]) && !strcmp(qk_ms_desc_lookup(d, kept[k]), "FLOAT"), "%s FLOAT", kept[k]);
        qk_st_info b;
        CHECK(qk_st_set_find(s, "model.layers.0.mlp.down_proj.bias", &b) == QK_OK && !strcmp(b.dtype_name, "F32"),
              "bias as F32");
        for (int64_t i = 0; i < N && b.dtype == QK_DTYPE_F32; i++) {
            float v;
            memcpy(&v, (const char *)b.data + 4 * i, 4);
            uint32_t u = (uint32_t)bias[i] << 16;
            float want;
            memcpy(&want, &u, 4);
            CHECK(v == want, "bias[%lld] %g vs %g", (long long)i, (double)v, (double)want);
        }
        CHECK(qk_st_set_find(s, "model.layers.0.input_layernorm.weight", &b) == QK_OK && !strcmp(b.dtype_name, "F32") &&
              !memcmp(b.data, norm, sizeof norm), "norm copied unchanged");
        /* the life cycle loads it */
        qk_mx_linear *l = NULL;
        qk_mx_linear_create_weights("model.layers.0.mlp.down_proj", K, N, true, NULL, &l);
        CHECK(qk_mx_linear_load_all(l, s) == QK_OK, "loader on qk quantize's output: %s", qk_last_error());
        qk_mx_linear_destroy(l);
        qk_ms_close(m);
    }
    /* --include / --exclude, and refusing an existing output without --force */
    snprintf(dir, sizeof dir, "%s/out_sel", scratch);
    snprintf(args, sizeof args, "quantize %s %s --include 'o_proj|lm_head' --exclude o_proj --quiet", in, dir);
    CHECK(run_tool(args, out, sizeof out) == 0, "selection run:\n%s", out);
    qk_ms_model *m = NULL;
    CHECK(qk_ms_open(dir, 0, &m) == QK_OK, "%s", qk_last_error());
    if (m) {
        const qk_ms_desc *d = qk_ms_description(m);
        CHECK(!strcmp(qk_ms_desc_lookup(d, "lm_head.weight"), "W8A8_MXFP8"), "--include lm_head quantizes it");
        CHECK(!strcmp(qk_ms_desc_lookup(d, "model.layers.0.self_attn.o_proj.weight"), "FLOAT"), "--exclude wins");
        CHECK(!strcmp(qk_ms_desc_lookup(d, "model.layers.0.mlp.down_proj.weight"), "FLOAT"), "not included");
        qk_ms_close(m);
    }
    CHECK(run_tool(args, out, sizeof out) == 1 && strstr(out, "exists"), "existing output without --force:\n%s", out);
    snprintf(args, sizeof args, "quantize %s %s --force --quiet", in, dir);
    CHECK(run_tool(args, out, sizeof out) == 0, "--force replaces:\n%s", out);
    /* a sharded HF input gives a sharded output with an index */
    char hf[600], p1[700], p2[700], idx[700];
    snprintf(hf, sizeof hf, "%s/hf", scratch);
    mkdir(hf, 0755);
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", hf);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", hf);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", hf);
    qk_st_writer *w = NULL;
    int64_t s32[2] = {N, K}, sn[1] = {K};
    qk_st_writer_create(p1, 0, &w);
    qk_st_writer_declare(w, "a.mlp.up_proj.weight", "F32", 2, s32, w32);
    qk_st_writer_commit(w);
    qk_st_writer_destroy(w);
    qk_st_writer_create(p2, 0, &w);
    qk_st_writer_declare(w, "a.post_attention_layernorm.weight", "F32", 1, sn, norm);
    qk_st_writer_commit(w);
    qk_st_writer_destroy(w);
    const char *ij = "{\"metadata\":{},\"weight_map\":{\"a.mlp.up_proj.weight\":\"model-00001-of-00002.safetensors\","
                     "\"a.post_attention_layernorm.weight\":\"model-00002-of-00002.safetensors\"}}";
    write_all(idx, ij, strlen(ij));
    snprintf(dir, sizeof dir, "%s/out_sharded", scratch);
    /* shards of at most 500 bytes: the 415-byte weight + scale, then the 320-byte norm */
    snprintf(args, sizeof args, "quantize %s %s --scale-rule floor --shard-size 500", hf, dir);
    CHECK(run_tool(args, out, sizeof out) == 0, "sharded run:\n%s", out);
    {
        char ip[700];
        snprintf(ip, sizeof ip, "%s/quant_model_weights.safetensors.index.json", dir);
        json_error_t je;
        json_t *ix = json_load_file(ip, 0, &je);
        json_t *ts = json_object_get(json_object_get(ix, "metadata"), "total_size");
        CHECK(json_is_integer(ts) && json_integer_value(ts) == N * K + N * 3 + K * 4,
              "index metadata.total_size is the bytes of every tensor (%lld)",
              ts ? (long long)json_integer_value(ts) : -1LL);
        json_t *wm = json_object_get(ix, "weight_map");
        CHECK(json_is_string(json_object_get(wm, "a.mlp.up_proj.weight_scale")) &&
              !strcmp(json_string_value(json_object_get(wm, "a.post_attention_layernorm.weight")),
                      "quant_model_weights-00002-of-00002.safetensors"), "index weight_map");
        json_decref(ix);
    }
    m = NULL;
    CHECK(qk_ms_open(dir, 0, &m) == QK_OK, "%s", qk_last_error());
    if (m) {
        CHECK(qk_st_set_file_count(qk_ms_tensors(m)) == 2 && qk_st_set_index_path(qk_ms_tensors(m)), "two shards + index");
        check_quantized(qk_ms_tensors(m), "a.mlp.up_proj.weight", x32, N, K, false, true);
        qk_ms_close(m);
    }
    snprintf(args, sizeof args, "inspect %s", dir);
    CHECK(run_tool(args, out, sizeof out) == 0, "inspect of the quantized output:\n%s", out);
    free(x32);
    free(w32);
    free(in_bytes);
}
#endif

/* qk_modelslim_quantize reads a Hugging Face cache snapshot (every file a link into
   ../../blobs) only with allow_external_shards; refused, it writes nothing */
static void test_quantize_external_shards_opt_in(void)
{
    static const char snap[] = CORPUS_DIR "/hf_cache/models--org--tiny/snapshots/0123abcd";
    char out[600], desc[700];
    snprintf(out, sizeof out, "%s/q_external", scratch);
    snprintf(desc, sizeof desc, "%s/quant_model_description.json", out);
    qk_ms_quantize_options o = qk_ms_quantize_defaults();
    qk_ms_quantize_report rep;
    CHECK(!o.allow_external_shards, "the default follows no link out of the folder");
    qk_status st = qk_modelslim_quantize(snap, out, &o, &rep);
    CHECK(st == QK_ERR_FORMAT && strstr(qk_last_error(), "index " CORPUS_DIR "/hf_cache/models--org--tiny/"
                                        "snapshots/0123abcd/model.safetensors.index.json resolves outside "
                                        "the model folder") &&
              strstr(qk_last_error(), "--allow-external-shards"),
          "refused: %s %s", qk_status_name(st), qk_last_error());
    struct stat sb;
    CHECK(stat(out, &sb) != 0, "%s was created by a refused run", out);
    o.allow_external_shards = true;
    st = qk_modelslim_quantize(snap, out, &o, &rep);
    CHECK(st == QK_OK && rep.quantized == 1, "with the opt-in: %s (%zu quantized)", qk_last_error(), rep.quantized);
    CHECK(stat(desc, &sb) == 0, "no description in %s", out);
    qk_ms_model *m = NULL;
    CHECK(qk_ms_open(out, 0, &m) == QK_OK, "the output: %s", qk_last_error());
    qk_ms_close(m);
}

int main(void)
{
    qk_test_require_cpu("test_modelslim");
    mx_oracle_init();
    scratch_dir(scratch, sizeof scratch, "ms");
    if (!scratch[0]) return 1;
    RUN(test_corpus_modelslim);
    RUN(test_description);
    RUN(test_create_weights_placeholders);
    RUN(test_load_checks_dtype_then_shape_and_copies_nothing_on_error);
    RUN(test_post_processing_rejects_unloaded_scales);
    RUN(test_pairs_odd_kb);
    RUN(test_tp_partition_rules);
    RUN(test_tp_row_parallel_sums_to_unsharded);
    RUN(test_tp_shared_block_sums_to_unsharded);
    RUN(test_tp_column_parallel_slices);
    RUN(test_quantize_external_shards_opt_in);
#ifdef QK_TOOL_PATH
    RUN(test_tool_inspect_corpus);
    RUN(test_tool_quantize);
#else
    qk_test_skip("qk tool tests", "QK_TOOL_PATH not defined by the build");
#endif
    remove_tree(scratch);
    return qk_test_finish();
}
