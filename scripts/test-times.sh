#!/usr/bin/env bash
# The suite a newcomer runs, timed: `cargo test --workspace` cold (an empty target directory)
# and warm (everything built, nothing changed), then the slow group CI runs explicitly.
#
# usage: scripts/test-times.sh [cold|warm|slow|all]   (default: warm)
# Prints one line per measure: wall seconds, user+sys CPU seconds, and the command. The cold run
# builds into a fresh temporary target directory (removed afterwards), so it does not disturb
# the workspace's own target/. Figures for this machine are kept in docs/benchmarks.md,
# "The test suite".
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-warm}"
cold_dir=""
trap 'rm -f /tmp/ccron-test-times.$$.*; [ -z "$cold_dir" ] || rm -rf "$cold_dir"' EXIT

children_cpu() {
    # `times` prints the shell's, then its children's, user and system CPU ("1m2.345s 0m1.000s");
    # it must run in this shell (a subshell's children are not ours), so it goes through a file.
    times >"/tmp/ccron-test-times.$$.cpu"
    awk 'NR==2 { split($1, u, /[ms]/); split($2, s, /[ms]/);
        printf "%.1f", u[1]*60 + u[2] + s[1]*60 + s[2] }' "/tmp/ccron-test-times.$$.cpu"
}

measure() {
    local label="$1"; shift
    local start end cpu0 cpu1
    start=$(date +%s.%N)
    children_cpu >"/tmp/ccron-test-times.$$.c0"
    "$@" >/dev/null 2>"/tmp/ccron-test-times.$$.err" || {
        echo "FAILED ($label): $*" >&2
        tail -30 "/tmp/ccron-test-times.$$.err" >&2
        exit 1
    }
    end=$(date +%s.%N)
    children_cpu >"/tmp/ccron-test-times.$$.c1"
    cpu0=$(cat "/tmp/ccron-test-times.$$.c0")
    cpu1=$(cat "/tmp/ccron-test-times.$$.c1")
    printf '%-12s wall %6.0f s   cpu %7.0f s   %s\n' \
        "$label" "$(echo "$end - $start" | bc)" "$(echo "$cpu1 - $cpu0" | bc)" "$*"
}

case "$what" in
cold | all)
    cold_dir=$(mktemp -d)
    CARGO_TARGET_DIR="$cold_dir" measure "cold build" cargo test --workspace --locked --no-run
    CARGO_TARGET_DIR="$cold_dir" measure "cold run" cargo test --workspace --locked
    ;;&
warm | all)
    cargo test --workspace --locked --no-run >/dev/null 2>&1
    measure "warm" cargo test --workspace --locked
    ;;&
slow | all)
    measure "slow group" cargo test --workspace --locked --test 'slow_*'
    ;;
warm | cold) ;;
*)
    echo "usage: $0 [cold|warm|slow|all]" >&2
    exit 2
    ;;
esac
