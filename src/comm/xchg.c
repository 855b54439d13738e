/* The split backend's exchanges on an NCCL group (host side): buffers in a
 * symmetric heap, a warm-up at creation, and per forward one all-gather of
 * fixed-size token blocks and one all-to-all (grouped ncclSend/ncclRecv) of
 * fixed-capacity output blocks. No host synchronisation: CUDA-graph safe. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

#ifdef MOE_EP_HAVE_NCCL
#include "comm/comm_internal.h"
#include "core/cuda_status.h"
#include "comm/xchg_kernels.h"

#define ALIGN 256

struct moe_ep_xchg {
    moe_ep_xchg_dev_t dev;
    moe_ep_heap_t heap; /* token blocks, output send and receive blocks */
    int32_t *small;     /* tokens_in [R], tokens_own, combine_rows [cap] */
};

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Layout of the heap: offsets of blocks, ysend, ysend_scales, yrecv,
 * yrecv_scales, and its size (dev pointers left NULL). */
static int64_t layout(const moe_ep_layer_config_t *c, int R, int rank, moe_ep_xchg_dev_t *d, int64_t off[5])
{
    memset(d, 0, sizeof *d);
    moe_ep_format_t yf = moe_ep_wire_format(c->wire);
    d->R = R, d->rank = rank, d->K = c->top_k, d->H = c->hidden, d->T_max = c->max_tokens_per_rank;
    d->experts_per_rank = c->num_experts / R, d->num_experts_global = c->num_experts;
    d->ids_off = 16;
    d->x_off = align_up(d->ids_off + (int64_t)4 * d->T_max * d->K);
    d->block_bytes = align_up(d->x_off + (int64_t)2 * d->T_max * d->H);
    d->cap = (int64_t)d->T_max * d->K;
    d->y_data = moe_ep_row_data_bytes(yf, d->H), d->y_scale = moe_ep_row_scale_bytes(yf, d->H);
    int64_t sizes[5] = {R * d->block_bytes, R * d->cap * d->y_data, R * d->cap * d->y_scale,
                        R * d->cap * d->y_data, R * d->cap * d->y_scale};
    int64_t total = 0;
    for (int i = 0; i < 5; i++) off[i] = total, total += align_up(sizes[i]);
    return total;
}

static size_t small_bytes(const moe_ep_xchg_dev_t *d)
{
    return sizeof(int32_t) * (size_t)(d->R + 1 + d->cap);
}

size_t moe_ep_xchg_device_bytes(const moe_ep_layer_config_t *c, int world_size)
{
    moe_ep_xchg_dev_t d;
    int64_t off[5];
    int64_t heap = layout(c, world_size, 0, &d, off);
    return (size_t)heap + small_bytes(&d);
}

/* The NCCL calls of the two exchanges (in-place all-gather; grouped
 * send/recv with every rank, itself included). */
static ncclResult_t nccl_tokens(struct moe_ep_comm *c, const moe_ep_xchg_dev_t *d, cudaStream_t st)
{
    return ncclAllGather(d->blocks + (int64_t)d->rank * d->block_bytes, d->blocks, (size_t)d->block_bytes,
                         ncclUint8, c->nccl, st);
}

static ncclResult_t nccl_outputs(struct moe_ep_comm *c, const moe_ep_xchg_dev_t *d, cudaStream_t st)
{
    ncclResult_t r = ncclGroupStart(), r2;
    size_t nd = (size_t)(d->cap * d->y_data), ns = (size_t)(d->cap * d->y_scale);
    for (int q = 0; q < d->R && r == ncclSuccess; q++) {
        r = ncclSend(d->ysend + q * nd, nd, ncclUint8, q, c->nccl, st);
        if (r == ncclSuccess) r = ncclRecv(d->yrecv + q * nd, nd, ncclUint8, q, c->nccl, st);
        if (r == ncclSuccess && ns) r = ncclSend(d->ysend_scales + q * ns, ns, ncclUint8, q, c->nccl, st);
        if (r == ncclSuccess && ns) r = ncclRecv(d->yrecv_scales + q * ns, ns, ncclUint8, q, c->nccl, st);
    }
    r2 = ncclGroupEnd();
    return r != ncclSuccess ? r : r2;
}

