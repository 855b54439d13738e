/* Kernel lab (fifty-ninth session): the 128-row register tile's A16 form as
 * one pipeline over a block's tiles (fr_pipe.cuh: the epilogue beside the next
 * tile's K loop), against the library's tile in split's form (the epilogue
 * by the consumers) and mega's (after the tile, all 384 threads), NVFP4 at
 * the flash / pro EP8 slice's shapes. Prints each one's best of 5 and whether
 * the pipelined outputs are the tile's bytes (outputs poisoned before each).
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        rs_pipe.cu -o rs_pipe && ./rs_pipe
 * -DFR_PIPE_CVT=n, -DFR_PIPE_RAW=n: the rings (fr_pipe.cuh's defaults otherwise). The session's
 * first form here also tried who streams (thread 0 both, or two threads) and 64 epilogue threads:
 * thread 0 alone and 96 threads won (docs/benchmarks.md). */
#include <stdint.h>

#define FR_SMEM_LIMIT (227 * 1024) /* the split backend's: no mega kernel around the lab's tile */
#include "fr_pipe.cuh"
#include "lab_common.cuh"
#include "rs_lab_common.cuh"

#include <stdarg.h>
#include <string.h>
#include <vector>

/* The pipelined form over a plain persistent grid (the lab's stand-in for
 * the mega runs' item claims): thread 0 streams, the consumers run the K
 * loops, warps 1-3 the epilogues (fr_pipe.cuh's pieces, as mega_runs.cuh's rs_run). */
struct pipe_pos {
    int64_t row0;
    int rows_valid, n0, e;
};

__device__ __forceinline__ pipe_pos pipe_pos_of(const gemm_args &g, int tile, int n_tiles)
{
    pipe_pos p;
    const int mt = tile / n_tiles;
    p.n0 = (tile % n_tiles) * FR_BN;
    p.e = tile_expert(g.tile_offset, g.E, mt);
    p.row0 = g.expert_offset[p.e] + (int64_t)(mt - g.tile_offset[p.e]) * 128;
    p.rows_valid = (int)min((int64_t)128, (int64_t)g.expert_offset[p.e + 1] - p.row0);
    return p;
}

template <bool GLU>
__global__ void __launch_bounds__(384, 1) pipe_kernel(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                      const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    fr_pipe_smem<RS_NVFP4> &s = *(fr_pipe_smem<RS_NVFP4> *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_tiles = g.N / FR_BN, n_k = g.K / FR_BK;
    const int total = g.tile_offset[g.E] * n_tiles;
    if (threadIdx.x == 0) tile_wait_arm(), fr_pipe_init(s);
    __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<FR_PRODUCER_REGS(RS_NVFP4, 128)>();
        if (t == 0) {
            asm volatile("fence.proxy.async.global;\n" ::: "memory");
            uint32_t ph = 0;
            for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
                const pipe_pos p = pipe_pos_of(g, tile, n_tiles);
                fr_pipe_load_steps(s, g, &ta, &tb, (int)p.row0, (int64_t)p.e * g.N + p.n0, 0, n_k, ph);
            }
        } else if (t >= 128 - FR_PIPE_EPI) {
            int nc = 0;
            for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
                const pipe_pos p = pipe_pos_of(g, tile, n_tiles);
                const bool last = tile + (int)gridDim.x >= total;
                fr_pipe_epilogue_tile(s, g, (int)p.row0, p.rows_valid, p.n0, GLU, t - (128 - FR_PIPE_EPI), nc, [&] { return last; });
            }
        }
    } else {
        setmaxnreg_inc<FR_CONSUMER_REGS(RS_NVFP4, 128)>();
        const fr_addr ad = fr_pipe_addr_of(s, wg - 1, 16 * (t / 32) + (t % 32) / 4, t % 4);
        uint32_t ph = 0;
        int nc = 0;
        for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
            float acc[2][64];
            fr_pipe_consume(s, g, ad, acc, ph, pipe_pos_of(g, tile, n_tiles).rows_valid);
            const pipe_pos p = pipe_pos_of(g, tile, n_tiles); /* again after the loop: not held across it */
            fr_pipe_finish(g, acc, fr_pipe_scale(g, p.e), GLU);
            fr_pipe_hand_over(s, g, acc, GLU, wg - 1, t, nc, tile + (int)gridDim.x >= total, (int)p.row0, p.rows_valid, p.n0);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) tile_wait_report(g.error);
}

