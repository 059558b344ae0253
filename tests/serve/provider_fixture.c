/* Provider-library fixtures for test_serve_registry, built as separate shared libraries:
 *   QK_FIXTURE_NO_ENTRY  a shared library that exports no qk_provider_entry;
 *   QK_FIXTURE_ABI=n     a library whose entry point reports ABI n (the test builds ABI 0);
 *   QK_FIXTURE_PARTIAL   ABI 1 implementing gemma_rms_norm only, which counts its calls
 *                        (qk_fixture_calls) and writes nothing. */
#include "qkern_serve.h"

#define EXPORT __attribute__((visibility("default")))

#if defined(QK_FIXTURE_NO_ENTRY)
EXPORT int qk_fixture_not_a_provider(void);
int qk_fixture_not_a_provider(void) { return 42; }
#else
static int calls;
EXPORT int qk_fixture_calls(void);
int qk_fixture_calls(void) { return calls; }

static qk_status counting_gemma(const qk_tensor *x, const qk_tensor *w, float eps, qk_tensor *out,
                                qk_tensor *rstd)
{
    (void)x; (void)w; (void)eps; (void)out; (void)rstd;
    calls++;
    return QK_OK;
}

static qk_status fixture_init(void) { return QK_OK; }
static const char *fixture_error(void) { return "fixture"; }
static const char *fixture_provider(const char *op) { (void)op; return "fixture"; }

#ifndef QK_FIXTURE_ABI
#define QK_FIXTURE_ABI QK_ABI_VERSION
#endif

static const qk_provider_info info = {
    .abi_version = QK_FIXTURE_ABI,
    .size = sizeof(qk_provider_info),
    .target = "fixture",
    .version = "0.0.0",
    .init = fixture_init,
    .last_error = fixture_error,
    .provider = fixture_provider,
    .ops = {.gemma_rms_norm = counting_gemma},
};

EXPORT const qk_provider_info *qk_provider_entry(void);
const qk_provider_info *qk_provider_entry(void) { return &info; }
#endif
