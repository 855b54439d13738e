/* Kernel lab: NVFP4's consumer loop alone (fp8_rs_tile.cuh's fr_nv_steps: E2M1 words decoded to
 * f16x2 by moe_ep_e2m1_word_pairs, times their E4M3 scales by HMUL2, RS wgmma), two consumer
 * warpgroups per block, one block per SM, no producer, no barriers: the rate the register tile's
 * K loop could reach with each shape of its consumers.
 *   today: each warpgroup owns two m64 blocks of weight rows (128), N = the tile's activation rows
 *          (128 or 144), 16 k16 steps a 128-K stage alternating the blocks (FR_NV_RING in flight);
 *   wide:  each warpgroup owns one m64 block, N = 256 activation rows (m64n256k16, 128 fp32
 *          accumulators a thread), 8 k16 steps a stage: the same MACs a stage with half the
 *          fragment work (one fragment feeds 256 activation rows, not 128).
 * "fixed" forms skip the fragment work (the structure's own bound). Every stage ends with
 * wgmma_wait<0> (the tile's drain before it frees a stage).
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        rs_nv_wide.cu -o rs_nv_wide && ./rs_nv_wide
 * Prints MACs per clock per SM (dense fp16 peak: 2048 on H100 / H200). */
#include "formats/codec.h"
#include "kernels/sm90/fp8_rs_tile.cuh"
#include "lab_common.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define STAGES 256
#define RAW_BYTES 32768 /* 256 weight rows x 128 B (E4M3; E2M1 uses the first 64 B of each; wide reads rows 0-127) */
#define MULT_BYTES 4096 /* 8 k16 blocks x 256 rows x 2 B of E4M3-as-f16 multipliers */

/* d[128] (+)= A (64 x 16 f16, registers a[4]) . B^T (256 x 16 f16, descriptor db). */
__device__ __forceinline__ void wgmma_m64n256k16_f16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,"
                 "%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,"
                 "%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,"
                 "%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,"
                 "%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
                 : WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24), WGMMA_D8(d, 32), WGMMA_D8(d, 40),
                   WGMMA_D8(d, 48), WGMMA_D8(d, 56), WGMMA_D8(d, 64), WGMMA_D8(d, 72), WGMMA_D8(d, 80), WGMMA_D8(d, 88),
                   WGMMA_D8(d, 96), WGMMA_D8(d, 104), WGMMA_D8(d, 112), WGMMA_D8(d, 120)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void lab_wgmma(float *d, const uint32_t *a, uint64_t db)
{
    if constexpr (N == 256) wgmma_m64n256k16_f16_rs(d, a, db, 1);
    else fr_wgmma<N>(d, a, db, 1);
}

/* Step kk's fragment of m64 block b (rows g, g + 8) from its E2M1 words and E4M3 multipliers, as the
 * tile's fr_step_bytes + fr_widen_step for RS_NVFP4. */
__device__ __forceinline__ void nv_fragment(uint32_t *a, uint32_t x, uint32_t y, int kk, uint32_t mult)
{
    uint32_t m0 = fr_ld_u16(mult), m1 = fr_ld_u16(mult + 16);
    m0 |= m0 << 16, m1 |= m1 << 16;
    moe_ep_e2m1_word_pairs(x, kk % 2, &a[0], &a[2]);
    moe_ep_e2m1_word_pairs(y, kk % 2, &a[1], &a[3]);
    a[0] = fr_hmul2(a[0], m0), a[1] = fr_hmul2(a[1], m1), a[2] = fr_hmul2(a[2], m0), a[3] = fr_hmul2(a[3], m1);
}

/* MXFP8's step kk of block b: a word of E4M3 a row (rows g, g + 8) widened by cvt, times the k32
 * block's f16x2 multipliers (fr_widen_step for RS_MXFP8). */
__device__ __forceinline__ void mx_fragment(uint32_t *a, uint32_t x, uint32_t y, uint32_t mult)
{
    const uint32_t m0 = fr_ld_u32(mult), m1 = fr_ld_u32(mult + 32);
    a[0] = fr_e4m3x2<false>(x), a[2] = fr_e4m3x2<true>(x), a[1] = fr_e4m3x2<false>(y), a[3] = fr_e4m3x2<true>(y);
    a[0] = fr_hmul2(a[0], m0), a[1] = fr_hmul2(a[1], m1), a[2] = fr_hmul2(a[2], m0), a[3] = fr_hmul2(a[3], m1);
}

/* BLOCKS m64 blocks a warpgroup (2: today, N 128 / 144; 1: wide, N 256); FIXED: no fragment work;
 * MX: MXFP8's fragments (8 E4M3 words a row and block a stage) instead of NVFP4's (4 E2M1 words). */
template <int N, int BLOCKS, int RING, bool FIXED, bool MX = false>
__global__ void __launch_bounds__(384, 1) nv_rate(long long *cycles, float *sink)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    for (int i = threadIdx.x; i < (RAW_BYTES + MULT_BYTES + N * 256) / 4; i += blockDim.x)
        ((uint32_t *)smem)[i] = i < RAW_BYTES / 4 ? 0x2a1c3b59u * (uint32_t)(i + 1) : 0x3c003c00u; /* mixed nibbles; 1.0 */
    __syncthreads();
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (wg == 0) {
        setmaxnreg_dec<40>();
        return;
    }
    setmaxnreg_inc<232>();
    const int h = wg - 1, lane = t % 32, g = 16 * (t / 32) + lane / 4, q = lane % 4, key = (g >> 1) & 3;
    constexpr int WROW = MX ? 128 : 64, WORDS = MX ? 8 : 4;
    constexpr int MROW = MX ? 4 : 2; /* multiplier bytes a row: MX an f16x2 a k32 block, NVFP4 an f16 a k16 block */
    const uint32_t raw = smem_u32(smem) + (64 * BLOCKS * h + g) * WROW + 4 * q, mult = smem_u32(smem) + RAW_BYTES + MROW * g;
    const uint32_t act = smem_u32(smem) + RAW_BYTES + MULT_BYTES;
    float acc[BLOCKS][N / 2];
