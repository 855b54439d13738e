#!/usr/bin/env bash
# Device plan (as of the seventy-fifth session: the decode dispatch item's 5-7.5 us are not cold caches (`moe_ep bench --flush none`: a decode forward 1-2.3 % faster, no step moves) but a chain of 0.4-1.5 us steps (lab step marks, dev/drafts/lab_dispatch_steps.patch + dev/dispatch_steps.py: barrier init + fence + first copy ~1.1, slots 0.4, x row 0.7, encode 1.2-4.1, stores' issue 1.0-1.5, fence + counters 1.5); the dispatch's encode now runs before the plan's wait (merged, 69a4dae; its patch removed: mega fwd -0.3-0.9 % at T = 8 / 64; GPU suite 7 / 7 on an H100). Next lead (docs/design.md, seventy-fifth paragraph): a decode path without the count / plan / dispatch chain (~14 us before the first GEMM1 tile): GEMM1 items that read the ids and load and quantize their own rows (~8-9 us a forward at flash 8, a change to the register tile's A loads). A concrete form (not built): where every rank's tokens together are at most the tile's BM (T = 8 at BM 16 / 32; K distinct experts a token, so an expert has at most one m tile), a static plan: m tile e = expert e, rows e * BM + j in token order, GEMM1 item e * n1 + nb; each GEMM1 item of a non-empty expert reads the ids (one round trip), finds its tokens, loads and encodes their x rows (the dispatch's encode) and writes them to xq at its fixed rows (the n1 items of an expert write the same bytes), fences the async proxy, writes its slots (slot_pos, for the combine) and runs today's tile; no count, plan or dispatch items, GEMM2 and the combine unchanged but for the static offsets. dev/next_call.sh: this session's calls (X=DIR; TRACES_ONLY=1, PAIR=N). Before: the seventy-fourth session: the decode forward's critical path measured (docs/benchmarks.md, first section): a draft with fewer round trips was neutral (dev/drafts/mega_decode_chain.patch, not merged); lab marks (dev/drafts/lab_decode_marks.patch) put the start in the dispatch item's own 5-7.5 us for one token and the end in the last block's exit (3-4.7 us, 1.3-2.5 of them the host-mapped error word's write and __threadfence_system). dev/drafts/mega_exit_trim.patch (the exit without the clearing of unused counters and the mapped write's __threadfence_system) was neutral too (E / A 0.988-1.007 at T = 8; not merged). First call next: what the dispatch item does for 5-7.5 us (instruction fetch after the bench's L2 flush is the guess: time the forward twice without the flush, or mark inside the encode loop). Before: the seventy-third session: dev/next_call.sh ran (consumer-shape lab: the 256-row tile's lead dropped; ncu of the register tiles; mega's item traces near the targets; issue #4's emulated tables at main: docs/benchmarks.md, first section). What is left at the targets, measured: the register tile's per-tile serial parts (fill ~3 %, hand-off waits ~13 %, epilogue 13-17 % of a 1536-row tile, none beside another tile's K loop: the ring restarts each tile and C reuses it) and NVFP4's dispatch + combine tail (~9-10 % of the span beside no GEMM); both were tried in earlier forms (the pipelined run mega_runs.cuh, pull items, token order) and lost. Before: the seventy-second session's: dev/next_call.sh (the consumer-shape lab rs_nv_wide.cu + Nsight Compute's pipe / L2 figures of the register tile; its header says what to build and carry); then issue #4's emulated groups at main (not run since the seventy-first session's merges: `ISSUE4_LIMITS="0 330 120" dev/issue4_run.sh X`); rs_tile_mx_ahead.patch measured (its W4A8 form lost 1.5-3 %); the seventy-first's plan: the leads of docs/design.md, "Issue #4's targets"; the seventieth session: item 000 done, its next step there; the sixty-eighth's item 0 (item 00 done); the sixty-third's P3 ended; the sixty-first's 0y; the sixtieth's 0z; the fifty-ninth's pipelined A16 tile measured; before it the fifty-eighth's: NVFP4's and FP8-BLOCK's rows folded once into fp16 (A16)
# too, dfe69bd / 11149ea; issue #4's tables at dfe69bd with FP8-BLOCK's rows at 11149ea in
# docs/benchmarks.md's first section; mega's fold items in quarters measured and dropped). First
# `status`: if it lists a multi-GPU kind, issue #7 comes first (`SPLIT_TIMEOUT=1 SPLIT_TESTS=1
# dev/multi_gpu.sh W` on that kind, W GPUs; then the EP8 bench, docs/benchmarks.md). A fresh checkout
# has none of the ignored build folders below: build them on the CI machine first (minutes each;
# `export PATH=/usr/local/cuda/bin:$PATH`):
#   build-c52/moe_ep_T.gz: cmake -S . -B build-t52 -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON
#     -DMOE_EP_PTXAS_GUARD=OFF && cmake --build build-t52 -j2 --target moe_ep_tool; gzip -c
#     build-t52/tools/moe_ep > build-c52/moe_ep_T.gz (3-4 min)
#   a tool of main for A / Bs and a draft's: dev/build_carry.sh (worktrees, ptxas guard on)
#   build-carry/ (modes `stamps` and the default): moe_ep_A (main's tool), moe_ep_T (as
#     build-c52's), rs_tile_paired and rs_tile_stamps (dev/wgmma_lab/rs_tile.cu's nvcc line, the
#     first with -DLAB_PAIRED).
#   the GPU suite of a tree: dev/gpu_suite_carried.sh DIR (its header: which tests, gzipped).
# Calls, in order of value:
# 000. (seventieth session; next call: `bash dev/next_call.sh`, then `PART=pro bash dev/next_call.sh`, carry build-x83) Done: dev/drafts/mega_rs144_rows.patch merged (a1570cc; GPU suite 7 / 7 on an H100,
#    mega fwd pro 2048 -1.6-2.6 %, flash flat), the skip-loads lab (the A16 stage waits are not the loads), the
#    multicast lab (lost +24-44 %, removed), mega's item traces and issue #4's tables (slice, emulated flash and
#    pro with FP8-BLOCK): docs/benchmarks.md, first section. Then the 128-row MX A16 tiles' deeper fp16 rings
#    (83cce84: mega fwd T = 512 MXFP8 -4-4.6 %, W4A8 -3-6 %; mega folds MXFP8 at every row count); the 144-row
#    E2M1 tiles with 4 fp16 + 2 weight stages were flat in mega (not taken). Next: issue #4's tables at 83cce84
#    (`ISSUE4_LIMITS="125 330 120" dev/issue4_run.sh X` with X = main's tool, xz-packed, ~9 min: two calls, the
#    pro group alone), an H200 run of them (no H200 came this session), and the 144-row MX tiles' waits (no
#    unread stages there: the lab's 1536-row tiles with a smaller weight record or 2 weight stages).
# 00. (sixty-eighth session) Done: the 144-row A16 tiles merged (6a5c7dd; GPU suite 7 / 7 on an H100; mega fwd
#    -2-10 % at T >= 2048) and issue #4's tables after them (docs/benchmarks.md, first section; the emulated pro
#    group's FP8-BLOCK rows missing: its bench ran past its limit). Left: that group's FP8-BLOCK rows
#    (`moe_ep bench --ranks 8 --geometry ds-v4-pro --paths fp8_block --backends split,mega --tokens
#    8,64,512,2048,8192 --iters 20 --warmup 3`, ~2 min) beside item 0's run, and an H200 run of the tiles.
#    Both in one call, built on the CI machine in the sixty-eighth session: `bash build-x75/run.sh` (carry
#    build-x75: main's test_split at 2bbd787 (its new 144-row cases on every wire, not yet run: run first, with
#    split and mega), main's tool and its trace build at 6a5c7dd's src, xz-packed; ~5 min: those rows, then mega's item
#    traces at NVFP4 flash / pro 8192, bf16 flash 8192 and NVFP4 flash 2048). If build-x75 is gone: `xz -c build/tools/moe_ep >
#    build-x75/moe_ep_A.xz`; the trace build as build-c52's below (`-DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF`,
#    its moe_ep_tool) as build-x75/moe_ep_T.xz; run.sh: the bench line above, then `TRACE_BIN=build-x75/moe_ep_T
#    dev/trace_items.sh nvfp4:ds-v4-flash:8192 nvfp4:ds-v4-pro:8192 bf16:ds-v4-flash:8192 nvfp4:ds-v4-flash:2048`.
#    run.sh ends with the lab's A16 tiles at 1536 rows an expert with FR_LAB_SKIP_LOADS 1 / 2 / 3 and the weights
#    from L2, then split's NVFP4 GEMMs at flash 8192 under Nsight Compute: whether the A16 tiles' stage waits
#    (14 % of a T = 8192 tile) are the loads' (design.md, sixty-eighth session: if so, a 2-block cluster
#    multicasting the fp16 activation stage).
# 0. (sixty-fourth session) The GEMM tiles at T = 8192. The fold is done (5cd0733: every fold a word a
#    lane, split NVFP4 -5-6 %; P3 ended: its pull items fold every row, main's dispatch a token once).
#    P3c's trace (flash 8192, docs/benchmarks.md first section) puts ~590 of the 900-1100 us between
#    mega's fwd and its floor in the GEMM tiles: GEMM1 at 93 % of the measured BF16 rate a block, GEMM2
#    at 85 % (29.1 us a 128 x 256 x 2048 tile), and 4.7 % of m-tile padding. First on the CI machine:
#    what a tile pays outside its k loop (the producer's first stages, the epilogue's stores) from
#    dev/wgmma_lab/rs_tile.cu (-DFR_LAB_ACT16 -DLAB_T512: the A16 128-row tiles at 1536 rows an expert,
#    NVFP4 GEMM1 / GEMM2; per tile fill, stage waits, K loop, epilogue); if GEMM2's fixed part is ~3 us,
#    the producer fetching the next claimed item's first stages during the epilogue would save ~2 us a
#    tile (~100 us a block, ~2 %). With it main's item traces at NVFP4 flash / pro 8192 and MXFP8 flash
#    8192. Both built on the CI machine in the sixty-fourth session: `bash build-x71/run.sh` (carry
#    build-x71: the lab binary, main's trace tool moe_ep_T and main's tool moe_ep_A (b79e088, for paired
#    benches), xz-packed; ~2 min). Rebuild if gone: the lab's nvcc line (its header, plus -DFR_LAB_ACT16
#    -DLAB_T512), `cmake -S . -B B -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF`
#    and its moe_ep_tool.
# 0y. (sixty-first session) The lead with a number: bandwidth-bound items on a few blocks beside the
#    GEMMs. dev/wgmma_lab/write_lab.cu: the dispatch's shape streams 62 GB/s a block on 16 blocks, 20
#    on all 132 (docs/benchmarks.md, first section), so the dispatch (~211 us x 132 blocks at flash
#    8192) and the combine's tail would cost ~3x fewer block-us run by ~16 blocks while the rest run
#    GEMM tiles: ~3 % each at T >= 2048 (design.md, sixty-first session). Needs the fifty-third
#    session's rows in token order and readiness per m tile (dev/drafts/mega_token_order.patch, stale:
#    rebuild on main) and a claim order with a few dispatch / combine items between many GEMM items.
#    Build it on the CI machine first (model the item order in Python as dev/mega_order_model.py did),
#    then one device call: the GPU suite and `scripts/ab.sh 2` at T = 2048 / 8192.
#    (Measured and not merged: the dispatch's stores left in flight, dev/drafts/mega_dispatch_stores_in_flight.patch;
#    NVFP4's rows pulled per m tile, dev/drafts/mega_nvfp4_pull_items.patch (its final form: a warp a
#    row, encode and fold in registers): suite passed, +4-10 % at T >= 2048 (through the dispatch's
#    batch loop: +29-43 %). Its item order (pull_region_item) and counters are right; what it pays is
#    each row's encode (K x a token's), by a model that predicted -1-2 % and missed by ~6 %. So first
#    trace it: `git apply dev/drafts/mega_nvfp4_pull_items.patch` in a worktree, `cmake -S . -B B
#    -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF`, the tool, then
#    `TRACE_BIN=B/tools/moe_ep dev/trace_items.sh nvfp4:ds-v4-flash:8192` against main's trace (both
#    built on the CI machine in the sixty-first session: `bash build-x62/run1.sh`, carry build-x62,
#    ~1-2 min, if build-x62 is still there): the pull
#    items' length (kind FOLD), GEMM1's waits (its claim to tile), GEMM1's tile length beside them.
#    Then that next form, built in the sixty-first session, ptxas-clean, not run:
#    dev/drafts/mega_nvfp4_pull_items_tokrows.patch (the dispatch stores each token's codes once at its
#    token row, the pull items are fold items reading through a.row_slot): `bash build-x62/run2.sh`
#    (carry build-x62, 55 MB: its mega tests, then the paired A / B; ~2-3 min). run1 and run2 fit one
#    call: `bash build-x62/run1.sh; bash build-x62/run2.sh`.)
# 0z. (sixtieth session) The pipelined A16 tile's lead is closed (mega's own item tile was 9 % faster
#    than the lab's rendition of it; two run forms lost 2-8 %: dev/drafts/mega_nv_runs.patch). Merged
#    instead: NVFP4's GEMM1 epilogue writes GEMM2's fp16 rows (no fold items between the GEMMs, ae22968).
#    GEMM1 gathering its A16 rows by token by cp.async (dev/drafts/mega_a16_gather.patch): bit-exact,
#    +9-13 % slower; not merged. What is left of the dispatch (~5 % at T = 8192) and the combine's
#    tail (~4 %) needs them beside the GEMMs (design.md, fifty-third session's token-ordered rows).
#    Trace builds: `cmake -S . -B B -DMOE_EP_MEGA_TRACE=ON
#    -DMOE_EP_PTXAS_GUARD=OFF`; dev/trace_items.sh (TRACE_BIN) and dev/trace_items.py.
#    FP8-BLOCK's GEMM2 rows could come from GEMM1's epilogue too (E4M3 widened alone) once its 128-row
#    mega instance does not spill with it (8 bytes with epilogue_chunks_of's FOLD16 for FP8-BLOCK).
# 0a. (done in the fifty-eighth session: FP8-BLOCK's paired 16-row decode tile in mega's A16 form, no
#    gain at T = 8; dev/drafts/a16_decode_fp8_block.patch. Mega's fold items in quarters: no gain.)
# 0b. (done in the fifty-eighth session: MXFP8 at T = 512 in a mixed form, GEMM1 on folded rows and
#    GEMM2 widening: no gain; dev/drafts/mxfp8_mixed_a16.patch.)
# 0c. act16's memory (rows x max(H, I) x 2 B, every quantized path on the fp16 tile now): a cap
#    needs a bound on the rows a forward receives, which only the device knows (no host sync), so
#    either both tile forms chosen on the device per forward, or workspaces shared across layers
#    (an engine's many MoE layers run one after another: one act16, xq, aq, y for all of them).
# 1. Split's MXFP8 and W4A8 GEMM stages at T = 8192 lost 1-3 % to their third weight stages (mega
#    gained): a split-only 128-row instance with the old shared ring (FR_ARAW_OF 0, W4A8 2 raw
#    stages) chosen at >= ~1024 rows an expert, A / B against main at T = 2048 / 8192 and 512.
# 1b. (done in the fifty-sixth session: drafts E and F, both lost; docs/benchmarks.md.)
# 2. `dev/next_session.sh trace` (carry build-c52; ~1 min): mega's item trace of the cells where
#    it trails split (TRACE_CELLS to choose); the GEMM items' ~0.5 us preamble (claim to tile)
#    is unexplained: a trace build with stamps between gemm_item's steps would tell.
# 3. The FP4 and MXFP8 wires, H against main (draft C's serial E2M1 blocks, merged but not timed
#    on that wire): `scripts/ab.sh 2 H ALL -- --paths mxfp8,nvfp4 --backends split,mega --wire fp4
#    --geometry ds-v4-flash --tokens 512,8192 --iters 10` with a tool of 4083b3e (H) and of main.
# 4. `dev/next_session.sh` (no argument, ~4 min; carry build-carry): mega's decode diagnostics
#    (kernel lab, item traces, T = 1..8). `dev/next_session.sh stamps` (carry build-carry, ~2 min):
#    the 128-row tiles' stage, producer waits and epilogue in cycles; if GEMM1's epilogue is still
#    >= 10 % of the tile, the fix is structural (consumer warpgroups ping-ponging whole tiles, or C
#    in quarters beside the ring), design.md's twenty-third session.
# 5. Draft C2 (dev/drafts/chunk_epilogue_two_in_flight.patch, on C, now main): `#pragma unroll 2`
#    on the 128-row chunk loop; spills as it is (split's bf16 grouped_gemm_wgmma<8> 164 bytes);
#    only if the epilogue lab (dev/wgmma_lab/epilogue_rate.cu) shows it > 10 % faster.
# `dev/next_session.sh asan` (~1 min; carry build-asan-carry): test_split, test_nccl, test_tiles,
#   test_fuzz_gpu built with -fsanitize=address,undefined on the host code (cmake -S . -B build-asan
#   -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=address,undefined
#   -fno-omit-frame-pointer", the same in CMAKE_EXE_LINKER_FLAGS; gzip each test into
#   build-asan-carry/); LSan suppressions dev/lsan_cuda.supp. Clean at 279341e (forty-eighth session).
# Compare only binaries of one compiler (the CI machine's nvcc 13.0 for carried ones).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
if [ "${1:-}" = trace ]; then # carry build-c52: mega's item trace of the cells where mega trails split
  TRACE_BIN=build-c52/moe_ep_T timeout 300 dev/trace_items.sh ${TRACE_CELLS:-mxfp8:ds-v4-flash:512 mxfp8:ds-v4-flash:8192 \
    w4a8:ds-v4-flash:8192 mxfp8:ds-v4-pro:8192}
  echo "trace $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = r8 ]; then # carry build-c52 (moe_ep_T, moe_ep_ALL = main, moe_ep_H = 4083b3e): the emulated
  # group's MXFP8 pro T = 512, where mega trailed split by 4 % (H100): mega's item trace, split's kernels
  # (Nsight Compute), then draft C's FP4-wire cells (H against main)
  for b in moe_ep_T moe_ep_ALL moe_ep_H; do carried build-c52/$b || exit 1; done
  nvidia-smi --query-gpu=name --format=csv,noheader
  BENCH_EXTRA="--ranks 8" TRACE_BIN=build-c52/moe_ep_T timeout 120 dev/trace_items.sh mxfp8:ds-v4-pro:512
  BENCH_EXTRA="--ranks 8" NCU_LAUNCHES=40 MOE_EP_BIN=build-c52/moe_ep_ALL timeout 150 dev/ncu_forward.sh mxfp8 512 ds-v4-pro split
  scripts/ab.sh 2 build-c52/moe_ep_H build-c52/moe_ep_ALL -- --paths mxfp8,nvfp4 --backends split,mega --wire fp4 \
    --geometry ds-v4-flash --tokens 512,8192 --iters 10 2>&1 | tail -10
  echo "r8 $(( $(date +%s) - t0 )) s"
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
if [ "${1:-}" = stamps ]; then # carry build-carry: the kernel lab's stamps of the 128-row tiles (main's)
  chmod +x build-carry/rs_tile_stamps
  timeout 200 build-carry/rs_tile_stamps > $O/rs_tile_stamps.txt 2>&1; echo "== rs_tile_stamps rc=$?"
  grep -v "^ *$" $O/rs_tile_stamps.txt | tail -24 | cut -c1-200
  echo "stamps $(( $(date +%s) - t0 )) s"
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
