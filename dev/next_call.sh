#!/usr/bin/env bash
# seventy-first session's first call (carry build-x83: main's tool at 83cce84 (rebuild at main first: 92235a8 refactors mega's row mapping; run dev/gpu_suite_carried.sh on it too), xz-packed, built on the CI machine with
# the ptxas guard on; ~5 min): issue #4's tables after the 128-row MX tiles' deeper rings, the EP8 slice and the
# emulated flash group (the pro group a call of its own: PART=pro, ~4 min). If build-x83 is gone: xz -c
# build/tools/moe_ep > build-x83/moe_ep_B.xz from a Release build of main.
#   bash dev/next_call.sh            PART=pro bash dev/next_call.sh
cd "$(dirname "$0")/.."
if [ "${PART:-}" = pro ]; then ISSUE4_LIMITS="0 330 0" dev/issue4_run.sh build-x83/moe_ep_B
else ISSUE4_LIMITS="125 0 120" dev/issue4_run.sh build-x83/moe_ep_B; fi
