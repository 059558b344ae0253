/* CPU features on aarch64 Linux: the kernel's HWCAP / HWCAP2 words (getauxval), and their
 * names; the best target is chosen from the arm fragments' declared needs (cpu.h). Compiled into aarch64
 * builds, and into the configure-time probe that resolves QK_TARGET=native. */
#include "cpu/cpu.h"

#include <sys/auxv.h>

/* Linux's bit numbers (arch/arm64/include/uapi/asm/hwcap.h) */
#define QK_HWCAP_ASIMD (1ul << 1)
#define QK_HWCAP2_BF16 (1ul << 14)

unsigned qk_cpu_query_host(void)
{
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    unsigned f = 0;
    if (hw & QK_HWCAP_ASIMD) f |= QK_CPU_NEON;
    if (hw2 & QK_HWCAP2_BF16) f |= QK_CPU_ARM_BF16;
    return f;
}

const char *qk_cpu_feature_name(unsigned bit)
{
    switch (bit) {
    case QK_CPU_NEON: return "NEON (ASIMD)";
    case QK_CPU_ARM_BF16: return "BF16 (FEAT_BF16)";
    default: return "?";
    }
}

const char *qk_cpu_best_target(unsigned have) { return qk_cpu_best_of_targets(have); }
