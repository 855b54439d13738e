/* The register tile (FP8-BLOCK, MXFP8, W4A8 and NVFP4), for the split backend's
 * grouped GEMM (wgmma_gemm.cu) and the mega kernel: one 128 x 256 output tile
 * (128 activation rows, 256 weight rows) of one expert, 384 threads. E4M3 ->
 * fp16 is exact; fp16 HGMMA sums one 128-wide K block (part), promoted with
 * acc = fmaf(part, s, acc), s = s_x * s_w of the block:
 *
 *   A (registers) = weights: each consumer thread loads its fragment bytes
 *     from the TMA-loaded raw E4M3 rows (stored so that a lane's bytes of a
 *     k16 step are one 32-bit word: fr_load_word) and widens them in
 *     registers (cvt.rn.f16x2.e4m3x2), so the weights never take an fp16
 *     round trip through shared memory;
 *   B (shared memory) = activations: the producer warpgroup widens the 128
 *     raw rows to fp16 in the wgmma layout; or, in the A16 form (template
 *     A16: FR_A16_OF's 128- and 144-row instances), they come already
 *     folded into fp16 (fold_rows.cuh, once per m tile instead of once per
 *     m tile and N tile) by TMA (fr_produce_a16).
 *
 * So the accumulators hold weight rows x activation rows; the epilogue
 * stores them transposed into the C tile and runs the shared epilogue.
 *
 * Why 128 activation rows and m64n128k16: a weight fragment costs the same
 * loads and conversions whatever N it multiplies (dev/wgmma_lab/rs_block.cu
 * on the H200, this consumer loop alone: n64 at 74 % of the fp16 rate with
 * the fragment words, n128 at 85 %, the same loop without any fragment work
 * 83 % / 87 %). n256 would need 2 x 128 accumulators per thread.
 *
 * K steps of 128 (one scale block): raw ring of FR_RAW_OF(FMT, BMA) stages (A 128 x
 * 128 B, B 256 x 128 B, both 128-byte swizzled by TMA; W4A8's B 256 x 64 B,
 * 64-byte swizzled; NVFP4's A 128 x 64 B too; MXFP8 at 128 rows: A in a raw ring of
 * its own, FR_ARAW_OF, freed once widened), fp16 ring of FR_CVT_OF(FMT, BMA) stages
 * (128 rows x 128 fp16 as two 64-wide swizzle atoms). Warpgroup 0 (the
 * producer, FR_PRODUCER_REGS registers): at 128 rows all 128 threads widen a
 * stage of A and stage its scales, then thread 0 issues the TMA of a later
 * stage (in that order: the TMA waits for the consumers to free a raw stage,
 * and must not hold up the widening); at 64 rows or fewer warp 0 issues the
 * TMAs alone and warps 1-3 widen (FR_TMA_WARP_OF). Warpgroups 1 and 2 (consumers,
 * FR_CONSUMER_REGS registers) own weight rows [128 h, 128 h + 128) (h = 0, 1:
 * the gate and up halves of a GEMM1 tile) as two m64 blocks, one after the
 * other per stage: 8 x wgmma m64n128k16 (RS) into part (64 fp32), wait, then
 * the promotion into acc[block] (2 x 64 fp32). Each block waits for all its
 * wgmmas before promoting: reading an accumulator while any wgmma of the
 * warpgroup runs makes ptxas serialise them all (C7514); the other consumer
 * keeps the tensor cores busy meanwhile.
 *
 * MXFP8 (RS_MXFP8) runs the same loop without promotions: its UE8M0 scales
 * are powers of two, so each 32-block's scale 2^b is split into its row's
 * largest over all of K, 2^ref, times 2^-(ref - b), and the second factor is
 * folded into the fp16 operand (an exponent shift: exact while ref - b <= 15,
 * as an E4M3 value's last bit is >= 2^-9 and fp16 reaches 2^-24; beyond that
 * only bits below 2^-24 of the row's largest block are rounded away:
 * dev/mx_fold_error.c). One fp32 sum runs over K (no partial sum), times
 * 2^ref_x * 2^ref_w per activation row and weight row after the K loop. A
 * NaN scale (0xFF) is the largest byte, so ref gives NaN and the row's sums
 * become NaN, as they do on the mma.sync tiles. These
 * sums differ in rounding from the mma.sync tiles' per-32 promotion, so MXFP8
 * layers run this tile at every T (moe_ep_single_tile).
 *
 * W4A8 (RS_W4A8): MXFP8 activations as above; MXFP4 weights (E2M1 + UE8M0)
 * folded the same way. No instruction widens E2M1 on sm_90: a nibble
 * s e1 e0 m placed as fp16 bits (s << 15) | (e1 e0 m << 9) is its value times
 * 2^-14 (normal and subnormal alike), so the multiplier carries 2^14 too
 * (exact while ref - b <= 23: an E2M1 value's last bit is 0.5). The layer
 * stores the weight words with their bits spread (codec.h:
 * moe_ep_e2m1_word_spread), so that fr_e2m1_pairs makes these bits with a
 * shift and a mask.
 *
 * FP8-BLOCK with config.fp8_fast_accum (RS_FP8_QG): the same tile, raw ring,
 * scales and promotion, but each m64 block's stage is 4 x wgmma m64nNk32 e4m3
 * with both operands in shared memory (QGMMA: FP8 sums at the tensor cores'
 * reduced precision, opt-in): no widening, no fragment layout (the weights
 * stay natural), 4 raw stages. It replaced a 64 x 256 QGMMA tile run at
 * every T (64 activation rows: each weight stage read twice as often at large
 * T), 12-17 % faster at T >= 2048 (docs/benchmarks.md).
 *
 * NVFP4 (RS_NVFP4): E2M1 x its E4M3 block scale is exact in fp16, so both
 * operands carry their per-16 scales, the wgmmas sum all of K into acc with
 * no promotion (fr_consume_nv: both blocks interleaved), and the epilogue
 * multiplies by 1 / (S_x S_w). The scales are staged times 2^7 (FR_F16_2P7),
 * which also undoes moe_ep_e2m1x2_f16_bits' 2^-14 but for 2^-7 an operand, exactly. The
 * outputs go through epilogue_chunks (gemm_common.cuh) where the caller has
 * the registers. */
#ifndef MOE_EP_FP8_RS_TILE_CUH
#define MOE_EP_FP8_RS_TILE_CUH

#include "kernels/sm90/rs_mults.cuh"
#include "kernels/sm90/wgmma_tile.cuh" /* gemm_common, hopper, tma_map, wg_consumer_barrier */

#include <cuda_fp16.h>

/* Timing hooks for the kernel lab (dev/wgmma_lab/rs_tile.cu defines
 * FR_TRACE(point) to stamp clock64 at the numbered points); nothing here. */
#ifndef FR_TRACE
#define FR_TRACE(point) ((void)0)
#endif

#define FR_BM 128  /* activation rows (the wgmma N): 128, or 64, 32, 16 for decode-sized batches */
#define FR_BN 256  /* weight rows (output columns) */
#define FR_BK 128  /* K per stage: one FP8-BLOCK scale block */
/* k16 steps whose A fragments are in registers at once (FR_RING - 1
 * wgmmas in flight while the next fragment is widened): 4 in FP8-BLOCK's
 * 64-row instance (lab, LAB_MID: its GEMM1 tile 2.8 % faster, GEMM2 1.4 %;
 * MXFP8, W4A8 within 0.5 %; the 16- and 32-row instances not measured),
 * else 2 (the 128-row instances have no registers for more). */
#ifndef FR_RING_OF /* the kernel lab may try others */
#define FR_RING_OF(FMT, BMA) ((FMT) == RS_FP8_BLOCK && (BMA) == 64 ? 4 : 2)
#endif
#define FR_NV_RING 4 /* NVFP4 (no promotion, both blocks interleaved): the same, deeper */
/* Registers per thread: the launch's (384 threads, one block per SM: 65536 /
 * 384 rounded down to 8; the kernels' __launch_bounds__ give it), moved from
 * the producer warpgroup to the consumers for the tile (setmaxnreg):
 * 2 x CONSUMER + PRODUCER = 3 x LAUNCH. At 128 rows FP8-BLOCK 56 / 224 (its
 * mega kernel spills with 40 / 232), MXFP8 88 / 208, W4A8 and NVFP4 104 / 200. */
#define FR_LAUNCH_REGS 168
/* Paired instances: the register tile of at most FR_PAIR_MAX_ROWS activation
 * rows (decode batches) compiled for two blocks per SM (__launch_bounds__(384,
 * 2): 80 registers, no setmaxnreg moves; template CTAS), so that each
 * scheduler has 6 warps, not 3: at decode the tile is bound by its warps'
 * instruction latencies, not by memory (docs/benchmarks.md, "Decode on the
 * register tile"). Their ring (fr_smem<FMT, BMA, 2>): FR_RAW_PAIRED_OF raw and 2 fp16 stages
 * a block (72-104 KB, two blocks and mega's tables in 228 KB), weight words loaded at first use
 * (FR_AHEAD). MXFP8's 32-row instance, which spilled in its K loop at 80
 * registers while it held a partial sum, pairs since its one sum over K (no
 * promotion). Split pairs only its 16-row instances (wgmma_gemm.cu:
 * its 32-row ones spilled at 80 registers and keep their ring, fr_smem's CT
 * 1). 0: none. */
#ifndef FR_PAIR_MAX_ROWS
#define FR_PAIR_MAX_ROWS 32
#endif
#define FR_PAIRED(FMT, BMA) ((BMA) <= FR_PAIR_MAX_ROWS)
#define FR_CTAS_OF(FMT, BMA) (FR_PAIRED(FMT, BMA) ? 2 : 1)
/* MX and NVFP4 hold no partial sum (one sum over K, no promotion); MXFP8 at 128 rows 88 / 208
 * (104 / 200 and 72 / 216 spilled 8 bytes in its mega kernel, 40 / 232 too with the row references). */
/* The 144-row tiles (NVFP4, MXFP8, W4A8; A16 only, their producers only stream: mega's above
 * 128 rows an expert (mega.c's rs_wide) and the kernel lab's) 56 / 224: their 144 accumulators. */
#define FR_PRODUCER_REGS(FMT, BMA) ((BMA) == 144 ? 56 : (BMA) <= 64 || FR_NV(FMT) || (FMT) == RS_W4A8 ? 104 : (FMT) == RS_MXFP8 ? 88 : 56)
#define FR_CONSUMER_REGS(FMT, BMA) ((BMA) == 144 ? 224 : (BMA) <= 64 || FR_NV(FMT) || (FMT) == RS_W4A8 ? 200 : (FMT) == RS_MXFP8 ? 208 : 224)

/* RS_FP8_QG: FP8-BLOCK with config.fp8_fast_accum, the same tile with both
 * operands E4M3 in shared memory (SS QGMMA, no widening; see fr_block). */
enum { RS_FP8_BLOCK = 0, RS_MXFP8 = 1, RS_W4A8 = 2, RS_NVFP4 = 3, RS_FP8_QG = 4 };

/* MX scales (MXFP8, W4A8: UE8M0 per 32, folded per 128-wide K block); E2M1
 * weights (W4A8, NVFP4); NVFP4 (E4M3 scales per 16 folded exactly, the
 * global scales after the sum, no promotion). */
#define FR_MX(FMT) ((FMT) == RS_MXFP8 || (FMT) == RS_W4A8)
#define FR_E2M1(FMT) ((FMT) == RS_W4A8 || (FMT) == RS_NVFP4)
#define FR_NV(FMT) ((FMT) == RS_NVFP4)
#define FR_QG(FMT) ((FMT) == RS_FP8_QG)
/* FP8-BLOCK's scales (s_x per activation row, s_w per 128 x 128 weight block), either tile. */
#define FR_FP8B(FMT) ((FMT) == RS_FP8_BLOCK || (FMT) == RS_FP8_QG)
/* Bytes of one raw activation row per stage: E4M3 128, NVFP4's E2M1 64 (64-byte swizzle). */
#define FR_AROW(FMT) (FR_NV(FMT) ? 64 : 128)
/* Bytes of one raw weight row per stage (128 K): E4M3 128 (128-byte
 * swizzle), E2M1 64 (64-byte swizzle: 16-byte chunk c of row r at
 * c ^ ((r >> 1) & 3)). */
#define FR_WROW(FMT) (FR_E2M1(FMT) ? 64 : 128)

/* The register moves assume the kernel runs at FR_LAUNCH_REGS (a consumer's
 * setmaxnreg.inc would wait forever for registers the pool does not hold):
 * launchers check it. */
static inline moe_ep_status_t fr_check_regs(const void *kernel, const char *name)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    if (fa.numRegs != FR_LAUNCH_REGS)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: %d registers per thread, the register tile needs %d", name,
                           fa.numRegs, FR_LAUNCH_REGS);
    return MOE_EP_SUCCESS;
}

/* Raw stages in flight: as many as fit beside the fp16 stages and the
 * scales (227 KB per block, less the mega kernel's share), at most 4. A raw
 * stage is held from its TMA until the consumers have read its weights, so
 * its load latency must hide behind the other stages' compute. At 128 rows
 * E4M3 operands (48 KB a stage) fit 2 beside 3 fp16 stages (FP8-BLOCK; MXFP8
 * 3 weight stages beside its own activation ring, FR_ARAW_OF); NVFP4 4; W4A8 3
 * (32 KB a stage; 3 spilled its mega kernel until 6e3d03d; against 2: -5-10 %
 * at T = 512 on both backends, mega -1-3 % at 8192, split's GEMM stage +2-3 %
 * there, docs/benchmarks.md). 64 rows or fewer: E4M3 3, E2M1 4. The QGMMA
 * instances (no fp16 stages) 4 at every size (5 or 6 were 3-5 % slower). */
