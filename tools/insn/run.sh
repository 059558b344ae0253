#!/usr/bin/env bash
# Instructions per element for each qkern kernel, per build, where speed cannot be timed
# (aarch64 under qemu-user) or beside it (x86).
#
#   tools/insn/run.sh [--cpu CPU] [--x86-counter auto|callgrind|ptrace] [--reps A,B]
#                     [--kernels FILE] [--work DIR] [--selftest] BUILD_DIR...
#
# --selftest first checks each counter on a loop of known length (selftest_loop.c).
#
# Each BUILD_DIR is a qkern CMake build holding libqkern.a; its architecture is read from the
# archive. AArch64 builds: the driver is linked statically with $AARCH64_CC and run under
# $QEMU -cpu CPU with our TCG plugin (qemu_insn_count.so). x86-64 builds: the driver is
# linked with $CC (non-PIE) and counted with callgrind, or, where valgrind cannot run the
# build (valgrind 3.19 does not decode AVX-512, and hides it from CPUID, so a v4 build stops
# in qk_init), by single-stepping it (ptrace_insn_count). Each cell is counted twice, with
# A and B repetitions of the call; (count_B - count_A) / (B - A) is the count of one call.
#
# Environment: QEMU (qemu-aarch64), QEMU_CPU (max; --cpu wins), AARCH64_CC
# (aarch64-linux-gnu-gcc), CC (gcc), X86_COUNTER (auto), REPS (1,2), KERNELS (a file, one
# "kernel dtype dims..." per line), QK_INCLUDE (the include dir; default: the build's
# source tree), EXTRA_LIBS (added to the link), CELL_TIMEOUT (seconds per run, 600).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
QEMU=${QEMU:-qemu-aarch64}
CPU=${QEMU_CPU:-max}
AARCH64_CC=${AARCH64_CC:-aarch64-linux-gnu-gcc}
CC=${CC:-gcc}
X86_COUNTER=${X86_COUNTER:-auto}
REPS=${REPS:-1,2}
KERNELS_FILE=${KERNELS:-}
CELL_TIMEOUT=${CELL_TIMEOUT:-600}
WORK=""
SELFTEST=0
builds=()

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) CPU=$2; shift 2 ;;
        --x86-counter) X86_COUNTER=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --kernels) KERNELS_FILE=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --selftest) SELFTEST=1; shift ;;
        -h|--help) usage ;;
        -*) echo "run.sh: unknown option $1" >&2; usage ;;
        *) builds+=("$1"); shift ;;
    esac
done
[ ${#builds[@]} -gt 0 ] || usage
RA=${REPS%,*}; RB=${REPS#*,}
[ "$RB" -gt "$RA" ] 2>/dev/null || { echo "run.sh: --reps A,B needs B > A" >&2; exit 2; }

# Modest shapes: qemu runs the generic build at a few hundred M instructions/s, and the
# ptrace counter single-steps at ~20-50 us an instruction on these KVM guests.
default_kernels='rms_norm bf16 4 5120
gemma_rms_norm bf16 4 5120
gemma_rms_norm f16 4 5120
add_rms_norm bf16 4 5120
add_gemma_rms_norm bf16 4 5120
rms_norm_gated bf16 4 5120
mx_quantize bf16 4 5120
mx_dequantize bf16 4 5120
mxfp8_linear bf16 1 128 1024
mxfp8_linear bf16 2 128 1024
mxfp8_linear bf16 4 128 1024
mxfp8_linear bf16 8 128 1024
mxfp8_linear bf16 16 128 1024
mxfp8_linear bf16 16 64 1024'
if [ -n "$KERNELS_FILE" ]; then kernels=$(grep -v '^\s*\(#\|$\)' "$KERNELS_FILE"); else kernels=$default_kernels; fi

[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/qk-insn.XXXXXX)
mkdir -p "$WORK"
WFLAGS="-std=c11 -O2 -Wall -Wextra -Werror"
log() { echo "run.sh: $*" >&2; }

# ---- the counters ----
plugin=$WORK/qemu_insn_count.so
stepper=$WORK/ptrace_insn_count
need_plugin=0; need_x86=0

arch_of() {   # AArch64 | X86-64 | unknown
    local m
    m=$(readelf -h "$1/libqkern.a" 2>/dev/null | sed -n 's/^ *Machine: *//p' | head -n1)
    case "$m" in
        AArch64) echo AArch64 ;;
        *X86-64*) echo X86-64 ;;
        *) echo unknown ;;
    esac
}

for b in "${builds[@]}"; do
    [ -f "$b/libqkern.a" ] || { echo "run.sh: $b/libqkern.a not found" >&2; exit 2; }
    case $(arch_of "$b") in
        AArch64) need_plugin=1 ;;
        X86-64) need_x86=1 ;;
        *) echo "run.sh: $b/libqkern.a: unknown architecture" >&2; exit 2 ;;
    esac
