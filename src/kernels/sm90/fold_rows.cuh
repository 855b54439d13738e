/* Activation rows folded once into fp16 for the 128-row register tile's
 * A16 form (fp8_rs_tile.cuh: fr_produce_a16), which then brings them by TMA
 * instead of widening them again in each of an m tile's N / 256 tiles
 * (kernel lab, fifty-sixth session: MXFP8 GEMM1 -8-11 % at T = 512's shape,
 * -20 % at 8192's; fifty-eighth: NVFP4's tiles without the widening -17-19 %).
 * Split folds a GEMM's rows in a pass (fold_rows.cu), the mega kernel an m
 * tile's in a fold item (mega_fold.cuh) or in its dispatch; all through the
 * steps below, so their bits agree.
 *
 *   MX:        out[r][k] = e4m3(a[r][k]) x 2^-(ref_r - b[r][k / 32])   (fp16, rows a16_pitch apart)
 *   NVFP4:     out[r][k] = e2m1(a[r][k]) x e4m3(s[r][k / 16]) x 2^-7
 *   FP8-BLOCK: out[r][k] = e4m3(a[r][k])   (its fp32 scales per 128 stay with the tile's promotion)
 *
 * MX: ref_r = the row's largest UE8M0 byte (fr_mx_ref), b the k32 block's: the
 * very functions fr_widen_rows runs on a stage (e4m3x8_to_f16, then
 * fr_mult_chunk by fr_mx_mult), so the tile's sums keep their bits. NVFP4:
 * fr_widen_nv_chunk's (moe_ep_e2m1_word_f16's bits, value x 2^-14, times the
 * scale x 2^7 as fr_store_e4m3x8 stages it); exact in fp16 either way. A lane
 * folds a 16-byte fp16 word (fold_word_cvt). */
#ifndef MOE_EP_FOLD_ROWS_CUH
#define MOE_EP_FOLD_ROWS_CUH

#include "kernels/sm90/fp8_rs_tile.cuh"

/* A warp: the row's reference byte from each lane's maximum over its scale words. */
__device__ __forceinline__ uint32_t fold_row_ref(uint32_t m)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = __vmaxu4(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    return fr_mx_ref(m);
}

/* What a fold does to a format's rows (fold_kind_of): MX (MXFP8 activations: MXFP8, W4A8), NVFP4, or
 * E4M3 widened alone (FP8-BLOCK). */
#define FOLD_MX 0
#define FOLD_NV 1
#define FOLD_E4M3 2
__host__ __device__ constexpr int fold_kind_of(int fmt)
{
    return fmt == MOE_EP_FORMAT_NVFP4 ? FOLD_NV : fmt == MOE_EP_FORMAT_FP8_BLOCK ? FOLD_E4M3 : FOLD_MX;
}

/* A row of K elements' data bytes: E4M3 K, NVFP4's E2M1 K / 2. */
#define FOLD_ROW_BYTES(KIND, K) ((KIND) == FOLD_NV ? (K) / 2 : (K))

/* A row's codes and scale byte for fp16 word o (elements 8 o .. 8 o
 * + 7): NVFP4 a 4-byte word of E2M1 and its k16 block's E4M3 byte sc[o / 2];
 * E4M3 8 bytes (MX: its k32 block's UE8M0 byte sc[o / 4]). Loaded apart from
 * fold_word_cvt so that a loop can keep several words' loads in flight. */
struct fold_word_src {
    uint2 w;
    uint32_t s;
};
template <int KIND>
__device__ __forceinline__ fold_word_src fold_word_load(const uint8_t *row, const uint8_t *sc, int o)
{
    fold_word_src r;
    if constexpr (KIND == FOLD_NV) r.w = make_uint2(*(const uint32_t *)(row + 4 * o), 0u), r.s = sc[o / 2];
    else r.w = *(const uint2 *)(row + 8 * o), r.s = KIND == FOLD_MX ? sc[o / 4] : 0u;
    return r;
}

/* fp16 word o of a row from fold_word_load's values: a lane a word, so a
 * warp's stores cover 512 contiguous bytes (a lane a 16-byte chunk of codes,
 * before 2026-12-06, wrote its words 32 or 64 bytes apart: 2.6x slower a
 * block, dev/wgmma_lab/fold_lab.cu, and four-way bank conflicts into shared
 * memory); the same conversions and multipliers, so the same bits. */
template <int KIND>
__device__ __forceinline__ uint4 fold_word_cvt(fold_word_src v, uint32_t ref)
{
    if constexpr (KIND == FOLD_NV) {
        return fold_nv_word_of(v.w.x, v.s);
    } else {
        const uint4 o = e4m3x8_to_f16(v.w.x, v.w.y);
        return KIND == FOLD_MX ? fr_mult_chunk(o, fr_mx_mult(ref, v.s)) : o;
    }
}

/* The block's warps, a warp a row: n rows staged in shared memory (rows of
 * FOLD_ROW_BYTES(KIND, K) at `data`: MX E4M3 rows, their UE8M0 scale rows
 * sc_stride bytes apart at `scales`; NV E2M1 rows, E4M3 scale rows; E4M3 rows,
 * scales unread) folded into out (rows pitch elements apart). Mega's dispatch and fold items. */
template <int KIND>
__device__ __forceinline__ void fold_staged_rows(const uint8_t *data, const uint8_t *scales, int sc_stride, int K, int n,
                                                 uint16_t *out, int64_t pitch)
{
    const int lane = threadIdx.x % 32;
    for (int j = threadIdx.x / 32; j < n; j += blockDim.x / 32) {
        const uint8_t *row = data + (size_t)j * FOLD_ROW_BYTES(KIND, K), *sc = scales + (size_t)j * sc_stride;
        uint4 *dst = (uint4 *)(out + j * pitch);
        uint32_t ref = 0;
        if constexpr (KIND == FOLD_MX) {
            uint32_t m = 0;
            for (int i = lane; i < K / 128; i += 32) m = __vmaxu4(m, *(const uint32_t *)(sc + 4 * i));
            ref = fold_row_ref(m);
        }
#pragma unroll 1 /* unrolled, P3's pull items beside it spilled 48 bytes */
        for (int o = lane; o < K / 8; o += 32) dst[o] = fold_word_cvt<KIND>(fold_word_load<KIND>(row, sc, o), ref);
    }
}

#endif
