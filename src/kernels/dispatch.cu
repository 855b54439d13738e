/* Quantize + dispatch: a grid-stride loop over (rank, token), one token per
 * block at a time. The token is quantized once into the path's activation
 * format and written to each of its rows (one per used slot); in an emulated
 * group that write is the device copy from the token's rank into the expert
 * owner's receive rows. The grid is sized from the SMs, not from T_max, so a
 * decode batch does not pay for T_max blocks that find no token. */
#include "kernels/rows.cuh"

#define DISPATCH_THREADS 256

/* AF: the activation format, a compile-time constant so that the encoder's
 * format branches fold (measured in the mega kernel's dispatch: the run-time
 * format made its MXFP8 encoding 2x slower than the copy bound). */
template <int AF>
__global__ void __launch_bounds__(DISPATCH_THREADS) dispatch_tokens(moe_ep_split_dims_t d, moe_ep_split_bufs_t b,
                                                                    moe_ep_split_io_t io)
{
    __shared__ int32_t rows[64]; /* K <= 64 (layer.c) */
    if (moe_ep_dev_failed(b.error)) return;
    const moe_ep_format_t f = (moe_ep_format_t)AF;
    for (int64_t i = blockIdx.x; i < (int64_t)d.R * d.T_max; i += gridDim.x) {
        int r = (int)(i / d.T_max), t = (int)(i % d.T_max);
        if (t >= b.tokens[r]) continue; /* block-uniform */
        int64_t s = ((int64_t)r * d.T_max + t) * d.K;
        __syncthreads(); /* the previous token's rows are read */
        for (int k = threadIdx.x; k < d.K; k += blockDim.x) {
            int32_t pos = b.slot_pos[s + k];
            int32_t row = pos < 0 ? -1 : b.expert_offset[io.ids[r][(int64_t)t * d.K + k] - d.first_expert] + pos;
            rows[k] = row;
            b.row_of_slot[s + k] = row;
        }
        __syncthreads();
        dispatch_row(f, io.x[r] + (int64_t)t * d.H, d.H, d.fc1_scale, b.xq, b.xq_scales, rows, d.K, true,
                     threadIdx.x, blockDim.x);
    }
}

extern "C" moe_ep_status_t moe_ep_launch_dispatch(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                  const moe_ep_split_io_t *io, moe_ep_stream_t stream)
{
    unsigned grid = moe_ep_stride_grid((int64_t)d->R * d->T_max, d->num_sms, MOE_EP_TOKEN_BLOCKS_PER_SM);
    cudaStream_t s = (cudaStream_t)stream;
    switch (moe_ep_path_act_format(d->path)) {
    case MOE_EP_FORMAT_BF16: dispatch_tokens<MOE_EP_FORMAT_BF16><<<grid, DISPATCH_THREADS, 0, s>>>(*d, *b, *io); break;
    case MOE_EP_FORMAT_MXFP8: dispatch_tokens<MOE_EP_FORMAT_MXFP8><<<grid, DISPATCH_THREADS, 0, s>>>(*d, *b, *io); break;
    case MOE_EP_FORMAT_NVFP4: dispatch_tokens<MOE_EP_FORMAT_NVFP4><<<grid, DISPATCH_THREADS, 0, s>>>(*d, *b, *io); break;
    default: dispatch_tokens<MOE_EP_FORMAT_FP8_BLOCK><<<grid, DISPATCH_THREADS, 0, s>>>(*d, *b, *io); break;
    }
    return moe_ep_launch_check("dispatch_tokens");
}
