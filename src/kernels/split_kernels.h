/* The split backend's kernels as C-callable launchers, and the device buffers
 * they share. Included by C host code and by the .cu files.
 *
 * Rows. A row is one (rank, token, slot) whose expert id is >= 0. Rows are laid
 * out expert-major over all experts on this GPU: expert e owns rows
 * [expert_offset[e], expert_offset[e+1]); GEMM tiles are tile_rows (16, 64 or
 * 128) rows of one expert.
 * In an emulated group the experts of rank q are contiguous, so rank q's
 * receive buffer is the span of its experts' rows.
 *
 * Row formats (per row, data then scales in separate arrays):
 *   activation rows (xq: [rows][H], aq: [rows][I]) in the path's activation
 *   format; output rows (y: [rows][H]) in the wire format. Data bytes per row:
 *   bf16 2n, E4M3 n, E2M1 n/2; scales per row: n/block entries of 1 byte (MX,
 *   NVFP4), 2 bytes (FP4 wire, bf16) or 4 bytes (FP8-BLOCK, fp32).
 *
 * Weights (kernel layout), per local expert:
 *   w13: [2I][H] rows in 256-row tiles, tile j = gate rows [128j, 128j+128)
 *        then up rows [I+128j, I+128j+128), so one 256-wide GEMM1 tile holds
 *        matching gate and up columns for 128 SwiGLU outputs.
 *   w2:  [H][I] rows as in the checkpoint.
 *   Layers on the register tile (moe_ep_rs_tile_on) permute the bytes
 *   within each 16-byte chunk of every data row (weights.cu,
 *   prep_permute_fragments) so that a consumer lane reads its fragment
 *   bytes as one 32-bit word; E2M1 words with their bits spread
 *   (codec.h: moe_ep_e2m1_word_spread) for fr_e2m1_pairs.
 *   scales per row as for activation rows; FP8-BLOCK: the 128x128 tile scale
 *   repeated on each of the tile's rows ([rows][K/128] fp32).
 *   w13_gs, w2_gs: [experts] NVFP4 encode scales S (1 otherwise).
 */
#ifndef MOE_EP_SPLIT_KERNELS_H
#define MOE_EP_SPLIT_KERNELS_H

#include "moe_ep.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_EP_GPU_MAX_RANKS 64 /* local ranks of one launch (emulated group) */

/* The TMA + wgmma tiles a layer can run (both GEMMs: N % 256, K % 64 or 128):
 * bf16 the 128-row HGMMA tile (a knob choice: its bits equal mma.sync's);
 * FP8-BLOCK, MXFP8 and W4A8 the fp16 HGMMA register tile, FP8-BLOCK with
 * config.fp8_fast_accum its QGMMA instances (RS_FP8_QG), at every T and on both
 * GPU backends (moe_ep_single_tile, moe_ep_single_tile_rows). */
static inline int moe_ep_hgmma_fits(moe_ep_path_t path, int H, int I)
{
    return path == MOE_EP_PATH_BF16 && H % 256 == 0 && I % 128 == 0;
}

static inline int moe_ep_qgmma_on(moe_ep_path_t path, int H, int I, int fp8_fast_accum)
{
    return fp8_fast_accum && path == MOE_EP_PATH_FP8_BLOCK && H % 256 == 0 && I % 128 == 0;
}

/* The exact FP8 register tile (fp8_rs_tile.cuh: fp16 HGMMA, E4M3 and E2M1
 * widened exactly, 128, 64, 32 or 16 activation rows): FP8-BLOCK, MXFP8 and
 * W4A8 with their power-of-two scales folded into the fp16 operands, NVFP4. */
#define MOE_EP_RS_TILE_ROWS 128
static inline int moe_ep_rs_tile_fits(moe_ep_path_t path, int H, int I)
{
    return path != MOE_EP_PATH_BF16 && H % 256 == 0 && I % 128 == 0;
}

/* The layers that run the register tile's fp16 instances (and store their
 * weights in its layout, weights.cu: prep_permute_fragments; the QGMMA
 * instances read the natural layout). */
static inline int moe_ep_rs_tile_on(moe_ep_path_t path, int H, int I, int fp8_fast_accum)
{
    return moe_ep_rs_tile_fits(path, H, I) && !moe_ep_qgmma_on(path, H, I, fp8_fast_accum);
}

/* MX and NVFP4 layers on the register tile keep their weights' multipliers
 * made at load (rs_mults.cuh): 12 (MXFP8), 20 (W4A8) or 16 (NVFP4) bytes
 * per weight row and 128 K. */
