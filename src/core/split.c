/* The split backend on one GPU: buffers, weight loading, and the forward as a
 * fixed sequence of launches (plan, quantize + dispatch, GEMM1 + SwiGLU +
 * requant, GEMM2 + wire, combine), with no host synchronisation, so it can be
 * captured in a CUDA graph. The GEMM knobs of each forward come from
 * core/knobs.c; with config.autotune the first forward of each token bucket
 * (not captured) times the candidates first, and synchronises. */
#include "core/split.h"

#include "core/knobs.h"

#include "comm/comm.h"

#include "kernels/split_kernels.h"

#include <stdlib.h>
#include <string.h>

#ifdef MOE_EP_HAVE_CUDA
#include "core/cuda_status.h"

#define TUNE_RUNS 5           /* timed expert stages per autotune candidate */
#define TUNE_MAX_CANDIDATES 8

struct moe_ep_split_state {
    moe_ep_split_dims_t dims;
    moe_ep_split_bufs_t bufs;
    void *allocs[24];
    int num_allocs;
    uint8_t *staging; /* one expert's checkpoint */
    size_t staging_bytes;
    float *scratch;   /* weight preprocessing scratch */
    int forwarded;    /* a forward has run (for moe_ep_split_expert_stage) */
    moe_ep_xchg_t *xchg; /* NCCL groups: the token and output exchanges */
};

typedef struct {
    size_t bytes[24];
    int n;
} alloc_plan_t;

static int64_t rows_capacity(const moe_ep_layer_config_t *c, int local_ranks)
{
    return (int64_t)local_ranks * c->max_tokens_per_rank * c->top_k;
}

/* The activation rows folded once into fp16 (bufs.act16) for the 128-row register
 * tiles of both GPU backends (split's fold pass, mega's fold items), where a
 * forward of at most `rows` rows over E local experts can fold (moe_ep_a16_rows). */
static int split_act16(const moe_ep_layer_config_t *c, int64_t rows, int E)
{
    return c->backend != MOE_EP_BACKEND_REFERENCE && moe_ep_act16_on(c->path, c->hidden, c->intermediate, c->fp8_fast_accum) &&
           moe_ep_a16_rows(c->backend, c->path, rows, E);
}

