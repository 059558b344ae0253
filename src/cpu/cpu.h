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
   advice of qk_init's QK_ERR_CPU message, and what QK_TARGET=native resolves to) */
__attribute__((visibility("hidden"))) const char *qk_cpu_best_target(unsigned have);

#endif
