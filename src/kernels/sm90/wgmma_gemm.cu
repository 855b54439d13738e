/* Grouped GEMM for bf16 operands on the Hopper path: a persistent grid walks
 * the 128 x 256 output tiles (tile -> expert and row block through the plan's
 * tile prefix, in 128-row units), each computed by the TMA + wgmma tile of
 * wgmma_tile.cuh. */
#include "kernels/sm90/wgmma_tile.cuh"

__global__ void __launch_bounds__(WG_THREADS, 1) grouped_gemm_wgmma(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                                     const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    if (moe_ep_dev_failed(g.error)) return;
    int n_tiles = g.N / WG_BN, tiles = g.tile_offset[g.E] * n_tiles;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) { /* persistent: one CTA per SM */
        int mt = tile / n_tiles, n0 = (tile % n_tiles) * WG_BN;
        int e = tile_expert(g.tile_offset, g.E, mt);
        int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * WG_BM;
        int rows_valid = (int)min((int64_t)WG_BM, (int64_t)g.expert_offset[e + 1] - row0);
        wgmma_tile(g, &ta, &tb, smem_raw, e, row0, rows_valid, n0);
    }
}

/* Grid: the SMs given to the layer (num_sms), at most the tiles' upper bound
 * (full 128-row tiles plus one partial tile per expert). */
moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int64_t rows_capacity, int num_sms, cudaStream_t s,
                                         const char *name)
{
    CUtensorMap ta, tb;
    MOE_EP_CHECK(wg_make_maps(g, rows_capacity, &ta, &tb));
    cudaError_t e = cudaFuncSetAttribute(grouped_gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM_BYTES);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    int64_t m_tiles = (rows_capacity + WG_BM - 1) / WG_BM + g.E, grid = m_tiles * (g.N / WG_BN);
    if (grid > num_sms) grid = num_sms;
    grouped_gemm_wgmma<<<(unsigned)grid, WG_THREADS, WG_SMEM_BYTES, s>>>(g, ta, tb);
    return moe_ep_launch_check(name);
}
