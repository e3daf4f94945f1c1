#!/usr/bin/env bash
# Builds every cargo-fuzz target of the workspace on the stable toolchain
# (libFuzzer's coverage, no sanitizer: `cargo fuzz ... -s none`) and runs
# each for SECONDS on its corpus: the seeds committed beside it
# (<crate>/fuzz/seeds/<target>/, real traces, bundles, logs and sessions)
# and what earlier runs found (target/fuzz-corpus/<target>/, kept).
#
# Usage: bash tests/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS           how long each target runs (default 30: CI's smoke run)
#   TARGET...         only these targets (default: every one)
#   RETRACE_FUZZ_BUILD=dev   build without optimization (CI: the build is
#                            the larger part of a 30-second run)
#   RETRACE_FUZZ_JOBS=N      targets run at once (default 2, one per core)
#
# Every target runs to its end; the failing ones are listed at the end
# (their inputs are in <crate>/fuzz/artifacts/<target>/) and the exit
# status is then 1. docs/fuzzing.md has the long runs and what they found.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-30}
shift || true
build=${RETRACE_FUZZ_BUILD:-release}
jobs=${RETRACE_FUZZ_JOBS:-2}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz (crates.io)"
    cargo install -q cargo-fuzz --version 0.13.2 --locked || exit 1
fi

profile=()
[ "$build" = dev ] && profile=(--dev)
target_dir="$root/target/fuzz-$build"

# Every target, as crate:target.
all=()
for crate in decoder collector stub plugin; do
    for target in $(cd "$crate" && cargo fuzz list); do
        all+=("$crate:$target")
    done
done
chosen=()
if (($#)); then
    for wanted in "$@"; do
        found=""
        for entry in "${all[@]}"; do
            [ "${entry#*:}" = "$wanted" ] && chosen+=("$entry") && found=1
        done
        [ -n "$found" ] || { echo "no fuzz target named $wanted (there are: ${all[*]#*:})"; exit 2; }
    done
else
    chosen=("${all[@]}")
fi

# One build per crate, before any run (one core each would starve them).
for crate in $(printf '%s\n' "${chosen[@]%%:*}" | sort -u); do
    echo "building the fuzz targets of $crate ($build)"
    (cd "$crate" && cargo fuzz build -s none "${profile[@]}" --target-dir "$target_dir") || { echo "FAILED to build the fuzz targets of $crate"; exit 1; }
done

mkdir -p target/fuzz-logs
run_one() {
    local crate=${1%%:*} target=${1#*:}
    local corpus="$root/target/fuzz-corpus/$target" seeds="$root/$crate/fuzz/seeds/$target"
    # (One allocation over 256 MiB aborts a target: its allocator,
    # tests/fuzz/allocation_limit.rs.)
    local extra=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    [ -f "$root/$crate/fuzz/$target.dict" ] && extra+=("-dict=$root/$crate/fuzz/$target.dict")
    mkdir -p "$corpus" "$seeds"
    (cd "$crate" && cargo fuzz run -s none "${profile[@]}" --target-dir "$target_dir" "$target" "$corpus" "$seeds" -- \
        -max_total_time="$seconds" "${extra[@]}") >"target/fuzz-logs/$target.log" 2>&1
}

failed=()
declare -A pids
for entry in "${chosen[@]}"; do
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
    echo "fuzzing ${entry#*:} for $seconds s"
    run_one "$entry" &
    pids[$entry]=$!
done
for entry in "${chosen[@]}"; do
    target=${entry#*:}
    if wait "${pids[$entry]}"; then
        stats=$(grep -E "stat::number_of_executed_units|cov: " "target/fuzz-logs/$target.log" | tail -2 | tr -s ' \n' ' ')
        echo "fuzz $target: ok ($stats)"
    else
        failed+=("$target")
        echo "fuzz $target: FAILED (log: target/fuzz-logs/$target.log; input: ${entry%%:*}/fuzz/artifacts/$target/)"
        tail -30 "target/fuzz-logs/$target.log"
    fi
done
if ((${#failed[@]})); then
    echo "failing fuzz targets: ${failed[*]}; rerun one: bash tests/fuzz.sh $seconds ${failed[0]}"
    exit 1
fi
echo "every fuzz target ran $seconds s without a failure"