/* Both exchanges once, on zeros: NCCL connects the peers of each (which can
 * block the host) here, under the watchdog, instead of in forward. */
static moe_ep_status_t warm_up(moe_ep_group_t g, moe_ep_xchg_t *x)
{
    struct moe_ep_comm *c = g->comm;
    moe_ep_comm_host_begin(c);
    ncclResult_t r = nccl_tokens(c, &x->dev, c->stream);
    if (r == ncclSuccess) r = nccl_outputs(c, &x->dev, c->stream);
    moe_ep_status_t st = r == ncclSuccess ? moe_ep_comm_wait(c)
                                          : moe_ep_nccl_fail(r, "exchange warm-up", __FILE__, __LINE__);
    return moe_ep_comm_host_end(c, st);
}

static moe_ep_status_t create(moe_ep_group_t g, const moe_ep_layer_config_t *c, moe_ep_xchg_t *x)
{
    struct moe_ep_comm *cm = g->comm;
    moe_ep_xchg_dev_t *d = &x->dev;
    int64_t off[5];
    int64_t heap = layout(c, g->world_size, cm->rank, d, off);
    MOE_EP_CHECK(moe_ep_heap_create(g, (size_t)heap, &x->heap));
    uint8_t *b = x->heap.base;
    d->blocks = b + off[0], d->ysend = b + off[1], d->ysend_scales = b + off[2];
    d->yrecv = b + off[3], d->yrecv_scales = b + off[4];
    cudaError_t e = cudaMalloc((void **)&x->small, small_bytes(d));
    if (e == cudaSuccess) e = cudaMemset(x->small, 0, small_bytes(d));
    if (e != cudaSuccess)
        return MOE_EP_CUDA_FAIL(e, "exchange buffers");
    d->tokens_in = x->small, d->tokens_own = x->small + d->R, d->combine_rows = x->small + d->R + 1;
    d->seq = cm->seq_dev, d->progress = cm->progress_dev, d->error = g->error_dev;
    return warm_up(g, x);
}

moe_ep_status_t moe_ep_xchg_create(moe_ep_group_t g, const moe_ep_layer_config_t *c, moe_ep_xchg_t **out)
{
    *out = NULL;
    MOE_EP_REQUIRE(g->comm != NULL, "exchanges need an NCCL group");
    MOE_EP_CHECK(moe_ep_group_check_config(g, c));
    moe_ep_comm_set_timeout(g->comm, c->timeout_seconds > 0 ? c->timeout_seconds : 10.0);
    moe_ep_xchg_t *x = calloc(1, sizeof *x);
    if (!x) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "exchange");
    moe_ep_status_t st = create(g, c, x);
    if (st != MOE_EP_SUCCESS) {
        moe_ep_xchg_destroy(g, x);
        return st;
    }
    *out = x;
    return MOE_EP_SUCCESS;
}

void moe_ep_xchg_destroy(moe_ep_group_t g, moe_ep_xchg_t *x)
{
    if (!x) return;
    cudaSetDevice(g->device);
    if (x->small) cudaFree(x->small);
    moe_ep_heap_destroy(g, &x->heap);
    free(x);
}

/* Runs enqueue under the group's lock (the watchdog never aborts in the
 * middle of an enqueue), unless the communicator is already gone. */
static moe_ep_status_t locked_usable(moe_ep_group_t g)
{
    MOE_EP_CHECK(moe_ep_comm_usable(g));
    pthread_mutex_lock(&g->comm->lock);
    moe_ep_status_t st = moe_ep_comm_usable(g);
    if (st != MOE_EP_SUCCESS) pthread_mutex_unlock(&g->comm->lock);
    return st;
}

