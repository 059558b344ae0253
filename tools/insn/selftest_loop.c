/* selftest_loop — a loop of known length between the counters' markers: the region holds
 * 2*N instructions of the loop plus a small constant, so count(N2) - count(N1) must be
 * exactly 2*(N2 - N1). Used by run.sh --selftest to check the counters. */
#include <stdio.h>
#include <stdlib.h>

static volatile int qk_insn_mark_sink;
__attribute__((noinline, noclone, used)) void qk_insn_mark_begin(void) { qk_insn_mark_sink = 1; }
__attribute__((noinline, noclone, used)) void qk_insn_mark_end(void) { qk_insn_mark_sink = 2; }

__attribute__((noinline, noclone, used)) void qk_insn_region(long n)
{
    qk_insn_mark_begin();
#if defined(__aarch64__)
    __asm__ volatile("mov x9, %0\n1: subs x9, x9, #1\n b.ne 1b" : : "r"(n) : "x9", "cc");
#elif defined(__x86_64__)
    __asm__ volatile("mov %0, %%rcx\n1: dec %%rcx\n jnz 1b" : : "r"(n) : "rcx", "cc");
#else
#error "selftest_loop: aarch64 or x86-64"
#endif
    qk_insn_mark_end();
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    if (n < 1) n = 1;
    qk_insn_region(n);
    printf("n=%ld\n", n);
    return 0;
}
