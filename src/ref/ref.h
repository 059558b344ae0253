/* Reference provider (portable C): the semantic definition every other provider is
 * tested against. */
#ifndef QK_REF_H
#define QK_REF_H

#include "internal.h"

QK_HIDDEN void qk_norm_ref(const qk_norm_call *c, int64_t begin, int64_t end);
/* its impl, used by its provider set and the generic target's table: one thread below
   256 KiB moved */
#define QK_NORM_IMPL_REF {"ref", qk_norm_ref, 256 << 10}

#endif
