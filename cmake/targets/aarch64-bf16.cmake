# Target aarch64-bf16 (Armv8.6-A: FEAT_BF16's BFDOT/BFMMLA; table: src/targets/aarch64-bf16.c):
# the aarch64 providers plus neon-bf16.
set(QK_TARGET_ARCH arm)
set(QK_TARGET_NEEDS NEON ARM_BF16)
include(${CMAKE_CURRENT_LIST_DIR}/aarch64.cmake)
set(QK_FLAGS_NEON_BF16 -march=armv8.2-a+bf16)
qk_provider(neon_bf16 src/arm/neon_bf16 ${QK_FLAGS_NEON_BF16})
set(QK_TOOL_FLAGS ${QK_FLAGS_NEON_BF16})
set(QK_TARGET_STAGES "norm=neon mx_quantize=neon mx_dequantize=neon mxfp8_linear=neon-bf16")
# an emulated CPU without FEAT_BF16 (qemu-user's cortex-a72): test_targets then checks the
# library refuses with QK_ERR_CPU naming BF16 and advising aarch64
set(QK_TARGET_OLDER_CPU_ENV QEMU_CPU=cortex-a72)
