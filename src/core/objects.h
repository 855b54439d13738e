/* The group and layer objects behind the opaque handles. */
#ifndef MOE_EP_OBJECTS_H
#define MOE_EP_OBJECTS_H

#include "core/internal.h"
#include "tune/knob_cache.h"

struct moe_ep_group_s {
    int world_size;  /* R */
    int device;      /* CUDA device ordinal, -1 = CPU only */
    int first_rank;  /* first rank this process drives */
    int local_ranks; /* ranks this process drives (R when emulated) */
    int emulated;
    /* GPU groups: the device error word (see moe_ep_group_get_async_error). */
    uint32_t *error_dev;         /* device memory, written by kernels */
    volatile uint32_t *error_host; /* host-mapped copy, read without a sync */
    uint32_t *error_mapped_dev;  /* the device's address of error_host */
    /* NCCL groups: communicator, watchdog, symmetric heaps (src/comm/comm.h);
     * NULL for emulated groups. */
    struct moe_ep_comm *comm;
};

/* Bytes of one expert's weights in the path's weight format (host layout,
 * as moe_ep_expert_weights_t describes it). */
typedef struct moe_ep_expert_bytes {
    int64_t w13_data, w13_scales; /* [2I][H] */
    int64_t w2_data, w2_scales;   /* [H][I]  */
} moe_ep_expert_bytes_t;

struct moe_ep_ref_state;
struct moe_ep_split_state;
struct moe_ep_mega_state;

/* Token buckets of the knob tables: 2^0 .. 2^20 (max_tokens_per_rank <= 2^20). */
#define MOE_EP_KNOB_BUCKETS 21

/* What a layer knows about one token bucket (knobs.c); 0 fields = none. */
typedef struct moe_ep_knob_slot {
    moe_ep_knobs_t cached; /* from the knob cache file */
    moe_ep_knobs_t tuned;  /* timed in this layer (config.autotune) */
    int tune_tried;        /* autotuning ran for this bucket (it runs once) */
} moe_ep_knob_slot_t;

struct moe_ep_layer_s {
    moe_ep_group_t group;
    moe_ep_layer_config_t cfg;
    int experts_per_rank;   /* E / R */
    int first_expert;       /* first expert owned by this process's ranks */
    int num_local_experts;  /* experts owned by this process's ranks */
    int num_loaded;         /* local experts loaded so far */
    uint8_t *loaded;        /* [num_local_experts] 0/1 */
    moe_ep_format_t weight_format;
    moe_ep_expert_bytes_t expert_bytes;
    struct moe_ep_ref_state *ref;     /* reference backend state */
    /* Kernel knobs (knobs.c). cfg.knobs points at knobs_explicit when set. */
    moe_ep_knobs_t knobs_explicit;    /* config.knobs; 0 fields = not set */
    moe_ep_knobs_t knobs_forced;      /* tools: exact knobs of every forward (size 0: off) */
    int knob_cache_read;              /* the cache file was consulted (or is off) */
    int knob_key_ready;
    moe_ep_knob_key_t knob_key;       /* this layer's key in the cache file */
    moe_ep_knob_slot_t knob_slots[MOE_EP_KNOB_BUCKETS];
    struct moe_ep_split_state *split; /* split backend state */
    struct moe_ep_mega_state *mega;   /* mega backend state (runs on the split state's buffers) */
};

/* Device side of a group (group_device.c). */
moe_ep_status_t moe_ep_group_device_init(moe_ep_group_t group);
void moe_ep_group_device_fini(moe_ep_group_t group);

moe_ep_expert_bytes_t moe_ep_expert_bytes(moe_ep_format_t format, int64_t hidden,
                                          int64_t intermediate);

#endif
