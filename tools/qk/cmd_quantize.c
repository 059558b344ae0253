/* `qk quantize IN OUT_DIR [options]`: the command line of qk_modelslim_quantize
 * (src/io/ms_quantize.c: a BF16/F16/F32 checkpoint -> a servable ModelSlim W8A8_MXFP8 folder,
 * byte-identical to msModelSlim's export by default): its options, its messages and its
 * exit status (0 written, 1 refused or failed, 2 usage). */
#define _GNU_SOURCE
#include "qk_tool.h"

#include "internal.h"
#include "io/ms_quantize.h"

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct {
    regex_t *inc, *exc;
    int ninc, nexc;
} selection;

static int usage(FILE *f)
{
    fprintf(f,
            "usage: qk quantize IN OUT_DIR [options]\n"
            "  IN: a BF16/F16/F32 .safetensors file, an index .json, or an HF folder\n"
            "  OUT_DIR: the ModelSlim W8A8_MXFP8 folder to write (created if missing)\n"
            "options:\n"
            "  --scale-rule modelslim|floor|rceil  shared-scale rule (default modelslim: log2(amax)\n"
            "                            in the weight's dtype, byte-identical to msModelSlim)\n"
            "  --shard-size SIZE         largest output shard, e.g. 4GB (default), 500MB, 2GiB\n"
            "  --round away|even         element rounding (default away, as ModelSlim)\n"
            "  --include REGEX           quantize only matching linear weights (repeatable;\n"
            "                            default: every linear weight except lm_head)\n"
            "  --exclude REGEX           keep matching tensors FLOAT (repeatable)\n"
            "  --force                   replace existing output files (never the input)\n"
            "  --quiet                   no progress bar\n"
            "  --allow-nonfinite         quantize weights holding NaN/Inf (refused by default)\n"
            "  --allow-external-shards   read input shards and companion files linking out of\n"
            "                            IN's folder (a Hugging Face cache snapshot); refused by\n"
            "                            default\n"
            "Beside the weights it copies the input folder's config.json (without\n"
            "quantization_config), generation_config.json, tokenizer and processor files, *.py,\n"
            "*.txt and *.jinja, so that the output folder is servable as it stands (one that is\n"
            "not a regular file is refused).\n"
            "Quantized: 2-D float *.weight tensors whose names contain neither \"embed\" nor\n"
            "\"norm\", selected as above; everything else is copied as FLOAT (biases as F32).\n"
            "Regular expressions are POSIX extended, matched anywhere in the name.\n");
    return f == stderr ? 2 : 0;
}

static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=') return argv[*i] + n + 1;
    if (!strcmp(argv[*i], name)) {
        if (*i + 1 >= argc) return NULL;
        return argv[++*i];
    }
    return NULL;
}

/* "4GB", "500MB", "2GiB", "123" (bytes); decimal units as the HF writers use */
static int parse_size(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x > 0)) return -1;
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].u)) {
            const double b = x * units[i].m;
            if (b < 1 || b > 1e18) return -1;
            *out = (uint64_t)b;
            return 0;
        }
    return -1;
}

static const char *rule_name(qk_mx_scale_rule r)
{
    return r == QK_MX_SCALE_MODELSLIM ? "modelslim" : r == QK_MX_SCALE_RCEIL ? "rceil" : "floor";
}

void qk_quantize_print_summary(const qk_ms_quantize_report *rep, const qk_mx_options *opt,
                               const char *out)
{
    printf("qk quantize: %zu linear weights quantized to W8A8_MXFP8 (scale rule %s, round %s), "
           "%zu tensors kept FLOAT; wrote %s (%zu file%s)\n", rep->quantized,
           rule_name(opt->scale_rule), opt->round == QK_ROUND_NEAREST_AWAY ? "away" : "even",
           rep->kept, out, rep->files, rep->files == 1 ? "" : "s");
}

