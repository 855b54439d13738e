/* Exact tiles on Hopper's fp16 tensor cores for quantized operands, both
 * operands widened to fp16 in shared memory (fp16 holds them exactly; fp16
 * wgmma (HGMMA) gives exact products and fp32 sums; QGMMA's FP8 sums keep
 * fewer bits: qgmma_tile.cuh). One 64 x 256 output tile of one expert, 384
 * threads. FP8-BLOCK (WIDEN_FP8) ran here until fp8_rs_tile.cuh (weights
 * widened in registers, 3-6 % faster) took over; its helpers (the e4m3
 * widening, the swizzled stores) stay shared.
 *   Experiment (only with -DMOE_EP_WIDEN_EXPERIMENT; measured on the H200:
 *   the same bytes as mma.sync in one run, MXFP8 ~5 % faster at T >= 512,
 *   NVFP4 11-16 % slower, docs/benchmarks.md):
 *   NVFP4 (WIDEN_NVFP4): E2M1 x its E4M3 block scale -> fp16 (exact, as the
 *     NVFP4 mma.sync tile does), one fp32 sum over K, the global scales
 *     applied once at the end.
 *   MXFP8 and W4A8 (WIDEN_MXFP8, WIDEN_W4A8): E4M3 (and the W4A8 weights'
 *     E2M1) -> fp16; partial sums promoted every 32 of K with the UE8M0
 *     scales of row and column, acc = fmaf(part, s_x * s_w, acc), as the MX
 *     mma.sync tiles do (the producer copies each step's scales next to the
 *     widened operands). MXFP8 and W4A8 now run the register tile
 *     (fp8_rs_tile.cuh) in every build; only NVFP4 reaches this one.
 *
 * Warpgroup 0: thread 0 issues the TMA copies of the raw rows (A: 64 rows,
 * B: 256 rows, RAW_BYTES bytes each per K step of 64 elements, dense) into a
 * ring of FF_RAW stages; all 128 threads widen each raw stage to fp16 in the
 * wgmma operand layout (128-byte rows, 128-byte swizzle) in a ring of FF_CVT
 * stages. Warpgroups 1 and 2 (columns 0..127 and 128..255, as in the QGMMA
 * tile) issue 4 wgmma m64n128k16 f16 per K step. */
#ifndef MOE_EP_F16_WIDEN_TILE_CUH
#define MOE_EP_F16_WIDEN_TILE_CUH

#include "kernels/sm90/qgmma_tile.cuh"

#include <cuda_fp16.h>

#define FF_BM 64
#define FF_BN 256
#define FF_BK 64 /* K elements per step: one 128-byte fp16 row */
#define FF_RAW 4
#define FF_CVT 2

enum { WIDEN_FP8 = 0, WIDEN_NVFP4 = 1, WIDEN_MXFP8 = 2, WIDEN_W4A8 = 3 };

/* The widening format of a GEMM's operand formats (-1: none). */
__host__ __device__ __forceinline__ int ff_widen_format(moe_ep_format_t a, moe_ep_format_t b)
{
    if (a == MOE_EP_FORMAT_FP8_BLOCK) return WIDEN_FP8;
    if (a == MOE_EP_FORMAT_NVFP4) return WIDEN_NVFP4;
    if (a == MOE_EP_FORMAT_MXFP8) return b == MOE_EP_FORMAT_MXFP4 ? WIDEN_W4A8 : WIDEN_MXFP8;
    return -1;
}

/* Raw bytes per row per K step of A and of B: E4M3 64, E2M1 32. */
template <int FMT>
__host__ __device__ constexpr int ff_raw_a() { return FMT == WIDEN_NVFP4 ? FF_BK / 2 : FF_BK; }
template <int FMT>
__host__ __device__ constexpr int ff_raw_b() { return FMT == WIDEN_NVFP4 || FMT == WIDEN_W4A8 ? FF_BK / 2 : FF_BK; }

