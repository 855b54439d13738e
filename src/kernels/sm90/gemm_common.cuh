/* Shared by the grouped GEMM kernels (mma.sync in grouped_gemm.cu, wgmma in
 * wgmma_gemm.cu): arguments, tile -> expert lookup, and the fused epilogues
 * (SwiGLU + requantization for GEMM1, wire rounding for GEMM2). */
#ifndef MOE_EP_GEMM_COMMON_CUH
#define MOE_EP_GEMM_COMMON_CUH

#include "kernels/gpu_common.cuh"
#include "kernels/rows.cuh"

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
};

/* GEMM1 (xq . W13^T, SwiGLU, requant -> aq) and GEMM2 (aq . W2^T -> y, wire)
 * of the expert stage on the buffers of split_kernels.h. */
__host__ __device__ __forceinline__ gemm_args moe_ep_gemm1_args(const moe_ep_split_dims_t &d, const moe_ep_split_bufs_t &b)
{
    moe_ep_format_t af = moe_ep_path_act_format(d.path), wf = moe_ep_path_weight_format(d.path);
    gemm_args g = {af, wf, af, b.xq, b.xq_scales, b.w13, b.w13_scales, b.w13_gs, d.fc1_scale,
                   b.aq, b.aq_scales, d.fc2_scale, d.H, 2 * d.I, d.I, d.E, d.swiglu_limit,
                   b.expert_offset, b.tile_offset, b.error,
                   (int)moe_ep_act_scale_stride(af, d.H), moe_ep_act_scale_stride(af, d.I)};
    return g;
}

__host__ __device__ __forceinline__ gemm_args moe_ep_gemm2_args(const moe_ep_split_dims_t &d, const moe_ep_split_bufs_t &b)
{
    moe_ep_format_t af = moe_ep_path_act_format(d.path), wf = moe_ep_path_weight_format(d.path);
    moe_ep_format_t yf = moe_ep_wire_format(d.wire);
    gemm_args g = {af, wf, yf, b.aq, b.aq_scales, b.w2, b.w2_scales, b.w2_gs,
                   d.fc2_scale, b.y, b.y_scales, 1.0f, d.I, d.H, d.H, d.E, 0.0f,
                   b.expert_offset, b.tile_offset, b.error,
                   (int)moe_ep_act_scale_stride(af, d.I), moe_ep_row_scale_bytes(yf, d.H)};
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
 * element offset c of a row of N_out elements. */
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
    } else {
        uint8_t q[16];
        if (f == MOE_EP_FORMAT_NVFP4) s[c / 16] = moe_ep_nvfp4_block_encode(v, S, q);
        else ((uint16_t *)s)[c / 16] = moe_ep_fp4_wire_block_encode(v, q);
        for (int i = 0; i < 8; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
    }
}

/* The epilogue for FP8-BLOCK outputs. One item per row and 128-wide block
 * would run 128 values serially on half the threads (Nsight Compute: the
 * epilogue's loads and multiplies among the register tile's largest stalls),
 * so here a lane takes 8 columns and a block's 16 lanes share its amax and
 * flags through shuffles (the *_encode_part codec: the whole-block encoder's
 * bytes, as dispatch).
 * Rows of 128 (GEMM1) or BN (a multiple of 128) columns; nthreads % 32 == 0,
 * every thread of each warp calling. */
template <int BM, int BN>
__device__ void epilogue_lanes(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid, int n0, int tid,
                               int nthreads)
{
    const bool glu = g.N != g.N_out;
    const int chunks = (glu ? 128 : BN) / 8; /* per row: 16 or 32, so a 16-lane block never straddles rows */
    const int64_t c0 = glu ? n0 / 2 : n0, row_bytes = moe_ep_row_data_bytes(g.out_fmt, g.N_out);
    const int lane = tid & 31;
    for (int base = tid - lane; base < BM * chunks; base += nthreads) { /* warp-uniform: shuffles inside */
        int item = base + lane, m = item / chunks, j = (item % chunks) * 8;
        bool on = item < BM * chunks && m < rows_valid;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (on)
            for (int i = 0; i < 8; i++) v[i] = glu ? moe_ep_swiglu(C[m][j + i], C[m][128 + j + i], g.swiglu_limit) : C[m][j + i];
        int nan, inf;
        float amax = block_amax_lanes(v, 16, &nan, &inf);
        uint8_t q[8];
        float scale = moe_ep_fp8_block_encode_part(v, 8, amax, nan || inf, q);
        if (!on) continue;
        uint2 w = make_uint2(0, 0);
        for (int i = 0; i < 4; i++) w.x |= (uint32_t)q[i] << (8 * i), w.y |= (uint32_t)q[4 + i] << (8 * i);
        *(uint2 *)(g.out + (row0 + m) * row_bytes + c0 + j) = w;
        if ((c0 + j) % 128 == 0) ((float *)(g.out_scales + (row0 + m) * g.out_scale_stride))[(c0 + j) / 128] = scale;
    }
}

/* Epilogue, run by nthreads threads (tid = 0..nthreads-1). GEMM1 (N = 2 N_out,
 * BN = 256): C holds h; a = SwiGLU(C[m][j], C[m][128 + j]) for the tile's 128
 * outputs, rounded to out_fmt. GEMM2: C holds y, rounded to the wire format.
 * FP8_BLOCK_LANES: FP8-BLOCK outputs through epilogue_lanes (the register
 * tile; the mma.sync tiles have no registers to spare for it). */
template <int BM, int BN, bool FP8_BLOCK_LANES = false>
__device__ void epilogue(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid, int n0, int tid,
                         int nthreads)
{
    if (FP8_BLOCK_LANES && g.out_fmt == MOE_EP_FORMAT_FP8_BLOCK) {
        epilogue_lanes<BM, BN>(g, C, row0, rows_valid, n0, tid, nthreads);
        return;
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
        store_out_block(g.out_fmt, v, blk, row0 + m, g.N_out, c0 + j, g.out_gs, g.out, g.out_scales,
                        g.out_scale_stride);
    }
}

/* The wgmma (TMA + mbarrier, warp-specialised) grouped GEMM, wgmma_gemm.cu:
 * kind TILE_BF16 (bf16 operands, 128-row HGMMA tiles), TILE_QGMMA (FP8-BLOCK,
 * 64-row QGMMA tiles, fp8_fast_accum) or TILE_RS / TILE_RS_64 (the FP8
 * register tile of FP8-BLOCK, MXFP8 and W4A8, 128 or 64 rows). */
enum { TILE_BF16 = 0, TILE_QGMMA = 1, TILE_RS = 2, TILE_RS_64 = 3 };
moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int kind, int64_t rows_capacity, int num_sms,
                                         cudaStream_t s, const char *name);

#endif
