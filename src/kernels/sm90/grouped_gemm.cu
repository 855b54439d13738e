/* Grouped GEMMs of the split backend's expert stage.
 *
 *   GEMM1: h[rows][2I] = xq[rows][H] . W13[e]^T, then a = SwiGLU(gate, up)
 *          (fp32), rounded once into the activation format -> aq[rows][I].
 *   GEMM2: y[rows][H] = aq[rows][I] . W2[e]^T, rounded once into the wire
 *          format -> y[rows][H].
 *
 * A persistent grid walks the tiles (gemm_tile.cuh: BM = 16 or 64 rows of one
 * expert x BN = 256 (GEMM1) or 128 (GEMM2) columns); tile -> (expert, row
 * block) through the tile prefix of the plan; GEMM2 on 256 columns with the
 * 64-row tile. 128-row tiles go to the TMA +
 * wgmma kernel (bf16, wgmma_gemm.cu). */
#include "kernels/sm90/gemm_tile.cuh"

template <int BM, int BN, int MODE, int SB>
__global__ void __launch_bounds__(gemm_threads<BM, BN>(), 1) grouped_gemm(gemm_args g)
{
    extern __shared__ __align__(16) uint8_t smem[];
    if (moe_ep_dev_failed(g.error)) return;
    gemm_tables_init<BM, BN, MODE>(g, smem);
    __syncthreads();
    int n_tiles = g.N / BN, tiles = g.tile_offset[g.E] * n_tiles;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int mt = tile / n_tiles, n0 = (tile % n_tiles) * BN;
        int e = tile_expert(g.tile_offset, g.E, mt);
        int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * BM;
        int rows_valid = (int)min((int64_t)BM, (int64_t)g.expert_offset[e + 1] - row0);
        gemm_tile<BM, BN, MODE, SB>(g, smem, e, row0, rows_valid, n0);
    }
}

/* Persistent grid: d.num_sms x CTAs per SM, as many as fit (occupancy) or
 * d.gemm_ctas_per_sm when set, capped by what fits. */
template <int BM, int BN, int MODE, int SB>
static moe_ep_status_t launch_gemm(const gemm_args &g, const moe_ep_split_dims_t &d, cudaStream_t s, const char *name)
{
    size_t smem = gemm_smem_bytes<BM, BN, MODE>(g.a_fmt, g.b_fmt);
    cudaError_t e = cudaFuncSetAttribute(grouped_gemm<BM, BN, MODE, SB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s (%zu B smem): %s", name, smem, cudaGetErrorString(e));
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grouped_gemm<BM, BN, MODE, SB>, gemm_threads<BM, BN>(), smem);
    if (per_sm < 1) per_sm = 1;
    if (d.gemm_ctas_per_sm > 0 && d.gemm_ctas_per_sm < per_sm) per_sm = d.gemm_ctas_per_sm;
    grouped_gemm<BM, BN, MODE, SB><<<d.num_sms * per_sm, gemm_threads<BM, BN>(), smem, s>>>(g);
    return moe_ep_launch_check(name);
}

template <int BM, int BN>
static moe_ep_status_t launch_for_format(const gemm_args &g, const moe_ep_split_dims_t &d, cudaStream_t s, const char *name)
{
    switch (g.a_fmt) {
    case MOE_EP_FORMAT_BF16: return launch_gemm<BM, BN, MODE_BF16, 0>(g, d, s, name);
    case MOE_EP_FORMAT_MXFP8: return launch_gemm<BM, BN, MODE_FP8, 32>(g, d, s, name);
    case MOE_EP_FORMAT_FP8_BLOCK: return launch_gemm<BM, BN, MODE_FP8, 128>(g, d, s, name);
    default: return launch_gemm<BM, BN, MODE_CVT, 0>(g, d, s, name);
    }
}

/* The TMA + wgmma kernel (wgmma_gemm.cu) for tile_rows 128 (bf16) and for
 * the FP8 register tile of FP8-BLOCK, MXFP8, W4A8 and NVFP4 (128, 64, 32 or
 * 16 rows: moe_ep_single_tile_allows; FP8-BLOCK with fp8_fast_accum its QGMMA
 * instances); else mma.sync, 16 or 64 rows. */
template <int BN>
static moe_ep_status_t launch_tiles(const gemm_args &g, const moe_ep_split_dims_t &d, cudaStream_t s, const char *name)
{
    int64_t rows = (int64_t)d.R * d.T_max * d.K;
    if (moe_ep_rs_tile_fits(d.path, d.H, d.I)) { /* FP8-BLOCK with fp8_fast_accum too: its QGMMA instances */
        if (!moe_ep_single_tile_allows(d.tile_rows))
            return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: %d-row tiles (the register tile has 128, 64, 32 or 16)",
                               name, d.tile_rows);
        const bool qgmma = moe_ep_qgmma_on(d.path, d.H, d.I, d.fp8_fast_accum);
        return moe_ep_launch_gemm_wgmma(g, qgmma ? TILE_QGMMA : TILE_RS, d.tile_rows, rows, d.num_sms, s, name);
    }
    if (d.tile_rows == 128)
        return moe_ep_launch_gemm_wgmma(g, d.bf16_swapped ? TILE_BF16_SWAPPED : TILE_BF16, 0, rows, d.num_sms, s, name);
    return d.tile_rows == 16 ? launch_for_format<16, BN>(g, d, s, name) : launch_for_format<64, BN>(g, d, s, name);
}

/* GEMM g's rows folded once into b.act16 for the 128-row register tile's A16
 * form (the buffer: moe_ep_act16_on; this forward: dims.a16), g.a16 then set; else g as it is. */
static moe_ep_status_t fold_for_a16(gemm_args &g, const moe_ep_split_dims_t &d, const moe_ep_split_bufs_t &b, cudaStream_t s)
{
    if (!b.act16 || !d.a16 || d.tile_rows != 128) return MOE_EP_SUCCESS;
    MOE_EP_CHECK(moe_ep_fold_rows(g, b.act16, (int64_t)d.R * d.T_max * d.K, d.num_sms, s));
    g.a16 = b.act16;
    return MOE_EP_SUCCESS;
}

extern "C" moe_ep_status_t moe_ep_launch_experts(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                 moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    gemm_args g1 = moe_ep_gemm1_args(*d, *b), g2 = moe_ep_gemm2_args(*d, *b);
    MOE_EP_CHECK(fold_for_a16(g1, *d, *b, s));
    moe_ep_status_t st = launch_tiles<256>(g1, *d, s, "grouped_gemm1_swiglu");
    if (st != MOE_EP_SUCCESS) return st;
    MOE_EP_CHECK(fold_for_a16(g2, *d, *b, s)); /* GEMM1's output rows, into the same buffer (GEMM1 is done with it) */
    /* GEMM2 on 256 columns where the 64-row mma.sync tile runs: 16 warps per
     * CTA instead of 8 (one CTA per SM either way: registers), as GEMM1
     * (ncu, mxfp8 flash T=8192: GEMM1's 64 x 256 tiles did 2x the FLOPs of
     * GEMM2's 64 x 128 in 1.6x the time). The bits do not depend on it. */
    if (d->tile_rows == 64 && d->H % 256 == 0) return launch_tiles<256>(g2, *d, s, "grouped_gemm2_wire");
    return launch_tiles<128>(g2, *d, s, "grouped_gemm2_wire");
}
