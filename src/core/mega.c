/* The mega backend: the split backend's buffers plus the kernel's counters,
 * and a forward that is one launch (kernels/mega.cu). No host
 * synchronisation, so it can be captured in a CUDA graph. Knobs: explicit,
 * autotuned (whole forwards timed), cache, heuristic (core/knobs.c).
 * On an NCCL group the kernel moves tokens and rows itself through a mapped
 * heap on every rank (the link of mega_kernels.h). */
#include "core/mega.h"

#include "comm/comm.h"
#include "core/knobs.h"
#include "core/split.h"

#include "kernels/mega_kernels.h"

#include <stdlib.h>
#include <string.h>

#ifdef MOE_EP_HAVE_CUDA
#include "core/cuda_status.h"

struct moe_ep_mega_state {
    int32_t *counters;
    int64_t max_m_tiles;
    int absent_rank;
    /* NCCL groups: the link (world 0 otherwise), its heap and local arrays. */
    moe_ep_mega_link_t link;
    moe_ep_heap_t heap;
    int32_t *row_slot; /* [rows capacity] (mega_kernels.h) */
};

/* Ranks whose tokens become rows on this GPU. */
static int source_ranks(moe_ep_group_t g) { return g->comm ? g->world_size : g->local_ranks; }

static int64_t counter_bytes(const moe_ep_layer_config_t *c, int num_local_experts, int sources)
{
    int64_t rows = (int64_t)sources * c->max_tokens_per_rank * c->top_k;
    int64_t m_tiles = moe_ep_mega_max_m_tiles(rows, num_local_experts);
    return (int64_t)sizeof(int32_t) * moe_ep_mega_counter_count(num_local_experts, m_tiles);
}

/* Heap bytes of a link (layout in mega_kernels.h). */
static int64_t link_heap_bytes(const moe_ep_layer_config_t *c, int W, moe_ep_mega_link_t *l)
{
    moe_ep_format_t yf = moe_ep_wire_format(c->wire);
    return moe_ep_mega_link_layout(l, W, c->max_tokens_per_rank, c->top_k, c->hidden,
                                   moe_ep_row_data_bytes(yf, c->hidden), moe_ep_row_scale_bytes(yf, c->hidden));
}

size_t moe_ep_mega_device_bytes(moe_ep_group_t g, const moe_ep_layer_config_t *c)
{
    int n = c->num_experts / g->world_size * g->local_ranks, W = source_ranks(g);
    int64_t rows = (int64_t)W * c->max_tokens_per_rank * c->top_k;
    size_t bytes = moe_ep_split_buffer_bytes(c, W, n) + (size_t)counter_bytes(c, n, W) + sizeof(int32_t) * (size_t)rows;
    if (g->comm) {
        moe_ep_mega_link_t l;
        bytes += (size_t)link_heap_bytes(c, W, &l);
    }
    return bytes;
}

static moe_ep_status_t cuda_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return MOE_EP_SUCCESS;
    return MOE_EP_CUDA_FAIL(e, what);
}

/* The link of a layer on an NCCL group (collective: the heap is mapped on every rank). */
static moe_ep_status_t link_create(moe_ep_layer_t l, struct moe_ep_mega_state *s)
{
    moe_ep_group_t g = l->group;
    const moe_ep_layer_config_t *c = &l->cfg;
    int W = g->world_size;
    moe_ep_mega_link_t *k = &s->link;
    int64_t bytes = link_heap_bytes(c, W, k);
    MOE_EP_CHECK(moe_ep_heap_create_mapped(g, (size_t)bytes, &s->heap));
    k->world = W, k->rank = g->first_rank, k->peers = (uint8_t *const *)s->heap.peers;
    return MOE_EP_SUCCESS;
}

/* A forward's view of the link: every source rank's tokens come from the
 * heap, this rank's from the caller. */
static void link_forward_io(const struct moe_ep_mega_state *s, const moe_ep_layer_config_t *c,
                            const moe_ep_forward_args_t *args, moe_ep_mega_args_t *a)
{
    moe_ep_mega_link_t *k = &a->link;
    uint8_t *h = s->heap.base;
    *k = s->link;
    k->x_own = args->x[0], k->ids_own = args->topk_ids[0];
    k->t_own_device = args->num_tokens_device, k->t_own_host = args->num_tokens ? args->num_tokens[0] : 0;
    memset(&a->io, 0, sizeof a->io);
    for (int r = 0; r < k->world; r++) {
        a->io.x[r] = (const uint16_t *)(h + k->x_off) + (int64_t)r * c->max_tokens_per_rank * c->hidden;
        a->io.ids[r] = (const int32_t *)(h + k->ids_off) + (int64_t)r * c->max_tokens_per_rank * c->top_k;
    }
    a->io.t_device = (const int32_t *)(h + k->t_off);
    a->io.weights[k->rank] = args->topk_weights[0], a->io.out[k->rank] = args->out[0];
}

