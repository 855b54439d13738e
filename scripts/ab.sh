#!/usr/bin/env bash
# Paired A/B bench, one call on the GPU machine: two source trees built by the
# same compiler, then benched in turn (A B A B ...). The same cell moved by up
# to 7 % between calls, and a build from another machine's compiler differs
# by itself, so changes of a few percent are compared only this way.
#   scripts/ab.sh SRC_A SRC_B ROUNDS [moe_ep bench args...]
# SRC_A, SRC_B: source trees; `.` is this one. Another commit, carried to the
#   machine: git archive REF | tar -x -C build-carry/a   (run with carry build-carry)
# AB_CMAKE_A, AB_CMAKE_B: extra cmake arguments of each build, for variants of
#   one tree (e.g. AB_CMAKE_A=-DCMAKE_CUDA_FLAGS=-DSOME_SWITCH=0).
# Writes $OUT/rN_A.md, $OUT/rN_B.md; prints scripts/bench_compare.py's table last.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ $# -lt 3 ]; then sed -n '2,12p' "$0"; exit 2; fi
src_a=$1 src_b=$2 rounds=$3; shift 3
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"

build() { # source, build dir, label, extra cmake args
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release $4 >"$out/configure_$3.log" 2>&1 &&
    cmake --build "$2" -j8 --target moe_ep_tool >"$out/build_$3.log" 2>&1
}
build "$src_a" build-ab-A A "${AB_CMAKE_A:-}" & pid_a=$!
build "$src_b" build-ab-B B "${AB_CMAKE_B:-}"; rc_b=$?
wait $pid_a; rc_a=$?
echo "build A rc=$rc_a, B rc=$rc_b"
if [ $rc_a -ne 0 ] || [ $rc_b -ne 0 ]; then tail -n 20 "$out"/build_*.log; exit 1; fi
rm -f "$out"/configure_*.log "$out"/build_*.log "$out"/r*_[AB].md

for i in $(seq 1 "$rounds"); do
  for v in A B; do
    MOE_EP_COMMIT=$v build-ab-$v/tools/moe_ep bench --out "$out/r${i}_$v.md" "$@" >/dev/null 2>&1 ||
      echo "bench $v round $i failed"
  done
done
shopt -s nullglob
a_files=("$out"/r*_A.md) b_files=("$out"/r*_B.md)
if [ ${#a_files[@]} -eq 0 ] || [ ${#b_files[@]} -eq 0 ]; then echo "no bench tables to compare"; exit 1; fi
python3 scripts/bench_compare.py "${a_files[@]}" -- "${b_files[@]}"