struct ff_smem {
    __half a[FF_CVT][FF_BM * FF_BK];   /* 8 KB per stage, 1024-byte aligned (wgmma layout) */
    __half b[FF_CVT][FF_BN * FF_BK];   /* 32 KB per stage */
    uint8_t ra[FF_RAW][FF_BM * FF_BK]; /* 4 KB per stage (raw rows, dense; NVFP4 uses half) */
    uint8_t rb[FF_RAW][FF_BN * FF_BK]; /* 16 KB per stage */
    uint32_t lut_pair[256];            /* NVFP4, W4A8: the two E2M1 values of a byte as half2 */
    uint16_t lut_scale[256];           /* NVFP4: an E4M3 scale as half */
    uint8_t msa[FF_CVT][2][FF_BM];     /* MX: UE8M0 scales of the step's two k32 halves, per row */
    uint8_t msw[FF_CVT][2][FF_BN];     /* MX: the same per column (weight row) */
    uint64_t raw_full[FF_RAW], raw_empty[FF_RAW], cvt_full[FF_CVT], cvt_empty[FF_CVT];
};

#define FF_SMEM_BYTES (sizeof(ff_smem) + 1024)

/* Stores 16 bytes of fp16 as chunk j of a 128-byte row r in the 128-byte swizzle. */
__device__ __forceinline__ void ff_store_chunk(__half *out, int r, int j, uint4 v)
{
    *(uint4 *)((uint8_t *)out + r * 128 + ((j ^ (r & 7)) << 4)) = v;
}

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

/* E4M3 raw rows (64 bytes) -> fp16 rows, by 128 threads (raw chunk q = fp16 chunks 2q, 2q + 1). */
__device__ __forceinline__ void ff_widen_fp8(const uint8_t *raw, __half *out, int rows, int t)
{
    for (int c = t; c < rows * 4; c += 128) {
        int r = c / 4, q = c % 4;
        uint4 lo, hi;
        e4m3x16_to_f16(*(const uint4 *)(raw + r * FF_BK + 16 * q), lo, hi);
        ff_store_chunk(out, r, 2 * q, lo);
        ff_store_chunk(out, r, 2 * q + 1, hi);
    }
}

/* 4 bytes of E2M1 pairs x one E4M3 scale (as half2) -> 8 fp16 as 4 half2 words. */
__device__ __forceinline__ uint4 nvfp4x8_to_f16(uint32_t q, __half2 s2, const uint32_t *lut_pair)
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t p = lut_pair[(q >> (8 * i)) & 0xFF];
        __half2 v = __hmul2(*(const __half2 *)&p, s2);
        w[i] = *(uint32_t *)&v;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* NVFP4 raw rows (32 bytes = 64 elements, 4 scale blocks of 16) of K step kt
 * -> fp16 rows, by 128 threads: raw chunk q (16 bytes, 32 elements, scale
 * blocks 2q and 2q + 1) = fp16 chunks 4q .. 4q + 3. sc: the rows' scales,
 * stride bytes apart; rows past valid get scale 0 (never stored; their scale
 * rows may lie past the buffer). */
