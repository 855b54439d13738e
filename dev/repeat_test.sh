#!/usr/bin/env bash
# Lab: run one GPU test N times on fresh random inputs, to catch a rare failure.
# Prints the seed and the FAIL lines of every failing run (MOE_EP_TEST_SEED=<seed>
# replays one).   dev/repeat_test.sh [N=10] [test=build-device/tests/test_split]
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}; t=${2:-build-device/tests/test_split}; log=$(mktemp); fails=0
for i in $(seq 1 "$n"); do
  timeout 300 "$t" >"$log" 2>&1
  last=$(tail -n 1 "$log")
  case "$last" in *" 0 failed"*) ;; *) fails=$((fails + 1)); echo "run $i: $last ($(grep -m1 seed "$log"))"; grep FAIL "$log" | head -n 8;; esac
done
rm -f "$log"
echo "$t: $fails of $n runs failed"
