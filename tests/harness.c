/* Test harness implementation (see harness.h). */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "qkern.h"

long qk_test_checks, qk_test_failures, qk_test_cases_passed, qk_test_cases_failed;
const char *qk_test_current = "";

void qk_test_run(const char *name, void (*fn)(void))
{
    long before = qk_test_failures;
    qk_test_current = name;
    fn();
    if (qk_test_failures == before) {
        qk_test_cases_passed++;
        printf("ok   %s\n", name);
    } else {
        qk_test_cases_failed++;
        printf("FAIL %s (%ld failed checks)\n", name, qk_test_failures - before);
    }
    fflush(stdout);
}

void qk_test_skip(const char *what, const char *why)
{
    printf("SKIP %s: %s\n", what, why);
}

void qk_test_require_cpu(const char *test)
{
    if (qk_init() != QK_ERR_CPU) return;
    printf("SKIP %s: this CPU cannot run target %s (%s)\n", test, qk_target(), qk_last_error());
    fflush(stdout);
    exit(QK_TEST_EXIT_SKIP);
}

int qk_test_finish(void)
{
    printf("%ld checks\n%ld passed, %ld failed\n", qk_test_checks, qk_test_cases_passed,
           qk_test_cases_failed);
    return qk_test_cases_failed ? 1 : 0;
}

uint64_t qk_rand_u64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

double qk_rand_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(qk_rand_u64(s) >> 11) * 0x1.0p-53);
}

/* Normal draws without a log and a cos each: the tests draw hundreds of millions (a second
   or two of their time natively, most of it under qemu's soft-float). A table of 2^16
   Box-Muller samples is made once (fixed seed); each draw picks one with the top 16 bits and
   adds a uniform jitter of +-2^-15 from the next 32, so the values stay continuous (distinct
   F32 mantissas) and the distribution is the normal one within 1e-4 in variance. */
#define NORMAL_TABLE_BITS 16
static double normal_table[1 << NORMAL_TABLE_BITS];
static pthread_once_t normal_once = PTHREAD_ONCE_INIT;

static void normal_table_init(void)
{
    uint64_t s = 0x5DEECE66DULL;
    for (size_t i = 0; i < sizeof normal_table / sizeof normal_table[0]; i++) {
        double u1 = qk_rand_uniform(&s, 1e-300, 1.0), u2 = qk_rand_uniform(&s, 0.0, 1.0);
        normal_table[i] = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
}

double qk_rand_normal(uint64_t *s)
{
    pthread_once(&normal_once, normal_table_init);
    const uint64_t r = qk_rand_u64(s);
    const double jitter = ((double)(uint32_t)(r >> 16) * 0x1.0p-32 - 0.5) * 0x1.0p-14;
    return normal_table[r >> (64 - NORMAL_TABLE_BITS)] + jitter;
}
