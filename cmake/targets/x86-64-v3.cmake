# Target x86-64-v3 (AVX2, FMA, F16C; table: src/targets/x86-64-v3.c).
set(QK_TARGET_ARCH x86)
# the CPU features it needs (src/cpu/cpu.h's QK_CPU_<name>): QK_TARGET=native and the advice
# of a refused CPU choose, among the targets of the architecture, the one with most of them
set(QK_TARGET_NEEDS AVX2 FMA F16C)
set(QK_FLAGS_AVX2 -mavx2 -mfma -mf16c)
qk_provider(avx2 src/x86/avx2 ${QK_FLAGS_AVX2})
# qk bench's machine limits (copy bandwidth, FMA peak) run the target's instructions
set(QK_TOOL_FLAGS ${QK_FLAGS_AVX2})
# the providers its table stages, stated here independently for test_targets (ops not named: ref)
set(QK_TARGET_STAGES "norm=avx2 mx_quantize=avx2 mx_dequantize=avx2 mxfp8_linear=avx2")
