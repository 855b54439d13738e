/* Grouped GEMM on the Hopper TMA + wgmma tiles: a persistent grid walks the
 * output tiles (tile -> expert and row block through the plan's tile prefix),
 * each computed by the bf16 tile (HGMMA, 128 x 256, wgmma_tile.cuh) or the
 * register tile (fp8_rs_tile.cuh, 128, 64, 32 or 16 x 256): exact fp16 HGMMA
 * with the weights in registers for FP8-BLOCK, MXFP8, W4A8 and NVFP4, QGMMA
 * from shared memory for FP8-BLOCK with fp8_fast_accum (RS_FP8_QG). */
#include "kernels/sm90/fp8_rs_tile.cuh"

/* Instances: TILE_BF16, or KIND_RS + 4 x the register tile's
 * format + its size (0: 128 activation rows, 1: 64, 2: 32, 3: 16). */
#define KIND_RS 8
#define RS_KIND(FMT, SIZE) (KIND_RS + 4 * (FMT) + (SIZE))

template <int KIND>
struct tile_shape {
    static constexpr bool RS = KIND >= KIND_RS;
    static constexpr int RS_FMT = RS ? (KIND - KIND_RS) / 4 : 0;
    static constexpr int BM = KIND == TILE_BF16 ? WG_BM : FR_BM >> ((KIND - KIND_RS) % 4), BN = 256;
    /* blocks per SM: 2 for the paired register tiles of 16 rows; the 32-row ones spilled here at 80
     * registers (with or without register moves) and run as before, one block per SM */
    static constexpr int CTAS = RS && BM <= 16 ? FR_CTAS_OF(RS_FMT, BM) : 1;
    static constexpr size_t SMEM = KIND == TILE_BF16 ? WG_SMEM_BYTES : FR_SMEM_BYTES_CT(RS_FMT, BM, CTAS);
};

/* Tile -> (m tile mt, first column n0) within expert e. TILE_ORDER_N_MAJOR:
 * an expert's tiles column block by column block (its m tiles side by side),
 * so that the blocks running at once read fewer distinct weight tiles (bf16:
 * its tile is bound by L2 throughput, Nsight Compute at pro T = 8192: L2 98 %,
 * hit rate 48 %); else m tile by m tile. The same tiles either way. */
#ifndef MOE_EP_TILE_ORDER_N_MAJOR
#define MOE_EP_TILE_ORDER_N_MAJOR 1
#endif
template <int KIND>
__device__ __forceinline__ void tile_of(const gemm_args &g, int tile, int n_tiles, int e, int &mt, int &n0)
{
    const int first = g.tile_offset[e], li = tile - first * n_tiles;
    if (MOE_EP_TILE_ORDER_N_MAJOR && KIND == TILE_BF16) {
        const int m_e = g.tile_offset[e + 1] - first;
        mt = first + li % m_e, n0 = (li / m_e) * tile_shape<KIND>::BN;
    } else {
        mt = first + li / n_tiles, n0 = (li % n_tiles) * tile_shape<KIND>::BN;
    }
}

template <int KIND>
__device__ __forceinline__ tile_pos tile_pos_of(const gemm_args &g, int tile, int n_tiles)
{
    tile_pos p;
    int mt;
    p.e = tile_expert(g.tile_offset, g.E, tile / n_tiles); /* an expert's tiles are contiguous */
    tile_of<KIND>(g, tile, n_tiles, p.e, mt, p.n0);
    int step = tile_shape<KIND>::BM;
    if (KIND == TILE_BF16) /* the expert's rows spread evenly over its m tiles (bf16 only: the register
                            * tiles size their wgmma by valid rows and were not measured spread) */
        step = wg_tile_step(g.expert_offset[p.e + 1] - g.expert_offset[p.e], g.tile_offset[p.e + 1] - g.tile_offset[p.e]);
    p.row0 = g.expert_offset[p.e] + (int64_t)(mt - g.tile_offset[p.e]) * step;
    p.rows_valid = (int)min((int64_t)step, (int64_t)g.expert_offset[p.e + 1] - p.row0);
    return p;
}

/* The bf16 GEMMs with bf16 outputs (GEMM1; GEMM2 on the bf16 wire), as one
 * pipeline over all of the block's tiles: the producer's ring runs on from
 * one tile into the next while the consumers store the last one's outputs
 * from registers, so neither the epilogue nor the next tile's first loads
 * stall the tensor cores. k steps are counted over the block's tiles
 * (kg), which gives each stage its slot and parity. SWAP: every tile
 * swapped (wgmma_tile.cuh), with the producer warpgroup's registers moved to
 * the consumers (at 168 each the swapped stores spilled). */
