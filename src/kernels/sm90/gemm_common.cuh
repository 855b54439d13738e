/* Shared by the grouped GEMM kernels (mma.sync in grouped_gemm.cu, wgmma in
 * wgmma_gemm.cu): arguments, tile -> expert lookup, and the fused epilogues
 * (SwiGLU + requantization for GEMM1, wire rounding for GEMM2). */
#ifndef MOE_EP_GEMM_COMMON_CUH
#define MOE_EP_GEMM_COMMON_CUH

#include "kernels/gpu_common.cuh"
#include "kernels/rows.cuh"
#include "kernels/sm90/rs_mults.cuh" /* fold_nv_word (epilogue_chunks_of's FOLD16) */

struct gemm_args {
    moe_ep_format_t a_fmt, b_fmt, out_fmt;
    const uint8_t *a, *a_scales;   /* [rows][K] activation rows */
    const uint8_t *b, *b_scales;   /* [experts][N][K] weights (kernel layout) */
    const float *b_gs;             /* [experts] NVFP4 S of the weights */
    float a_gs;                    /* NVFP4 S of the activation */
    uint8_t *out, *out_scales;     /* [rows][N_out] */
    float out_gs;                  /* NVFP4 S of the output (GEMM1) */
    int K, N, N_out, E;
    float swiglu_limit;
    const int32_t *expert_offset, *tile_offset;
    const uint32_t *error;
    int a_scale_stride;            /* bytes per row of a_scales (moe_ep_act_scale_stride) */
    int64_t out_scale_stride;      /* bytes per row of out_scales */
    const uint32_t *b_mult;        /* MX and NVFP4 weights on the register tile: their multiplier
                                      records (rs_mults.cuh), else NULL */
    uint32_t wait_ns;              /* bound of the tiles' pipeline waits (tile_wait, moe_ep_tile_wait_ns) */
    int32_t *claim_counter;        /* mega's item counter: the register tile's thread 0 claims the
                                      block's next item from it once its last load is out
                                      (fr_claimed); NULL: no claim (split) */
    const uint16_t *a16;           /* MX / NVFP4 rows folded once into fp16 ([rows][a16_pitch], fold_rows.cuh) for the
                                      128-row register tile's A16 form; NULL: the tile widens a itself */
    int a16_pitch;                 /* elements a row of a16 (MOE_EP_ACT16_PITCH): one buffer for GEMM1's
                                      rows and then GEMM2's (mega: each m tile's rows in place) */
    uint16_t *out16;               /* GEMM1 of mega's NVFP4 layers on the 128-row tile (bufs.act16_2): its outputs
                                      folded into fp16 ([rows][N_out], fold_nv_word) for GEMM2's A16 tile, in
                                      place of the NVFP4 codes and scales a fold item would fold; NULL: those */
};

/* Split's fold pass (fold_rows.cu): GEMM g's MX or NVFP4 rows into out ([rows_capacity][g.a16_pitch] fp16). */
moe_ep_status_t moe_ep_fold_rows(const gemm_args &g, uint16_t *out, int64_t rows_capacity, int num_sms, cudaStream_t s);

/* GEMM1 (xq . W13^T, SwiGLU, requant -> aq) and GEMM2 (aq . W2^T -> y, wire)
 * of the expert stage on the buffers of split_kernels.h. */
__host__ __device__ __forceinline__ gemm_args moe_ep_gemm1_args(const moe_ep_split_dims_t &d, const moe_ep_split_bufs_t &b)
{
    moe_ep_format_t af = moe_ep_path_act_format(d.path), wf = moe_ep_path_weight_format(d.path);
    gemm_args g = {af, wf, af, b.xq, b.xq_scales, b.w13, b.w13_scales, b.w13_gs, d.fc1_scale,
                   b.aq, b.aq_scales, d.fc2_scale, d.H, 2 * d.I, d.I, d.E, d.swiglu_limit,
                   b.expert_offset, b.tile_offset, b.error,
                   (int)moe_ep_act_scale_stride(af, d.H), moe_ep_act_scale_stride(af, d.I), b.w13_mult,
                   d.tile_wait_ns, NULL, NULL, MOE_EP_ACT16_PITCH(d.H, d.I), NULL};
    return g;
}

