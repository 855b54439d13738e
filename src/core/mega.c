/* The mega backend on one GPU: the split backend's buffers plus the kernel's
 * counters, and a forward that is one launch (kernels/mega.cu). No host
 * synchronisation, so it can be captured in a CUDA graph. Knobs: explicit,
 * autotuned (whole forwards timed), cache, heuristic (core/knobs.c). */
#include "core/mega.h"

#include "core/knobs.h"
#include "core/split.h"

#include "kernels/mega_kernels.h"

#include <stdlib.h>

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>

struct moe_ep_mega_state {
    int32_t *counters;
    int64_t max_m_tiles;
    int absent_rank;
};

static int64_t counter_bytes(const moe_ep_layer_config_t *c, int num_local_experts, int local_ranks)
{
    int64_t rows = (int64_t)local_ranks * c->max_tokens_per_rank * c->top_k;
    int64_t m_tiles = moe_ep_mega_max_m_tiles(rows, num_local_experts);
    return (int64_t)sizeof(int32_t) * moe_ep_mega_counter_count(num_local_experts, m_tiles);
}

size_t moe_ep_mega_device_bytes(const moe_ep_layer_config_t *c, int world_size, int num_local_experts,
                                int local_ranks)
{
    return moe_ep_split_device_bytes(c, world_size, num_local_experts) +
           (size_t)counter_bytes(c, num_local_experts, local_ranks);
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
    size_t bytes = (size_t)counter_bytes(&l->cfg, l->num_local_experts, l->group->local_ranks);
    cudaError_t e = cudaMalloc((void **)&s->counters, bytes);
    if (e == cudaSuccess) e = cudaMemset(s->counters, 0, bytes);
    if (e == cudaSuccess) e = cudaMemset(b.expert_count, 0, sizeof(int32_t) * (size_t)d.E);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return MOE_EP_FAIL(e == cudaErrorMemoryAllocation ? MOE_EP_ERROR_OUT_OF_MEMORY : MOE_EP_ERROR_CUDA,
                           "mega counters: %s", cudaGetErrorString(e));
    return MOE_EP_SUCCESS;
}

void moe_ep_mega_destroy(moe_ep_layer_t l)
{
    if (l->mega) {
        cudaSetDevice(l->group->device);
        cudaFree(l->mega->counters);
        free(l->mega);
        l->mega = NULL;
    }
    moe_ep_split_destroy(l);
}

static void set_knobs(moe_ep_mega_args_t *a, const moe_ep_knobs_t *k)
{
    a->d.tile_rows = k->gemm_tile_rows == 16 ? 16 : 64; /* 128 (split's wgmma): 64; bf16, fp8_block: 32 (mega.cu) */
    a->d.gemm_ctas_per_sm = k->gemm_ctas_per_sm;
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
    MOE_EP_CHECK(moe_ep_knobs_tune_candidates(l, tokens, rows, cand, 8, &n));
    for (int i = 0; i < n; i++) {
        set_knobs(a, &cand[i]);
        MOE_EP_CHECK(moe_ep_time_median_us(enqueue_mega, a, stream, &us[i]));
        if (us[i] < us[best]) best = i;
    }
    if (n == 0 || *l->group->error_host != 0) return MOE_EP_SUCCESS;
    return moe_ep_knobs_set_tuned(l, tokens, &cand[best], us[best]);
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
    a.absent_rank = s->absent_rank;
    if (!capture) MOE_EP_CHECK(autotune(l, &a, stream, tokens, rows));
    MOE_EP_CHECK(moe_ep_knobs_resolve(l, tokens, rows, !capture, &k, NULL));
    set_knobs(&a, &k);
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

size_t moe_ep_mega_device_bytes(const moe_ep_layer_config_t *c, int world_size, int n, int local_ranks)
{
    (void)c, (void)world_size, (void)n, (void)local_ranks;
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