template <bool GLU, bool SWAP>
__device__ __forceinline__ void wg_persistent(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb, uint8_t *smem_raw)
{
    wg_smem &s = *(wg_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / WG_BK, n_tiles = g.N / WG_BN;
    const int total = g.tile_offset[g.E] * n_tiles;
    if (threadIdx.x == 0) wg_ring_init<WG_STAGES>(g, s.full, s.empty);
    __syncthreads();
    if (wg == 0) {
        if constexpr (SWAP) setmaxnreg_dec<40>(); /* the consumers' 128 accumulators and the swapped stores: 232 each */
        if (t == 0) {
            int kg = 0;
            for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
                const tile_pos p = tile_pos_of<TILE_BF16>(g, tile, n_tiles);
                wg_load_tile(g, s, ta, tb, n_k, (int)p.row0, p.e * g.N + p.n0, kg);
            }
        }
    } else {
        if constexpr (SWAP) setmaxnreg_inc<232>();
        const int h = wg - 1;
        int kg = 0;
        for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
            float d[128];
            wg_bf16_mma<SWAP>(g, s, d, h, n_k, kg, false, tile_pos_of<TILE_BF16>(g, tile, n_tiles).rows_valid);
            /* found again after the K loop: nothing but d and the loop's counters held across it
             * (the swapped tile's stores spilled with the tile's position kept) */
            wg_bf16_store<GLU, SWAP>(g, s, d, tile_pos_of<TILE_BF16>(g, tile, n_tiles), h, t);
        }
    }
    __syncthreads(); /* every TMA landed, every arrival made */
    if (threadIdx.x == 0) wg_ring_inval<WG_STAGES>(g, s.full, s.empty);
}

/* A16: the register tile's A16 form (rows folded once, g.a16: fold_rows.cu), its own kernel (in one
 * kernel beside the widening form, the 128-row MX kernels spilled 8 bytes) */
template <int KIND, bool A16 = false>
__global__ void __launch_bounds__(WG_THREADS, tile_shape<KIND>::CTAS) grouped_gemm_wgmma(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                                     const __grid_constant__ CUtensorMap tb)
{
    typedef tile_shape<KIND> S;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ int next_tile; /* the loop's index kept here, not in a register across the tile */
    if (moe_ep_dev_failed(g.error)) return;
    if (threadIdx.x == 0) tile_wait_arm(); /* ordered by the first tile's barrier */
    const int n_tiles = g.N / S::BN;
    for (int tile = blockIdx.x; tile < g.tile_offset[g.E] * n_tiles;) { /* persistent: S::CTAS blocks per SM */
        if (threadIdx.x == 0) next_tile = tile + gridDim.x; /* read after the tile's closing barrier */
        const tile_pos p = tile_pos_of<KIND>(g, tile, n_tiles);
        if constexpr (S::RS)
            fp8_rs_tile<S::RS_FMT, S::BM, true, true, fr_no_hook, S::CTAS, A16>(g, &ta, &tb, smem_raw, p.e, (int)p.row0, p.rows_valid, p.n0);
        else wgmma_tile(g, &ta, &tb, smem_raw, p.e, p.row0, p.rows_valid, p.n0);
        tile = next_tile;
        __syncthreads(); /* read by every thread before thread 0 writes the next */
    }
}

/* The bf16 tiles with bf16 outputs (GLU: GEMM1's SwiGLU; SWAP: swapped),
 * each its own kernel: inlined into grouped_gemm_wgmma<TILE_BF16> beside the
 * other, or called there, the swapped tile's stores spilled. */
template <bool GLU, bool SWAP>
__global__ void __launch_bounds__(WG_THREADS, 1) grouped_gemm_wg_bf16(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                                       const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    if (moe_ep_dev_failed(g.error)) return;
    if (threadIdx.x == 0) tile_wait_arm(); /* ordered by the ring's barrier */
    wg_persistent<GLU, SWAP>(g, &ta, &tb, smem_raw);
}

