#!/usr/bin/env bash
# device: the GPU tests under compute-sanitizer (default memcheck, then synccheck; racecheck by TOOLS), with test
# binaries built on the CI machine and carried gzipped in build-carry/ (carry build-carry):
#   [TOOLS="memcheck synccheck"] [LIMIT_S=150] dev/sanitize.sh   (each run cut at LIMIT_S s)
# test_split runs quick (MXFP8 only in its path loop; bf16 in the others) with both GPU backends. A kernel under the sanitizer
# runs far slower, so a bounded wait giving up there (MOE_EP_ERROR_TIMEOUT) is the tool's
# slowness, not a finding; a sanitizer error report is.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
export MOE_EP_TEST_QUICK=1 MOE_EP_TEST_BACKENDS=split,mega
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
for t in test_tile_wait test_tiles test_split; do
  carried build-carry/$t || exit 1
done
for tool in ${TOOLS:-memcheck synccheck}; do
  for t in test_tile_wait test_tiles test_split; do
    t0=$(date +%s)
    timeout ${LIMIT_S:-150} compute-sanitizer --tool $tool --print-limit 20 build-carry/$t >"$out/${tool}_$t.log" 2>&1
    rc=$?
    echo "$tool $t: rc=$rc in $(( $(date +%s) - t0 )) s; $(grep -E 'ERROR SUMMARY' "$out/${tool}_$t.log" | tail -n1); $(grep -E 'passed, .* failed' "$out/${tool}_$t.log" | tail -n1)"
  done
done
# racecheck's reports sorted into known (its false positives on mega's item loop, ring slot
# reuse, the bounded wait's give-up flag: dev/racecheck_triage.py says why) and new
new=0
for f in "$out"/racecheck_*.log; do
  [ -f "$f" ] || continue
  python3 dev/racecheck_triage.py "$f" || new=1
done
exit $new