#ifndef FR_RAW_OF /* the kernel lab (dev/wgmma_lab/rs_tile.cu) may try others */
#define FR_RAW_OF(FMT, BMA) (FR_QG(FMT) || FR_NV(FMT) ? 4 : (BMA) <= 64 ? (FR_E2M1(FMT) ? 4 : 3) : FR_E2M1(FMT) || FR_ARAW_OF(FMT, BMA) ? 3 : 2)
#endif
/* Raw activation stages in a ring of their own (0: none, the activations
 * share the weights' raw stages): a stage is freed by the widening threads
 * once widened, not by the consumers once multiplied, so the raw ring above
 * holds only what the consumers read (weights, their records), and at the
 * same shared memory one more weight stage is in flight. MXFP8 at 128 rows:
 * 2 activation stages (32 KB) and 3 weight stages (105 KB) where the shared
 * ring held 2 of both (98 KB): with one weight stage landing while the
 * consumers read another, the tile streamed its weights at ~18 KB/us a
 * block (2.4 TB/s on 132 SMs) where an expert's rows fit one tile (T = 512;
 * fifty-third session). Measured (H100, fifty-fifth session): MXFP8 mega
 * fwd -10-13 % at T = 512, -1-5 % at 8192; split -6-8 % at 512, but +1-2 %
 * at 8192 (its GEMM stage +1-3 %). The same for W4A8 (3 activation, 4 weight
 * stages) lost 0-2 % everywhere, and FP8-BLOCK (2 + 3, its fp16 stages cut
 * to 2 to fit) 5 % at T = 8192: neither taken (docs/benchmarks.md; the
 * patches in dev/drafts/). At least the producer's lead (RAW - 1 stages
 * issued ahead of the widening: fr_produce), as iteration kt reuses the slot
 * of the stage it has just widened. */
#ifndef FR_ARAW_OF
#define FR_ARAW_OF(FMT, BMA) ((FMT) == RS_MXFP8 && (BMA) == 128 ? 2 : 0)
#endif
/* Raw stages of the paired instances (two blocks per SM, FR_PAIRED): E2M1
 * weights (W4A8, NVFP4) 4 at 16 rows, 3 at 32 (their raw stages are half
 * E4M3's: 57-120 KB a block, two blocks and mega's tables in 228 KB); E4M3 2
 * (3 would not fit two blocks). With 2, Nsight Compute found the paired
 * W4A8 tile's widening warps waiting on landing stages in 12 % of its samples
 * and its consumers in 4 %; 4 / 3 took mega's W4A8 / NVFP4 forward -5-9 % at
 * T = 8 (docs/benchmarks.md, forty-fourth session). */
#ifndef FR_RAW_PAIRED_OF
#define FR_RAW_PAIRED_OF(FMT, BMA) (FR_E2M1(FMT) ? ((BMA) <= 16 ? 4 : 3) : 2)
#endif
/* The producer's warp 0 only issues the TMAs while the tile has 64 rows or
 * fewer; its warps 1-3 widen. With all 128 threads widening, thread 0's wait
 * for a free raw stage (before its TMA) held up its arrival on the next
 * widened stage, so a stage was published only once the consumers had
 * finished the one before the current (lab stamps at decode: consumers
 * waited 23 % of the K loop for fp16 stages whose raw bytes had landed). At
 * 128 rows the widening is the producer's bound and keeps all 128 threads. */
#ifndef FR_TMA_WARP_OF
#define FR_TMA_WARP_OF(BMA) ((BMA) <= 64)
#endif
#define FR_WIDEN_THREADS(BMA) (FR_TMA_WARP_OF(BMA) ? 96 : 128)
/* fp16 activation stages (BMA x 128 fp16: 32 KB at 128 rows): 3, so that the
 * producer can widen a stage ahead of a slow one (2 made producer and
 * consumers wait on each other, Nsight Compute at 4721f3b); 2 for MXFP8 and
 * W4A8 at 128 rows, whose mega kernels spill with 3; the QGMMA instances
 * stage only scales there, 4 (one per raw stage). */
#ifndef FR_CVT_OF
#define FR_CVT_OF(FMT, BMA) (FR_QG(FMT) ? 4 : FR_MX(FMT) && (BMA) == 128 ? 2 : 3)
#endif
/* Scale blocks per stage kept for the multipliers: MXFP8 and W4A8 4 k32
 * blocks, NVFP4 8 k16 blocks (16-bit), FP8-BLOCK none (1 to keep the arrays). */
#define FR_MULT_BLOCKS(FMT) (FR_FP8B(FMT) ? 1 : 4)
/* Words of a raw stage's weight record (rs_mults.cuh; FP8-BLOCK none: 4 to keep the array) and bytes between
 * the raw stages' records (MX: k32 blocks FR_BN * FR_WREC_MULT apart, 2^ref_w 4 blocks on; NVFP4: k16 blocks FR_BN * 2 apart). */
#define FR_WREC_WORDS(FMT) (FR_MX(FMT) || FR_NV(FMT) ? FR_REC_WORDS(FR_NV(FMT), FR_E2M1(FMT)) : 4)
/* Bytes of one row's multiplier in a record: f16 (MXFP8, NVFP4) or f16x2 (W4A8). */
#define FR_WREC_MULT(FMT) ((FMT) == RS_W4A8 ? 4 : 2)
#define FR_WREC_STAGE(FMT) (FR_WREC_WORDS(FMT) * 4)
/* Bytes a raw stage's bulk copy of the record brings (FP8-BLOCK: none; its mbarrier must not expect any). */
#define FR_WREC_BYTES(FMT) (FR_MX(FMT) || FR_NV(FMT) ? FR_WREC_STAGE(FMT) : 0)
/* Shared memory a block may have (sm_90: 227 KB), less what the tile leaves to
 * a persistent kernel around it (mega: its counters and tables, 4 KB + 8 B per expert). */
#ifndef FR_SMEM_LIMIT
#define FR_SMEM_LIMIT (227 * 1024 - 8 * 1024 - 16) /* 16: hopper.cuh's static tile_wait_failed */
#endif

/* Bytes of a raw activation stage: BMA rows, or for the 144-row tile (A16 only: none used) 1024,
 * which keeps the raw weight stages after them 1024-aligned whatever RA (256 left MXFP8's 512 and
 * W4A8's 768 bytes off: the TMA swizzles by address, the consumers by row, fr_load_word; the
 * sixty-seventh session's wrong mega results). */
#ifndef FR_RA_STAGE_BYTES /* the kernel lab may shrink it where every instance runs the A16 form (lab_deep_rings.h) */
#define FR_RA_STAGE_BYTES(FMT, BMA) ((BMA) == 144 ? 1024 : (BMA) * FR_AROW(FMT))
#endif

/* The A16 form's own layout (fr_smem's A16): it never reads the raw activation stages, so in the 128-row
 * MX tiles their shared memory holds more fp16 stages, MXFP8 3 and W4A8 4 (2 in the widening form, whose
 * mega kernels spilled with 3). Their consumers waited for fp16 stages a third of the K loop at T = 512's
 * shape. The kernel lab (seventieth session, dev/wgmma_lab/lab_deep_rings.h): MXFP8 GEMM1 / GEMM2 -8 /
 * -6.5 % a tile at 96 rows an expert, W4A8 GEMM1 -7 %, MXFP8 GEMM1 at 1536 rows -2.3 % (NVFP4 and
 * FP8-BLOCK flat: not taken); mega fwd at T = 512 W4A8 -3 / -6 % (flash / pro), MXFP8 -4 / -4.6 % with
 * mega folding MXFP8 at every row count (moe_ep_a16_rows). */
#define FR_A16_DEEP_OF(FMT, BMA, CT) (FR_MX(FMT) && (BMA) == 128 && (CT) == 1)
#define FR_CVT_A16_OF(FMT) ((FMT) == RS_W4A8 ? 4 : 3)

/* CT: blocks per SM the kernel runs (FR_CTAS_OF; 2: the paired ring, FR_RAW_PAIRED_OF raw and 2 fp16 stages).
 * A16: the layout of the tile's A16 form (fr_produce_a16), which differs where FR_A16_DEEP_OF. */
template <int FMT, int BMA, int CT = FR_CTAS_OF(FMT, BMA), bool A16 = false>
struct fr_smem {
    static constexpr bool DEEP = A16 && FR_A16_DEEP_OF(FMT, BMA, CT);
    /* (QGMMA's fp16 ring is a scale ring of 8-half stages, kept at 4: with 2 its raw
     * stages would start 64 bytes in, misaligned for their TMA) */
    static constexpr int RAW = CT == 2 ? FR_RAW_PAIRED_OF(FMT, BMA) : FR_RAW_OF(FMT, BMA),
                         CVT = CT == 2 && !FR_QG(FMT) ? 2 : DEEP ? FR_CVT_A16_OF(FMT) : FR_CVT_OF(FMT, BMA);
    static constexpr int ARAW = CT == 2 ? 0 : FR_ARAW_OF(FMT, BMA); /* the activations' own raw stages (0: in RAW's) */
    static constexpr int RA = ARAW ? ARAW : RAW;
    static constexpr int RA_BYTES = DEEP ? 1024 : FR_RA_STAGE_BYTES(FMT, BMA); /* DEEP: unused, kept 1024 for rb's alignment */
    static constexpr int A_HALVES = FR_QG(FMT) ? 8 : BMA * 64; /* QG: no fp16 stages (8: to keep the array) */
    __half a[CVT][2][A_HALVES];         /* fp16 activations: 2 swizzle atoms of 64 K, BMA * 256 B per stage */
    uint8_t ra[RA][RA_BYTES];           /* raw activations, BMA rows per stage: E4M3 128 B (128-byte
                                              swizzle), NVFP4's E2M1 64 B (64-byte swizzle) */
    uint8_t rb[RAW][FR_BN * FR_WROW(FMT)]; /* raw weights, 256 rows per stage: E4M3 128 B, E2M1 64 B */
    static constexpr int MREC = FR_WREC_WORDS(FMT); /* words of a stage's weight multipliers */
    uint32_t wrec[RAW][MREC];      /* MX, NVFP4: the weights' record of the stage (rs_mults.cuh; MX: the
                                      k32 multipliers [4][FR_BN] (MXFP8 f16, W4A8 f16x2), 2^ref_w [FR_BN]; NVFP4:
                                      uint16_t [8][FR_BN], the scales per k16 block), by bulk copy */
    static constexpr int RINGS = CVT * A_HALVES * 4 + RA * RA_BYTES + RAW * (FR_BN * FR_WROW(FMT) + MREC * 4);
    static constexpr int C_BYTES = BMA * (FR_BN + 4) * 4; /* the epilogue's fp32 C tile reuses the rings */
    uint8_t pad[(C_BYTES > RINGS ? C_BYTES - RINGS : 0) + 16];
    float sxw[CVT][2][BMA];        /* FP8-BLOCK: the stage's s_x * s_w per consumer (0 past the valid
                                         rows); MXFP8: [cs][0] = 2^ref_x per activation row */
    uint32_t am[CVT][FR_MULT_BLOCKS(FMT)][BMA]; /* MXFP8: 2^-(ref_x - b) per k32 block and activation row;
                                         NVFP4: as uint16_t [8][BMA], the E4M3 scale per k16 block as f16 */
    uint64_t raw_full[RAW], raw_empty[RAW], cvt_full[CVT], cvt_empty[CVT];
    uint64_t act_full[ARAW ? ARAW : 1], act_empty[ARAW ? ARAW : 1]; /* ARAW: the activations' own ring */
    int64_t row0;                     /* the tile's place, for the epilogue: kept here, not in */
    int rows_valid, n0;               /* registers across the K loop (the consumers need them all) */
    float c_scale;                    /* NVFP4: 1 / (S_x S_w), applied to the sums; else 1 */
    int claimed;                      /* the item claimed by thread 0 (g.claim_counter), else unset */
};

/* Both forms' layouts: a kernel may run either (MXFP8's 128-row instances, moe_ep_a16_rows) */
#define FR_SMEM_BYTES_CT(FMT, BMA, CT) \
    ((sizeof(fr_smem<FMT, BMA, CT, true>) > sizeof(fr_smem<FMT, BMA, CT>) ? sizeof(fr_smem<FMT, BMA, CT, true>) \
                                                                          : sizeof(fr_smem<FMT, BMA, CT>)) + 1024)
#define FR_SMEM_BYTES(FMT, BMA) FR_SMEM_BYTES_CT(FMT, BMA, FR_CTAS_OF(FMT, BMA))
/* d[32] (+)= A (64 x 16 f16, registers a[4]) . B^T (64 x 16 f16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n64k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* d[64] (+)= A (64 x 16 f16, registers a[4]) . B^T (128 x 16 f16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n128k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* d[16] (+)= A (64 x 16 f16, registers a[4]) . B^T (32 x 16 f16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n32k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* d[8] (+)= A (64 x 16 f16, registers a[4]) . B^T (16 x 16 f16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n16k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* The 48 accumulator registers of an m64n96 wgmma (PTX operands %0..%47). */
#define FR_D48_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}"
#define FR_D48(d) WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24), WGMMA_D8(d, 32), WGMMA_D8(d, 40)

