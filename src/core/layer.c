/* Layer objects: configuration checks, memory needs, weight loading and the
 * forward call, each handed to the backend after its arguments are checked. */
#include "comm/comm.h"
#include "core/knobs.h"
#include "core/mega.h"
#include "core/objects.h"
#include "core/split.h"
#include "reference/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MOE_EP_MAX_TOP_K 64
#define MOE_EP_MAX_TOKENS_PER_RANK (1 << 20)
#define MOE_EP_MAX_DIM (1 << 16)
#define MOE_EP_DIM_ALIGN 128
#define MOE_EP_SPLIT_MAX_HIDDEN 32768 /* 128 KiB of fp32 per token in the dispatch kernel */

moe_ep_expert_bytes_t moe_ep_expert_bytes(moe_ep_format_t format, int64_t hidden,
                                          int64_t intermediate)
{
    moe_ep_expert_bytes_t b;
    int64_t h = hidden, i = intermediate;
    b.w13_data = moe_ep_format_data_bytes(format, 2 * i, h);
    b.w2_data = moe_ep_format_data_bytes(format, h, i);
    if (format == MOE_EP_FORMAT_FP8_BLOCK) {
        b.w13_scales = (2 * i / 128) * (h / 128) * 4;
        b.w2_scales = (h / 128) * (i / 128) * 4;
    } else {
        b.w13_scales = moe_ep_format_scales_bytes(format, 2 * i, h);
        b.w2_scales = moe_ep_format_scales_bytes(format, h, i);
    }
    return b;
}

static int valid_scale(float s) { return s == 0.0f || (s > 0.0f && isfinite(s)); }

static moe_ep_status_t check_config(moe_ep_group_t group, const moe_ep_layer_config_t *c)
{
    MOE_EP_REQUIRE(group != NULL, "group is NULL");
    MOE_EP_REQUIRE(c != NULL, "config is NULL");
    MOE_EP_REQUIRE(c->size == sizeof(moe_ep_layer_config_t),
                   "config.size %zu != sizeof(moe_ep_layer_config_t) %zu: rebuild against this "
                   "moe_ep.h and use MOE_EP_LAYER_CONFIG_INIT",
                   c->size, sizeof(moe_ep_layer_config_t));
    MOE_EP_REQUIRE(c->num_experts >= 1 && c->num_experts % group->world_size == 0,
                   "num_experts %d must be >= 1 and a multiple of the world size %d",
                   c->num_experts, group->world_size);
    MOE_EP_REQUIRE(c->top_k >= 1 && c->top_k <= MOE_EP_MAX_TOP_K && c->top_k <= c->num_experts,
                   "top_k %d not in [1, min(%d, num_experts)]", c->top_k, MOE_EP_MAX_TOP_K);
    MOE_EP_REQUIRE(c->hidden >= MOE_EP_DIM_ALIGN && c->hidden <= MOE_EP_MAX_DIM &&
                       c->hidden % MOE_EP_DIM_ALIGN == 0,
                   "hidden %d must be a multiple of %d in [%d, %d]", c->hidden,
                   MOE_EP_DIM_ALIGN, MOE_EP_DIM_ALIGN, MOE_EP_MAX_DIM);
    MOE_EP_REQUIRE(c->intermediate >= MOE_EP_DIM_ALIGN && c->intermediate <= MOE_EP_MAX_DIM &&
                       c->intermediate % MOE_EP_DIM_ALIGN == 0,
                   "intermediate %d must be a multiple of %d in [%d, %d]", c->intermediate,
                   MOE_EP_DIM_ALIGN, MOE_EP_DIM_ALIGN, MOE_EP_MAX_DIM);
    MOE_EP_REQUIRE(c->max_tokens_per_rank >= 1 &&
                       c->max_tokens_per_rank <= MOE_EP_MAX_TOKENS_PER_RANK,
                   "max_tokens_per_rank %d not in [1, %d]", c->max_tokens_per_rank,
                   MOE_EP_MAX_TOKENS_PER_RANK);
    MOE_EP_REQUIRE((unsigned)c->path < MOE_EP_PATH_COUNT_, "unknown path %d", (int)c->path);
    MOE_EP_REQUIRE((unsigned)c->wire < MOE_EP_WIRE_COUNT_, "unknown wire %d", (int)c->wire);
    MOE_EP_REQUIRE((unsigned)c->backend < MOE_EP_BACKEND_COUNT_, "unknown backend %d",
                   (int)c->backend);
    MOE_EP_REQUIRE(isfinite(c->swiglu_limit) && c->swiglu_limit >= 0.0f,
                   "swiglu_limit %g must be finite and >= 0", (double)c->swiglu_limit);
    MOE_EP_REQUIRE(valid_scale(c->fc1_input_scale) && valid_scale(c->fc2_input_scale),
                   "fc1/fc2_input_scale (%g, %g) must be 0 (unset) or > 0 and finite",
                   (double)c->fc1_input_scale, (double)c->fc2_input_scale);
    MOE_EP_REQUIRE(c->num_threads >= 0 && c->num_threads <= 4096, "num_threads %d",
                   c->num_threads);
    MOE_EP_REQUIRE(isfinite(c->timeout_seconds) && c->timeout_seconds >= 0.0,
                   "timeout_seconds %g", c->timeout_seconds);
    MOE_EP_REQUIRE(c->num_sms >= 0, "num_sms %d must be >= 0 (0: every SM)", c->num_sms);
    MOE_EP_REQUIRE(c->fp8_fast_accum == 0 || c->fp8_fast_accum == 1, "fp8_fast_accum %d: 0 or 1",
                   c->fp8_fast_accum);
    MOE_EP_CHECK(moe_ep_knobs_check_config(c));
    if (c->backend == MOE_EP_BACKEND_MEGA) {
        MOE_EP_REQUIRE(c->hidden % 256 == 0, "mega backend: hidden %d must be a multiple of 256",
                       c->hidden);
        MOE_EP_REQUIRE(c->num_experts / group->world_size * group->local_ranks <= 1024,
                       "mega backend: at most 1024 experts on one GPU");
    }
    if (c->backend != MOE_EP_BACKEND_REFERENCE) { /* split and mega: the split backend's buffers */
        /* Row ids and TMA coordinates are int32; the dispatch kernel stages a token
         * (H fp32) in shared memory. */
        int64_t rows = (int64_t)group->local_ranks * c->max_tokens_per_rank * c->top_k;
        MOE_EP_REQUIRE(rows < ((int64_t)1 << 31),
                       "split backend: local ranks x max_tokens_per_rank x top_k = %lld rows, "
                       "at most 2^31 - 1", (long long)rows);
        MOE_EP_REQUIRE(c->hidden <= MOE_EP_SPLIT_MAX_HIDDEN, "split backend: hidden %d > %d",
                       c->hidden, MOE_EP_SPLIT_MAX_HIDDEN);
#ifndef MOE_EP_HAVE_CUDA
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the %s backend needs a CUDA build",
                           moe_ep_backend_name(c->backend));
#endif
        if (group->device < 0)
            return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED,
                               "the %s backend needs a group on a GPU (device >= 0)",
                               moe_ep_backend_name(c->backend));
    }
    return MOE_EP_SUCCESS;
}

