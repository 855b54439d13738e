#!/usr/bin/env bash
# The CPU tests (label cpu: the reference backend, codec, knob cache, API
# misuse and the random API calls of test_fuzz) under compiler sanitizers, in
# CPU-only builds (no CUDA; a few seconds each):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (gcc or clang)
#   tsan  ThreadSanitizer (the reference's thread pool, concurrent knob-cache writers)
#   msan  MemorySanitizer: reads of uninitialised memory (clang only)
# Usage: scripts/sanitize_cpu.sh [asan] [tsan] [msan]   (default: all three)
# A sanitizer this machine's compilers cannot run (probed with a tiny program:
# gcc 12's TSan crashes at start on some kernels) is skipped with a line that
# says so. Exit status: non-zero when a build or a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(asan tsan msan)
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1 MSAN_OPTIONS=halt_on_error=1
export MOE_EP_TEST_QUICK=1 # the full sizes run in the plain build (scripts/test.sh)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <pthread.h>\nstatic void *f(void *p) { return p; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n' >"$probe/p.c"

# The first of the compilers that builds and runs the probe with these flags.
pick_cc() {
  for cc in "$@"; do
    command -v "$cc" >/dev/null || continue
    "$cc" $flags "$probe/p.c" -o "$probe/p" -lpthread >/dev/null 2>&1 && "$probe/p" >/dev/null 2>&1 && { echo "$cc"; return; }
  done
}

failed=0
for m in "${modes[@]}"; do
  case $m in
    asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"; ccs="gcc clang" ;;
    tsan) flags="-fsanitize=thread -fno-omit-frame-pointer"; ccs="clang gcc" ;;
    msan) flags="-fsanitize=memory -fsanitize-memory-track-origins -fno-omit-frame-pointer"; ccs="clang" ;;
    *) echo "sanitize_cpu: unknown mode $m (asan, tsan, msan)"; exit 2 ;;
  esac
  cc=$(pick_cc $ccs)
  if [ -z "$cc" ]; then echo "sanitize_cpu: $m: skipped (no compiler here runs it)"; continue; fi
  dir=build-$m log=build-$m/sanitize.log
  mkdir -p "$dir"
  if ! { CC=$cc cmake -S . -B "$dir" -DMOE_EP_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
           -DCMAKE_EXE_LINKER_FLAGS="${flags%% -f*}" -DCMAKE_SHARED_LINKER_FLAGS="${flags%% -f*}" >"$log" 2>&1 &&
         cmake --build "$dir" -j "$(nproc)" >>"$log" 2>&1; }; then
    echo "sanitize_cpu: $m: build failed ($log)"; tail -20 "$log"; failed=1; continue
  fi
  if ctest --test-dir "$dir" -L cpu --output-on-failure -j2 >>"$log" 2>&1; then
    echo "sanitize_cpu: $m ($cc): $(grep -E 'tests passed' "$log" | tail -1)"
  else
    echo "sanitize_cpu: $m ($cc): FAILED ($log)"; grep -E -A20 "Sanitizer|runtime error|FAIL" "$log" | head -60; failed=1
  fi
done
exit $failed
