#!/usr/bin/env bash
# `moe_ep` refuses bad option values at once with exit code 2 and a message,
# before it generates any weights (each case runs in well under a second).
# Usage: test_cli_args.sh PATH_TO_MOE_EP
set -u
tool=$1
pass=0 fail=0
expect_refused() {
  out=$(timeout 10 "$tool" "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ -n "$out" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL: moe_ep $*: rc $rc: $out"; fi
}
expect_refused run --tokens abc
expect_refused run --tokens 5x
expect_refused run --tokens 0
expect_refused run --tokens -5
expect_refused run --tokens 999999999999
expect_refused run --ranks 0
expect_refused run --threads -1
expect_refused run --seed -1
expect_refused run --path nope
expect_refused run --geometry nope
expect_refused run --tokens
expect_refused run --bogus 1
expect_refused bench --iters 5x
expect_refused bench --tokens 0
expect_refused bench --tile-rows 48
expect_refused bench --sustain-ms 1e3
expect_refused tune --warmup -1
expect_refused nonsense
echo "test_cli_args: $pass passed, $fail failed"
[ $fail -eq 0 ]
