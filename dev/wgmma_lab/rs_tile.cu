/* Kernel lab: where the register tile's time goes. Runs the library's
 * fp8_rs_tile (fp8_rs_tile.cuh, unchanged) in a persistent grid like the
 * split backend's grouped GEMM, with its FR_TRACE hooks stamping clock64
 * (consumer 0's thread 128: tile start / end, each stage's mbarrier waits,
 * K loop end, consumers met, C stored, epilogue end; the producer's thread 0: its waits for a stage
 * to widen, for a raw stage to refill, and its end). Prints per tile, in
 * cycles: the whole tile, the consumer's fill (first stage ready), its
 * stage waits, the K loop, the epilogue; the producer's waits; and the
 * kernel's rate against the fp16 peak (2048 MAC/clk/SM at the clock the
 * stamps give: the blocks' tile cycles over the kernel's time).
 * A K sweep separates the per-stage cost (slope) from the per-tile one.
 *   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include -I../../src \
 *        rs_tile.cu -o rs_tile && ./rs_tile
 * -DLAB_RAW_SMALL=n: n raw stages for the 32- and 16-row instances; -DLAB_NO_TMA_WARP:
 * the producer without its TMA warp (all 128 threads widen).
 * -DLAB_QG: FP8-BLOCK's QGMMA instances (fp8_fast_accum), 128 / 64 / 16 rows, and the exact 128-row tile.
 * -DLAB_MID: the 64-row tiles at 64 rows per expert (the pro EP8 slice at T = 512).
 * -DLAB_T512: the 128-row tiles at 96 rows per expert (the flash EP8 slice at T = 512: n96), and MXFP8 /
 * W4A8 GEMM1 at 1536 rows per expert (T = 8192); NVFP4's GEMM1 at both, GEMM2 at 1536 (fifty-eighth
 * session). -DFR_LAB_ACT16: the MX and NVFP4 128-row tiles in the
 * library's A16 form (fr_produce_a16: the activations as fp16 rows by TMA, no widening; random fp16
 * rows here; fifty-seventh session; the fifty-sixth's lab-only form was dev/drafts/lab_act16.patch).
 * -DLAB_T2048 (with LAB_T512): the NVFP4 / MXFP8 128-row A16 tiles at 32 / 64 / 96 / 128 rows an expert and
 * NVFP4's at 384 and 400 (3 tiles, and 3 + a 16-row one): what a narrow or remainder tile costs.
 * -DLAB_W144 (with LAB_T512): NVFP4's A16 tile at 144 rows beside 128 at 1536 / 400 / 384 / 272 / 256 rows an
 * expert (mega's 144-row tile since the sixty-eighth session: fp8_rs_tile.cuh's 144-row terms, 56 / 224
 * registers); with -DLAB_W144_MX MXFP8's and W4A8's GEMM1 too.
 * -DLAB_DECODE_FP8: LAB_DECODE's FP8-BLOCK lines at 32 and 16 rows only.
 * -DLAB_MC_CASES (with -DFR_LAB_ACT16): NVFP4 / MXFP8 / W4A8 A16 tiles at 1536, 384 and 96 rows an expert (the
 * seventieth session's multicast lab, FR_LAB_MCAST at 51af417, ran these in 2-block clusters: +24-44 %, removed).
 * -DLAB_PAIRED: the paired 16-row instances of every format launched as the backends do (two
 * blocks per SM, 80 registers), each beside the same ring at one block per SM, at flash decode;
 * with LAB_WEIGHT_EXPERTS=2 their weights come from L2 (the consumers' own bound).
 * -DLAB_DECODE: the 64-, 32- and 16-row tiles of every format on
 * the flash EP8 slice at decode (32 experts of 12 and of 2 rows), and the
 * 128-row MXFP8 / W4A8 GEMM1;
 * LAB_WEIGHT_EXPERTS=n (environment): the tiles read only n experts'
 * weights (n = 2 fits L2). LAB_SMS=n (environment): a grid of n SMs' blocks
 * (n x CT), so that HBM does not bind and a block's own rate shows (the
 * KB/us a block printed; what a forward's tail gets when few blocks still
 * stream). Timing-only switches of fp8_rs_tile.cuh:
 * -DFR_LAB_SKIP_WIDEN, -DFR_LAB_SKIP_CMULT, -DFR_LAB_SKIP_LOADS=1|2|3 (stages past a tile's first
 * ring land without their activations / weights / both: the K loop without its L2 traffic; in the A16
 * form too since the sixty-eighth session: its fp16 stages / weight stages; FR_LAB_SKIP_WSCALES is gone: the
 * weights' multipliers are made at load since, as records, rs_mults.cuh).
 * NVFP4's one-block tiles wait for each next stage beside in-flight wgmmas (fr_consume_nv's AHEAD,
 * seventy-first session): their stamps time the first stage's wait only ("waits" then ~1 500 cycles a tile).
 * Inputs are random (E4M3 / E2M1 bytes, scales as scale_word); outputs are not checked. */