/* d[48] (+)= A (64 x 16 f16, registers a[4]) . B^T (96 x 16 f16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n96k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 " FR_D48_REGS ", {%48,%49,%50,%51}, %52, p, 1, 1, 0;\n}\n"
                 : FR_D48(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* d[48] (+)= A (64 x 32 e4m3, descriptor da) . B^T (96 x 32 e4m3, descriptor db), fp32
 * accumulation at the QGMMA's precision; scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n96k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 " FR_D48_REGS ", %48, %49, p, 1, 1;\n}\n"
                 : FR_D48(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* d[72] (+)= A (64 x 16 f16, registers a[4]) . B^T (144 x 16 f16, descriptor db): NVFP4's 144-row
 * tile (FR_PRODUCER_REGS), which takes experts of 257-288 and 385-432 rows whole. */
__device__ __forceinline__ void wgmma_m64n144k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %77, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n144k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,"
                 "%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
                 "%70,%71}, {%72,%73,%74,%75}, %76, p, 1, 1, 0;\n}\n"
                 : WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24), WGMMA_D8(d, 32), WGMMA_D8(d, 40),
                   WGMMA_D8(d, 48), WGMMA_D8(d, 56), WGMMA_D8(d, 64)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* The tile's wgmma: N = NW activation rows (the instance's BMA, or fewer:
 * fr_consume). */
template <int NW>
__device__ __forceinline__ void fr_wgmma(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    static_assert(NW == 144 || NW == 128 || NW == 96 || NW == 64 || NW == 32 || NW == 16, "the register tile's wgmma N");
    if constexpr (NW == 144) wgmma_m64n144k16_f16_rs(d, a, db, scale_d);
    else if constexpr (NW == 128) wgmma_m64n128k16_f16_rs(d, a, db, scale_d);
    else if constexpr (NW == 96) wgmma_m64n96k16_f16_rs(d, a, db, scale_d);
    else if constexpr (NW == 64) wgmma_m64n64k16_f16_rs(d, a, db, scale_d);
    else if constexpr (NW == 32) wgmma_m64n32k16_f16_rs(d, a, db, scale_d);
    else wgmma_m64n16k16_f16_rs(d, a, db, scale_d);
}


/* d[32] (+)= A (64 x 32 e4m3, descriptor da) . B^T (64 x 32 e4m3, descriptor db), fp32
 * accumulation at the QGMMA's precision; scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
                 : WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* d[16] (+)= A (64 x 32 e4m3, descriptor da) . B^T (32 x 32 e4m3, descriptor db), fp32
 * accumulation at the QGMMA's precision; scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
                 : WGMMA_D8(d, 0), WGMMA_D8(d, 8)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* d[8] (+)= A (64 x 32 e4m3, descriptor da) . B^T (16 x 32 e4m3, descriptor db), fp32
 * accumulation at the QGMMA's precision; scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n16k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
                 : WGMMA_D8(d, 0)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* The QG tile's wgmma (RS_FP8_QG): N = NW activation rows, both operands
 * E4M3 in shared memory. */
template <int NW>
__device__ __forceinline__ void fr_qgmma(float *d, uint64_t da, uint64_t db, int scale_d)
{
    if constexpr (NW == 128) wgmma_m64n128k32_e4m3(d, da, db, scale_d);
    else if constexpr (NW == 96) wgmma_m64n96k32_e4m3(d, da, db, scale_d);
    else if constexpr (NW == 64) wgmma_m64n64k32_e4m3(d, da, db, scale_d);
    else if constexpr (NW == 32) wgmma_m64n32k32_e4m3(d, da, db, scale_d);
    else wgmma_m64n16k32_e4m3(d, da, db, scale_d);
}

/* Shared-memory loads at 32-bit addresses (the K loop runs at the register limit). */
__device__ __forceinline__ uint32_t fr_ld_u32(uint32_t p)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(p) : "memory");
    return v;
}

__device__ __forceinline__ float fr_ld_f32(uint32_t p)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(p) : "memory");
    return v;
}

/* Two fp32 at shared address p (8-byte aligned): a fragment's column pair of scales. */
__device__ __forceinline__ void fr_ld_f32x2(uint32_t p, float &a, float &b)
{
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(p));
}

__device__ __forceinline__ uint32_t fr_ld_u16(uint32_t p)
{
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint32_t fr_ld_u8(uint32_t p)
{
    uint32_t v;
    asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(p) : "memory");
    return v;
}

/* Stores 16 bytes of fp16 as chunk j of a 128-byte row r in the 128-byte swizzle. */
__device__ __forceinline__ void fr_store_chunk(__half *out, int r, int j, uint4 v)
{
    uint32_t p = smem_u32(out) + r * 128 + ((j ^ (r & 7)) << 4); /* st.shared: generic stores cost more */
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

/* 16 bytes of shared memory at p (ld.shared: the widening's generic loads
 * waited on the long scoreboard, Nsight Compute at 4721f3b). */
__device__ __forceinline__ uint4 fr_lds128(uint32_t p)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(p) : "memory");
    return v;
}

/* fr_lds128 / a 16-byte st.shared at p + OFF, OFF an immediate of the
 * instruction (fr_widen_passes). */
template <int OFF>
__device__ __forceinline__ uint4 fr_lds128_at(uint32_t p)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4+%5];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(p), "n"(OFF) : "memory");
    return v;
}

template <int OFF>
__device__ __forceinline__ void fr_sts128_at(uint32_t p, uint4 v)
{
    asm volatile("st.shared.v4.u32 [%0+%5], {%1, %2, %3, %4};\n" ::"r"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "n"(OFF)
                 : "memory");
}

template <int OFF>
__device__ __forceinline__ uint32_t fr_ld_u32_at(uint32_t p)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1+%2];\n" : "=r"(v) : "r"(p), "n"(OFF) : "memory");
    return v;
}

/* 8 E4M3 bytes -> 8 fp16 (exact): one 16-byte chunk (the folds' word, fold_rows.cuh). */
__device__ __forceinline__ uint4 e4m3x8_to_f16(uint32_t a, uint32_t b)
{
    return make_uint4(fr_e4m3x2<false>(a), fr_e4m3x2<true>(a), fr_e4m3x2<false>(b), fr_e4m3x2<true>(b));
}

/* 16 E4M3 bytes -> 16 fp16 (exact) as two 16-byte chunks. */
__device__ __forceinline__ void e4m3x16_to_f16(uint4 v, uint4 &lo, uint4 &hi)
{
    lo = e4m3x8_to_f16(v.x, v.y);
    hi = e4m3x8_to_f16(v.z, v.w);
}

/* NVFP4: raw chunk j (16 B, 32 elements) of row r (64-byte rows, 64-byte
 * swizzle), and the shared address of k16 scale block q of row r. */
template <int BMA>
__device__ __forceinline__ uint32_t fr_nv_chunk_addr(const uint8_t *raw, int r, int j)
{
    return smem_u32(raw) + r * 64 + ((j ^ ((r >> 1) & 3)) << 4);
}
template <int BMA>
__device__ __forceinline__ uint32_t fr_nv_scale_addr(uint32_t am, int r, int q)
{
    return am + (q * BMA + r) * 2;
}

/* NVFP4: chunk v (chunk j of row r) widened to fp16 and stored; sc0 / sc1 the
 * f16 scales (x 2^7) of its two k16 blocks 2 j, 2 j + 1. */
template <int BMA>
__device__ __forceinline__ void fr_widen_nv_chunk(__half (*out)[BMA * 64], int r, int j, uint4 v, uint32_t sc0,
                                                  uint32_t sc1)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int u = 0; u < 4; u++) { /* elements 32 j + 8 u .. + 7, scale block 2 j + u / 2 */
        const uint32_t sc = u < 2 ? sc0 : sc1, m = sc | sc << 16;
        uint32_t o[4];
        moe_ep_e2m1_word_f16(w[u], o); /* the pairs' f16 bits by byte lookups (codec.h) */
#pragma unroll
        for (int b = 0; b < 4; b++) o[b] = fr_hmul2(o[b], m); /* m: the scale x 2^7 */
        fr_store_chunk(out[j / 2], r, 4 * (j % 2) + u, make_uint4(o[0], o[1], o[2], o[3]));
    }
}

/* Whether pass i of the widening (rows RP i .. RP i + RP - 1) has no valid
 * row. The 128-row instance asks only at its half (64 valid rows or fewer:
 * its consumers run n64, fr_consume): a test at every pass made the mega
 * kernel's producer spill. */
template <int BMA, int RP>
__device__ __forceinline__ bool fr_rows_done(int i, int rows_valid)
{
    if constexpr (BMA == 128) return RP * i == 64 && rows_valid <= 64;
    else return RP * i >= rows_valid;
}

/* A chunk's 8 fp16 times the f16x2 multiplier m (MXFP8's: the row's k32 one). */
__device__ __forceinline__ uint4 fr_mult_chunk(uint4 c, uint32_t m)
{
    return make_uint4(fr_hmul2(c.x, m), fr_hmul2(c.y, m), fr_hmul2(c.z, m), fr_hmul2(c.w, m));
}

/* MXFP8's widening: a chunk pair's 16 fp16 times the row's k32 multiplier m (f16x2). */
__device__ __forceinline__ void fr_mult_chunks(uint4 &lo, uint4 &hi, uint32_t m)
{
    lo = fr_mult_chunk(lo, m), hi = fr_mult_chunk(hi, m);
}

/* The E4M3 widening by 128 threads (the 128-row instances), pass I: rows
 * t / 8 + 16 I keep pass 0's swizzle key (r & 7), so each pass's shared
 * addresses are pass 0's (ld: raw chunk; st0, st1: its two fp16 chunks; am:
 * MXFP8's multiplier) plus constants, given as the instructions' immediates.
 * Left to ptxas, the mega kernel's 128-row instances computed each pass's
 * addresses anew (35 more integer instructions a stage than split's same
 * tile: SASS of a914f61, MXFP8 / W4A8 / FP8-BLOCK); the same bytes move. */
template <int FMT, int BMA, int I>
__device__ __forceinline__ void fr_widen_passes(uint32_t ld, uint32_t st0, uint32_t st1, uint32_t am, int rows_valid)
{
    if constexpr (I < BMA / 16) {
        if (fr_rows_done<BMA, 16>(I, rows_valid)) return; /* rows 16 I on: none valid */
        uint4 lo, hi;
        e4m3x16_to_f16(fr_lds128_at<16 * I * FR_BK>(ld), lo, hi);
        if constexpr (FR_MX(FMT)) fr_mult_chunks(lo, hi, fr_ld_u32_at<16 * I * 4>(am));
        fr_sts128_at<16 * I * 128>(st0, lo); /* fp16 rows of 128 bytes */
        fr_sts128_at<16 * I * 128>(st1, hi);
        fr_widen_passes<FMT, BMA, I + 1>(ld, st0, st1, am, rows_valid);
    }
}

/* Raw activation stage (BMA rows x 128 E4M3, 128-byte swizzle) -> fp16 in
 * the wgmma layout (K halves of 64: 128-byte rows, 128-byte swizzle), by the
 * widening threads; raw chunk j (16 B) of row r = fp16 chunks 2 (j % 4), +1 of half
 * j / 4. Thread t of the NT widening threads (128, or 96 beside the TMA warp:
 * FR_WIDEN_THREADS) widens chunks t + NT i (rows t / 8 + NT / 8 i, chunk t % 8);
 * MXFP8: times the row's multiplier of k32 block j / 2 (am: the stage's
 * [4][BMA] table, shared address). Only the row groups that hold valid rows
 * (rows_valid): a group is all NT threads' rows of one i, so the test is
 * the same in every thread. The rows past them keep what the stage held
 * before; they give output rows no epilogue writes (each output row depends
 * on its own activation row only), as the garbage rows of a partial tile's
 * TMA box always did. At decode (a few rows per expert in a 64-row tile)
 * that skips 3 of 4 groups: the lab measured the producer's widening at
 * 11-15 % of the decode tile's time (FR_LAB_SKIP_WIDEN). The 128-row
 * instance skips only its second half (fr_rows_done). */
