/* The list of every provider compiled into this build (tests instantiate each op's test
 * body over it; the serving layer's `reference` backend is its first entry). */
#include "internal.h"

const qk_provider_set *const qk_all_providers[] = {
    &qk_provider_ref,
#ifdef QK_HAVE_AVX2
    &qk_provider_avx2,
#endif
#ifdef QK_HAVE_AVX512
    &qk_provider_avx512,
#endif
    NULL,
};
