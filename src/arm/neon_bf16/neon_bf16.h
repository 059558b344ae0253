/* The neon-bf16 provider's entry points (Armv8.6-A BF16: BFDOT/BFMMLA; src/arm/neon_bf16). */
#ifndef QK_ARM_NEON_BF16_H
#define QK_ARM_NEON_BF16_H

#include "internal.h"

QK_HIDDEN extern const qk_linear_impl qk_linear_neon_bf16;   /* mxfp8_linear, BF16 dot products */

#endif