int qk_cmd_quantize(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    const qk_ms_quantize_options defaults = qk_ms_quantize_defaults();
    qk_mx_options opt = defaults.mx;
    uint64_t shard_size = defaults.shard_size;
    bool force = false, quiet = false, allow_nonfinite = false, allow_external = false;
    selection sel = {calloc((size_t)argc, sizeof(regex_t)), calloc((size_t)argc, sizeof(regex_t)), 0, 0};
    int rc = 2;
    if (!sel.inc || !sel.exc) goto done;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { rc = usage(stdout); goto done; }
        if (!strcmp(a, "--force")) { force = true; continue; }
        if (!strcmp(a, "--quiet")) { quiet = true; continue; }
        if (!strcmp(a, "--allow-nonfinite")) { allow_nonfinite = true; continue; }
        if (!strcmp(a, "--allow-external-shards")) { allow_external = true; continue; }
        if (!strncmp(a, "--scale-rule", 12)) {
            v = opt_value(argc, argv, &i, "--scale-rule");
            if (v && !strcmp(v, "floor")) opt.scale_rule = QK_MX_SCALE_FLOOR;
            else if (v && !strcmp(v, "rceil")) opt.scale_rule = QK_MX_SCALE_RCEIL;
            else if (v && !strcmp(v, "modelslim")) opt.scale_rule = QK_MX_SCALE_MODELSLIM;
            else {
                fprintf(stderr, "qk quantize: --scale-rule takes floor, rceil or modelslim\n");
                goto done;
            }
            continue;
        }
        if (!strncmp(a, "--shard-size", 12)) {
            v = opt_value(argc, argv, &i, "--shard-size");
            if (!v || parse_size(v, &shard_size) != 0) {
                fprintf(stderr, "qk quantize: --shard-size takes a size such as 4GB, 500MB or 2GiB\n");
                goto done;
            }
            continue;
        }
        if (!strncmp(a, "--round", 7)) {
            v = opt_value(argc, argv, &i, "--round");
            if (v && !strcmp(v, "away")) opt.round = QK_ROUND_NEAREST_AWAY;
            else if (v && !strcmp(v, "even")) opt.round = QK_ROUND_NEAREST_EVEN;
            else { fprintf(stderr, "qk quantize: --round takes away or even\n"); goto done; }
            continue;
        }
        if (!strncmp(a, "--include", 9) || !strncmp(a, "--exclude", 9)) {
            bool inc = a[2] == 'i';
            v = opt_value(argc, argv, &i, inc ? "--include" : "--exclude");
            if (!v) { fprintf(stderr, "qk quantize: %s takes a regular expression\n", a); goto done; }
            regex_t *r = inc ? &sel.inc[sel.ninc] : &sel.exc[sel.nexc];
            int e = regcomp(r, v, REG_EXTENDED | REG_NOSUB);
            if (e) {
                char eb[256];
                regerror(e, r, eb, sizeof eb);
                fprintf(stderr, "qk quantize: bad regular expression '%s': %s\n", v, eb);
                goto done;
            }
            if (inc) sel.ninc++;
            else sel.nexc++;
            continue;
        }
        if (a[0] == '-' && a[1]) { fprintf(stderr, "qk quantize: unknown option %s\n", a); usage(stderr); goto done; }
        if (!in) in = a;
        else if (!out) out = a;
        else { usage(stderr); goto done; }
    }
    if (!in || !out) { usage(stderr); goto done; }
    rc = 1;

    qk_ms_quantize_options o = qk_ms_quantize_defaults();
    o.mx = opt;
    o.shard_size = shard_size;
    o.include = sel.inc;
    o.ninclude = sel.ninc;
    o.exclude = sel.exc;
    o.nexclude = sel.nexc;
    o.force = force;
    o.allow_nonfinite = allow_nonfinite;
    o.allow_external_shards = allow_external;
    o.progress = !quiet && isatty(STDERR_FILENO);
    qk_ms_quantize_report rep;
    if (qk_modelslim_quantize(in, out, &o, &rep) != QK_OK) {
        fprintf(stderr, "qk quantize: %s\n", qk_last_error());
        goto done;
    }
    qk_quantize_print_summary(&rep, &opt, out);
    rc = 0;
done:
    for (int i = 0; i < sel.ninc; i++) regfree(&sel.inc[i]);
    for (int i = 0; i < sel.nexc; i++) regfree(&sel.exc[i]);
    free(sel.inc);
    free(sel.exc);
    return rc;
}
