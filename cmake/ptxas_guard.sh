#!/usr/bin/env bash
# CUDA compiler launcher of the library's kernels (CMakeLists.txt): runs the
# compile and fails it where ptxas reports wgmma instructions serialised
# ("Potential Performance Loss: wgmma...", C7510-C7515), as the build fails
# on spills: the build passes, but the tile runs 10-15 % slower (FP8-BLOCK's
# mega kernel once lacked the registers for its wgmma pipeline, C7511, and
# only the bench showed it). Usage: ptxas_guard.sh COMPILER ARGS...
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
rc=$?
cat "$log" >&2
if [ $rc -eq 0 ] && grep -q "Potential Performance Loss: wgmma" "$log"; then
  echo "error: ptxas serialised wgmma instructions (above); treated as an error, as spills are" >&2
  exit 1
fi
exit $rc