/* The library's tile (A16 form), split's way (EPILOGUE: by the consumers) or mega's (after it, all 384 threads). */
template <int FMT, bool MEGA_EPI>
__global__ void __launch_bounds__(384, 1) base_kernel(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                      const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ int next_tile;
    if (threadIdx.x == 0) tile_wait_arm();
    const int n_tiles = g.N / FR_BN, total = g.tile_offset[g.E] * n_tiles;
    for (int tile = blockIdx.x; tile < total;) {
        if (threadIdx.x == 0) next_tile = tile + gridDim.x;
        const pipe_pos p = pipe_pos_of(g, tile, n_tiles);
        fp8_rs_tile<FMT, 128, true, !MEGA_EPI, fr_no_hook, 1, true>(g, &ta, &tb, smem_raw, p.e, (int)p.row0, p.rows_valid, p.n0);
        if constexpr (MEGA_EPI) fr_epilogue_after<FMT, 128>(g, smem_raw);
        tile = next_tile;
        __syncthreads();
    }
}

/* fp16 rows in [-2, 2) (as a fold's values, O(1)) */
__global__ void fill_f16(__half *p, int64_t n, uint32_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2half(((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 4.0f);
    }
}

template <typename KERNEL>
static bool kernel_ok(KERNEL k, const char *name, int smem)
{
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, k));
    if (fa.localSizeBytes > 0) printf("(%s: local %zu B: a call's frame)\n", name, (size_t)fa.localSizeBytes);
    if (fa.numRegs != FR_LAUNCH_REGS) { /* setmaxnreg moves them: the launch needs them all */
        printf("%s: %d registers, need %d\n", name, fa.numRegs, FR_LAUNCH_REGS);
        return false;
    }
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
}