#include <stdint.h>

#define LAB_POINTS 16
__device__ long long *g_stamp_sum, *g_stamp_count; /* [block][LAB_POINTS] */
/* Sums and counts in shared memory during the kernel (a global
 * read-modify-write would put its latency in the consumer's loop). */
__shared__ long long s_stamp_sum[LAB_POINTS], s_stamp_count[LAB_POINTS];

/* Points 7, 10, 11 by the producer's first thread (the TMA), 8 and 9 by its
 * thread 32 (a widening thread with or without the TMA warp), the others by
 * consumer 0's; 14 and 15 (the widening thread's scales and barrier done,
 * its widening done) by thread 32 too. */
__device__ __forceinline__ void lab_stamp(int p)
{
    if (threadIdx.x != (p == 8 || p == 9 || p >= 14 ? 32 : p >= 7 && p < 12 ? 0 : 128)) return;
    s_stamp_sum[p] += clock64();
    s_stamp_count[p] += 1;
}
#define FR_TRACE(p) lab_stamp(p)
#ifdef LAB_RAW /* ring depths to try (fp8_rs_tile.cuh's defaults otherwise) */
#define FR_RAW_OF(FMT, BMA) LAB_RAW
#endif
#ifdef LAB_RAW_SMALL /* the same for the 64-, 32- and 16-row instances only */
#define FR_RAW_OF(FMT, BMA) ((BMA) <= 32 ? LAB_RAW_SMALL : (BMA) <= 64 ? (FR_E2M1(FMT) ? 4 : 3) : FR_NV(FMT) ? 4 : 2)
#endif
#ifdef LAB_NO_TMA_WARP /* every producer thread widens, thread 0 issues the TMAs between (before 2026-12-01) */
#define FR_TMA_WARP_OF(BMA) 0
#endif
#ifdef LAB_CVT
#define FR_CVT_OF(FMT, BMA) LAB_CVT
#define FR_SMEM_LIMIT (227 * 1024) /* the split backend's: no mega kernel around the lab's tile */
#endif

#include "kernels/sm90/fp8_rs_tile.cuh"
#include "lab_common.cuh"
#include "rs_lab_common.cuh"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

/* Experts whose weights the tiles read (expert e reads e % this one's): all
 * of them, or few enough for L2 (LAB_DECODE's L2-resident run). */
__constant__ int g_weight_experts;

/* CT: blocks per SM the kernel is compiled for (2: a paired instance's launch, as the backends
 * run it: 80 registers, no setmaxnreg; 1: one block per SM at 168 registers, with CT's ring). */
/* -DFR_LAB_ACT16: the instances that run the tile's A16 form (the library's 128-row MX and NVFP4 ones) */
#ifdef FR_LAB_ACT16
#define LAB_A16(FMT, BMA, CT) FR_A16_OF(FMT, BMA, (CT) == 2 ? 2 : FR_CTAS_OF(FMT, BMA))
#else
#define LAB_A16(FMT, BMA, CT) false
#endif

