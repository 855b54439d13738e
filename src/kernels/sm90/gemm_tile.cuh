/* The grouped-GEMM tile as device functions, shared by the split backend's
 * grouped_gemm kernel (grouped_gemm.cu) and the mega kernel (mega.cu).
 *
 * One tile: BM rows of one expert (16 or 64) x BN output columns (256 for
 * GEMM1: 128 gate + 128 up columns of the interleaved W13; 128 or 256 for
 * GEMM2), K in steps of BK (64 bf16, 128 otherwise). cp.async copies the raw
 * stored bytes (data and block scales) of each K step into a ring of STAGES
 * shared-memory slots, STAGES - 1 steps ahead of the math. bf16 operands feed
 * ldmatrix straight from their slot (rows padded by 16 bytes, no bank
 * conflicts); NVFP4 operands are converted to exact fp16 tiles first; E4M3
 * operands go straight into FP8 MMAs with the block scales applied to fp32
 * partial sums every 32 (MX) or 128 (FP8-BLOCK) K elements; FP4 weights of
 * W4A8 become E4M3 (exact) first. Warps: WM (M) x BN/32 (N), each 16*MI rows
 * x 32 columns.
 *
 * Activation rows are read only through L2 (cp.async.cg, 16 bytes): their
 * scale rows are padded to a multiple of 16 bytes (moe_ep_act_scale_stride)
 * and each K step copies the aligned 16-byte window holding its scales. So a
 * tile never reads a stale L1 line of rows another SM wrote during the same
 * kernel (the mega kernel depends on it).
 *
 * Each output element's K reduction runs in a fixed order whatever the tile
 * shape, tile or rank its row landed in: results are position independent. */
#ifndef MOE_EP_GEMM_TILE_CUH
#define MOE_EP_GEMM_TILE_CUH

#include "kernels/sm90/gemm_common.cuh"

#include <cuda_fp16.h>

#define KPAD 8 /* bf16 padding per converted row: no ldmatrix bank conflicts */
#define STAGES 3
#define SC_SLOT 16 /* bytes of block scales per row per K step (at most 8 used) */

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_e4m3(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async(void *dst, const void *src, int bytes, bool valid)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    int n = valid ? bytes : 0; /* 0: fill with zeros, read nothing */
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
    else if (bytes == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(n));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Shared-memory plan of one K step's raw slot: A rows then B rows (data with a
 * 16-byte pad per row when ldmatrix reads it directly), then their scales. */
struct stage_layout {
    int a_pitch, b_pitch;     /* bytes per row of data in the slot */
    int a_bytes, b_bytes;     /* data bytes per row actually copied */
    int a_sc, b_sc;           /* scale bytes per row per K step (0, 4 or 8) */
    int slot_bytes;
};

template <int BM, int BN, bool DIRECT>
__host__ __device__ __forceinline__ stage_layout make_layout(moe_ep_format_t af, moe_ep_format_t bf, int bk)
{
    stage_layout L;
    L.a_bytes = (int)moe_ep_row_data_bytes(af, bk);
    L.b_bytes = (int)moe_ep_row_data_bytes(bf, bk);
    L.a_pitch = L.a_bytes + (DIRECT ? 16 : 0);
    L.b_pitch = L.b_bytes + (DIRECT ? 16 : 0);
    L.a_sc = (int)moe_ep_row_scale_bytes(af, bk);
    L.b_sc = (int)moe_ep_row_scale_bytes(bf, bk);
    L.slot_bytes = BM * L.a_pitch + BN * L.b_pitch + (BM + BN) * SC_SLOT;
    return L;
}

/* Issues the cp.async copies of K step k0 into slot `slot` (A rows past
 * rows_valid are zero-filled). */
