/* MX activation rows folded once into fp16 for the 128-row register tile's
 * A16 form (fp8_rs_tile.cuh: fr_produce_a16), which then brings them by TMA
 * instead of widening them again in each of an m tile's N / 256 tiles
 * (kernel lab, fifty-sixth session: MXFP8 GEMM1 -8-11 % at T = 512's shape,
 * -20 % at 8192's). Split folds a GEMM's rows in a pass (fold_rows.cu), the
 * mega kernel an m tile's in a fold item (mega_fold.cuh); both through the
 * two steps below, so their bits agree.
 *
 *   out[r][k] = e4m3(a[r][k]) x 2^-(ref_r - b[r][k / 32])   (fp16, rows a16_pitch apart)
 *
 * ref_r = the row's largest UE8M0 byte (fr_mx_ref), b the k32 block's: the
 * very instructions fr_widen_rows runs on a stage (e4m3x16_to_f16, then
 * fr_mult_chunks by fr_mx_mult), so the tile's sums keep their bits. */
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

/* The block's warps, a warp a row: n rows staged in shared memory (E4M3 rows
 * of K bytes at `data`, their UE8M0 scale rows sc_stride bytes apart at
 * `scales`) folded into out (rows pitch elements apart). Mega's dispatch and
 * fold items. */
__device__ __forceinline__ void fold_staged_rows(const uint8_t *data, const uint8_t *scales, int sc_stride, int K, int n,
                                                 uint16_t *out, int64_t pitch)
{
    const int lane = threadIdx.x % 32;
    for (int j = threadIdx.x / 32; j < n; j += blockDim.x / 32) {
        const uint8_t *row = data + (size_t)j * K, *sc = scales + (size_t)j * sc_stride;
        uint32_t m = 0;
        for (int i = lane; i < K / 128; i += 32) m = __vmaxu4(m, *(const uint32_t *)(sc + 4 * i));
        const uint32_t ref = fold_row_ref(m);
        uint4 *dst = (uint4 *)(out + j * pitch);
        for (int ch = lane; ch < K / 16; ch += 32) /* 16 E4M3 a chunk, k32 block ch / 2 */
            fold_chunk(ld_shared_v4(smem_u32(row + 16 * ch)), ref, sc[ch / 2], dst + 2 * ch);
    }
}

#endif
