/* Test harness implementation (see harness.h). */
#include "harness.h"

#include <math.h>
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

double qk_rand_normal(uint64_t *s)
{
    double u1 = qk_rand_uniform(s, 1e-300, 1.0), u2 = qk_rand_uniform(s, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
