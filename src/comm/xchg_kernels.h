/* Kernels of the split backend's NCCL exchanges (xchg_kernels.cu), C-callable.
 *
 * Token block of one rank (fixed size, the unit of the token all-gather):
 *   [0, 16)        header: int32 T, uint32 the sender's device error word
 *   [ids_off, ..)  [T_max][K] int32 topk ids (global, -1 unused)
 *   [x_off, ..)    [T_max][H] bf16 tokens as the caller gave them
 * Only the first T rows are meaningful. The receiver rewrites the ids in place
 * to its own experts' ids or -1 after the exchange.
 *
 * Output rows (wire format, data and scales in separate arrays): the send
 * block for rank s is [cap = T_max * K] rows, slot (t, k) of rank s at row
 * t * K + k; only the slots whose expert lives here are written. The receive
 * buffer is [R][cap] rows: rank q's block at q * cap.
 *
 * progress: host-mapped words the watchdog reads (comm.h):
 *   [0] exchanges entered, [1] exchanges left, [2] which exchange (a
 *   MOE_EP_WAIT_NCCL_* detail), [3] abort flag set by the host watchdog. */
#ifndef MOE_EP_XCHG_KERNELS_H
#define MOE_EP_XCHG_KERNELS_H

#include "kernels/split_kernels.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moe_ep_xchg_dev {
    int R, rank, K, H, T_max;
    int experts_per_rank, num_experts_global;
    int64_t block_bytes, ids_off, x_off; /* token block layout, bytes */
    int64_t cap;                         /* rows per peer block: T_max * K */
    int64_t y_data, y_scale;             /* bytes per wire row: data, scales */
    uint8_t *blocks;                     /* [R][block_bytes] */
    uint8_t *ysend, *ysend_scales;       /* [R][cap] wire rows */
    uint8_t *yrecv, *yrecv_scales;       /* [R][cap] wire rows */
    int32_t *tokens_in;                  /* [R] T of every rank, this forward */
    int32_t *tokens_own;                 /* [1] T of this rank */
    int32_t *combine_rows;               /* [cap] row in yrecv of slot t * K + k, -1 */
    uint32_t *seq;                       /* device counter of exchanges entered */
    uint32_t *progress;                  /* device address of the host-mapped words */
    uint32_t *error;                     /* the group's device error word */
} moe_ep_xchg_dev_t;

/* Before the token all-gather: this rank's T (t_device[0] when t_device, else
 * t_host; range-checked), ids (checked) and x into its block and header. */
moe_ep_status_t moe_ep_launch_xchg_pack(const moe_ep_xchg_dev_t *x, const uint16_t *tokens,
                                        const int32_t *ids, const int32_t *t_device, int t_host,
                                        moe_ep_stream_t stream);
/* After it: abort check, every rank's T into tokens_in, a sender's error
 * becomes MOE_EP_DEVERR_PEER here, ids rewritten to this rank's experts. */
moe_ep_status_t moe_ep_launch_xchg_absorb(const moe_ep_xchg_dev_t *x, moe_ep_stream_t stream);
/* Before the output all-to-all: wire rows of every source's slots into the
 * send blocks (b: the split buffers after the expert stage). */
moe_ep_status_t moe_ep_launch_xchg_pack_outputs(const moe_ep_xchg_dev_t *x,
                                                const moe_ep_split_bufs_t *b,
                                                moe_ep_stream_t stream);
/* After it: abort check, combine_rows from this rank's ids. */
moe_ep_status_t moe_ep_launch_xchg_unpack_outputs(const moe_ep_xchg_dev_t *x, const int32_t *ids,
                                                  moe_ep_stream_t stream);


#ifdef __cplusplus
}
#endif
#endif
