# Target x86-64-v4 (AVX-512 F/BW/VL/DQ + AVX512-BF16; table: src/targets/x86-64-v4.c): the
# x86-64-v3 providers plus avx512.
set(QK_TARGET_ARCH x86)
set(QK_TARGET_NEEDS AVX2 FMA F16C AVX512F AVX512BW AVX512VL AVX512DQ AVX512BF16)
include(${CMAKE_CURRENT_LIST_DIR}/x86-64-v3.cmake)
set(QK_FLAGS_AVX512 ${QK_FLAGS_AVX2} -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16)
qk_provider(avx512 src/x86/avx512 ${QK_FLAGS_AVX512})
set(QK_TOOL_FLAGS ${QK_FLAGS_AVX512})
set(QK_TARGET_STAGES "norm=avx512 mx_quantize=avx512 mx_dequantize=avx512 mxfp8_linear=avx512")
