/* Grouped GEMM on the Hopper TMA + wgmma tiles: a persistent grid walks the
 * output tiles (tile -> expert and row block through the plan's tile prefix),
 * each computed by the bf16 tile (HGMMA, 128 x 256, wgmma_tile.cuh), the
 * FP8-BLOCK fast-accumulation tile (QGMMA, 64 x 256, qgmma_tile.cuh) or the
 * exact FP8-BLOCK (and, experiment build, NVFP4) tile on fp16 HGMMA (64 x
 * 256, f16_widen_tile.cuh). */
#include "kernels/sm90/f16_widen_tile.cuh"

template <int KIND>
struct tile_shape {
    static constexpr int BM = KIND == TILE_BF16 ? WG_BM : 64, BN = 256;
    static constexpr size_t SMEM = KIND == TILE_BF16 ? WG_SMEM_BYTES : KIND == TILE_QGMMA ? QG_SMEM_BYTES : FF_SMEM_BYTES;
    static constexpr int WIDEN = KIND == TILE_NVFP4_F16 ? WIDEN_NVFP4 : WIDEN_FP8; /* the widening tiles' format */
};

template <int KIND>
__global__ void __launch_bounds__(WG_THREADS, 1) grouped_gemm_wgmma(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                                     const __grid_constant__ CUtensorMap tb)
{
    constexpr int BM = tile_shape<KIND>::BM, BN = tile_shape<KIND>::BN;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    if (moe_ep_dev_failed(g.error)) return;
    int n_tiles = g.N / BN, tiles = g.tile_offset[g.E] * n_tiles;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) { /* persistent: one CTA per SM */
        int mt = tile / n_tiles, n0 = (tile % n_tiles) * BN;
        int e = tile_expert(g.tile_offset, g.E, mt);
        int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * BM;
        int rows_valid = (int)min((int64_t)BM, (int64_t)g.expert_offset[e + 1] - row0);
        if constexpr (KIND == TILE_QGMMA) qgmma_tile(g, &ta, &tb, smem_raw, e, row0, rows_valid, n0);
        else if constexpr (KIND == TILE_FP8_F16 || KIND == TILE_NVFP4_F16)
            f16_widen_tile<tile_shape<KIND>::WIDEN>(g, &ta, &tb, smem_raw, e, row0, rows_valid, n0);
        else wgmma_tile(g, &ta, &tb, smem_raw, e, row0, rows_valid, n0);
    }
}

/* Grid: the SMs given to the layer (num_sms), at most the tiles' upper bound
 * (full tiles plus one partial tile per expert). */
template <int KIND>
static moe_ep_status_t launch(const gemm_args &g, int64_t rows_capacity, int num_sms, cudaStream_t s, const char *name)
{
    constexpr int BM = tile_shape<KIND>::BM, BN = tile_shape<KIND>::BN;
    const size_t smem = tile_shape<KIND>::SMEM;
    CUtensorMap ta, tb;
    MOE_EP_CHECK(KIND == TILE_QGMMA ? qg_make_maps(g, rows_capacity, &ta, &tb)
                 : KIND == TILE_BF16 ? wg_make_maps(g, rows_capacity, &ta, &tb)
                                     : ff_make_maps<tile_shape<KIND>::WIDEN>(g, rows_capacity, &ta, &tb));
    cudaError_t e = cudaFuncSetAttribute(grouped_gemm_wgmma<KIND>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    int64_t m_tiles = (rows_capacity + BM - 1) / BM + g.E, grid = m_tiles * (g.N / BN);
    if (grid > num_sms) grid = num_sms;
    grouped_gemm_wgmma<KIND><<<(unsigned)grid, WG_THREADS, smem, s>>>(g, ta, tb);
    return moe_ep_launch_check(name);
}

moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int kind, int64_t rows_capacity, int num_sms,
                                         cudaStream_t s, const char *name)
{
    switch (kind) {
    case TILE_BF16: return launch<TILE_BF16>(g, rows_capacity, num_sms, s, name);
    case TILE_QGMMA: return launch<TILE_QGMMA>(g, rows_capacity, num_sms, s, name);
#ifdef MOE_EP_NVFP4_F16_TILE
    case TILE_NVFP4_F16: return launch<TILE_NVFP4_F16>(g, rows_capacity, num_sms, s, name);
#endif
    default: return launch<TILE_FP8_F16>(g, rows_capacity, num_sms, s, name);
    }
}
