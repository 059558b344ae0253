/* Threads (api.md): qk_last_error() is per thread while several threads call every op, and
 * the thread bound (QK_NUM_THREADS, qk_set_num_threads) is what the library's parallel loop
 * really uses. QK_NUM_THREADS is set to 1 before the library first reads it. */
#define _GNU_SOURCE
#include "harness.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local volatile double spin_sink; /* per thread: no shared writes */

/* ---- the bound in force ---- */
#define MAXT 64
typedef struct { pthread_mutex_t lock; pthread_t seen[MAXT]; int n; } seen_set;

static void record(const void *ctx, int64_t begin, int64_t end)
{
    (void)begin;
    (void)end;
    seen_set *s = (seen_set *)(uintptr_t)ctx;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&s->lock);
    int found = 0;
    for (int i = 0; i < s->n; i++) found |= pthread_equal(s->seen[i], me);
    if (!found && s->n < MAXT) s->seen[s->n++] = me;
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < 200000; i++) spin_sink += i; /* long enough that a second thread gets a share */
}

static int threads_used(void)
{
    seen_set s = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};
    qk_parallel_for(64, 1 << 20, 1, record, &s);
    return s.n;
}

static void test_num_threads_honoured(void)
{
    CHECK(qk_get_num_threads() == 1, "QK_NUM_THREADS=1: bound %d", qk_get_num_threads());
    CHECK(threads_used() == 1, "QK_NUM_THREADS=1: the parallel loop ran on %d threads", threads_used());
    qk_set_num_threads(2);
    CHECK(qk_get_num_threads() == 2, "qk_set_num_threads(2): bound %d", qk_get_num_threads());
    const int used = threads_used();
#ifdef _OPENMP
    CHECK(used == 2, "qk_set_num_threads(2): the parallel loop ran on %d threads", used);
#else
    CHECK(used == 1, "a build without OpenMP runs on one thread (%d)", used);
#endif
    qk_set_num_threads(0);
    CHECK(qk_get_num_threads() == 1 && threads_used() == 1, "qk_set_num_threads(0): back to "
          "QK_NUM_THREADS (bound %d)", qk_get_num_threads());
}

/* ---- qk_last_error per thread ---- */
enum { NTHREADS = 4, ITERS = 150 };

typedef struct { int id; int bad; char first[1024]; } worker;

/* a pause between a failing call and reading its message, in which the other threads fail
   their own calls: a shared message buffer would show their text here */
static void pause_a_little(void)
{
    for (int i = 0; i < 20000; i++) spin_sink += i;
}

/* every op, each with an error whose message carries this thread's own number */
static void *work(void *arg)
{
    worker *w = arg;
    const int t = w->id;
    static const int64_t H = 64;
    uint16_t x[2 * 64] = {0}, o[2 * 64], r[2 * 64], g[2 * 64] = {0};
    uint16_t wt[64 + NTHREADS] = {0};
    uint8_t q[2 * 64], s[2 * 2 + NTHREADS * 2];
    const int64_t xs[2] = {2, H}, wbad[1] = {3 + t}, sbad[2] = {2, 3 + t};
    char want[64];
    for (int it = 0; it < ITERS; it++) {
        qk_tensor xt = qk_tensor_make(x, QK_DTYPE_BF16, 2, xs), ot = qk_tensor_make(o, QK_DTYPE_BF16, 2, xs),
                  rt = qk_tensor_make(r, QK_DTYPE_BF16, 2, xs), gt = qk_tensor_make(g, QK_DTYPE_BF16, 2, xs),
                  wb = qk_tensor_make(wt, QK_DTYPE_BF16, 1, wbad);
        struct { const char *op; qk_status st; } calls[6];
        calls[0].op = "gemma_rms_norm";
        calls[0].st = qk_gemma_rms_norm(&xt, &wb, 1e-6f, &ot, NULL);
        snprintf(want, sizeof want, "[%d]", 3 + t);
        const char *msgs[6];
        char keep[6][300];
        pause_a_little();
        snprintf(keep[0], sizeof keep[0], "%s", qk_last_error());
        calls[1].op = "add_rms_norm";
        calls[1].st = qk_add_rms_norm(&xt, &wb, &rt, 1e-6f, &ot, &rt);
        pause_a_little();
        snprintf(keep[1], sizeof keep[1], "%s", qk_last_error());
        calls[2].op = "rms_norm_gated";
        calls[2].st = qk_rms_norm_gated(&xt, &wb, &gt, 1e-6f, &ot);
        pause_a_little();
        snprintf(keep[2], sizeof keep[2], "%s", qk_last_error());
        qk_tensor xf = qk_tensor_make(x, QK_DTYPE_BF16, 2, xs), qt = qk_tensor_make(q, QK_DTYPE_F8_E4M3, 2, xs),
                  st = qk_tensor_make(s, QK_DTYPE_E8M0, 2, sbad);
        calls[3].op = "mx_quantize";
        calls[3].st = qk_mx_quantize(&xf, NULL, &qt, &st);
        pause_a_little();
        snprintf(keep[3], sizeof keep[3], "%s", qk_last_error());
        calls[4].op = "mx_dequantize";
        calls[4].st = qk_mx_dequantize(&qt, &st, &ot);
        pause_a_little();
        snprintf(keep[4], sizeof keep[4], "%s", qk_last_error());
        calls[5].op = "mx_weight_create";
        qk_mx_weight *mw = NULL;
        calls[5].st = qk_mx_weight_create(&qt, &st, &mw);
        pause_a_little();
        snprintf(keep[5], sizeof keep[5], "%s", qk_last_error());
        for (int c = 0; c < 6; c++) {
            msgs[c] = keep[c];
            const char *need = c < 3 ? want : NULL;
            char sw[64];
            if (c >= 3) {
                snprintf(sw, sizeof sw, c == 5 ? "shape [2, %d]" : "%d blocks per row", 3 + t);
                need = sw;
            }
            if (calls[c].st != QK_ERR_SHAPE || !strstr(msgs[c], need)) {
                if (!w->bad++)
                    snprintf(w->first, sizeof w->first, "thread %d %s: %s \"%.300s\" (wanted \"%.60s\")",
                             t, calls[c].op, qk_status_name(calls[c].st), msgs[c], need);
            }
        }
        if (mw) qk_mx_weight_destroy(mw);
    }
    return NULL;
}

static void test_last_error_is_per_thread(void)
{
    pthread_t th[NTHREADS];
    worker w[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].id = t;
        CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NTHREADS; t++)
        CHECK(w[t].bad == 0, "%d calls saw another thread's message; first: %s", w[t].bad, w[t].first);
}

int main(void)
{
    setenv("QK_NUM_THREADS", "1", 1); /* before the library reads it */
    qk_test_require_cpu("test_threads");
    RUN(test_num_threads_honoured);
    RUN(test_last_error_is_per_thread);
    return qk_test_finish();
}
