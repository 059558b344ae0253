/* Build targets: the staged table covers every op of the API with a compiled provider,
 * qk_provider() reports it, and a CPU lacking the target's instructions gets QK_ERR_CPU
 * naming the missing feature and the target to rebuild with (feature query faked). */
#include "harness.h"
#include "internal.h"

#include <stdlib.h>

static const qk_provider_set *provider_named(const char *name)
{
    for (int p = 0; name && qk_all_providers[p]; p++)
        if (!strcmp(qk_all_providers[p]->name, name)) return qk_all_providers[p];
    return NULL;
}

static void test_table_is_complete(void)
{
    const qk_target_table *t = &qk_target_table_built;
    for (int i = 0; qk_op_names[i]; i++) {
        const char *prov = qk_ops_provider(&t->ops, qk_op_names[i]);
        CHECK(prov != NULL, "target %s stages no provider for op %s", t->name, qk_op_names[i]);
        if (!prov) continue;
        CHECK(qk_provider(qk_op_names[i]) && !strcmp(qk_provider(qk_op_names[i]), prov),
              "qk_provider(%s) disagrees with the table", qk_op_names[i]);
        /* the staged provider is a compiled provider that implements the op */
        int found = 0;
        for (int p = 0; qk_all_providers[p]; p++)
            if (!strcmp(qk_all_providers[p]->name, prov)) {
                const char *own = qk_ops_provider(&qk_all_providers[p]->ops, qk_op_names[i]);
                found = own && !strcmp(own, prov);
                CHECK((qk_all_providers[p]->cpu_features & ~t->cpu_features) == 0,
                      "provider %s needs CPU features the target %s does not require", prov,
                      t->name);
            }
        CHECK(found, "op %s: staged provider %s is not a compiled provider implementing it",
              qk_op_names[i], prov);
    }
    /* every staged function is the named provider's own (a table that ran one provider's
       kernel under another's name would misreport what runs) */
    for (int k = 0; k < QK_NORM_KINDS; k++) {
        const qk_provider_set *p = provider_named(t->ops.norm[k].provider);
        CHECK(p && t->ops.norm[k].fn && t->ops.norm[k].fn == p->ops.norm[k].fn,
              "norm %s: the staged function is not %s's own", qk_op_names[k], t->ops.norm[k].provider);
    }
    const qk_provider_set *pq = provider_named(t->ops.mx_quantize.provider),
                          *pd = provider_named(t->ops.mx_dequantize.provider),
                          *pl = provider_named(t->ops.mxfp8_linear ? t->ops.mxfp8_linear->provider : NULL);
    CHECK(pq && t->ops.mx_quantize.fn == pq->ops.mx_quantize.fn, "mx_quantize: not %s's own",
          t->ops.mx_quantize.provider);
    CHECK(pd && t->ops.mx_dequantize.fn == pd->ops.mx_dequantize.fn, "mx_dequantize: not %s's own",
          t->ops.mx_dequantize.provider);
    CHECK(pl && t->ops.mxfp8_linear == pl->ops.mxfp8_linear, "mxfp8_linear: not %s's own",
          t->ops.mxfp8_linear ? t->ops.mxfp8_linear->provider : "-");
    /* and the providers each target stages (README's targets table), stated independently */
    const char *want = !strcmp(t->name, "x86-64-v4") ? "avx512" : !strcmp(t->name, "x86-64-v3") ? "avx2" : "ref";
    for (int i = 0; qk_op_names[i]; i++) {
        const char *expect = !strcmp(qk_op_names[i], "mx_pack_scale_pairs") ? "ref" : want;
        CHECK(qk_provider(qk_op_names[i]) && !strcmp(qk_provider(qk_op_names[i]), expect),
              "target %s stages %s for %s; its table documents %s", t->name,
              qk_provider(qk_op_names[i]) ? qk_provider(qk_op_names[i]) : "nothing", qk_op_names[i], expect);
    }
    CHECK(qk_provider("no_such_op") == NULL, "unknown op must give NULL");
    CHECK(qk_provider(NULL) == NULL, "NULL op must give NULL");
}

static void test_reference_provider_is_complete(void)
{
    CHECK(qk_all_providers[0] == &qk_provider_ref, "ref must be the first provider");
    for (int i = 0; qk_op_names[i]; i++)
        CHECK(qk_ops_provider(&qk_provider_ref.ops, qk_op_names[i]) != NULL,
              "the reference provider lacks op %s", qk_op_names[i]);
}

static void test_info_strings(void)
{
    CHECK(!strcmp(qk_target(), QK_TEST_TARGET), "qk_target() = %s, built for %s", qk_target(),
          QK_TEST_TARGET);
    CHECK(qk_abi_version() == 1, "abi");
    int a, b, c;
    CHECK(sscanf(qk_version(), "%d.%d.%d", &a, &b, &c) == 3, "version '%s'", qk_version());
}

static unsigned no_features(void) { return 0; }

