#!/usr/bin/env bash
# Device plan (fiftieth to fifty-second sessions; no machine started in any: the 51st got nine
# "could not be started" answers, the 52nd fourteen). First `status`: if it lists a multi-GPU kind, issue #7 comes first (`SPLIT_TIMEOUT=1 SPLIT_TESTS=1 dev/multi_gpu.sh W` on that kind, W GPUs;
# then the EP8 bench, docs/benchmarks.md). Calls, in order of value (carry build-carry unless said):
# 00. Device time short (the 52nd session's budget went to failed starts, ~90 s each): first
#    `dev/next_session.sh all52` (carry build-suite51, 54 MB: the six GPU tests of main + all seven
#    drafts D, E, F, W, N, X, C together, then mega's A/B of main's kernels (moe_ep_H) against
#    moe_ep_ALL on MXFP8 / W4A8 / NVFP4, flash / pro, T = 8, 512, 8192; ~6 min), then `all52b`
#    (split's cells, mega's FP8-BLOCK / bf16). If the tests pass and ALL loses no cell: merge all
#    seven (git apply the patches), record the tables; the per-draft A/Bs below then tell the parts.
# 0. `dev/next_session.sh dispatch` (carry build-d50 instead, 55 MB with the tree; ~6 min, no device
#    build). Six drafts, each built on the CI machine with every instance ptxas-clean, NOT run:
#    D, dev/drafts/mega_dispatch_bulk_stores.patch (on 968d62a): the dispatch item encodes each
#    token's row once into shared memory and warp 0 stores its K copies by bulk copies
#    (cp.async.bulk.global.shared::cta), where it stored K copies from registers. Predicted: the
#    dispatch's ~128 us a block at flash 8192 (2.1 TB/s) -> ~80 us, mega fwd -1 % at 8192, 0 to -2 %
#    at decode.
#    E, dev/drafts/mega_claim_error_check.patch (on 968d62a): the item loop's error-word read
#    (thread 0, an L2 round trip while 383 threads wait at the barrier, every item; it lies between
#    one item's trace close and the next one's open, the ~1 % of the span no item covers) taken in
#    the tile's claim hook instead (MXFP8, W4A8, NVFP4). Predicted: -0.3-0.6 % at T = 8192.
#    F, dev/drafts/mega_release_without_sc_fence.patch (on 9cb1e88): the GEMM items' done counter
#    (release_pending, thread 0 = the 128-row tile's TMA issuer, inside the next tile) and the bf16
#    runs' (a consumer thread) raised by `red.release.gpu` alone, without the `__threadfence`
#    (fence.sc.gpu + CCTL.IVALL in SASS) before it: the release is cumulative over every thread's
#    writes ordered before it by the barrier (PTX memory model; grid sync's one-fence pattern).
#    Built together with E as EF (both: thread 0's stalls a GEMM item). Predicted: -0.2-1 % at
#    T = 8192 (MXFP8 / W4A8 / NVFP4 / FP8-BLOCK 128-row items; bf16's runs alike).
#    W, dev/drafts/rs_tile_widen_immediates.patch (on a914f61): the 128-row producer's E4M3 widening
#    with each pass's shared addresses as immediates. SASS (fiftieth session, this machine's nvcc):
#    mega's 128-row MXFP8 / W4A8 producer loop ran 487 instructions a stage against split's 422
#    for the same tile (ptxas recomputed every pass's addresses in mega: 35 more integer
#    instructions); with W 450 and 420 (FP8-BLOCK 409 -> 407, NVFP4 untouched; the rest of the
#    difference is the item hook's branch). Executed warp instructions a stage (8 consumer warps,
#    4 producer warps; consumer loops equal in both kernels): mega ~4 % over split for MXFP8 and
#    W4A8, ~1 % with W. Predicted: mega MXFP8 / W4A8 -0.5-2 % at T >= 512, if issue binds at all
#    (the SM issues ~35-45 % of its slots in this tile).
#    N, dev/drafts/rs_tile_nvfp4_byte_lookups.patch (on df525db's main): NVFP4's activation
#    widening decodes a word of 8 E2M1 by byte lookups (prmt: magnitudes by a lookup, signs by
#    its sign-replicating selectors, then each pair spread into its halves' high bytes; codec.h
#    moe_ep_e2m1_word_f16, 13 instructions a word) where it took ~33 a byte at a time. CPU:
#    test_codec checks it against the per-byte bits (every byte in every place); test_device_codec
#    gains the same check on the GPU (every 16-bit half). SASS: the NVFP4 producer loop 850 -> 625
#    instructions a stage at 128 rows, 567 -> 376 at 64, 434 -> 307 at 32, 279 -> 221 at 16. The
#    128-row producer was busy nearly all of NVFP4's K loop (lab stamps, fr_widen_rows' note).
#    Predicted: NVFP4 fwd -5-15 % at T >= 512 (split and mega), -3-8 % at decode (issue-bound
#    there). Built together with W and X as WNX (W and X touch the E4M3 paths only, N the NVFP4 one: their
#    cells tell them apart).
#    X, dev/drafts/rs_tile_e4m3_high_halves.patch (on main; W, N apply on it in either order; one
#    helper fr_e4m3x2 in rs_mults.cuh for every E4M3 pair): every E4M3 pair's cvt.rn.f16x2.e4m3x2 takes
#    its 16 bits from a PTX split of the word (mov.b32 {l, h}), so ptxas reads a high pair as the
#    register's upper half (F2FP ... R.H1) instead of shifting it first (SHF a pair). SASS (one
#    instance builds): the consumer K loop -32 instructions a stage in every E4M3-weight instance
#    (MXFP8 128 rows 339 -> 307, FP8-BLOCK 128 406 -> 374, MXFP8 16 354 -> 322, FP8-BLOCK 64
#    341 -> 309), the 128-row producer -32 (W4A8 / MXFP8 487 -> 455; with W ~418), ptxas-clean.
#    Predicted: MXFP8 / FP8-BLOCK -1-4 % at T >= 512 (the consumers are the tile's critical path
#    there), ~0-2 % at decode (E4M3 decode waits for its weights). Built with W and N as WNX.
#    build-d50/ (ignored, this machine only): moe_ep_H (main's kernels), moe_ep_D, moe_ep_EF,
#    moe_ep_WNX, test_tiles_WNX, test_device_codec_N, test_split_DEWFNX (all six together).
#    Elsewhere rebuild: apply the patch(es), `cmake --build build --target moe_ep_tool test_split
#    test_tiles test_device_codec`, gzip. Runs test_device_codec (N) and test_tiles (W + N + X),
#    test_split (split, mega) of all six at full size, then `scripts/ab.sh 2` H / D / EF / WNX of
#    mega, MXFP8 and W4A8, flash / pro, T = 8, 512, 8192 (~6 min). Then `dev/next_session.sh nvfp4`
#    (same carry, ~3 min): H / WNX on NVFP4, split and mega, T = 8, 64, 512, 8192; FP8-BLOCK (X)
#    with the second A/B below.
#    Merge each that passes and loses no cell (`git apply` the patch(es), commit, record the
#    table); FP8-BLOCK and bf16 cells in a second A/B call for what won; then the suite (after 0b):
#    if all six and C merge, `dev/next_session.sh suite51` (carry build-suite51, 45 MB: the 6 GPU
#    test binaries of main + the six + C, built on the CI machine, and their tool moe_ep_ALL.gz for
#    the tables; ~2 min, no device build); the six without C: `suite50` (carry build-suite50);
#    either runs them as ctest's gpu label does; else scripts/device.sh test (~400 s with the
#    device build). Order by value with ~27 min of device time after the cold start: dispatch,
#    chunks, nvfp4, the suite, chunks2.
# 0b. Draft C, dev/drafts/chunk_encoders_shortcuts.patch (fifty-first session, on 65ca5de; no device
#    then either): the chunk encoders (rows.cuh encode_chunk: GEMM1's SwiGLU + requant epilogue by
#    chunks, GEMM2's MXFP8 wire, the dispatch's quantization) with the same bytes in fewer
#    instructions: the block's amax and NaN / inf flags as one NaN-propagating max (one shuffle a
#    step, not two), the MX scale byte from amax's bits (no IEEE division; test_codec checks every
#    fp32 pattern against moe_ep_ue8m0_for_amax), E4M3 bytes two a cvt without the per-value NaN
#    test (the block's flag settles it), E2M1 codes by one rounding against a magic number
#    (moe_ep_e2m1_code_clamped, checked on every fp32 pattern: ~13 instructions a value where the
#    seven compares took ~35), NVFP4's scale decoded by the cvt and 1 / S once per epilogue, and the
#    register tiles' GEMM1 SwiGLU and the bf16 tiles' GEMM1 outputs from registers (wg_bf16_pair)
#    with ex2 / rcp .ftz (moe_ep_swiglu_ftz: the same bits, as test_device_codec checks on 2^24
#    gates); the serial epilogue's E2M1 blocks (NVFP4 GEMM1 outputs where its chunks spill, the FP4
#    wire's GEMM2 outputs but in the bf16 wgmma tiles) by the same shortcuts, a thread a 16-value
#    block (e2m1_block16: ~420 instructions a block where ~980 were; test_device_codec checks them
#    against the host codec on 2^16 blocks of wide magnitudes, NaN / inf / zero, two S; `chunks2`
#    A/Bs the FP4 wire). SASS of the 128-row chunk epilogue alone (one
#    instance, static, per lane iteration of 8 outputs): MXFP8 GEMM1 558 -> 370, FP8-BLOCK 578 -> 360,
#    NVFP4 ~833 -> ~440 (+ a cold fallback for 1 / S subnormal), MXFP8 wire 409 -> 279; dispatch
#    MXFP8 474 -> 345, FP8-BLOCK 498 -> 331. Full mega.cu build: every instance without spills or
#    C75xx (the .ftz SwiGLU in the bf16 wgmma tile's chunk epilogue, its FP8-BLOCK or bf16 branch,
#    had made ptxas serialise mega's 128-row bf16 wgmmas, C7515: kept out of the bf16 tiles' chunks;
#    their outputs from registers take it). Predicted: MXFP8 / W4A8 / NVFP4 -1-3 % at T >= 512 (the
#    128-row GEMM1 epilogue ~10-12 % of the tile, ~35-45 % fewer instructions), FP8-BLOCK -0.5-2 %,
#    bf16 0-1 % (its SwiGLU ~35 % of a GEMM1 tile's register epilogue); decode -0-1 % (the
#    dispatch's encode). Run
#    `dev/next_session.sh chunks` (carry build-d51: moe_ep_H = main's kernels, moe_ep_C, the tests
#    test_device_codec_C / test_tiles_C / test_split_C; ~6 min), then `chunks2` (FP8-BLOCK and bf16,
#    flash and pro, and the FP4 wire; ~7 min). C applies on main and with the six drafts above (any order checked). `chunks` first
#    runs the epilogue alone (dev/wgmma_lab/epilogue_rate.cu, now with the register tile's 128-row
#    QGLU form; seconds) built from main (H), C and C2 = C + dev/drafts/chunk_epilogue_two_in_flight.patch
#    (`#pragma unroll 2` on the 128-row chunk loop: two chunks in flight a lane; lab build 54-58
#    registers, no spills): predicted C 0.55-0.7 of H's cycles for MXFP8 / NVFP4 GEMM1 QGLU, ~0.7
#    FP8-BLOCK, 0.6-0.7 the MXFP8 wire; C2 ~1.0 of C (when the chunks came, unrolling two or four a
#    lane changed nothing: docs/benchmarks.md, "not latency"; C2 asks again of the shorter chunks). C2 does not build into the
#    library as it is: split's bf16 grouped_gemm_wgmma<8> spilled 164 bytes (every 128-row chunk
#    loop unrolled), and with the unroll only where FTZ (the register tiles' GEMM1) mega's
#    <128, FP8_RS, 128> spilled 40 bytes and <128, WGMMA, 1> 20. If the lab shows C2 > 10 % faster,
#    give fr_epilogue_after (the 128-row QGLU epilogue, __noinline__) its own unrolled loop and
#    find the registers.
# 1. `dev/next_session.sh` (no argument, ~4 min): diagnostics of mega's decode (kernel lab, item
#    traces, T = 1..8). Its binaries in build-carry were rebuilt in the fiftieth session from
#    main's kernels (a914f61): moe_ep_A.gz = build-d50's moe_ep_H.gz, moe_ep_T.gz = build-t50c's
#    trace build, rs_tile_paired (dev/wgmma_lab/rs_tile.cu, -DLAB_PAIRED); the lab's _noloads /
#    _nocmult variants are built on the device (the carry's 64 MiB).
# 2. Mega against split at T = 8192 (W4A8 flash 1.03, pro 1.02, MXFP8 flash 1.005 after the merge):
#    mega's items trace shows its GEMM items 2-3 % over split's stage and ~0.6 us from an item's
#    open to its tile (docs/benchmarks.md, forty-ninth session). build-t50c/moe_ep_T.gz (carry
#    build-t50c; a trace build of main's kernels (a914f61) + the trace's stall flag: MOE_EP_MEGA_TRACE=ON,
#    MOE_EP_PTXAS_GUARD=OFF) records for each GEMM item whether it took block_wait (its claim saw
#    no inputs): `TRACE_BIN=build-t50c/moe_ep_T dev/trace_items.sh w4a8:ds-v4-flash:8192
#    mxfp8:ds-v4-flash:8192` prints "claim to tile" for the items without a wait and those through
#    block_wait. If most of the 0.6 us is block_wait's round trip, the claim hook's dependency
#    check misses (look at gemm_dependency); if not, it is the loop's barriers and plan lookups.
# 3. The largest lead at T >= 512 left for every register-tile path, both backends: GEMM1's 128-row
#    epilogue (SwiGLU + encode, after the K loop, overlapping nothing) was 44 600 of a 196 000-cycle
#    MXFP8 tile before its chunks (fc94933, docs/benchmarks.md); not stamped since. Stamp it first:
#    `dev/next_session.sh stamps` (carry build-carry, ~3-4 min: dev/wgmma_lab/rs_tile.cu's default
#    set, built here from main and from main + W + N + X: the 128-row tiles' stage, producer waits and
#    epilogue in cycles, and what W / N / X do to them in isolation). If the epilogue is still
#    >= 10 % of the tile, the fix is structural (consumer warpgroups ping-ponging whole tiles, one's
#    epilogue beside the other's K loop; or C in quarters of 33 KB beside the 170 KB ring, so the
#    producer fills the next tile's ring during the epilogue), as design.md's twenty-third session
#    says; neither fits a blind draft.
# `dev/next_session.sh asan` (~1 min; carry build-asan-carry instead): test_split, test_nccl, test_tiles,
#   test_fuzz_gpu built with -fsanitize=address,undefined on the host code (cmake -S . -B build-asan
#   -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=address,undefined
#   -fno-omit-frame-pointer", the same in CMAKE_EXE_LINKER_FLAGS; gzip each test into
#   build-asan-carry/); LSan suppressions dev/lsan_cuda.supp. Clean at 279341e (forty-eighth session).
# Binaries in build-carry come from the CI machine's nvcc 13.0 (`cmake --build build --target
# moe_ep_tool`, tools/moe_ep gzipped); compare only binaries of one compiler.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
# The GPU tests carried in DIR, one after another as ctest's gpu label runs them: each with
# TIMEOUT s, then test_split with split and mega at full size (SPLIT_TIMEOUT s); EXTRA: more
# binaries for the first loop (suite50 / suite51: test_split with its default backends too).
gpu_tests() { # DIR TIMEOUT SPLIT_TIMEOUT [EXTRA...]
  local S=$1 tmo=$2 split_tmo=$3 b; shift 3
  for b in test_device_codec test_tile_wait test_tiles test_nccl test_fuzz_gpu "$@"; do
    carried $S/$b || exit 1
    timeout $tmo $S/$b > $O/s_$b.log 2>&1; echo "$b rc=$? $(tail -1 $O/s_$b.log)"
  done
  carried $S/test_split || exit 1
  MOE_EP_TEST_BACKENDS=split,mega timeout $split_tmo $S/test_split > $O/s_split_mega.log 2>&1
  echo "test_split (split, mega) rc=$? $(tail -1 $O/s_split_mega.log)"; grep -h "large offsets" $O/s_split*.log | head -2
  grep -h -B2 -A4 FAIL $O/s_*.log | head -40
}
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
if [ "${1:-}" = dispatch ]; then # carry build-d50: the drafts' tests, then mega's A/B
  for b in test_device_codec_N test_tiles_WNX test_split_DEWFNX moe_ep_H moe_ep_D moe_ep_EF moe_ep_WNX; do
    carried build-d50/$b || exit 1
  done
  for t in test_device_codec_N:60 test_tiles_WNX:150; do
    timeout ${t#*:} build-d50/${t%%:*} > $O/${t%%:*}.log 2>&1; rc=$?
    echo "${t%%:*} rc=$rc $(tail -1 $O/${t%%:*}.log)"
    [ $rc -eq 0 ] || { grep -h -B2 -A4 FAIL $O/${t%%:*}.log | head -40; exit 1; }
  done
  MOE_EP_TEST_BACKENDS=split,mega timeout 220 build-d50/test_split_DEWFNX > $O/DEWFNX_split.log 2>&1; rc=$?
  echo "test_split (D + E + F + W + N + X; split, mega) rc=$rc $(tail -1 $O/DEWFNX_split.log)"
  grep -h "large offsets" $O/DEWFNX_split.log | head -1
  [ $rc -eq 0 ] || { grep -h -B2 -A4 FAIL $O/DEWFNX_split.log | head -40; exit 1; }
  scripts/ab.sh 2 build-d50/moe_ep_H build-d50/moe_ep_D build-d50/moe_ep_EF build-d50/moe_ep_WNX -- \
    --paths mxfp8,w4a8 --backends mega --geometry ds-v4-flash,ds-v4-pro --tokens 8,512,8192 --iters 10 2>&1 | tail -16
  echo "dispatch $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = chunks ]; then # carry build-d51: draft C's tests, then its A/B (MX paths and NVFP4)
  for b in test_device_codec_C test_tiles_C test_split_C moe_ep_H moe_ep_C; do carried build-d51/$b || exit 1; done
  for t in test_device_codec_C:90 test_tiles_C:150; do
    timeout ${t#*:} build-d51/${t%%:*} > $O/${t%%:*}.log 2>&1; rc=$?
    echo "${t%%:*} rc=$rc $(tail -1 $O/${t%%:*}.log)"; grep -h "^  " $O/${t%%:*}.log | head -6
    [ $rc -eq 0 ] || { grep -h -B2 -A4 FAIL $O/${t%%:*}.log | head -40; exit 1; }
  done
  for v in H C C2; do # the epilogue alone (dev/wgmma_lab/epilogue_rate.cu): cycles per 128-row tile
    chmod +x build-d51/epilogue_rate_$v; timeout 60 build-d51/epilogue_rate_$v > $O/epi_$v.txt 2>&1 || echo "epilogue_rate_$v rc=$?"
  done
  paste $O/epi_H.txt $O/epi_C.txt $O/epi_C2.txt | awk -F'\t' '/cycles per tile/ {
    h = $1; sub(/ cycles.*/, "", h); sub(/.* /, "", h); c = $2; sub(/ cycles.*/, "", c); sub(/.* /, "", c);
    c2 = $3; sub(/ cycles.*/, "", c2); sub(/.* /, "", c2); name = $1; sub(/ +[0-9.]+ cycles.*/, "", name);
    printf "%-46s H %7s  C %7s (%.3f)  C2 %7s (%.3f)\n", name, h, c, c / h, c2, c2 / h }'
  MOE_EP_TEST_BACKENDS=split,mega timeout 220 build-d51/test_split_C > $O/C_split.log 2>&1; rc=$?
  echo "test_split (C; split, mega) rc=$rc $(tail -1 $O/C_split.log)"
  [ $rc -eq 0 ] || { grep -h -B2 -A4 FAIL $O/C_split.log | head -40; exit 1; }
  scripts/ab.sh 2 build-d51/moe_ep_H build-d51/moe_ep_C -- --paths mxfp8,w4a8,nvfp4 --backends split,mega \
    --geometry ds-v4-flash --tokens 8,512,8192 --iters 10 2>&1 | tail -20
  echo "chunks $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = chunks2 ]; then # carry build-d51 (after `chunks` passed): C on FP8-BLOCK, bf16, the FP4 wire
  for b in moe_ep_H moe_ep_C; do carried build-d51/$b || exit 1; done
  scripts/ab.sh 2 build-d51/moe_ep_H build-d51/moe_ep_C -- --paths fp8_block,bf16 --backends split,mega \
    --geometry ds-v4-flash,ds-v4-pro --tokens 8,512,8192 --iters 10 2>&1 | tail -28
  scripts/ab.sh 2 build-d51/moe_ep_H build-d51/moe_ep_C -- --paths mxfp8,nvfp4 --backends split,mega --wire fp4 \
    --geometry ds-v4-flash --tokens 512,8192 --iters 10 2>&1 | tail -12 # the serial epilogue's E2M1 blocks
  echo "chunks2 $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = suite50 ] || [ "${1:-}" = suite51 ]; then # carry build-$1: the GPU tests as ctest's gpu label
  # runs them; build-suite50: main + D + E + F + W + N + X; build-suite51: the same + C
  gpu_tests build-$1 300 400 test_split
  echo "$1 $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = all52 ] || [ "${1:-}" = all52b ]; then # carry build-suite51: all seven drafts at once (device time scarce)
  # all52: the GPU tests of main + D + E + F + W + N + X + C (as suite51), then mega's A/B of main (H) against
  # all seven (ALL) on the register-tile paths; all52b: split's cells and mega's FP8-BLOCK / bf16 (~6 min each)
  S=build-suite51
  for b in moe_ep_H moe_ep_ALL; do carried $S/$b || exit 1; done
  if [ "$1" = all52 ]; then
    gpu_tests $S 200 240 # test_split with split and mega only: the device time
    echo "tests $(( $(date +%s) - t0 )) s"
    scripts/ab.sh 2 $S/moe_ep_H $S/moe_ep_ALL -- --paths mxfp8,w4a8,nvfp4 --backends mega \
      --geometry ds-v4-flash,ds-v4-pro --tokens 8,512,8192 --iters 10 2>&1 | tail -20
  else
    scripts/ab.sh 2 $S/moe_ep_H $S/moe_ep_ALL -- --paths mxfp8,w4a8,nvfp4 --backends split \
      --geometry ds-v4-flash,ds-v4-pro --tokens 8,512,8192 --iters 10 2>&1 | tail -20
    scripts/ab.sh 2 $S/moe_ep_H $S/moe_ep_ALL -- --paths fp8_block,bf16 --backends mega \
      --geometry ds-v4-flash,ds-v4-pro --tokens 8,512,8192 --iters 10 2>&1 | tail -16
  fi
  echo "$1 $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = stamps ]; then # carry build-carry: the kernel lab's stamps of the 128-row tiles, main and main + W + N + X
  chmod +x build-carry/rs_tile_stamps build-carry/rs_tile_stamps_WNX
  for v in rs_tile_stamps rs_tile_stamps_WNX; do
    timeout 200 build-carry/$v > $O/$v.txt 2>&1; echo "== $v rc=$?"; grep -v "^ *$" $O/$v.txt | tail -24 | cut -c1-200
  done
  echo "stamps $(( $(date +%s) - t0 )) s"
  exit 0
fi
if [ "${1:-}" = nvfp4 ]; then # carry build-d50 (after `dispatch` passed its tests): N's cells, split and mega
  for b in moe_ep_H moe_ep_WNX; do carried build-d50/$b || exit 1; done
  scripts/ab.sh 2 build-d50/moe_ep_H build-d50/moe_ep_WNX -- --paths nvfp4 --backends split,mega \
    --geometry ds-v4-flash,ds-v4-pro --tokens 8,64,512,8192 --iters 10 2>&1 | tail -20
  echo "nvfp4 $(( $(date +%s) - t0 )) s"
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