/* The sizes of every device buffer, in allocation order (see split_create). */
static alloc_plan_t plan_allocs(const moe_ep_layer_config_t *c, int local_ranks, int E)
{
    moe_ep_format_t wf = moe_ep_path_weight_format(c->path), af = moe_ep_path_act_format(c->path);
    moe_ep_format_t yf = moe_ep_wire_format(c->wire);
    int64_t H = c->hidden, I = c->intermediate, rows = rows_capacity(c, local_ranks);
    int64_t fp8s = wf == MOE_EP_FORMAT_FP8_BLOCK;
    alloc_plan_t p = {{0}, 0};
    size_t *b = p.bytes;
    b[p.n++] = (size_t)(E * 2 * I * moe_ep_row_data_bytes(wf, H));                       /* w13 */
    b[p.n++] = (size_t)(E * 2 * I * (fp8s ? H / 128 * 4 : moe_ep_row_scale_bytes(wf, H))) + 16;
    b[p.n++] = (size_t)(E * H * moe_ep_row_data_bytes(wf, I));                           /* w2 */
    b[p.n++] = (size_t)(E * H * (fp8s ? I / 128 * 4 : moe_ep_row_scale_bytes(wf, I))) + 16;
    b[p.n++] = sizeof(float) * (size_t)E;                                                 /* w13_gs */
    b[p.n++] = sizeof(float) * (size_t)E;                                                 /* w2_gs */
    b[p.n++] = sizeof(int32_t) * (size_t)local_ranks;                                     /* tokens */
    b[p.n++] = sizeof(int32_t) * (size_t)E;                                               /* count */
    b[p.n++] = sizeof(int32_t) * (size_t)(E + 1);                                         /* offset */
    b[p.n++] = sizeof(int32_t) * (size_t)(E + 1);                                         /* tiles */
    b[p.n++] = sizeof(int32_t) * (size_t)rows;                                            /* slot_pos */
    b[p.n++] = sizeof(int32_t) * (size_t)rows;                                            /* row_of_slot */
    b[p.n++] = (size_t)(rows * moe_ep_row_data_bytes(af, H)) + 16;                        /* xq */
    b[p.n++] = (size_t)(rows * moe_ep_act_scale_stride(af, H)) + 16;
    b[p.n++] = (size_t)(rows * moe_ep_row_data_bytes(af, I)) + 16;                        /* aq */
    b[p.n++] = (size_t)(rows * moe_ep_act_scale_stride(af, I)) + 16;
    b[p.n++] = (size_t)(rows * moe_ep_row_data_bytes(yf, H)) + 16;                        /* y */
    b[p.n++] = (size_t)(rows * moe_ep_row_scale_bytes(yf, H)) + 16;
    b[p.n++] = (size_t)(3 * H * I * 2 + 3 * H * I / 32 + 64);                             /* staging */
    b[p.n++] = sizeof(float) * (size_t)((2 * I / 128) * (H / 128) + 128);                 /* scratch */
    int rec = moe_ep_weight_records_on(c->path, c->hidden, c->intermediate, c->fp8_fast_accum);
    b[p.n++] = (rec ? (size_t)(E * MOE_EP_WEIGHT_RECORD_BYTES(c->path, 2 * I, H)) : 0) + 16; /* w13_mult */
    b[p.n++] = (rec ? (size_t)(E * MOE_EP_WEIGHT_RECORD_BYTES(c->path, H, I)) : 0) + 16;     /* w2_mult */
    b[p.n++] = (split_act16(c, rows, E) ? (size_t)(rows * MOE_EP_ACT16_PITCH(H, I) * 2) : 0) + 16; /* act16 */
    b[p.n++] = (split_act16(c, rows, E) && moe_ep_act16_2_on(c->backend, c->path) ? (size_t)(rows * I * 2) : 0) + 16; /* act16_2 */
    return p;
}

size_t moe_ep_split_device_bytes(const moe_ep_layer_config_t *c, int world_size, int local_experts)
{
    return moe_ep_split_buffer_bytes(c, local_experts * world_size / c->num_experts, local_experts);
}

size_t moe_ep_split_buffer_bytes(const moe_ep_layer_config_t *c, int source_ranks, int local_experts)
{
    alloc_plan_t p = plan_allocs(c, source_ranks, local_experts);
    size_t total = 0;
    for (int i = 0; i < p.n; i++) total += p.bytes[i];
    return total;
}

static moe_ep_status_t cuda_fail(cudaError_t e, const char *what) { return MOE_EP_CUDA_FAIL(e, what); }

/* Device bytes of a split layer on an NCCL group: rows for the tokens of every
 * rank (the worst case of routing), the local experts' weights, exchanges. */
size_t moe_ep_comm_layer_device_bytes(moe_ep_group_t g, const moe_ep_layer_config_t *c)
{
    if (!g->comm) return 0;
    alloc_plan_t p = plan_allocs(c, g->world_size, c->num_experts / g->world_size);
    size_t total = moe_ep_xchg_device_bytes(c, g->world_size);
    for (int i = 0; i < p.n; i++) total += p.bytes[i];
    return total;
}

