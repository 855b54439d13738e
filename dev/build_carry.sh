#!/usr/bin/env bash
# CI machine (no GPU; ~3 min a tree on 2 cores: 8 min for A, B, C): the carried binaries of a device A / B, built
# from this checkout's HEAD (A) and from HEAD + drafts (one variant each), gzipped into OUTDIR
# (ignored; <= 64 MiB with the tree, ~9.4 MB a binary).
#   dev/build_carry.sh OUTDIR [TESTS] -- B=draft1.patch[+draft2.patch] [C=...]
# TESTS: test targets built for each variant beside its tool (comma-separated, default
# test_split), gzipped as OUTDIR/TEST_B.gz ...; A gets the tool only (OUTDIR/moe_ep_A.gz).
# Patches are names in dev/drafts/, applied in order with `git apply`. Each tree is a git
# worktree under /tmp/moe_ep_wt (Release, ptxas guard on: a spill fails the build).
# e.g. dev/build_carry.sh build-d54 test_split -- O=mega_token_order.patch
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
tests=test_split
if [ "${1:-}" != -- ]; then tests=$1; shift; fi
[ "${1:-}" = -- ] || { sed -n '2,12p' "$0"; exit 2; }
shift
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$out"
repo=$PWD wt=/tmp/moe_ep_wt
build() { # NAME PATCHES(+) TARGETS...
  local name=$1 patches=$2 dir=$wt/$1; shift 2
  rm -rf "$dir"; git worktree prune; git worktree add -f --detach "$dir" HEAD > /dev/null
  local p; for p in ${patches//+/ }; do git -C "$dir" apply "$repo/dev/drafts/$p"; done
  cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release > "$dir/configure.log"
  cmake --build "$dir/build" -j2 --target "$@" > "$dir/build.log" 2>&1 || { tail -20 "$dir/build.log"; exit 1; }
  gzip -c "$dir/build/tools/moe_ep" > "$out/moe_ep_$name.gz"
}
build A "" moe_ep_tool
for v in "$@"; do
  name=${v%%=*}
  build "$name" "${v#*=}" moe_ep_tool ${tests//,/ }
  for t in ${tests//,/ }; do gzip -c "$wt/$name/build/tests/$t" > "$out/${t}_$name.gz"; done
done
ls -la "$out"; du -sh "$out"