template <int BM, int BN>
__device__ __forceinline__ void issue_stage(const gemm_args &g, const stage_layout &L, uint8_t *slot,
                                            const uint8_t *aw, const uint8_t *aws, int rows_valid,
                                            const uint8_t *bw, const uint8_t *bws, int k0)
{
    int a_rb = (int)moe_ep_row_data_bytes(g.a_fmt, g.K);
    int64_t b_rb = moe_ep_row_data_bytes(g.b_fmt, g.K), b_sb = moe_ep_row_scale_bytes(g.b_fmt, g.K);
    int64_t a_k = moe_ep_row_data_bytes(g.a_fmt, k0), b_k = moe_ep_row_data_bytes(g.b_fmt, k0);
    int a_chunks = L.a_bytes / 16, b_chunks = L.b_bytes / 16;
    uint8_t *b_slot = slot + BM * L.a_pitch, *sc_slot = b_slot + BN * L.b_pitch;
    for (int c = threadIdx.x; c < BM * a_chunks; c += blockDim.x) {
        int m = c / a_chunks, j = c % a_chunks;
        bool ok = m < rows_valid;
        cp_async(slot + m * L.a_pitch + 16 * j, aw + (ok ? m : 0) * a_rb + a_k + 16 * j, 16, ok);
    }
    for (int c = threadIdx.x; c < BN * b_chunks; c += blockDim.x) {
        int n = c / b_chunks, j = c % b_chunks;
        cp_async(b_slot + n * L.b_pitch + 16 * j, bw + n * b_rb + b_k + 16 * j, 16, true);
    }
    if (L.a_sc) { /* the 16-byte aligned window holding this step's scales (the file comment) */
        const uint8_t *sc = aws + ((int)moe_ep_row_scale_bytes(g.a_fmt, k0) & ~15);
        for (int m = threadIdx.x; m < BM; m += blockDim.x) {
            bool ok = m < rows_valid;
            cp_async(sc_slot + m * SC_SLOT, sc + (ok ? m : 0) * g.a_scale_stride, 16, ok);
        }
    }
    if (L.b_sc)
        for (int n = threadIdx.x; n < BN; n += blockDim.x)
            cp_async(sc_slot + (BM + n) * SC_SLOT, bws + n * b_sb + moe_ep_row_scale_bytes(g.b_fmt, k0), L.b_sc, true);
}

/* NVFP4 element values E2M1 x E4M3 block scale are exact in fp16 (at most 5
 * significant bits, magnitudes 2^-10 .. 2688), so both operands become fp16
 * tiles with one table lookup and one packed multiply per element pair; the
 * global scales S are applied in the epilogue. lut_pair[byte] holds the two
 * E2M1 values of a byte as half2, lut_scale[code] the E4M3 value as half. */