#pragma unroll
    for (int b = 0; b < BLOCKS; b++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) acc[b][i] = 0.0f;
    long long c0 = clock64();
#pragma unroll 1
    for (int st = 0; st < STAGES; st++) {
        uint32_t x[BLOCKS][WORDS], y[BLOCKS][WORDS], a[RING][4];
#pragma unroll
        for (int b = 0; b < BLOCKS; b++)
#pragma unroll
            for (int w = 0; w < WORDS; w++) { /* word w of rows g and g + 8 of block b (swizzled as the tile's) */
                const uint32_t o = raw + b * 64 * WROW + ((w ^ (MX ? g & 7 : key)) << 4);
                x[b][w] = fr_ld_u32(o), y[b][w] = fr_ld_u32(o + 8 * WROW);
            }
#pragma unroll
        for (int i = 0; i < 8 * BLOCKS; i++) {
            const int kk = i / BLOCKS, b = i % BLOCKS;
            if (i >= RING) wgmma_wait<RING - 1>();
            uint32_t *f = a[i % RING];
            if constexpr (FIXED) f[0] = f[1] = f[2] = f[3] = 0x3c003c00u;
            else if constexpr (MX) mx_fragment(f, x[b][kk], y[b][kk], mult + (kk / 2) * 1024 + (64 * BLOCKS * h + 64 * b) * 4);
            else nv_fragment(f, x[b][kk / 2], y[b][kk / 2], kk, mult + kk * 512 + (64 * BLOCKS * h + 64 * b) * 2);
            wgmma_fence();
            lab_wgmma<N>(acc[b], f, smem_desc_u32(act + (kk / 4) * N * 128) + 2 * (kk % 4));
            wgmma_commit();
        }
        wgmma_wait<0>();
    }
    long long c1 = clock64();
    float s = 0.0f;
#pragma unroll
    for (int b = 0; b < BLOCKS; b++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) s += acc[b][i];
    sink[blockIdx.x * 256 + threadIdx.x - 128] = s;
    if (threadIdx.x == 128) cycles[blockIdx.x] = c1 - c0;
}

template <int N, int BLOCKS, int RING, bool FIXED, bool MX = false>
static void run(const char *name, long long *cyc, float *sink, int sms)
{
    const int smem = RAW_BYTES + MULT_BYTES + N * 256 + 1024;
    CHECK(cudaFuncSetAttribute(nv_rate<N, BLOCKS, RING, FIXED, MX>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int rep = 0; rep < 2; rep++) nv_rate<N, BLOCKS, RING, FIXED, MX><<<sms, 384, smem>>>(cyc, sink);
    CHECK(cudaGetLastError());
    const double avg = lab_mean_cycles(name, cyc, sms);
    if (avg < 0) return;
    const double macs = 2.0 * STAGES * 8 * BLOCKS * 64.0 * N * 16; /* two warpgroups, BLOCKS x 8 steps a stage */
    printf("%-44s %9.0f cycles %6.0f a stage (%5.1f a k16 step)  %7.1f MAC/clk/SM (%4.1f %% of 2048)\n", name, avg,
           avg / STAGES, avg / STAGES / (8.0 * BLOCKS), macs / avg, 100 * macs / avg / 2048);
}

int main(void)
{
    const lab_rate_bufs b = lab_rate_setup();
    run<128, 2, 4, true>("today n128, fixed fragments, ring 4", b.cyc, b.sink, b.sms);
    run<128, 2, 4, false>("today n128, NVFP4 fragments, ring 4", b.cyc, b.sink, b.sms);
    run<144, 2, 4, false>("today n144, NVFP4 fragments, ring 4", b.cyc, b.sink, b.sms);
    run<96, 2, 4, false>("today n96, NVFP4 fragments, ring 4", b.cyc, b.sink, b.sms);
    run<96, 2, 4, true>("today n96, fixed fragments, ring 4", b.cyc, b.sink, b.sms);
    run<96, 2, 8, false>("today n96, NVFP4 fragments, ring 8", b.cyc, b.sink, b.sms);
    run<128, 2, 8, false>("today n128, NVFP4 fragments, ring 8", b.cyc, b.sink, b.sms);
    run<256, 1, 4, true>("wide n256, fixed fragments, ring 4", b.cyc, b.sink, b.sms);
    run<256, 1, 4, false>("wide n256, NVFP4 fragments, ring 4", b.cyc, b.sink, b.sms);
    run<256, 1, 2, false>("wide n256, NVFP4 fragments, ring 2", b.cyc, b.sink, b.sms);
    run<256, 1, 8, false>("wide n256, NVFP4 fragments, ring 8", b.cyc, b.sink, b.sms);
    run<128, 2, 2, false, true>("today n128, MXFP8 fragments, ring 2", b.cyc, b.sink, b.sms);
    run<128, 2, 4, false, true>("today n128, MXFP8 fragments, ring 4", b.cyc, b.sink, b.sms);
    run<256, 1, 2, false, true>("wide n256, MXFP8 fragments, ring 2", b.cyc, b.sink, b.sms);
    run<256, 1, 4, false, true>("wide n256, MXFP8 fragments, ring 4", b.cyc, b.sink, b.sms);
    return 0;
}
