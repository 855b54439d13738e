/* The split backend (GPU, separate kernels) as seen from the layer object and
 * from the bench tool. */
#ifndef MOE_EP_SPLIT_H
#define MOE_EP_SPLIT_H

#include "core/objects.h"
#include "kernels/split_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes the split backend allocates for a layer (weights in kernel
 * layout, plan, activation and output rows for the worst-case routing). */
size_t moe_ep_split_device_bytes(const moe_ep_layer_config_t *config, int world_size,
                                 int num_local_experts);
/* The same for rows of source_ranks ranks' tokens. */
size_t moe_ep_split_buffer_bytes(const moe_ep_layer_config_t *config, int source_ranks, int num_local_experts);
moe_ep_status_t moe_ep_split_create(moe_ep_layer_t layer);
void moe_ep_split_destroy(moe_ep_layer_t layer);
moe_ep_status_t moe_ep_split_load_experts(moe_ep_layer_t layer, const moe_ep_expert_weights_t *w,
                                          moe_ep_stream_t stream);
moe_ep_status_t moe_ep_split_forward(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                     moe_ep_stream_t stream);

/* For `moe_ep bench`: enqueue only the expert stage (GEMM1 + SwiGLU + requant +
 * GEMM2 + wire) on the rows dispatched by the last forward. */
moe_ep_status_t moe_ep_split_expert_stage(moe_ep_layer_t layer, moe_ep_stream_t stream);

/* The kernels' view of the layer (the mega backend runs on the split
 * backend's buffers): dims and buffers, and the io of a forward (args may be
 * NULL: io untouched). */
moe_ep_status_t moe_ep_split_kernel_view(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                         moe_ep_split_dims_t *dims, moe_ep_split_bufs_t *bufs,
                                         moe_ep_split_io_t *io);
/* Autotuning: the median time of 5 enqueues of fn (after one warm-up), in
 * microseconds; synchronises the stream. */
typedef moe_ep_status_t (*moe_ep_enqueue_fn)(void *ctx, moe_ep_stream_t stream);
moe_ep_status_t moe_ep_time_median_us(moe_ep_enqueue_fn fn, void *ctx, moe_ep_stream_t stream, double *us);
/* Work enqueued on the stream is being captured (a failed query counts as yes). */
int moe_ep_stream_capturing(moe_ep_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