/* The bf16-output kernel of one GEMM: GLU by its shape, SWAP by the forward. */
static const void *wg_bf16_kernel(bool glu, bool swap)
{
    static const void *const kernels[2][2] = {
        {(const void *)grouped_gemm_wg_bf16<false, false>, (const void *)grouped_gemm_wg_bf16<false, true>},
        {(const void *)grouped_gemm_wg_bf16<true, false>, (const void *)grouped_gemm_wg_bf16<true, true>}};
    return kernels[glu][swap];
}

/* Grid: the SMs given to the layer (num_sms), at most the tiles' upper bound
 * (full tiles plus one partial tile per expert). */
template <int KIND>
static moe_ep_status_t launch(const gemm_args &g, int64_t rows_capacity, int num_sms, cudaStream_t s, const char *name,
                              bool swap = false)
{
    typedef tile_shape<KIND> S;
    CUtensorMap ta, tb;
    MOE_EP_CHECK(KIND == TILE_BF16 ? wg_make_maps(g, rows_capacity, &ta, &tb)
                                   : fr_make_maps<S::BM>(g, rows_capacity, &ta, &tb));
    /* bf16 outputs: stored from registers, one pipeline over the tiles */
    const bool bf16_out = KIND == TILE_BF16 && g.out_fmt == MOE_EP_FORMAT_BF16, glu = g.N != g.N_out;
    const void *fn = bf16_out ? wg_bf16_kernel(glu, swap) : (const void *)grouped_gemm_wgmma<KIND>;
    if constexpr (S::RS && FR_A16_OF(S::RS_FMT, S::BM, S::CTAS))
        if (g.a16) fn = (const void *)grouped_gemm_wgmma<KIND, true>; /* maps g.a16 (fr_make_maps) */
    if ((S::RS && S::CTAS == 1) || (bf16_out && swap)) /* they move registers (setmaxnreg); paired tiles do not */
        MOE_EP_CHECK(fr_check_regs(fn, name));
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::SMEM);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    int64_t m_tiles = (rows_capacity + S::BM - 1) / S::BM + g.E, grid = m_tiles * (g.N / S::BN);
    if (grid > (int64_t)num_sms * S::CTAS) grid = (int64_t)num_sms * S::CTAS;
    void *params[] = {(void *)&g, (void *)&ta, (void *)&tb};
    cudaError_t le = cudaLaunchKernel(fn, dim3((unsigned)grid), dim3(WG_THREADS), params, S::SMEM, s);
    if (le != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(le));
    return moe_ep_launch_check(name);
}

/* The register tile of format FMT with rs_rows activation rows (128, 64, 32 or 16). */
template <int FMT>
static moe_ep_status_t launch_rs(const gemm_args &g, int rs_rows, int64_t rows_capacity, int num_sms, cudaStream_t s,
                                 const char *name)
{
    switch (rs_rows) {
    case 128: return launch<RS_KIND(FMT, 0)>(g, rows_capacity, num_sms, s, name);
    case 64: return launch<RS_KIND(FMT, 1)>(g, rows_capacity, num_sms, s, name);
    case 32: return launch<RS_KIND(FMT, 2)>(g, rows_capacity, num_sms, s, name);
    case 16: return launch<RS_KIND(FMT, 3)>(g, rows_capacity, num_sms, s, name);
    default: return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: no %d-row register tile", name, rs_rows);
    }
}

moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int kind, int rs_rows, int64_t rows_capacity,
                                         int num_sms, cudaStream_t s, const char *name)
{
    if (kind == TILE_BF16 || kind == TILE_BF16_SWAPPED)
        return launch<TILE_BF16>(g, rows_capacity, num_sms, s, name, kind == TILE_BF16_SWAPPED);
    if (kind == TILE_QGMMA) return launch_rs<RS_FP8_QG>(g, rs_rows, rows_capacity, num_sms, s, name);
    switch (fr_format(g.a_fmt, g.b_fmt)) {
    case RS_FP8_BLOCK: return launch_rs<RS_FP8_BLOCK>(g, rs_rows, rows_capacity, num_sms, s, name);
    case RS_MXFP8: return launch_rs<RS_MXFP8>(g, rs_rows, rows_capacity, num_sms, s, name);
    case RS_W4A8: return launch_rs<RS_W4A8>(g, rs_rows, rows_capacity, num_sms, s, name);
    case RS_NVFP4: return launch_rs<RS_NVFP4>(g, rs_rows, rows_capacity, num_sms, s, name);
    default: return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: no register tile for these formats", name);
    }
}