static inline int moe_ep_weight_records_on(moe_ep_path_t path, int H, int I, int fp8_fast_accum)
{
    return path != MOE_EP_PATH_FP8_BLOCK && moe_ep_rs_tile_on(path, H, I, fp8_fast_accum);
}
/* Layers on the register tile's fp16 instances (MXFP8, W4A8, NVFP4, exact
 * FP8-BLOCK) fold their activation rows once into fp16 for the 128-row tiles
 * (bufs.act16, fold_rows.cu), which then take them by TMA instead of
 * widening them in each of an m tile's N / 256 tiles. */
static inline int moe_ep_act16_on(moe_ep_path_t path, int H, int I, int fp8_fast_accum)
{
    return moe_ep_rs_tile_on(path, H, I, fp8_fast_accum);
}
/* Whether a forward of `rows` rows over E local experts on the 128-row tile
 * folds (dims.a16; the bits are the widening's either way): W4A8, NVFP4 and
 * FP8-BLOCK always; MXFP8 from two m tiles an expert on average. Paired A / B on an H100
 * (fifty-seventh session, docs/benchmarks.md): MXFP8 at 96 rows an expert
 * (flash T = 512) lost 3-6 % on both backends (the fold's passes, or in mega
 * its items' latency before an expert's only m tile), won 5-10 % at 384 and
 * 1536; W4A8 won 1-9 % at all three. Since the A16 form's deeper fp16 ring
 * (fr_smem's A16 layout, seventieth session) mega folds MXFP8 at every row
 * count: at flash / pro T = 512 -4.5 / -4.2 % against the widening form,
 * where split's forward lost 2.5 % (flash) and keeps the threshold. */
/* Elements between two rows of act16: one buffer holds GEMM1's rows (H) and then GEMM2's (I). */
#define MOE_EP_ACT16_PITCH(H, I) ((H) > (I) ? (H) : (I))
#ifndef MOE_EP_A16_MXFP8_MIN_ROWS /* a lab switch: -DMOE_EP_A16_MXFP8_MIN_ROWS=N */
#define MOE_EP_A16_MXFP8_MIN_ROWS 256
#endif
static inline int moe_ep_a16_rows(moe_ep_backend_t backend, moe_ep_path_t path, long long rows, int E)
{
    return path == MOE_EP_PATH_W4A8 || path == MOE_EP_PATH_NVFP4 || path == MOE_EP_PATH_FP8_BLOCK ||
           (path == MOE_EP_PATH_MXFP8 && (backend == MOE_EP_BACKEND_MEGA || rows >= (long long)MOE_EP_A16_MXFP8_MIN_ROWS * E));
}
/* Mega layers whose GEMM1 epilogue folds GEMM2's rows itself (bufs.act16_2): NVFP4, whose fold
 * takes a chunk alone (MX's needs the row's largest scale, known only once all of the row's GEMM1
 * tiles are done; FP8-BLOCK's 128-row mega instance spilled 8 bytes with it); given act16. */
static inline int moe_ep_act16_2_on(moe_ep_backend_t backend, moe_ep_path_t path)
{
    return backend == MOE_EP_BACKEND_MEGA && path == MOE_EP_PATH_NVFP4;
}
#define MOE_EP_WEIGHT_RECORD_BYTES(path, rows, K) \
    ((rows) / 256 * ((K) / 128) * ((path) == MOE_EP_PATH_NVFP4 ? 4 : (path) == MOE_EP_PATH_W4A8 ? 5 : 3) * 256 * 4)

/* Layers whose GEMMs run one tile kind at every T, so that a row's
 * bits never depend on the batch: the QGMMA instances (their bits differ from the
 * FP8 mma.sync's); FP8-BLOCK's register tile, whose bits equal the FP8
 * mma.sync tiles' on almost every input but not on all (test_tiles, seed
 * 1796001347: 8 tokens alone on the 16-row mma.sync tile differed from the
 * same tokens in a batch on the fp16 tile); MXFP8's, which sums each
 * 128-wide K block in one fp16 HGMMA sum instead of four promoted 32-blocks. */
static inline int moe_ep_single_tile(moe_ep_path_t path, int H, int I, int fp8_fast_accum)
{
    return moe_ep_qgmma_on(path, H, I, fp8_fast_accum) || moe_ep_rs_tile_fits(path, H, I);
}

