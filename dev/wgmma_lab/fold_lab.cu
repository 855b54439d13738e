/* Kernel lab: a block's rate folding NVFP4 rows into fp16 (sixty-fourth
 * session). P3's pull items (dev/drafts/mega_nvfp4_pull_items_tokrows.patch)
 * folded an m tile (128 rows, flash K = 4096: 1 MB of fp16) in ~99 us, ~13 GB/s
 * a block with ~13 blocks folding, while write_lab.cu's dispatch shape stores
 * 62 GB/s a block on 16 blocks. Which part binds the fold: its stores' shape,
 * its conversion, or its loop's latency?
 *   chunk:   main's fold_staged_rows<FOLD_NV> before 2026-12-06 (a lane a 16-byte chunk of 32 E2M1,
 *            four 16-byte stores 64 bytes apart a lane)
 *   word:    dev/drafts/fold_nv_lane_words.patch's (a lane a 16-byte fp16 word,
 *            a warp's store 512 contiguous bytes), loop rolled
 *   word u4: the same, unrolled by 4
 *   st word: stores alone in the word shape (a constant), st chunk: in the chunk shape
 *   cvt:     the word form's conversions alone (xor-folded into a register)
 * Each block of 384 threads (mega's 128-row tile block) stages rps rows (the
 * fold item's stage: E2M1 rows, then their E4M3 scale rows) in shared memory
 * once, then folds the stage `reps` times into distinct output rows, a
 * __syncthreads between passes as fold_item has. GB/s a block: fp16 bytes
 * written over the kernel's time; blocks 1, 16, 132.
 * H100 (2026-12-06, GB/s a block at 1 / 16 / 132 blocks, K = 4096; 7168 alike):
 *   chunk 20.2 / 19.2 / 9.6, word 52.2 / 48.6 / 22.6, word u4 50.0 / 46.1 / 22.5,
 *   st word 53.7 / 49.9 / 22.6, st chunk 20.2 / 19.1 / 7.0, cvt 61.2 / 56.6 / 56.3:
 *   the chunk form is bound by its stores' shape; the word form by the stores
 *   themselves (alone as fast), at 132 blocks by HBM (~3.0 TB/s). (That run's
 *   "DIFFERS" was the lab's chunk form passing one scale byte for a chunk's two
 *   k16 blocks; fixed since, not rerun.)
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        fold_lab.cu -o fold_lab && ./fold_lab */
#include "kernels/sm90/fold_rows.cuh"
#include "lab_common.cuh"

#define V_CHUNK 0
#define V_WORD 1
#define V_WORD_U4 2
#define V_ST_WORD 3
#define V_ST_CHUNK 4
#define V_CVT 5
static const char *v_names[6] = {"chunk", "word", "word u4", "st word", "st chunk", "cvt"};

/* One pass: the stage's n rows (data, then scale rows of K / 16 bytes) into out (rows K apart). */
template <int V>
__device__ __forceinline__ uint32_t fold_pass(const uint8_t *data, const uint8_t *scales, int K, int n, uint16_t *out)
{
    const int lane = threadIdx.x % 32;
    uint32_t acc = 0;
    for (int j = threadIdx.x / 32; j < n; j += blockDim.x / 32) {
        const uint8_t *row = data + (size_t)j * (K / 2), *sc = scales + (size_t)j * (K / 16);
        uint4 *dst = (uint4 *)(out + (size_t)j * K);
        if constexpr (V == V_CHUNK) {
            for (int ch = lane; ch < K / 32; ch += 32) { /* the chunk form (main before 2026-12-06) */
                const uint4 v = ld_shared_v4(smem_u32(row + 16 * ch));
                const uint32_t s2 = fr_hmul2(fr_e4m3x2<false>(*(const uint16_t *)(sc + 2 * ch)), FR_F16_2P7);
                const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int u = 0; u < 4; u++) { /* elements 8 u .. 8 u + 7, k16 block u / 2 */
                    const uint32_t h = u < 2 ? s2 & 0xFFFFu : s2 >> 16;
                    dst[4 * ch + u] = fold_nv_word(w[u], h | h << 16);
                }
            }
        } else if constexpr (V == V_WORD || V == V_CVT) {
#pragma unroll 1
            for (int o = lane; o < K / 8; o += 32) {
                const uint32_t h = fr_hmul2(fr_e4m3x2<false>(sc[o / 2]), FR_F16_2P7) & 0xFFFFu;
                const uint4 w = fold_nv_word(*(const uint32_t *)(row + 4 * o), h | h << 16);
                if constexpr (V == V_WORD) dst[o] = w;
                else acc ^= w.x ^ w.y ^ w.z ^ w.w;
            }
        } else if constexpr (V == V_WORD_U4) {
#pragma unroll 4
            for (int o = lane; o < K / 8; o += 32) {
                const uint32_t h = fr_hmul2(fr_e4m3x2<false>(sc[o / 2]), FR_F16_2P7) & 0xFFFFu;
                dst[o] = fold_nv_word(*(const uint32_t *)(row + 4 * o), h | h << 16);
            }
        } else if constexpr (V == V_ST_WORD) {
            for (int o = lane; o < K / 8; o += 32) dst[o] = make_uint4(o, j, 1u, 2u);
        } else {
            for (int ch = lane; ch < K / 32; ch += 32)
#pragma unroll
                for (int u = 0; u < 4; u++) dst[4 * ch + u] = make_uint4(ch, j, u, 2u);
        }
    }
    return acc;
}

