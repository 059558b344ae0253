# Target aarch64 (Armv8-A with Advanced SIMD; table: src/targets/aarch64.c).
set(QK_TARGET_ARCH arm)
set(QK_TARGET_NEEDS NEON)
set(QK_FLAGS_NEON -march=armv8-a)
qk_provider(neon src/arm/neon ${QK_FLAGS_NEON})
set(QK_TOOL_FLAGS ${QK_FLAGS_NEON})
set(QK_TARGET_STAGES "norm=neon mx_quantize=neon mx_dequantize=neon mxfp8_linear=neon")