/* Their tile rows for a forward of `rows` rows over E local experts (the
 * register tile, fp16 or QGMMA instances alike: its wgmma's N is the tile's
 * rows, so a tile's tensor work grows with its rows, valid or not, except in
 * the 128-row instance, whose N is its valid rows rounded up to 64 or 96
 * where it can): the smallest of
 * 16, 32, 64, 128 that holds most experts' rows in one tile, since an
 * expert with more rows than a tile runs two, each reading all its weights.
 * Bounds on the average rows per expert, from `dev/tile_rows_sweep.sh`
 * (forced tile rows, EP8 slices, uniform routing, mega and split,
 * 2026-12-01, docs/benchmarks.md): 16 up to 8 (at 12: 32 by 2-3 %); 32 up
 * to 28 (32 by 4-14 % at 20-24, -4..+10 % at 26-28; 64 by 4-17 % at 30);
 * 64 up to 60 (64 by 9-34 % at 36-48 and 2-10 % at 56; since the 128-row
 * tile's wgmma N follows its valid rows (fr_consume), 128 by 3-15 % at 64
 * and 10-30 % at 72-80; twenty-fifth session). */
static inline int moe_ep_single_tile_rows(long long rows, int E)
{
    if (rows <= 8LL * E) return 16;
    if (rows <= 28LL * E) return 32;
    return rows <= 60LL * E ? 64 : MOE_EP_RS_TILE_ROWS;
}

/* The bf16 HGMMA tile swapped (wgmma_tile.cuh: the tile's rows as the
 * wgmma's N, rounded up to 8) for a forward of `rows` rows over E local
 * experts: where they get 128 < rows <= 512 on average (2-4 m tiles, the
 * partial ones of 85-112 rows cost what they hold, not a whole tile). EP8
 * slice, every tile swapped against none (thirty-first session, 2-3 paired
 * rounds): pro T = 2048 (256 an expert) fwd 0.90-0.93; T = 512 (64, 96)
 * 1.00-1.02 split, 1.02-1.09 mega; T = 8192 (1024, 1536) 1.015-1.03.
 * The same bits either way. */
#ifndef MOE_EP_BF16_SWAP_MIN_ROWS /* a compile-time switch for A/B builds of the rule's lower bound */
#define MOE_EP_BF16_SWAP_MIN_ROWS 128
#endif
static inline int moe_ep_bf16_swapped(long long rows, int E)
{
    return rows > (long long)MOE_EP_BF16_SWAP_MIN_ROWS * E && rows <= 512LL * E;
}

/* Tile rows a single-tile layer accepts as knobs (the register tile's
 * instances all give the same bits: each output element is one chain of
 * wgmma m64nNk16 whatever N). */
static inline int moe_ep_single_tile_allows(int v)
{
    return v == 16 || v == 32 || v == 64 || v == MOE_EP_RS_TILE_ROWS;
}

/* Device error word: kind in the top 8 bits, detail below. */
#define MOE_EP_DEVERR_BAD_EXPERT 1u  /* detail: the slot index */
#define MOE_EP_DEVERR_BAD_TOKENS 2u  /* detail: the rank */
#define MOE_EP_DEVERR_TIMEOUT 3u     /* detail: which wait */
#define MOE_EP_DEVERR_SMEM_ALIGN 5u  /* detail: the mega kernel's shared memory address (not 1024-byte aligned) */
#define MOE_EP_WAIT_TILE 0x900001u   /* a GEMM tile's pipeline (mbarrier) wait: a bug (hopper.cuh) */
/* The bound of a GEMM tile's pipeline wait in ns: timeout_seconds, at most
 * 4 s (hopper.cuh times it on the 32-bit globaltimer; a stage takes
 * microseconds, so this bound is only ever met by a bug). */
#define MOE_EP_TILE_WAIT_MAX_NS 4000000000u
static inline uint32_t moe_ep_tile_wait_ns(double timeout_seconds)
{
    double ns = timeout_seconds * 1e9;
    return ns > (double)MOE_EP_TILE_WAIT_MAX_NS ? MOE_EP_TILE_WAIT_MAX_NS : (uint32_t)ns;
}

typedef struct moe_ep_split_dims {
    int R, E, K, H, I, T_max; /* local ranks, experts on this GPU, top-k, dims */
    int first_expert;         /* global id of local expert 0 */
    int num_experts_global;   /* valid ids are [0, num_experts_global) */
    moe_ep_path_t path;
    moe_ep_wire_t wire;
    float swiglu_limit, fc1_scale, fc2_scale;
    int num_sms;
    int tile_rows;            /* GEMM tile rows (16, 64; 128: HGMMA, bf16), chosen per forward */
    int bf16_swapped;         /* tile_rows 128: its bf16-output tiles swapped (moe_ep_bf16_swapped), per forward */
    int a16;                  /* tile_rows 128, layers on the fp16 register tile: the rows folded once into fp16 first (bufs.act16,
                                 moe_ep_a16_rows), per forward */
    int fp8_fast_accum;       /* config.fp8_fast_accum: FP8-BLOCK on the register tile's QGMMA instances */
    int gemm_ctas_per_sm;     /* GEMM CTAs per SM (grid = num_sms x this), capped by
                                 occupancy; 0 = as many as fit (occupancy calculator) */
    uint32_t tile_wait_ns;    /* bound of the GEMM tiles' pipeline waits (moe_ep_tile_wait_ns) */
} moe_ep_split_dims_t;