static void fill_dims(moe_ep_layer_t l, moe_ep_split_dims_t *d)
{
    const moe_ep_layer_config_t *c = &l->cfg;
    d->R = moe_ep_comm_source_ranks(l->group), d->E = l->num_local_experts, d->K = c->top_k;
    d->H = c->hidden, d->I = c->intermediate, d->T_max = c->max_tokens_per_rank;
    d->first_expert = l->first_expert, d->num_experts_global = c->num_experts;
    d->path = c->path, d->wire = c->wire, d->swiglu_limit = c->swiglu_limit, d->fp8_fast_accum = c->fp8_fast_accum;
    d->tile_wait_ns = moe_ep_tile_wait_ns(c->timeout_seconds);
    d->fc1_scale = c->fc1_input_scale > 0 ? c->fc1_input_scale : 1.0f;
    d->fc2_scale = c->fc2_input_scale > 0 ? c->fc2_input_scale : 1.0f;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, l->group->device);
    d->num_sms = sms > 0 ? sms : 1;
    if (c->num_sms > 0 && c->num_sms < d->num_sms) d->num_sms = c->num_sms; /* the SMs given to the layer */
}

moe_ep_status_t moe_ep_split_create(moe_ep_layer_t l)
{
    struct moe_ep_split_state *s = calloc(1, sizeof *s);
    if (!s) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "split state");
    l->split = s;
    cudaError_t e = cudaSetDevice(l->group->device);
    if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice");
    fill_dims(l, &s->dims);
    alloc_plan_t p = plan_allocs(&l->cfg, moe_ep_comm_source_ranks(l->group), l->num_local_experts);
    for (int i = 0; i < p.n; i++) {
        e = cudaMalloc(&s->allocs[i], p.bytes[i]);
        if (e != cudaSuccess) return cuda_fail(e, "split backend buffers");
        s->num_allocs = i + 1;
    }
    void **a = s->allocs;
    moe_ep_split_bufs_t *b = &s->bufs;
    b->w13 = a[0], b->w13_scales = a[1], b->w2 = a[2], b->w2_scales = a[3];
    b->w13_gs = a[4], b->w2_gs = a[5], b->tokens = a[6], b->expert_count = a[7];
    b->expert_offset = a[8], b->tile_offset = a[9], b->slot_pos = a[10], b->row_of_slot = a[11];
    b->xq = a[12], b->xq_scales = a[13], b->aq = a[14], b->aq_scales = a[15];
    b->y = a[16], b->y_scales = a[17];
    s->staging = a[18], s->staging_bytes = p.bytes[18], s->scratch = a[19];
    int rec = moe_ep_weight_records_on(l->cfg.path, l->cfg.hidden, l->cfg.intermediate, l->cfg.fp8_fast_accum);
    b->w13_mult = rec ? a[20] : NULL, b->w2_mult = rec ? a[21] : NULL;
    b->act16 = split_act16(&l->cfg, rows_capacity(&l->cfg, moe_ep_comm_source_ranks(l->group)), l->num_local_experts) ? a[22] : NULL;
    b->act16_2 = b->act16 && moe_ep_act16_2_on(l->cfg.backend, l->cfg.path) ? a[23] : NULL;
    b->error = l->group->error_dev, b->error_mapped = l->group->error_mapped_dev;
    if (l->group->comm && l->cfg.backend == MOE_EP_BACKEND_SPLIT) /* mega: its own links (mega.c) */
        return moe_ep_xchg_create(l->group, &l->cfg, &s->xchg);
    return MOE_EP_SUCCESS;
}

void moe_ep_split_destroy(moe_ep_layer_t l)
{
    struct moe_ep_split_state *s = l->split;
    if (!s) return;
    cudaSetDevice(l->group->device);
    moe_ep_xchg_destroy(l->group, s->xchg);
    for (int i = 0; i < s->num_allocs; i++) cudaFree(s->allocs[i]);
    free(s);
    l->split = NULL;
}

/* Bytes of one expert's checkpoint arrays in format f (host layout). */
static void checkpoint_bytes(moe_ep_layer_t l, moe_ep_format_t f, size_t sz[4])
{
    moe_ep_expert_bytes_t b = moe_ep_expert_bytes(f, l->cfg.hidden, l->cfg.intermediate);
    sz[0] = (size_t)b.w13_data, sz[1] = (size_t)b.w13_scales, sz[2] = (size_t)b.w2_data, sz[3] = (size_t)b.w2_scales;
}