template <int FMT, int BMA, int NT>
__device__ __forceinline__ void fr_widen_rows(const uint8_t *raw, __half (*out)[BMA * 64], int t, uint32_t am,
                                              int rows_valid)
{
    if constexpr (FR_NV(FMT) && BMA == 128 && NT == 128) {
        /* 128 rows: all four passes' loads first, then their widening. The
         * loads and stores are asm volatile, so pass by pass each waited for
         * its loads (lab stamps: 1 940 cycles a stage, the producer busy
         * nearly all of NVFP4's K loop). */
        constexpr int RP = 32, P = BMA / RP;
        const int j = t % 4;
        uint4 v[P];
        uint32_t sc[P][2];
#pragma unroll
        for (int i = 0; i < P; i++) {
            const int r = t / 4 + RP * i;
            v[i] = fr_lds128(fr_nv_chunk_addr<BMA>(raw, r, j));
            sc[i][0] = fr_ld_u16(fr_nv_scale_addr<BMA>(am, r, 2 * j)), sc[i][1] = fr_ld_u16(fr_nv_scale_addr<BMA>(am, r, 2 * j + 1));
        }
#pragma unroll
        for (int i = 0; i < P; i++) fr_widen_nv_chunk<BMA>(out, t / 4 + RP * i, j, v[i], sc[i][0], sc[i][1]);
    } else if constexpr (FR_NV(FMT)) {
        constexpr int RP = NT / 4; /* rows per pass of the NT threads */
#pragma unroll
        for (int i = 0; i < (BMA + RP - 1) / RP; i++) { /* 16 rows, 128 threads: threads 0 .. 63 only */
            if (fr_rows_done<BMA, RP>(i, rows_valid)) break; /* rows RP i .. RP i + RP - 1: none valid */
            int r = t / 4 + RP * i, j = t % 4;
            if (BMA % RP && r >= BMA) break;
            const uint4 v = fr_lds128(fr_nv_chunk_addr<BMA>(raw, r, j));
            fr_widen_nv_chunk<BMA>(out, r, j, v, fr_ld_u16(fr_nv_scale_addr<BMA>(am, r, 2 * j)),
                                   fr_ld_u16(fr_nv_scale_addr<BMA>(am, r, 2 * j + 1)));
        }
    } else if constexpr (NT == 128) { /* 16 rows a pass: pass 0's addresses plus constants */
        const int r = t / 8, j = t % 8;
        const uint32_t half = smem_u32(out[j / 4]) + r * 128;
        fr_widen_passes<FMT, BMA, 0>(smem_u32(raw) + r * FR_BK + ((j ^ (r & 7)) << 4),
                                     half + (((2 * (j % 4)) ^ (r & 7)) << 4), half + (((2 * (j % 4) + 1) ^ (r & 7)) << 4),
                                     am + ((j / 2) * BMA + r) * 4, rows_valid);
    } else {
        constexpr int RP = NT / 8;
#pragma unroll
        for (int i = 0; i < (BMA + RP - 1) / RP; i++) {
            if (fr_rows_done<BMA, RP>(i, rows_valid)) break; /* rows RP i .. RP i + RP - 1: none valid */
            int r = t / 8 + RP * i, j = t % 8;
            if (BMA % RP && r >= BMA) break;
            uint4 lo, hi;
            e4m3x16_to_f16(fr_lds128(smem_u32(raw) + r * FR_BK + ((j ^ (r & 7)) << 4)), lo, hi);
            if constexpr (FR_MX(FMT)) fr_mult_chunks(lo, hi, fr_ld_u32(am + ((j / 2) * BMA + r) * 4));
            fr_store_chunk(out[j / 4], r, 2 * (j % 4), lo);
            fr_store_chunk(out[j / 4], r, 2 * (j % 4) + 1, hi);
        }
    }
}

/* Producer thread t's scale words of stage cv, loaded a stage ahead (from
 * L2; the rows come by TMA): MXFP8 the UE8M0 word of activation row t
 * (0 past the valid rows: their scale rows may lie past the buffer; the
 * weights' multipliers come by bulk copy, fr_produce); FP8-BLOCK row t's s_x * s_w for consumers 0, 1
 * (fp32 per 128 x 128; 0 past the valid rows). */
struct fr_stage_scales {
    uint32_t wa;
    float sx, sw[2]; /* FP8-BLOCK: s_x of activation row t, s_w of the tile's two 128-row weight blocks */
    uint2 na; /* NVFP4: the 8 E4M3 scales of activation row t */
};

template <int FMT, int BMA>
__device__ __forceinline__ fr_stage_scales fr_load_scales(const gemm_args &g, int row0, int rows_valid,
                                                          int64_t b_row, int cv, int t)
{
    rows_valid = min(rows_valid, BMA); /* activation row t only while t < BMA */
    const int64_t b_sb = moe_ep_row_scale_bytes(g.b_fmt, g.K);
    fr_stage_scales r = {};
    if constexpr (FR_NV(FMT)) {
        if (t < rows_valid) r.na = __ldcg((const uint2 *)(g.a_scales + (int64_t)(row0 + t) * g.a_scale_stride) + cv);
    } else if constexpr (FR_MX(FMT)) {
        if (t < rows_valid) r.wa = __ldcg((const uint32_t *)(g.a_scales + (int64_t)(row0 + t) * g.a_scale_stride) + cv);
    } else if (t < rows_valid) {
        /* loaded only: multiplied when staged, a stage later (a product here would wait for the loads) */
        r.sx = __ldcg((const float *)(g.a_scales + (int64_t)(row0 + t) * g.a_scale_stride) + cv);
        r.sw[0] = __ldcg((const float *)(g.b_scales + b_row * b_sb) + cv);
        r.sw[1] = __ldcg((const float *)(g.b_scales + (b_row + 128) * b_sb) + cv);
    }
    return r;
}

/* Where producer thread t keeps its ref_x for the tile: MX reads only sxw[cs][0] (the
 * consumers' 2^ref_x), so sxw[0][1][t] is free; in a register the 128-row producers
 * (56 / 40 registers) spilled. */
#define FR_REF_X(s, t) (*(uint32_t *)&(s).sxw[0][1][t])

/* Then, once stage cs is free, producer thread t stages its scales. MXFP8:
 * 2^ref_x and the four k32 multipliers of activation row t against its
 * reference over K (fr_row_refs, FR_REF_X; 0 past the valid rows). */

template <int FMT, int BMA, int CT>
__device__ __forceinline__ void fr_store_scales(fr_smem<FMT, BMA, CT> &s, const fr_stage_scales &w, int rows_valid, int cs, int t)
{
    if constexpr (FR_NV(FMT)) { /* rows past the valid ones: scale 0 */
        if (t < BMA) fr_store_e4m3x8((uint16_t *)&s.am[cs][0][0] + t, BMA, t < rows_valid ? w.na : make_uint2(0, 0));
    } else if constexpr (FR_MX(FMT)) {
        if (t < BMA) {
            const uint32_t ref = FR_REF_X(s, t); /* 2^ref_x is in sxw[*][0] since the tile's start */
#pragma unroll
            for (int j = 0; j < 4; j++) s.am[cs][j][t] = t < rows_valid ? fr_mx_mult(ref, (w.wa >> (8 * j)) & 0xFF) : 0u;
        }
    } else if (t < BMA) {
        s.sxw[cs][0][t] = w.sx * w.sw[0], s.sxw[cs][1][t] = w.sx * w.sw[1];
    }
}

/* What a persistent kernel around the tile does at two points of thread 0's
 * work (HOOK of fp8_rs_tile; split's grouped GEMM: nothing):
 *   claimed(item): the block's next item was claimed (g.claim_counter set),
 *     after the producer's last stage: thread 0 is otherwise idle until the
 *     consumers end, so a wait here costs the tile nothing;
 *   loads_issued(): with a TMA warp, the ring's first fill is issued: what
 *     thread 0 does here overlaps its flight; at 128 rows (thread 0 also
 *     widens), once the first stage is widened (mega's fence there found the
 *     last epilogue's stores drained: NVFP4 / FP8-BLOCK -1-2 % at T = 8192). */
struct fr_no_hook {
    static __device__ __forceinline__ void claimed(int) {}
    static __device__ __forceinline__ void loads_issued() {}
};

/* The widening threads' own barrier (id 2; 1 is the consumers'). */
template <int NT>
__device__ __forceinline__ void fr_producer_barrier() { asm volatile("bar.sync 2, %0;\n" ::"n"(NT) : "memory"); }

/* Thread 0 of warpgroup 0: the TMA of raw stage kt, once the consumers and
 * the widening are done with stage kt - RAW. */
template <int FMT, int BMA, int CT>
__device__ __forceinline__ void fr_issue_stage(fr_smem<FMT, BMA, CT> &s, const gemm_args &g, const CUtensorMap *ta,
                                               const CUtensorMap *tb, int row0, int64_t b_row, int n_k, int kt)
{
    constexpr int RAW = fr_smem<FMT, BMA, CT>::RAW, ARAW = fr_smem<FMT, BMA, CT>::ARAW;
    constexpr int A_BYTES = ARAW ? 0 : BMA * FR_AROW(FMT); /* the activations' bytes on raw_full */
    int st = kt % RAW;
    if constexpr (ARAW > 0) { /* first: its slot is free once widened, the weights' once multiplied */
        const int sa = kt % ARAW;
        tile_wait(g, &s.act_empty[sa], ((kt / ARAW) & 1) ^ 1);
#ifdef FR_LAB_SKIP_LOADS /* the kernel lab's bit 1 (below) for this ring: past its first fill, no bytes */
        if (kt >= ARAW && (FR_LAB_SKIP_LOADS & 1)) mbar_expect_tx(&s.act_full[sa], 0);
        else
#endif
        {
            mbar_expect_tx(&s.act_full[sa], BMA * FR_AROW(FMT));
            tma_load_2d(s.ra[sa], ta, &s.act_full[sa], kt * FR_AROW(FMT), row0);
        }
    }
    FR_TRACE(10);
    tile_wait(g, &s.raw_empty[st], ((kt / RAW) & 1) ^ 1);
    FR_TRACE(11);
#ifdef FR_LAB_SKIP_LOADS /* the kernel lab: past the first ring, stages "land" without their activations (bit 1) / weights (bit 2) */
    const bool load_a = !ARAW && (kt < RAW || !(FR_LAB_SKIP_LOADS & 1)), load_b = kt < RAW || !(FR_LAB_SKIP_LOADS & 2);
    mbar_expect_tx(&s.raw_full[st], (load_a ? A_BYTES : 0) + (load_b ? FR_BN * FR_WROW(FMT) + FR_WREC_BYTES(FMT) : 0));
    if (load_a) tma_load_2d(s.ra[st], ta, &s.raw_full[st], kt * FR_AROW(FMT), row0);
    if (!load_b) return;
#else
    mbar_expect_tx(&s.raw_full[st], A_BYTES + FR_BN * FR_WROW(FMT) + FR_WREC_BYTES(FMT));
    if constexpr (!ARAW) tma_load_2d(s.ra[st], ta, &s.raw_full[st], kt * FR_AROW(FMT), row0);
#endif
    tma_load_2d(s.rb[st], tb, &s.raw_full[st], kt * FR_WROW(FMT), (int)b_row); /* x in bytes */
    if constexpr (FR_MX(FMT) || FR_NV(FMT)) /* the weights' multipliers of the stage (rs_mults.cuh) */
        bulk_load(s.wrec[st], g.b_mult + ((b_row / FR_BN) * n_k + kt) * FR_WREC_WORDS(FMT), FR_WREC_STAGE(FMT),
                  &s.raw_full[st]);
}

/* The largest of activation row `row`'s UE8M0 scale bytes (four packed lanes; fr_mx_ref picks
 * one) over its 16-byte chunks c0, c0 + step, ... (rows padded to 16 bytes,
 * moe_ep_act_scale_stride; the padding skipped). words: the row's scale words. */
__device__ __forceinline__ uint32_t fr_row_scale_max(const gemm_args &g, int row, int c0, int step, int words)
{
    const uint4 *p = (const uint4 *)(g.a_scales + (int64_t)row * g.a_scale_stride);
    uint32_t m = 0;
#pragma unroll 2
    for (int c = c0; c < (words + 3) / 4; c += step) {
        const uint4 v = __ldcg(p + c);
        m = __vmaxu4(m, v.x);
        if (4 * c + 1 < words) m = __vmaxu4(m, v.y);
        if (4 * c + 2 < words) m = __vmaxu4(m, v.z);
        if (4 * c + 3 < words) m = __vmaxu4(m, v.w);
    }
    return m;
}

/* MX: each activation row's reference byte, the largest UE8M0 byte of the
 * row over all of K (0 past the valid rows), into FR_REF_X(s, row) and the
 * consumers' 2^ref_x (sxw[*][0]), once a tile: each k32 block's scale 2^b is
 * then folded whole into the fp16 operand as 2^-(ref - b), so that the sums
 * run over K without a promotion (dev/mx_fold_error.c: exact while
 * ref - b <= 15, beyond that only bits far below the row's largest block are
 * lost). All NT widening threads share the valid rows' K / 128 words,
 * NT / rows_valid threads a row, their largest bytes joined by a shared
 * atomicMax: with a thread a row, each chained up to 56 L2 round trips before
 * the first widening (the guess for MXFP8 mega decode's +4 % with one sum
 * over K, forty-eighth session; not measured yet). */
template <int BMA, int NT, typename S>
__device__ __forceinline__ void fr_row_refs(S &s, const gemm_args &g, int row0, int rows_valid, int t)
{
    rows_valid = min(rows_valid, BMA);
    const int words = g.K / FR_BK; /* a row's scale words (4 UE8M0 bytes each) */
    if constexpr (BMA > NT) { /* the 144-row tiles on 128 threads: a thread a row, rows t and t + NT */
        for (int r = t; r < BMA; r += NT) {
            const uint32_t m = r < rows_valid ? fr_row_scale_max(g, row0 + r, 0, 1, words) : 0u;
            const float ref = r < rows_valid ? moe_ep_ue8m0_to_f32((uint8_t)fr_mx_ref(m)) : 0.0f;
            for (int cs = 0; cs < S::CVT; cs++) s.sxw[cs][0][r] = ref;
        }
        return;
    }
    if (t < BMA) FR_REF_X(s, t) = 0u;
    fr_producer_barrier<NT>();
    const int tpr = NT / max(rows_valid, 1), r = t / tpr; /* threads a valid row, this thread's row */
    if (r < rows_valid) atomicMax(&FR_REF_X(s, r), fr_mx_ref(fr_row_scale_max(g, row0 + r, t - r * tpr, tpr, words)));
    fr_producer_barrier<NT>();
    if (t < BMA)
        for (int cs = 0; cs < S::CVT; cs++) s.sxw[cs][0][t] = t < rows_valid ? moe_ep_ue8m0_to_f32((uint8_t)FR_REF_X(s, t)) : 0.0f;
}

/* Widening thread t (of FR_WIDEN_THREADS) on stage cv: its scales (cur,
 * loaded a stage ahead), then its share of the stage's A rows in fp16. */
