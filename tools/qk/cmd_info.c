/* `qk info`: what this build is and what it runs here — version, ABI, target, the CPU
 * features this CPU has and the target needs, qk_init()'s verdict, the thread count, and
 * for every op the staged provider and every compiled provider implementing it. */
#include "qk_tool.h"

#include "internal.h"
#include "qkern_serve.h"

#include <stdio.h>
#include <string.h>

static void print_features(unsigned have, unsigned mark)
{
    bool any = false;
    for (unsigned bit = 1; bit && bit <= (have | mark); bit <<= 1) {
        if (!((have | mark) & bit)) continue;
        printf(" %s%s", qk_cpu_feature_name(bit), (mark & bit) && !(have & bit) ? "(missing)" : "");
        any = true;
    }
    if (!any) printf(" (none)");
    printf("\n");
}

int qk_cmd_info(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: qk info\n");
        return 2;
    }
    const unsigned have = qk_cpu_features();
    const unsigned need = qk_target_table_built.cpu_features;
    const qk_status st = qk_init();

    printf("qkern %s  (ABI %d)\n", qk_version(), qk_abi_version());
    printf("target        %s\n", qk_target());
    printf("CPU has      ");
    print_features(have, 0);
    printf("target needs ");
    print_features(need & have, need);
    printf("qk_init       %s%s%s\n", qk_status_name(st), st ? ": " : "", st ? qk_last_error() : "");
    printf("threads       %d\n", qk_get_num_threads());

    printf("providers    ");
    for (int p = 0; qk_all_providers[p]; p++) {
        const qk_provider_set *ps = qk_all_providers[p];
        unsigned missing = ps->cpu_features & ~have;
        printf(" %s%s", ps->name, missing ? "(not on this CPU)" : "");
    }
    printf("\n\n%-20s %-8s %s\n", "op", "staged", "compiled providers");
    for (int i = 0; qk_op_names[i]; i++) {
        const char *op = qk_op_names[i];
        const char *staged = qk_provider(op);
        printf("%-20s %-8s", op, staged ? staged : "-");
        bool any = false;
        for (int p = 0; qk_all_providers[p]; p++) {
            const char *name = qk_ops_provider(&qk_all_providers[p]->ops, op);
            if (!name) continue;
            printf(" %s", qk_all_providers[p]->name);
            any = true;
        }
        printf("%s\n", any ? "" : " -");
    }
    printf("\n");
    qk_serve_print_registry(stdout);
    return 0;
}
