/* RMSNorm family, AVX-512 (F/BW/VL/DQ): src/simd/norm_simd.inc over vec_avx512.h. */
#include "internal.h"
#include "x86/x86.h"
#include "x86/avx512/vec_avx512.h"
#include "simd/norm_simd.inc"
