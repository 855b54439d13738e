#!/usr/bin/env bash
# device, one call (~4 min; carry build-carry): where mega's decode forward loses to its floor
# (docs/design.md, "Forty-fifth session"). Needs, built on the CI machine (free):
#   build-carry/moe_ep_T.gz  the trace build: cmake -S . -B build-T -DCMAKE_BUILD_TYPE=Release \
#       -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF -DMOE_EP_WERROR=OFF && cmake --build build-T -j2 \
#       --target moe_ep_tool && gzip -c build-T/tools/moe_ep > build-carry/moe_ep_T.gz
#   build-carry/moe_ep_A.gz  main's tool (the plain build's tools/moe_ep, gzipped)
#   build-carry/rs_tile_paired  (cd dev/wgmma_lab && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a \
#       -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src -DLAB_PAIRED rs_tile.cu -o ../../build-carry/rs_tile_paired -lcuda),
#   and the same with -DFR_LAB_SKIP_LOADS=3 (rs_tile_paired_noloads: stages past the first ring land
#   without bytes, the tile's own bound) and -DFR_LAB_SKIP_CMULT (rs_tile_paired_nocmult: MX without
#   its k32 multipliers: what MXFP8 / W4A8 pay for them), built on the device by this script
#   for `ab`: build-carry/moe_ep_P4.gz, moe_ep_Q4.gz: main with the draft applied
#       (git apply dev/drafts/....patch in a worktree), its tools/moe_ep gzipped
#   for `mx`: rs_tile_decode (-DLAB_DECODE) of main, rs_tile_decode_M and rs_tile_paired_M the
#       same (and -DLAB_PAIRED) with dev/drafts/rs_tile_mx_one_sum.patch applied; `mxab`: moe_ep_M.gz,
#       moe_ep_M2.gz (and rs_tile_mx_paired32.patch)
# 1. The paired decode tiles alone (kernel lab, no mega around them): GB/s of weights from HBM and
#    from L2 (LAB_WEIGHT_EXPERTS=2). Predicted from the emulated EP8 group (mega at 1.07x of its
#    floor with 24 items a block): the E4M3 tiles >= 3.8 TB/s from HBM; if so the slice's 1.44x
#    is mega's per-forward cost and its item schedule, not the tile.
#    LAB_SMS=16 (32 blocks, HBM far from bound): a block's own rate from HBM, the cap
#    dev/decode_schedule_sim.py assumes. Predicted 25-50 KB/us (two 32 KB raw stages in flight
#    per ~0.8 us of unloaded HBM latency plus a stage's compute); near 17 (a block's fair share of
#    HBM at 264 blocks) the slice's decode tail is what the model says and the Q4 draft (`ab`)
#    addresses it; at >= 30 the model's tail is small and the slice loses elsewhere (per item).
# 2. mega's item trace of one forward per cell beside the same forward between events
#    (dev/trace_items.sh): launch and exit outside the blocks, the start before the first GEMM,
#    each item's run and KB/us, the tail. dev/decode_schedule_sim.py predicts (cap 20 KB/us a
#    block, 2 us an item): flash T = 8 MXFP8 ~163 us of items; the bench's 210 us leaves ~40 us.
# 3. mega's forward at T = 1, 2, 4, 8 (MXFP8, flash): at T = 1 each block runs at most one item
#    (192 items), so the forward is the fixed cost plus one GEMM1 and one GEMM2 item.
# `dev/next_session.sh ab` instead (second call, ~5 min): the A/B of two drafts against main (A):
#   P4: dev/drafts/mega_rows_l2_prefetch.patch, the register tile's GEMM1 items asking L2 for
#     their first 4 weight stages while they wait for their rows (build-carry/moe_ep_P4.gz).
#     Predicted: mega fwd -2-4 % at flash T = 8 / 64 (HBM busy ~5 us earlier in a ~200 us forward),
#     -1 % at pro 8.
#   Q4: dev/drafts/mega_tail_l2_prefetch.patch, once every GEMM item is claimed the tiles of 64
#     rows or fewer ask L2 for their weight stages 4 ahead of their loads (build-carry/moe_ep_Q4.gz).
#     Predicted: -3-8 % at flash T = 8 if step 1 shows a paired block near 17 KB/us, -1-3 % at
#     flash 64 and pro 8 / 64 (dev/decode_schedule_sim.py --tail-cap).
# `dev/next_session.sh mx` (third call, ~2 min): the kernel lab of main against the lab of
#   dev/drafts/rs_tile_mx_one_sum.patch (MXFP8 / W4A8 with each row's scale reference over all of
#   K: one fp32 sum over K, no partial sum, no promotion; design.md, forty-sixth session):
#   build-carry/rs_tile_decode{,_M} (-DLAB_DECODE: the 64- / 32- / 16-row tiles at flash decode,
#   the 128-row MXFP8 / W4A8 GEMM1 at T = 8192), rs_tile_paired{,_M} (-DLAB_PAIRED). Predicted:
#   the 128-row MXFP8 / W4A8 GEMM1 -8-15 % a tile (QGMMA's stage lost ~11 % to its promotions,
#   twenty-fourth session; MXFP8's also load and multiply 2^ref_w), decode 0-10 %.
# `dev/next_session.sh mxtest` (~6-8 min): the drafts' correctness: both MX patches applied to a
#   copy of the tree (/tmp, built in build-mx/: moe_ep_M2's code), test_tiles and test_split (split, mega).
# `dev/next_session.sh asan` (~4 min; carry build-asan-carry, not build-carry): the GPU backends'
#   host code (split.c, mega.c, knobs, the NCCL group of one) under AddressSanitizer and UBSan:
#   build-asan-carry/test_{split,nccl,tiles,fuzz_gpu}.gz from cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" (and the same in
#   CMAKE_EXE_LINKER_FLAGS), then cmake --build build-asan --target test_split test_nccl test_tiles test_fuzz_gpu; gzip.
#   The CPU build ran clean (design.md, the reference backend); the GPU backends' host code never ran so.
#   It is also the first run of the forty-seventh session's GPU tests (test_fuzz_gpu; test_split's
#   random shapes and knobs): run it early, so that a wrong expectation in them is fixed in the same
#   session. Suggested order within 30 min of device time (~80 s to start): asan (~4 min), ab (~5),
#   mxtest (~7), mxab (~5), then the suite (scripts/device.sh, ~8) if a draft merged or a test
#   changed; the diagnostics (plain call, mx) only with time left.
# `dev/next_session.sh mxab` (~5 min): mega and split fwd of moe_ep_M (the draft) against A, MXFP8
#   and W4A8, both geometries, T = 8, 64, 512, 8192; and moe_ep_M2 (with
#   dev/drafts/rs_tile_mx_paired32.patch too: MXFP8's 32-row mega instance paired). Merge only if
#   mxtest passes and mxab wins.
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
    (cd $src && git apply "$OLDPWD/dev/drafts/rs_tile_mx_one_sum.patch" && git apply "$OLDPWD/dev/drafts/rs_tile_mx_paired32.patch") \
    > $O/mx_apply.log 2>&1 || { cat $O/mx_apply.log; exit 1; }
  cmake -S $src -B build-mx -DCMAKE_BUILD_TYPE=Release > $O/mx_cfg.log 2>&1 &&
    cmake --build build-mx -j16 > $O/mx_build.log 2>&1 || { tail -20 $O/mx_build.log; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s"
  timeout 200 build-mx/tests/test_tiles > $O/mx_tiles.log 2>&1; echo "test_tiles rc=$? $(tail -1 $O/mx_tiles.log)"
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
if [ "${1:-}" = mxab ]; then
  for b in A M M2; do carried build-carry/moe_ep_$b || exit 1; done
  scripts/ab.sh 1 build-carry/moe_ep_A build-carry/moe_ep_M build-carry/moe_ep_M2 -- --paths mxfp8,w4a8 --backends split,mega \
    --geometry ds-v4-flash,ds-v4-pro --tokens 8,64,512,8192 --iters 10 2>&1 | tail -40
  echo "mxab $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = ab ]; then
  set -- A P4 Q4
  for b in "$@"; do carried build-carry/moe_ep_$b || exit 1; done
  scripts/ab.sh 2 "${@/#/build-carry/moe_ep_}" -- --paths mxfp8,fp8_block,w4a8,nvfp4 \
    --backends mega --geometry ds-v4-flash,ds-v4-pro --tokens 8,64 --iters 20 2>&1 | tail -40
  echo "ab $(( $(date +%s) - t0 )) s"
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
