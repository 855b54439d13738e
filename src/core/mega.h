/* The mega backend (one persistent kernel per forward) as seen from the layer
 * object, the bench tool and the tests. It runs on the split backend's weights
 * and row buffers (created and loaded through core/split.h) plus its own
 * counters. */
#ifndef MOE_EP_MEGA_H
#define MOE_EP_MEGA_H

#include "core/objects.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes of a mega layer on group: the split backend's buffers, the
 * counters, and on NCCL groups the link (heap and row maps). */
size_t moe_ep_mega_device_bytes(moe_ep_group_t group, const moe_ep_layer_config_t *config);
moe_ep_status_t moe_ep_mega_create(moe_ep_layer_t layer);
void moe_ep_mega_destroy(moe_ep_layer_t layer);
moe_ep_status_t moe_ep_mega_forward(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                    moe_ep_stream_t stream);

/* Tests: the tokens of local rank `rank` never arrive (-1: back to normal), so
 * the forward must end in MOE_EP_ERROR_TIMEOUT instead of hanging. */
moe_ep_status_t moe_ep_mega_set_absent_rank(moe_ep_layer_t layer, int rank);

#ifdef __cplusplus
}
#endif
#endif
