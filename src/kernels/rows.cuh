/* Row codecs shared by the split kernels (dispatch.cu, combine.cu) and the
 * mega kernel: encoding activation rows, decoding wire rows. Rows written by
 * other blocks of a running kernel are read through L2 (__ldcg). */
#ifndef MOE_EP_ROWS_CUH
#define MOE_EP_ROWS_CUH

#include "kernels/gpu_common.cuh"

/* Encodes one block of the activation format from n fp32 values and writes
 * it at element offset c of row `row` of (data, scales). */
__device__ __forceinline__ void store_block(moe_ep_format_t f, const float *v, int64_t n, int64_t c,
                                            float S, uint8_t *data, uint8_t *scales, int64_t row)
{
    uint8_t *d = data + row * moe_ep_row_data_bytes(f, n);
    uint8_t *s = scales + row * moe_ep_act_scale_stride(f, n);
    if (f == MOE_EP_FORMAT_BF16) {
        ((uint32_t *)(d + 2 * c))[0] = moe_ep_pack_bf16x2(v[0], v[1]);
    } else if (f == MOE_EP_FORMAT_MXFP8) {
        s[c / 32] = moe_ep_mxfp8_block_encode(v, d + c);
    } else if (f == MOE_EP_FORMAT_FP8_BLOCK) {
        ((float *)s)[c / 128] = moe_ep_fp8_block_encode(v, d + c);
    } else { /* NVFP4 */
        uint8_t q[16];
        s[c / 16] = moe_ep_nvfp4_block_encode(v, S, q);
        for (int i = 0; i < 8; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
    }
}

/* Element h of wire row `row` (H elements) of output rows (y, ys). */
__device__ __forceinline__ float wire_value(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys,
                                            int64_t H, int64_t row, int64_t h)
{
    if (wire == MOE_EP_WIRE_BF16) return moe_ep_bf16_to_f32(__ldcg((const unsigned short *)y + row * H + h));
    if (wire == MOE_EP_WIRE_MXFP8)
        return moe_ep_mx8_value(__ldcg(y + row * H + h), __ldcg(ys + row * (H / 32) + h / 32));
    uint8_t q = (uint8_t)((__ldcg(y + row * (H / 2) + h / 2) >> (4 * (h & 1))) & 15u);
    return moe_ep_fp4_wire_value(q, __ldcg((const unsigned short *)ys + row * (H / 16) + h / 16));
}

/* out[h] = bf16 of the sum over slots k = 0..K-1 (in that order) with
 * rows[k] >= 0 of fmaf(w[k], y[rows[k]][h], acc), for h = tid, tid + nthreads, ... */
__device__ __forceinline__ void combine_row(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys, int H, int K,
                                            const int32_t *rows, const float *w, uint16_t *out, int tid, int nthreads)
{
    for (int h = tid; h < H; h += nthreads) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            if (rows[k] >= 0) acc = fmaf(w[k], wire_value(wire, y, ys, H, rows[k], h), acc);
        out[h] = moe_ep_bf16_from_f32(acc);
    }
}

#endif
