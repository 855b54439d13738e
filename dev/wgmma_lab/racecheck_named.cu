/* Lab: does compute-sanitizer's racecheck order "thread 0 writes shared
 * memory, __syncthreads, every thread reads" when warpgroups also use named
 * barriers with thread counts (bar.sync 1, 256 / bar.sync 2, 128), as the
 * mega kernel's bf16 runs do? racecheck flagged exactly that pattern there
 * (mega.cu's item loop and mega_exit, thirty-seventh session).
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        -o racecheck_named racecheck_named.cu
 *   compute-sanitizer --tool racecheck ./racecheck_named MODE
 * MODE 0: barrier 0 only (must be clean); 1: each round the producer
 * warpgroup (warps 0-3) syncs on barrier 2 (128 threads) and the consumers
 * (warps 4-11) on barrier 1 (256 threads) between the block-wide barriers;
 * 2: as 1, plus an mbarrier the consumers arrive on and thread 0 waits for
 * (hopper.cuh's bounded wait); 3: the first block-wide barrier is
 * __syncthreads_and (bar.red), 4: the second; 5: each consumer warpgroup h
 * syncs on barrier 4 + h (128 threads) with the id in a register, as
 * wgmma_tile.cuh's wg_group_barrier.
 * The program checks its own result: every thread must read each round's value. */
#include <cstdio>
#include <cstdlib>

#include "kernels/sm90/hopper.cuh"

__global__ void __launch_bounds__(384) kernel(int mode, int rounds, int *bad)
{
    __shared__ int item;
    __shared__ uint64_t bar;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        tile_wait_arm();
        mbar_init(&bar, 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    for (int r = 0; r < rounds; r++) {
        if (threadIdx.x == 0) item = r * 7 + 1; /* mega.cu's sh->item */
        if (mode == 3) __syncthreads_and(1); else __syncthreads();
        const int i = item;
        if (mode == 4) __syncthreads_and(i > 0); else __syncthreads();
        if (i != r * 7 + 1) atomicAdd(bad, 1);
        if (mode == 1 || mode == 2) {
            if (wg == 0) asm volatile("bar.sync 2, 128;\n" ::: "memory");
            else asm volatile("bar.sync 1, 256;\n" ::: "memory");
        }
        if (mode == 5 && wg > 0)
            asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
        if (mode == 2) {
            if (wg > 0) mbar_arrive(&bar);
            else if (threadIdx.x == 0) {
                mbar_wait_bounded(&bar, r & 1, 1000000000u); /* 1 s */
                if (tile_wait_failed) atomicAdd(bad, 1000);
            }
        }
    }
}

int main(int argc, char **argv)
{
    const int mode = argc > 1 ? atoi(argv[1]) : 1;
    int *bad, h = -1;
    if (cudaMalloc(&bad, sizeof(int)) != cudaSuccess || cudaMemset(bad, 0, sizeof(int)) != cudaSuccess) return 1;
    kernel<<<2, 384>>>(mode, 8, bad);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost);
    printf("mode %d: %s, %d wrong reads\n", mode, cudaGetErrorString(e), h);
    return e != cudaSuccess || h != 0;
}
