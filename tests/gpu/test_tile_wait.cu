/* The GEMM tiles' pipeline waits are bounded (hopper.cuh: mbar_wait_bounded,
 * tile_wait_arm, tile_wait_report):
 *   - a phase that completes returns, the error word still 0;
 *   - a phase that never completes (an arrival with 16 bytes expected that no
 *     copy brings: the bug that once hung the suite) returns after the bound
 *     (1 ms here) in every thread, and the report sets the error word to
 *     MOE_EP_DEVERR_TIMEOUT / MOE_EP_WAIT_TILE;
 *   - with the word already set, the word stays as it was (the first error
 *     wins);
 *   - after one wait of a block gave up, the block's later waits give up at
 *     once (the second wait here has the 4 s bound: a functional check, the
 *     two bounds are 4000x apart).
 * Exits 77 without a usable GPU. */
extern "C" {
#include "test_util.h"
}

#include "kernels/sm90/hopper.cuh"

#include <cuda_runtime.h>

#define TEST_NAME "test_tile_wait"
#include "cuda_check.h"

/* One block, as a tile's ring: thread 0 arms the waits and the barrier (an
 * arrival, plus 16 bytes to come when lost_bytes), every thread waits for
 * phase 0 (returned[t] = 1), then thread 0 reports. With second_bound, every
 * thread waits once more (bound second_bound) and *second_ns is thread 0's
 * time in that wait. */
__global__ void wait_kernel(uint32_t *error, uint32_t bound_ns, int lost_bytes, int *returned, uint32_t second_bound,
                            uint64_t *second_ns)
{
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x == 0) {
        tile_wait_arm();
        mbar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (lost_bytes) mbar_expect_tx(&bar, 16);
        else mbar_arrive(&bar);
    }
    mbar_wait_bounded(&bar, 0, bound_ns);
    if (second_bound) {
        long long t0 = global_ns();
        mbar_wait_bounded(&bar, 0, second_bound);
        if (threadIdx.x == 0) *second_ns = (uint64_t)(global_ns() - t0);
    }
    returned[threadIdx.x] = 1;
    __syncthreads();
    if (threadIdx.x == 0) tile_wait_report(error);
}

/* The kernel on 128 threads from an error word of `before`: the word after,
 * how many threads returned, and the second wait's ns (second_bound). */
static uint32_t run(uint32_t before, uint32_t bound_ns, int lost_bytes, int *returned_threads, uint32_t second_bound,
                    uint64_t *second_ns_out)
{
    uint32_t *error, after = 0;
    int *returned, host[128];
    uint64_t *second_ns, zero = 0;
    CK(cudaMalloc(&error, sizeof *error));
    CK(cudaMalloc(&second_ns, sizeof *second_ns));
    CK(cudaMemcpy(second_ns, &zero, sizeof zero, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&returned, sizeof host));
    CK(cudaMemcpy(error, &before, sizeof before, cudaMemcpyHostToDevice));
    CK(cudaMemset(returned, 0, sizeof host));
    wait_kernel<<<1, 128>>>(error, bound_ns, lost_bytes, returned, second_bound, second_ns);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&after, error, sizeof after, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(host, returned, sizeof host, cudaMemcpyDeviceToHost));
    *returned_threads = 0;
    for (int i = 0; i < 128; i++) *returned_threads += host[i];
    CK(cudaMemcpy(second_ns_out, second_ns, sizeof zero, cudaMemcpyDeviceToHost));
    CK(cudaFree(second_ns));
    CK(cudaFree(error));
    CK(cudaFree(returned));
    return after;
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_tile_wait: no usable CUDA device, skipped\n");
        return 77;
    }
    printf("tile pipeline waits are bounded\n");
    const uint32_t timed_out = (MOE_EP_DEVERR_TIMEOUT << 24) | MOE_EP_WAIT_TILE, earlier = (1u << 24) | 7u;
    int n = 0;
    uint64_t ns = 0;
    uint32_t w = run(0u, 1000000u, 0, &n, 0u, &ns);
    EXPECT(w == 0u && n == 128, "completed phase: error word 0x%08x, %d of 128 threads returned", w, n);
    w = run(0u, 1000000u, 1, &n, 0u, &ns); /* 1 ms */
    EXPECT(w == timed_out && n == 128, "lost bytes: error word 0x%08x (want 0x%08x), %d of 128 threads returned", w,
           timed_out, n);
    w = run(earlier, 1000000u, 1, &n, 0u, &ns);
    EXPECT(w == earlier && n == 128, "word already set: 0x%08x (want it kept, 0x%08x), %d of 128 threads returned", w,
           earlier, n);
    w = run(0u, 1000000u, 1, &n, MOE_EP_TILE_WAIT_MAX_NS, &ns);
    EXPECT(w == timed_out && n == 128 && ns < MOE_EP_TILE_WAIT_MAX_NS / 4,
           "a later wait after a give-up: word 0x%08x, %d of 128 threads returned, %llu ns (bound %u)", w, n,
           (unsigned long long)ns, (unsigned)MOE_EP_TILE_WAIT_MAX_NS);
    return test_summary("test_tile_wait");
}
