/* The list of every provider compiled into this build (tests instantiate each op's test
 * body over it; the serving layer's `reference` backend is its first entry): ref, then the
 * providers the target's CMake fragment names (the generated qk_providers.h). */
#include "internal.h"

const qk_provider_set *const qk_all_providers[] = {
    &qk_provider_ref,
#define QK_PROVIDER(name) &qk_provider_##name,
#include "qk_providers.h"
#undef QK_PROVIDER
    NULL,
};
