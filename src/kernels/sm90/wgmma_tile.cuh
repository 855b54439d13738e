/* The bf16 TMA + wgmma tile as a device function, for the split backend's
 * grouped GEMM (wgmma_gemm.cu) and the mega kernel: one 128 x 256 output tile
 * of one expert, computed by a block of WG_THREADS = 384 threads.
 *
 * Warpgroup 0 produces (one thread issues the TMA copies of A = 128
 * activation rows x 64 and B = 256 weight rows x 64 per K step, 128-byte
 * swizzled, into a ring of 4 stages completing on mbarriers), warpgroups 1
 * and 2 consume (wgmma m64n256k16, 64 rows each, fp32 accumulators in
 * registers). After the K loop the accumulators go to shared memory (over the
 * drained stages) and the shared epilogue applies SwiGLU + requantization
 * (GEMM1) or the wire rounding (GEMM2).
 *
 * HGMMA accumulates each output element over K in the same k16 order as the
 * mma.sync tile and gives the same bits (dev/wgmma_lab checks this), so the
 * choice of tile never changes results. */
#ifndef MOE_EP_WGMMA_TILE_CUH
#define MOE_EP_WGMMA_TILE_CUH

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

/* Dynamic shared memory of the tile: the ring plus room to align it. */
#define WG_SMEM_BYTES (sizeof(wg_smem) + 1024)

__device__ __forceinline__ void wg_consumer_barrier() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

/* Every thread of a 384-thread block calls it. smem_raw: WG_SMEM_BYTES of
 * dynamic shared memory. ta / tb: tensor maps of A ([rows][K], box 128 x 64)
 * and B ([E * N][K], box 256 x 64), in parameter or global memory. The tile
 * covers rows [row0, row0 + rows_valid) of expert e and columns [n0, n0 + 256).
 * Ends with the block synchronised and shared memory free again. */
__device__ __forceinline__ void wgmma_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                           uint8_t *smem_raw, int e, int64_t row0, int rows_valid, int n0)
{
    wg_smem &s = *(wg_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / WG_BK;
    if (threadIdx.x == 0) {
        for (int i = 0; i < WG_STAGES; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) { /* producer */
        if (t == 0) {
            /* A may have been written by other blocks of this launch (generic
             * proxy, made visible by the caller's acquire): order those writes
             * before this thread's TMA (async proxy) reads. */
            asm volatile("fence.proxy.async.global;\n" ::: "memory");
            for (int kt = 0; kt < n_k; kt++) {
                int st = kt % WG_STAGES;
                mbar_wait(&s.empty[st], ((kt / WG_STAGES) & 1) ^ 1);
                mbar_expect_tx(&s.full[st], (WG_BM + WG_BN) * WG_BK * 2);
                tma_load_2d(s.a[st], ta, &s.full[st], kt * WG_BK, (int)row0);
                tma_load_2d(s.b[st], tb, &s.full[st], kt * WG_BK, e * g.N + n0);
            }
        }
    } else { /* consumers */
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
                wgmma_m64n256k16_bf16(d, smem_desc(&s.a[st][row_off * WG_BK]) + 2 * kk,
                                      smem_desc(&s.b[st][0]) + 2 * kk, (kt > 0 || kk > 0) ? 1 : 0);
            wgmma_commit();
            wgmma_wait<1>();
            if (kt > 0) mbar_arrive(&s.empty[(kt - 1) % WG_STAGES]);
        }
        wgmma_wait<0>();
        wg_consumer_barrier(); /* every stage read; C may now overwrite them */
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
        wg_consumer_barrier();
        epilogue<WG_BM, WG_BN>(g, C, row0, rows_valid, n0, threadIdx.x - 128, 256);
    }
    __syncthreads(); /* every TMA landed, every arrival made: the ring and C are free */
    if (threadIdx.x == 0) /* the next tile (mega) initialises them again */
        for (int i = 0; i < WG_STAGES; i++) mbar_inval(&s.full[i]), mbar_inval(&s.empty[i]);
}

/* ---- host: tensor maps ------------------------------------------------------ */

static inline PFN_cuTensorMapEncodeTiled_v12000 wg_encode_fn(void)
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
static inline moe_ep_status_t wg_make_map(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = wg_encode_fn();
    if (!fn) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {WG_BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, elem,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return MOE_EP_SUCCESS;
}

/* The tensor maps of one GEMM (A rows, B weights) for the tile. */
static inline moe_ep_status_t wg_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb)
{
    if (g.a_fmt != MOE_EP_FORMAT_BF16 || g.b_fmt != MOE_EP_FORMAT_BF16 || g.N % WG_BN || g.K % WG_BK)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "the wgmma tile takes bf16 operands, N %% 256, K %% 64");
    MOE_EP_CHECK(wg_make_map(ta, g.a, rows_capacity, g.K, WG_BM));
    return wg_make_map(tb, g.b, (int64_t)g.E * g.N, g.K, WG_BN);
}

#endif