moe_ep_status_t moe_ep_mega_create(moe_ep_layer_t l)
{
    MOE_EP_CHECK(moe_ep_split_create(l));
    moe_ep_split_dims_t d;
    moe_ep_split_bufs_t b;
    MOE_EP_CHECK(moe_ep_split_kernel_view(l, NULL, &d, &b, NULL));
    const char *why = moe_ep_mega_unsupported(&d);
    if (why) return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "mega backend: %s (the split backend runs it)", why);
    struct moe_ep_mega_state *s = calloc(1, sizeof *s);
    if (!s) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "mega state");
    l->mega = s;
    s->absent_rank = -1;
    s->max_m_tiles = moe_ep_mega_max_m_tiles((int64_t)d.R * d.T_max * d.K, d.E);
    size_t bytes = (size_t)counter_bytes(&l->cfg, l->num_local_experts, source_ranks(l->group));
    cudaError_t e = cudaMalloc((void **)&s->counters, bytes);
    if (e == cudaSuccess) e = cudaMemset(s->counters, 0, bytes);
    if (e == cudaSuccess) e = cudaMemset(b.expert_count, 0, sizeof(int32_t) * (size_t)d.E);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->row_slot, sizeof(int32_t) * (size_t)d.R * d.T_max * d.K);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    MOE_EP_CHECK(cuda_status(e, "mega counters"));
    return l->group->comm ? link_create(l, s) : MOE_EP_SUCCESS;
}

void moe_ep_mega_destroy(moe_ep_layer_t l)
{
    if (l->mega) {
        cudaSetDevice(l->group->device);
        cudaFree(l->mega->counters);
        moe_ep_heap_destroy(l->group, &l->mega->heap);
        cudaFree(l->mega->row_slot);
        free(l->mega);
        l->mega = NULL;
    }
    moe_ep_split_destroy(l);
}

static void set_knobs(moe_ep_mega_args_t *a, const moe_ep_knobs_t *k, int64_t rows, int E)
{
    /* 16; 32 (the register tile only); 128: the wgmma tiles; else the large tile (mega.cu: the register
     * tile's 64 rows, the mma.sync tiles' 64, or 32 for bf16 and fp8_block) */
    const int t = k->gemm_tile_rows;
    a->d.tile_rows = t == 16 || t == 32 || t == 128 ? t : 64;
    a->d.gemm_ctas_per_sm = k->gemm_ctas_per_sm;
    a->d.bf16_swapped = t == 128 && moe_ep_bf16_swapped(rows, E); /* as split's (the same bits either way) */
    /* bf16 on the bf16 wire (every GEMM tile in the pipelined runs) with more than 128 rows an
     * expert on average: the wide 144-row swapped form (wgmma_tile.cuh: WG_BM_WIDE), fewer tiles
     * an expert; the same bits. Paired A/B against the 128-row tiles (docs/benchmarks.md): mega
     * fwd 0.954 / 0.967 at pro / flash T = 2048 (256 / 384 rows an expert, where the 128-row
     * tile is swapped too), 0.969 / ~0.985 at T = 8192 (1024 / 1536, where it is not). Not
     * below: 96 rows (flash T = 512) swapped lost 1.019. */
    const int wide = t == 128 && a->d.path == MOE_EP_PATH_BF16 && a->d.wire == MOE_EP_WIRE_BF16 &&
                     rows > (int64_t)MOE_EP_BF16_SWAP_MIN_ROWS * E;
    if (wide) a->d.tile_rows = 144, a->d.bf16_swapped = 1;
    /* The A16 register tiles (NVFP4, W4A8 and in mega MXFP8 always: moe_ep_a16_rows) with more than
     * 128 rows an expert on average: their 144-row form (fp8_rs_tile.cuh), the same bits (each output
     * element one m64nNk16 chain whatever N); an expert of 257-288 rows (pro T = 2048) then takes 2
     * tiles, of 385-432 (flash 2048) 3 */
    const int rs_path = a->d.path == MOE_EP_PATH_NVFP4 || a->d.path == MOE_EP_PATH_MXFP8 || a->d.path == MOE_EP_PATH_W4A8;
    const int a16 = a->b.act16 && moe_ep_a16_rows(MOE_EP_BACKEND_MEGA, a->d.path, rows, E);
    const int rs_wide = t == 128 && rs_path && a16 && rows > (int64_t)128 * E;
    if (rs_wide) a->d.tile_rows = 144;
    a->d.a16 = (a->d.tile_rows == 128 || rs_wide) && a16; /* MXFP8's 128-row instance: which form */
}

