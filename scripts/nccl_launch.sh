#!/usr/bin/env bash
# Multi-process launcher for NCCL tests, no MPI: nccl_launch.sh NRANKS PROGRAM [ARGS...]
# Starts NRANKS copies of PROGRAM, rank r meant for GPU r, each with
#   MOE_EP_RANK=r  MOE_EP_WORLD_SIZE=NRANKS  MOE_EP_NCCL_ID_FILE=<tmp>/id
#   MOE_EP_TEST_SEED=<one seed for all ranks>
# (rank 0 writes the NCCL unique id to the file, the others read it), waits for
# all (at most MOE_EP_LAUNCH_TIMEOUT seconds, default 500; then the remaining
# ranks are killed), prints each rank's output, and exits 0 when every rank
# passed, 77 (skipped) when every rank skipped (e.g. fewer GPUs than ranks),
# 1 otherwise.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 NRANKS PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
seed=${MOE_EP_TEST_SEED:-$(( $(date +%s) % 1000000 ))}
limit=${MOE_EP_LAUNCH_TIMEOUT:-500}
echo "nccl_launch: $n ranks, seed $seed: $*"

pids=()
for ((r = 0; r < n; r++)); do
  MOE_EP_RANK=$r MOE_EP_WORLD_SIZE=$n MOE_EP_NCCL_ID_FILE="$dir/id" MOE_EP_TEST_SEED=$seed \
    "$@" >"$dir/out.$r" 2>&1 &
  pids+=($!)
done

start=$SECONDS
while :; do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  if ((SECONDS - start > limit)); then
    echo "nccl_launch: ranks still running after ${limit}s, killing them" >&2
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
    break
  fi
  sleep 0.2
done

passed=0 skipped=0 failed=0
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"
  rc=$?
  sed "s/^/[rank $r] /" "$dir/out.$r"
  echo "[rank $r] exit $rc"
  case $rc in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done
if ((failed == 0 && skipped == n)); then exit 77; fi
if ((failed == 0 && passed == n)); then exit 0; fi
exit 1