template <int FMT, int BMA, int CT>
__global__ void __launch_bounds__(384, CT) tile_lab(gemm_args g, const __grid_constant__ CUtensorMap ta,
                                                    const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    int n_tiles = g.N / FR_BN, tiles = g.tile_offset[g.E] * n_tiles;
    if (threadIdx.x < LAB_POINTS) s_stamp_sum[threadIdx.x] = 0, s_stamp_count[threadIdx.x] = 0;
    __syncthreads();
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int mt = tile / n_tiles, n0 = (tile % n_tiles) * FR_BN;
        int e = tile_expert(g.tile_offset, g.E, mt);
        int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * BMA;
        int rows_valid = (int)min((int64_t)BMA, (int64_t)g.expert_offset[e + 1] - row0);
        lab_stamp(0);
        fp8_rs_tile<FMT, BMA, true, true, fr_no_hook, CT == 2 ? 2 : FR_CTAS_OF(FMT, BMA), LAB_A16(FMT, BMA, CT)>(
            g, &ta, &tb, smem_raw, e % g_weight_experts, row0, rows_valid, n0);
        lab_stamp(4);
    }
    __syncthreads();
    if (threadIdx.x < LAB_POINTS)
        g_stamp_sum[blockIdx.x * LAB_POINTS + threadIdx.x] = s_stamp_sum[threadIdx.x],
        g_stamp_count[blockIdx.x * LAB_POINTS + threadIdx.x] = s_stamp_count[threadIdx.x];
}

/* One scale of format f, replicated in a 32-bit word: 1 for the
 * activations, 2^-7 for the weights (FP8-BLOCK, MX; NVFP4: S_w = 128), so
 * the sums are O(1) as in the bench (whose weights have std 1 / sqrt(K)):
 * large sums made SwiGLU's division take its slow path. */
static uint32_t scale_word(moe_ep_format_t f, bool weights)
{
    if (f == MOE_EP_FORMAT_FP8_BLOCK) return weights ? 0x3C000000u : 0x3F800000u;
    if (f == MOE_EP_FORMAT_NVFP4) return 0x38383838u;
    return weights ? 0x78787878u : 0x7F7F7F7Fu;
}

struct lab_case {
    const char *name;
    moe_ep_format_t a_fmt, b_fmt, out_fmt;
    int K, N, glu;
};

/* E experts of rows_per_expert rows; GEMM1-like (glu: N_out = N / 2, output
 * in the activation format) or GEMM2-like (N_out = N, bf16 out). */
