#!/usr/bin/env bash
# Device plan (forty-eighth session). Calls, in order of value (carry build-carry unless said):
# 0. `dev/next_session.sh mx3` (carry build-mx3 instead; ~3 min, no build on the device): steps 1
#    and 2 in one call from binaries built on the CI machine (nvcc 13.0) from main + M + M2 + M3:
#    build-mx3/test_tiles_M3.gz, test_split_M3.gz (full sizes, split and mega, large offsets
#    included), moe_ep_M3.gz, and A / M2 beside it; the A/B only if both tests pass. If M3 passes
#    and wins: `git merge mx-one-sum` (the branch: main + M + M2 + M3, the drafts removed), record
#    the table, then the suite on the merge (scripts/device.sh test).
# 1. `dev/next_session.sh mxtest` (~5 min): the MX drafts' correctness, all three applied to a copy
#    of the tree (M dev/drafts/rs_tile_mx_one_sum.patch, M2 rs_tile_mx_paired32.patch, M3
#    rs_tile_mx_row_refs.patch), built in build-mx/ (test targets only, 240 s with -j16):
#    test_tiles and test_split (split, mega), quick. M + M2 passed so (forty-eighth session).
# 2. `dev/next_session.sh mxab` (~3 min): mega and split fwd of A (main's kernels), M2 (M + M2,
#    measured: T >= 512 -4-14 %, MXFP8 mega decode +4 %) and M3 (M + M2 + M3: the row
#    references read by every widening thread by 16-byte loads, not one thread a row word by word;
#    at 128 rows after the first TMAs), MXFP8 and W4A8, both geometries, T = 8, 64, 512, 8192.
#    Predicted: M3's MXFP8 mega decode back to A's (-4 % from M2), T >= 512 1-3 % under M2, and
#    mega ahead of split again at 8192 (its done counters no longer wait for the prologue).
#    Merge M + M2 + M3 if mxtest passes and M3 wins at decode; then the
#    suite (scripts/device.sh test, ~7 min), since the sums' bits change.
#    Open with M2 (docs/benchmarks.md, forty-eighth session): at T = 8192 split gains ~10 % and
#    mega ~5 %, so mega falls behind split there (MXFP8 flash 5820 / 5564 us).
# 3. `dev/next_session.sh` (no argument, ~4 min): diagnostics of mega's decode (kernel lab,
#    item traces, T = 1..8); build-carry/moe_ep_T.gz, moe_ep_A.gz, rs_tile_paired built as in
#    docs/design.md ("Forty-fifth session").
# 4. `dev/next_session.sh mx` (~2 min): the kernel lab of main against M's (build-carry/rs_tile_decode{,_M},
#    rs_tile_paired{,_M}: -DLAB_DECODE / -DLAB_PAIRED of dev/wgmma_lab/rs_tile.cu).
# `dev/next_session.sh asan` (~1 min; carry build-asan-carry instead): test_split, test_nccl, test_tiles,
#   test_fuzz_gpu built with -fsanitize=address,undefined on the host code (cmake -S . -B build-asan
#   -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=address,undefined
#   -fno-omit-frame-pointer", the same in CMAKE_EXE_LINKER_FLAGS; gzip each test into
#   build-asan-carry/); LSan suppressions dev/lsan_cuda.supp. Clean at 279341e (forty-eighth session).
# Binaries in build-carry come from the CI machine's nvcc 13.0 (a tree with the patches applied,
# `cmake --build build --target moe_ep_tool`, tools/moe_ep gzipped); compare only binaries of one compiler.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
if [ "${1:-}" = mx ]; then
  chmod +x build-carry/rs_tile_*
  for b in decode decode_M paired paired_M; do
    timeout 150 build-carry/rs_tile_$b > $O/lab_$b.txt 2>&1; echo "lab $b rc=$?"
  done
  for b in decode decode_M paired paired_M; do
    echo "== $b"; grep -E "mxfp8|w4a8" $O/lab_$b.txt | grep -v producer | cut -c1-170
  done
  echo "mx $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = mxtest ]; then
  src=/tmp/moe_ep_mx_tree; rm -rf $src && mkdir -p $src && git ls-files -z | xargs -0 cp --parents -t $src &&
    (cd $src && git apply "$OLDPWD/dev/drafts/rs_tile_mx_one_sum.patch" && git apply "$OLDPWD/dev/drafts/rs_tile_mx_paired32.patch" && git apply "$OLDPWD/dev/drafts/rs_tile_mx_row_refs.patch") \
    > $O/mx_apply.log 2>&1 || { cat $O/mx_apply.log; exit 1; }
  cmake -S $src -B build-mx -DCMAKE_BUILD_TYPE=Release > $O/mx_cfg.log 2>&1 &&
    cmake --build build-mx -j16 --target test_tiles test_split > $O/mx_build.log 2>&1 || { tail -20 $O/mx_build.log; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s"
  MOE_EP_TEST_QUICK=1 timeout 200 build-mx/tests/test_tiles > $O/mx_tiles.log 2>&1; echo "test_tiles rc=$? $(tail -1 $O/mx_tiles.log)"
  grep -E "mxfp8|w4a8" $O/mx_tiles.log | head -8
  MOE_EP_TEST_QUICK=1 MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-mx/tests/test_split > $O/mx_split.log 2>&1 # quick: no large offsets
  echo "test_split (split, mega) rc=$? $(tail -1 $O/mx_split.log)"
  echo "mxtest $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = asan ]; then # carry build-asan-carry: the host code under ASan / UBSan with a GPU
  export ASAN_OPTIONS=protect_shadow_gap=0:allocator_may_return_null=1 LSAN_OPTIONS=suppressions=$PWD/dev/lsan_cuda.supp
  for b in test_split test_nccl test_tiles test_fuzz_gpu; do carried build-asan-carry/$b || exit 1; done
  timeout 200 build-asan-carry/test_fuzz_gpu > $O/asan_fuzz_gpu.log 2>&1; echo "asan test_fuzz_gpu rc=$? $(tail -1 $O/asan_fuzz_gpu.log)"
  MOE_EP_TEST_QUICK=1 MOE_EP_TEST_BACKENDS=split,mega timeout 300 build-asan-carry/test_split > $O/asan_split.log 2>&1
  echo "asan test_split (split, mega; quick) rc=$? $(tail -1 $O/asan_split.log)"
  timeout 120 build-asan-carry/test_nccl > $O/asan_nccl.log 2>&1; echo "asan test_nccl rc=$? $(tail -1 $O/asan_nccl.log)"
  MOE_EP_TEST_QUICK=1 timeout 120 build-asan-carry/test_tiles > $O/asan_tiles.log 2>&1
  echo "asan test_tiles (quick) rc=$? $(tail -1 $O/asan_tiles.log)"
  grep -h -A12 -E "ERROR: (Address|Leak)Sanitizer|runtime error" $O/asan_*.log | head -60
  echo "asan $(( $(date +%s) - t0 )) s"
  exit 0
fi
# The MX A/B: A, M2 and M3's moe_ep (DIR/moe_ep_X.gz), MXFP8 and W4A8, split and mega, one round.
mx_ab() {
  for b in A M2 M3; do carried $1/moe_ep_$b || return 1; done
  scripts/ab.sh 1 $1/moe_ep_A $1/moe_ep_M2 $1/moe_ep_M3 -- --paths mxfp8,w4a8 --backends split,mega \
    --geometry ds-v4-flash,ds-v4-pro --tokens 8,64,512,8192 --iters 10 2>&1 | tail -40
}
if [ "${1:-}" = mx3 ]; then # carry build-mx3: M + M2 + M3's tests at full size, then the A/B
  for b in test_tiles_M3 test_split_M3; do carried build-mx3/$b || exit 1; done
  timeout 200 build-mx3/test_tiles_M3 > $O/m3_tiles.log 2>&1; rc_t=$?; echo "test_tiles (M3) rc=$rc_t $(tail -1 $O/m3_tiles.log)"
  MOE_EP_TEST_BACKENDS=split,mega timeout 300 build-mx3/test_split_M3 > $O/m3_split.log 2>&1; rc_s=$?
  echo "test_split (M3; split, mega) rc=$rc_s $(tail -1 $O/m3_split.log)"; grep -h "large offsets" $O/m3_split.log | head -5
  [ $rc_t -eq 0 ] && [ $rc_s -eq 0 ] || { grep -h -B2 -A4 FAIL $O/m3_*.log | head -40; exit 1; }
  mx_ab build-mx3
  echo "mx3 $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = mxab ]; then
  mx_ab build-carry
  echo "mxab $(( $(date +%s) - t0 )) s"
  exit 0
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
chmod +x build-carry/rs_tile_paired*
for v in noloads:-DFR_LAB_SKIP_LOADS=3 nocmult:-DFR_LAB_SKIP_CMULT; do # built here: the carry's 64 MiB
  [ -x build-carry/rs_tile_paired_${v%%:*} ] || (cd dev/wgmma_lab && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a \
    -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src -DLAB_PAIRED ${v#*:} rs_tile.cu -o ../../build-carry/rs_tile_paired_${v%%:*} -lcuda)
done
timeout 150 build-carry/rs_tile_paired > $O/lab_hbm.txt 2>&1; echo "lab hbm rc=$?"
LAB_WEIGHT_EXPERTS=2 timeout 150 build-carry/rs_tile_paired > $O/lab_l2.txt 2>&1; echo "lab l2 rc=$?"
LAB_SMS=16 timeout 150 build-carry/rs_tile_paired > $O/lab_sms16.txt 2>&1; echo "lab 16 SMs rc=$?"
timeout 150 build-carry/rs_tile_paired_noloads > $O/lab_noloads.txt 2>&1; echo "lab no loads rc=$?"
timeout 150 build-carry/rs_tile_paired_nocmult > $O/lab_nocmult.txt 2>&1; echo "lab no k32 multipliers rc=$?"
for f in hbm l2 sms16 noloads nocmult; do echo "== $f"; grep -E "^paired" $O/lab_$f.txt | grep -v producer | cut -c1-170; done
echo "lab $(( $(date +%s) - t0 )) s"
timeout 200 dev/trace_items.sh mxfp8:ds-v4-flash:8 fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:1 mxfp8:ds-v4-pro:8 \
  w4a8:ds-v4-flash:8 bf16:ds-v4-flash:8
echo "trace $(( $(date +%s) - t0 )) s"
carried build-carry/moe_ep_A && build-carry/moe_ep_A bench --paths mxfp8,fp8_block --backends split,mega \
  --geometry ds-v4-flash --tokens 1,2,4,8 --iters 20 --out $O/small_t.md > $O/small_t.log 2>&1
grep -v '^$' $O/small_t.md | tail -20
echo "total $(( $(date +%s) - t0 )) s"
