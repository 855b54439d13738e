/* Communication between the ranks of an NCCL group (one rank per process and
 * GPU): the group's communicator and its watchdog, the collective check of
 * layer configurations, symmetric heaps (NCCL windows with load/store peer
 * pointers), and the split backend's token and output exchanges.
 * Design and memory: docs/design.md, "Communication across GPUs".
 * Emulated groups (group->comm == NULL) never reach NCCL: every function here
 * is a no-op or a success for them. Builds without NCCL compile stubs. */
#ifndef MOE_EP_COMM_H
#define MOE_EP_COMM_H

#include "core/objects.h"
#include "kernels/split_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device error kinds of the communication layer, beside split_kernels.h's. */
#define MOE_EP_DEVERR_PEER 4u /* detail: a rank whose own error word was set */
/* MOE_EP_DEVERR_TIMEOUT details of NCCL waits (the watchdog aborted the
 * communicator): which exchange was in flight. */
#define MOE_EP_WAIT_NCCL_TOKENS 0x800001u  /* token all-gather of a forward */
#define MOE_EP_WAIT_NCCL_OUTPUTS 0x800002u /* output all-to-all of a forward */
#define MOE_EP_WAIT_NCCL_HOST 0x800003u    /* a host-side collective (layer creation, ...) */

/* Largest NCCL group the split backend takes (ranks of one launch). */
#define MOE_EP_NCCL_SPLIT_MAX_RANKS MOE_EP_GPU_MAX_RANKS

/* Every rank's (E, K, H, I, max_tokens_per_rank, path, wire, backend) are
 * compared through an all-gather; if they differ, or a rank passed a NULL or
 * wrongly sized config, every rank returns MOE_EP_ERROR_INVALID_ARGUMENT
 * naming the first differing field and rank. Also checks what an NCCL group
 * supports (split backend; world size and row limits) and remembers the last
 * config that passed, so a second call with it needs no communication.
 * Collective on NCCL groups: call it on every rank before any local check that
 * could return early (a rank that never calls it makes the others time out).
 * MOE_EP_SUCCESS at once for emulated groups. */
moe_ep_status_t moe_ep_group_check_config(moe_ep_group_t group, const moe_ep_layer_config_t *config);

/* Device bytes of a split layer on an NCCL group (weights of the local experts,
 * rows for the tokens of every rank, exchange buffers); 0 for emulated groups. */
size_t moe_ep_comm_layer_device_bytes(moe_ep_group_t group, const moe_ep_layer_config_t *config);

/* Ranks whose tokens one expert stage sees: the world size of an NCCL group,
 * the local ranks of an emulated one. */
int moe_ep_comm_source_ranks(moe_ep_group_t group);

/* Called by moe_ep_group_destroy: stops the watchdog, destroys the
 * communicator (nothing for emulated groups). */
void moe_ep_comm_destroy(moe_ep_group_t group);

/* Host-side state of the group: MOE_EP_ERROR_TIMEOUT once the watchdog
 * aborted the communicator (the group is then unusable). */
moe_ep_status_t moe_ep_comm_usable(moe_ep_group_t group);

/* ---- symmetric heaps ---------------------------------------------------- */

/* One allocation of the same size on every rank. Allocated with ncclMemAlloc
 * and registered as a symmetric NCCL window (else cudaMalloc). peers[] holds
 * a plain pointer to each rank's heap reachable by load/store; so far only
 * peers[rank] (group_nccl.c's heap_peers says why). */
typedef struct moe_ep_heap {
    uint8_t *base;   /* this rank's heap, device memory, 4096-byte aligned */
    size_t bytes;
    void *window;    /* ncclWindow_t, NULL when not registered */
    void **peers;    /* device array [world_size] of peer heap pointers */
    int lsa_size;    /* ranks in this rank's load/store team, itself included */
    int nccl_alloc;  /* base came from ncclMemAlloc */
    void **peer_host; /* mapped heaps: host copy of peers[] (IPC mappings to close), else NULL */
} moe_ep_heap_t;

/* Collective. bytes is rounded up to 4096. Zero-filled. */
moe_ep_status_t moe_ep_heap_create(moe_ep_group_t group, size_t bytes, moe_ep_heap_t *heap);
/* Collective. A heap in cudaMalloc memory whose peers[] holds every rank's
 * heap, opened here through CUDA IPC (load/store and atomics over NVLink);
 * MOE_EP_ERROR_UNSUPPORTED on every rank when some rank cannot map some peer. */
moe_ep_status_t moe_ep_heap_create_mapped(moe_ep_group_t group, size_t bytes, moe_ep_heap_t *heap);
/* Collective (the window is deregistered). Safe on a zeroed heap. */
void moe_ep_heap_destroy(moe_ep_group_t group, moe_ep_heap_t *heap);

/* ---- split backend exchanges -------------------------------------------- */

typedef struct moe_ep_xchg moe_ep_xchg_t;

/* Buffers of a split layer on an NCCL group; collective (heap registration,
 * and one warm-up of both exchanges so that NCCL connects its peers here and
 * never blocks the host in forward). Checks the config first. */
moe_ep_status_t moe_ep_xchg_create(moe_ep_group_t group, const moe_ep_layer_config_t *config,
                                   moe_ep_xchg_t **xchg);
void moe_ep_xchg_destroy(moe_ep_group_t group, moe_ep_xchg_t *xchg);
size_t moe_ep_xchg_device_bytes(const moe_ep_layer_config_t *config, int world_size);

/* Forward, first half: this rank's T, topk ids and x go to every rank (one
 * all-gather of fixed-size token blocks); then each rank keeps the slots of its
 * own experts. Fills *io with every source rank's (x, ids, T) for
 * moe_ep_launch_plan and moe_ep_launch_dispatch with dims.R = world size. */
moe_ep_status_t moe_ep_xchg_tokens(moe_ep_group_t group, moe_ep_xchg_t *xchg,
                                   const moe_ep_split_bufs_t *bufs,
                                   const moe_ep_forward_args_t *args, moe_ep_split_io_t *io,
                                   moe_ep_stream_t stream);
/* Second half, after the expert stage: each expert output row goes back to
 * its token's rank (all-to-all of fixed-capacity blocks, a row at slot
 * t * K + k), then the usual combine over k in slot order into args->out. */
moe_ep_status_t moe_ep_xchg_outputs(moe_ep_group_t group, moe_ep_xchg_t *xchg,
                                    const moe_ep_split_dims_t *dims,
                                    const moe_ep_split_bufs_t *bufs,
                                    const moe_ep_forward_args_t *args, moe_ep_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
