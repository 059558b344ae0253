/* Build targets: the staged table covers every op of the API with a compiled provider,
 * qk_provider() reports it, and a CPU lacking the target's instructions gets QK_ERR_CPU
 * naming the missing feature and the target to rebuild with (feature query faked). */
#include "harness.h"
#include "internal.h"
#include "qk_target_needs.h"

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
    /* and the providers each target stages, stated independently by its CMake fragment
       (QK_TARGET_STAGES: "norm=<p> mx_quantize=<p> ..."; "norm" is the five norm ops, an op
       not named stages ref) */
    for (int i = 0; qk_op_names[i]; i++) {
        const char *op = qk_op_names[i], *key = i < QK_NORM_KINDS ? "norm" : op;
        char expect[32] = "ref", pat[48];
        snprintf(pat, sizeof pat, "%s=", key);
        const char *stages = QK_TEST_STAGES;
        for (const char *q = stages; (q = strstr(q, pat)) != NULL; q += strlen(pat))
            if (q == stages || q[-1] == ' ') {
                sscanf(q + strlen(pat), "%31s", expect);
                break;
            }
        CHECK(qk_provider(op) && !strcmp(qk_provider(op), expect),
              "target %s stages %s for %s; its CMake fragment documents %s", t->name,
              qk_provider(op) ? qk_provider(op) : "nothing", op, expect);
    }
    CHECK(qk_provider("no_such_op") == NULL, "unknown op must give NULL");
    CHECK(qk_provider(NULL) == NULL, "NULL op must give NULL");
}

/* The table is the config resolved: ref's ops with exactly the config's overrides, each from
   the overriding provider's own set, and the union of their CPU features. */