typedef struct moe_ep_split_bufs {
    uint8_t *w13, *w13_scales, *w2, *w2_scales;
    float *w13_gs, *w2_gs;
    uint32_t *w13_mult, *w2_mult; /* MX and NVFP4 layers on the register tile (moe_ep_weight_records_on):
                                     the weights' multiplier records, [E][N / 256][K / 128][record]
                                     (rs_mults.cuh), else NULL */
    int32_t *tokens;          /* [R] T of each rank for this forward */
    int32_t *expert_count;    /* [E] */
    int32_t *expert_offset;   /* [E+1] */
    int32_t *tile_offset;     /* [E+1] prefix of tile_rows-row tiles */
    int32_t *slot_pos;        /* [R][T_max][K] position in the expert's rows, -1 unused */
    int32_t *row_of_slot;     /* [R][T_max][K] row id, -1 unused */
    uint8_t *xq, *xq_scales;  /* [R*T_max*K] activation rows of H */
    uint8_t *aq, *aq_scales;  /* [R*T_max*K] activation rows of I */
    uint8_t *y, *y_scales;    /* [R*T_max*K] wire rows of H */
    uint16_t *act16;          /* the fp16 register tile's layers (moe_ep_act16_on), 128-row tiles: [R*T_max*K][max(H, I)] the
                                 activation rows folded once into fp16 (fold_rows.cu), GEMM1's then
                                 GEMM2's; NULL: each tile widens its rows itself */
    uint16_t *act16_2;        /* mega layers of NVFP4 with act16 (moe_ep_act16_2_on): [R*T_max*K][I] GEMM2's rows, folded
                                 by GEMM1's 128-row epilogue (gemm_args.out16) instead of by fold items in
                                 act16 once an m tile's GEMM1 tiles are done; NULL: fold items */
    uint32_t *error;          /* device error word */
    uint32_t *error_mapped;   /* host-mapped copy, written at the end of forward */
} moe_ep_split_bufs_t;

/* Per-forward inputs of every local rank, passed by value to the kernels. */
typedef struct moe_ep_split_io {
    const uint16_t *x[MOE_EP_GPU_MAX_RANKS];
    const int32_t *ids[MOE_EP_GPU_MAX_RANKS];
    const float *weights[MOE_EP_GPU_MAX_RANKS];
    uint16_t *out[MOE_EP_GPU_MAX_RANKS];
    int32_t t_host[MOE_EP_GPU_MAX_RANKS];
    const int32_t *t_device; /* [R], or NULL to use t_host */
} moe_ep_split_io_t;

/* Forward stages; every launcher returns MOE_EP_ERROR_CUDA on a launch error. */
moe_ep_status_t moe_ep_launch_plan(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                   const moe_ep_split_io_t *io, moe_ep_stream_t stream);
moe_ep_status_t moe_ep_launch_dispatch(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                       const moe_ep_split_io_t *io, moe_ep_stream_t stream);
moe_ep_status_t moe_ep_launch_experts(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                      moe_ep_stream_t stream);
moe_ep_status_t moe_ep_launch_combine(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                      const moe_ep_split_io_t *io, moe_ep_stream_t stream);
moe_ep_status_t moe_ep_launch_publish_error(const moe_ep_split_bufs_t *b, moe_ep_stream_t stream);

/* Weight preprocessing of n experts starting at local expert le0. src_* are
 * device copies of the checkpoint (layout of moe_ep_expert_weights_t); for
 * format BF16 the layer quantizes to the path's weight format. gs13/gs2 are
 * device arrays [n] of NVFP4 scales for pre-quantized NVFP4 weights. */
moe_ep_status_t moe_ep_launch_prep_weights(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                           moe_ep_format_t src_format, int le0, int n,
                                           const void *src_w13, const void *src_w13_scales,
                                           const float *src_gs13, const void *src_w2,
                                           const void *src_w2_scales, const float *src_gs2,
                                           float *scratch, moe_ep_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