moe_ep_status_t moe_ep_xchg_tokens(moe_ep_group_t g, moe_ep_xchg_t *x, const moe_ep_split_bufs_t *bufs,
                                   const moe_ep_forward_args_t *a, moe_ep_split_io_t *io,
                                   moe_ep_stream_t stream)
{
    (void)bufs;
    const moe_ep_xchg_dev_t *d = &x->dev;
    MOE_EP_CHECK(locked_usable(g));
    moe_ep_status_t st = moe_ep_launch_xchg_pack(d, a->x[0], a->topk_ids[0], a->num_tokens_device,
                                                 a->num_tokens ? a->num_tokens[0] : 0, stream);
    if (st == MOE_EP_SUCCESS) {
        ncclResult_t r = nccl_tokens(g->comm, d, (cudaStream_t)stream);
        if (r != ncclSuccess) st = moe_ep_nccl_fail(r, "ncclAllGather (tokens)", __FILE__, __LINE__);
    }
    if (st == MOE_EP_SUCCESS) st = moe_ep_launch_xchg_absorb(d, stream);
    pthread_mutex_unlock(&g->comm->lock);
    MOE_EP_CHECK(st);
    memset(io, 0, sizeof *io);
    for (int s = 0; s < d->R; s++) {
        const uint8_t *blk = d->blocks + (int64_t)s * d->block_bytes;
        io->x[s] = (const uint16_t *)(blk + d->x_off);
        io->ids[s] = (const int32_t *)(blk + d->ids_off);
    }
    io->t_device = d->tokens_in;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_xchg_outputs(moe_ep_group_t g, moe_ep_xchg_t *x, const moe_ep_split_dims_t *dims,
                                    const moe_ep_split_bufs_t *bufs, const moe_ep_forward_args_t *a,
                                    moe_ep_stream_t stream)
{
    const moe_ep_xchg_dev_t *d = &x->dev;
    MOE_EP_CHECK(locked_usable(g));
    moe_ep_status_t st = moe_ep_launch_xchg_pack_outputs(d, bufs, stream);
    if (st == MOE_EP_SUCCESS) {
        ncclResult_t r = nccl_outputs(g->comm, d, (cudaStream_t)stream);
        if (r != ncclSuccess) st = moe_ep_nccl_fail(r, "ncclSend/ncclRecv (outputs)", __FILE__, __LINE__);
    }
    if (st == MOE_EP_SUCCESS) st = moe_ep_launch_xchg_unpack_outputs(d, a->topk_ids[0], stream);
    pthread_mutex_unlock(&g->comm->lock);
    MOE_EP_CHECK(st);
    /* The combine kernel of the emulated group, on this rank's tokens alone,
     * reading the rows that came back. */
    moe_ep_split_dims_t d1 = *dims;
    moe_ep_split_bufs_t b1 = *bufs;
    moe_ep_split_io_t io;
    memset(&io, 0, sizeof io);
    d1.R = 1;
    b1.tokens = d->tokens_own, b1.row_of_slot = d->combine_rows;
    b1.y = d->yrecv, b1.y_scales = d->yrecv_scales;
    io.x[0] = a->x[0], io.ids[0] = a->topk_ids[0], io.weights[0] = a->topk_weights[0], io.out[0] = a->out[0];
    return moe_ep_launch_combine(&d1, &b1, &io, stream);
}

#else

size_t moe_ep_xchg_device_bytes(const moe_ep_layer_config_t *c, int world_size)
{
    (void)c, (void)world_size;
    return 0;
}

moe_ep_status_t moe_ep_xchg_create(moe_ep_group_t g, const moe_ep_layer_config_t *c, moe_ep_xchg_t **out)
{
    (void)g, (void)c;
    *out = NULL;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "NCCL groups: moe_ep was built without NCCL");
}

void moe_ep_xchg_destroy(moe_ep_group_t g, moe_ep_xchg_t *x) { (void)g, (void)x; }

moe_ep_status_t moe_ep_xchg_tokens(moe_ep_group_t g, moe_ep_xchg_t *x, const moe_ep_split_bufs_t *bufs,
                                   const moe_ep_forward_args_t *a, moe_ep_split_io_t *io,
                                   moe_ep_stream_t stream)
{
    (void)g, (void)x, (void)bufs, (void)a, (void)io, (void)stream;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "NCCL groups: moe_ep was built without NCCL");
}

moe_ep_status_t moe_ep_xchg_outputs(moe_ep_group_t g, moe_ep_xchg_t *x, const moe_ep_split_dims_t *dims,
                                    const moe_ep_split_bufs_t *bufs, const moe_ep_forward_args_t *a,
                                    moe_ep_stream_t stream)
{
    (void)g, (void)x, (void)dims, (void)bufs, (void)a, (void)stream;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "NCCL groups: moe_ep was built without NCCL");
}
#endif
