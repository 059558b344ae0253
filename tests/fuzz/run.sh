#!/bin/sh
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) into build-fuzz/
# and fuzzes each for $1 seconds (default 60):
#   fuzz_safetensors  the safetensors reader and the ModelSlim description / shard-index
#                     parsers, seeded from every file of tests/corpus/safetensors;
#   fuzz_modelslim    ModelSlim folders through qk_ms_open and the MXFP8Linear life cycle,
#                     and qk_mx_weight_create with the linear, seeded from the corpus folders.
# New inputs go to build-fuzz/corpus-<target> (the committed corpus is only read); a crash
# leaves a crash-* file in build-fuzz/artifacts and makes this script fail.
# Usage: tests/fuzz/run.sh [SECONDS]   (make test runs it briefly, make fuzz for 10 minutes)
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build-fuzz"
jobs=${QK_FUZZ_JOBS:-2}
command -v clang >/dev/null 2>&1 || { echo "tests/fuzz/run.sh: clang is required" >&2; exit 1; }
mkdir -p "$build"
log="$build/build.log"
CC=clang cmake -S "$root" -B "$build" -DQK_FUZZ=ON -DQK_SANITIZE=ON -DQK_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build "$build" -j "$jobs" --target fuzz_safetensors fuzz_modelslim >>"$log" 2>&1 || { cat "$log"; exit 1; }
mkdir -p "$build/corpus-fuzz_safetensors" "$build/corpus-fuzz_modelslim" "$build/artifacts"
corpus="$root/tests/corpus/safetensors"
# fuzz_safetensors seeds: every file of the committed corpus (folders' files too), flattened
find "$corpus" -type f ! -name EXPECTED.txt | while read -r f; do
    cp "$f" "$build/corpus-fuzz_safetensors/seed-$(printf '%s' "$f" | cksum | cut -d' ' -f1)"
done
# fuzz_modelslim seeds: each corpus folder as 0x00, description, 0x00, weights; and raw weights
for d in "$corpus"/*/; do
    [ -f "$d/quant_model_description.json" ] && [ -f "$d/quant_model_weights.safetensors" ] || continue
    { printf '\000'; cat "$d/quant_model_description.json"; printf '\000'; cat "$d/quant_model_weights.safetensors"; } \
        >"$build/corpus-fuzz_modelslim/seed-$(printf '%s' "$d" | cksum | cut -d' ' -f1)"
done
for n in 1 2 3; do
    { printf '\001\037\077'; head -c 4096 /dev/zero | tr '\000' '\070'; } >"$build/corpus-fuzz_modelslim/seed-w$n"
done
status=0
for t in fuzz_safetensors fuzz_modelslim; do
    echo "$t: fuzzing for ${secs}s (log: $build/$t.log)"
    dict=""
    [ "$t" = fuzz_safetensors ] && dict="-dict=$root/tests/fuzz/safetensors.dict"
    set +e
    "$build/$t" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 $dict -artifact_prefix="$build/artifacts/" "$build/corpus-$t" \
        >"$build/$t.log" 2>&1
    rc=$?
    set -e
    grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' \
        "$build/$t.log" | sed "s/^/  $t /" || true
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$build/$t.log"
        echo "tests/fuzz/run.sh: $t failed (exit $rc); reproducers:" >&2
        ls "$build/artifacts" >&2
        status=$rc
    else
        echo "  $t: no crash in ${secs}s"
    fi
done
exit "$status"
