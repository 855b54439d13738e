/* Quantize + dispatch: one block per (rank, token). The token is quantized
 * once into the path's activation format and written to each of its rows
 * (one per used slot); in an emulated group that write is the device copy
 * from the token's rank into the expert owner's receive rows. */
#include "kernels/gpu_common.cuh"

/* Encodes one block of the activation format from n fp32 values and writes
 * it at element offset c of row `row` of (data, scales). */
__device__ __forceinline__ void store_block(moe_ep_format_t f, const float *v, int64_t n, int64_t c,
                                            float S, uint8_t *data, uint8_t *scales, int64_t row)
{
    uint8_t *d = data + row * moe_ep_row_data_bytes(f, n);
    uint8_t *s = scales + row * moe_ep_row_scale_bytes(f, n);
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

__global__ void dispatch_tokens(moe_ep_split_dims_t d, moe_ep_split_bufs_t b, moe_ep_split_io_t io)
{
    extern __shared__ float xs[]; /* [H] the token in fp32 */
    if (moe_ep_dev_failed(b.error)) return;
    int r = blockIdx.x / d.T_max, t = blockIdx.x % d.T_max;
    if (t >= b.tokens[r]) return;
    const uint16_t *x = io.x[r] + (int64_t)t * d.H;
    for (int i = threadIdx.x; i < d.H; i += blockDim.x) xs[i] = moe_ep_bf16_to_f32(x[i]);
    __syncthreads();
    moe_ep_format_t f = moe_ep_path_act_format(d.path);
    int blk = f == MOE_EP_FORMAT_BF16 ? 2 : moe_ep_format_block(f);
    const int32_t *pos = b.slot_pos + ((int64_t)r * d.T_max + t) * d.K;
    const int32_t *ids = io.ids[r] + (int64_t)t * d.K;
    int32_t *row_of_slot = b.row_of_slot + ((int64_t)r * d.T_max + t) * d.K;
    for (int k = 0; k < d.K; k++) {
        int64_t row = pos[k] < 0 ? -1 : b.expert_offset[ids[k] - d.first_expert] + pos[k];
        if (threadIdx.x == 0) row_of_slot[k] = (int32_t)row;
        if (row < 0) continue;
        for (int c = threadIdx.x * blk; c < d.H; c += blockDim.x * blk)
            store_block(f, xs + c, d.H, c, d.fc1_scale, b.xq, b.xq_scales, row);
    }
}

extern "C" moe_ep_status_t moe_ep_launch_dispatch(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                  const moe_ep_split_io_t *io, moe_ep_stream_t stream)
{
    size_t smem = (size_t)d->H * sizeof(float);
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(dispatch_tokens, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dispatch_tokens<<<(unsigned)(d->R * d->T_max), 128, smem, (cudaStream_t)stream>>>(*d, *b, *io);
    return moe_ep_launch_check("dispatch_tokens");
}