/* Host checkpoint: one expert at a time through the staging buffer. */
static moe_ep_status_t load_from_host(moe_ep_layer_t l, const moe_ep_expert_weights_t *w, cudaStream_t st)
{
    struct moe_ep_split_state *s = l->split;
    size_t sz[4];
    checkpoint_bytes(l, w->format, sz);
    const void *src[4] = {w->w13, w->w13_scales, w->w2, w->w2_scales};
    for (int i = 0; i < w->num_experts; i++) {
        uint8_t *dst[4], *p = s->staging;
        for (int j = 0; j < 4; j++) {
            dst[j] = p;
            p += (sz[j] + 15) / 16 * 16;
            if (src[j] && sz[j]) {
                cudaError_t e = cudaMemcpyAsync(dst[j], (const uint8_t *)src[j] + i * sz[j], sz[j],
                                                cudaMemcpyHostToDevice, st);
                if (e != cudaSuccess) return cuda_fail(e, "weight upload");
            }
        }
        float *gs = s->scratch + 32; /* two floats after the prep scratch's first words */
        if (w->format == MOE_EP_FORMAT_NVFP4) {
            cudaMemcpyAsync(gs, w->w13_global_scale + i, sizeof(float), cudaMemcpyHostToDevice, st);
            cudaMemcpyAsync(gs + 1, w->w2_global_scale + i, sizeof(float), cudaMemcpyHostToDevice, st);
        }
        int le = w->first_expert - l->first_expert + i;
        MOE_EP_CHECK(moe_ep_launch_prep_weights(&s->dims, &s->bufs, w->format, le, 1, dst[0], dst[1],
                                                w->format == MOE_EP_FORMAT_NVFP4 ? gs : NULL, dst[2], dst[3],
                                                w->format == MOE_EP_FORMAT_NVFP4 ? gs + 1 : NULL,
                                                s->scratch + 64, (moe_ep_stream_t)st));
        cudaError_t e = cudaStreamSynchronize(st); /* the staging buffer is reused */
        if (e != cudaSuccess) return cuda_fail(e, "weight preprocessing");
    }
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_split_load_experts(moe_ep_layer_t l, const moe_ep_expert_weights_t *w,
                                          moe_ep_stream_t stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e = cudaSetDevice(l->group->device);
    if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice");
    if (!w->on_device) return load_from_host(l, w, st);
    struct moe_ep_split_state *s = l->split;
    MOE_EP_CHECK(moe_ep_launch_prep_weights(&s->dims, &s->bufs, w->format, w->first_expert - l->first_expert,
                                            w->num_experts, w->w13, w->w13_scales, w->w13_global_scale, w->w2,
                                            w->w2_scales, w->w2_global_scale, s->scratch + 64, stream));
    e = cudaStreamSynchronize(st);
    return e == cudaSuccess ? MOE_EP_SUCCESS : cuda_fail(e, "weight preprocessing");
}

static void fill_io(const moe_ep_layer_t l, const moe_ep_forward_args_t *a, moe_ep_split_io_t *io)
{
    memset(io, 0, sizeof *io);
    for (int r = 0; r < l->group->local_ranks; r++) {
        io->x[r] = a->x[r], io->ids[r] = a->topk_ids[r];
        io->weights[r] = a->topk_weights[r], io->out[r] = a->out[r];
        io->t_host[r] = a->num_tokens ? a->num_tokens[r] : 0;
    }
    io->t_device = a->num_tokens_device;
}

/* Work enqueued on the stream is being captured into a graph: then no file
 * I/O and no synchronisation. A failed query counts as capturing. */
static int capturing(cudaStream_t st)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) {
        (void)cudaGetLastError(); /* not a launch error of this forward */
        return 1;
    }
    return cs != cudaStreamCaptureStatusNone;
}