template <int FMT, int BMA, int CT = 1>
static void run_case(const lab_case &c, int E, int rows_per_expert, int sms, int clock_khz)
{
    const int K = c.K, N = c.N, N_out = c.glu ? N / 2 : N;
    const int64_t rows = (int64_t)E * rows_per_expert;
    gemm_args g;
    memset(&g, 0, sizeof g);
    g.a_fmt = c.a_fmt, g.b_fmt = c.b_fmt, g.out_fmt = c.out_fmt;
    g.K = K, g.N = N, g.N_out = N_out, g.E = E, g.swiglu_limit = 10.0f, g.a_gs = 1.0f, g.out_gs = 1.0f;
    g.wait_ns = MOE_EP_TILE_WAIT_MAX_NS; /* the tiles' pipeline waits (tile_wait) */
    g.a_scale_stride = (int)moe_ep_act_scale_stride(c.a_fmt, K);
    g.out_scale_stride = moe_ep_act_scale_stride(c.out_fmt, N_out);
    int64_t a_bytes = moe_ep_row_data_bytes(c.a_fmt, K) * rows, b_bytes = moe_ep_row_data_bytes(c.b_fmt, K) * E * (int64_t)N;
    int64_t as_bytes = g.a_scale_stride * rows, bs_bytes = moe_ep_row_scale_bytes(c.b_fmt, K) * E * (int64_t)N;
    uint8_t *a = (uint8_t *)dev_alloc(a_bytes), *b = (uint8_t *)dev_alloc(b_bytes);
    uint8_t *as = (uint8_t *)dev_alloc(as_bytes), *bs = (uint8_t *)dev_alloc(bs_bytes);
    fill_random<<<1024, 256>>>(a, a_bytes, 1, !moe_ep_format_is_fp4(c.a_fmt));
    fill_random<<<1024, 256>>>(b, b_bytes, 2, !moe_ep_format_is_fp4(c.b_fmt));
    fill_u32<<<1024, 256>>>((uint32_t *)as, as_bytes / 4, scale_word(c.a_fmt, false));
    fill_u32<<<1024, 256>>>((uint32_t *)bs, bs_bytes / 4, scale_word(c.b_fmt, true));
    float *gs = (float *)dev_alloc(E * sizeof(float));
    fill_u32<<<1, 256>>>((uint32_t *)gs, E, 0x43000000u); /* NVFP4 S_w = 128 */
    g.a = a, g.a_scales = as, g.b = b, g.b_scales = bs, g.b_gs = gs;
    if (FR_MX(FMT) || FR_NV(FMT)) {
        int64_t b_rows = (int64_t)E * N;
        g.b_mult = (const uint32_t *)dev_alloc(b_rows / 256 * (K / 128) * FR_WREC_STAGE(FMT));
        lab_weight_records<<<(unsigned)((b_rows * (K / 128) + 255) / 256), 256>>>(bs, b_rows, K, FMT == RS_W4A8,
                                                                                FR_NV(FMT), (uint32_t *)g.b_mult);
    }
    g.out = (uint8_t *)dev_alloc(moe_ep_row_data_bytes(c.out_fmt, N_out) * rows);
    g.out_scales = (uint8_t *)dev_alloc(g.out_scale_stride * rows + 16);
    lab_layout(g, E, rows_per_expert, BMA);

    if (LAB_A16(FMT, BMA, CT)) { /* the fp16 rows (fr_make_maps maps them) */
        uint8_t *a16 = (uint8_t *)dev_alloc(rows * K * 2);
        fill_random<<<1024, 256>>>(a16, rows * K * 2, 3, 1); /* E4M3-like bytes: as fp16, finite */
        g.a16 = (const uint16_t *)a16, g.a16_pitch = K;
    }
    CUtensorMap ta, tb;
    if (fr_make_maps<BMA>(g, rows, &ta, &tb) != MOE_EP_SUCCESS) exit(1);
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, tile_lab<FMT, BMA, CT>));
    constexpr int CTS = CT == 2 ? 2 : FR_CTAS_OF(FMT, BMA); /* the ring the tile runs */
    /* a tile that moves registers (setmaxnreg: unpaired rings) needs the launch's all; else at most
     * what the launch gives (80 at two blocks an SM), no local memory */
    const int regs = CT == 2 ? 80 : FR_LAUNCH_REGS;
    if (CTS == 1 ? fa.numRegs != regs : fa.numRegs > regs || fa.localSizeBytes > 0) {
        printf("%s: %d registers, the tile needs %s%d (local %zu B)\n", c.name, fa.numRegs, CTS == 1 ? "" : "at most ",
               regs, (size_t)fa.localSizeBytes);
        return;
    }
    const int smem = (int)FR_SMEM_BYTES_CT(FMT, BMA, CTS); /* + the stamps' 256 B of static shared memory */
    CHECK(cudaFuncSetAttribute(tile_lab<FMT, BMA, CT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tile_lab<FMT, BMA, CT>, 384, smem));
    if (per_sm < CT) {
        printf("%s: %d block(s) of %d B fit an SM, not %d\n", c.name, per_sm, smem, CT);
        return;
    }
    const int sms_all = sms;
    sms *= CT; /* blocks of the grid (the stamps' rows); the rate below is per block of this grid */
    long long *sum = (long long *)dev_alloc(sms * LAB_POINTS * 8), *cnt = (long long *)dev_alloc(sms * LAB_POINTS * 8);
    CHECK(cudaMemcpyToSymbol(g_stamp_sum, &sum, sizeof sum));
    CHECK(cudaMemcpyToSymbol(g_stamp_count, &cnt, sizeof cnt));
    const int weight_experts = getenv("LAB_WEIGHT_EXPERTS") ? atoi(getenv("LAB_WEIGHT_EXPERTS")) : E;
    CHECK(cudaMemcpyToSymbol(g_weight_experts, &weight_experts, sizeof weight_experts));
    float best_ms;
    LAB_TIME_BEST(best_ms, 3, tile_lab<FMT, BMA, CT><<<sms, 384, smem>>>(g, ta, tb));
    /* stamps of one more run */
    CHECK(cudaMemset(sum, 0, sms * LAB_POINTS * 8));
    CHECK(cudaMemset(cnt, 0, sms * LAB_POINTS * 8));
    tile_lab<FMT, BMA, CT><<<sms, 384, smem>>>(g, ta, tb);
    CHECK(cudaDeviceSynchronize());
    std::vector<long long> hs(sms * LAB_POINTS), hc(sms * LAB_POINTS);
    CHECK(cudaMemcpy(hs.data(), sum, hs.size() * 8, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hc.data(), cnt, hc.size() * 8, cudaMemcpyDeviceToHost));
    /* per tile, averaged over the blocks: sum over tiles of (stamp p - stamp q) / tiles */
    double d[LAB_POINTS] = {0}, tiles = 0;
    for (int blk = 0; blk < sms; blk++) {
        tiles += hc[blk * LAB_POINTS + 0];
        for (int p = 0; p < LAB_POINTS; p++) d[p] += (double)hs[blk * LAB_POINTS + p];
    }
    auto per_tile = [&](int p, int q) { return (d[p] - d[q]) / tiles; };
    double stages = K / FR_BK, macs = (double)rows * N * K;
    double mac_per_clk = macs / (best_ms * 1e-3) / (clock_khz * 1e3) / sms_all;
    double mhz = (d[4] - d[0]) / sms / (best_ms * 1e-3) / 1e6; /* busy cycles per block / time */
    mac_per_clk *= clock_khz / 1e3 / mhz;
    printf("%-34s E %2d x %4d rows K %5d: %8.1f us %5.0f GB/s of weights (%4.1f KB/us a block) ~%4.0f MHz %5.1f%% of fp16 peak | tile %7.0f cyc (%5.0f/stage) fill %5.0f waits %6.0f "
           "kloop %7.0f epi %5.0f (barrier %5.0f C %5.0f) after %4.0f | prod end %7.0f waits: widen %6.0f refill %6.0f\n",
           c.name, E, rows_per_expert, K, best_ms * 1e3, b_bytes / (best_ms * 1e-3) / 1e9, b_bytes / (best_ms * 1e-3) / 1e9 / sms, mhz, 100.0 * mac_per_clk / 2048, per_tile(4, 0), per_tile(4, 0) / stages,
           per_tile(1, 0), per_tile(6, 5), per_tile(2, 0), per_tile(3, 2), per_tile(12, 2), per_tile(13, 12), per_tile(4, 3), per_tile(7, 0),
           per_tile(9, 8), per_tile(11, 10));
    printf("%-34s producer per tile (thread 32): stage waits %6.0f, scales + barrier %6.0f, widening %6.0f\n", c.name,
           per_tile(9, 8), per_tile(14, 9), per_tile(15, 14));
    cudaFree(a), cudaFree(b), cudaFree(as), cudaFree(bs), cudaFree(gs), cudaFree(g.out), cudaFree(g.out_scales);
    lab_layout_free(g), cudaFree(sum), cudaFree(cnt);
}