template <int FMT, int BMA, int CT>
__device__ __forceinline__ void fr_widen_stage(fr_smem<FMT, BMA, CT> &s, const gemm_args &g, const fr_stage_scales &cur,
                                               int rows_valid, int cv, int t)
{
    typedef fr_smem<FMT, BMA, CT> smem_t;
    constexpr int RA = smem_t::RA, CVT = smem_t::CVT, NT = FR_WIDEN_THREADS(BMA);
    uint64_t *a_full = smem_t::ARAW ? s.act_full : s.raw_full, *a_empty = smem_t::ARAW ? s.act_empty : s.raw_empty;
    int rs = cv % RA, cs = cv % CVT;
    FR_TRACE(8);
    tile_wait(g, &a_full[rs], (cv / RA) & 1);
    tile_wait(g, &s.cvt_empty[cs], ((cv / CVT) & 1) ^ 1);
    FR_TRACE(9);
    fr_store_scales(s, cur, rows_valid, cs, t);
    if constexpr (FR_MX(FMT) || FR_NV(FMT)) fr_producer_barrier<NT>(); /* the widening reads other rows' scales */
    FR_TRACE(14);
#ifndef FR_LAB_SKIP_WIDEN /* the kernel lab: the pipeline without the widening's work */
    if constexpr (!FR_QG(FMT)) fr_widen_rows<FMT, BMA, NT>(s.ra[rs], s.a[cs], t, smem_u32(&s.am[cs][0][0]), rows_valid);
#endif
    FR_TRACE(15);
    fence_proxy_async_shared(); /* generic writes -> wgmma reads */
    mbar_arrive(&a_empty[rs]);
    mbar_arrive(&s.cvt_full[cs]);
}

/* Warpgroup 0: TMA of the raw stages (thread 0), the stage's scales and the
 * widening of A (FR_WIDEN_THREADS threads: all 128, or warps 1-3 beside a
 * TMA warp, FR_TMA_WARP_OF). */
template <int FMT, int BMA, typename HOOK, int CT>
__device__ __forceinline__ void fr_produce(fr_smem<FMT, BMA, CT> &s, const gemm_args &g, const CUtensorMap *ta,
                                           const CUtensorMap *tb, int e, int row0, int rows_valid, int n0,
                                           int n_k, int t)
{
    const int64_t b_row = (int64_t)e * g.N + n0;
    if (t == 0) asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks wrote */
    constexpr int RAW = fr_smem<FMT, BMA, CT>::RAW;
    if constexpr (FR_TMA_WARP_OF(BMA)) {
        if (t < 32) { /* the TMA warp: each raw stage as soon as its slot is free */
            if (t == 0)
#pragma unroll 1
                for (int kt = 0; kt < n_k; kt++) {
                    fr_issue_stage(s, g, ta, tb, row0, b_row, n_k, kt);
                    if (kt == min(n_k, RAW) - 1) HOOK::loads_issued(); /* the ring's first fill in flight */
                }
            return;
        }
        t -= 32;
    }
    /* MX without a TMA warp (128 rows): thread 0 issues the first LEAD stages
     * first, so that they land while the row references are read. */
    constexpr int LEAD = FR_TMA_WARP_OF(BMA) ? 0 : RAW - 1;
    static_assert(fr_smem<FMT, BMA, CT>::ARAW == 0 || fr_smem<FMT, BMA, CT>::ARAW >= LEAD, "the activations' ring: a stage reused ahead of its widening");
    const int ahead = FR_MX(FMT) ? min(n_k, LEAD) : 0; /* stages issued before the loop */
    if (t == 0)
        for (int kt = 0; kt < ahead; kt++) fr_issue_stage(s, g, ta, tb, row0, b_row, n_k, kt);
    if constexpr (FR_MX(FMT)) /* 2^ref_x for the sums' scaling, once */
        fr_row_refs<BMA, FR_WIDEN_THREADS(BMA)>(s, g, row0, rows_valid, t);
    /* The scales of the next stage to widen are loaded one stage ahead, so
     * that their L2 latency overlaps the current stage's widening. */
    fr_stage_scales next = fr_load_scales<FMT, BMA>(g, row0, rows_valid, b_row, 0, t);
    /* With all 128 threads widening, iteration kt widens stage kt - (RAW - 1),
     * then thread 0 issues the TMA of stage kt. That TMA waits until the
     * consumers are done with stage kt - RAW, so it comes second: the widening
     * of the next stage then overlaps the consumers' current one, and each raw
     * stage has RAW - 1 stages of compute to land. */
#pragma unroll 1
    for (int kt = ahead; kt < n_k + LEAD; kt++) {
        const int cv = kt - LEAD;
        if (cv >= 0) {
            /* the last item's counter once the first stage is widened and the
             * second one's TMA is out (one stage: before its widening): its
             * fence then finds the last epilogue's stores drained (at the
             * tile's start it waited for them while warp 0's widening stood),
             * and it waits beside that TMA's flight instead of before its issue */
            if (!FR_TMA_WARP_OF(BMA) && t == 0 && cv == min(1, n_k - 1)) HOOK::loads_issued();
            const fr_stage_scales cur = next;
            if (cv + 1 < n_k) next = fr_load_scales<FMT, BMA>(g, row0, rows_valid, b_row, cv + 1, t);
            fr_widen_stage(s, g, cur, rows_valid, cv, t);
        }
        if (!FR_TMA_WARP_OF(BMA) && t == 0 && kt < n_k) fr_issue_stage(s, g, ta, tb, row0, b_row, n_k, kt);
    }
}

/* The A16 form's fp16 stage kt (two boxes of 64 K) into its slot, the bytes expected with the
 * thread's arrival (ARRIVE) or without (it arrives later, after its own stores for the stage). */
template <bool ARRIVE, int FMT, int BMA, int CT>
__device__ __forceinline__ void fr_issue_a16_stage(fr_smem<FMT, BMA, CT, true> &s, const CUtensorMap *ta, int row0, int kt)
{
    const int cs = kt % fr_smem<FMT, BMA, CT, true>::CVT;
#ifdef FR_LAB_SKIP_LOADS /* the kernel lab's bit 1 for the fp16 stages: past the first ring, no bytes */
    if (kt >= fr_smem<FMT, BMA, CT, true>::CVT && (FR_LAB_SKIP_LOADS & 1)) {
        if constexpr (ARRIVE) mbar_arrive(&s.cvt_full[cs]);
        return;
    }
#endif
    if constexpr (ARRIVE) mbar_expect_tx(&s.cvt_full[cs], BMA * 256);
    else mbar_expect_tx_only(&s.cvt_full[cs], BMA * 256);
    tma_load_2d(s.a[cs][0], ta, &s.cvt_full[cs], kt * FR_BK, row0);
    tma_load_2d(s.a[cs][1], ta, &s.cvt_full[cs], kt * FR_BK + 64, row0);
}

/* FP8-BLOCK's A16 form, warps 1-3 (u = t - 32, 96 threads): once the
 * consumers freed an fp16 slot, thread u = 0 issues the stage's fp16 rows
 * (the bytes expected without an arrival), then each thread stages s_x * s_w
 * (as fr_store_scales forms them) of rows u and (u < 32) u + 96 and arrives
 * (cvt_full counts 96). The scales are loaded after the wait, beside the
 * rows' flight: loaded a stage ahead (fr_produce's way) they stayed live
 * across the wait and spilled the mega kernel's 56-register producer. */
template <int FMT, int BMA, int CT>
__device__ __forceinline__ void fr_produce_scales(fr_smem<FMT, BMA, CT, true> &s, const gemm_args &g, const CUtensorMap *ta,
                                                  int64_t b_row, int row0, int rows_valid, int n_k, int u)
{
    constexpr int CVT = fr_smem<FMT, BMA, CT, true>::CVT;
    const int b_words = (int)moe_ep_row_scale_bytes(g.b_fmt, g.K) / 4, a_words = g.a_scale_stride / 4;
    const bool v0 = u < min(rows_valid, BMA), v1 = u + 96 < min(rows_valid, BMA); /* 0 past the valid rows */
#pragma unroll 1
    for (int kt = 0; kt < n_k; kt++) {
        const int cs = kt % CVT;
        tile_wait(g, &s.cvt_empty[cs], ((kt / CVT) & 1) ^ 1);
        if (u == 0) fr_issue_a16_stage<false>(s, ta, row0, kt);
        /* 64-bit offsets: weight rows x K / 128 words pass 2^31 at 1024 experts of large N and K */
        const float *as = (const float *)g.a_scales + kt, *bs = (const float *)g.b_scales + b_row * b_words + kt;
        const float x0 = v0 ? __ldcg(as + (int64_t)(row0 + u) * a_words) : 0.0f, w0 = __ldcg(bs), w1 = __ldcg(bs + 128 * b_words);
        s.sxw[cs][0][u] = x0 * w0, s.sxw[cs][1][u] = x0 * w1;
        if (u + 96 < BMA) {
            const float x1 = v1 ? __ldcg(as + (int64_t)(row0 + u + 96) * a_words) : 0.0f;
            s.sxw[cs][0][u + 96] = x1 * w0, s.sxw[cs][1][u + 96] = x1 * w1;
        }
        mbar_arrive(&s.cvt_full[cs]);
    }
}

/* The A16 form (the 128-row MX, NVFP4 and FP8-BLOCK instances, the 144-row NVFP4 and MX ones, g.a16 set): the activation
 * rows come folded once into fp16 (fold_rows.cuh: the values fr_widen_rows
 * would write), ta maps them ([rows][K] fp16 a16_pitch apart, boxes of 64 x BMA, the
 * 128-byte swizzle of the fp16 stages), and the producer only streams:
 * thread 0 the weights and their records, thread 32 the fp16 stages (two
 * boxes each); MX: all 128 threads first read the row references (2^ref_x for
 * the sums; NVFP4's rows carry their scales, the global ones come after the sums).
 * FP8-BLOCK: warps 1-3 stage each stage's s_x * s_w (a thread one row, the first 32
 * two: rows u and u + 96) before they arrive on its fp16 stage, thread 32's
 * arrival the TMA's (fr_produce_scales). No raw activations, no widening: each m
 * tile's rows were widened again by each of its N / 256 tiles. */
template <int FMT, int BMA, typename HOOK, int CT>
__device__ __forceinline__ void fr_produce_a16(fr_smem<FMT, BMA, CT, true> &s, const gemm_args &g, const CUtensorMap *ta,
                                               const CUtensorMap *tb, int e, int row0, int rows_valid, int n0,
                                               int n_k, int t)
{
    typedef fr_smem<FMT, BMA, CT, true> smem_t;
    constexpr int RAW = smem_t::RAW, CVT = smem_t::CVT;
    const int64_t b_row = (int64_t)e * g.N + n0;
    if (t == 0 || t == 32) asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other kernels (blocks) wrote */
    if constexpr (FR_MX(FMT)) { /* then a barrier: the consumers read every row's 2^ref_x after thread 32's arrival alone */
        fr_row_refs<BMA, 128>(s, g, row0, rows_valid, t);
        fr_producer_barrier<128>();
    }
    if (t == 0) {
#pragma unroll 1
        for (int kt = 0; kt < n_k; kt++) {
            const int st = kt % RAW;
            tile_wait(g, &s.raw_empty[st], ((kt / RAW) & 1) ^ 1);
#ifdef FR_LAB_SKIP_LOADS /* the kernel lab's bit 2: past the first ring, the weight stages land without bytes */
            if (kt >= RAW && (FR_LAB_SKIP_LOADS & 2)) {
                mbar_arrive(&s.raw_full[st]);
                continue;
            }
#endif
            mbar_expect_tx(&s.raw_full[st], FR_BN * FR_WROW(FMT) + FR_WREC_BYTES(FMT));
            tma_load_2d(s.rb[st], tb, &s.raw_full[st], kt * FR_WROW(FMT), (int)b_row);
            if constexpr (FR_MX(FMT) || FR_NV(FMT)) /* the weights' multipliers (FP8-BLOCK: its scales, fr_produce_scales) */
                bulk_load(s.wrec[st], g.b_mult + ((b_row / FR_BN) * n_k + kt) * FR_WREC_WORDS(FMT), FR_WREC_STAGE(FMT),
                          &s.raw_full[st]);
            if (kt == min(n_k, RAW) - 1) HOOK::loads_issued();
        }
    } else if constexpr (FR_FP8B(FMT)) {
        if (t >= 32) fr_produce_scales(s, g, ta, b_row, row0, rows_valid, n_k, t - 32);
    } else if (t == 32) {
#pragma unroll 1
        for (int kt = 0; kt < n_k; kt++) {
            const int cs = kt % CVT;
            tile_wait(g, &s.cvt_empty[cs], ((kt / CVT) & 1) ^ 1);
            fr_issue_a16_stage<true>(s, ta, row0, kt);
        }
    }
}

/* Whether a tile can run the A16 form: the 128-row MX, NVFP4 and exact FP8-BLOCK instances (with g.a16 set;
 * in mega, its A16 instances). NVFP4: E2M1 x its E4M3 scale x 2^7 (fr_widen_nv_chunk) is exact in fp16 like
 * the MX products; FP8-BLOCK's rows are E4M3 widened (its scales stay per stage, fr_produce_scales). */
/* (and the 144-row NVFP4 and MX tiles, A16 only: FR_PRODUCER_REGS) */
#define FR_A16_OF(FMT, BMA, CT) \
    (((FR_MX(FMT) || FR_NV(FMT) || (FMT) == RS_FP8_BLOCK) && (BMA) == 128 || (FR_NV(FMT) || FR_MX(FMT)) && (BMA) == 144) && (CT) == 1)