static void test_cpu_lacking_features_is_refused(void)
{
    qk_test_set_cpu_query(no_features);
    qk_test_reset_init();
    qk_status st = qk_init();
    const qk_target_table *t = &qk_target_table_built;
    if (t->cpu_features == 0) {
        CHECK(st == QK_OK, "generic target must run anywhere: %s", qk_last_error());
    } else {
        CHECK(st == QK_ERR_CPU, "init on a featureless CPU gave %s", qk_status_name(st));
        const char *m = qk_last_error();
        CHECK(strstr(m, t->name) != NULL, "message does not name the target: %s", m);
        CHECK(strstr(m, "AVX2") != NULL, "message does not name a missing feature: %s", m);
        CHECK(strstr(m, "-DQK_TARGET=generic") != NULL, "message does not name the target to "
              "rebuild with: %s", m);
        /* every op refuses, writing nothing */
        int64_t H = 8;
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8] = {0}, out[8];
        memset(out, 0x5A, sizeof out);
        qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 1, &H), wt = qk_tensor_make(w, QK_DTYPE_F32, 1, &H);
        qk_tensor ot = qk_tensor_make(out, QK_DTYPE_F32, 1, &H);
        CHECK(qk_gemma_rms_norm(&xt, &wt, 1e-6f, &ot, NULL) == QK_ERR_CPU, "op ran on a refused CPU");
        unsigned char *o = (unsigned char *)out;
        for (size_t i = 0; i < sizeof out; i++) CHECK(o[i] == 0x5A, "output written");
    }
    qk_test_set_cpu_query(NULL);
    qk_test_reset_init();
    const qk_status want = (t->cpu_features & ~qk_cpu_features()) ? QK_ERR_CPU : QK_OK;
    CHECK(qk_init() == want, "init after restoring the real query gave %s, want %s (%s)",
          qk_status_name(qk_init()), qk_status_name(want), qk_last_error());
}

/* The real CPUID path (no fake): on a host lacking some of the target's instructions, the
   first call is refused with QK_ERR_CPU naming each missing feature and a target this host
   runs; on a host that has them all, init succeeds. */
static void test_real_cpu_is_checked(void)
{
    const qk_target_table *t = &qk_target_table_built;
    const unsigned have = qk_cpu_features(), missing = t->cpu_features & ~have;
    qk_test_reset_init();
    qk_status st = qk_init();
    if (!missing) {
        CHECK(st == QK_OK, "this CPU has every feature of %s, init gave %s: %s", t->name,
              qk_status_name(st), qk_last_error());
        return;
    }
    printf("note: this CPU lacks instructions of target %s: %s\n", t->name, qk_last_error());
    CHECK(st == QK_ERR_CPU, "init on this CPU gave %s", qk_status_name(st));
    const char *m = qk_last_error();
    for (unsigned bit = 1; bit && bit <= missing; bit <<= 1)
        if (missing & bit)
            CHECK(strstr(m, qk_cpu_feature_name(bit)) != NULL, "message does not name %s: %s",
                  qk_cpu_feature_name(bit), m);
    const unsigned v3 = QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C;
    const char *alt = (have & v3) == v3 ? "-DQK_TARGET=x86-64-v3" : "-DQK_TARGET=generic";
    CHECK(strstr(m, alt) != NULL, "message does not advise %s: %s", alt, m);
    /* every op refuses, writing nothing, and keeps refusing */
    int64_t H = 4;
    float x[4] = {1, 2, 3, 4}, w[4] = {0}, out[4];
    memset(out, 0x5A, sizeof out);
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 1, &H), wt = qk_tensor_make(w, QK_DTYPE_F32, 1, &H);
    qk_tensor ot = qk_tensor_make(out, QK_DTYPE_F32, 1, &H);
    CHECK(qk_rms_norm(&xt, &wt, 1e-6f, &ot, NULL) == QK_ERR_CPU, "an op ran on a refused CPU");
    CHECK(qk_init() == QK_ERR_CPU, "a second init must refuse too");
    const unsigned char *o = (const unsigned char *)out;
    for (size_t i = 0; i < sizeof out; i++) CHECK(o[i] == 0x5A, "output written");
}

static unsigned only_v3(void) { return QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C; }

static void test_v4_on_v3_cpu_names_v3(void)
{
    if (!(qk_target_table_built.cpu_features & QK_CPU_AVX512F)) {
        qk_test_skip("test_v4_on_v3_cpu_names_v3", "target does not need AVX-512");
        return;
    }
    qk_test_set_cpu_query(only_v3);
    qk_test_reset_init();
    qk_status st = qk_init();
    CHECK(st == QK_ERR_CPU && strstr(qk_last_error(), "AVX512F") &&
          strstr(qk_last_error(), "-DQK_TARGET=x86-64-v3"), "%s", qk_last_error());
    qk_test_set_cpu_query(NULL);
    qk_test_reset_init();
}

int main(void)
{
    RUN(test_table_is_complete);
    RUN(test_reference_provider_is_complete);
    RUN(test_info_strings);
    RUN(test_cpu_lacking_features_is_refused);
    RUN(test_v4_on_v3_cpu_names_v3);
    RUN(test_real_cpu_is_checked);
    return qk_test_finish();
}
