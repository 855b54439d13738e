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

#include <cuda.h>
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

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}

/* Waits for the phase of the given parity. Intra-CTA: the producer and the
 * consumers of one CTA are always resident together, and every phase is
 * completed by a finite number of TMA copies or arrivals. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity)
{
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(b)), "r"(parity) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(dst)), "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}

/* Shared-memory matrix descriptor: K-major, 128-byte swizzle (8-row x 128-B
 * atoms, 1024 B between atoms along M/N; the leading offset is unused). */
__device__ __forceinline__ uint64_t smem_desc(const void *p)
{
    uint64_t a = smem_u32(p);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

/* d[128] += A (64 x 16, descriptor da) . B^T (256 x 16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(scale_d));
}

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
