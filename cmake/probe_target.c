/* Configure-time probe for QK_TARGET=native: prints the best target this host runs, by the
 * architecture's own feature query (QK_CPU_SOURCE: src/cpu/<arch>.c, compiled in). */
#include <stdio.h>

#include QK_CPU_SOURCE

int main(void)
{
    puts(qk_cpu_best_target(qk_cpu_query_host()));
    return 0;
}
