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
 * very instructions fr_widen_rows runs on a stage (e4m3x16_to_f16, then
 * fr_mult_chunks by fr_mx_mult), so the tile's sums keep their bits. NVFP4:
 * fr_widen_nv_chunk's (moe_ep_e2m1_word_f16's bits, value x 2^-14, times the
 * scale x 2^7 as fr_store_e4m3x8 stages it); exact in fp16 either way. */
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

/* 16 E4M3 of k32 block scale byte b -> 16 fp16 at dst (two 16-byte chunks). */
__device__ __forceinline__ void fold_chunk(uint4 v, uint32_t ref, uint32_t b, uint4 *dst)
{
    uint4 lo, hi;
    e4m3x16_to_f16(v, lo, hi);
    fr_mult_chunks(lo, hi, fr_mx_mult(ref, b));
    dst[0] = lo, dst[1] = hi;
}

/* NVFP4: 32 E2M1 (16 bytes) of k16 blocks with E4M3 scale bytes sc (block
 * 2 c in the low byte, 2 c + 1 above) -> 32 fp16 at dst (four 16-byte chunks). */
__device__ __forceinline__ void fold_chunk_nv(uint4 v, uint32_t sc, uint4 *dst)
{
    const uint32_t s2 = fr_hmul2(fr_e4m3x2<false>(sc), FR_F16_2P7); /* both blocks' scales x 2^7, f16x2 */
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int u = 0; u < 4; u++) { /* elements 8 u .. 8 u + 7, block u / 2 */
        const uint32_t h = u < 2 ? s2 & 0xFFFFu : s2 >> 16;
        dst[u] = fold_nv_word(w[u], h | h << 16);
    }
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

/* A row of K elements: its data bytes (E4M3 K, NVFP4's E2M1 K / 2), its 16-byte data chunks, and the
 * 16-byte fp16 chunks each gives (NVFP4 4: 32 elements; E4M3 2: 16). */
#define FOLD_ROW_BYTES(KIND, K) ((KIND) == FOLD_NV ? (K) / 2 : (K))
#define FOLD_CHUNKS(KIND, K) ((KIND) == FOLD_NV ? (K) / 32 : (K) / 16)
#define FOLD_CHUNK_OUT(KIND) ((KIND) == FOLD_NV ? 4 : 2)

/* Data chunk v of a row into fp16 at dst: MX times 2^-(ref - sc) (sc: its k32 block's UE8M0 byte);
 * NVFP4 with its two k16 blocks' E4M3 bytes sc; E4M3 widened alone. */
template <int KIND>
__device__ __forceinline__ void fold_chunk_of(uint4 v, uint32_t ref, uint32_t sc, uint4 *dst)
{
    if constexpr (KIND == FOLD_NV) {
        fold_chunk_nv(v, sc, dst);
    } else if constexpr (KIND == FOLD_E4M3) {
        uint4 lo, hi;
        e4m3x16_to_f16(v, lo, hi);
        dst[0] = lo, dst[1] = hi;
    } else {
        fold_chunk(v, ref, sc, dst);
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
        for (int ch = lane; ch < FOLD_CHUNKS(KIND, K); ch += 32) {
            const uint32_t b = KIND == FOLD_NV ? *(const uint16_t *)(sc + 2 * ch) : KIND == FOLD_MX ? sc[ch / 2] : 0u;
            fold_chunk_of<KIND>(ld_shared_v4(smem_u32(row + 16 * ch)), ref, b, dst + FOLD_CHUNK_OUT(KIND) * ch);
        }
    }
}

#endif
