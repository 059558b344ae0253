/* Configure-time probe for QK_TARGET=native: prints the best target this host runs. */
#include <stdio.h>

int main(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    int f16c = (c >> 29) & 1;
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    int bf16 = 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    if (a >= 7) {
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
        bf16 = (a >> 5) & 1;
    }
    puts(v4 && bf16 ? "x86-64-v4" : v3 ? "x86-64-v3" : "generic");
#else
    puts("generic");
#endif
    return 0;
}