static void test_table_is_the_config_resolved(void)
{
    const qk_target_config *cfg = &qk_target_config_built;
    qk_target_table r;
    qk_target_resolve(cfg, &r);
    CHECK(!memcmp(&r.ops, &qk_target_table_built.ops, sizeof r.ops) &&
          r.cpu_features == qk_target_table_built.cpu_features && !strcmp(r.name, cfg->name),
          "the staged table is not its config resolved");
    /* overrides name compiled ISA providers, never ref (ref is the base) */
    const qk_provider_set *const *o = &cfg->overrides.norm[0];
    const size_t n = sizeof cfg->overrides / sizeof *o;
    for (size_t i = 0; i < n; i++) {
        if (!o[i]) continue;
        int compiled = 0;
        for (int p = 1; qk_all_providers[p]; p++) compiled |= qk_all_providers[p] == o[i];
        CHECK(compiled, "override %zu names %s, not a compiled ISA provider", i, o[i]->name);
    }
    /* a config overriding one op takes that op, and only its features, from that set */
    const qk_provider_set *last = NULL;
    for (int p = 0; qk_all_providers[p]; p++)
        if (qk_all_providers[p]->ops.mx_dequantize.fn) last = qk_all_providers[p];
    qk_target_config one = {.name = "one", .overrides = {.mx_dequantize = last}};
    qk_target_resolve(&one, &r);
    CHECK(r.ops.mx_dequantize.fn == last->ops.mx_dequantize.fn &&
          r.ops.mx_quantize.fn == qk_provider_ref.ops.mx_quantize.fn &&
          r.ops.mxfp8_linear == qk_provider_ref.ops.mxfp8_linear &&
          r.ops.norm[QK_NORM_GEMMA].fn == qk_provider_ref.ops.norm[QK_NORM_GEMMA].fn &&
          r.cpu_features == last->cpu_features, "one override resolved wrong");
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

/* The existing targets' CPUs, stated independently of the fragments: feature sets and the
   target each must get (a target added later needs more features, so it changes none). */
static const struct { unsigned have; const char *best; } known_cpus[] = {
    {0, "generic"},
#if defined(__x86_64__)
    {QK_CPU_AVX2 | QK_CPU_FMA, "generic"},
    {QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C, "x86-64-v3"},
    {QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C | QK_CPU_AVX512F | QK_CPU_AVX512BW | QK_CPU_AVX512VL |
         QK_CPU_AVX512DQ, "x86-64-v3"},
    {QK_CPU_AVX2 | QK_CPU_FMA | QK_CPU_F16C | QK_CPU_AVX512F | QK_CPU_AVX512BW | QK_CPU_AVX512VL |
         QK_CPU_AVX512DQ | QK_CPU_AVX512BF16, "x86-64-v4"},
    {QK_CPU_AVX512F | QK_CPU_AVX512BW | QK_CPU_AVX512VL | QK_CPU_AVX512DQ | QK_CPU_AVX512BF16, "generic"},
#elif defined(__aarch64__)
    {QK_CPU_ARM_BF16, "generic"},
    {QK_CPU_NEON, "aarch64"},
    {QK_CPU_NEON | QK_CPU_ARM_BF16, "aarch64-bf16"},
#endif
};

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
        const unsigned low = t->cpu_features & (0u - t->cpu_features);
        CHECK(strstr(m, qk_cpu_feature_name(low)) != NULL,
              "message does not name the missing feature %s: %s", qk_cpu_feature_name(low), m);
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
    char alt[64];
    snprintf(alt, sizeof alt, "-DQK_TARGET=%s", qk_cpu_best_target(have));
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

/* The target choice: the CPUs of known_cpus get their targets; for every subset of the
   architecture's named features, the chosen target is one the fragments list (or generic),
   runs on it, and no listed target it runs needs more; the built target's fragment
   declares exactly the features its providers need (QK_TEST_NEEDS against the table). */
static void test_best_target_per_cpu(void)
{
    static const struct { const char *name; unsigned needs; } targets[] = {QK_CPU_TARGET_LIST{0, 0}};
    for (size_t i = 0; i < sizeof known_cpus / sizeof known_cpus[0]; i++)
        CHECK(!strcmp(qk_cpu_best_target(known_cpus[i].have), known_cpus[i].best),
              "features %#x: best %s, want %s", known_cpus[i].have,
              qk_cpu_best_target(known_cpus[i].have), known_cpus[i].best);
    unsigned known = 0;
    for (unsigned bit = 1; bit; bit <<= 1)
        if (strcmp(qk_cpu_feature_name(bit), "?")) known |= bit;
    for (unsigned sub = known;; sub = (sub - 1) & known) {
        const char *b = qk_cpu_best_target(sub);
        int found = !strcmp(b, "generic"), most = 0, chosen = 0;
        for (int i = 0; targets[i].name; i++) {
            CHECK((targets[i].needs & ~known) == 0, "target %s needs a feature without a name",
                  targets[i].name);
            if ((targets[i].needs & ~sub) == 0 && __builtin_popcount(targets[i].needs) > most)
                most = __builtin_popcount(targets[i].needs);
            if (!strcmp(b, targets[i].name)) {
                found = 1;
                chosen = __builtin_popcount(targets[i].needs);
                CHECK((targets[i].needs & ~sub) == 0, "features %#x: best %s needs %#x", sub, b,
                      targets[i].needs);
            }
        }
        CHECK(found, "features %#x: best %s is not a target of this architecture", sub, b);
        CHECK(chosen == most, "features %#x: %s chosen, but a target needing %d features runs", sub,
              b, most);
        if (!sub) break;
    }
    CHECK(qk_target_table_built.cpu_features == (unsigned)QK_TARGET_NEEDS_DECLARED,
          "target %s: its fragment declares CPU features %#x (QK_TARGET_NEEDS), its providers need %#x",
          qk_target_table_built.name, (unsigned)QK_TARGET_NEEDS_DECLARED, qk_target_table_built.cpu_features);
}

static unsigned fake_have;
static unsigned fake_query(void) { return fake_have; }

/* A CPU with every feature of the target but its highest one is refused, naming that
   feature and advising the best target it runs (x86-64-v4 without AVX512_BF16: x86-64-v3;
   aarch64-bf16 without BF16: aarch64). */
static void test_one_feature_short_names_it(void)
{
    const unsigned need = qk_target_table_built.cpu_features;
    if (!need) {
        qk_test_skip("test_one_feature_short_names_it", "target needs no CPU feature");
        return;
    }
    unsigned top = 1u << 31;
    while (!(need & top)) top >>= 1;
    fake_have = need & ~top;
    qk_test_set_cpu_query(fake_query);
    qk_test_reset_init();
    qk_status st = qk_init();
    char alt[64];
    snprintf(alt, sizeof alt, "-DQK_TARGET=%s", qk_cpu_best_target(fake_have));
    CHECK(st == QK_ERR_CPU && strstr(qk_last_error(), qk_cpu_feature_name(top)) &&
          strstr(qk_last_error(), alt), "want %s and %s: %s", qk_cpu_feature_name(top), alt,
          qk_last_error());
    qk_test_set_cpu_query(NULL);
    qk_test_reset_init();
}

int main(void)
{
    RUN(test_table_is_complete);
    RUN(test_reference_provider_is_complete);
    RUN(test_info_strings);
    RUN(test_cpu_lacking_features_is_refused);
    RUN(test_one_feature_short_names_it);
    RUN(test_best_target_per_cpu);
    RUN(test_table_is_the_config_resolved);
    RUN(test_real_cpu_is_checked);
    return qk_test_finish();
}