/* rows, E: the forward's rows and local experts (the bf16 tile's form) */
static void set_knobs(struct moe_ep_split_state *s, const moe_ep_knobs_t *k, int64_t rows, int E)
{
    s->dims.tile_rows = k->gemm_tile_rows, s->dims.gemm_ctas_per_sm = k->gemm_ctas_per_sm;
    s->dims.bf16_swapped = k->gemm_tile_rows == 128 && moe_ep_bf16_swapped(rows, E);
    s->dims.a16 = k->gemm_tile_rows == 128 && s->bufs.act16 && moe_ep_a16_rows(MOE_EP_BACKEND_SPLIT, s->dims.path, rows, E);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static moe_ep_status_t record_runs(moe_ep_enqueue_fn fn, void *ctx, cudaStream_t st, cudaEvent_t *ev)
{
    MOE_EP_CHECK(fn(ctx, (moe_ep_stream_t)st)); /* warm-up */
    for (int i = 0; i < TUNE_RUNS; i++) {
        cudaError_t e = cudaEventRecord(ev[2 * i], st);
        if (e != cudaSuccess) return cuda_fail(e, "cudaEventRecord");
        MOE_EP_CHECK(fn(ctx, (moe_ep_stream_t)st));
        if ((e = cudaEventRecord(ev[2 * i + 1], st)) != cudaSuccess) return cuda_fail(e, "cudaEventRecord");
    }
    cudaError_t e = cudaEventSynchronize(ev[2 * TUNE_RUNS - 1]);
    return e == cudaSuccess ? MOE_EP_SUCCESS : cuda_fail(e, "autotune: expert stage");
}

moe_ep_status_t moe_ep_time_median_us(moe_ep_enqueue_fn fn, void *ctx, moe_ep_stream_t stream, double *us)
{
    cudaStream_t st = (cudaStream_t)stream;
    cudaEvent_t ev[2 * TUNE_RUNS];
    float ms[TUNE_RUNS];
    int made = 0;
    cudaError_t e = cudaSuccess;
    while (made < 2 * TUNE_RUNS && (e = cudaEventCreate(&ev[made])) == cudaSuccess) made++;
    moe_ep_status_t r = e == cudaSuccess ? record_runs(fn, ctx, st, ev) : cuda_fail(e, "cudaEventCreate");
    for (int i = 0; i < TUNE_RUNS && r == MOE_EP_SUCCESS; i++)
        if ((e = cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1])) != cudaSuccess)
            r = cuda_fail(e, "cudaEventElapsedTime");
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    if (r != MOE_EP_SUCCESS) return r;
    qsort(ms, TUNE_RUNS, sizeof ms[0], cmp_float);
    *us = 1e3 * ms[TUNE_RUNS / 2];
    return MOE_EP_SUCCESS;
}

static moe_ep_status_t enqueue_experts(void *state, moe_ep_stream_t stream)
{
    struct moe_ep_split_state *s = state;
    return moe_ep_launch_experts(&s->dims, &s->bufs, stream);
}

/* Times each candidate on this forward's rows (after its own plan and
 * dispatch; the plan is redone for each tile size) and keeps the fastest.
 * Nothing is kept when the device error word is set: the kernels did nothing. */
static moe_ep_status_t tune_bucket(moe_ep_layer_t l, const moe_ep_split_io_t *io, moe_ep_stream_t stream,
                                   int tokens, int64_t rows, const moe_ep_knobs_t *cand, int n)
{
    struct moe_ep_split_state *s = l->split;
    MOE_EP_CHECK(moe_ep_launch_plan(&s->dims, &s->bufs, io, stream));
    MOE_EP_CHECK(moe_ep_launch_dispatch(&s->dims, &s->bufs, io, stream));
    double us[TUNE_MAX_CANDIDATES];
    int best = 0;
    for (int i = 0; i < n; i++) {
        set_knobs(s, &cand[i], rows, l->num_local_experts);
        MOE_EP_CHECK(moe_ep_launch_plan(&s->dims, &s->bufs, io, stream));
        MOE_EP_CHECK(moe_ep_time_median_us(enqueue_experts, s, stream, &us[i]));
        if (us[i] < us[best]) best = i;
    }
    MOE_EP_CHECK(moe_ep_launch_publish_error(&s->bufs, stream));
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) return cuda_fail(e, "autotune");
    if (*l->group->error_host != 0) return MOE_EP_SUCCESS;
    return moe_ep_knobs_set_tuned(l, tokens, &cand[best], us[best]);
}

