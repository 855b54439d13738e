#!/usr/bin/env bash
# Paired A/B bench, one call on the GPU machine: two or more source trees built
# by the same compiler, then benched in turn (A B A B ...). The same cell moved
# by up to 7 % between calls, and a build from another machine's compiler
# differs by itself, so changes of a few percent are compared only this way.
#   scripts/ab.sh ROUNDS SRC_A SRC_B [SRC_C ...] -- [moe_ep bench args...]
# SRC_A is the base; each other tree is compared with it. `.` is this tree.
# A SRC that is an executable file is a `moe_ep` binary built before (e.g.
#   on the CI machine, carried: it saves the device's build time; compare
#   only binaries from one compiler, and only binaries whose bench times
#   cells alike: before 643bc29 a cell had no sustained warm-up, so its
#   short cells ran partly at the clocks of an idle GPU, 0-13 % faster
#   than since). SRC.gz (or SRC.xz) alone is unpacked first.
#   Another commit, carried to the machine:
#   git archive REF | tar -x -C build-carry/a   (run with carry build-carry)
# AB_CMAKE_A, AB_CMAKE_B, ...: extra cmake arguments of each build, for
#   variants of one tree (e.g. AB_CMAKE_B=-DCMAKE_CUDA_FLAGS=-DSOME_SWITCH=0).
# Writes $OUT/rN_X.md; prints scripts/bench_compare.py's table last.
set -uo pipefail
. "$(dirname "$0")/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
usage() { sed -n '2,18p' "$0"; exit 2; }
[ $# -ge 4 ] || usage
rounds=$1; shift
labels=() srcs=()
for l in A B C D E F; do
  [ $# -gt 0 ] && [ "$1" != -- ] || break
  labels+=("$l") srcs+=("$1"); shift
done
[ ${#srcs[@]} -ge 2 ] && [ "${1:-}" = -- ] || usage
shift
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
jobs=$(( $(nproc) / ${#srcs[@]} )); [ $jobs -ge 1 ] || jobs=1

build() { # label, source
  if [ ! -e "$2" ] && [ -f "$2.gz" -o -f "$2.xz" ]; then # carried compressed (the device's carry limit): unpack it first
    carried "$2" || return 1
  fi
  if [ -f "$2" ] && [ -x "$2" ]; then # a moe_ep binary built elsewhere: no build here
    mkdir -p "build-ab-$1/tools" && cp "$2" "build-ab-$1/tools/moe_ep"
    return
  fi
  local extra; extra=$(eval echo "\${AB_CMAKE_$1:-}")
  cmake -S "$2" -B "build-ab-$1" -DCMAKE_BUILD_TYPE=Release $extra >"$out/configure_$1.log" 2>&1 &&
    cmake --build "build-ab-$1" -j$jobs --target moe_ep_tool >"$out/build_$1.log" 2>&1
}
pids=()
for i in "${!srcs[@]}"; do build "${labels[$i]}" "${srcs[$i]}" & pids+=($!); done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "build ${labels[$i]} (${srcs[$i]}) rc=$rc"; [ $rc -eq 0 ] || failed=1
done
if [ $failed -ne 0 ]; then tail -n 20 "$out"/build_*.log; exit 1; fi
rm -f "$out"/configure_*.log "$out"/build_*.log "$out"/r*_[A-F].md

for r in $(seq 1 "$rounds"); do
  for v in "${labels[@]}"; do
    MOE_EP_COMMIT=$v build-ab-$v/tools/moe_ep bench --out "$out/r${r}_$v.md" "$@" >/dev/null 2>&1 ||
      echo "bench $v round $r failed"
  done
done
shopt -s nullglob
args=()
for v in "${labels[@]}"; do
  files=("$out"/r*_$v.md)
  if [ ${#files[@]} -eq 0 ]; then echo "no bench tables of $v to compare"; exit 1; fi
  [ ${#args[@]} -eq 0 ] || args+=(--)
  args+=("${files[@]}")
done
python3 scripts/bench_compare.py "${args[@]}"