/* A consumer thread's shared addresses (32-bit: the K loop runs at the
 * register limit): its fragment bytes in raw weight stage 0, fp16 activation
 * stage 0, its scale products (MXFP8: 2^ref_x) in stage 0, its row g's k32
 * multipliers (MX: and 2^ref_w) in stage 0 (MX: raw stage 0's record; NVFP4:
 * fp16 stage 0's table); the stages follow at fixed strides. */
struct fr_addr {
    uint32_t frag, act, sxw, wm, sw;
    int sw_key, q; /* the fragment rows' swizzle key (fr_fragment) and the lane's pair q */
};

#define FR_RB_STAGE(FMT) (FR_BN * FR_WROW(FMT)) /* bytes between raw weight stages */
#define FR_A_STAGE(BMA) (2 * (BMA) * 64 * 2) /* bytes between fp16 activation stages */
#define FR_SXW_STAGE(BMA) (2 * (BMA) * 4)    /* bytes between scale-product stages */


template <int FMT, int BMA, int CT, bool A16>
__device__ __forceinline__ fr_addr fr_addr_of(const fr_smem<FMT, BMA, CT, A16> &s, int h, int g, int q)
{
    fr_addr a;
    a.frag = smem_u32(s.rb[0]) + (128 * h + g) * FR_WROW(FMT) + 4 * q;
    a.act = smem_u32(s.a[0][0]);
    if constexpr (FR_QG(FMT)) /* the warpgroup's 128 weight rows and the raw activations, stage 0 */
        a.frag = smem_u32(s.rb[0]) + 128 * h * FR_WROW(FMT), a.act = smem_u32(s.ra[0]);
    a.sxw = smem_u32(&s.sxw[0][FR_MX(FMT) ? 0 : h][2 * q]);
    a.wm = smem_u32(&s.wrec[0][0]) + (128 * h + g) * FR_WREC_MULT(FMT);
    a.sw = smem_u32(&s.wrec[0][0]) + 4 * FR_BN * FR_WREC_MULT(FMT) + (128 * h + g) * 4;
    a.sw_key = FR_E2M1(FMT) ? (g >> 1) & 3 : g & 7, a.q = q;
    return a;
}

/* A thread's weight bytes come from the register tile's weight layout
 * (weights.cu, prep_permute_fragments): within each 16-byte chunk of a row
 * (E4M3: one k16 step; E2M1: two), word q holds quad lane q's pairs, so a
 * lane reads one conflict-free 32-bit word per row where it read four 16-bit
 * (E4M3) or eight 8-bit (E2M1) values, half the shared-memory wavefronts
 * (dev/wgmma_lab/rs_block.cu: the consumer loop alone at n64 54 % -> 79 % of
 * the fp16 rate with a block's words loaded up front). E4M3 word kk =
 * step kk's pair 2q of its first 8 K (low half) and of its last 8; E2M1
 * word kk / 2, bytes 2 (kk % 2) and 2 (kk % 2) + 1 the same for step kk. */
#define FR_WORDS(FMT) (FR_E2M1(FMT) ? 4 : 8) /* words per row, lane and stage */
/* Words of a row loaded ahead of their first use: all of a block's at its
 * start (the instances of 64 rows or fewer but the paired ones (CT 2), NVFP4),
 * else one (FP8-BLOCK) or none (MXFP8, W4A8): the 128-row instances and the
 * paired ones run at the register limit (the mega kernel spills otherwise). */
#ifndef FR_AHEAD /* the kernel lab may try others */
#define FR_AHEAD(FMT, BMA, CT) (((BMA) <= 64 && (CT) == 1) || FR_NV(FMT) ? FR_WORDS(FMT) : FR_MX(FMT) ? 0 : 1)
#endif

/* Word wi of m64 block B's rows g (*x) and g + 8 (*y) in raw stage rs. */
template <int FMT>
__device__ __forceinline__ void fr_load_word(uint32_t &x, uint32_t &y, const fr_addr &ad, int rs, int B, int wi)
{
    const uint32_t p = ad.frag + rs * FR_RB_STAGE(FMT) + B * 64 * FR_WROW(FMT) + ((wi ^ ad.sw_key) << 4);
    x = fr_ld_u32(p), y = fr_ld_u32(p + 8 * FR_WROW(FMT));
}

/* The raw bytes of one k16 step's A fragment and its multipliers: v[i] is
 * the pair of fragment register a[i] (a[0] row g, k 2q, 2q + 1; a[1] row
 * g + 8; a[2], a[3] the same 8 K on; E4M3: the word holding it, in its low
 * half for i < 2, its high half for i >= 2); m[0], m[1] the multipliers of rows g
 * and g + 8 (f16x2; MX and NVFP4 only). */
struct fr_raw {
    uint32_t v[4], m[2];
};

/* E2M1 weight words (their bits spread at load by weights.cu with codec.h's
 * moe_ep_e2m1_word_spread): the pairs of step kk % 2 as moe_ep_e2m1x2_f16_bits' f16x2
 * bits, lo the pair of fragment register a[0] (or a[1]), hi of a[2] (a[3]). */
__device__ __forceinline__ void fr_e2m1_pairs(uint32_t w, int odd, uint32_t &lo, uint32_t &hi)
{
    moe_ep_e2m1_word_pairs(w, odd, &lo, &hi);
}

/* Step kk's pairs out of its words (fr_load_word): x of row g, y of row g + 8
 * (E2M1: already as f16x2 bits). */
template <int FMT>
__device__ __forceinline__ void fr_step_bytes(fr_raw &r, uint32_t x, uint32_t y, int kk)
{
    if constexpr (FR_E2M1(FMT)) {
        fr_e2m1_pairs(x, kk % 2, r.v[0], r.v[2]);
        fr_e2m1_pairs(y, kk % 2, r.v[1], r.v[3]);
    } else { /* the words whole: fr_widen_step takes a[0], a[1] from their low pairs, a[2], a[3] from the high */
        r.v[0] = x, r.v[2] = x, r.v[1] = y, r.v[3] = y;
    }
}

/* NVFP4: the E4M3 scales of k16 block kk of m64 block B for rows g, g + 8, as f16. */
__device__ __forceinline__ void fr_load_mult_nv(fr_raw &r, const fr_addr &ad, int rs, int B, int kk)
{
    uint32_t wm = ad.wm + rs * FR_WREC_STAGE(RS_NVFP4) + kk * FR_BN * 2 + B * 128;
    r.m[0] = fr_ld_u16(wm), r.m[1] = fr_ld_u16(wm + 16);
}

/* The fragment of fr_step_bytes' pairs, widened to f16x2 (exact). */
template <int FMT>
__device__ __forceinline__ void fr_widen_step(uint32_t *a, const fr_raw &r)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (FR_E2M1(FMT)) a[i] = r.v[i]; /* fr_step_bytes decoded it */
        else a[i] = i < 2 ? fr_e4m3x2<false>(r.v[i]) : fr_e4m3x2<true>(r.v[i]);
    }
#ifndef FR_LAB_SKIP_CMULT /* the kernel lab: the consumer loop without its multipliers */
    if constexpr (FR_MX(FMT) || FR_NV(FMT)) {
#else
    if constexpr (false) {
#endif
        uint32_t m0 = r.m[0], m1 = r.m[1];
        if constexpr (FR_NV(FMT)) m0 |= m0 << 16, m1 |= m1 << 16;
        a[0] = fr_hmul2(a[0], m0), a[1] = fr_hmul2(a[1], m1), a[2] = fr_hmul2(a[2], m0), a[3] = fr_hmul2(a[3], m1);
    }
}

/* m64 block B of the consumer on stage (rs, cs): part = the block's 128-K
 * sum (RS_FP8_QG: 4 x QGMMA m64nBMAk32 from the raw stage, one commit group),
 * 8 k16 steps of wgmma m64nBMAk16 (one commit group each). Each step
 * widens its bytes into a[kk % FR_RING] once step kk - FR_RING (the same
 * registers) is done and issues its wgmma; its words (fr_load_word) are
 * loaded FR_AHEAD words ahead. Then every step is waited for (the caller
 * promotes part; ACC, MX: the steps add onto part, the tile's sums).
 * fr_block_steps: the steps on the caller's fragment ring a (not QGMMA). RUN: 0 a block alone;
 * 1 the first of a run of two on one ring (left in flight), 2 the second (each of its steps
 * waits as the run's step 8 + kk would: the first block's last steps freed its slot). */
template <int FMT, int BMA, int B, int NW, int CT, bool ACC = false, int RUN = 0>
__device__ __forceinline__ void fr_block_steps(float *part, const fr_addr &ad, int rs, int cs, uint32_t (&a)[FR_RING_OF(FMT, BMA)][4])
{
    constexpr int WORDS = FR_WORDS(FMT), AHEAD = FR_AHEAD(FMT, BMA, CT);
    const uint32_t act = ad.act + cs * FR_A_STAGE(BMA);
    constexpr int FR_RING = FR_RING_OF(FMT, BMA);
    uint32_t x[WORDS], y[WORDS]; /* unrolled: each word lives from its load to its last step */
    fr_raw r = {};
#pragma unroll
    for (int wi = 0; wi < AHEAD; wi++) fr_load_word<FMT>(x[wi], y[wi], ad, rs, B, wi);
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int wi = FR_E2M1(FMT) ? kk / 2 : kk;
        if (kk >= FR_RING || RUN == 2) wgmma_wait<FR_RING - 1>(); /* RUN 2: the first block's last steps too */
        if ((!FR_E2M1(FMT) || kk % 2 == 0) && wi + AHEAD < WORDS) /* at word wi's first use: the word AHEAD on */
            fr_load_word<FMT>(x[wi + AHEAD], y[wi + AHEAD], ad, rs, B, wi + AHEAD);
        if (FR_MX(FMT) && kk % 2 == 0) { /* the k32 block's multipliers (MXFP8's f16 doubled into f16x2) */
            constexpr int M = FR_WREC_MULT(FMT);
            uint32_t wm = ad.wm + rs * FR_WREC_STAGE(FMT) + (kk / 2) * FR_BN * M + B * 64 * M;
            if constexpr (M == 4) {
                r.m[0] = fr_ld_u32(wm), r.m[1] = fr_ld_u32(wm + 32);
            } else {
                uint32_t m0 = fr_ld_u16(wm), m1 = fr_ld_u16(wm + 16);
                r.m[0] = m0 | m0 << 16, r.m[1] = m1 | m1 << 16;
            }
        }
        fr_step_bytes<FMT>(r, x[wi], y[wi], kk);
        fr_widen_step<FMT>(a[kk % FR_RING], r);
        wgmma_fence();
        /* B: K half kk / 4 (BMA * 128 B on), +32 bytes (2 x 16 B) per k16 step within it */
        uint64_t db = smem_desc_u32(act + (kk / 4) * BMA * 128) + 2 * (kk % 4);
        fr_wgmma<NW>(part, a[kk % FR_RING], db, ACC || kk > 0 ? 1 : 0); /* ACC: onto the sums (MX) */
        wgmma_commit();
    }
    if constexpr (RUN != 1) wgmma_wait<0>();
}

template <int FMT, int BMA, int B, int NW, int CT, bool ACC = false>
__device__ __forceinline__ void fr_block(float *part, const fr_addr &ad, int rs, int cs)
{
    if constexpr (FR_QG(FMT)) { /* both operands in shared memory: 4 x m64nNWk32 QGMMA */
        const uint32_t w = ad.frag + rs * FR_RB_STAGE(FMT) + B * 64 * FR_WROW(FMT), x = ad.act + rs * BMA * FR_AROW(FMT);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) /* +32 bytes (2 x 16 B) per k32 step, in both 128-byte swizzled operands */
            fr_qgmma<NW>(part, smem_desc_u32(w) + 2 * kk, smem_desc_u32(x) + 2 * kk, kk > 0 ? 1 : 0);
        wgmma_commit();
        wgmma_wait<0>();
    } else {
        uint32_t a[FR_RING_OF(FMT, BMA)][4];
        fr_block_steps<FMT, BMA, B, NW, CT, ACC>(part, ad, rs, cs, a);
    }
}

/* MX (one block an SM): both m64 blocks of stage (rs, cs) onto their sums acc[0], acc[1] as one run
 * of 16 k16 steps on one fragment ring (fr_block_steps' RUN), so that block 1's first steps are
 * widened and issued beside block 0's last wgmmas rather than after a drain.
 * Seventy-first session: kernel lab GEMM1 at 1536 rows -1.0-1.3 %; mega fwd W4A8 -0.5-1.1 % at T >=
 * 512, MXFP8 -0.5-1 % at 8192 (flat at 512, pro 2048 +0.6 % inside its spread). */
template <int FMT, int BMA, int NW, int CT>
__device__ __forceinline__ void fr_blocks_mx(float (*acc)[BMA / 2], const fr_addr &ad, int rs, int cs)
{
    uint32_t a[FR_RING_OF(FMT, BMA)][4];
    fr_block_steps<FMT, BMA, 0, NW, CT, true, 1>(acc[0], ad, rs, cs, a);
    fr_block_steps<FMT, BMA, 1, NW, CT, true, 2>(acc[1], ad, rs, cs, a);
}

/* NVFP4: the words of raw stage rs for both m64 blocks (x[b][w], y[b][w]: block b at weight rows
 * 64 b BSTEP, word w) and its first multipliers (r.m). */
