/* The mega backend's kernel: the whole forward of every local rank in one
 * persistent launch, on the split backend's buffers (split_kernels.h).
 * Included by C host code and by mega.cu.
 *
 * Work items, in one global order taken from an atomic counter:
 *   count     slots -> per-expert positions (ids checked)         [slot chunks]
 *   dispatch  tokens quantized into their expert rows             [token groups]
 *             (bf16 on the wgmma tile: only each row's source; GEMM1 reads x)
 *   fold1     an m tile's rows folded into fp16 (A16 tiles)       [tiles, or none; none where the
 *             (the staged dispatch folds its rows itself)          dispatch stores fp16 rows]
 *   gemm1     GEMM1 + SwiGLU + requant tiles (m tile x 256 cols)  [tiles x 2I/256]
 *   fold2     an m tile's GEMM1 output rows folded (A16 tiles)    [tiles, or none]
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
    MOE_EP_MEGA_CTR_FIXED = 4  /* then ready[E], gemm1_done[m_tiles], gemm2_done[m_tiles],
                                  fold1_done[m_tiles], fold2_done[m_tiles] */
};

/* Which wait timed out: the device error word's detail is (kind << 20) | index. */
enum {
    MOE_EP_MEGA_WAIT_COUNT = 1,  /* the routing counts of every rank (index: 0) */
    MOE_EP_MEGA_WAIT_ROWS = 2,   /* an expert's rows (index: the local expert) */
    MOE_EP_MEGA_WAIT_GEMM1 = 3,  /* GEMM1 tiles of an m tile (index: the m tile) */
    MOE_EP_MEGA_WAIT_GEMM2 = 4,  /* GEMM2 tiles of an m tile (index: the m tile) */
    MOE_EP_MEGA_WAIT_PEER = 5,   /* a rank's previous forward (index: the rank) */
    MOE_EP_MEGA_WAIT_TOKENS = 6, /* a rank's tokens (index: the rank) */
    MOE_EP_MEGA_WAIT_OUTPUTS = 7, /* output rows of one of this rank's tokens (index: the token) */
    MOE_EP_MEGA_WAIT_FOLD = 8     /* the fold item of an m tile (index: the m tile) */
};

/* NCCL groups (one rank per GPU): the kernel moves tokens and output rows
 * itself, with loads, stores and atomics through peer pointers to the other
 * ranks' heaps (CUDA IPC mappings over NVLink). Every rank's heap has the same
 * layout:
 *   ctrl   uint32 [MOE_EP_MEGA_CTRL_FIXED + W * SEND_ITEMS + W + T_max * K]:
 *          [0] forwards finished here (the epoch n; only this rank writes it),
 *          arrived[W][SEND_ITEMS]: n + 1 once send item i of rank r of forward n landed,
 *          done[W]: forwards rank r has finished (rank r adds 1 at its end),
 *          rows[T_max * K]: n + 1 once the output row of slot t * K + k landed.
 *          Flags carry the forward's epoch and nothing is reset between
 *          forwards, so a row or token of an earlier (failed) forward never
 *          counts for a later one. Compared modulo 2^32.
 *   t      int32 [W]                 T of each source rank
 *   ids    int32 [W][T_max][K]       top-k ids of each source rank
 *   x      bf16  [W][T_max][H]       tokens of each source rank (only those
 *                                    with an expert here are written)
 *   y      wire rows [T_max * K]     output rows of this rank's tokens, slot t * K + k
 *   ys     their scales
 * A forward on rank q: send items (q's T, ids and tokens into every rank's
 * heap; before writing to rank r, wait until r finished q's previous forward),
 * then the usual items on the rows of every source, row items (the finished
 * GEMM2 rows of an m tile go to their token's rank), combine of q's tokens once
 * all their rows arrived. The last block out marks the forward done on every rank. */
#define MOE_EP_MEGA_CTRL_FIXED 4
#define MOE_EP_MEGA_SEND_ITEMS 64 /* send items per forward, whatever T */

typedef struct moe_ep_mega_link {
    int world, rank;            /* world 0: no link (an emulated group) */
    uint8_t *const *peers;      /* device array [world]: heap bases, own included */
    int64_t t_off, ids_off, x_off, y_off, ys_off; /* heap layout (bytes) */
    const uint16_t *x_own;      /* this rank's forward inputs */
    const int32_t *ids_own;
    const int32_t *t_own_device; /* or NULL: t_own_host */
    int t_own_host;
} moe_ep_mega_link_t;

