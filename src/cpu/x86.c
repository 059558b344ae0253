/* CPU features on x86-64: cpuid, and their names; the best target a CPU runs is chosen from
 * the x86 fragments' declared needs (cpu.h). Compiled into x86 builds, and into the configure-time probe that resolves
 * QK_TARGET=native (cmake/probe_target.c). */
#include "cpu/cpu.h"

unsigned qk_cpu_query_host(void)
{
    unsigned f = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) f |= QK_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= QK_CPU_FMA;
    if (__builtin_cpu_supports("avx512f")) f |= QK_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= QK_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512vl")) f |= QK_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512dq")) f |= QK_CPU_AVX512DQ;
    /* F16C: CPUID.1:ECX bit 29; AVX512-BF16: CPUID.(7,1):EAX bit 5 (gcc 12's
       __builtin_cpu_supports knows neither) */
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (c & (1u << 29)) f |= QK_CPU_F16C;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    if (a >= 7) {
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
        if (a & (1u << 5)) f |= QK_CPU_AVX512BF16;
    }
    return f;
}

const char *qk_cpu_feature_name(unsigned bit)
{
    switch (bit) {
    case QK_CPU_AVX2: return "AVX2";
    case QK_CPU_FMA: return "FMA";
    case QK_CPU_F16C: return "F16C";
    case QK_CPU_AVX512F: return "AVX512F";
    case QK_CPU_AVX512BW: return "AVX512BW";
    case QK_CPU_AVX512VL: return "AVX512VL";
    case QK_CPU_AVX512DQ: return "AVX512DQ";
    case QK_CPU_AVX512BF16: return "AVX512_BF16";
    default: return "?";
    }
}

const char *qk_cpu_best_target(unsigned have) { return qk_cpu_best_of_targets(have); }