static int local_experts(moe_ep_group_t g, const moe_ep_layer_config_t *c)
{
    return c->num_experts / g->world_size * g->local_ranks;
}

moe_ep_status_t moe_ep_layer_memory_size(moe_ep_group_t group, const moe_ep_layer_config_t *config,
                                         size_t *device_bytes, size_t *host_bytes)
{
    moe_ep_clear_error();
    MOE_EP_CHECK(check_config(group, config));
    MOE_EP_REQUIRE(device_bytes != NULL || host_bytes != NULL, "both outputs are NULL");
    int n = local_experts(group, config);
    int ref = config->backend == MOE_EP_BACKEND_REFERENCE;
    if (device_bytes && !ref && !group->emulated && config->backend == MOE_EP_BACKEND_SPLIT)
        *device_bytes = moe_ep_comm_layer_device_bytes(group, config);
    else if (device_bytes)
        *device_bytes = ref ? 0
                        : config->backend == MOE_EP_BACKEND_MEGA
                            ? moe_ep_mega_device_bytes(group, config)
                            : moe_ep_split_device_bytes(config, group->world_size, n);
    if (host_bytes) *host_bytes = ref ? moe_ep_ref_host_bytes(config, n) : 0;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_layer_create(moe_ep_group_t group, const moe_ep_layer_config_t *config,
                                    moe_ep_layer_t *layer)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL, "layer is NULL");
    /* Collective on NCCL groups: before any local check that could return early. */
    MOE_EP_CHECK(moe_ep_group_check_config(group, config));
    MOE_EP_CHECK(check_config(group, config));
    struct moe_ep_layer_s *l = calloc(1, sizeof *l);
    if (!l) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "layer");
    l->group = group;
    l->cfg = *config;
    if (l->cfg.timeout_seconds == 0.0) l->cfg.timeout_seconds = 10.0;
    l->experts_per_rank = config->num_experts / group->world_size;
    l->first_expert = group->first_rank * l->experts_per_rank;
    l->num_local_experts = local_experts(group, config);
    l->weight_format = moe_ep_path_weight_format(config->path);
    l->expert_bytes = moe_ep_expert_bytes(l->weight_format, config->hidden, config->intermediate);
    moe_ep_knobs_init(l);
    l->loaded = calloc((size_t)l->num_local_experts, 1);
    moe_ep_status_t st = !l->loaded ? MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "loaded flags")
                         : config->backend == MOE_EP_BACKEND_REFERENCE ? moe_ep_ref_create(l)
                         : config->backend == MOE_EP_BACKEND_MEGA      ? moe_ep_mega_create(l)
                                                                       : moe_ep_split_create(l);
    if (st != MOE_EP_SUCCESS) {
        moe_ep_layer_destroy(l);
        return st;
    }
    *layer = l;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_layer_destroy(moe_ep_layer_t layer)
{
    if (!layer) return MOE_EP_SUCCESS;
    moe_ep_ref_destroy(layer);
    moe_ep_mega_destroy(layer);
    moe_ep_split_destroy(layer);
    free(layer->loaded);
    free(layer);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_layer_get_config(moe_ep_layer_t layer, moe_ep_layer_config_t *config)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL && config != NULL, "NULL argument");
    MOE_EP_REQUIRE(config->size == sizeof(moe_ep_layer_config_t), "config.size %zu != %zu",
                   config->size, sizeof(moe_ep_layer_config_t));
    *config = layer->cfg;
    return MOE_EP_SUCCESS;
}