template <int V>
__global__ void __launch_bounds__(384, 1) fold_kernel(const uint8_t *src, uint16_t *out, int K, int rps, int reps,
                                                      uint32_t *sink)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    const int stage_bytes = rps * (K / 2 + K / 16);
    for (int i = threadIdx.x; i < stage_bytes / 4; i += blockDim.x) ((uint32_t *)smem)[i] = ((const uint32_t *)src)[i];
    __syncthreads();
    uint32_t acc = 0;
    for (int r = 0; r < reps; r++) {
        acc ^= fold_pass<V>(smem, smem + rps * (K / 2), K, rps, out + ((size_t)blockIdx.x * reps + r) * rps * K);
        __syncthreads(); /* the stage read by every warp (fold_item's) */
    }
    __threadfence();
    if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

typedef void (*fold_fn)(const uint8_t *, uint16_t *, int, int, int, uint32_t *);

int main()
{
    const int Ks[2] = {4096, 7168}, blocks[3] = {1, 16, 132}, reps = 24, region = 200 * 1024;
    const fold_fn fns[6] = {fold_kernel<0>, fold_kernel<1>, fold_kernel<2>, fold_kernel<3>, fold_kernel<4>, fold_kernel<5>};
    uint8_t *src;
    uint16_t *out, *ref;
    uint32_t *sink;
    const size_t src_bytes = 64 * 8192, out_elems = (size_t)132 * reps * 32 * 7168;
    CHECK(cudaMalloc(&src, src_bytes));
    CHECK(cudaMalloc(&out, out_elems * 2));
    CHECK(cudaMalloc(&ref, out_elems * 2));
    CHECK(cudaMalloc(&sink, 1024 * 4));
    uint8_t *h = (uint8_t *)malloc(src_bytes);
    for (size_t i = 0; i < src_bytes; i++) h[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < src_bytes; i++) /* E4M3 scale bytes: finite, not NaN (0x7F / 0xFF) */
        if ((h[i] & 0x7F) == 0x7F) h[i] ^= 0x01;
    CHECK(cudaMemcpy(src, h, src_bytes, cudaMemcpyHostToDevice));
    for (int v = 0; v < 6; v++) CHECK(cudaFuncSetAttribute(fns[v], cudaFuncAttributeMaxDynamicSharedMemorySize, region));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int ki = 0; ki < 2; ki++) {
        const int K = Ks[ki], rps = min(32, region / (4 * (K / 2 + K / 16)));
        const double bytes_block = (double)reps * rps * K * 2;
        printf("K = %d, %d rows a stage, %d passes a block (%.2f MB of fp16 a block)\n", K, rps, reps, bytes_block / 1e6);
        printf("  %-9s %12s %12s %12s   (GB/s a block; total at 132)\n", "variant", "1 block", "16 blocks", "132 blocks");
        for (int v = 0; v < 6; v++) {
            printf("  %-9s", v_names[v]);
            double total = 0;
            for (int bi = 0; bi < 3; bi++) {
                const int nb = blocks[bi];
                float best = 1e30f;
                for (int it = 0; it < 5; it++) {
                    CHECK(cudaMemset(out, 0xFF, (size_t)nb * reps * rps * K * 2)); /* NaN poison */
                    CHECK(cudaEventRecord(e0));
                    fns[v]<<<nb, 384, region>>>(src, out, K, rps, reps, sink);
                    CHECK(cudaGetLastError());
                    CHECK(cudaEventRecord(e1));
                    CHECK(cudaEventSynchronize(e1));
                    float ms;
                    CHECK(cudaEventElapsedTime(&ms, e0, e1));
                    best = fminf(best, ms);
                }
                const double gbs = bytes_block / (best * 1e-3) / 1e9;
                printf(" %12.1f", gbs);
                total = gbs * nb;
                if (v == V_CHUNK && bi == 2) CHECK(cudaMemcpy(ref, out, (size_t)nb * reps * rps * K * 2, cudaMemcpyDeviceToDevice));
                if ((v == V_WORD || v == V_WORD_U4) && bi == 2) { /* the same bits as the chunk form's */
                    const size_t n = (size_t)nb * reps * rps * K * 2;
                    uint8_t *a = (uint8_t *)malloc(n), *b = (uint8_t *)malloc(n);
                    CHECK(cudaMemcpy(a, out, n, cudaMemcpyDeviceToHost));
                    CHECK(cudaMemcpy(b, ref, n, cudaMemcpyDeviceToHost));
                    size_t bad = 0;
                    for (size_t i = 0; i < n; i++) bad += a[i] != b[i];
                    printf(" [%s]", bad ? "DIFFERS" : "same bits");
                    free(a), free(b);
                }
            }
            printf("   (%.0f GB/s)\n", total);
        }
    }
    CHECK(cudaDeviceSynchronize());
    printf("fold_lab done\n");
    return 0;
}