/* NVFP4, E experts of rows rows; GEMM1 (glu: NVFP4 out, N_out = N / 2) or GEMM2 (bf16 out). */
template <bool GLU>
static void run_case(const char *name, int E, int rows_per_expert, int K, int N, int sms)
{
    constexpr int FMT = RS_NVFP4;
    const moe_ep_format_t NV = MOE_EP_FORMAT_NVFP4, out_fmt = GLU ? NV : MOE_EP_FORMAT_BF16;
    const int N_out = GLU ? N / 2 : N;
    const int64_t rows = (int64_t)E * rows_per_expert;
    gemm_args g;
    memset(&g, 0, sizeof g);
    g.a_fmt = NV, g.b_fmt = NV, g.out_fmt = out_fmt;
    g.K = K, g.N = N, g.N_out = N_out, g.E = E, g.swiglu_limit = 10.0f, g.a_gs = 1.0f, g.out_gs = 1.0f;
    g.wait_ns = MOE_EP_TILE_WAIT_MAX_NS;
    g.a_scale_stride = (int)moe_ep_act_scale_stride(NV, K);
    g.out_scale_stride = moe_ep_act_scale_stride(out_fmt, N_out);
    int64_t b_bytes = moe_ep_row_data_bytes(NV, K) * E * (int64_t)N, bs_bytes = moe_ep_row_scale_bytes(NV, K) * E * (int64_t)N;
    uint8_t *b = (uint8_t *)dev_alloc(b_bytes), *bs = (uint8_t *)dev_alloc(bs_bytes);
    fill_random<<<1024, 256>>>(b, b_bytes, 2, 0);
    fill_u32<<<1024, 256>>>((uint32_t *)bs, bs_bytes / 4, 0x38383838u);
    float *gs = (float *)dev_alloc(E * sizeof(float));
    fill_u32<<<1, 256>>>((uint32_t *)gs, E, 0x43000000u); /* S_w = 128 */
    g.b = b, g.b_scales = bs, g.b_gs = gs;
    g.b_mult = (const uint32_t *)dev_alloc((int64_t)E * N / 256 * (K / 128) * FR_WREC_STAGE(FMT));
    lab_weight_records<<<(unsigned)(((int64_t)E * N * (K / 128) + 255) / 256), 256>>>(bs, (int64_t)E * N, K, 1, 1,
                                                                                      (uint32_t *)g.b_mult);
    g.a = (const uint8_t *)dev_alloc(rows * K / 2); /* mapped, never read (A16) */
    __half *a16 = (__half *)dev_alloc(rows * K * 2);
    fill_f16<<<1024, 256>>>(a16, rows * K, 3);
    g.a16 = (const uint16_t *)a16, g.a16_pitch = K;
    const size_t out_bytes = moe_ep_row_data_bytes(out_fmt, N_out) * rows, osc_bytes = g.out_scale_stride * rows + 16;
    g.out = (uint8_t *)dev_alloc(out_bytes);
    g.out_scales = (uint8_t *)dev_alloc(osc_bytes);
    lab_layout(g, E, rows_per_expert, 128);
    CUtensorMap ta, tb;
    if (fr_make_maps<128>(g, rows, &ta, &tb) != MOE_EP_SUCCESS) exit(1);

    const int base_smem = (int)FR_SMEM_BYTES(FMT, 128), pipe_smem_bytes = (int)FR_PIPE_SMEM_BYTES(FMT);
    auto *kb = base_kernel<FMT, false>, *km = base_kernel<FMT, true>;
    auto *kp = pipe_kernel<GLU>;
    if (!kernel_ok(kb, "base (split)", base_smem) || !kernel_ok(km, "base (mega's epilogue)", base_smem) ||
        !kernel_ok(kp, "pipe", pipe_smem_bytes))
        return;
    std::vector<uint8_t> ref(out_bytes + osc_bytes), got(out_bytes + osc_bytes);
    auto outputs = [&](std::vector<uint8_t> &h) {
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(h.data(), g.out, out_bytes, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(h.data() + out_bytes, g.out_scales, osc_bytes, cudaMemcpyDeviceToHost));
        uint32_t e;
        CHECK(cudaMemcpy(&e, g.error, 4, cudaMemcpyDeviceToHost));
        if (e) printf("%s: device error word %08x\n", name, e);
    };
    auto poison = [&]() {
        CHECK(cudaMemset(g.out, 0xFF, out_bytes));
        CHECK(cudaMemset(g.out_scales, 0xFF, osc_bytes));
    };
    poison();
    kb<<<sms, 384, base_smem>>>(g, ta, tb);
    outputs(ref);
    float t_base, t_mega, t_pipe;
    LAB_TIME_BEST(t_base, 5, (kb<<<sms, 384, base_smem>>>(g, ta, tb)));
    poison();
    km<<<sms, 384, base_smem>>>(g, ta, tb);
    outputs(got);
    const bool mega_same = ref == got;
    LAB_TIME_BEST(t_mega, 5, (km<<<sms, 384, base_smem>>>(g, ta, tb)));
    poison();
    kp<<<sms, 384, pipe_smem_bytes>>>(g, ta, tb);
    outputs(got);
    size_t diff = 0, first = (size_t)-1;
    for (size_t i = 0; i < ref.size(); i++)
        if (ref[i] != got[i]) diff++, first = first == (size_t)-1 ? i : first;
    LAB_TIME_BEST(t_pipe, 5, (kp<<<sms, 384, pipe_smem_bytes>>>(g, ta, tb)));
    printf("%-30s E %2d x %4d rows K %5d N %5d: split tile %8.1f us, mega's epilogue %8.1f us (%s), pipelined %8.1f us "
           "(%.3f of split, %.3f of mega's) bytes %s (%zu differ, first at %zd of %zu)\n",
           name, E, rows_per_expert, K, N, t_base * 1e3, t_mega * 1e3, mega_same ? "same" : "DIFFER", t_pipe * 1e3,
           t_pipe / t_base, t_pipe / t_mega, diff ? "DIFFER" : "same", diff, diff ? (ssize_t)first : (ssize_t)-1,
           ref.size());
    cudaFree(b), cudaFree(bs), cudaFree(gs), cudaFree((void *)g.b_mult), cudaFree((void *)g.a), cudaFree(a16);
    cudaFree(g.out), cudaFree(g.out_scales), lab_layout_free(g);
}

int main(void)
{
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("%d SMs; pipelined: %d fp16 + %d raw stages, %zu B shared memory (the tile's %zu)\n", sms, FR_PIPE_CVT,
           FR_PIPE_RAW, (size_t)FR_PIPE_SMEM_BYTES(RS_NVFP4), (size_t)FR_SMEM_BYTES(RS_NVFP4, 128));
    /* the flash EP8 slice: T = 8192 (32 experts of 1536 rows: 4 here), T = 512 (32 of 96) */
    run_case<true>("t8192 nvfp4 gemm1", 4, 1536, 4096, 4096, sms);
    run_case<false>("t8192 nvfp4 gemm2", 4, 1536, 2048, 4096, sms);
    /* the slice's 32 experts: weights from HBM (4 experts' fit L2) */
    run_case<true>("t8192 nvfp4 gemm1 32 experts", 32, 1536, 4096, 4096, sms);
    run_case<false>("t8192 nvfp4 gemm2 32 experts", 32, 1536, 2048, 4096, sms);
    run_case<true>("t512 nvfp4 gemm1", 32, 96, 4096, 4096, sms);
    run_case<false>("t512 nvfp4 gemm2", 32, 96, 2048, 4096, sms);
    run_case<true>("pro t8192 nvfp4 gemm1", 4, 1536, 7168, 6144, sms);
    return 0;
}