int main(void)
{
    int sms, clock_khz;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (getenv("LAB_SMS")) sms = atoi(getenv("LAB_SMS")); /* fewer blocks: a block's own rate, HBM not the bound */
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("%d SMs, clock %d MHz (the attribute: the rate below assumes it)\n", sms, clock_khz / 1000);
    const moe_ep_format_t F8 = MOE_EP_FORMAT_FP8_BLOCK, MX = MOE_EP_FORMAT_MXFP8, NV = MOE_EP_FORMAT_NVFP4,
                          BF = MOE_EP_FORMAT_BF16;
    const moe_ep_format_t M4 = MOE_EP_FORMAT_MXFP4;
    (void)MX, (void)NV, (void)M4; /* unused with LAB_QUICK */
    /* The flash slice's eight decode GEMMs, M(tile format, name, A, W, out format, K, GEMM1) each. */
#define LAB_DECODE_GEMMS(M, pre)                                   \
    do {                                                           \
        M(RS_FP8_BLOCK, pre " fp8_block gemm1", F8, F8, F8, 4096, 1); \
        M(RS_FP8_BLOCK, pre " fp8_block gemm2", F8, F8, BF, 2048, 0); \
        M(RS_MXFP8, pre " mxfp8 gemm1", MX, MX, MX, 4096, 1);         \
        M(RS_MXFP8, pre " mxfp8 gemm2", MX, MX, BF, 2048, 0);         \
        M(RS_W4A8, pre " w4a8 gemm1", MX, M4, MX, 4096, 1);           \
        M(RS_W4A8, pre " w4a8 gemm2", MX, M4, BF, 2048, 0);           \
        M(RS_NVFP4, pre " nvfp4 gemm1", NV, NV, NV, 4096, 1);         \
        M(RS_NVFP4, pre " nvfp4 gemm2", NV, NV, BF, 2048, 0);         \
    } while (0)
    /* flash T = 8192 per expert: 1536 rows (12 tiles of 128); 4 experts: 768 tiles of 256 columns.
     * LAB(tile format, rows, name, A, W, out format, K, N, GEMM1) */
#define LAB_E(FMT, BM, name, a, w, out, K, N, glu, E, rows)                       \
    do {                                                                         \
        lab_case c_ = {name, a, w, out, K, N, glu};                              \
        run_case<FMT, BM>(c_, E, rows, sms, clock_khz);                          \
    } while (0)
#define LAB(FMT, BM, name, a, w, out, K, N, glu) LAB_E(FMT, BM, name, a, w, out, K, N, glu, 4, 1536)
#ifdef LAB_QG /* FP8-BLOCK with fp8_fast_accum: the QGMMA instances (RS_FP8_QG) at flash T = 8192 / 512 and decode */
    LAB(RS_FP8_QG, 128, "qg gemm1 (flash)", F8, F8, F8, 4096, 4096, 1);
    LAB(RS_FP8_QG, 128, "qg gemm2-like bf16 out", F8, F8, BF, 2048, 4096, 0);
    LAB(RS_FP8_QG, 64, "qg gemm1, 64-row tile", F8, F8, F8, 4096, 4096, 1);
    LAB_E(RS_FP8_QG, 16, "qg decode gemm1 n16", F8, F8, F8, 4096, 4096, 1, 32, 2);
    LAB(RS_FP8_BLOCK, 128, "fp8_block gemm1 (flash)", F8, F8, F8, 4096, 4096, 1);
#elif defined(LAB_MID) /* the pro EP8 slice at T = 512: 48 experts of 64 rows, the 64-row tiles */
#define LAB_MID1(FMT, name, a, w, out, K, N, glu) LAB_E(FMT, 64, name, a, w, out, K, N, glu, 48, 64)
    LAB_MID1(RS_FP8_BLOCK, "mid fp8_block gemm1", F8, F8, F8, 7168, 6144, 1);
    LAB_MID1(RS_FP8_BLOCK, "mid fp8_block gemm2", F8, F8, BF, 3072, 7168, 0);
    LAB_MID1(RS_FP8_QG, "mid qg gemm1", F8, F8, F8, 7168, 6144, 1);
    LAB_MID1(RS_MXFP8, "mid mxfp8 gemm1", MX, MX, MX, 7168, 6144, 1);
    LAB_MID1(RS_W4A8, "mid w4a8 gemm1", MX, M4, MX, 7168, 6144, 1);
    LAB_MID1(RS_NVFP4, "mid nvfp4 gemm1", NV, NV, NV, 7168, 6144, 1);
#elif defined(LAB_PAIRED) /* the paired 16-row instances as the backends launch them (two blocks per SM, 80
                            * registers) against one block per SM with the same ring, flash decode: 66 experts
                            * of 2 / 12 rows (4 / 2 tiles of 256 columns a block), GEMM1 (K 4096) and GEMM2 (K 2048) */
