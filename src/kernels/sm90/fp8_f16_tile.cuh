/* The exact FP8-BLOCK tile on Hopper tensor cores, for the split backend's
 * grouped GEMM (wgmma_gemm.cu) and the mega kernel: E4M3 values are exact in
 * fp16, so fp16 wgmma (HGMMA) on widened operands gives exact products and
 * fp32 sums, where QGMMA's FP8 sums keep fewer bits (qgmma_tile.cuh).
 * Measured on the H200: the same bits as the FP8 mma.sync tiles (test_split's
 * knob test, test_tiles), so it is the FP8-BLOCK path's 64-row tile, a knob
 * choice. One 64 x 256 output tile of one expert, 384 threads.
 *
 * Warpgroup 0: thread 0 issues the TMA copies of the raw E4M3 rows (A: 64 x
 * 64 bytes, B: 256 x 64 bytes per K step of 64, dense) into a ring of
 * FF_RAW stages; all 128 threads widen each raw stage to fp16 in the wgmma
 * operand layout (128-byte rows, 128-byte swizzle) in a ring of FF_CVT
 * stages. Warpgroups 1 and 2 (columns 0..127 and 128..255, as in the QGMMA
 * tile) issue 4 wgmma m64n128k16 f16 per K step into a partial sum promoted
 * once per 128-wide K block: acc = fmaf(part, s_x * s_w, acc). */
#ifndef MOE_EP_FP8_F16_TILE_CUH
#define MOE_EP_FP8_F16_TILE_CUH

#include "kernels/sm90/qgmma_tile.cuh"

#include <cuda_fp16.h>

#define FF_BM 64
#define FF_BN 256
#define FF_BK 64 /* K elements per step: 64 raw bytes, one 128-byte fp16 row */
#define FF_RAW 4
#define FF_CVT 2

struct ff_smem {
    __half a[FF_CVT][FF_BM * FF_BK];   /* 8 KB per stage, 1024-byte aligned (wgmma layout) */
    __half b[FF_CVT][FF_BN * FF_BK];   /* 32 KB per stage */
    uint8_t ra[FF_RAW][FF_BM * FF_BK]; /* 4 KB per stage (raw E4M3, dense rows) */
    uint8_t rb[FF_RAW][FF_BN * FF_BK]; /* 16 KB per stage */
    uint64_t raw_full[FF_RAW], raw_empty[FF_RAW], cvt_full[FF_CVT], cvt_empty[FF_CVT];
};

#define FF_SMEM_BYTES (sizeof(ff_smem) + 1024)

/* 16 E4M3 bytes -> 16 fp16 (exact) as two 16-byte chunks. */
__device__ __forceinline__ void e4m3x16_to_f16(uint4 v, uint4 &lo, uint4 &hi)
{
    uint32_t w[4] = {v.x, v.y, v.z, v.w}, o[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint16_t p0 = (uint16_t)(w[i] & 0xFFFF), p1 = (uint16_t)(w[i] >> 16);
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(o[2 * i]) : "h"(p0));
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(o[2 * i + 1]) : "h"(p1));
    }
    lo = make_uint4(o[0], o[1], o[2], o[3]), hi = make_uint4(o[4], o[5], o[6], o[7]);
}

/* Raw rows (64 bytes each, dense) -> fp16 rows of 128 bytes in the 128-byte
 * swizzle (16-byte chunk j of row r at chunk j ^ (r % 8)), by 128 threads. */
__device__ __forceinline__ void ff_widen(const uint8_t *raw, __half *out, int rows, int t)
{
    for (int c = t; c < rows * 4; c += 128) {
        int r = c / 4, q = c % 4; /* raw chunk q = fp16 chunks 2q, 2q + 1 */
        uint4 lo, hi;
        e4m3x16_to_f16(*(const uint4 *)(raw + r * FF_BK + 16 * q), lo, hi);
        uint8_t *row = (uint8_t *)out + r * 128;
        *(uint4 *)(row + (((2 * q) ^ (r & 7)) << 4)) = lo;
        *(uint4 *)(row + (((2 * q + 1) ^ (r & 7)) << 4)) = hi;
    }
}

