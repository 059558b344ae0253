/* CPU features, per architecture: the bits the providers' sets and the target tables name,
 * and what each architecture's file (src/cpu/<arch>.c, one per build) answers. */
#ifndef QK_CPU_H
#define QK_CPU_H

enum {
    /* x86-64 (src/cpu/x86.c) */
    QK_CPU_AVX2 = 1u << 0, QK_CPU_FMA = 1u << 1, QK_CPU_F16C = 1u << 2,
    QK_CPU_AVX512F = 1u << 3, QK_CPU_AVX512BW = 1u << 4, QK_CPU_AVX512VL = 1u << 5,
    QK_CPU_AVX512DQ = 1u << 6, QK_CPU_AVX512BF16 = 1u << 7,
    /* aarch64 (src/cpu/arm.c) */
    QK_CPU_NEON = 1u << 8,            /* Advanced SIMD (HWCAP_ASIMD) */
    QK_CPU_ARM_BF16 = 1u << 9,        /* FEAT_BF16: BFDOT/BFMMLA (HWCAP2_BF16) */
};

/* The build host architecture's answers (the file CMake compiles for it): */
/* the features this CPU has */
__attribute__((visibility("hidden"))) unsigned qk_cpu_query_host(void);
/* "AVX512F", "NEON", ... for one bit ("?" for a bit this architecture does not know) */
__attribute__((visibility("hidden"))) const char *qk_cpu_feature_name(unsigned bit);
/* the best build target of this architecture that a CPU with these features runs (the
   advice of qk_init's QK_ERR_CPU message, and what QK_TARGET=native resolves to):
   qk_cpu_best_of_targets */
__attribute__((visibility("hidden"))) const char *qk_cpu_best_target(unsigned have);

/* The targets of this architecture and the features each needs, as their CMake fragments
   declare them (set(QK_TARGET_NEEDS ...) in cmake/targets/<target>.cmake). */
#include "qk_cpu_targets.h"
/* Of the targets whose needs the CPU has, the one needing the most features ("generic",
   which needs none, when there is none). The targets of an architecture form a chain
   (each needs all its predecessor does), so "most" is "best". */
static inline const char *qk_cpu_best_of_targets(unsigned have)
{
    static const struct { const char *name; unsigned needs; } targets[] = {QK_CPU_TARGET_LIST{0, 0}};
    const char *best = "generic";
    int most = 0;
    for (unsigned i = 0; targets[i].name; i++) {
        const int n = __builtin_popcount(targets[i].needs);
        if ((targets[i].needs & ~have) == 0 && n > most) {
            best = targets[i].name;
            most = n;
        }
    }
    return best;
}

#endif
