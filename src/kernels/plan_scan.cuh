/* Expert row offsets and GEMM tile offsets from per-expert row counts, by one
 * block (any blockDim that is a multiple of 32, up to 1024): exclusive scans of
 * count[e] (rows) and ceil(count[e] / tile_rows) (tiles), with the totals in
 * offset[E] and tile_offset[E]. Counts are read through L2 (other blocks of a
 * running kernel may have written them). Used by the split backend's plan_scan
 * kernel (outputs in global memory) and by the mega kernel (shared memory). */
#ifndef MOE_EP_PLAN_SCAN_CUH
#define MOE_EP_PLAN_SCAN_CUH

#include "kernels/gpu_common.cuh"

__device__ __forceinline__ void moe_ep_scan_experts(const int32_t *count, int E, int tile_rows, int32_t *offset,
                                                    int32_t *tile_offset)
{
    __shared__ int32_t warp_rows[32], warp_tiles[32];
    __shared__ int32_t carry_rows, carry_tiles;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (threadIdx.x == 0) carry_rows = carry_tiles = 0;
    __syncthreads();
    for (int base = 0; base < E; base += blockDim.x) {
        int e = base + threadIdx.x;
        int32_t rows = e < E ? __ldcg(&count[e]) : 0;
        int32_t tiles = (rows + tile_rows - 1) / tile_rows;
        int32_t sr = rows, st = tiles; /* inclusive warp scans */
        for (int o = 1; o < 32; o <<= 1) {
            int32_t a = __shfl_up_sync(0xFFFFFFFFu, sr, o), c = __shfl_up_sync(0xFFFFFFFFu, st, o);
            if (lane >= o) sr += a, st += c;
        }
        if (lane == 31) warp_rows[warp] = sr, warp_tiles[warp] = st;
        __syncthreads();
        int32_t pr = 0, pt = 0;
        for (int w = 0; w < warp; w++) pr += warp_rows[w], pt += warp_tiles[w];
        if (e < E) {
            offset[e] = carry_rows + pr + sr - rows;
            tile_offset[e] = carry_tiles + pt + st - tiles;
        }
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) {
            int32_t tr = 0, tt = 0;
            for (int w = 0; w < nwarps; w++) tr += warp_rows[w], tt += warp_tiles[w];
            carry_rows += tr, carry_tiles += tt;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) offset[E] = carry_rows, tile_offset[E] = carry_tiles;
    __syncthreads();
}

#endif
