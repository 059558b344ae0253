/* `qk info`: what this build is and what it runs here — version, ABI, target, the CPU
 * features this CPU has and the target needs, qk_init()'s verdict, the thread count, and
 * for every op the staged provider and every compiled provider implementing it.
 * qk_info_print is also what the Python package's `python -m qkern info` prints. */
#include "qk_tool.h"

#include "internal.h"
#include "qkern_serve.h"

#include <stdio.h>
#include <string.h>

static void print_features(FILE *f, unsigned have, unsigned mark)
{
    bool any = false;
    for (unsigned bit = 1; bit && bit <= (have | mark); bit <<= 1) {
        if (!((have | mark) & bit)) continue;
        fprintf(f, " %s%s", qk_cpu_feature_name(bit), (mark & bit) && !(have & bit) ? "(missing)" : "");
        any = true;
    }
    if (!any) fprintf(f, " (none)");
    fprintf(f, "\n");
}

int qk_cmd_info(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: qk info\n");
        return 2;
    }
    qk_info_print(stdout);
    return 0;
}

void qk_info_print(FILE *f)
{
    const unsigned have = qk_cpu_features();
    const unsigned need = qk_target_table_built.cpu_features;
    const qk_status st = qk_init();

    fprintf(f, "qkern %s  (ABI %d)\n", qk_version(), qk_abi_version());
    fprintf(f, "target        %s\n", qk_target());
    fprintf(f, "CPU has      ");
    print_features(f, have, 0);
    fprintf(f, "target needs ");
    print_features(f, need & have, need);
    fprintf(f, "qk_init       %s%s%s\n", qk_status_name(st), st ? ": " : "", st ? qk_last_error() : "");
    fprintf(f, "threads       %d\n", qk_get_num_threads());

    fprintf(f, "providers    ");
    for (int p = 0; qk_all_providers[p]; p++) {
        const qk_provider_set *ps = qk_all_providers[p];
        unsigned missing = ps->cpu_features & ~have;
        fprintf(f, " %s%s", ps->name, missing ? "(not on this CPU)" : "");
    }
    fprintf(f, "\n\n%-20s %-8s %s\n", "op", "staged", "compiled providers");
    for (int i = 0; qk_op_names[i]; i++) {
        const char *op = qk_op_names[i];
        const char *staged = qk_provider(op);
        fprintf(f, "%-20s %-8s", op, staged ? staged : "-");
        bool any = false;
        for (int p = 0; qk_all_providers[p]; p++) {
            const char *name = qk_ops_provider(&qk_all_providers[p]->ops, op);
            if (!name) continue;
            fprintf(f, " %s", qk_all_providers[p]->name);
            any = true;
        }
        fprintf(f, "%s\n", any ? "" : " -");
    }
    fprintf(f, "\n");
    qk_serve_print_registry(f);
}
