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
 * wgmma_tile.cuh's wg_group_barrier; 6: mega's gemm_run between the item
 * loop's barriers (run_kernel: its barriers initialised and invalidated per
 * run, a 2-entry descriptor queue from thread 0, a 2-stage ring thread 0
 * fills by bulk copy, the consumers read by ld.shared and give back,
 * bar.sync 2, 128 / 1, 256); 7: as 6 with the ring filled by the 128
 * producer threads' cp.async and cp.async.mbarrier.arrive (the gathering
 * GEMM1); 8: as 0, plus two __syncwarp a round in warpgroup 2 only (the
 * non-swapped bf16 store's, whose warps without valid rows return before
 * them); 9: as 6, plus warpgroup 2's __syncwarp per tile; 10-16: mode 6
 * taken apart (run_flags).
 * The program checks its own result: every thread must read each round's value.
 * Measured (H200, thirty-eighth session; 0 wrong reads natively in every mode): racecheck
 * clean in 0-4, 8, 14, 15; WAR hazards on item in 5 (register barrier id); RAW on item in 6
 * (as in mega: thread 0's write, a consumer's read after __syncthreads), 7, 9-12, 16; 13
 * (no descriptor queue) only the ring's bulk-copy reuse warnings. So racecheck misreads the
 * queue's handshake (mbarriers from thread 0 beside named barriers): a false positive, not
 * a missing barrier. docs/benchmarks.md, "racecheck's reports explained". */
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
        if (mode == 8 && wg == 2) {
            __syncwarp();
            __syncwarp();
        }
        if (mode == 5 && wg > 0)
            asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
        if (mode == 2) {
            if (wg > 0) mbar_arrive(&bar);
            else if (threadIdx.x == 0) {
                mbar_wait_bounded(&bar, r & 1, 4000000000u); /* 4 s */
                if (tile_wait_failed) atomicAdd(bad, 1000);
            }
        }
    }
}

#define RUN_TILES 3
#define RUN_STEPS 4
#define RUN_STAGE 4096

/* Modes 6, 7, 9 - 16 (see the top): per round, one run of RUN_TILES tiles of
 * RUN_STEPS ring steps, then the item loop's write / barrier / read. Modes
 * 10 - 16 take mode 6 apart (flags): RUN_PERSIST the barriers initialised
 * once, their phases carried over the rounds; RUN_UNBOUNDED hopper.cuh's
 * unbounded mbar_wait for every wait; RUN_NODATA no ring data (the producer
 * only arrives, the consumers read nothing); RUN_NOQUEUE no descriptor
 * queue (every thread knows the run's length). */
#define RUN_PERSIST 1
#define RUN_UNBOUNDED 2
#define RUN_NODATA 4
#define RUN_NOQUEUE 8

static int run_flags(int mode)
{
    switch (mode) {
    case 10: return RUN_PERSIST;
    case 11: return RUN_UNBOUNDED;
    case 12: return RUN_NODATA;
    case 13: return RUN_NOQUEUE;
    case 14: return RUN_PERSIST | RUN_UNBOUNDED | RUN_NODATA | RUN_NOQUEUE;
    case 15: return RUN_NODATA | RUN_NOQUEUE;
    case 16: return RUN_PERSIST | RUN_UNBOUNDED;
    default: return 0;
    }
}

__device__ __forceinline__ void lab_wait(uint64_t *b, int parity, int flags)
{
    if (flags & RUN_UNBOUNDED) mbar_wait(b, parity);
    else mbar_wait_bounded(b, parity, 4000000000u); /* 4 s: racecheck runs slowly */
}

