/* Kernel lab: how fast can mega's dispatch write its rows? (sixty-first
 * session). At flash T = 8192 (NVFP4, A16) mega's dispatch moves ~470 MB
 * (x read once, each token's fp16 row written K = 6 times) in ~211 us,
 * 2.2 TB/s, against a measured copy bandwidth of 3.04 TB/s (read + write).
 * Is HBM's write rate what binds it, or the dispatch's pipeline (each batch
 * waits for the previous batch's bulk stores to leave shared memory before
 * it folds, so no store is in flight while it folds)?
 *   write:   each block issues bulk stores of one staged buffer to scattered
 *            rows (a random permutation), `depth` bulk groups in flight
 *            (cp.async.bulk.wait_group.read depth - 1 before the next batch);
 *            GB/s of bytes written
 *   stv4:    the same rows written by st.global.v4 from every thread
 *   disp d:  the dispatch's shape: x rows by bulk loads into a 4-stage ring,
 *            the block copying each batch's x rows into one of `nbuf` output
 *            buffers (standing in for the encode and fold), warp 0 storing
 *            every row K times; d = 0: as mega's dispatch_group waits today
 *            (all earlier stores read before the copy), d = 1: one batch's
 *            stores still in flight during the copy (nbuf = 3)
 *   copy:    cudaMemcpyAsync device to device (read + write counted)
 * Sizes: T tokens of H bf16 columns, K rows a token (flash: 8192, 4096, 6;
 * pro: 8192, 7168, 6), batches of P tokens.
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        write_lab.cu -o write_lab && ./write_lab */
#include "kernels/sm90/hopper.cuh"
#include "lab_common.cuh"

struct write_args {
    const uint8_t *x; /* [T][row_bytes] */
    uint8_t *rows;    /* [T K][row_bytes] */
    const int *dest;  /* [T K]: the row of token t's k-th copy (a permutation) */
    int T, K, row_bytes, P, depth, nbuf, stages;
};

/* Warp 0: batch tokens [t0, t0 + n)'s K copies from buf, one bulk group. */
__device__ __forceinline__ void store_batch(const write_args &a, const uint8_t *buf, int t0, int n)
{
    for (int i = threadIdx.x; i < n * a.K; i += 32)
        bulk_store(a.rows + (size_t)a.dest[(size_t)t0 * a.K + i] * a.row_bytes, buf + (size_t)(i / a.K) * a.row_bytes,
                   (uint32_t)a.row_bytes);
    bulk_commit();
}

__device__ __forceinline__ void wait_read(int outstanding)
{
    if (outstanding <= 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else if (outstanding == 1) asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
    else if (outstanding == 2) asm volatile("cp.async.bulk.wait_group.read 2;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group.read 3;\n" ::: "memory");
}

/* The block's tokens: [b tpb, (b + 1) tpb) of T. */
__device__ __forceinline__ void block_tokens(const write_args &a, int &first, int &count)
{
    const int tpb = (a.T + gridDim.x - 1) / gridDim.x;
    first = blockIdx.x * tpb, count = max(0, min(a.T, first + tpb) - first);
}

__global__ void __launch_bounds__(384, 1) write_kernel(const write_args a)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    int first, count;
    block_tokens(a, first, count);
    for (int i = threadIdx.x; i < a.P * a.row_bytes / 4; i += blockDim.x) ((uint32_t *)smem)[i] = i * 2654435761u;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (threadIdx.x < 32) {
        for (int t0 = 0; t0 < count; t0 += a.P) {
            wait_read(a.depth - 1);
            store_batch(a, smem, first + t0, min(a.P, count - t0));
        }
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    }
}

__global__ void __launch_bounds__(384, 1) stv4_kernel(const write_args a)
{
    int first, count;
    block_tokens(a, first, count);
    const int chunks = a.row_bytes / 16;
    for (int i = threadIdx.x; i < count * a.K * chunks; i += blockDim.x) {
        const int r = i / chunks, c = i - r * chunks;
        uint4 v = make_uint4(i, r, c, 7u);
        *(uint4 *)(a.rows + (size_t)a.dest[(size_t)first * a.K + r] * a.row_bytes + 16 * c) = v;
    }
}

/* The dispatch's shape (see the head comment). Shared memory: `stages` x
 * stages of P rows, then nbuf output buffers of P rows. */
