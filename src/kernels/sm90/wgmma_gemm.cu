/* Grouped GEMM for bf16 operands on the Hopper path: TMA loads completing on
 * mbarriers, a ring of 4 stages, and wgmma (HGMMA) from shared memory.
 *
 * One CTA per 128 x 256 output tile (tile -> expert and row block through the
 * plan's tile prefix, in 128-row units): warpgroup 0 produces (one thread
 * issues the TMA copies of A = 128 activation rows x 64 and B = 256 weight
 * rows x 64 per K step, 128-byte swizzled), warpgroups 1 and 2 consume (wgmma
 * m64n256k16, 64 rows each, fp32 accumulators in registers). After the K loop
 * the accumulators go to shared memory (over the drained stages) and the
 * shared epilogue applies SwiGLU + requantization (GEMM1) or the wire
 * rounding (GEMM2).
 *
 * HGMMA accumulates each output element over K in the same k16 order as the
 * mma.sync kernel and gives the same bits (dev/wgmma_lab checks this), so the
 * choice between the kernels never changes results. */
#include "kernels/sm90/gemm_common.cuh"
#include "kernels/sm90/hopper.cuh"

#include <cudaTypedefs.h>

#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_THREADS 384

struct wg_smem {
    __nv_bfloat16 a[WG_STAGES][WG_BM * WG_BK]; /* 16 KB per stage, 1024-byte aligned */
    __nv_bfloat16 b[WG_STAGES][WG_BN * WG_BK]; /* 32 KB per stage */
    uint64_t full[WG_STAGES], empty[WG_STAGES];
};

__device__ __forceinline__ void consumer_barrier() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

__global__ void __launch_bounds__(WG_THREADS, 1) grouped_gemm_wgmma(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                                     const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    wg_smem &s = *(wg_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    if (moe_ep_dev_failed(g.error)) return;
    int n_tiles = g.N / WG_BN, tile = blockIdx.x;
    if (tile >= g.tile_offset[g.E] * n_tiles) return; /* the grid is an upper bound */
    int mt = tile / n_tiles, n0 = (tile % n_tiles) * WG_BN;
    int e = tile_expert(g.tile_offset, g.E, mt);
    int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * WG_BM;
    int rows_valid = (int)min((int64_t)WG_BM, (int64_t)g.expert_offset[e + 1] - row0);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / WG_BK;
    if (threadIdx.x == 0) {
        for (int i = 0; i < WG_STAGES; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /* No setmaxnreg: values computed above from global memory (row0, e) live in
     * registers across the role split, and a register-count decrease does not
     * preserve registers above the new limit. 384 threads x 168 registers fit. */
    if (wg == 0) { /* producer */
        if (t == 0)
            for (int kt = 0; kt < n_k; kt++) {
                int st = kt % WG_STAGES;
                mbar_wait(&s.empty[st], ((kt / WG_STAGES) & 1) ^ 1);
                mbar_expect_tx(&s.full[st], (WG_BM + WG_BN) * WG_BK * 2);
                tma_load_2d(s.a[st], &ta, &s.full[st], kt * WG_BK, (int)row0);
                tma_load_2d(s.b[st], &tb, &s.full[st], kt * WG_BK, e * g.N + n0);
            }
        return;
    }
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    int row_off = (wg - 1) * 64; /* this warpgroup's rows of the tile */
    for (int kt = 0; kt < n_k; kt++) {
        int st = kt % WG_STAGES;
        mbar_wait(&s.full[st], (kt / WG_STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) /* +32 bytes (2 x 16 B) per k16 step */
            wgmma_m64n256k16_bf16(d, smem_desc(&s.a[st][row_off * WG_BK]) + 2 * kk, smem_desc(&s.b[st][0]) + 2 * kk,
                                  (kt > 0 || kk > 0) ? 1 : 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) mbar_arrive(&s.empty[(kt - 1) % WG_STAGES]);
    }
    wgmma_wait<0>();
    consumer_barrier(); /* every stage read; C may now overwrite them */
    float(*C)[WG_BN + 4] = (float(*)[WG_BN + 4])(void *)&s;
    /* D fragment: warp w holds rows 16w..16w+15 of the warpgroup's 64; per
     * 8-column block j: d[4j..4j+1] at row lane/4, d[4j+2..4j+3] at row lane/4 + 8. */
    int warp = t / 32, lane = t % 32, r = row_off + 16 * warp + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        int c = 8 * j + (lane % 4) * 2;
        C[r][c] = d[4 * j], C[r][c + 1] = d[4 * j + 1];
        C[r + 8][c] = d[4 * j + 2], C[r + 8][c + 1] = d[4 * j + 3];
    }
    consumer_barrier();
    epilogue<WG_BM, WG_BN>(g, C, row0, rows_valid, n0, threadIdx.x - 128, 256);
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

/* A 2-D bf16 tensor map over [rows][cols] with a box of box_rows x 64, 128-byte swizzle. */
static moe_ep_status_t make_map(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
    if (!fn) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {WG_BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, elem,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_launch_gemm_wgmma(const gemm_args &g, int64_t rows_capacity, int num_sms, cudaStream_t s,
                                         const char *name)
{
    (void)num_sms;
    if (g.a_fmt != MOE_EP_FORMAT_BF16 || g.b_fmt != MOE_EP_FORMAT_BF16 || g.N % WG_BN || g.K % WG_BK)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: the wgmma kernel takes bf16 operands, N %% 256, K %% 64", name);
    CUtensorMap ta, tb;
    MOE_EP_CHECK(make_map(&ta, g.a, rows_capacity, g.K, WG_BM));
    MOE_EP_CHECK(make_map(&tb, g.b, (int64_t)g.E * g.N, g.K, WG_BN));
    size_t smem = sizeof(wg_smem) + 1024;
    cudaError_t e = cudaFuncSetAttribute(grouped_gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    /* Upper bound of 128-row tiles: full tiles plus one partial tile per expert. */
    int64_t m_tiles = (rows_capacity + WG_BM - 1) / WG_BM + g.E;
    grouped_gemm_wgmma<<<(unsigned)(m_tiles * (g.N / WG_BN)), WG_THREADS, smem, s>>>(g, ta, tb);
    return moe_ep_launch_check(name);
}