#define LAB_PAIR(FMT, name, a, w, out, K, glu)                                         \
    do {                                                                          \
        lab_case c_ = {name " n16", a, w, out, K, 4096, glu};                     \
        run_case<FMT, 16, 2>(c_, 66, rows, sms, clock_khz);                       \
        lab_case c1_ = {name " n16 (one block an SM)", a, w, out, K, 4096, glu};  \
        run_case<FMT, 16, 1>(c1_, 66, rows, sms, clock_khz);                      \
    } while (0)
    for (int rows = 2; rows <= 12; rows += 10) LAB_DECODE_GEMMS(LAB_PAIR, "paired");
#elif defined(LAB_DECODE_FP8) /* LAB_DECODE's FP8-BLOCK lines only: 32 experts of 12 and 2 rows, 32- and 16-row tiles */
    for (int rows = 12; rows >= 2; rows -= 10)
        for (int glu = 1; glu >= 0; glu--) {
            LAB_E(RS_FP8_BLOCK, 32, glu ? "decode fp8_block gemm1 n32" : "decode fp8_block gemm2 n32", F8, F8, glu ? F8 : BF,
                  glu ? 4096 : 2048, 4096, glu, 32, rows);
            LAB_E(RS_FP8_BLOCK, 16, glu ? "decode fp8_block gemm1 n16" : "decode fp8_block gemm2 n16", F8, F8, glu ? F8 : BF,
                  glu ? 4096 : 2048, 4096, glu, 32, rows);
        }
