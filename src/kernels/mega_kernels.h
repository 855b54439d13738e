/* The mega backend's kernel: the whole forward of every local rank in one
 * persistent launch, on the split backend's buffers (split_kernels.h).
 * Included by C host code and by mega.cu.
 *
 * Work items, in one global order taken from an atomic counter:
 *   count     slots -> per-expert positions (ids checked)         [slot chunks]
 *   dispatch  tokens quantized into their expert rows             [token groups]
 *   gemm1     GEMM1 + SwiGLU + requant tiles (m tile x 256 cols)  [tiles x 2I/256]
 *   gemm2     GEMM2 + wire tiles (m tile x 256 cols)              [tiles x H/256]
 *   combine   weighted sums of a token's rows -> out              [token groups]
 * An item waits only on items before it (counters below), and a block takes
 * an item only while it runs, so the kernel cannot deadlock whatever the grid
 * size or how many blocks are resident. Every wait is bounded. */
#ifndef MOE_EP_MEGA_KERNELS_H
#define MOE_EP_MEGA_KERNELS_H

#include "formats/codec.h"
#include "kernels/split_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters (int32, zero between forwards: the last block out clears them). */
enum {
    MOE_EP_MEGA_CTR_WORK = 0,  /* next item */
    MOE_EP_MEGA_CTR_COUNTED,   /* count items done */
    MOE_EP_MEGA_CTR_EXITED,    /* blocks finished */
    MOE_EP_MEGA_CTR_FIXED = 4  /* then ready[E], gemm1_done[m_tiles], gemm2_done[m_tiles] */
};

/* Which wait timed out: the device error word's detail is (kind << 20) | index. */
enum {
    MOE_EP_MEGA_WAIT_COUNT = 1,  /* the routing counts of every rank (index: 0) */
    MOE_EP_MEGA_WAIT_ROWS = 2,   /* an expert's rows (index: the local expert) */
    MOE_EP_MEGA_WAIT_GEMM1 = 3,  /* GEMM1 tiles of an m tile (index: the m tile) */
    MOE_EP_MEGA_WAIT_GEMM2 = 4   /* GEMM2 tiles of an m tile (index: the m tile) */
};

typedef struct moe_ep_mega_args {
    moe_ep_split_dims_t d;
    moe_ep_split_bufs_t b;
    moe_ep_split_io_t io;
    int32_t *counters;    /* [moe_ep_mega_counter_count(E, max_m_tiles)] */
    int max_m_tiles;      /* capacity of gemm1_done / gemm2_done */
    long long timeout_ns; /* bound of every wait */
    int absent_rank;      /* tests: this local rank's tokens never arrive; -1 = none */
} moe_ep_mega_args_t;

/* M tiles of 16 rows or more over E experts can never exceed this. */
MOE_EP_HD int64_t moe_ep_mega_max_m_tiles(int64_t rows_capacity, int E) { return rows_capacity / 16 + E; }
MOE_EP_HD int64_t moe_ep_mega_counter_count(int E, int64_t max_m_tiles)
{
    return MOE_EP_MEGA_CTR_FIXED + E + 2 * max_m_tiles;
}

/* Largest hidden size and expert count the kernel takes (shared memory). */
#define MOE_EP_MEGA_MAX_EXPERTS 1024

/* Enqueues the forward. a->d.tile_rows 16 or 64 (32 for bf16 and fp8_block: mega.cu); a->d.gemm_ctas_per_sm caps the
 * blocks per SM (0: as many as fit). MOE_EP_ERROR_UNSUPPORTED when the
 * geometry does not fit the kernel (H % 256, shared memory). */
moe_ep_status_t moe_ep_launch_mega(const moe_ep_mega_args_t *a, moe_ep_stream_t stream);

/* Why the mega kernel cannot run this geometry (NULL when it can). */
const char *moe_ep_mega_unsupported(const moe_ep_split_dims_t *d);

#ifdef __cplusplus
}
#endif
#endif
