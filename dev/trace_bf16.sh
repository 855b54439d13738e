#!/usr/bin/env bash
# device (~10 s a cell): the mega item trace of bf16 on the EP8 slice, by default at T = 2048 (pro,
# flash) and 8192 (pro): where mega's bf16 forward spends what split's stage does not.
#   dev/trace_bf16.sh [geometry:T ...]     e.g. dev/trace_bf16.sh ds-v4-flash:512
# dev/trace_items.sh with bf16 cells (its summary: dev/trace_items.py). Needs build-carry/moe_ep_T.gz
# (a -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF build of the tool).
cells=()
for g in ${*:-ds-v4-pro:2048 ds-v4-flash:2048 ds-v4-pro:8192}; do cells+=("bf16:$g"); done
exec "$(dirname "$0")/trace_items.sh" "${cells[@]}"
