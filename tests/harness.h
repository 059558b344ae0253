/* Minimal test harness: CHECK records a failure and goes on; a test file's main runs its
 * cases and returns qk_test_finish(), which prints "N passed, N failed". */
#ifndef QK_TEST_HARNESS_H
#define QK_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern long qk_test_checks, qk_test_failures, qk_test_cases_passed, qk_test_cases_failed;
extern const char *qk_test_current;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        qk_test_checks++;                                                             \
        if (!(cond)) {                                                                \
            qk_test_failures++;                                                       \
            if (qk_test_failures <= 50) {                                             \
                fprintf(stderr, "FAIL %s (%s:%d): %s: ", qk_test_current, __FILE__,   \
                        __LINE__, #cond);                                             \
                fprintf(stderr, __VA_ARGS__);                                         \
                fputc('\n', stderr);                                                  \
            }                                                                         \
        }                                                                             \
    } while (0)

/* Runs one named case (a void function), counting it passed when it added no failure. */
void qk_test_run(const char *name, void (*fn)(void));
#define RUN(fn) qk_test_run(#fn, fn)
/* Prints a visible skip line. */
void qk_test_skip(const char *what, const char *why);
/* Exit status of a test that cannot run here; CMake marks it skipped (SKIP_RETURN_CODE). */
#define QK_TEST_EXIT_SKIP 77
/* For tests that call the library's ops: when this CPU lacks the build target's
   instructions (qk_init gives QK_ERR_CPU), prints a visible SKIP line naming the target and
   exits with QK_TEST_EXIT_SKIP; test_targets checks that refusal itself. */
void qk_test_require_cpu(const char *test);
/* Prints the summary line and returns the exit status. */
int qk_test_finish(void);

/* Deterministic random numbers (xorshift64*). */
uint64_t qk_rand_u64(uint64_t *state);
double qk_rand_uniform(uint64_t *state, double lo, double hi);
double qk_rand_normal(uint64_t *state);

#endif
