/* Kernel lab: the issue rate of fp16 wgmma shapes on one SM, A from
 * registers (RS) or shared memory (SS), with and without the FP8 register
 * tile's per-step fragment work (ld.shared.u16 + cvt e4m3x2 -> f16x2), and
 * the e4m3x2 -> f16x2 conversion rate alone. Two consumer warpgroups per
 * block (as the tile), one block per SM, every SM busy.
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        rs_rate.cu -o rs_rate && ./rs_rate
 * Prints MACs per clock per SM (dense fp16 peak: 2048 on H100/H200).
 * Caveat: the "+ ld/cvt fragments" modes overwrite fragment registers that
 * wgmmas in flight may still read (no wait at steps 0, 1), which ptxas
 * guards with waits of its own, so they understate RS; rs_block.cu measures
 * the register tile's consumer loop as it runs. */
#include "kernels/sm90/fp8_rs_tile.cuh" /* fr_ld_u16, the RS n64 / n128 wrappers */
#include "lab_common.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

/* Two E4M3 bytes at shared address p -> f16x2, as the tile's fragments. */
__device__ __forceinline__ uint32_t fr_e4m3x2(uint32_t p)
{
    uint32_t o;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(o) : "h"((uint16_t)fr_ld_u16(p)));
    return o;
}

__device__ __forceinline__ void rs_n256(float *d, const uint32_t *a, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void ss_n64(float *d, uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db));
}
__device__ __forceinline__ void ss_n256(float *d, uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db));
}

#define ITERS 2048


/* MODE: 0..2 RS n64/n128/n256 (fixed fragments), 3..4 SS n64/n256, 5 RS n64
 * with fragments loaded + converted per step (ring of 2 steps, as the tile),
 * 6 RS n256 likewise, 7 RS n128 likewise. 4 wgmmas per commit group. */
template <int MODE>
__global__ void __launch_bounds__(384, 1) rate(long long *cycles, float *sink)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) ((uint32_t *)smem)[i] = 0x3c003c00u * ((i & 7) != 0);
    __syncthreads();
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (wg == 0) return;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    uint32_t a[2][4];
#pragma unroll
    for (int i = 0; i < 4; i++) a[0][i] = a[1][i] = 0x3c003c00u;
    uint64_t db = smem_desc(smem), da = smem_desc(smem + 32768);
    uint32_t frag = smem_u32(smem) + (t % 64) * 128 + 2 * (t % 4);
    long long c0 = clock64();
#pragma unroll 1
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int s = 0; s < 4; s++) {
            if constexpr (MODE >= 5) {
                if (s >= 2) wgmma_wait<1>();
                uint32_t p = frag + ((s ^ (t & 7)) << 4);
                a[s & 1][0] = fr_e4m3x2(p), a[s & 1][1] = fr_e4m3x2(p + 1024), a[s & 1][2] = fr_e4m3x2(p + 8),
                a[s & 1][3] = fr_e4m3x2(p + 1032);
            }
            wgmma_fence();
            if constexpr (MODE == 0 || MODE == 5) wgmma_m64n64k16_f16_rs(d, a[s & 1], db + 2 * s, 1);
            if constexpr (MODE == 1 || MODE == 7) wgmma_m64n128k16_f16_rs(d, a[s & 1], db + 2 * s, 1);
            if constexpr (MODE == 2 || MODE == 6) rs_n256(d, a[s & 1], db + 2 * s);
            if constexpr (MODE == 3) ss_n64(d, da + 2 * s, db + 2 * s);
            if constexpr (MODE == 4) ss_n256(d, da + 2 * s, db + 2 * s);
            if constexpr (MODE >= 5) wgmma_commit();
        }
        if constexpr (MODE < 5) {
            wgmma_commit();
            wgmma_wait<1>();
        }
    }
    wgmma_wait<0>();
    long long c1 = clock64();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; i++) s += d[i];
    sink[blockIdx.x * 256 + threadIdx.x - 128] = s;
    if (threadIdx.x == 128) cycles[blockIdx.x] = c1 - c0;
}

/* 8 independent e4m3x2 -> f16x2 conversions per thread per iteration, 384 threads. */
__global__ void __launch_bounds__(384, 1) cvt_rate(long long *cycles, float *sink)
{
    uint16_t v[8];
    uint32_t acc = 0;
    for (int i = 0; i < 8; i++) v[i] = (uint16_t)(threadIdx.x * 77 + i * 13);
    long long c0 = clock64();
#pragma unroll 1
    for (int it = 0; it < ITERS * 4; it++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t o;
            asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(o) : "h"(v[i]));
            acc ^= o;
            v[i] = (uint16_t)(v[i] + 1);
        }
    }
    long long c1 = clock64();
    sink[blockIdx.x * 384 + threadIdx.x] = (float)acc;
    if (threadIdx.x == 0) cycles[blockIdx.x] = c1 - c0;
}

template <int MODE>
static void run(const char *name, int n, long long *cyc, float *sink, int sms)
{
    cudaFuncSetAttribute(rate<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
    for (int rep = 0; rep < 2; rep++) rate<MODE><<<sms, 384, 65536>>>(cyc, sink);
    double avg = lab_mean_cycles(name, cyc, sms);
    if (avg < 0) return;
    double macs = 2.0 * ITERS * 4 * 64.0 * n * 16; /* two warpgroups per SM */
    printf("%-34s %8.0f cycles  %7.1f MAC/clk/SM  (%4.1f %% of 2048)\n", name, avg, macs / avg, 100 * macs / avg / 2048);
}

int main(void)
{
    const lab_rate_bufs b = lab_rate_setup();
    long long *cyc = b.cyc;
    float *sink = b.sink;
    const int sms = b.sms;
    run<0>("RS m64n64k16", 64, cyc, sink, sms);
    run<1>("RS m64n128k16", 128, cyc, sink, sms);
    run<2>("RS m64n256k16", 256, cyc, sink, sms);
    run<3>("SS m64n64k16", 64, cyc, sink, sms);
    run<4>("SS m64n256k16", 256, cyc, sink, sms);
    run<5>("RS m64n64k16 + ld/cvt fragments", 64, cyc, sink, sms);
    run<7>("RS m64n128k16 + ld/cvt fragments", 128, cyc, sink, sms);
    run<6>("RS m64n256k16 + ld/cvt fragments", 256, cyc, sink, sms);
    cvt_rate<<<sms, 384>>>(cyc, sink);
    double avg = lab_mean_cycles("cvt_rate", cyc, sms);
    printf("%-34s %8.0f cycles  %7.1f cvt (2 values) per clk per SM\n", "cvt.rn.f16x2.e4m3x2", avg, 384.0 * ITERS * 4 * 8 / avg);
    return 0;
}