__host__ __device__ __forceinline__ gemm_args moe_ep_gemm2_args(const moe_ep_split_dims_t &d, const moe_ep_split_bufs_t &b)
{
    moe_ep_format_t af = moe_ep_path_act_format(d.path), wf = moe_ep_path_weight_format(d.path);
    moe_ep_format_t yf = moe_ep_wire_format(d.wire);
    gemm_args g = {af, wf, yf, b.aq, b.aq_scales, b.w2, b.w2_scales, b.w2_gs,
                   d.fc2_scale, b.y, b.y_scales, 1.0f, d.I, d.H, d.H, d.E, 0.0f,
                   b.expert_offset, b.tile_offset, b.error,
                   (int)moe_ep_act_scale_stride(af, d.I), moe_ep_row_scale_bytes(yf, d.H), b.w2_mult,
                   d.tile_wait_ns, NULL, NULL, MOE_EP_ACT16_PITCH(d.H, d.I), NULL};
    return g;
}

/* Expert of m-tile mt: the last e with tile_offset[e] <= mt. */
__device__ __forceinline__ int tile_expert(const int32_t *tile_offset, int E, int mt)
{
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tile_offset[mid] <= mt) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Writes one block of an output row: encode n values v into format f at
 * element offset c of a row of N_out elements. E2M1_SHORT: NVFP4 and the FP4
 * wire by e2m1_block16 (the codec's bytes, ~2x fewer instructions), else by
 * the codec (the bf16 wgmma tiles: with the shortcuts in their serial path,
 * dead there, ptxas serialised mega's 128-row bf16 wgmmas, C7515). */
template <bool E2M1_SHORT = true>
__device__ __forceinline__ void store_out_block(moe_ep_format_t f, const float *v, int blk, int64_t row,
                                                int64_t N_out, int64_t c, float S, uint8_t *out,
                                                uint8_t *out_scales, int64_t scale_stride)
{
    uint8_t *d = out + row * moe_ep_row_data_bytes(f, N_out);
    uint8_t *s = out_scales + row * scale_stride;
    if (f == MOE_EP_FORMAT_BF16) {
        for (int i = 0; i < blk; i += 2) *(uint32_t *)(d + 2 * (c + i)) = moe_ep_pack_bf16x2(v[i], v[i + 1]);
    } else if (f == MOE_EP_FORMAT_MXFP8) {
        s[c / 32] = moe_ep_mxfp8_block_encode(v, d + c);
    } else if (f == MOE_EP_FORMAT_FP8_BLOCK) {
        ((float *)s)[c / 128] = moe_ep_fp8_block_encode(v, d + c);
    } else if (!E2M1_SHORT) {
        uint8_t q[16];
        if (f == MOE_EP_FORMAT_NVFP4) s[c / 16] = moe_ep_nvfp4_block_encode(v, S, q);
        else ((uint16_t *)s)[c / 16] = moe_ep_fp4_wire_block_encode(v, q);
        for (int i = 0; i < 8; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
    } else { /* E2M1: 8 bytes of nibbles (c % 16 == 0) */
        uint2 q;
        const uint32_t sb = e2m1_block16(f, v, S, &q);
        if (f == MOE_EP_FORMAT_NVFP4) s[c / 16] = (uint8_t)sb;
        else ((uint16_t *)s)[c / 16] = (uint16_t)sb;
        *(uint2 *)(d + c / 2) = q;
    }
}

/* SwiGLU in the chunk epilogue: FTZ, moe_ep_swiglu_ftz (the same bits, 7
 * instructions fewer), else moe_ep_swiglu. The register tiles' GEMM1 outputs
 * in MXFP8 / NVFP4 / FP8-BLOCK take FTZ; the bf16 wgmma tiles' chunks do not
 * (with it in their FP8-BLOCK or bf16 branch, ptxas serialised the wgmmas of
 * mega's 128-row bf16 instance: C7515; their outputs from registers take it,
 * wg_bf16_pair). */
template <bool FTZ>
__device__ __forceinline__ float swiglu_of(float g, float u, float c)
{
    if constexpr (FTZ) return moe_ep_swiglu_ftz(g, u, c);
    else return moe_ep_swiglu(g, u, c);
}

/* The epilogue by chunks: a lane takes 8 consecutive output columns of a
 * row (two 16-byte reads of C, SwiGLU of GEMM1, encode_chunk: a block's
 * lanes share its amax and flags through shuffles, giving the whole-block
 * encoder's bytes), so a warp covers 2 (GEMM1) or 1 (GEMM2, BN = 256) rows
 * at once; compiled per output format (F) and GEMM (GLU), so the item's row
 * and column are shifts and no format test runs per chunk. The epilogue is
 * bound by instruction issue (2 warps per scheduler, Nsight Compute on
 * dev/wgmma_lab/epilogue_rate.cu: IPC 0.36-0.44 per scheduler, 140-970
 * instructions per chunk), not by shared memory or stores.
 * Rows of 128 (GEMM1) or BN = 256 (GEMM2) output columns; nthreads % 32 == 0,
 * every thread of each warp calling. */
template <int BM, int BN, moe_ep_format_t F, bool GLU, bool FTZ = false, bool FOLD16 = false>
__device__ __forceinline__ void epilogue_chunks_of(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid,
                                                   int n0, int tid, int nthreads)
{
    static_assert(BN == 256, "chunks of a row: 16 (GEMM1) or 32 (GEMM2) lanes");
    static_assert(F == MOE_EP_FORMAT_BF16 || F == MOE_EP_FORMAT_MXFP8 || F == MOE_EP_FORMAT_FP8_BLOCK ||
                      (F == MOE_EP_FORMAT_NVFP4 && GLU),
                  "the outputs epilogue_chunks runs");
    constexpr int CHUNKS = (GLU ? 128 : BN) / 8;
    constexpr int BLK = F == MOE_EP_FORMAT_BF16 ? 8 : F == MOE_EP_FORMAT_MXFP8 ? 32 : F == MOE_EP_FORMAT_NVFP4 ? 16 : 128;
    const int64_t c0 = GLU ? n0 / 2 : n0, row_bytes = moe_ep_row_data_bytes(F, g.N_out);
    const int lane = tid & 31;
    const float inv_S = nvfp4_inv_scale(F, g.out_gs);
    /* items of the valid rows, rounded up to whole warps (rows past the valid ones: encoded, not stored) */
    const int items = min(BM * CHUNKS, (rows_valid * CHUNKS + 31) & ~31);
    for (int base = tid - lane; base < items; base += nthreads) { /* warp-uniform: shuffles inside */
        const int item = base + lane, m = item / CHUNKS, j = (item % CHUNKS) * 8;
        const float4 *p = (const float4 *)&C[m][j];
        const float4 lo = p[0], hi = p[1];
        float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        if constexpr (GLU) {
            const float4 *pu = (const float4 *)&C[m][128 + j];
            const float4 ul = pu[0], uh = pu[1];
            const float u[8] = {ul.x, ul.y, ul.z, ul.w, uh.x, uh.y, uh.z, uh.w};
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = swiglu_of<FTZ>(v[i], u[i], g.swiglu_limit);
        }
        const enc_chunk e = encode_chunk_of(F, v, g.out_gs, inv_S);
        if (m >= rows_valid) continue; /* whole blocks: a block's lanes share its row */
        const int64_t c = c0 + j;
        uint8_t *d = g.out + (row0 + m) * row_bytes;
        if constexpr (F == MOE_EP_FORMAT_BF16) {
            *(uint4 *)(d + 2 * c) = e.q;
            continue;
        }
        if constexpr (FOLD16) { /* NVFP4 folded (g.out16): the folds' bits (fold_nv_word_of) */
            *(uint4 *)(g.out16 + (row0 + m) * g.N_out + c) = fold_nv_word_of(e.q.x, e.scale & 0xFFu);
            continue;
        }
        if constexpr (F == MOE_EP_FORMAT_NVFP4) *(uint32_t *)(d + c / 2) = e.q.x; /* E2M1 nibbles */
        else *(uint2 *)(d + c) = make_uint2(e.q.x, e.q.y); /* E4M3 bytes */
        if (c % BLK) continue;
        uint8_t *s = g.out_scales + (row0 + m) * g.out_scale_stride;
        if constexpr (F == MOE_EP_FORMAT_FP8_BLOCK) ((uint32_t *)s)[c / BLK] = e.scale;
        else s[c / BLK] = (uint8_t)e.scale;
    }
}

/* GEMM outputs that epilogue_chunks runs in every tile with CHUNKS (true).
 * GEMM1's MXFP8 / NVFP4 outputs: epilogue_quant_glu (where that compiles
 * without spilling). The FP4 wire stays on the serial epilogue, which the
 * lab measured faster for it (dev/wgmma_lab/epilogue_rate.cu on the H200,
 * cycles per 128-row tile; see docs/benchmarks.md). */
__device__ __forceinline__ bool epilogue_by_chunks(moe_ep_format_t f, bool glu)
{
    return glu ? f == MOE_EP_FORMAT_FP8_BLOCK || f == MOE_EP_FORMAT_BF16 : f == MOE_EP_FORMAT_BF16 || f == MOE_EP_FORMAT_MXFP8;
}

/* GEMM1 outputs in MXFP8 or NVFP4. The serial epilogue runs them one
 * thread per 32- or 16-value block, SwiGLU and encode one after the other;
 * by chunks (compiled per format) they run faster at every tile size: mega
 * fwd -3-9 % at T >= 512 on MXFP8 and W4A8 (128-row tiles), -3-5 % at
 * decode (2 valid rows had kept 8 threads of 256 busy). The same bytes (a
 * block's lanes share its amax). They take the chunks wherever the caller
 * compiles them without spilling: epilogue's QGLU, and
 * epilogue_small_tile_chunks. */
__device__ __forceinline__ bool epilogue_quant_glu(moe_ep_format_t f, bool glu)
{
    return glu && (f == MOE_EP_FORMAT_MXFP8 || f == MOE_EP_FORMAT_NVFP4);
}

/* The same in the tiles of 64 rows or fewer: MXFP8 at any valid rows (at
 * 64 the serial path took 21 k cycles of a 64-row MXFP8 GEMM1 tile, 3x the
 * FP8-BLOCK chunks': lab, LAB_MID); NVFP4 while the valid rows give the
 * serial path fewer blocks than threads (with the chunks at every row count
 * mega's 64-row NVFP4 kernel spilled 48 bytes; kept out of
 * epilogue_by_chunks for that too). */
__device__ __forceinline__ bool epilogue_small_tile_chunks(moe_ep_format_t f, bool glu, int rows_valid, int nthreads)
{
    if (f == MOE_EP_FORMAT_MXFP8) return glu;
    return epilogue_quant_glu(f, glu) && rows_valid * (128 / moe_ep_format_block(f)) < nthreads;
}

/* epilogue_chunks for the outputs epilogue_by_chunks picks, those of
 * epilogue_small_tile_chunks (the tiles of 64 rows or fewer) and (QGLU)
 * every GEMM1 output in MXFP8 or NVFP4. */
template <int BM, int BN, bool QGLU = false, bool FOLD16 = false>
__device__ void epilogue_chunks(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid, int n0, int tid,
                                int nthreads)
{
    if constexpr (BM <= 64 || QGLU) {
        if (g.N != g.N_out && g.out_fmt == MOE_EP_FORMAT_MXFP8) {
            epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_MXFP8, true, true>(g, C, row0, rows_valid, n0, tid, nthreads);
            return;
        }
        if (g.N != g.N_out && g.out_fmt == MOE_EP_FORMAT_NVFP4) {
            if (FOLD16 && g.out16) /* mega's 128- and 144-row NVFP4 tiles: GEMM2's rows folded here */
                epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_NVFP4, true, true, FOLD16>(g, C, row0, rows_valid, n0, tid, nthreads);
            else
                epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_NVFP4, true, true>(g, C, row0, rows_valid, n0, tid, nthreads);
            return;
        }
    }
    if (g.N != g.N_out && g.out_fmt == MOE_EP_FORMAT_FP8_BLOCK)
        epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_FP8_BLOCK, true, QGLU>(g, C, row0, rows_valid, n0, tid, nthreads);
    else if (g.N != g.N_out) /* the bf16 path's GEMM1 */
        epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_BF16, true>(g, C, row0, rows_valid, n0, tid, nthreads);
    else if (g.out_fmt == MOE_EP_FORMAT_BF16)
        epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_BF16, false>(g, C, row0, rows_valid, n0, tid, nthreads);
    else
        epilogue_chunks_of<BM, BN, MOE_EP_FORMAT_MXFP8, false>(g, C, row0, rows_valid, n0, tid, nthreads);
}

/* Epilogue, run by nthreads threads (tid = 0..nthreads-1). GEMM1 (N = 2 N_out,
 * BN = 256): C holds h; a = SwiGLU(C[m][j], C[m][128 + j]) for the tile's 128
 * outputs, rounded to out_fmt. GEMM2: C holds y, rounded to the wire format.
 * CHUNKS: through epilogue_chunks where that is faster (the same bytes; the
 * wgmma tiles of 256 columns; the mma.sync tiles have no registers to spare
 * for it). Keep the serial path compiled beside it: in the
 * register tile at 128 rows, the chunks alone (the serial path folded away)
 * made ptxas spill 40-50 bytes of the consumers' K loop (2026-11-30).
 * QGLU: GEMM1's MXFP8 / NVFP4 outputs by chunks at any BM (epilogue_quant_glu);
 * a template argument because the tiles that never output them still compile
 * the run-time format's branches (mega's bf16 tile spilled 16 bytes with them).
 * E2M1_SHORT: the serial path's NVFP4 / FP4-wire blocks (store_out_block's).
 * FOLD16: GEMM1's NVFP4 outputs by chunks into g.out16 where that is set (a
 * template argument for the code's sake: only the 128- and 144-row NVFP4 tiles compile it). */
template <int BM, int BN, bool CHUNKS = false, bool QGLU = false, bool E2M1_SHORT = true, bool FOLD16 = false>
__device__ void epilogue(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid, int n0, int tid,
                         int nthreads)
{
    if constexpr (CHUNKS) {
        if (epilogue_by_chunks(g.out_fmt, g.N != g.N_out) ||
            (BM <= 64 && epilogue_small_tile_chunks(g.out_fmt, g.N != g.N_out, rows_valid, nthreads)) ||
            (QGLU && epilogue_quant_glu(g.out_fmt, g.N != g.N_out))) {
            epilogue_chunks<BM, BN, QGLU, FOLD16>(g, C, row0, rows_valid, n0, tid, nthreads);
            return;
        }
    }
    const bool glu = g.N != g.N_out;
    const int width = glu ? 128 : BN; /* output columns of this tile */
    int blk = g.out_fmt == MOE_EP_FORMAT_BF16 ? 8 : moe_ep_format_block(g.out_fmt);
    int64_t c0 = glu ? n0 / 2 : n0; /* first output column */
    for (int item = tid; item < BM * (width / blk); item += nthreads) {
        int m = item / (width / blk), j = (item % (width / blk)) * blk;
        if (m >= rows_valid) continue;
        float *v = &C[m][j];
        if (glu)
            for (int i = 0; i < blk; i++) v[i] = moe_ep_swiglu(v[i], C[m][128 + j + i], g.swiglu_limit);
        store_out_block<E2M1_SHORT>(g.out_fmt, v, blk, row0 + m, g.N_out, c0 + j, g.out_gs, g.out, g.out_scales,
                        g.out_scale_stride);
    }
}

/* The wgmma (TMA + mbarrier, warp-specialised) grouped GEMM, wgmma_gemm.cu:
 * kind TILE_BF16 (bf16 operands, 128-row HGMMA tiles), TILE_RS (the register tile of
 * FP8-BLOCK, MXFP8, W4A8 and NVFP4, rs_rows = 128, 64, 32 or 16 activation
 * rows), TILE_QGMMA (its QGMMA instances: FP8-BLOCK with fp8_fast_accum) or
 * TILE_BF16_SWAPPED (TILE_BF16 with its bf16-output tiles swapped,
 * wgmma_tile.cuh; chosen per forward by moe_ep_bf16_swapped). rs_rows: the
 * register tile's rows (TILE_RS, TILE_QGMMA only). */
enum { TILE_BF16 = 0, TILE_QGMMA = 1, TILE_RS = 2, TILE_BF16_SWAPPED = 3 };
moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int kind, int rs_rows, int64_t rows_capacity,
                                         int num_sms, cudaStream_t s, const char *name);

#endif