typedef struct moe_ep_mega_args {
    moe_ep_split_dims_t d;
    moe_ep_split_bufs_t b;
    moe_ep_split_io_t io;
    int32_t *counters;    /* [moe_ep_mega_counter_count(E, max_m_tiles)] */
    int max_m_tiles;      /* capacity of gemm1_done / gemm2_done / fold1_done / fold2_done */
    long long timeout_ns; /* bound of every wait */
    int absent_rank;      /* tests: this local rank's tokens never arrive; -1 = none */
    int32_t *row_slot;    /* [rows capacity]: each row's source slot (r * T_max + t) * K + k, written by the
                             dispatch items (links: where row items send it; bf16: where GEMM1 reads its x row) */
    moe_ep_mega_link_t link;
} moe_ep_mega_args_t;

/* Heap layout of a link (offsets filled, pointers left alone); returns its bytes. */
MOE_EP_HD int64_t moe_ep_mega_link_layout(moe_ep_mega_link_t *l, int W, int T_max, int K, int H,
                                          int64_t y_row_bytes, int64_t y_scale_bytes)
{
    int64_t o = (int64_t)4 * (MOE_EP_MEGA_CTRL_FIXED + (int64_t)W * MOE_EP_MEGA_SEND_ITEMS + W + (int64_t)T_max * K);
    o = (o + 255) / 256 * 256, l->t_off = o, o += 4 * (int64_t)W;
    o = (o + 255) / 256 * 256, l->ids_off = o, o += (int64_t)4 * W * T_max * K;
    o = (o + 255) / 256 * 256, l->x_off = o, o += (int64_t)2 * W * T_max * H;
    o = (o + 255) / 256 * 256, l->y_off = o, o += y_row_bytes * T_max * K;
    o = (o + 255) / 256 * 256, l->ys_off = o, o += y_scale_bytes * T_max * K;
    return (o + 255) / 256 * 256;
}

/* M tiles of 16 rows or more over E experts can never exceed this. */
MOE_EP_HD int64_t moe_ep_mega_max_m_tiles(int64_t rows_capacity, int E) { return rows_capacity / 16 + E; }
MOE_EP_HD int64_t moe_ep_mega_counter_count(int E, int64_t max_m_tiles)
{
    return MOE_EP_MEGA_CTR_FIXED + E + 4 * max_m_tiles;
}

/* Largest hidden size and expert count the kernel takes (shared memory). */
#define MOE_EP_MEGA_MAX_EXPERTS 1024

/* Enqueues the forward. a->d.tile_rows 16 or 64 (32 for bf16 and fp8_block: mega.cu); the register tile's 128, 64,
 * 32 or 16; 128 bf16's HGMMA tile; a->d.gemm_ctas_per_sm caps the
 * blocks per SM (0: as many as fit). MOE_EP_ERROR_UNSUPPORTED when the
 * geometry does not fit the kernel (H % 256, shared memory). */
moe_ep_status_t moe_ep_launch_mega(const moe_ep_mega_args_t *a, moe_ep_stream_t stream);

/* Why the mega kernel cannot run this geometry (NULL when it can). */
const char *moe_ep_mega_unsupported(const moe_ep_split_dims_t *d);

#ifdef MOE_EP_MEGA_TRACE
/* The item timeline (builds with -DMOE_EP_MEGA_TRACE=ON only, for the
 * bench): one record per work item a block ran, globaltimer ns at its start,
 * at the end of its wait for its inputs (GEMM and combine items; else = t0)
 * and at its end; besides the items, each block's start (from its entry to
 * its first claim) and exit (mega_exit: the last block out clears the
 * counters and publishes the error word). */
enum {
    MOE_EP_MEGA_ITEM_SEND, MOE_EP_MEGA_ITEM_COUNT, MOE_EP_MEGA_ITEM_DISPATCH, MOE_EP_MEGA_ITEM_GEMM1,
    MOE_EP_MEGA_ITEM_GEMM2, MOE_EP_MEGA_ITEM_ROWS, MOE_EP_MEGA_ITEM_COMBINE, MOE_EP_MEGA_ITEM_START,
    MOE_EP_MEGA_ITEM_EXIT, MOE_EP_MEGA_ITEM_FOLD, MOE_EP_MEGA_ITEM_KINDS
};
typedef struct {
    uint32_t block, kind;
    unsigned long long t0, tw, stall, t1; /* stall: ns the staged items waited for their rows' bulk copies */
} moe_ep_mega_trace_rec_t;
/* Records the items of the forwards enqueued from now on (up to cap records; allocates once). */
moe_ep_status_t moe_ep_mega_trace_start(uint32_t cap);
/* Copies the records (at most cap) to host memory; *n: how many were recorded (may exceed cap). */
moe_ep_status_t moe_ep_mega_trace_fetch(moe_ep_mega_trace_rec_t *host, uint32_t cap, uint32_t *n);
#endif

#ifdef __cplusplus
}
#endif
#endif