done
if [ $need_plugin = 1 ]; then
    gcc $WFLAGS -shared -fPIC -fvisibility=hidden -o "$plugin" "$here/qemu_insn_count.c"
fi
if [ $need_x86 = 1 ]; then
    gcc $WFLAGS -o "$stepper" "$here/ptrace_insn_count.c"
fi

include_of() {
    if [ -n "${QK_INCLUDE:-}" ]; then echo "$QK_INCLUDE"; return; fi
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" 2>/dev/null || true)
    if [ -n "$src" ] && [ -f "$src/include/qkern.h" ]; then echo "$src/include"
    else echo "$here/../../include"; fi
}

symaddr() {   # nm-tool binary symbol -> 0xADDR
    "$1" "$2" | awk -v s="$3" '$3 == s && !f { print "0x" $1; f = 1 }'
}

results=$WORK/results.tsv
: > "$results"
residual_max=0

# count <build-kind> <driver> <reps> <outfile> <kernel args...>: prints the region count
count() {
    local kind=$1 drv=$2 reps=$3 out=$4; shift 4
    case "$kind" in
        qemu)
            timeout "$CELL_TIMEOUT" "$QEMU" -cpu "$CPU" \
                -plugin "$plugin,begin=qk_insn_mark_begin,end=qk_insn_mark_end,out=$out.cnt" \
                "$drv" -r "$reps" "$@" < /dev/null > "$out.txt"
            sed -n 's/.* region=\([0-9]*\) regions=1 .*/\1/p' "$out.cnt" ;;
        callgrind)
            timeout "$CELL_TIMEOUT" env QK_NUM_THREADS=1 OMP_NUM_THREADS=1 valgrind -q \
                --tool=callgrind --toggle-collect=qk_insn_region --callgrind-out-file="$out.cg" \
                "$drv" -r "$reps" "$@" < /dev/null > "$out.txt"
            sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out.cg" ;;
        ptrace)
            timeout "$CELL_TIMEOUT" env QK_NUM_THREADS=1 OMP_NUM_THREADS=1 "$stepper" \
                -o "$out.cnt" "$PT_BEGIN" "$PT_END" -- "$drv" -r "$reps" "$@" < /dev/null > "$out.txt"
            grep -q ' regions=1 threads=1 ' "$out.cnt" ||
                { log "ptrace: $(cat "$out.cnt")"; return 1; }
            sed -n 's/.* region=\([0-9]*\) .*/\1/p' "$out.cnt" ;;
    esac
}

if [ "$SELFTEST" = 1 ]; then
    # count(N=1001) - count(N=1) must be 2000 exactly: the loop body is 2 instructions.
    st=$WORK/selftest; mkdir -p "$st"; fail=0
    check() {   # name count1 count1001
        local d=$(($3 - $2))
        if [ "$d" = 2000 ]; then log "selftest $1: ok (difference $d, fixed $(($2 - 2)))"
        else log "selftest $1: FAILED (difference $d, expected 2000)"; fail=1; fi
    }
    if [ $need_plugin = 1 ]; then
        "$AARCH64_CC" $WFLAGS -static -o "$st/loop-arm" "$here/selftest_loop.c"
        for n in 1 1001; do
            "$QEMU" -cpu "$CPU" -plugin "$plugin,begin=qk_insn_mark_begin,end=qk_insn_mark_end,out=$st/q$n" \
                "$st/loop-arm" $n < /dev/null > /dev/null
        done
        check qemu-plugin "$(sed -n 's/.* region=\([0-9]*\) .*/\1/p' "$st/q1")" \
            "$(sed -n 's/.* region=\([0-9]*\) .*/\1/p' "$st/q1001")"
    fi
    if [ $need_x86 = 1 ]; then
        "$CC" $WFLAGS -no-pie -o "$st/loop-x86" "$here/selftest_loop.c"
        B=$(symaddr nm "$st/loop-x86" qk_insn_mark_begin); E=$(symaddr nm "$st/loop-x86" qk_insn_mark_end)
        for n in 1 1001; do
            "$stepper" -o "$st/p$n" "$B" "$E" -- "$st/loop-x86" $n < /dev/null > /dev/null
            valgrind -q --tool=callgrind --toggle-collect=qk_insn_region \
                --callgrind-out-file="$st/cg$n" "$st/loop-x86" $n < /dev/null > /dev/null
        done
        check ptrace "$(sed -n 's/.* region=\([0-9]*\) .*/\1/p' "$st/p1")" \
            "$(sed -n 's/.* region=\([0-9]*\) .*/\1/p' "$st/p1001")"
        check callgrind "$(sed -n 's/^summary: *//p' "$st/cg1")" "$(sed -n 's/^summary: *//p' "$st/cg1001")"
    fi
    [ $fail = 0 ] || exit 1