/* config.autotune: at the first forward of a token bucket (never while
 * capturing), time the candidates; the forward then runs with the winner. */
static moe_ep_status_t autotune(moe_ep_layer_t l, const moe_ep_split_io_t *io, moe_ep_stream_t stream,
                                int tokens, int64_t rows)
{
    moe_ep_knobs_t cand[TUNE_MAX_CANDIDATES], k;
    int n = 0;
    MOE_EP_CHECK(moe_ep_knobs_tune_candidates(l, tokens, cand, TUNE_MAX_CANDIDATES, &n));
    if (n == 0) return MOE_EP_SUCCESS;
    MOE_EP_CHECK(moe_ep_knobs_resolve(l, tokens, rows, 1, &k, NULL));
    set_knobs(l->split, &k, rows, l->num_local_experts);
    return tune_bucket(l, io, stream, tokens, rows, cand, n);
}

/* NCCL group: this rank's tokens go to every rank, each runs the emulated
 * group's plan, dispatch and expert stage on the rows of its own experts
 * (from every source rank), the output rows go back, and each rank combines
 * its tokens. Knobs are not autotuned here (tuning would be collective). */
static moe_ep_status_t nccl_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *args,
                                    moe_ep_stream_t stream, int capture)
{
    struct moe_ep_split_state *s = l->split;
    moe_ep_split_io_t io;
    int tokens;
    int64_t rows;
    moe_ep_knobs_t k;
    MOE_EP_CHECK(moe_ep_knobs_forward_shape(l, args, &tokens, &rows));
    MOE_EP_CHECK(moe_ep_knobs_resolve(l, tokens, rows, !capture, &k, NULL));
    set_knobs(s, &k, rows, l->num_local_experts);
    MOE_EP_CHECK(moe_ep_xchg_tokens(l->group, s->xchg, &s->bufs, args, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_plan(&s->dims, &s->bufs, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_dispatch(&s->dims, &s->bufs, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_experts(&s->dims, &s->bufs, stream));
    MOE_EP_CHECK(moe_ep_xchg_outputs(l->group, s->xchg, &s->dims, &s->bufs, args, stream));
    MOE_EP_CHECK(moe_ep_launch_publish_error(&s->bufs, stream));
    s->forwarded = 1;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_split_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *args,
                                     moe_ep_stream_t stream)
{
    struct moe_ep_split_state *s = l->split;
    cudaError_t e = cudaSetDevice(l->group->device);
    if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice");
    s->dims.fc1_scale = l->cfg.fc1_input_scale > 0 ? l->cfg.fc1_input_scale : 1.0f;
    s->dims.fc2_scale = l->cfg.fc2_input_scale > 0 ? l->cfg.fc2_input_scale : 1.0f;
    moe_ep_split_io_t io;
    fill_io(l, args, &io);
    int tokens, capture = capturing((cudaStream_t)stream);
    int64_t rows;
    moe_ep_knobs_t k;
    if (s->xchg) return nccl_forward(l, args, stream, capture);
    MOE_EP_CHECK(moe_ep_knobs_forward_shape(l, args, &tokens, &rows));
    if (!capture) MOE_EP_CHECK(autotune(l, &io, stream, tokens, rows));
    MOE_EP_CHECK(moe_ep_knobs_resolve(l, tokens, rows, !capture, &k, NULL));
    set_knobs(s, &k, rows, l->num_local_experts);
    MOE_EP_CHECK(moe_ep_launch_plan(&s->dims, &s->bufs, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_dispatch(&s->dims, &s->bufs, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_experts(&s->dims, &s->bufs, stream));
    MOE_EP_CHECK(moe_ep_launch_combine(&s->dims, &s->bufs, &io, stream));
    MOE_EP_CHECK(moe_ep_launch_publish_error(&s->bufs, stream));
    s->forwarded = 1;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_split_kernel_view(moe_ep_layer_t l, const moe_ep_forward_args_t *args,
                                         moe_ep_split_dims_t *dims, moe_ep_split_bufs_t *bufs,
                                         moe_ep_split_io_t *io)
{
    struct moe_ep_split_state *s = l->split;
    MOE_EP_REQUIRE(s != NULL, "the layer has no GPU buffers");
    s->dims.fc1_scale = l->cfg.fc1_input_scale > 0 ? l->cfg.fc1_input_scale : 1.0f;
    s->dims.fc2_scale = l->cfg.fc2_input_scale > 0 ? l->cfg.fc2_input_scale : 1.0f;
    *dims = s->dims, *bufs = s->bufs;
    if (args) fill_io(l, args, io);
    return MOE_EP_SUCCESS;
}

int moe_ep_stream_capturing(moe_ep_stream_t stream) { return capturing((cudaStream_t)stream); }

moe_ep_status_t moe_ep_split_expert_stage(moe_ep_layer_t l, moe_ep_stream_t stream)
{
    MOE_EP_REQUIRE(l != NULL && l->split != NULL && l->split->forwarded,
                   "the expert stage runs on the rows of a previous split forward");
    cudaSetDevice(l->group->device);
    return moe_ep_launch_experts(&l->split->dims, &l->split->bufs, stream);
}

#else /* no CUDA: every entry point says so */

size_t moe_ep_comm_layer_device_bytes(moe_ep_group_t g, const moe_ep_layer_config_t *c)
{
    (void)g, (void)c;
    return 0;
}

size_t moe_ep_split_device_bytes(const moe_ep_layer_config_t *c, int world_size, int local_experts)
{
    (void)c, (void)world_size, (void)local_experts;
    return 0;
}

size_t moe_ep_split_buffer_bytes(const moe_ep_layer_config_t *c, int source_ranks, int local_experts)
{
    (void)c, (void)source_ranks, (void)local_experts;
    return 0;
}

moe_ep_status_t moe_ep_split_create(moe_ep_layer_t l)
{
    (void)l;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the split backend needs a CUDA build");
}

void moe_ep_split_destroy(moe_ep_layer_t l) { (void)l; }

moe_ep_status_t moe_ep_split_load_experts(moe_ep_layer_t l, const moe_ep_expert_weights_t *w, moe_ep_stream_t s)
{
    (void)l, (void)w, (void)s;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the split backend needs a CUDA build");
}

moe_ep_status_t moe_ep_split_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *a, moe_ep_stream_t s)
{
    (void)l, (void)a, (void)s;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the split backend needs a CUDA build");
}

moe_ep_status_t moe_ep_split_kernel_view(moe_ep_layer_t l, const moe_ep_forward_args_t *a,
                                         moe_ep_split_dims_t *d, moe_ep_split_bufs_t *b, moe_ep_split_io_t *io)
{
    (void)l, (void)a, (void)d, (void)b, (void)io;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "GPU backends need a CUDA build");
}

int moe_ep_stream_capturing(moe_ep_stream_t s)
{
    (void)s;
    return 0;
}

moe_ep_status_t moe_ep_split_expert_stage(moe_ep_layer_t l, moe_ep_stream_t s)
{
    (void)l, (void)s;
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "the split backend needs a CUDA build");
}
#endif