/* Warpgroup 0: TMA of the raw stages (thread 0), widening by all 128 threads. */
__device__ __forceinline__ void ff_produce(ff_smem &s, const gemm_args &g, const CUtensorMap *ta,
                                           const CUtensorMap *tb, int e, int64_t row0, int n0, int n_k, int t)
{
    if (t == 0) asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks wrote */
    for (int kt = 0; kt < n_k + FF_RAW - 1; kt++) {
        int ld = kt; /* raw stage to load now: FF_RAW - 1 ahead of the one widened */
        if (t == 0 && ld < n_k) {
            int st = ld % FF_RAW;
            mbar_wait(&s.raw_empty[st], ((ld / FF_RAW) & 1) ^ 1);
            mbar_expect_tx(&s.raw_full[st], (FF_BM + FF_BN) * FF_BK);
            tma_load_2d(s.ra[st], ta, &s.raw_full[st], ld * FF_BK, (int)row0);
            tma_load_2d(s.rb[st], tb, &s.raw_full[st], ld * FF_BK, e * g.N + n0);
        }
        int cv = kt - (FF_RAW - 1);
        if (cv < 0) continue;
        int rs = cv % FF_RAW, cs = cv % FF_CVT;
        mbar_wait(&s.raw_full[rs], (cv / FF_RAW) & 1);
        mbar_wait(&s.cvt_empty[cs], ((cv / FF_CVT) & 1) ^ 1);
        ff_widen(s.ra[rs], s.a[cs], FF_BM, t);
        ff_widen(s.rb[rs], s.b[cs], FF_BN, t);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* generic writes -> wgmma reads */
        mbar_arrive(&s.raw_empty[rs]);
        mbar_arrive(&s.cvt_full[cs]);
    }
}

/* Every thread of a 384-thread block calls it; as qgmma_tile (ta / tb: raw
 * E4M3 maps with boxes of 64 x 64 and 256 x 64 bytes, no swizzle). */
__device__ __forceinline__ void fp8_f16_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                             uint8_t *smem_raw, int e, int64_t row0, int rows_valid, int n0)
{
    ff_smem &s = *(ff_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / FF_BK;
    if (threadIdx.x == 0) {
        for (int i = 0; i < FF_RAW; i++) mbar_init(&s.raw_full[i], 1), mbar_init(&s.raw_empty[i], 128);
        for (int i = 0; i < FF_CVT; i++) mbar_init(&s.cvt_full[i], 128), mbar_init(&s.cvt_empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        ff_produce(s, g, ta, tb, e, row0, n0, n_k, t);
    } else { /* consumers: warpgroup h = wg - 1 owns columns [128 h, 128 h + 128) */
        int h = wg - 1, warp = t / 32, lane = t % 32, r = 16 * warp + lane / 4;
        const fp8_block_scales sc = fp8_scales_of(g, e, row0, rows_valid, n0, h, r);
        float acc[64], part[64];
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] = 0.0f;
        for (int kt = 0; kt < n_k; kt++) {
            int cs = kt % FF_CVT, first = (kt & 1) == 0; /* two K steps per 128-wide scale block */
            float s0 = 0.0f, s1 = 0.0f;
            if (!first) fp8_scales_at(sc, kt / 2, s0, s1);
            mbar_wait(&s.cvt_full[cs], (kt / FF_CVT) & 1);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < FF_BK / 16; kk++) /* +32 bytes (2 x 16 B) per k16 step */
                wgmma_m64n128k16_f16(part, smem_desc(s.a[cs]) + 2 * kk, smem_desc(&s.b[cs][128 * h * FF_BK]) + 2 * kk,
                                     first && kk == 0 ? 0 : 1);
            wgmma_commit();
            wgmma_wait<0>();
            mbar_arrive(&s.cvt_empty[cs]);
            if (!first) fp8_promote(acc, part, s0, s1);
        }
        wg_consumer_barrier(); /* every stage read; C may now overwrite them */
        float(*C)[FF_BN + 4] = (float(*)[FF_BN + 4])(void *)&s;
        wg_store_fragment<16, FF_BN>(C, acc, r, 128 * h, lane);
        wg_consumer_barrier();
        epilogue<FF_BM, FF_BN>(g, C, row0, rows_valid, n0, threadIdx.x - 128, 256);
    }
    __syncthreads(); /* every TMA landed, every arrival made: the rings and C are free */
    if (threadIdx.x == 0) {
        for (int i = 0; i < FF_RAW; i++) mbar_inval(&s.raw_full[i]), mbar_inval(&s.raw_empty[i]);
        for (int i = 0; i < FF_CVT; i++) mbar_inval(&s.cvt_full[i]), mbar_inval(&s.cvt_empty[i]);
    }
}

/* The raw tensor maps of one GEMM for the tile (FP8-BLOCK, N % 256, K % 128). */
static inline moe_ep_status_t ff_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb)
{
    if (!qg_fits(g)) return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "the FP8 fp16 tile takes FP8-BLOCK operands, N %% 256, K %% 128");
    MOE_EP_CHECK(tma_map_rows(ta, g.a, rows_capacity, g.K, 1, FF_BK, FF_BM));
    return tma_map_rows(tb, g.b, (int64_t)g.E * g.N, g.K, 1, FF_BK, FF_BN);
}

#endif