static moe_ep_status_t check_weights(moe_ep_layer_t l, const moe_ep_expert_weights_t *w)
{
    MOE_EP_REQUIRE(w != NULL, "weights is NULL");
    MOE_EP_REQUIRE(w->size == sizeof(moe_ep_expert_weights_t),
                   "weights.size %zu != sizeof(moe_ep_expert_weights_t) %zu", w->size,
                   sizeof(moe_ep_expert_weights_t));
    MOE_EP_REQUIRE(w->format == MOE_EP_FORMAT_BF16 || w->format == l->weight_format,
                   "weights in %s, but path %s takes bf16 or %s", moe_ep_format_name(w->format),
                   moe_ep_path_name(l->cfg.path), moe_ep_format_name(l->weight_format));
    int last = l->first_expert + l->num_local_experts;
    MOE_EP_REQUIRE(w->num_experts >= 1 && w->first_expert >= l->first_expert &&
                       w->first_expert <= last - w->num_experts,
                   "experts [%d, %lld) outside this process's experts [%d, %d)", w->first_expert,
                   (long long)w->first_expert + w->num_experts, l->first_expert, last);
    MOE_EP_REQUIRE(w->w13 != NULL && w->w2 != NULL, "w13 or w2 is NULL");
    if (w->format != MOE_EP_FORMAT_BF16)
        MOE_EP_REQUIRE(w->w13_scales != NULL && w->w2_scales != NULL, "%s weights need scales",
                       moe_ep_format_name(w->format));
    if (w->format == MOE_EP_FORMAT_NVFP4) {
        MOE_EP_REQUIRE(w->w13_global_scale != NULL && w->w2_global_scale != NULL,
                       "nvfp4 weights need w13_global_scale and w2_global_scale");
        if (!w->on_device)
            for (int e = 0; e < w->num_experts; e++)
                MOE_EP_REQUIRE(w->w13_global_scale[e] > 0.0f &&
                                   isfinite(w->w13_global_scale[e]) &&
                                   w->w2_global_scale[e] > 0.0f && isfinite(w->w2_global_scale[e]),
                               "expert %d: nvfp4 global scales must be > 0 and finite",
                               w->first_expert + e);
    }
    MOE_EP_REQUIRE(w->on_device == 0 || w->on_device == 1, "on_device %d", w->on_device);
    if (l->cfg.backend == MOE_EP_BACKEND_REFERENCE)
        MOE_EP_REQUIRE(!w->on_device, "the reference backend takes weights in host memory");
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_layer_load_experts(moe_ep_layer_t layer, const moe_ep_expert_weights_t *w,
                                          moe_ep_stream_t stream)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL, "layer is NULL");
    MOE_EP_CHECK(check_weights(layer, w));
    MOE_EP_CHECK(layer->cfg.backend == MOE_EP_BACKEND_REFERENCE ? moe_ep_ref_load_experts(layer, w)
                                                                : moe_ep_split_load_experts(layer, w, stream));
    for (int e = 0; e < w->num_experts; e++) {
        uint8_t *flag = &layer->loaded[w->first_expert - layer->first_expert + e];
        layer->num_loaded += !*flag;
        *flag = 1;
    }
    return MOE_EP_SUCCESS;
}

