/* Quantize + dispatch: one block per (rank, token). The token is quantized
 * once into the path's activation format and written to each of its rows
 * (one per used slot); in an emulated group that write is the device copy
 * from the token's rank into the expert owner's receive rows. */
#include "kernels/rows.cuh"

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
