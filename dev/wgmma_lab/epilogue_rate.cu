/* Kernel lab: the GEMM epilogue alone (gemm_common.cuh), one block per SM,
 * a 128 x 256 fp32 C tile of random values in shared memory, the epilogue
 * run `reps` times by 256 or 384 threads: cycles per 128-row tile for the
 * serial epilogue (a thread per row and block) and the epilogue with CHUNKS
 * (epilogue_chunks, a lane per 8 columns, where epilogue_by_chunks picks it;
 * else the serial one again), GEMM1-like (SwiGLU, 128 outputs per row, the activation
 * formats) and GEMM2-like (256 outputs per row, the wire formats); QGLU: GEMM1 as the
 * register tile's 128-row instance runs it (fr_epilogue_after: chunks for every quantized output).
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        epilogue_rate.cu -o epilogue_rate && ./epilogue_rate */
#include "kernels/sm90/gemm_common.cuh"
#include "lab_common.cuh"

#include <string.h>

extern "C" moe_ep_status_t moe_ep_fail_at(moe_ep_status_t status, const char *, int, const char *, ...) { return status; }

#define REPS 20

template <bool CHUNKS, int NT, bool QGLU>
__global__ void __launch_bounds__(384, 1) epilogue_lab(gemm_args g, float scale, long long *cycles)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    float(*C)[256 + 4] = (float(*)[256 + 4])(void *)smem;
    for (int i = threadIdx.x; i < 128 * 260; i += blockDim.x) {
        uint32_t h = (uint32_t)(i + 7919 * blockIdx.x) * 2654435761u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        C[i / 260][i % 260] = ((int)(h & 0xFFFF) - 32768) / 32768.0f * scale; /* [-scale, scale) */
    }
    __syncthreads();
    long long c0 = clock64();
    if (threadIdx.x < NT)
        for (int r = 0; r < REPS; r++) epilogue<128, 256, CHUNKS, QGLU>(g, C, (int64_t)blockIdx.x * 128, 128, 0, threadIdx.x, NT);
    __syncthreads();
    if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - c0;
}

template <bool CHUNKS, int NT, bool QGLU = false>
static void run(const char *name, gemm_args g, float scale, long long *cyc, int sms)
{
    const int smem = 128 * 260 * 4;
    CHECK(cudaFuncSetAttribute(epilogue_lab<CHUNKS, NT, QGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    epilogue_lab<CHUNKS, NT, QGLU><<<sms, 384, smem>>>(g, scale, cyc);
    double avg = lab_mean_cycles(name, cyc, sms);
    if (avg >= 0) printf("%-44s %7.0f cycles per tile\n", name, avg / REPS);
}

int main(void)
{
    const lab_rate_bufs b = lab_rate_setup();
    const int rows = b.sms * 128;
    gemm_args g;
    memset(&g, 0, sizeof g);
    uint8_t *out, *out_scales;
    CHECK(cudaMalloc(&out, (size_t)rows * 4096 * 2));
    CHECK(cudaMalloc(&out_scales, (size_t)rows * 512));
    g.out = out, g.out_scales = out_scales, g.swiglu_limit = 10.0f, g.out_gs = 1.0f;
    struct {
        const char *name;
        moe_ep_format_t f;
        int glu;
    } cases[] = {{"gemm1 fp8_block", MOE_EP_FORMAT_FP8_BLOCK, 1}, {"gemm1 mxfp8", MOE_EP_FORMAT_MXFP8, 1},
                 {"gemm1 nvfp4", MOE_EP_FORMAT_NVFP4, 1},         {"gemm1 bf16", MOE_EP_FORMAT_BF16, 1},
                 {"gemm2 bf16", MOE_EP_FORMAT_BF16, 0},           {"gemm2 mxfp8", MOE_EP_FORMAT_MXFP8, 0},
                 {"gemm2 fp4 wire", MOE_EP_FORMAT_FP4_WIRE, 0}};
    for (float scale : {4.0f, 300.0f}) /* C values in [-scale, scale): 300 as the tile lab's sums */
        for (auto &c : cases) {
            g.out_fmt = c.f, g.N_out = c.glu ? 2048 : 4096, g.N = 4096;
            g.out_scale_stride = moe_ep_act_scale_stride(c.f, g.N_out);
            char name[96];
            snprintf(name, sizeof name, "|C| < %3.0f %s serial, 256 thr", scale, c.name);
            run<false, 256>(name, g, scale, b.cyc, b.sms);
            snprintf(name, sizeof name, "|C| < %3.0f %s CHUNKS, 256 thr", scale, c.name);
            run<true, 256>(name, g, scale, b.cyc, b.sms);
            snprintf(name, sizeof name, "|C| < %3.0f %s CHUNKS, 384 thr", scale, c.name);
            run<true, 384>(name, g, scale, b.cyc, b.sms);
            if (c.glu) { /* the register tile's 128-row epilogue (fr_epilogue_after): QGLU */
                snprintf(name, sizeof name, "|C| < %3.0f %s QGLU, 384 thr", scale, c.name);
                run<true, 384, true>(name, g, scale, b.cyc, b.sms);
            }
        }
    return 0;
}
