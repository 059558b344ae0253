/* `qk bench norm|quant|linear|all [--json FILE] [--plot FILE.svg] [--quick] ...`: runs the
 * protocols of performance.md (bench_norm.c, bench_quant.c, bench_linear.c). `all` runs
 * the three and merges their JSON into one file ({"norm": ..., "quant": ..., "linear": ...});
 * its plots go to FILE-norm.svg, FILE-quant.svg, FILE-linear.svg. */
#include "qk_tool.h"
#include "bench_common.h"
#include "qkern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
} protocols[] = {
    {"norm", qk_bench_norm},
    {"quant", qk_bench_quant},
    {"linear", qk_bench_linear},
    {"gemma-shift", qk_bench_gemma_shift},
};
enum { NPROTO = sizeof protocols / sizeof protocols[0] };

static int usage(FILE *f)
{
    fprintf(f, "usage: qk bench norm|quant|linear|gemma-shift|all [--json FILE] [--plot FILE.svg] [--quick]"
               " [--threads N] [--verbose]\n"
               "  --json FILE      write every figure as JSON\n"
               "  --plot FILE.svg  draw p50 latency against bytes moved per provider\n"
               "  --quick          few reps, reduced matrix: a smoke test, not the protocol\n"
               "  --threads N      threads for the library and the limits (default: all)\n"
               "  --verbose        p10/p90 of every run in the tables\n");
    return f == stderr ? 2 : 0;
}

/* The whole file as a string, or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* "out.svg" + "norm" -> "out-norm.svg" */
static void plot_name(char *buf, size_t n, const char *plot, const char *proto)
{
    const char *dot = strrchr(plot, '.');
    const char *slash = strrchr(plot, '/');
    if (!dot || (slash && dot < slash)) {
        snprintf(buf, n, "%s-%s.svg", plot, proto);
        return;
    }
    snprintf(buf, n, "%.*s-%s%s", (int)(dot - plot), plot, proto, dot);
}

static int bench_all(int argc, char **argv)
{
    qkb_options opt;
    if (!qkb_parse_options("all", argc, argv, &opt)) return 2;
    int status = 0;
    char part[NPROTO][1024] = {{0}};
    for (int p = 0; p < NPROTO; p++) {
        char plot[1024];
        char **sub = calloc((size_t)argc + 1, sizeof(char *));
        if (!sub) return 1;
        int n = 0;
        sub[n++] = (char *)protocols[p].name;
        for (int i = 1; i < argc; i++) {
            sub[n++] = argv[i];
            if (!strcmp(argv[i], "--json") && i + 1 < argc) {
                snprintf(part[p], sizeof part[p], "%s.%s.part", opt.json, protocols[p].name);
                sub[n++] = part[p];
                i++;
            } else if (!strcmp(argv[i], "--plot") && i + 1 < argc) {
                plot_name(plot, sizeof plot, opt.plot, protocols[p].name);
                sub[n++] = plot;
                i++;
            }
        }
        printf("==== qk bench %s ====\n", protocols[p].name);
        fflush(stdout);
        if (opt.json) remove(part[p]);
        int st = protocols[p].fn(n, sub);
        if (st && !status) status = st;
        free(sub);
        printf("\n");
    }
    if (opt.json) {
        qkb_json j;
        if (!qkb_json_open(&j, opt.json)) return 1;
        qkb_json_str(&j, "bench", "all");
        for (int p = 0; p < NPROTO; p++) {
            char *text = slurp(part[p]);
            qkb_json_raw(&j, protocols[p].name, text ? text : "null");
            free(text);
            remove(part[p]);
        }
        if (!qkb_json_close(&j)) {
            fprintf(stderr, "qk bench all: error writing %s\n", opt.json);
            return 1;
        }
        printf("wrote %s\n", opt.json);
    }
    return status;
}

int qk_cmd_bench(int argc, char **argv)
{
    if (argc < 2) return usage(stderr);
    const char *what = argv[1];
    if (!strcmp(what, "-h") || !strcmp(what, "--help") || !strcmp(what, "help")) return usage(stdout);
    /* the protocols are compiled for the build target's instructions: refuse here, in
       portable code, before any of them runs on a CPU that lacks them */
    if (qk_init() != QK_OK) {
        fprintf(stderr, "qk bench: %s\n", qk_last_error());
        return 1;
    }
    if (!strcmp(what, "all")) return bench_all(argc - 1, argv + 1);
    for (int p = 0; p < NPROTO; p++)
        if (!strcmp(what, protocols[p].name)) return protocols[p].fn(argc - 1, argv + 1);
    fprintf(stderr, "qk bench: unknown protocol '%s'\n", what);
    return usage(stderr);
}