/* Checks what can be checked on the host; expert ids are checked by the backend
 * (on the device for GPU backends) before any output is written. */
static moe_ep_status_t check_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *a, int need_out)
{
    MOE_EP_REQUIRE(a != NULL, "args is NULL");
    MOE_EP_REQUIRE(a->size == sizeof(moe_ep_forward_args_t),
                   "args.size %zu != sizeof(moe_ep_forward_args_t) %zu", a->size,
                   sizeof(moe_ep_forward_args_t));
    MOE_EP_REQUIRE(l->num_loaded == l->num_local_experts,
                   "%d of %d local experts have weights: load every expert before forward",
                   l->num_loaded, l->num_local_experts);
    if (l->cfg.path == MOE_EP_PATH_NVFP4)
        MOE_EP_REQUIRE(l->cfg.fc1_input_scale > 0.0f && l->cfg.fc2_input_scale > 0.0f,
                       "nvfp4: set fc1/fc2_input_scale or call moe_ep_layer_calibrate_nvfp4");
    MOE_EP_REQUIRE(a->x != NULL && a->topk_ids != NULL && a->topk_weights != NULL &&
                       (a->out != NULL || !need_out),
                   "x, topk_ids, topk_weights and out arrays must be given");
    MOE_EP_REQUIRE(a->num_tokens != NULL || a->num_tokens_device != NULL,
                   "num_tokens or num_tokens_device must be given");
    if (l->cfg.backend == MOE_EP_BACKEND_REFERENCE)
        MOE_EP_REQUIRE(a->num_tokens != NULL && a->num_tokens_device == NULL,
                       "the reference backend takes num_tokens on the host");
    int nr = l->group->local_ranks;
    for (int r = 0; r < nr; r++) {
        int t = a->num_tokens ? a->num_tokens[r] : 0;
        if (a->num_tokens)
            MOE_EP_REQUIRE(t >= 0 && t <= l->cfg.max_tokens_per_rank,
                           "rank %d: num_tokens %d not in [0, max_tokens_per_rank %d]",
                           l->group->first_rank + r, t, l->cfg.max_tokens_per_rank);
        if (t > 0 || a->num_tokens_device) /* device counts: unknown here, any may be > 0 */
            MOE_EP_REQUIRE(a->x[r] && a->topk_ids[r] && a->topk_weights[r] && (!need_out || a->out[r]),
                           "rank %d: NULL x, topk_ids, topk_weights or out with %s", l->group->first_rank + r,
                           a->num_tokens_device ? "num_tokens_device (every rank's arrays must be given)"
                                                : "tokens");
    }
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_layer_forward(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                     moe_ep_stream_t stream)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL, "layer is NULL");
    MOE_EP_CHECK(check_forward(layer, args, 1));
    if (layer->cfg.backend == MOE_EP_BACKEND_REFERENCE) return moe_ep_ref_forward(layer, args);
    if (layer->cfg.backend == MOE_EP_BACKEND_MEGA) return moe_ep_mega_forward(layer, args, stream);
    return moe_ep_split_forward(layer, args, stream);
}

moe_ep_status_t moe_ep_layer_calibrate_nvfp4(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                             float *fc1_input_scale, float *fc2_input_scale)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL, "layer is NULL");
    MOE_EP_REQUIRE(layer->cfg.path == MOE_EP_PATH_NVFP4, "calibration is for the nvfp4 path");
    if (layer->cfg.backend != MOE_EP_BACKEND_REFERENCE)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED,
                           "calibrate on a reference layer (host tensors) and pass the scales in the "
                           "config of a GPU layer");
    moe_ep_layer_config_t saved = layer->cfg;
    /* The scales are the output here: satisfy check_forward's nvfp4 test. */
    layer->cfg.fc1_input_scale = layer->cfg.fc2_input_scale = 1.0f;
    moe_ep_status_t st = check_forward(layer, args, 0);
    layer->cfg = saved;
    MOE_EP_CHECK(st);
    MOE_EP_REQUIRE(args->num_tokens != NULL, "calibration takes num_tokens on the host");
    float s1, s2;
    MOE_EP_CHECK(moe_ep_ref_calibrate_nvfp4(layer, args, &s1, &s2));
    layer->cfg.fc1_input_scale = s1;
    layer->cfg.fc2_input_scale = s2;
    if (fc1_input_scale) *fc1_input_scale = s1;
    if (fc2_input_scale) *fc2_input_scale = s2;
    return MOE_EP_SUCCESS;
}