fi

bi=0
for b in "${builds[@]}"; do
    bi=$((bi + 1))
    arch=$(arch_of "$b")
    inc=$(include_of "$b")
    drv=$WORK/b$bi/insn_driver
    mkdir -p "$WORK/b$bi"
    if [ "$arch" = AArch64 ]; then
        # Static: qemu needs no sysroot, and the plugin finds the marker symbols.
        "$AARCH64_CC" $WFLAGS -I"$inc" -o "$drv" "$here/insn_driver.c" "$b/libqkern.a" \
            -static -fopenmp -ljansson -lm -lpthread ${EXTRA_LIBS:-} 2> "$WORK/b$bi/link.log" ||
            { cat "$WORK/b$bi/link.log" >&2; exit 1; }
        kind=qemu; counter="qemu-plugin -cpu $CPU"; tsuffix=" (aarch64)"
    else
        "$CC" $WFLAGS -no-pie -I"$inc" -o "$drv" "$here/insn_driver.c" "$b/libqkern.a" \
            -fopenmp -ljansson -lm -lpthread -ldl ${EXTRA_LIBS:-} 2> "$WORK/b$bi/link.log" ||
            { cat "$WORK/b$bi/link.log" >&2; exit 1; }
        PT_BEGIN=$(symaddr nm "$drv" qk_insn_mark_begin)
        PT_END=$(symaddr nm "$drv" qk_insn_mark_end)
        kind=$X86_COUNTER
        if [ "$kind" = auto ]; then
            # callgrind where valgrind can run this build, else the single-stepper.
            if QK_NUM_THREADS=1 valgrind -q --tool=none "$drv" -r 0 -w 1 rms_norm bf16 1 64 \
                   > /dev/null 2>&1; then kind=callgrind; else kind=ptrace; fi
        fi
        counter=$kind; tsuffix=""
    fi
    log "$b: $arch, counter $counter"
    n=0
    while read -r -a k; do
        [ ${#k[@]} -gt 0 ] || continue
        n=$((n + 1))
        o=$WORK/b$bi/c$n
        ca=$(count "$kind" "$drv" "$RA" "$o.a" "${k[@]}") || { log "failed: ${k[*]}"; continue; }
        cb=$(count "$kind" "$drv" "$RB" "$o.b" "${k[@]}") || { log "failed: ${k[*]}"; continue; }
        info=$(cat "$o.b.txt")
        get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $info"; }
        elements=$(get elements); target=$(get target)$tsuffix; provider=$(get provider)
        shape=$(sed -n 's/.* shape=\(.*\) elements=.*/\1/p' <<<" $info")
        unit=$(sed -n 's/.* unit="\([^"]*\)".*/\1/p' <<<" $info")
        read -r per ipe resid < <(awk -v a="$ca" -v b="$cb" -v ra="$RA" -v rb="$RB" -v e="$elements" \
            'BEGIN { p = (b - a) / (rb - ra); r = a - ra * p; if (r < 0) r = -r;
                     printf "%.0f %.3f %.0f\n", p, p / e, r }')
        if [ "$resid" -gt "$residual_max" ]; then residual_max=$resid; fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${k[0]}" "${k[1]}" "$shape" "$target" \
            "$provider" "$counter" "$per" "$ipe" "$unit" >> "$results"
        log "  ${k[*]}: $per insns/call, $ipe per ${unit%% (*}"
    done <<<"$kernels"
done

echo
echo "| kernel | dtype | shape | target | provider | counter | insns/call | insns/elem | element |"
echo "| --- | --- | --- | --- | --- | --- | ---: | ---: | --- |"
awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1,$2,$3,$4,$5,$6,$7,$8,$9 }' "$results"
echo
# Side by side: one column per target.
awk -F'\t' '
    { key = $1 " | " $2 " | " $3; if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
      if (!($4 in tseen)) { tseen[$4] = 1; tg[++nt] = $4 }
      v[key, $4] = $8 }
    END {
        h = "| kernel | dtype | shape |"; s = "| --- | --- | --- |"
        for (t = 1; t <= nt; t++) { h = h " " tg[t] " |"; s = s " ---: |" }
        print h; print s
        for (i = 1; i <= nk; i++) {
            line = "| " keys[i] " |"
            for (t = 1; t <= nt; t++) line = line " " ((keys[i], tg[t]) in v ? v[keys[i], tg[t]] : "-") " |"
            print line
        }
    }' "$results"
echo
echo "insns/elem: instructions of one call (counts at $RA and $RB repetitions, difference / $((RB - RA)))"
echo "per element: rows*H for the norms, elements for mx_quantize/mx_dequantize, M*N*K MACs"
echo "for mxfp8_linear; single thread. Largest fixed part (count at $RA reps minus $RA calls): $residual_max instructions."
echo "Raw counts and logs: $WORK"
