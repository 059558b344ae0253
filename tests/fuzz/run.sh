#!/bin/sh
# Builds the libFuzzer target for the safetensors reader and the ModelSlim description /
# shard-index parsers (clang, -fsanitize=fuzzer,address,undefined) into build-fuzz/, then
# fuzzes for $1 seconds (default 60) seeded from tests/corpus/safetensors. New inputs go
# to build-fuzz/corpus (the committed corpus is only read); a crash leaves a crash-* file
# in build-fuzz/artifacts and makes this script fail. Usage: tests/fuzz/run.sh [SECONDS]
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
cmake --build "$build" -j "$jobs" --target fuzz_safetensors >>"$log" 2>&1 || { cat "$log"; exit 1; }
mkdir -p "$build/corpus" "$build/artifacts"
# the seeds: every file of the committed corpus (folders' files too), flattened
find "$root/tests/corpus/safetensors" -type f ! -name EXPECTED.txt | while read -r f; do
    cp "$f" "$build/corpus/seed-$(printf '%s' "$f" | cksum | cut -d' ' -f1)"
done
echo "fuzzing for ${secs}s (log: $build/fuzz.log)"
set +e
"$build/fuzz_safetensors" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -dict="$root/tests/fuzz/safetensors.dict" \
    -artifact_prefix="$build/artifacts/" "$build/corpus" >"$build/fuzz.log" 2>&1
rc=$?
set -e
grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)|^#[0-9]+.*DONE' \
    "$build/fuzz.log" || true
if [ "$rc" -ne 0 ]; then
    tail -n 60 "$build/fuzz.log"
    echo "tests/fuzz/run.sh: the fuzzer failed (exit $rc); reproducers:" >&2
    ls "$build/artifacts" >&2
    exit "$rc"
fi
echo "no crash in ${secs}s"