#elif defined(LAB_MC_CASES) /* the A16 tiles at flash T = 8192 (1536 rows an expert), 2048 (384), 512 (96) */
    LAB_E(RS_NVFP4, 128, "t8192 nvfp4 gemm1 (1536 rows)", NV, NV, NV, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_NVFP4, 144, "t8192 nvfp4 gemm1 (1536 rows, 144-row tiles)", NV, NV, NV, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_NVFP4, 128, "t8192 nvfp4 gemm2 (1536 rows)", NV, NV, BF, 2048, 4096, 0, 32, 1536);
    LAB_E(RS_MXFP8, 128, "t8192 mxfp8 gemm1 (1536 rows)", MX, MX, MX, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_W4A8, 128, "t8192 w4a8 gemm1 (1536 rows)", MX, M4, MX, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_NVFP4, 128, "t2048 nvfp4 gemm1 (384 rows)", NV, NV, NV, 4096, 4096, 1, 32, 384);
    LAB_E(RS_NVFP4, 128, "t512 nvfp4 gemm1 (96 rows)", NV, NV, NV, 4096, 4096, 1, 32, 96);
#elif defined(LAB_T512) /* the flash EP8 slice at T = 512: 32 experts of 96 rows, the 128-row tiles (their n96 form) */
    LAB_E(RS_MXFP8, 128, "t512 mxfp8 gemm1", MX, MX, MX, 4096, 4096, 1, 32, 96);
    LAB_E(RS_MXFP8, 128, "t512 mxfp8 gemm2", MX, MX, BF, 2048, 4096, 0, 32, 96);
    LAB_E(RS_W4A8, 128, "t512 w4a8 gemm1", MX, M4, MX, 4096, 4096, 1, 32, 96);
    LAB_E(RS_FP8_BLOCK, 128, "t512 fp8_block gemm1", F8, F8, F8, 4096, 4096, 1, 32, 96);
    LAB_E(RS_MXFP8, 128, "t512 mxfp8 gemm1 at 128 rows", MX, MX, MX, 4096, 4096, 1, 32, 128);
    LAB_E(RS_MXFP8, 128, "t8192 mxfp8 gemm1 (1536 rows)", MX, MX, MX, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_W4A8, 128, "t8192 w4a8 gemm1 (1536 rows)", MX, M4, MX, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_NVFP4, 128, "t512 nvfp4 gemm1", NV, NV, NV, 4096, 4096, 1, 32, 96);
    LAB_E(RS_NVFP4, 128, "t8192 nvfp4 gemm1 (1536 rows)", NV, NV, NV, 4096, 4096, 1, 32, 1536);
    LAB_E(RS_NVFP4, 128, "t8192 nvfp4 gemm2 (1536 rows)", NV, NV, BF, 2048, 4096, 0, 32, 1536);
#ifdef LAB_T2048 /* the row counts of T = 2048 (sixty-fifth session): what a tile of 64 rows or a remainder costs */
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm1 64 rows (n64)", NV, NV, NV, 4096, 4096, 1, 32, 64);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm1 32 rows (n64)", NV, NV, NV, 4096, 4096, 1, 32, 32);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm1 384 rows (3 tiles)", NV, NV, NV, 4096, 4096, 1, 32, 384);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm1 400 rows (3 + 16)", NV, NV, NV, 4096, 4096, 1, 32, 400);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm2 64 rows (n64)", NV, NV, BF, 2048, 4096, 0, 32, 64);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm2 96 rows (n96)", NV, NV, BF, 2048, 4096, 0, 32, 96);
    LAB_E(RS_NVFP4, 128, "nvfp4 gemm2 128 rows", NV, NV, BF, 2048, 4096, 0, 32, 128);
    LAB_E(RS_MXFP8, 128, "mxfp8 gemm1 64 rows (n64)", MX, MX, MX, 4096, 4096, 1, 32, 64);
    LAB_E(RS_MXFP8, 128, "mxfp8 gemm1 128 rows", MX, MX, MX, 4096, 4096, 1, 32, 128);