template <int BSTEP = 1>
__device__ __forceinline__ void fr_nv_words(uint32_t (&x)[2][4], uint32_t (&y)[2][4], fr_raw &r, const fr_addr &ad, int rs)
{
#pragma unroll
    for (int i = 0; i < 8; i++) fr_load_word<RS_NVFP4>(x[i % 2][i / 2], y[i % 2][i / 2], ad, rs, BSTEP * (i % 2), i / 2);
    fr_load_mult_nv(r, ad, rs, 0, 0);
}

/* NVFP4 on stage (rs, cs), its words and first multipliers loaded (fr_nv_words): no promotion, so
 * the two m64 blocks' k16 steps alternate into their own accumulators acc[0], acc[1] (16 commit
 * groups, FR_NV_RING - 1 wgmmas in flight while a fragment is widened). Returns with the last
 * FR_NV_RING - 1 steps in flight: the caller drains (wgmma_wait<0>) before it releases the stage. */
template <int BMA, int NW = BMA, int BSTEP = 1> /* BSTEP: blocks b at weight rows 64 b BSTEP on (2: the kernel lab's pipelined form) */
__device__ __forceinline__ void fr_nv_steps(float (*acc)[BMA / 2], const fr_addr &ad, int rs, int cs, const uint32_t (&x)[2][4],
                                            const uint32_t (&y)[2][4], fr_raw &r)
{
    const uint32_t act = ad.act + cs * FR_A_STAGE(BMA);
    uint32_t a[FR_NV_RING][4];
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int kk = i / 2, b = i % 2; /* k16 step, m64 block */
        if (i >= FR_NV_RING) wgmma_wait<FR_NV_RING - 1>(); /* step i - FR_NV_RING freed a[i % FR_NV_RING] */
        fr_step_bytes<RS_NVFP4>(r, x[b][kk / 2], y[b][kk / 2], kk);
        fr_widen_step<RS_NVFP4>(a[i % FR_NV_RING], r);
        wgmma_fence();
        uint64_t db = smem_desc_u32(act + (kk / 4) * BMA * 128) + 2 * (kk % 4);
        fr_wgmma<NW>(acc[b], a[i % FR_NV_RING], db, 1);
        wgmma_commit();
        if (i < 15) fr_load_mult_nv(r, ad, rs, BSTEP * ((i + 1) % 2), (i + 1) / 2);
    }
}

/* Wait until K stage k's raw (weight) stage and fp16 (activation) stage are full.
 * STAMPS: the kernel lab's clock stamps (FR_TRACE) around the waits; off where wgmmas are in flight
 * (their shared-memory stores there cost the lab's AHEAD tiles 3-5 %). */
template <bool STAMPS, typename S>
__device__ __forceinline__ void fr_wait_stage(S &s, const gemm_args &g, int k)
{
    if (STAMPS) FR_TRACE(5);
    tile_wait(g, &s.raw_full[k % S::RAW], (k / S::RAW) & 1);
    tile_wait(g, &s.cvt_full[k % S::CVT], (k / S::CVT) & 1);
    if (STAMPS) FR_TRACE(6);
    if (STAMPS && k == 0) FR_TRACE(1);
}

/* NVFP4: wait for stage k, then load its words and first multipliers. */
template <bool STAMPS, typename S>
__device__ __forceinline__ void fr_nv_ready(S &s, const gemm_args &g, const fr_addr &ad, int k, uint32_t (&x)[2][4],
                                            uint32_t (&y)[2][4], fr_raw &r)
{
    fr_wait_stage<STAMPS>(s, g, k);
    fr_nv_words(x, y, r, ad, k % S::RAW);
}

/* NVFP4's K loop. AHEAD (one block an SM): each stage's last steps run beside the next stage's
 * barrier waits and word loads, which otherwise wait with the tensor pipe drained (a wgmma left
 * in flight over the loop's back-edge instead: ptxas serialises the RS wgmmas, C7512); the paired
 * instances (two blocks an SM, CT 2) have not the registers (the mega kernel's spilled 68 bytes).
 * Seventy-first session: kernel lab at flash T = 8192's shape, the 128- / 144-row GEMM1 tiles -1.8
 * / -2.4 %, GEMM2 -1.5 %; mega fwd -0.5-1.5 % (flash), 0-0.5 % (pro) at T >= 512. */
template <int BMA, int NW, bool AHEAD, typename S>
__device__ __forceinline__ void fr_consume_nv(S &s, const gemm_args &g, const fr_addr &ad, float (*acc)[BMA / 2])
{
    static_assert(!AHEAD || (S::RAW >= 2 && S::CVT >= 2), "AHEAD waits for the next stage before it frees this one");
    const int n_k = g.K / FR_BK;
    uint32_t x[2][4], y[2][4];
    fr_raw r;
    if (AHEAD) fr_nv_ready<true>(s, g, ad, 0, x, y, r);
#pragma unroll 1
    for (int kt = 0; kt < n_k; kt++) {
        const int rs = kt % S::RAW, cs = kt % S::CVT;
        if (!AHEAD) fr_nv_ready<true>(s, g, ad, kt, x, y, r);
        fr_nv_steps<BMA, NW>(acc, ad, rs, cs, x, y, r);
        if (AHEAD && kt + 1 < n_k) fr_nv_ready<false>(s, g, ad, kt + 1, x, y, r);
        wgmma_wait<0>();
        mbar_arrive(&s.raw_empty[rs]);
        mbar_arrive(&s.cvt_empty[cs]);
    }
}

/* acc += part * s, s of the fragment's activation columns 8 j + 2 q, +1 (the
 * pair at shared address sxw + 32 j): FP8-BLOCK's s_x * s_w. */
template <int BMA>
__device__ __forceinline__ void fr_promote(float *acc, const float *part, uint32_t sxw)
{
#pragma unroll
    for (int j = 0; j < BMA / 8; j++) {
        float s0, s1;
#ifdef FR_LAB_NO_SCALE_LOADS /* the kernel lab: the promotions without their shared loads */
        s0 = __uint_as_float(0x3f800000u + j), s1 = __uint_as_float(0x3f800001u + j);
#else
        fr_ld_f32x2(sxw + 32 * j, s0, s1);
#endif
        acc[4 * j] = fmaf(part[4 * j], s0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], s1, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], s0, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
    }
}

/* MX, once after the K loop: the sums of the fragment's activation columns
 * 8 j + 2 q, +1 times their 2^ref_x (the pair at sxw + 32 j) and 2^ref_w of
 * rows g, g + 8 (at sw, sw + 32): powers of two, so exact (one sum over K
 * whose operands carry the rest of each scale, fr_store_scales and the
 * weights' records). */
template <int BMA>
__device__ __forceinline__ void fr_scale_sums(float *acc, uint32_t sxw, uint32_t sw)
{
    const float wg = fr_ld_f32(sw), wg8 = fr_ld_f32(sw + 32);
#pragma unroll
    for (int j = 0; j < BMA / 8; j++) {
        float s0, s1;
        fr_ld_f32x2(sxw + 32 * j, s0, s1);
        acc[4 * j] *= s0 * wg, acc[4 * j + 1] *= s1 * wg, acc[4 * j + 2] *= s0 * wg8, acc[4 * j + 3] *= s1 * wg8;
    }
}

/* The fragments (weight rows g, g + 8 of a block at column c0; activation
 * columns 8 j + 2 q, +1) transposed into C[activation row][column]. */
template <int BMA>
__device__ __forceinline__ void fr_store_fragment(float (*C)[FR_BN + 4], const float *acc, int c0, int g, int q)
{
#pragma unroll
    for (int j = 0; j < BMA / 8; j++) {
        int r = 8 * j + 2 * q;
        C[r][c0 + g] = acc[4 * j], C[r + 1][c0 + g] = acc[4 * j + 1];
        C[r][c0 + g + 8] = acc[4 * j + 2], C[r + 1][c0 + g + 8] = acc[4 * j + 3];
    }
}

/* The narrower Ns the 128-row instance runs: 64 and 96, but FP8-BLOCK's
 * exact mega kernel spilled with three K loops, so it keeps 96 (which
 * serves more of its tiles once 128-row tiles start at 60 rows per expert). */
#ifndef FR_N96_OF /* the kernel lab may try others */
#define FR_N64_OF(FMT) ((FMT) != RS_FP8_BLOCK)
#define FR_N96_OF(FMT) 1
#endif

/* FP8-BLOCK's and MX's K loop (fr_consume's): stage by stage, each drained and released before the next
 * one's waits (MX at one block an SM: both m64 blocks one run, fr_blocks_mx). */
template <int FMT, int BMA, int NW, int CT, typename S>
__device__ __forceinline__ void fr_consume_blocks(S &s, const gemm_args &g, const fr_addr &ad, float (*acc)[BMA / 2], float *part)
{
#pragma unroll 1
    for (int kt = 0; kt < g.K / FR_BK; kt++) {
        int rs = kt % S::RAW, cs = kt % S::CVT;
        fr_wait_stage<true>(s, g, kt);
        if constexpr (FR_MX(FMT) && CT == 1) { /* one fp32 sum over K: the scales folded whole (fr_store_scales) */
            fr_blocks_mx<FMT, BMA, NW, CT>(acc, ad, rs, cs);
        } else if constexpr (FR_MX(FMT)) { /* paired: block by block (fewer registers live) */
            fr_block<FMT, BMA, 0, NW, CT, true>(acc[0], ad, rs, cs);
            fr_block<FMT, BMA, 1, NW, CT, true>(acc[1], ad, rs, cs);
        } else {
            fr_block<FMT, BMA, 0, NW, CT>(part, ad, rs, cs);
            fr_promote<NW>(acc[0], part, ad.sxw + cs * FR_SXW_STAGE(BMA));
            fr_block<FMT, BMA, 1, NW, CT>(part, ad, rs, cs);
            fr_promote<NW>(acc[1], part, ad.sxw + cs * FR_SXW_STAGE(BMA));
        }
        mbar_arrive(&s.raw_empty[rs]);
        mbar_arrive(&s.cvt_empty[cs]); /* after the promotions: they read the stage's scales */
    }
    if constexpr (FR_MX(FMT)) { /* the sums times 2^(ref_x + ref_w), from the last stage (no loads follow it in this tile) */
        const int kt = g.K / FR_BK - 1, rs = kt % S::RAW, cs = kt % S::CVT;
        fr_scale_sums<NW>(acc[0], ad.sxw + cs * FR_SXW_STAGE(BMA), ad.sw + rs * FR_WREC_STAGE(FMT));
        fr_scale_sums<NW>(acc[1], ad.sxw + cs * FR_SXW_STAGE(BMA), ad.sw + rs * FR_WREC_STAGE(FMT) + 256);
    }
}

/* The consumers' K loop: every stage's wgmmas with N = NW activation rows
 * (BMA, or fewer where the tile's valid rows allow: a wgmma's first NW
 * columns of accumulators are those of the wider one, and each output
 * element is the same m64nNk16 chain whatever N, so the sums are the same
 * bits; rows past NW keep their zeros, which no epilogue reads). */
template <int FMT, int BMA, int NW, int CT, bool A16>
__device__ __forceinline__ void fr_consume(fr_smem<FMT, BMA, CT, A16> &s, const gemm_args &g, const fr_addr &ad,
                                           float (*acc)[BMA / 2], float *part)
{
    if constexpr (FR_NV(FMT)) fr_consume_nv<BMA, NW, CT == 1>(s, g, ad, acc);
    else fr_consume_blocks<FMT, BMA, NW, CT>(s, g, ad, acc, part);
}

/* CHUNK_EPILOGUE: the epilogue by chunks of 8 columns per lane
 * (epilogue_chunks, the same bytes; off where the caller lacks the
 * registers). EPILOGUE false: none, the caller runs fr_epilogue_after. */
/* Every thread of a 384-thread block calls it; BMA = 128, 64, 32 or 16 activation
 * rows (the same sums, bit for bit: each output element is one m64nNk16
 * chain whatever N); ta / tb: raw maps with boxes of BMA x 128 and 256 x 128
 * bytes (128-byte swizzle). Ends with the block
 * synchronised and shared memory free again. */
/* The tile's shared memory: smem_raw rounded up to 1024 bytes. PINNED:
 * computed in an asm volatile, at each tile, not hoisted out of a
 * persistent kernel's loop (FP8-BLOCK's mega kernel spilled the hoisted
 * pointer around fr_epilogue_after's call; the other kernels spill with the
 * asm instead). */
