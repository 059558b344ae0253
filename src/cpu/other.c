/* CPU features on an architecture qkern has no ISA providers for: none to query, and
 * `generic` is the only target. */
#include "cpu/cpu.h"

unsigned qk_cpu_query_host(void) { return 0; }

const char *qk_cpu_feature_name(unsigned bit)
{
    (void)bit;
    return "?";
}

const char *qk_cpu_best_target(unsigned have) { return qk_cpu_best_of_targets(have); }