__device__ __forceinline__ void ff_widen_nvfp4(const uint8_t *raw, const uint8_t *sc, int64_t stride, int valid,
                                               int kt, __half *out, int rows, int t, const ff_smem &s)
{
    for (int c = t; c < rows * 2; c += 128) {
        int r = c / 2, q = c % 2;
        uint4 v = *(const uint4 *)(raw + r * (FF_BK / 2) + 16 * q);
        uint16_t s01 = r < valid ? __ldcg((const unsigned short *)(sc + r * stride + kt * 4 + 2 * q)) : 0;
        __half h0 = __ushort_as_half(s.lut_scale[s01 & 0xFF]), h1 = __ushort_as_half(s.lut_scale[s01 >> 8]);
        __half2 s0 = __halves2half2(h0, h0), s1 = __halves2half2(h1, h1);
        ff_store_chunk(out, r, 4 * q, nvfp4x8_to_f16(v.x, s0, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 1, nvfp4x8_to_f16(v.y, s0, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 2, nvfp4x8_to_f16(v.z, s1, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 3, nvfp4x8_to_f16(v.w, s1, s.lut_pair));
    }
}

/* E2M1 raw rows (32 bytes = 64 elements) -> fp16 rows, no scale (W4A8 weights:
 * their UE8M0 scales are promoted like the activations'). */
__device__ __forceinline__ void ff_widen_e2m1(const uint8_t *raw, __half *out, int rows, int t, const ff_smem &s)
{
    const __half2 one = __float2half2_rn(1.0f);
    for (int c = t; c < rows * 2; c += 128) {
        int r = c / 2, q = c % 2;
        uint4 v = *(const uint4 *)(raw + r * (FF_BK / 2) + 16 * q);
        ff_store_chunk(out, r, 4 * q, nvfp4x8_to_f16(v.x, one, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 1, nvfp4x8_to_f16(v.y, one, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 2, nvfp4x8_to_f16(v.z, one, s.lut_pair));
        ff_store_chunk(out, r, 4 * q + 3, nvfp4x8_to_f16(v.w, one, s.lut_pair));
    }
}

/* MX: the UE8M0 scales of K step kt (2 per row: bytes 2 kt, 2 kt + 1) of A's
 * valid rows (0 past them) and B's 256 rows into the stage's tables. */
__device__ __forceinline__ void ff_copy_mx_scales(ff_smem &s, int cs, const gemm_args &g, int64_t row0, int valid,
                                                  int64_t b_row, int64_t b_sb, int kt, int t)
{
    for (int r = t; r < FF_BM + FF_BN; r += 128) {
        uint16_t v = 0;
        if (r < FF_BM) {
            if (r < valid) v = __ldcg((const unsigned short *)(g.a_scales + (row0 + r) * g.a_scale_stride + 2 * kt));
            s.msa[cs][0][r] = (uint8_t)(v & 0xFF), s.msa[cs][1][r] = (uint8_t)(v >> 8);
        } else {
            int n = r - FF_BM;
            v = __ldcg((const unsigned short *)(g.b_scales + (b_row + n) * b_sb + 2 * kt));
            s.msw[cs][0][n] = (uint8_t)(v & 0xFF), s.msw[cs][1][n] = (uint8_t)(v >> 8);
        }
    }
}

/* Warpgroup 0: TMA of the raw stages (thread 0), widening by all 128 threads. */
template <int FMT>
__device__ __forceinline__ void ff_produce(ff_smem &s, const gemm_args &g, const CUtensorMap *ta,
                                           const CUtensorMap *tb, int e, int64_t row0, int rows_valid, int n0,
                                           int n_k, int t)
{
    constexpr int RA = ff_raw_a<FMT>(), RB = ff_raw_b<FMT>();
    const int64_t b_row = (int64_t)e * g.N + n0, b_sb = moe_ep_row_scale_bytes(g.b_fmt, g.K);
    if (t == 0) asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks wrote */
    for (int kt = 0; kt < n_k + FF_RAW - 1; kt++) {
        int ld = kt; /* raw stage to load now: FF_RAW - 1 ahead of the one widened */
        if (t == 0 && ld < n_k) {
            int st = ld % FF_RAW;
            mbar_wait(&s.raw_empty[st], ((ld / FF_RAW) & 1) ^ 1);
            mbar_expect_tx(&s.raw_full[st], FF_BM * RA + FF_BN * RB);
            tma_load_2d(s.ra[st], ta, &s.raw_full[st], ld * RA, (int)row0);
            tma_load_2d(s.rb[st], tb, &s.raw_full[st], ld * RB, (int)b_row);
        }
        int cv = kt - (FF_RAW - 1);
        if (cv < 0) continue;
        int rs = cv % FF_RAW, cs = cv % FF_CVT;
        mbar_wait(&s.raw_full[rs], (cv / FF_RAW) & 1);
        mbar_wait(&s.cvt_empty[cs], ((cv / FF_CVT) & 1) ^ 1);
        if constexpr (FMT != WIDEN_NVFP4) {
            ff_widen_fp8(s.ra[rs], s.a[cs], FF_BM, t);
            if constexpr (FMT == WIDEN_W4A8) ff_widen_e2m1(s.rb[rs], s.b[cs], FF_BN, t, s);
            else ff_widen_fp8(s.rb[rs], s.b[cs], FF_BN, t);
            if constexpr (FMT == WIDEN_MXFP8 || FMT == WIDEN_W4A8)
                ff_copy_mx_scales(s, cs, g, row0, rows_valid, b_row, b_sb, cv, t);
        } else {
            ff_widen_nvfp4(s.ra[rs], g.a_scales + row0 * g.a_scale_stride, g.a_scale_stride, rows_valid, cv, s.a[cs],
                           FF_BM, t, s);
            ff_widen_nvfp4(s.rb[rs], g.b_scales + b_row * b_sb, b_sb, FF_BN, cv, s.b[cs], FF_BN, t, s);
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* generic writes -> wgmma reads */
        mbar_arrive(&s.raw_empty[rs]);
        mbar_arrive(&s.cvt_full[cs]);
    }
}

/* The ring's barriers and (NVFP4) the widening tables, by the whole block;
 * the caller synchronises. */
template <int FMT>
__device__ __forceinline__ void ff_init(ff_smem &s)
{
    if (FMT == WIDEN_NVFP4 || FMT == WIDEN_W4A8)
        for (int v = threadIdx.x; v < 256; v += blockDim.x) {
            __half2 h = __floats2half2_rn(moe_ep_e2m1_to_f32((uint8_t)(v & 15)), moe_ep_e2m1_to_f32((uint8_t)(v >> 4)));
            s.lut_pair[v] = *(uint32_t *)&h;
            s.lut_scale[v] = __half_as_ushort(__float2half_rn(moe_ep_e4m3_to_f32((uint8_t)v)));
        }
    if (threadIdx.x == 0) {
        for (int i = 0; i < FF_RAW; i++) mbar_init(&s.raw_full[i], 1), mbar_init(&s.raw_empty[i], 128);
        for (int i = 0; i < FF_CVT; i++) mbar_init(&s.cvt_full[i], 128), mbar_init(&s.cvt_empty[i], 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
}

/* wgmma m64n128k16 f16 for k16 steps [k0, k1) of stage cs into d; zeroes d
 * first when zero. */
template <int K0 = 0, int K1 = FF_BK / 16>
__device__ __forceinline__ void ff_step(float *d, const ff_smem &s, int cs, int h, bool zero)
{
    wgmma_fence();
#pragma unroll
    for (int kk = K0; kk < K1; kk++) /* +32 bytes (2 x 16 B) per k16 step */
        wgmma_m64n128k16_f16(d, smem_desc(s.a[cs]) + 2 * kk, smem_desc(&s.b[cs][128 * h * FF_BK]) + 2 * kk,
                             zero && kk == K0 ? 0 : 1);
    wgmma_commit();
    wgmma_wait<0>();
}

/* MX promotion of k32 half `half` of stage cs: acc += part * (s_row * s_col),
 * the UE8M0 scales as fp32 (rows past rows_valid: 0, as the mma.sync tile). */
__device__ __forceinline__ void ff_promote_mx(float *acc, const float *part, const ff_smem &s, int cs, int half, int h,
                                              int r, int lane, int rows_valid)
{
    float sa0 = r < rows_valid ? moe_ep_ue8m0_to_f32(s.msa[cs][half][r]) : 0.0f;
    float sa1 = r + 8 < rows_valid ? moe_ep_ue8m0_to_f32(s.msa[cs][half][r + 8]) : 0.0f;
    const uint8_t *sw = s.msw[cs][half] + 128 * h;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        int c = 8 * j + (lane % 4) * 2;
        float w0 = moe_ep_ue8m0_to_f32(sw[c]), w1 = moe_ep_ue8m0_to_f32(sw[c + 1]);
        acc[4 * j] = fmaf(part[4 * j], sa0 * w0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], sa0 * w1, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], sa1 * w0, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], sa1 * w1, acc[4 * j + 3]);
    }
}

/* Consumer warpgroup h: the K loop into acc (64 fp32 per thread). */
template <int FMT>
__device__ __forceinline__ void ff_consume(ff_smem &s, const gemm_args &g, int e, int64_t row0, int rows_valid,
                                           int n0, int n_k, int h, int r, float *acc)
{
    static_assert(FMT != WIDEN_FP8, "FP8-BLOCK runs fp8_rs_tile.cuh");
    if constexpr (FMT == WIDEN_MXFP8 || FMT == WIDEN_W4A8) { /* promotion every 32 */
        float part[64];
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] = 0.0f;
        int lane = threadIdx.x % 32;
        for (int kt = 0; kt < n_k; kt++) {
            int cs = kt % FF_CVT;
            mbar_wait(&s.cvt_full[cs], (kt / FF_CVT) & 1);
            ff_step<0, 2>(part, s, cs, h, true);
            ff_promote_mx(acc, part, s, cs, 0, h, r, lane, rows_valid);
            ff_step<2, 4>(part, s, cs, h, true);
            ff_promote_mx(acc, part, s, cs, 1, h, r, lane, rows_valid);
            mbar_arrive(&s.cvt_empty[cs]); /* after the promotions: they read the stage's scales */
        }
    } else { /* NVFP4: one sum over K, then the global scales, as the mma.sync tile */
        for (int kt = 0; kt < n_k; kt++) {
            int cs = kt % FF_CVT;
            mbar_wait(&s.cvt_full[cs], (kt / FF_CVT) & 1);
            ff_step(acc, s, cs, h, kt == 0);
            mbar_arrive(&s.cvt_empty[cs]);
        }
        float scale = __fdiv_rn(1.0f, __fmul_rn(g.a_gs, g.b_gs[e]));
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] = __fmul_rn(acc[i], scale);
    }
}

/* Every thread of a 384-thread block calls it; as qgmma_tile (ta / tb: raw
 * maps with boxes of 64 x RAW_BYTES and 256 x RAW_BYTES bytes, no swizzle). */
template <int FMT>
__device__ __forceinline__ void f16_widen_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                               uint8_t *smem_raw, int e, int64_t row0, int rows_valid, int n0)
{
    ff_smem &s = *(ff_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / FF_BK;
    ff_init<FMT>(s);
    __syncthreads();
    if (wg == 0) {
        ff_produce<FMT>(s, g, ta, tb, e, row0, rows_valid, n0, n_k, t);
    } else { /* consumers: warpgroup h = wg - 1 owns columns [128 h, 128 h + 128) */
        int h = wg - 1, warp = t / 32, lane = t % 32, r = 16 * warp + lane / 4;
        float acc[64];
        ff_consume<FMT>(s, g, e, row0, rows_valid, n0, n_k, h, r, acc);
        wg_epilogue<16, FF_BM, FF_BN>(g, &s, acc, r, 128 * h, lane, row0, rows_valid, n0);
    }
    __syncthreads(); /* every TMA landed, every arrival made: the rings and C are free */
    if (threadIdx.x == 0) {
        for (int i = 0; i < FF_RAW; i++) mbar_inval(&s.raw_full[i]), mbar_inval(&s.raw_empty[i]);
        for (int i = 0; i < FF_CVT; i++) mbar_inval(&s.cvt_full[i]), mbar_inval(&s.cvt_empty[i]);
    }
}

/* The raw tensor maps of one GEMM for the tile: N % 256, K % 64 (FP8-BLOCK
 * K % 128), operands of the format's kinds. */
template <int FMT>
static inline moe_ep_status_t ff_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb)
{
    static const moe_ep_format_t af[] = {MOE_EP_FORMAT_FP8_BLOCK, MOE_EP_FORMAT_NVFP4, MOE_EP_FORMAT_MXFP8,
                                         MOE_EP_FORMAT_MXFP8};
    static const moe_ep_format_t bf[] = {MOE_EP_FORMAT_FP8_BLOCK, MOE_EP_FORMAT_NVFP4, MOE_EP_FORMAT_MXFP8,
                                         MOE_EP_FORMAT_MXFP4};
    if (g.a_fmt != af[FMT] || g.b_fmt != bf[FMT] || g.N % FF_BN || g.K % (FMT == WIDEN_FP8 ? 128 : FF_BK))
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "the fp16 widening tile: operands of another format or shape");
    constexpr int RA = ff_raw_a<FMT>(), RB = ff_raw_b<FMT>();
    /* the rows as bytes: RA (RB) bytes per 64 elements */
    MOE_EP_CHECK(tma_map_rows(ta, g.a, rows_capacity, g.K / FF_BK * RA, 1, RA, FF_BM));
    return tma_map_rows(tb, g.b, (int64_t)g.E * g.N, g.K / FF_BK * RB, 1, RB, FF_BN);
}

#endif