__device__ __forceinline__ void nvfp4_rows_to_f16(const uint8_t *data, int pitch, const uint8_t *sc, int rows,
                                                  int bk, __half *out, int out_pitch, const uint32_t *lut_pair,
                                                  const uint16_t *lut_scale)
{
    int chunks = bk / 8; /* 8 elements = 4 bytes of data */
    for (int c = threadIdx.x; c < rows * chunks; c += blockDim.x) {
        int r = c / chunks, k = (c % chunks) * 8;
        uint32_t q = *(const uint32_t *)(data + r * pitch + k / 2);
        __half s = __ushort_as_half(lut_scale[sc[r * SC_SLOT + k / 16]]);
        __half2 s2 = __halves2half2(s, s);
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __half2 v = __hmul2(*(const __half2 *)&lut_pair[(q >> (8 * i)) & 0xFF], s2);
            w[i] = *(uint32_t *)&v;
        }
        *(uint4 *)(out + r * out_pitch + k) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Kernel modes: bf16 operands straight from the slot (BF16 path); quantized
 * operands converted to bf16 tiles first (NVFP4); E4M3 operands straight from
 * the slot into FP8 MMAs with the block scales applied to fp32 partial sums
 * every SB = 32 (MX) or 128 (FP8-BLOCK) K elements (MXFP8, W4A8 after an
 * exact E2M1 -> E4M3 conversion of the weights, FP8-BLOCK). */
enum { MODE_BF16 = 0, MODE_CVT = 1, MODE_FP8 = 2 };

/* MMAs of K elements [k0, k0 + KS) for this warp. Operands are row-major
 * bytes with the given pitches; FP8 takes 32 elements (32 bytes) per MMA,
 * bf16 16 elements (32 bytes). */
enum { MMA_BF16 = 0, MMA_F16 = 1, MMA_E4M3 = 2 };

template <int MI, int NF, int KIND, int KS>
__device__ __forceinline__ void mma_span(const uint8_t *a, int a_pitch, const uint8_t *b, int b_pitch, int k0,
                                         int wm, int wn, int lane, float (*acc)[NF][4])
{
    constexpr int WN = NF * 8, EB = KIND == MMA_E4M3 ? 1 : 2; /* bytes per element */
#pragma unroll
    for (int kk = 0; kk < KS; kk += 32 / EB) {
        int kb = (k0 + kk) * EB; /* byte offset of this 32-byte column */
        uint32_t af[MI][4], bf[NF][2];
#pragma unroll
        for (int i = 0; i < MI; i++)
            ldmatrix_x4(af[i], a + (wm * 16 * MI + i * 16 + (lane & 15)) * a_pitch + kb + (lane >> 4) * 16);
#pragma unroll
        for (int j = 0; j < NF; j++)
            ldmatrix_x2(bf[j], b + (wn * WN + j * 8 + (lane & 7)) * b_pitch + kb + ((lane >> 3) & 1) * 16);
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < NF; j++) {
                if (KIND == MMA_E4M3) mma_e4m3(acc[i][j], af[i], bf[j]);
                else if (KIND == MMA_F16) mma_f16(acc[i][j], af[i], bf[j]);
                else mma_bf16(acc[i][j], af[i], bf[j]);
            }
    }
}

/* Block scale of row r in a slot's scale area: MX byte `idx`, or the fp32 of
 * an FP8-BLOCK row. */
template <int SB>
__device__ __forceinline__ float slot_scale(const uint8_t *sc, int r, int idx)
{
    if (SB == 32) return moe_ep_ue8m0_to_f32(sc[r * SC_SLOT + idx]);
    return *(const float *)(sc + r * SC_SLOT);
}

/* acc += part * (row scale * column scale) for scale block idx; part = 0. */
template <int MI, int NF, int SB>
__device__ __forceinline__ void flush_scaled(const uint8_t *a_sc, const uint8_t *b_sc, int idx, int rows_valid,
                                             int wm, int wn, int lane, float (*acc)[NF][4], float (*part)[NF][4])
{
    constexpr int WN = NF * 8;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int m = wm * 16 * MI + i * 16 + (lane >> 2) + 8 * h;
            float sa = m < rows_valid ? slot_scale<SB>(a_sc, m, idx) : 0.0f;
#pragma unroll
            for (int j = 0; j < NF; j++)
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    float sw = slot_scale<SB>(b_sc, wn * WN + j * 8 + (lane & 3) * 2 + q, idx);
                    acc[i][j][2 * h + q] = fmaf(part[i][j][2 * h + q], sa * sw, acc[i][j][2 * h + q]);
                    part[i][j][2 * h + q] = 0.0f;
                }
        }
}

/* W4A8: the slot's MXFP4 weight rows (BK/2 bytes) -> E4M3 bytes in Bq
 * (exact: every E2M1 value is an E4M3 value), one byte pair per lookup. */
