/* Kernel lab: how fast can a persistent grid stream the register tile's
 * weights from HBM, with no compute? One block per SM walks GEMM items
 * (an expert's 256-row column block, all of K) as the tile does: thread 0
 * refills a ring of `stages` raw slots, thread 32 takes each landed stage and
 * frees it at once. The question (design.md, "What binds the decode tiles"):
 * is the decode tiles' ~3.4 TB/s set by the access pattern (a 2-D box is 256
 * pieces of 128 bytes, 64 for the 4-bit formats, each K bytes apart) rather
 * than by the ring or the consumers? Layouts:
 *   box128: 2-D TMA, 256 rows x 128 B, 128-byte swizzle (FP8 weights today)
 *   box64:  2-D TMA, 256 rows x 64 B, 64-byte swizzle (E2M1 weights today)
 *   flat:   one 1-D bulk copy of the stage's bytes, stored contiguously
 *           (weights pre-tiled at load: [item][stage][256 rows x piece])
 * Each for several ring depths; prints GB/s (bytes read / kernel time, best
 * of 5) and the bytes in flight per SM. STREAM_L2_MB=n (environment): the
 * items re-read n MB (K = 4096 only), so the ring streams from L2: what a
 * tile's loads can get at most when its operands are L2 hits.
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        stream_lab.cu -o stream_lab && ./stream_lab */
#include "kernels/sm90/hopper.cuh"
#include "lab_common.cuh"

#define MAX_STAGES 8
enum { BOX128 = 0, BOX64 = 1, FLAT = 2 };

struct stream_args {
    const uint8_t *w; /* [rows][k_bytes], or pre-tiled for FLAT */
    int items, n_blocks, k_bytes, piece, stages; /* n_blocks: 256-row column blocks per expert x experts */
    unsigned long long *sink;
    int wrap; /* items of distinct rows: item i reads item i % wrap's (STREAM_L2_MB: a region L2 holds) */
};

__global__ void __launch_bounds__(64, 1) stream_kernel(const stream_args a, const __grid_constant__ CUtensorMap map,
                                                       int layout)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *ring = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    __shared__ uint64_t full[MAX_STAGES], empty[MAX_STAGES];
    const int stage_bytes = 256 * a.piece, n_k = a.k_bytes / a.piece;
    if (threadIdx.x == 0)
        for (int i = 0; i < a.stages; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
    int kg = 0;
    if (threadIdx.x == 0) {
        for (int item = blockIdx.x; item < a.items; item += gridDim.x)
            for (int kt = 0; kt < n_k; kt++, kg++) {
                const int st = kg % a.stages;
                if (kg >= a.stages) mbar_wait(&empty[st], ((kg / a.stages) & 1) ^ 1);
                mbar_expect_tx(&full[st], stage_bytes);
                uint8_t *dst = ring + (size_t)st * stage_bytes;
                if (layout == FLAT)
                    bulk_load(dst, a.w + ((size_t)(item % a.wrap) * n_k + kt) * stage_bytes, stage_bytes, &full[st]);
                else
                    tma_load_2d(dst, &map, &full[st], kt * a.piece, (item % a.wrap) * 256);
            }
    } else if (threadIdx.x == 32) {
        unsigned long long sum = 0;
        for (int item = blockIdx.x; item < a.items; item += gridDim.x)
            for (int kt = 0; kt < n_k; kt++, kg++) {
                const int st = kg % a.stages;
                mbar_wait(&full[st], (kg / a.stages) & 1);
                sum += ring[(size_t)st * stage_bytes + (kt & 1023)];
                mbar_arrive(&empty[st]);
            }
        a.sink[blockIdx.x] = sum;
    }
}

static CUtensorMap make_map(void *base, long rows, int cols, int piece)
{
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols};
    cuuint32_t box[2] = {(cuuint32_t)piece, 256}, elem[2] = {1, 1};
    CUresult r = lab_encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, elem,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 piece == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("tensor map encode failed: %d\n", (int)r);
        exit(1);
    }
    return m;
}

int main(void)
{
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t bytes = (size_t)1 << 30; /* 1 GiB: far beyond L2 */
    uint8_t *w;
    unsigned long long *sink;
    CHECK(cudaMalloc(&w, bytes));
    CHECK(cudaMemset(w, 0x3c, bytes));
    CHECK(cudaMalloc(&sink, sizeof(unsigned long long) * 1024));
    CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    /* k_bytes: FP8 flash GEMM1 rows are 4096 B (K = 4096), pro 7168; E2M1 half that. */
    const int ks[] = {4096, 2048, 7168, 8192};
    const char *names[] = {"box128", "box64", "flat"};
    const char *l2 = getenv("STREAM_L2_MB");
    const long l2_bytes = l2 ? atol(l2) << 20 : 0;
    if (l2) printf("from L2: every item re-reads the first %ld MB\n", l2_bytes >> 20);
    printf("layout piece k_bytes stages inflight_KB GB/s\n");
    for (int ki = 0; ki < (l2 ? 1 : 4); ki++)
        for (int layout = 0; layout < 3; layout++)
            for (int piece = 64; piece <= 128; piece *= 2) {
                if ((layout == BOX128 && piece != 128) || (layout == BOX64 && piece != 64)) continue;
                const int k_bytes = ks[ki];
                const long rows = (long)(bytes / k_bytes) / 256 * 256;
                int items = (int)(rows / 256) / sms * sms; /* whole waves */
                CUtensorMap map = make_map(w, rows, k_bytes, piece == 128 ? 128 : 64);
                const int depths[] = {2, 3, 4, 6, 8};
                for (int di = 0; di < 5; di++) {
                    const int stages = depths[di], stage_bytes = 256 * piece;
                    if (stages * stage_bytes + 1024 > 200 * 1024) continue;
                    const int wrap = l2 ? (int)(l2_bytes / ((long)256 * k_bytes)) : items;
                    stream_args a = {w, items, 0, k_bytes, piece, stages, sink, wrap};
                    float best = 1e30f;
                    for (int rep = 0; rep < 5; rep++) {
                        CHECK(cudaEventRecord(e0));
                        stream_kernel<<<sms, 64, stages * stage_bytes + 1024>>>(a, map, layout);
                        CHECK(cudaEventRecord(e1));
                        CHECK(cudaEventSynchronize(e1));
                        CHECK(cudaGetLastError());
                        float ms;
                        CHECK(cudaEventElapsedTime(&ms, e0, e1));
                        if (ms < best) best = ms;
                    }
                    const double moved = (double)items * 256 * k_bytes;
                    printf("%-6s %5d %7d %6d %11d %6.0f\n", names[layout], piece, k_bytes, stages,
                           stages * stage_bytes / 1024, moved / best / 1e6);
                }
            }
    /* reference: a plain device-to-device copy of 512 MiB (read + write counted) */
    float best = 1e30f;
    for (int rep = 0; rep < 5; rep++) {
        CHECK(cudaEventRecord(e0));
        CHECK(cudaMemcpyAsync(w, w + bytes / 2, bytes / 2, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    printf("copy (read + write) %.0f GB/s\n", (double)bytes / best / 1e6);
    return 0;
}
