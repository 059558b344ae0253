/* serving.md, "`qk demo`": the demo runs build/qk twice, once to pass (exit 0) and once with
 * a check forced to fail (QK_DEMO_FORCE_FAIL=1: exit 1, the failing layer named); then
 * `qk demo --model DIR` on a ModelSlim folder with Qwen3.5 names (exit 0) and on one whose
 * names do not match (exit 1, listing what it expected and what it found). Sanitizer builds
 * run the demo with --quick (4 tokens, one timed call) to stay within the test budget. */
#define _GNU_SOURCE
#include "harness.h"
#include "io_test_util.h"
#include "demo_check.h"

#include <sys/wait.h>

#ifdef QK_TOOL_PATH

#ifdef QK_DEMO_QUICK
#define DEMO_ARGS " --quick"
#else
#define DEMO_ARGS ""
#endif

static char root[512];

/* Runs `qk ARGS` with an optional environment assignment; returns the exit status and the
   combined output (malloc'd). */
static int run_qk(const char *env, const char *args, char **out)
{
    char log[700], cmd[2400];
    snprintf(log, sizeof log, "%s/run.log", root);
    snprintf(cmd, sizeof cmd, "%s %s %s > %s 2>&1", env ? env : "", QK_TOOL_PATH, args, log);
    int st = system(cmd);
    size_t n = 0;
    unsigned char *b = read_all(log, &n);
    *out = calloc(n + 1, 1);
    if (b && *out) memcpy(*out, b, n);
    free(b);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void demo_passes(void)
{
    char *out = NULL;
    int rc = run_qk(NULL, "demo" DEMO_ARGS, &out);
    CHECK(rc == 0, "qk demo exited %d:\n%s", rc, out);
    CHECK(strstr(out, "qk demo: all checks passed") != NULL, "verdict missing:\n%s", out);
    static const char *const rows[] = {
        "model.layers.0.post_attention_layernorm", "model.layers.0.mlp.gate_up_proj",
        "model.layers.0.mlp.down_proj", "model.visual.blocks.0.mlp.linear_fc1",
        "model.visual.blocks.0.mlp.linear_fc2 (K = 4304)", "qk quantize: 5 linear weights",
        "reference backend"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        CHECK(strstr(out, rows[i]) != NULL, "\"%s\" missing from the demo's output", rows[i]);
    CHECK(strstr(out, "FAIL") == NULL, "a FAIL line in a passing run:\n%s", out);
    free(out);
}

static void demo_fails_when_a_check_is_forced_to_fail(void)
{
    char *out = NULL;
    int rc = run_qk("QK_DEMO_FORCE_FAIL=1", "demo" DEMO_ARGS, &out);
    CHECK(rc == 1, "forced failure exited %d (expected 1):\n%s", rc, out);
    CHECK(strstr(out, "qk demo: FAILED") != NULL, "verdict missing:\n%s", out);
    const char *row = strstr(out, "model.layers.0.mlp.down_proj ");
    CHECK(row && strstr(row, "FAIL") && strstr(out, "target exceeds mxfp8.md's bound"),
          "the perturbed layer is not the one failing:\n%s", out);
    free(out);
}

static qk_qwen35_config small = {64, 96, 1e-6f, 64, 4304};

/* Writes a small demo model (names rewritten by `rename`) and quantizes it into root/tag. */
static int make_folder(const char *tag, bool rename, char *ms, size_t n)
{
    qk_demo_model dm;
    if (qk_demo_model_build(&small, 0, 0, 11, &dm) != QK_OK) return -1;
    for (size_t i = 0; rename && i < dm.n; i++) {
        char buf[128];
        const char *nm = dm.t[i].name;
        if (!strncmp(nm, "model.layers.", 13)) snprintf(buf, sizeof buf, "model.language_model.layers.%s", nm + 13);
        else snprintf(buf, sizeof buf, "model.vision_tower.%s", nm + strlen("model.visual."));
        snprintf(dm.t[i].name, sizeof dm.t[i].name, "%s", buf);
    }
    char bf16[700], args[2000], *out = NULL;
    snprintf(bf16, sizeof bf16, "%s/%s.safetensors", root, tag);
    snprintf(ms, n, "%s/%s", root, tag);
    int rc = qk_demo_model_write(&dm, bf16) == QK_OK ? 0 : -1;
    qk_demo_model_free(&dm);
    snprintf(args, sizeof args, "quantize %s %s --quiet", bf16, ms);
    if (rc == 0) rc = run_qk(NULL, args, &out);
    free(out);
    return rc;
}

static void demo_model_on_a_qwen35_folder(void)
{
    char ms[700], args[900], *out = NULL;
    CHECK(make_folder("good", false, ms, sizeof ms) == 0, "quantize");
    snprintf(args, sizeof args, "demo --model %s --quick", ms);
    int rc = run_qk(NULL, args, &out);
    CHECK(rc == 0, "qk demo --model exited %d:\n%s", rc, out);
    CHECK(strstr(out, "qk demo: all checks passed") && strstr(out, "dequantized") &&
          strstr(out, "model.visual.blocks.0.mlp.linear_fc2 (K = 4304)"), "output:\n%s", out);
    free(out);
}

static void demo_model_with_mismatched_names(void)
{
    char ms[700], args[900], *out = NULL;
    CHECK(make_folder("renamed", true, ms, sizeof ms) == 0, "quantize");
    snprintf(args, sizeof args, "demo --model %s --quick", ms);
    int rc = run_qk(NULL, args, &out);
    CHECK(rc == 1, "mismatched names exited %d:\n%s", rc, out);
    CHECK(strstr(out, "expected") && strstr(out, "model.layers.0.mlp.gate_proj") &&
          strstr(out, "model.visual.blocks.0.mlp.linear_fc1"), "expected names not listed:\n%s", out);
    CHECK(strstr(out, "found") && strstr(out, "model.language_model.layers.0.mlp.gate_proj.weight"),
          "found names not listed:\n%s", out);
    free(out);
    rc = run_qk(NULL, "demo --model /nonexistent/folder", &out);
    CHECK(rc == 1 && strstr(out, "/nonexistent/folder"), "missing folder: %d\n%s", rc, out);
    free(out);
}

int main(void)
{
    qk_test_require_cpu("test_serve_demo");
    scratch_dir(root, sizeof root, "serve_demo");
    RUN(demo_passes);
    RUN(demo_fails_when_a_check_is_forced_to_fail);
    RUN(demo_model_on_a_qwen35_folder);
    RUN(demo_model_with_mismatched_names);
    if (root[0]) remove_tree(root);
    return qk_test_finish();
}

#else
int main(void)
{
    qk_test_skip("qk demo", "QK_TOOL_PATH not defined by the build");
    return qk_test_finish();
}
#endif
