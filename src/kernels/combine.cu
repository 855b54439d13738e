/* Combine + reduce: a grid-stride loop over (rank, token), one token per
 * block at a time; out_t = bf16 of the sum over
 * slots k = 0..K-1, in that order, of fmaf(w[t,k], y_tk, acc), y_tk decoded
 * from the wire format (the rounding points of docs/formats.md). */
#include "kernels/rows.cuh"

__global__ void combine_tokens(moe_ep_split_dims_t d, moe_ep_split_bufs_t b, moe_ep_split_io_t io)
{
    if (moe_ep_dev_failed(b.error)) return;
    for (int64_t i = blockIdx.x; i < (int64_t)d.R * d.T_max; i += gridDim.x) {
        int r = (int)(i / d.T_max), t = (int)(i % d.T_max);
        if (t >= b.tokens[r]) continue;
        const int32_t *rows = b.row_of_slot + ((int64_t)r * d.T_max + t) * d.K;
        const float *w = io.weights[r] + (int64_t)t * d.K;
        uint16_t *out = io.out[r] + (int64_t)t * d.H;
        combine_row(d.wire, b.y, b.y_scales, d.H, d.K, rows, w, out, threadIdx.x, blockDim.x);
    }
}

__global__ void publish_error(moe_ep_split_bufs_t b)
{
    *(volatile uint32_t *)b.error_mapped = *(volatile uint32_t *)b.error;
    __threadfence_system();
}

extern "C" moe_ep_status_t moe_ep_launch_combine(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                 const moe_ep_split_io_t *io, moe_ep_stream_t stream)
{
    unsigned grid = moe_ep_stride_grid((int64_t)d->R * d->T_max, d->num_sms, MOE_EP_TOKEN_BLOCKS_PER_SM);
    combine_tokens<<<grid, 256, 0, (cudaStream_t)stream>>>(*d, *b, *io);
    return moe_ep_launch_check("combine_tokens");
}

extern "C" moe_ep_status_t moe_ep_launch_publish_error(const moe_ep_split_bufs_t *b, moe_ep_stream_t stream)
{
    publish_error<<<1, 1, 0, (cudaStream_t)stream>>>(*b);
    return moe_ep_launch_check("publish_error");
}