#endif
#ifdef LAB_W144 /* rows an expert of flash T = 8192 (1536), 2048 (384, 400) and pro 2048 (256, 272): 128- against 144-row tiles */
#define LAB_W(FMT, what, a, w, out, K, glu)                                                      \
    do {                                                                                         \
        char n_[64];                                                                             \
        snprintf(n_, sizeof n_, "w128 " what " %d rows", rows);                                  \
        LAB_E(FMT, 128, n_, a, w, out, K, 4096, glu, 32, rows);                                  \
        snprintf(n_, sizeof n_, "w144 " what " %d rows", rows);                                  \
        LAB_E(FMT, 144, n_, a, w, out, K, 4096, glu, 32, rows);                                  \
    } while (0)
    const int w144_rows[] = {1536, 400, 384, 272, 256};
    for (int rows : w144_rows) {
        LAB_W(RS_NVFP4, "nvfp4 gemm1", NV, NV, NV, 4096, 1);
        LAB_W(RS_NVFP4, "nvfp4 gemm2", NV, NV, BF, 2048, 0);
#ifdef LAB_W144_MX /* MXFP8's and W4A8's GEMM1 */
        LAB_W(RS_MXFP8, "mxfp8 gemm1", MX, MX, MX, 4096, 1);
        LAB_W(RS_W4A8, "w4a8 gemm1", MX, M4, MX, 4096, 1);
#endif
    }
#endif
#elif defined(LAB_DECODE) /* the flash EP8 slice at decode: 32 experts of 12 rows (T = 64) and 2 (T ~ 8), 64-, 32- and 16-row tiles */
#define LAB_DEC(FMT, BM, name, a, w, out, K, glu) LAB_E(FMT, BM, name, a, w, out, K, 4096, glu, 32, rows)
#define LAB_DEC3(FMT, name, a, w, out, K, glu)                        \
    do {                                                              \
        LAB_DEC(FMT, 64, name " n64", a, w, out, K, glu);             \
        LAB_DEC(FMT, 32, name " n32", a, w, out, K, glu);             \
        LAB_DEC(FMT, 16, name " n16", a, w, out, K, glu);             \
    } while (0)
    for (int rows = 12; rows >= 2; rows -= 10) LAB_DECODE_GEMMS(LAB_DEC3, "decode");
    LAB(RS_MXFP8, 128, "mxfp8 gemm1 (flash)", MX, MX, MX, 4096, 4096, 1); /* and the 128-row tile at T = 8192 */
    LAB(RS_W4A8, 128, "w4a8 gemm1 (flash)", MX, M4, MX, 4096, 4096, 1);
#else
#ifndef LAB_QUICK /* the ring experiments only with it: -DLAB_RAW=3 -DLAB_CVT=2, -DFR_LAB_SKIP_WIDEN */
    for (int K = 512; K <= 8192; K *= 2) LAB(RS_FP8_BLOCK, 128, "fp8_block gemm2-like bf16 out", F8, F8, BF, K, 4096, 0);
#else
    LAB(RS_FP8_BLOCK, 128, "fp8_block gemm2-like bf16 out", F8, F8, BF, 4096, 4096, 0);
#endif
    LAB(RS_FP8_BLOCK, 128, "fp8_block gemm1 (flash)", F8, F8, F8, 4096, 4096, 1);
#ifndef LAB_QUICK
    LAB(RS_FP8_BLOCK, 128, "fp8_block gemm1 bf16 out", F8, F8, BF, 4096, 4096, 1);
    LAB(RS_MXFP8, 128, "mxfp8 gemm1 (flash)", MX, MX, MX, 4096, 4096, 1);
    LAB(RS_MXFP8, 128, "mxfp8 gemm2-like bf16 out", MX, MX, BF, 2048, 4096, 0);
    LAB(RS_NVFP4, 128, "nvfp4 gemm1 (flash)", NV, NV, NV, 4096, 4096, 1);
    LAB(RS_FP8_BLOCK, 64, "fp8_block gemm1, 64-row tile", F8, F8, F8, 4096, 4096, 1);
#endif
#endif /* LAB_DECODE */
#undef LAB
    return 0;
}