static moe_ep_status_t enqueue_mega(void *args, moe_ep_stream_t stream)
{
    return moe_ep_launch_mega(args, stream);
}

/* config.autotune, at the first forward of a token bucket (never while
 * capturing): whole forwards of this batch timed per candidate (they write
 * the outputs the real forward then overwrites), the fastest kept. Nothing is
 * kept when the device error word is set. */
static moe_ep_status_t autotune(moe_ep_layer_t l, moe_ep_mega_args_t *a, moe_ep_stream_t stream, int tokens,
                                int64_t rows)
{
    moe_ep_knobs_t cand[8];
    double us[8];
    int n = 0, best = 0;
    MOE_EP_CHECK(moe_ep_knobs_tune_candidates(l, tokens, cand, 8, &n));
    for (int i = 0; i < n; i++) {
        set_knobs(a, &cand[i], rows, l->num_local_experts);
        MOE_EP_CHECK(moe_ep_time_median_us(enqueue_mega, a, stream, &us[i]));
        if (us[i] < us[best]) best = i;
    }
    if (n == 0 || *l->group->error_host != 0) return MOE_EP_SUCCESS;
    return moe_ep_knobs_set_tuned(l, tokens, &cand[best], us[best]);
}

/* A link whose forward timed out is broken (ranks may be a forward apart):
 * refuse, like an aborted NCCL communicator. Other device errors (a bad id,
 * seen by every rank alike) leave the links consistent. */
static moe_ep_status_t link_usable(moe_ep_layer_t l)
{
    uint32_t w = *l->group->error_host;
    if ((w >> 24) != MOE_EP_DEVERR_TIMEOUT) return MOE_EP_SUCCESS;
    return MOE_EP_FAIL(MOE_EP_ERROR_TIMEOUT, "a rank did not take part in a mega forward within timeout_seconds: "
                                             "the layer's links are broken; destroy the group and create a new one");
}

moe_ep_status_t moe_ep_mega_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *args, moe_ep_stream_t stream)
{
    struct moe_ep_mega_state *s = l->mega;
    cudaError_t e = cudaSetDevice(l->group->device);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cudaSetDevice: %s", cudaGetErrorString(e));
    moe_ep_mega_args_t a;
    MOE_EP_CHECK(moe_ep_split_kernel_view(l, args, &a.d, &a.b, &a.io));
    int tokens;
    int64_t rows;
    moe_ep_knobs_t k;
    int capture = moe_ep_stream_capturing(stream);
    MOE_EP_CHECK(moe_ep_knobs_forward_shape(l, args, &tokens, &rows));
    a.counters = s->counters;
    a.max_m_tiles = (int)s->max_m_tiles;
    a.timeout_ns = (long long)(l->cfg.timeout_seconds * 1e9);
    a.absent_rank = s->link.world ? -1 : s->absent_rank;
    a.row_slot = s->row_slot;
    memset(&a.link, 0, sizeof a.link);
    if (s->link.world) {
        MOE_EP_CHECK(link_usable(l));
        link_forward_io(s, &l->cfg, args, &a);
    } else if (!capture) { /* not on links: timing a forward alone would be collective */
        MOE_EP_CHECK(autotune(l, &a, stream, tokens, rows));
    }
    MOE_EP_CHECK(moe_ep_knobs_resolve(l, tokens, rows, !capture, &k, NULL));
    set_knobs(&a, &k, rows, l->num_local_experts);
    return moe_ep_launch_mega(&a, stream);
}

moe_ep_status_t moe_ep_mega_set_absent_rank(moe_ep_layer_t l, int rank)
{
    MOE_EP_REQUIRE(l != NULL && l->mega != NULL, "not a mega layer");
    MOE_EP_REQUIRE(rank >= -1 && rank < l->group->local_ranks, "rank %d", rank);
    l->mega->absent_rank = rank;
    return MOE_EP_SUCCESS;
}

#else /* no CUDA */

size_t moe_ep_mega_device_bytes(moe_ep_group_t g, const moe_ep_layer_config_t *c)
{
    (void)g, (void)c;
    return 0;
}

moe_ep_status_t moe_ep_mega_create(moe_ep_layer_t l)
{
    (void)l;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the mega backend needs a CUDA build");
}

void moe_ep_mega_destroy(moe_ep_layer_t l) { (void)l; }

moe_ep_status_t moe_ep_mega_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *a, moe_ep_stream_t s)
{
    (void)l, (void)a, (void)s;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the mega backend needs a CUDA build");
}

moe_ep_status_t moe_ep_mega_set_absent_rank(moe_ep_layer_t l, int rank)
{
    (void)l, (void)rank;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the mega backend needs a CUDA build");
}
#endif
