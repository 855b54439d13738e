/* Kernel lab: a Hopper bf16 GEMM with TMA, mbarrier pipelines and wgmma.
 * C[M][N] (fp32) = A[M][K] . B[N][K]^T, both operands K-major bf16.
 * CTA tile 128 x 256, K step 64, 4 stages; warpgroup 0 produces (one thread
 * issues TMA), warpgroups 1-2 consume (wgmma m64n256k16, 64 rows each).
 * Checked against a naive GPU GEMM on random data, then timed.
 * Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o wgmma_lab gemm_bf16_wgmma.cu
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BM 128
#define BN 256
#define BK 64
#define STAGES 4
#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

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
 * atoms, stride 1024 B between atoms along M/N). */
__device__ __forceinline__ uint64_t smem_desc(const void *p)
{
    uint64_t a = smem_u32(p);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void wgmma_m64n256k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(scale_d));
}


struct smem_t {
    __nv_bfloat16 a[STAGES][BM * BK]; /* 16 KB each, 1024-aligned */
    __nv_bfloat16 b[STAGES][BN * BK]; /* 32 KB each */
    uint64_t full[STAGES], empty[STAGES];
};

__global__ void __launch_bounds__(384, 1) gemm_wgmma(const __grid_constant__ CUtensorMap tma_a,
                                                     const __grid_constant__ CUtensorMap tma_b, float *C, int M,
                                                     int N, int K)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    smem_t &s = *(smem_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, n_k = K / BK;
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (t == 0)
            for (int kt = 0; kt < n_k; kt++) {
                int st = kt % STAGES;
                mbar_wait(&s.empty[st], ((kt / STAGES) & 1) ^ 1);
                mbar_expect_tx(&s.full[st], (BM + BN) * BK * 2);
                tma_load_2d(s.a[st], &tma_a, &s.full[st], kt * BK, m0);
                tma_load_2d(s.b[st], &tma_b, &s.full[st], kt * BK, n0);
            }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    int row_off = (wg - 1) * 64; /* this warpgroup's 64 rows of the tile */
    for (int kt = 0; kt < n_k; kt++) {
        int st = kt % STAGES;
        mbar_wait(&s.full[st], (kt / STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint64_t da = smem_desc(&s.a[st][row_off * BK]) + 2 * kk; /* +32 bytes per k16 */
            uint64_t db = smem_desc(&s.b[st][0]) + 2 * kk;
            wgmma_m64n256k16_bf16(d, da, db, (kt > 0 || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) mbar_arrive(&s.empty[(kt - 1) % STAGES]);
    }
    wgmma_wait<0>();
    /* D fragment: warp w of the warpgroup holds rows 16w..16w+15; per 8-column
     * block j: d[4j], d[4j+1] at row lane/4, d[4j+2], d[4j+3] at row lane/4 + 8. */
    int warp = t / 32, lane = t % 32;
    int r = m0 + row_off + 16 * warp + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        int c = n0 + 8 * j + (lane % 4) * 2;
        C[(size_t)r * N + c] = d[4 * j], C[(size_t)r * N + c + 1] = d[4 * j + 1];
        C[(size_t)(r + 8) * N + c] = d[4 * j + 2], C[(size_t)(r + 8) * N + c + 1] = d[4 * j + 3];
    }
}

__global__ void gemm_naive(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = acc;
}

/* mma.sync m16n8k16 over the same K order (one k16 step at a time), one warp
 * per 16 x 8 tile, fragments loaded straight from global memory: the bits
 * this gives are what the split backend's mma.sync kernels produce. */
__global__ void gemm_mma_sync(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K)
{
    int lane = threadIdx.x % 32, warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int tiles_n = N / 8, tm = warp / tiles_n, tn = warp % tiles_n;
    if (tm * 16 >= M) return;
    int g = lane / 4, q = lane % 4;
    float c[4] = {0, 0, 0, 0};
    const uint16_t *a = (const uint16_t *)A, *b = (const uint16_t *)B;
    for (int k = 0; k < K; k += 16) {
        uint32_t ar[4], br[2];
        int r0 = tm * 16 + g, col = k + 2 * q;
        ar[0] = a[(size_t)r0 * K + col] | ((uint32_t)a[(size_t)r0 * K + col + 1] << 16);
        ar[1] = a[(size_t)(r0 + 8) * K + col] | ((uint32_t)a[(size_t)(r0 + 8) * K + col + 1] << 16);
        ar[2] = a[(size_t)r0 * K + col + 8] | ((uint32_t)a[(size_t)r0 * K + col + 9] << 16);
        ar[3] = a[(size_t)(r0 + 8) * K + col + 8] | ((uint32_t)a[(size_t)(r0 + 8) * K + col + 9] << 16);
        int n = tn * 8 + g;
        br[0] = b[(size_t)n * K + col] | ((uint32_t)b[(size_t)n * K + col + 1] << 16);
        br[1] = b[(size_t)n * K + col + 8] | ((uint32_t)b[(size_t)n * K + col + 9] << 16);
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
    }
    int r = tm * 16 + g, cc = tn * 8 + 2 * q;
    C[(size_t)r * N + cc] = c[0], C[(size_t)r * N + cc + 1] = c[1];
    C[(size_t)(r + 8) * N + cc] = c[2], C[(size_t)(r + 8) * N + cc + 1] = c[3];
}

__global__ void fill_random(__nv_bfloat16 *x, size_t n, uint32_t seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352d, h ^= h >> 15, h *= 0x846ca68b, h ^= h >> 16;
    x[i] = __float2bfloat16(((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 2.0f);
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) {
        printf("cuTensorMapEncodeTiled not found\n");
        exit(1);
    }
    return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}

static CUtensorMap make_map(void *base, int rows, int cols, int box_rows)
{
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {BK, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("tensor map encode failed: %d\n", (int)r);
        exit(1);
    }
    return m;
}

static void run(int M, int N, int K, int check, int iters)
{
    __nv_bfloat16 *A, *B;
    float *C, *R;
    CHECK(cudaMalloc(&A, (size_t)M * K * 2));
    CHECK(cudaMalloc(&B, (size_t)N * K * 2));
    CHECK(cudaMalloc(&C, (size_t)M * N * 4));
    fill_random<<<(unsigned)(((size_t)M * K + 255) / 256), 256>>>(A, (size_t)M * K, 1234u + M);
    fill_random<<<(unsigned)(((size_t)N * K + 255) / 256), 256>>>(B, (size_t)N * K, 777u + N);
    CHECK(cudaMemset(C, 0xFF, (size_t)M * N * 4));
    CUtensorMap ta = make_map(A, M, K, BM), tb = make_map(B, N, K, BN);
    size_t smem = sizeof(smem_t) + 1024;
    CHECK(cudaFuncSetAttribute(gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(N / BN, M / BM);
    gemm_wgmma<<<grid, 384, smem>>>(ta, tb, C, M, N, K);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (check) {
        CHECK(cudaMalloc(&R, (size_t)M * N * 4));
        gemm_naive<<<dim3((N + 255) / 256, M), 256>>>(A, B, R, M, N, K);
        CHECK(cudaDeviceSynchronize());
        float *hc = (float *)malloc((size_t)M * N * 4), *hr = (float *)malloc((size_t)M * N * 4);
        CHECK(cudaMemcpy(hc, C, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(hr, R, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            double dd = (double)hc[i] - hr[i];
            if (isnan(hc[i])) bad++;
            num += dd * dd, den += (double)hr[i] * hr[i];
        }
        printf("check M=%d N=%d K=%d: rel L2 %.3e, NaN/unwritten %zu -> %s\n", M, N, K, sqrt(num / den), bad,
               (bad == 0 && sqrt(num / den) < 1e-5) ? "OK" : "WRONG");
        gemm_mma_sync<<<(unsigned)((size_t)(M / 16) * (N / 8) * 32 / 256), 256>>>(A, B, R, M, N, K);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(hr, R, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) diff += memcmp(&hc[i], &hr[i], 4) != 0;
        printf("  wgmma vs mma.sync (same K order): %zu of %zu elements differ in bits\n", diff, (size_t)M * N);
        free(hc), free(hr);
        cudaFree(R);
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    float best = 1e30f;
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(e0);
        gemm_wgmma<<<grid, 384, smem>>>(ta, tb, C, M, N, K);
        cudaEventRecord(e1);
        CHECK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    printf("time M=%d N=%d K=%d: best %.1f us, %.0f TFLOP/s\n", M, N, K, best * 1e3, 2.0 * M * N * K / (best * 1e-3) / 1e12);
    cudaFree(A), cudaFree(B), cudaFree(C);
}

int main(void)
{
    run(256, 512, 256, 1, 3);
    run(1024, 1024, 4096, 1, 5);
    run(8192, 8192, 8192, 0, 10);
    run(128, 4096, 4096, 1, 20);
    return 0;
}