__device__ __forceinline__ void run_barriers(uint64_t *full, uint64_t *empty, uint64_t *q_full, uint64_t *q_empty,
                                             int full_count, bool init)
{
    for (int i = 0; i < 2; i++) {
        if (init) mbar_init(&full[i], full_count), mbar_init(&empty[i], 256), mbar_init(&q_full[i], 1), mbar_init(&q_empty[i], 256);
        else mbar_inval(&full[i]), mbar_inval(&empty[i]), mbar_inval(&q_full[i]), mbar_inval(&q_empty[i]);
    }
    if (init) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__global__ void __launch_bounds__(384) run_kernel(int mode, int flags, int rounds, const uint4 *src, int *bad)
{
    __shared__ __align__(128) uint8_t ring[2][RUN_STAGE];
    __shared__ uint64_t full[2], empty[2], q_full[2], q_empty[2];
    __shared__ int q_desc[2], item, run_end;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, full_count = mode == 7 ? 129 : 1;
    const bool queue = !(flags & RUN_NOQUEUE), data = !(flags & RUN_NODATA);
    if (threadIdx.x == 0) tile_wait_arm();
    int kg = 0, q0 = 0;
    for (int r = 0; r < rounds; r++) {
        if (threadIdx.x == 0 && (r == 0 || !(flags & RUN_PERSIST)))
            run_barriers(full, empty, q_full, q_empty, full_count, true);
        __syncthreads();
        if (!(flags & RUN_PERSIST)) kg = 0, q0 = 0;
        for (int qq = 0;; qq++) {
            const int q = q0 + qq, more = qq < RUN_TILES;
            if (wg == 0) { /* run_produce */
                if (queue) {
                    if (t == 0) {
                        lab_wait(&q_empty[q & 1], ((q >> 1) & 1) ^ 1, flags);
                        q_desc[q & 1] = more;
                        if (!more) run_end = r * 7 + 1;
                        mbar_arrive(&q_full[q & 1]);
                    }
                    asm volatile("bar.sync 2, 128;\n" ::: "memory");
                    if (!q_desc[q & 1]) break;
                } else if (!more) {
                    if (t == 0) run_end = r * 7 + 1;
                    break;
                }
                for (int kt = 0; kt < RUN_STEPS; kt++, kg++) {
                    const int st = kg % 2;
                    lab_wait(&empty[st], ((kg / 2) & 1) ^ 1, flags);
                    if (mode == 7) {
                        if (t == 0) mbar_expect_tx(&full[st], 0);
                        for (int c = t; c < RUN_STAGE / 16; c += 128)
                            cp_async16(smem_u32(&ring[st][16 * c]), src + (kg * RUN_STAGE / 16 + c) % 4096);
                        cp_async_mbar_arrive(&full[st]);
                    } else if (t == 0 && data) {
                        mbar_expect_tx(&full[st], RUN_STAGE);
                        bulk_load(ring[st], src + (kg * RUN_STAGE / 16) % 4096, RUN_STAGE, &full[st]);
                    } else if (t == 0) {
                        mbar_arrive(&full[st]);
                    }
                }
            } else { /* run_consume */
                if (queue) {
                    lab_wait(&q_full[q & 1], (q >> 1) & 1, flags);
                    if (!q_desc[q & 1]) {
                        mbar_arrive(&q_empty[q & 1]);
                        break;
                    }
                } else if (!more) {
                    break;
                }
                uint32_t sum = 0;
                for (int kt = 0; kt < RUN_STEPS; kt++, kg++) {
                    const int st = kg % 2;
                    lab_wait(&full[st], (kg / 2) & 1, flags);
                    if (data) sum += ld_shared_v4(smem_u32(&ring[st][16 * (threadIdx.x - 128)])).x;
                    mbar_arrive(&empty[st]);
                }
                if (sum == 0xffffffffu) atomicAdd(bad, 1); /* keeps the reads */
                if (mode == 9 && wg == 2) __syncwarp();
                if (queue) mbar_arrive(&q_empty[q & 1]);
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
            }
        }
        q0 += RUN_TILES + 1;
        __syncthreads();
        const int end = run_end;
        if (threadIdx.x == 0 && !(flags & RUN_PERSIST)) run_barriers(full, empty, q_full, q_empty, full_count, false);
        __syncthreads();
        if (end != r * 7 + 1) atomicAdd(bad, 1);
        if (threadIdx.x == 0) item = r * 7 + 2; /* mega.cu's sh->item */
        __syncthreads();
        const int i = item;
        __syncthreads();
        if (i != r * 7 + 2) atomicAdd(bad, 1);
    }
    if (threadIdx.x == 0 && (flags & RUN_PERSIST)) run_barriers(full, empty, q_full, q_empty, full_count, false);
    if (threadIdx.x == 0 && tile_wait_failed) atomicAdd(bad, 1000);
}

int main(int argc, char **argv)
{
    const int mode = argc > 1 ? atoi(argv[1]) : 1;
    int *bad, h = -1;
    if (cudaMalloc(&bad, sizeof(int)) != cudaSuccess || cudaMemset(bad, 0, sizeof(int)) != cudaSuccess) return 1;
    uint4 *src;
    if (cudaMalloc(&src, 4096 * sizeof(uint4)) != cudaSuccess || cudaMemset(src, 1, 4096 * sizeof(uint4)) != cudaSuccess) return 1;
    if (mode >= 6 && mode != 8) run_kernel<<<2, 384>>>(mode, run_flags(mode), 8, src, bad);
    else kernel<<<2, 384>>>(mode, 8, bad);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost);
    printf("mode %d: %s, %d wrong reads\n", mode, cudaGetErrorString(e), h);
    return e != cudaSuccess || h != 0;
}