__global__ void __launch_bounds__(384, 1) disp_kernel(const write_args a)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    __shared__ uint64_t full[4];
    int first, count;
    block_tokens(a, first, count);
    const int stage_bytes = a.P * a.row_bytes, batches = (count + a.P - 1) / a.P;
    uint8_t *out0 = smem + (size_t)a.stages * stage_bytes;
    if (threadIdx.x == 0) {
        for (int i = 0; i < a.stages; i++) mbar_init(&full[i], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int b = 0; b < min(batches, a.stages); b++) {
            const int n = min(a.P, count - b * a.P);
            mbar_expect_tx(&full[b], (uint32_t)(n * a.row_bytes));
            bulk_load(smem + (size_t)b * stage_bytes, a.x + (size_t)(first + b * a.P) * a.row_bytes, n * a.row_bytes, &full[b]);
        }
    }
    __syncthreads();
    for (int b = 0, s = 0, phase = 0; b < batches; b++) {
        const int t0 = b * a.P, n = min(a.P, count - t0);
        mbar_wait(&full[s], phase);
        if (threadIdx.x < 32) wait_read(a.depth); /* depth 0: every earlier store read; 1: the last batch's may run on */
        __syncthreads();
        uint8_t *out = out0 + (size_t)(b % a.nbuf) * stage_bytes;
        const uint4 *src = (const uint4 *)(smem + (size_t)s * stage_bytes);
        for (int i = threadIdx.x; i < n * a.row_bytes / 16; i += blockDim.x) {
            uint4 v = src[i];
            v.x ^= 0x5a5a5a5au;
            ((uint4 *)out)[i] = v;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (threadIdx.x < 32) store_batch(a, out, first + t0, n);
        if (threadIdx.x == 0 && b + a.stages < batches) {
            const int nn = min(a.P, count - t0 - a.stages * a.P);
            mbar_expect_tx(&full[s], (uint32_t)(nn * a.row_bytes));
            bulk_load(smem + (size_t)s * stage_bytes, a.x + (size_t)(first + t0 + a.stages * a.P) * a.row_bytes,
                      nn * a.row_bytes, &full[s]);
        }
        if (++s == a.stages) s = 0, phase ^= 1;
    }
    if (threadIdx.x < 32) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

int main()
{
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int T = 8192, K = 6, Hs[2] = {4096, 7168};
    const size_t max_row = 2 * 7168;
    uint8_t *x, *rows;
    int *dest;
    CHECK(cudaMalloc(&x, (size_t)T * max_row));
    CHECK(cudaMalloc(&rows, (size_t)T * K * max_row));
    CHECK(cudaMalloc(&dest, sizeof(int) * T * K));
    int *h = (int *)malloc(sizeof(int) * T * K);
    for (int i = 0; i < T * K; i++) h[i] = i;
    srand(61);
    for (int i = T * K - 1; i > 0; i--) {
        int j = rand() % (i + 1), v = h[i];
        h[i] = h[j], h[j] = v;
    }
    CHECK(cudaMemcpy(dest, h, sizeof(int) * T * K, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(x, 1, (size_t)T * max_row));
    CHECK(cudaFuncSetAttribute(write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    CHECK(cudaFuncSetAttribute(disp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    printf("kind H P depth nbuf us GB/s(read+write)\n");
    for (int hi = 0; hi < 2; hi++) {
        const int H = Hs[hi], rb = 2 * H;
        const double wbytes = (double)T * K * rb, rbytes = (double)T * rb;
        float ms;
        for (int P = 2; P <= 4; P++)
            for (int depth = 1; depth <= 4; depth *= 2) {
                write_args a = {x, rows, dest, T, K, rb, P, depth, 1, 0};
                LAB_TIME_SUSTAINED(ms, 20, 200, write_kernel<<<sms, 384, P * rb>>>(a));
                CHECK(cudaGetLastError());
                printf("write %d %d %d - %.1f %.0f\n", H, P, depth, ms * 1e3, wbytes / ms / 1e6);
            }
        {
            write_args a = {x, rows, dest, T, K, rb, 1, 1, 1, 0};
            LAB_TIME_SUSTAINED(ms, 20, 200, stv4_kernel<<<sms, 384>>>(a));
            CHECK(cudaGetLastError());
            printf("stv4 %d - - - %.1f %.0f\n", H, ms * 1e3, wbytes / ms / 1e6);
        }
        for (int P = 1; P <= 4; P++)
            for (int d = 0; d <= 1; d++)
                for (int stages = 3; stages <= 4; stages++) {
                    const int nbuf = d ? 3 : 2;
                    if ((size_t)(stages + nbuf) * P * rb > 220 * 1024) continue;
                    write_args a = {x, rows, dest, T, K, rb, P, d, nbuf, stages};
                    LAB_TIME_SUSTAINED(ms, 20, 200, disp_kernel<<<sms, 384, (stages + nbuf) * P * rb>>>(a));
                    CHECK(cudaGetLastError());
                    printf("disp%d %d %d %d s%d %.1f %.0f\n", d, H, P, nbuf, stages, ms * 1e3, (wbytes + rbytes) / ms / 1e6);
                }
        /* the dispatch's shape on fewer blocks (the rest of the GPU idle): does a
         * block's rate grow when the bandwidth is not shared by 132 of them? (what
         * a dispatch run by a few blocks beside the GEMMs would get) */
        for (int grid = 8; grid <= sms; grid = grid * 2 > sms && grid < sms ? sms : grid * 2) {
            const int P = hi ? 2 : 4;
            write_args a = {x, rows, dest, T, K, rb, P, 1, 3, 3};
            LAB_TIME_SUSTAINED(ms, 10, 100, disp_kernel<<<grid, 384, 6 * P * rb>>>(a));
            CHECK(cudaGetLastError());
            printf("blocks %d %d %d - %.1f %.0f GB/s, %.1f a block\n", grid, H, P, ms * 1e3, (wbytes + rbytes) / ms / 1e6,
                   (wbytes + rbytes) / ms / 1e6 / grid);
        }
        LAB_TIME_SUSTAINED(ms, 20, 200, CHECK(cudaMemcpyAsync(rows, rows + (size_t)T * K * rb / 2, (size_t)T * K * rb / 2,
                                                              cudaMemcpyDeviceToDevice)));
        printf("copy %d - - - %.1f %.0f\n", H, ms * 1e3, wbytes / ms / 1e6);
    }
    return 0;
}
