/* Kernel lab: the register tile's consumer loop alone (fp8_rs_tile.cuh's
 * fr_block + fr_promote), two consumer warpgroups per block, one block per
 * SM, no producer: how fast can the consumers turn raw E4M3 weight bytes in
 * shared memory into fp16 HGMMAs? Variants of how each thread gets its A
 * fragment bytes:
 *   LOADS 0: 4 x ld.shared.u16 per k16 step (the tile today), RING fragments in flight;
 *   LOADS 2: no loads, fixed fragments (the structure's bound);
 *   LOADS 3, 4, 5: the layout the tile uses (weights.cu, prep_permute_fragments:
 *            in each 16-byte chunk word q holds lane q's bytes): one
 *            ld.shared.u32 per row and step, all of a block's words loaded at
 *            its start (3), one step ahead (4) or at first use (5);
 *   LOADS 1: the weight rows' bytes permuted at load time so that a thread's
 *            32 bytes of a 128-K stage are contiguous: 2 x ld.shared.v4 per
 *            row per block (4 per m64 block), then only cvt per step.
 * N = activation rows (the wgmma N). Every stage: 2 m64 blocks x 8 k16 steps,
 * a wait and a promotion (acc += part * s) per block, as FP8-BLOCK.
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        rs_block.cu -o rs_block && ./rs_block
 * Prints MACs per clock per SM (dense fp16 peak: 2048). */
#include "kernels/sm90/fp8_rs_tile.cuh"
#include "lab_common.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define STAGES 512

__device__ __forceinline__ uint32_t cvt2(uint32_t v16)
{
    uint32_t o;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(o) : "h"((uint16_t)v16));
    return o;
}

template <int N, int LOADS, int RING>
__global__ void __launch_bounds__(384, 1) block_rate(long long *cycles, float *sink)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    /* raw weights: 256 rows x 128 B at 0 (32 KB); activations fp16 N x 128 at 32 KB */
    for (int i = threadIdx.x; i < (32768 + N * 256) / 4; i += blockDim.x) ((uint32_t *)smem)[i] = 0x38383838u;
    __syncthreads();
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (wg == 0) {
        setmaxnreg_dec<40>();
        return;
    }
    setmaxnreg_inc<232>();
    int h = wg - 1, lane = t % 32, g = 16 * (t / 32) + lane / 4, q = lane % 4;
    const uint32_t raw = smem_u32(smem) + (128 * h + g) * 128, act = smem_u32(smem + 32768);
    float acc[2][N / 2], part[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[0][i] = acc[1][i] = 0.0f;
    long long c0 = clock64();
#pragma unroll 1
    for (int st = 0; st < STAGES; st++) {
#pragma unroll
        for (int b = 0; b < 2; b++) {
            const uint32_t row = raw + b * 64 * 128;
            uint32_t v[8]; /* LOADS 1: rows g (v[0..3]) and g + 8 (v[4..7]), 32 bytes each */
            if constexpr (LOADS == 1) {
                uint4 x0 = fr_lds128(row + (((2 * q) ^ (g & 7)) << 4)), x1 = fr_lds128(row + (((2 * q + 1) ^ (g & 7)) << 4));
                uint4 y0 = fr_lds128(row + 8 * 128 + (((2 * q) ^ (g & 7)) << 4)),
                      y1 = fr_lds128(row + 8 * 128 + (((2 * q + 1) ^ (g & 7)) << 4));
                v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w, v[4] = y0.x, v[5] = y0.y, v[6] = y0.z, v[7] = y0.w;
                uint32_t w[8] = {x1.x, x1.y, x1.z, x1.w, y1.x, y1.y, y1.z, y1.w};
                /* steps 0-3 from x0 / y0, 4-7 from x1 / y1: keep both */
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    if (kk >= RING) wgmma_wait<RING - 1>();
                    uint32_t a[4], lo = kk < 4 ? v[kk] : w[kk - 4], hi = kk < 4 ? v[4 + kk] : w[kk];
                    a[0] = cvt2(lo), a[2] = cvt2(lo >> 16), a[1] = cvt2(hi), a[3] = cvt2(hi >> 16);
                    wgmma_fence();
                    uint64_t db = smem_desc_u32(act + (kk / 4) * N * 128) + 2 * (kk % 4);
                    fr_wgmma<N>(part, a, db, kk > 0 ? 1 : 0);
                    wgmma_commit();
                }
            } else if constexpr (LOADS >= 3) {
                constexpr int AHEAD = LOADS == 3 ? 8 : LOADS == 4 ? 1 : 0;
                uint32_t x[8], y[8];
                const uint32_t base = row + 4 * q;
#pragma unroll
                for (int w = 0; w < AHEAD; w++) x[w] = fr_ld_u32(base + ((w ^ (g & 7)) << 4)), y[w] = fr_ld_u32(base + 1024 + ((w ^ (g & 7)) << 4));
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    if (kk >= RING) wgmma_wait<RING - 1>();
                    if (kk + AHEAD < 8) {
                        const int w = kk + AHEAD;
                        x[w] = fr_ld_u32(base + ((w ^ (g & 7)) << 4)), y[w] = fr_ld_u32(base + 1024 + ((w ^ (g & 7)) << 4));
                    }
                    uint32_t a[4];
                    a[0] = cvt2(x[kk]), a[2] = cvt2(x[kk] >> 16), a[1] = cvt2(y[kk]), a[3] = cvt2(y[kk] >> 16);
                    wgmma_fence();
                    uint64_t db = smem_desc_u32(act + (kk / 4) * N * 128) + 2 * (kk % 4);
                    fr_wgmma<N>(part, a, db, kk > 0 ? 1 : 0);
                    wgmma_commit();
                }
            } else if constexpr (LOADS == 2) { /* no fragment work: the structure's own bound */
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    if (kk >= RING) wgmma_wait<RING - 1>();
                    uint32_t a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
                    wgmma_fence();
                    uint64_t db = smem_desc_u32(act + (kk / 4) * N * 128) + 2 * (kk % 4);
                    fr_wgmma<N>(part, a, db, kk > 0 ? 1 : 0);
                    wgmma_commit();
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    if (kk >= RING) wgmma_wait<RING - 1>();
                    uint32_t p = row + ((kk ^ (g & 7)) << 4) + 2 * q, a[4];
                    a[0] = cvt2(fr_ld_u16(p)), a[1] = cvt2(fr_ld_u16(p + 8 * 128)), a[2] = cvt2(fr_ld_u16(p + 8)),
                    a[3] = cvt2(fr_ld_u16(p + 8 * 128 + 8));
                    wgmma_fence();
                    uint64_t db = smem_desc_u32(act + (kk / 4) * N * 128) + 2 * (kk % 4);
                    fr_wgmma<N>(part, a, db, kk > 0 ? 1 : 0);
                    wgmma_commit();
                }
            }
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < N / 2; i++) acc[b][i] = fmaf(part[i], 1.0001f, acc[b][i]);
        }
    }
    long long c1 = clock64();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N / 2; i++) s += acc[0][i] + acc[1][i];
    sink[blockIdx.x * 256 + threadIdx.x - 128] = s;
    if (threadIdx.x == 128) cycles[blockIdx.x] = c1 - c0;
}

