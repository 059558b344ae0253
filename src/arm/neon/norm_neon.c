/* RMSNorm family, Armv8-A Advanced SIMD: src/simd/norm_simd.inc over vec_neon.h. */
#include "internal.h"
#include "arm/neon/neon.h"
#include "arm/neon/vec_neon.h"
#include "simd/norm_simd.inc"