template <bool PINNED>
__device__ __forceinline__ uint8_t *fr_align_1024(uint8_t *smem_raw)
{
    if constexpr (!PINNED) return (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *p;
    asm volatile("{\n\t.reg .u64 a;\n\tadd.u64 a, %1, 1023;\n\tand.b64 %0, a, -1024;\n}" : "=l"(p) : "l"(smem_raw));
    return p;
}

/* The tile's shared memory in its kernel (EPILOGUE false: the mega kernel,
 * whose shared memory is __align__(1024), checked at launch in
 * mega_forward). FP8-BLOCK's there: smem_raw as is. The rounded pointer, 64
 * bits kept across the tile, was what ptxas spilled (pinned) or serialised
 * the wgmmas for (C7511, not pinned) once the n128 loop kept its descriptors
 * in uniform registers. The others keep fr_align_1024 (as is, QG's and
 * W4A8's 128-row mega kernels serialised: ptxas's allocation moves). */
template <int FMT, bool EPILOGUE>
__device__ __forceinline__ uint8_t *fr_tile_base(uint8_t *smem_raw)
{
    if constexpr (FMT == RS_FP8_BLOCK && !EPILOGUE) return smem_raw;
    return fr_align_1024<FR_FP8B(FMT) && !EPILOGUE>(smem_raw);
}

/* The 128-row instances' GEMM1 outputs in MXFP8 / NVFP4 by chunks inside the
 * consumers (epilogue's QGLU): every format that outputs them (FP8-BLOCK's
 * kernel, which never does, spilled 16 bytes with the code). MXFP8's split
 * kernel spilled 12 until the shorter SwiGLU (47c6a19); by chunks its split
 * fwd is 4-9 % faster at T >= 2048 (docs/benchmarks.md). The smaller
 * instances take them by chunks anyway (epilogue). */
#define FR_SPLIT_QGLU(FMT, BMA) ((BMA) >= 128 && ((FMT) == RS_W4A8 || (FMT) == RS_NVFP4 || (FMT) == RS_MXFP8))

template <int FMT, int BMA, bool CHUNK_EPILOGUE = true, bool EPILOGUE = true, typename HOOK = fr_no_hook,
          int CTAS = FR_CTAS_OF(FMT, BMA), bool A16 = false>
__device__ __forceinline__ void fp8_rs_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                            uint8_t *smem_raw, int e, int row0, int rows_valid, int n0)
{
    typedef fr_smem<FMT, BMA, CTAS, A16> smem_t;
    static_assert(FR_SMEM_BYTES_CT(FMT, BMA, CTAS) <= FR_SMEM_LIMIT, "the register tile's shared memory");
    static_assert(sizeof(float) * BMA * (FR_BN + 4) <= offsetof(smem_t, sxw), "the C tile overlaps the scales");
    /* (QG's raw stages start 128 bytes on: it reads them through wgmma descriptors, not fr_load_word) */
    static_assert(FR_QG(FMT) || offsetof(smem_t, rb) % 1024 == 0,
                  "the raw weight stages 1024-aligned: the TMA swizzles by address, the consumers by row (fr_load_word)");
    smem_t &s = *(smem_t *)fr_tile_base<FMT, EPILOGUE>(smem_raw);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    static_assert(!A16 || FR_A16_OF(FMT, BMA, CTAS), "the A16 form: MX, NVFP4 or FP8-BLOCK at 128 rows (NVFP4, MX at 144), one block an SM");
    if (threadIdx.x == 0) {
        constexpr int NT = FR_WIDEN_THREADS(BMA);
        /* A16: the widening threads arrive nowhere; the fp16 stages land by TMA (one arrival, the expect_tx) */
        for (int i = 0; i < smem_t::RAW; i++) mbar_init(&s.raw_full[i], 1), mbar_init(&s.raw_empty[i], (smem_t::ARAW || A16 ? 0 : NT) + 256);
        for (int i = 0; i < smem_t::ARAW; i++) mbar_init(&s.act_full[i], 1), mbar_init(&s.act_empty[i], NT);
        /* (FP8-BLOCK's A16: warps 1-3 stage the scales and arrive, fr_produce_scales) */
        for (int i = 0; i < smem_t::CVT; i++) mbar_init(&s.cvt_full[i], A16 ? (FR_FP8B(FMT) ? 96 : 1) : NT), mbar_init(&s.cvt_empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        s.row0 = row0, s.rows_valid = rows_valid, s.n0 = n0;
        s.c_scale = FR_NV(FMT) ? __fdiv_rn(1.0f, __fmul_rn(g.a_gs, g.b_gs[e])) : 1.0f; /* as the mma.sync tile */
    }
    __syncthreads();
    if (wg == 0) {
        if constexpr (CTAS == 1) setmaxnreg_dec<FR_PRODUCER_REGS(FMT, BMA)>();
        if constexpr (A16) fr_produce_a16<FMT, BMA, HOOK>(s, g, ta, tb, e, row0, rows_valid, n0, g.K / FR_BK, t);
        else fr_produce<FMT, BMA, HOOK>(s, g, ta, tb, e, row0, rows_valid, n0, g.K / FR_BK, t);
        /* the next item's claim: its atomic's round trip runs beside the
         * consumers' last stages and the epilogue, not after them */
        if (t == 0 && g.claim_counter) {
            s.claimed = atomicAdd(g.claim_counter, 1);
            HOOK::claimed(s.claimed);
        }
        FR_TRACE(7);
        wg_registers_back_wait(); /* asleep until the consumers gave their registers back */
        if constexpr (CTAS == 1) setmaxnreg_inc<FR_LAUNCH_REGS>();
    } else { /* consumer h: weight rows [128 h, 128 h + 128), one 128-row scale block */
        if constexpr (CTAS == 1) setmaxnreg_inc<FR_CONSUMER_REGS(FMT, BMA)>();
        int tc = t; /* FP8-BLOCK's A16 mega kernel: computed here at each tile, not hoisted out of its item loop
                     * (its 8 fragment-word offsets, live across the loop, spilled 32-64 bytes) */
        if constexpr (A16 && FR_FP8B(FMT)) asm volatile("mov.b32 %0, %1;\n" : "=r"(tc) : "r"(t));
        int h = wg - 1, lane = tc % 32, g8 = 16 * (tc / 32) + lane / 4, q = lane % 4;
        const fr_addr ad = fr_addr_of(s, h, g8, q);
        float acc[2][BMA / 2], part[BMA / 2];
#pragma unroll
        for (int i = 0; i < BMA / 2; i++) acc[0][i] = 0.0f, acc[1][i] = 0.0f;
        if constexpr (BMA == 128) { /* the wgmma's N: the valid rows rounded up to 64 (FR_N64_OF), 96 or 128 */
            /* rows: from lane 0, so that ptxas knows the branch uniform and keeps
             * each loop's descriptors in uniform registers (on a per-thread value
             * it computed them in vector registers, R2UR per wgmma: the n128
             * stage 15-26 % longer, mega fwd 1-3 % slower at T = 8192); from
             * shared memory, so that rows_valid is not kept alive into the
             * consumers. FP8-BLOCK's mega kernel had no registers for this form
             * (C7511, cmake/ptxas_guard.sh refuses it) until fr_tile_base */
            const int rows = __shfl_sync(0xFFFFFFFFu, s.rows_valid, 0);
            if (FR_N64_OF(FMT) && rows <= 64) fr_consume<FMT, BMA, FR_N64_OF(FMT) ? 64 : 128>(s, g, ad, acc, part);
            else if (FR_N96_OF(FMT) && rows <= 96) fr_consume<FMT, BMA, FR_N96_OF(FMT) ? 96 : 128>(s, g, ad, acc, part);
            else fr_consume<FMT, BMA, 128>(s, g, ad, acc, part);
        } else if constexpr (BMA == 144) { /* the 144-row instances: N 96, 128 or 144 (as above) */
            const int rows = __shfl_sync(0xFFFFFFFFu, s.rows_valid, 0);
            if (rows <= 96) fr_consume<FMT, BMA, 96>(s, g, ad, acc, part);
            else if (rows <= 128) fr_consume<FMT, BMA, 128>(s, g, ad, acc, part);
            else fr_consume<FMT, BMA, 144>(s, g, ad, acc, part);
        } else {
            /* a point ptxas knows the warp converged at: the K loop then runs in
             * uniform control flow and keeps its wgmma descriptors in uniform
             * registers (without it: R2UR before each wgmma, 13-24 % more
             * instructions a stage in every 16- / 32- / 64-row instance) */
            __syncwarp();
            fr_consume<FMT, BMA, BMA>(s, g, ad, acc, part);
        }
        FR_TRACE(2);
        wg_consumer_barrier(); /* every stage read; C may now overwrite them */
        FR_TRACE(12);
        float(*C)[FR_BN + 4] = (float(*)[FR_BN + 4])(void *)&s;
        h = threadIdx.x / 128 - 1, lane = threadIdx.x % 32, g8 = 16 * (t / 32) + lane / 4, q = lane % 4;
        if constexpr (FR_NV(FMT)) { /* the sums x 2^14 (exact: FR_F16_2P7), then as the mma.sync tile */
            const float sc = s.c_scale;
#pragma unroll
            for (int i = 0; i < BMA / 2; i++)
                acc[0][i] = __fmul_rn(__fmul_rn(acc[0][i], 16384.0f), sc), acc[1][i] = __fmul_rn(__fmul_rn(acc[1][i], 16384.0f), sc);
        }
        fr_store_fragment<BMA>(C, acc[0], 128 * h, g8, q);
        fr_store_fragment<BMA>(C, acc[1], 128 * h + 64, g8, q);
        if constexpr (EPILOGUE) {
            wg_consumer_barrier();
            FR_TRACE(13);
            epilogue<BMA, FR_BN, CHUNK_EPILOGUE, FR_SPLIT_QGLU(FMT, BMA)>(g, C, s.row0, s.rows_valid, s.n0, threadIdx.x - 128, 256);
        }
        FR_TRACE(3);
        if constexpr (CTAS == 1) setmaxnreg_dec<FR_LAUNCH_REGS>();
        wg_registers_back_arrive();
    }
    __syncthreads(); /* every TMA landed, every arrival made: the rings and C are free */
    if (threadIdx.x == 0) {
        tile_wait_report(g.error);
        for (int i = 0; i < smem_t::RAW; i++) mbar_inval(&s.raw_full[i]), mbar_inval(&s.raw_empty[i]);
        for (int i = 0; i < smem_t::ARAW; i++) mbar_inval(&s.act_full[i]), mbar_inval(&s.act_empty[i]);
        for (int i = 0; i < smem_t::CVT; i++) mbar_inval(&s.cvt_full[i]), mbar_inval(&s.cvt_empty[i]);
    }
}

/* The epilogue of a tile run with EPILOGUE = false, by every thread of the
 * block after it (C stays in shared memory until the next tile's first
 * barrier). A call, not inlined: inlined into the mega kernel, the chunk
 * epilogue made ptxas spill 24-300 bytes there (2026-11-30). */
template <int FMT, int BMA, bool A16 = false>
__device__ __noinline__ void fr_epilogue_after(const gemm_args &g, uint8_t *smem_raw)
{
    typedef fr_smem<FMT, BMA, FR_CTAS_OF(FMT, BMA), A16> smem_t; /* the tile's form: its row0, rows_valid, n0 */
    smem_t &s = *(smem_t *)fr_tile_base<FMT, false>(smem_raw);
    /* FOLD16: NVFP4's 128- and 144-row tiles compile GEMM1's outputs folded into fp16 (g.out16: mega's) */
    epilogue<BMA, FR_BN, true, true, true, FR_NV(FMT) && BMA >= 128>(g, (float(*)[FR_BN + 4])(void *)&s, s.row0, s.rows_valid,
                                                                   s.n0, threadIdx.x, blockDim.x);
}

/* The item thread 0 claimed in the tile just run (g.claim_counter set); for
 * thread 0 itself, which wrote it: no barrier needed. */
template <int FMT, int BMA, bool A16 = false>
__device__ __forceinline__ int fr_claimed(uint8_t *smem_raw)
{
    return ((fr_smem<FMT, BMA, FR_CTAS_OF(FMT, BMA), A16> *)fr_tile_base<FMT, false>(smem_raw))->claimed;
}

/* The tile's format for a GEMM's operand formats (-1: none). */
__host__ __device__ __forceinline__ int fr_format(moe_ep_format_t a, moe_ep_format_t b)
{
    if (a == MOE_EP_FORMAT_FP8_BLOCK && b == MOE_EP_FORMAT_FP8_BLOCK) return RS_FP8_BLOCK;
    if (a == MOE_EP_FORMAT_MXFP8 && b == MOE_EP_FORMAT_MXFP8) return RS_MXFP8;
    if (a == MOE_EP_FORMAT_MXFP8 && b == MOE_EP_FORMAT_MXFP4) return RS_W4A8;
    if (a == MOE_EP_FORMAT_NVFP4 && b == MOE_EP_FORMAT_NVFP4) return RS_NVFP4;
    return -1;
}

/* The raw tensor maps of one GEMM for the tile of BMA activation rows:
 * FP8-BLOCK, MXFP8 or W4A8 operands, N % 256, K % 128; W4A8's weights as
 * rows of K / 2 bytes, boxes of 64 bytes with the 64-byte swizzle. */
template <int BMA>
static inline moe_ep_status_t fr_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb)
{
    int fmt = fr_format(g.a_fmt, g.b_fmt);
    if (fmt < 0 || g.N % FR_BN || g.K % FR_BK)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL,
                           "the FP8 register tile: FP8-BLOCK, MXFP8 or W4A8 operands, N %% 256, K %% 128");
    if (g.a16 && FR_A16_OF(fmt, BMA, 1)) /* the A16 form: fp16 rows a16_pitch apart, the fp16 stages' boxes */
        MOE_EP_CHECK(tma_map_rows_pitch(ta, g.a16, rows_capacity, g.K, g.a16_pitch, 2, 128, BMA));
    else if (fmt == RS_NVFP4) MOE_EP_CHECK(tma_map_rows_swizzle64(ta, g.a, rows_capacity, g.K / 2, BMA));
    else MOE_EP_CHECK(tma_map_k_major(ta, g.a, rows_capacity, g.K, 1, BMA));
    if (fmt == RS_W4A8 || fmt == RS_NVFP4) return tma_map_rows_swizzle64(tb, g.b, (int64_t)g.E * g.N, g.K / 2, FR_BN);
    return tma_map_k_major(tb, g.b, (int64_t)g.E * g.N, g.K, 1, FR_BN);
}

#endif
