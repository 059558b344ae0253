/* `qk`: the qkern command-line tool. Dispatches to the subcommands in qk_tool.h. */
#include "qk_tool.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"info", qk_cmd_info, "version, target, CPU features, op -> provider"},
    {"bench", qk_cmd_bench, "norm|linear|quant|all [--json FILE] [--plot FILE.svg]"},
    {"inspect", qk_cmd_inspect, "PATH [--json] [--allow-external-shards]: tensors, MXFP8 linears, problems"},
    {"quantize", qk_cmd_quantize, "IN OUT_DIR [options]: write a ModelSlim W8A8_MXFP8 folder"},
    {"demo", qk_cmd_demo, "[--model DIR]: Qwen3.5 MLP blocks from a ModelSlim folder, checked"},
};

static int usage(FILE *f)
{
    fprintf(f, "usage: qk COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "qk: unknown command '%s'\n", argv[1]);
    return usage(stderr);
}
