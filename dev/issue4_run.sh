#!/usr/bin/env bash
# device (~350 s with the bench's 1500 ms warm-ups: slice ~105 s, emulated pro ~200-225, flash ~80-90 on an H100): issue #4's tables with a carried moe_ep binary (gzipped in build-carry/):
# the EP8 slice, then the emulated EP8 group one geometry a call, with nvidia-smi's SM clock and
# power sampled throughout; everything tarred into $OUT/tables.tgz (the device returns <= 8 files).
#   [ISSUE4_LIMITS="125 320 120" (0 skips one)] dev/issue4_run.sh build-carry/moe_ep_X [extra bench args]   (carry build-carry)
# It writes $OUT/tables.tgz itself and removes $OUT/t: a caller must not tar $OUT/t over it.
# Then: tar -xzf tables.tgz; scripts/issue_tables.py t/slice.md; ... t/r8_flash.md t/r8_pro.md
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
B=${1:?binary}; shift
carried "$B" || exit 1
t0=$(date +%s)
A="--paths bf16,mxfp8,w4a8,nvfp4,fp8_block --backends split,mega --tokens 8,64,512,2048,8192 --iters 20 --warmup 3 $*"
mkdir -p $OUT/t
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.active --format=csv,noheader -lms 100 > $OUT/t/smi.csv 2>/dev/null &
smi=$!
# ISSUE4_LIMITS: each bench's time limit in s (slice, r8 pro, r8 flash), so that a long run
# still leaves time for the tarball
# (fifty-eighth session on an H100: slice 98 s, flash 85 s; pro past 180 s, its bf16, MXFP8 and
# FP8-BLOCK layers timed one backend at a time: they do not fit the GPU together)
read -r l1 l2 l3 <<< "${ISSUE4_LIMITS:-125 320 120}"
bench() { # NAME LIMIT [bench args]: a limit of 0 skips it (timeout 0 would mean none)
  local name=$1 limit=$2; shift 2; [ "$limit" -gt 0 ] || { echo "$name skipped"; return; }
  timeout $limit $B bench --out $OUT/t/$name.md "$@" $A > $OUT/t/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s)-t0 )) s"
}
bench slice $l1
bench r8_pro $l2 --ranks 8 --geometry ds-v4-pro
bench r8_flash $l3 --ranks 8 --geometry ds-v4-flash
kill $smi
grep -h "^- .*TFLOP\|^- copy\|^- the same" $OUT/t/*.md | sort -u
python3 - $OUT/t/smi.csv <<'PY'
import sys, statistics
rows = [l.strip().split(', ') for l in open(sys.argv[1]) if l.count(',') >= 3]
busy = [r for r in rows if float(r[2].split()[0]) > 400]
cl = sorted(int(r[1].split()[0]) for r in busy)
print(f"nvidia-smi: {len(rows)} samples, {len(busy)} above 400 W: SM clock median {statistics.median(cl) if cl else 0} MHz,"
      f" p10 {cl[len(cl) // 10] if cl else 0}, p90 {cl[9 * len(cl) // 10] if cl else 0};"
      f" power-capped (reason 0x4) in {sum(1 for r in busy if int(r[3], 16) & 4)}")
PY
tar -C $OUT -czf $OUT/tables.tgz t && rm -rf $OUT/t
echo "total $(( $(date +%s)-t0 )) s"
