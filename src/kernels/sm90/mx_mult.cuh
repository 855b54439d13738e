/* MX multipliers of the register tile (fp8_rs_tile.cuh): MXFP8 and W4A8 fold
 * each k32 block's UE8M0 scale 2^b into the fp16 operand as 2^-(ref - b),
 * ref the largest byte of the 128-wide K block, and apply 2^ref at the
 * promotion. The activations' multipliers are made per stage by the tile's
 * producer; the weights' are made once at load (weights.cu) as records that
 * one bulk copy per stage puts in shared memory as the consumers read them. */
#ifndef MOE_EP_MX_MULT_CUH
#define MOE_EP_MX_MULT_CUH

#include "kernels/gpu_common.cuh"

/* The 128-block's reference byte: the largest of the four UE8M0 bytes in w. */
__device__ __forceinline__ uint32_t fr_mx_ref(uint32_t w)
{
    return max(max(w & 0xFF, (w >> 8) & 0xFF), max((w >> 16) & 0xFF, w >> 24));
}

/* 2^e (e <= 15) as f16x2: through fp32 (exact) and one rounding to fp16,
 * which keeps the subnormals down to 2^-24 and gives 0 below (2^-25 ties to
 * even); 4 instructions where the fp16 bits took 8 with selects. */
__device__ __forceinline__ uint32_t fr_pow2_f16x2(int e)
{
    float f = __int_as_float(max(e + 127, 0) << 23);
    uint32_t h;
    asm("cvt.rn.f16x2.f32 %0, %1, %1;\n" : "=r"(h) : "f"(f));
    return h;
}

/* The multiplier 2^-(ref - b) of byte b as f16x2 (0 below 2^-24). */
__device__ __forceinline__ uint32_t fr_mx_mult(uint32_t ref, uint32_t b) { return fr_pow2_f16x2((int)b - (int)ref); }

/* W4A8's weights: 2^(14 - (ref - b)), undoing fr_e2m1x2's 2^-14 as well. */
__device__ __forceinline__ uint32_t fr_mx_mult_e2m1(uint32_t ref, uint32_t b) { return fr_pow2_f16x2(14 + (int)b - (int)ref); }

/* The weights' record of one 256-row group and one 128-wide K block,
 * FR_MREC_WORDS 32-bit words (5 KB), at ((row / 256) * (K / 128) + k block)
 * * FR_MREC_WORDS of the matrix's array:
 *   [j * 256 + n], j = 0..3: row n's k32 block j multiplier as f16x2
 *                            (fr_mx_mult, W4A8 fr_mx_mult_e2m1);
 *   [4 * 256 + n]:           2^ref of row n, fp32 bits.
 * 20 bytes per row and 128 K beside the 4 bytes of UE8M0 scales they come
 * from; the tile's producer made them at every stage before (MXFP8 decode
 * 9-12 % of the tile's time, dev/wgmma_lab/rs_tile.cu). */
#define FR_MREC_ROWS 256
#define FR_MREC_WORDS (5 * FR_MREC_ROWS)

/* Row n's words of a record from its scale word w (the four UE8M0 bytes). */
__device__ __forceinline__ void fr_mx_weight_record(uint32_t *rec, int n, uint32_t w, bool e2m1)
{
    const uint32_t ref = fr_mx_ref(w);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t b = (w >> (8 * j)) & 0xFF;
        rec[j * FR_MREC_ROWS + n] = e2m1 ? fr_mx_mult_e2m1(ref, b) : fr_mx_mult(ref, b);
    }
    rec[4 * FR_MREC_ROWS + n] = __float_as_uint(moe_ep_ue8m0_to_f32((uint8_t)ref));
}

/* Item i (of rows x K / 128; the row fastest, so the records' stores are
 * coalesced) of the records of a [rows][K] matrix (rows % 256, K % 128)
 * from its UE8M0 scales ([rows][K / 32] bytes). */
__device__ __forceinline__ void fr_mx_records_item(const uint8_t *scales, int64_t rows, int K, bool e2m1,
                                                   uint32_t *records, int64_t i)
{
    const int64_t kbs = K / 128;
    if (i >= rows * kbs) return;
    const int n = (int)(i % FR_MREC_ROWS);
    const int64_t rest = i / FR_MREC_ROWS, kb = rest % kbs, group = rest / kbs;
    const uint32_t w = *(const uint32_t *)(scales + (group * FR_MREC_ROWS + n) * (K / 32) + 4 * kb);
    fr_mx_weight_record(records + (group * kbs + kb) * FR_MREC_WORDS, n, w, e2m1);
}

#endif