template <int BN, int BK>
__device__ __forceinline__ void convert_fp4_to_e4m3(const uint8_t *b_slot, int b_pitch, uint8_t *Bq,
                                                    const uint16_t *lut)
{
    constexpr int CH = BK / 16; /* 8-byte source chunks per row */
    for (int c = threadIdx.x; c < BN * CH; c += blockDim.x) {
        int n = c / CH, j = c % CH;
        uint2 v = *(const uint2 *)(b_slot + n * b_pitch + 8 * j);
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t src = i < 2 ? v.x : v.y, sh = 16 * (i & 1);
            w[i] = lut[(src >> sh) & 0xFF] | ((uint32_t)lut[(src >> (sh + 8)) & 0xFF] << 16);
        }
        *(uint4 *)(Bq + n * (BK + 16) + 16 * j) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Warps: WM (M) x BN/32 (N), each 16*MI rows x 32 columns (MI x 4 MMA tiles). */
template <int BM>
struct warp_shape {
    static constexpr int MI = BM >= 32 ? 2 : 1, WM = BM / (16 * MI);
};

template <int BM, int BN>
constexpr int gemm_threads() { return warp_shape<BM>::WM * (BN / 32) * 32; }


/* Dynamic shared memory of a gemm_tile<BM, BN, MODE> kernel: the K-step ring
 * plus the conversion tables, or the epilogue's C tile (aliases the ring) if
 * larger. gemm_tables_offset: where the tables start. */
template <int BM, int BN, int MODE>
__host__ __device__ __forceinline__ size_t gemm_tables_offset(moe_ep_format_t af, moe_ep_format_t bf)
{
    constexpr int BK = MODE == MODE_BF16 ? 64 : 128;
    return (size_t)STAGES * make_layout<BM, BN, MODE != MODE_CVT>(af, bf, BK).slot_bytes;
}

template <int BM, int BN, int MODE>
__host__ __device__ __forceinline__ size_t gemm_smem_bytes(moe_ep_format_t af, moe_ep_format_t bf)
{
    constexpr int BK = MODE == MODE_BF16 ? 64 : 128;
    size_t extra = MODE == MODE_CVT ? sizeof(__half) * (BK + KPAD) * (BM + BN) + 256 * 6
                   : bf == MOE_EP_FORMAT_MXFP4 ? (size_t)BN * (BK + 16) + 512 : 0;
    size_t smem = gemm_tables_offset<BM, BN, MODE>(af, bf) + extra;
    size_t smem_c = sizeof(float) * BM * (BN + 4);
    return smem < smem_c ? smem_c : smem;
}

/* The lookup tables of the NVFP4 (MODE_CVT) and W4A8 (FP4 weights) modes, once
 * per kernel; the caller synchronises before the first tile. */
template <int BM, int BN, int MODE>
__device__ __forceinline__ void gemm_tables_init(const gemm_args &g, uint8_t *smem)
{
    constexpr int BK = MODE == MODE_BF16 ? 64 : 128;
    typedef __half Row[BK + KPAD];
    uint8_t *extra = smem + gemm_tables_offset<BM, BN, MODE>(g.a_fmt, g.b_fmt);
    if (MODE == MODE_FP8 && g.b_fmt == MOE_EP_FORMAT_MXFP4) {
        uint16_t *lut = (uint16_t *)(extra + BN * (BK + 16));
        for (int v = threadIdx.x; v < 256; v += blockDim.x)
            lut[v] = (uint16_t)(moe_ep_e4m3_from_f32(moe_ep_e2m1_to_f32((uint8_t)(v & 15))) |
                                (moe_ep_e4m3_from_f32(moe_ep_e2m1_to_f32((uint8_t)(v >> 4))) << 8));
    }
    if (MODE == MODE_CVT) {
        uint32_t *lut_pair = (uint32_t *)((Row *)extra + BM + BN);
        uint16_t *lut_scale = (uint16_t *)(lut_pair + 256);
        for (int v = threadIdx.x; v < 256; v += blockDim.x) {
            __half2 h = __floats2half2_rn(moe_ep_e2m1_to_f32((uint8_t)(v & 15)), moe_ep_e2m1_to_f32((uint8_t)(v >> 4)));
            lut_pair[v] = *(uint32_t *)&h;
            lut_scale[v] = __half_as_ushort(__float2half_rn(moe_ep_e4m3_to_f32((uint8_t)v)));
        }
    }
}

/* One output tile: rows [row0, row0 + rows_valid) of expert e (rows_valid <=
 * BM; the rest zero-filled and not stored), columns [n0, n0 + BN) of the GEMM,
 * with the fused epilogue. Every thread of the block calls it (blockDim.x ==
 * gemm_threads<BM, BN>()); it ends synchronised, shared memory free again.
 * SLICED (MX FP8 modes): partial sums one 16-row slice at a time (fewer
 * registers); the tile's bits do not depend on it. */
template <int BM, int BN, int MODE, int SB, bool SLICED = false>
__device__ __forceinline__ void gemm_tile(const gemm_args &g, uint8_t *smem, int e, int64_t row0, int rows_valid, int n0)
{
    constexpr int BK = MODE == MODE_BF16 ? 64 : 128, NF = 4, MI = warp_shape<BM>::MI, WM = warp_shape<BM>::WM;
    constexpr bool DIRECT = MODE != MODE_CVT;
    typedef __half Row[BK + KPAD];
    const stage_layout L = make_layout<BM, BN, DIRECT>(g.a_fmt, g.b_fmt, BK);
    uint8_t *extra = smem + STAGES * L.slot_bytes;
    Row *As = (Row *)extra, *Bs = As + BM;              /* MODE_CVT: fp16 tiles */
    const uint32_t *lut_pair = (const uint32_t *)(Bs + BN); /* MODE_CVT tables */
    const uint16_t *lut_scale = (const uint16_t *)(lut_pair + 256);
    uint8_t *Bq = extra;                                /* MODE_FP8 with FP4 weights */
    const uint16_t *lut = (const uint16_t *)(extra + BN * (BK + 16));
    const bool b_fp4 = MODE == MODE_FP8 && g.b_fmt == MOE_EP_FORMAT_MXFP4;
    float(*C)[BN + 4] = (float(*)[BN + 4])smem; /* reused after the main loop */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp % WM, wn = warp / WM, n_k = g.K / BK;
    int64_t b_rows = (int64_t)e * g.N + n0;
    const uint8_t *bw = g.b + b_rows * moe_ep_row_data_bytes(g.b_fmt, g.K);
    const uint8_t *bws = g.b_scales + b_rows * moe_ep_row_scale_bytes(g.b_fmt, g.K);
    const uint8_t *aw = g.a + row0 * moe_ep_row_data_bytes(g.a_fmt, g.K), *aws = g.a_scales + row0 * g.a_scale_stride;
    /* the epilogue's place of the tile, kept in shared memory across the
     * main loop, not in registers (the 64 x 256 FP8 kernels, 128 registers a
     * thread, spilled otherwise) */
    __shared__ struct { int64_t row0; int rows_valid, n0; } tile_place;
    if (threadIdx.x == 0) tile_place.row0 = row0, tile_place.rows_valid = rows_valid, tile_place.n0 = n0;
    float acc[MI][NF][4], part[MI][NF][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NF; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = part[i][j][q] = 0.0f;
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < n_k) issue_stage<BM, BN>(g, L, smem + s * L.slot_bytes, aw, aws, rows_valid, bw, bws, s * BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < n_k; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const uint8_t *slot = smem + (kt % STAGES) * L.slot_bytes;
        /* a_sc: this step's A scales, (kt * L.a_sc) % 16 bytes into the copied 16-byte window */
        const uint8_t *b_slot = slot + BM * L.a_pitch, *a_sc = b_slot + BN * L.b_pitch, *b_sc = a_sc + BM * SC_SLOT;
        if (MODE == MODE_CVT) {
            nvfp4_rows_to_f16(slot, L.a_pitch, a_sc + ((kt * L.a_sc) & 15), BM, BK, &As[0][0], BK + KPAD, lut_pair, lut_scale);
            nvfp4_rows_to_f16(b_slot, L.b_pitch, b_sc, BN, BK, &Bs[0][0], BK + KPAD, lut_pair, lut_scale);
        }
        if (b_fp4) convert_fp4_to_e4m3<BN, BK>(b_slot, L.b_pitch, Bq, lut);
        int next = kt + STAGES - 1;
        if (next < n_k)
            issue_stage<BM, BN>(g, L, smem + (next % STAGES) * L.slot_bytes, aw, aws, rows_valid, bw, bws, next * BK);
        cp_async_commit();
        if (MODE == MODE_CVT || b_fp4) __syncthreads();
        if (MODE == MODE_BF16) {
            mma_span<MI, NF, MMA_BF16, BK>(slot, L.a_pitch, b_slot, L.b_pitch, 0, wm, wn, lane, acc);
        } else if (MODE == MODE_CVT) {
            mma_span<MI, NF, MMA_F16, BK>((const uint8_t *)As, 2 * (BK + KPAD), (const uint8_t *)Bs, 2 * (BK + KPAD), 0,
                                          wm, wn, lane, acc);
        } else if (SB == 128) { /* FP8-BLOCK (E4M3 weights) */
#pragma unroll 1
            for (int k0 = 0; k0 < BK; k0 += 32)
                mma_span<MI, NF, MMA_E4M3, 32>(slot, L.a_pitch, b_slot, L.b_pitch, k0, wm, wn, lane, part);
            flush_scaled<MI, NF, SB>(a_sc + ((kt * L.a_sc) & 15), b_sc, 0, rows_valid, wm, wn, lane, acc, part);
        } else if (!SLICED) { /* MX scales */
            const uint8_t *bp = b_fp4 ? Bq : b_slot;
            int bpitch = b_fp4 ? BK + 16 : L.b_pitch;
#pragma unroll 1
            for (int k0 = 0; k0 < BK; k0 += 32) {
                mma_span<MI, NF, MMA_E4M3, 32>(slot, L.a_pitch, bp, bpitch, k0, wm, wn, lane, part);
                flush_scaled<MI, NF, SB>(a_sc + ((kt * L.a_sc) & 15), b_sc, k0 / 32, rows_valid, wm, wn, lane, acc, part);
            }
        } else { /* MX scales, one 16-row slice at a time: only its partial sums live
                    (fewer registers, more B fragment loads: the split kernel is faster without) */
            const uint8_t *bp = b_fp4 ? Bq : b_slot, *asc = a_sc + ((kt * L.a_sc) & 15);
            int bpitch = b_fp4 ? BK + 16 : L.b_pitch;
#pragma unroll
            for (int i = 0; i < MI; i++) {
                int r0 = wm * 16 * MI + i * 16; /* the slice's first row in the tile */
#pragma unroll 1
                for (int k0 = 0; k0 < BK; k0 += 32) {
                    mma_span<1, NF, MMA_E4M3, 32>(slot + r0 * L.a_pitch, L.a_pitch, bp, bpitch, k0, 0, wn, lane, part + i);
                    flush_scaled<1, NF, SB>(asc + r0 * SC_SLOT, b_sc, k0 / 32, rows_valid - r0, 0, wn, lane, acc + i,
                                            part + i);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float scale = 1.0f; /* NVFP4: undo the global scales of both operands */
    if (g.a_fmt == MOE_EP_FORMAT_NVFP4) scale = __fdiv_rn(1.0f, __fmul_rn(g.a_gs, g.b_gs[e]));
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NF; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                int m = wm * 16 * MI + i * 16 + (lane >> 2) + 8 * (q >> 1), n = wn * 32 + j * 8 + (lane & 3) * 2 + (q & 1);
                C[m][n] = __fmul_rn(acc[i][j][q], scale);
            }
    __syncthreads();
    epilogue<BM, BN>(g, C, tile_place.row0, tile_place.rows_valid, tile_place.n0, threadIdx.x, blockDim.x);
    __syncthreads(); /* C aliases the slots the next tile fills */
}

#endif
