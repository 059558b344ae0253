/* RMSNorm family, AVX2/FMA/F16C: src/simd/norm_simd.inc over vec_avx2.h. */
#include "internal.h"
#include "x86/x86.h"
#include "x86/avx2/vec_avx2.h"
#include "simd/norm_simd.inc"
