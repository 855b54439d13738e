/* Host helpers shared by the kernel-lab programs in this folder: CUDA error
 * checks, 2-D TMA tensor maps (128-byte swizzle) and best-of-N event timing. */
#ifndef MOE_EP_LAB_COMMON_CUH
#define MOE_EP_LAB_COMMON_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static PFN_cuTensorMapEncodeTiled_v12000 lab_encode_fn(void)
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

/* [rows][cols] elements of elem_bytes each (K-major), boxes of box_rows x box_cols. */
static CUtensorMap lab_make_map(void *base, CUtensorMapDataType type, int elem_bytes, int rows, int cols,
                                int box_rows, int box_cols)
{
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols * elem_bytes};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = lab_encode_fn()(&m, type, 2, base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("tensor map encode failed: %d\n", (int)r);
        exit(1);
    }
    return m;
}

/* x[i] = a bf16 in [-1, 1) hashed from (i, seed), any grid (grid-stride):
 * fresh inputs for the bf16 labs, the same values whatever the launch. */
__global__ void lab_fill_bf16(__nv_bfloat16 *x, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352d, h ^= h >> 15, h *= 0x846ca68b, h ^= h >> 16;
        x[i] = __float2bfloat16(((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 2.0f);
    }
}

/* Buffers of the rate labs (rs_rate.cu, rs_block.cu): one cycle count per
 * block and a sink of 384 floats per block (keeps results live), for one
 * block per SM. */
struct lab_rate_bufs {
    int sms;
    long long *cyc;
    float *sink;
};

static lab_rate_bufs lab_rate_setup(void)
{
    lab_rate_bufs b = {0, NULL, NULL};
    CHECK(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaMalloc(&b.cyc, 1024 * sizeof(long long)));
    CHECK(cudaMalloc(&b.sink, 1024 * 384 * sizeof(float)));
    return b;
}

/* Waits for the launches before it; returns the mean over sms blocks of the
 * clock64 cycles each wrote to dev_cycles[block] (-1 after a CUDA error). */
static double lab_mean_cycles(const char *name, const long long *dev_cycles, int sms)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("%s: %s\n", name, cudaGetErrorString(e));
        return -1.0;
    }
    long long h[1024];
    CHECK(cudaMemcpy(h, dev_cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    double avg = 0;
    for (int i = 0; i < sms; i++) avg += (double)h[i] / sms;
    return avg;
}

/* best_ms = the fastest of iters runs of the launch statement (the variadic
 * arguments, so a <<<grid, block>>> launch with commas fits), timed with events. */
/* The median of `iters` launches timed after `warm_ms` of the same launch back
 * to back: the GPU then runs at the clock its power cap allows for this
 * kernel (the H200 holds 700 W by lowering its SM clock to ~1470 MHz under
 * sustained tensor work, 1980 MHz idle), as in a sustained bench cell, not at
 * the clock of a GPU that idled. */
#define LAB_TIME_SUSTAINED(median_ms, iters, warm_ms, ...)                           \
    do {                                                                             \
        cudaEvent_t ev_[2 * 64 + 2];                                                 \
        const int n_ = (iters) < 64 ? (iters) : 64;                                  \
        for (int i_ = 0; i_ < 2 * n_ + 2; i_++) CHECK(cudaEventCreate(&ev_[i_]));   \
        float one_ms_, ms_[64];                                                      \
        CHECK(cudaEventRecord(ev_[0]));                                              \
        __VA_ARGS__;                                                                 \
        CHECK(cudaEventRecord(ev_[1]));                                              \
        CHECK(cudaEventSynchronize(ev_[1]));                                         \
        CHECK(cudaEventElapsedTime(&one_ms_, ev_[0], ev_[1]));                       \
        const int warm_ = (int)((warm_ms) / (one_ms_ > 1e-3f ? one_ms_ : 1e-3f)) + 1; \
        for (int i_ = 0; i_ < warm_; i_++) { __VA_ARGS__; }                         \
        for (int i_ = 0; i_ < n_; i_++) {                                            \
            CHECK(cudaEventRecord(ev_[2 + 2 * i_]));                                 \
            __VA_ARGS__;                                                             \
            CHECK(cudaEventRecord(ev_[3 + 2 * i_]));                                 \
        }                                                                            \
        CHECK(cudaEventSynchronize(ev_[1 + 2 * n_]));                                \
        for (int i_ = 0; i_ < n_; i_++) CHECK(cudaEventElapsedTime(&ms_[i_], ev_[2 + 2 * i_], ev_[3 + 2 * i_])); \
        for (int i_ = 1; i_ < n_; i_++) /* insertion sort: n_ <= 64 */               \
            for (int j_ = i_; j_ > 0 && ms_[j_] < ms_[j_ - 1]; j_--) {               \
                float x_ = ms_[j_]; ms_[j_] = ms_[j_ - 1], ms_[j_ - 1] = x_;        \
            }                                                                        \
        median_ms = ms_[n_ / 2];                                                     \
        lab_sustained_min_ms = ms_[0], lab_sustained_max_ms = ms_[n_ - 1];           \
        for (int i_ = 0; i_ < 2 * n_ + 2; i_++) cudaEventDestroy(ev_[i_]);          \
    } while (0)
/* the last LAB_TIME_SUSTAINED's fastest and slowest launch */
static float lab_sustained_min_ms, lab_sustained_max_ms;

#define LAB_TIME_BEST(best_ms, iters, ...)                        \
    do {                                                          \
        cudaEvent_t e0_, e1_;                                     \
        CHECK(cudaEventCreate(&e0_));                             \
        CHECK(cudaEventCreate(&e1_));                             \
        best_ms = 1e30f;                                          \
        for (int i_ = 0; i_ < (iters); i_++) {                    \
            float ms_;                                            \
            CHECK(cudaEventRecord(e0_));                          \
            __VA_ARGS__;                                          \
            CHECK(cudaEventRecord(e1_));                          \
            CHECK(cudaEventSynchronize(e1_));                     \
            CHECK(cudaEventElapsedTime(&ms_, e0_, e1_));          \
            if (ms_ < best_ms) best_ms = ms_;                     \
        }                                                         \
        cudaEventDestroy(e0_), cudaEventDestroy(e1_);             \
    } while (0)

#endif