template <int N, int LOADS, int RING>
static void run(const char *name, long long *cyc, float *sink, int sms)
{
    int smem = 32768 + N * 256 + 1024;
    cudaFuncSetAttribute(block_rate<N, LOADS, RING>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int rep = 0; rep < 2; rep++) block_rate<N, LOADS, RING><<<sms, 384, smem>>>(cyc, sink);
    double avg = lab_mean_cycles(name, cyc, sms);
    if (avg < 0) return;
    double macs = 2.0 * STAGES * 2 * 8 * 64.0 * N * 16; /* two warpgroups, 2 blocks x 8 steps per stage */
    printf("%-40s %9.0f cycles %6.0f per stage  %7.1f MAC/clk/SM (%4.1f %% of 2048)\n", name, avg, avg / STAGES,
           macs / avg, 100 * macs / avg / 2048);
}

int main(void)
{
    const lab_rate_bufs b = lab_rate_setup();
    long long *cyc = b.cyc;
    float *sink = b.sink;
    const int sms = b.sms;
    run<128, 2, 2>("n128 fixed fragments, ring 2", cyc, sink, sms);
    run<128, 2, 8>("n128 fixed fragments, ring 8", cyc, sink, sms);
    run<128, 0, 2>("n128 u16 loads, ring 2 (today)", cyc, sink, sms);
    run<128, 0, 4>("n128 u16 loads, ring 4", cyc, sink, sms);
    run<128, 1, 2>("n128 permuted v4 loads, ring 2", cyc, sink, sms);
    run<128, 1, 4>("n128 permuted v4 loads, ring 4", cyc, sink, sms);
    run<128, 4, 2>("n128 words, 1 ahead, ring 2 (new)", cyc, sink, sms);
    run<128, 5, 2>("n128 words at first use, ring 2 (new MX)", cyc, sink, sms);
    run<64, 2, 2>("n64 fixed fragments, ring 2", cyc, sink, sms);
    run<64, 3, 2>("n64 words at block start, ring 2 (new)", cyc, sink, sms);
    run<64, 0, 2>("n64 u16 loads, ring 2 (today)", cyc, sink, sms);
    run<64, 0, 4>("n64 u16 loads, ring 4", cyc, sink, sms);
    run<64, 1, 2>("n64 permuted v4 loads, ring 2", cyc, sink, sms);
    run<64, 1, 4>("n64 permuted v4 loads, ring 4", cyc, sink, sms);
    return 0;
}
