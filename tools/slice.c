/* The EP8 slice on one GPU (see slice.h), shared by `moe_ep bench` and
 * `moe_ep tune`. */
#define _POSIX_C_SOURCE 200809L
#include "slice.h"

#include <errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int slice_needs_gpu_build(const char *tool)
{
    fprintf(stderr, "moe_ep %s: needs a GPU build (this moe_ep was built without CUDA)\n", tool);
    return 2;
}

/* ---- option lists ---------------------------------------------------------------- */

/* Splits a comma list into at most max items of < 32 characters; returns the count or -1. */
int slice_split_list(const char *s, char items[][32], int max)
{
    int n = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        if (n == max || len == 0 || len >= 32) return -1;
        memcpy(items[n], s, len);
        items[n++][len] = '\0';
        s += len + (s[len] == ',');
    }
    return n;
}

int slice_name_index(const char *s, const char *(*name)(int), int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, name(i)) == 0) return i;
    return -1;
}

const char *slice_path_str(int i) { return moe_ep_path_name((moe_ep_path_t)i); }
const char *slice_wire_str(int i) { return moe_ep_wire_name((moe_ep_wire_t)i); }
const char *slice_backend_str(int i) { return moe_ep_backend_name((moe_ep_backend_t)i); }

int slice_parse_int(const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

int slice_parse_tokens(const char *v, int *tokens)
{
    char items[SLICE_MAX_LIST][32];
    int n = slice_split_list(v, items, SLICE_MAX_LIST);
    for (int i = 0; i < n; i++)
        if (slice_parse_int(items[i], 1, 1 << 20, &tokens[i])) return -1;
    return n > 0 ? n : -1;
}

int slice_parse_paths(const char *v, moe_ep_path_t *paths)
{
    char items[MOE_EP_PATH_COUNT_][32];
    if (strcmp(v, "all") == 0) {
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) paths[p] = (moe_ep_path_t)p;
        return MOE_EP_PATH_COUNT_;
    }
    int n = slice_split_list(v, items, MOE_EP_PATH_COUNT_);
    for (int i = 0; i < n; i++)
        if ((int)(paths[i] = (moe_ep_path_t)slice_name_index(items[i], slice_path_str, MOE_EP_PATH_COUNT_)) < 0)
            return -1;
    return n > 0 ? n : -1;
}

int slice_parse_wire(const char *v, moe_ep_wire_t *wire)
{
    int w = slice_name_index(v, slice_wire_str, MOE_EP_WIRE_COUNT_);
    if (w < 0) return -1;
    *wire = (moe_ep_wire_t)w;
    return 0;
}

int slice_parse_args(int argc, char **argv, const char *tool, int (*option)(void *, const char *, const char *),
                     void (*usage)(void), void *opts)
{
    for (int i = 0; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(), 1;
        if (i + 1 >= argc) return fprintf(stderr, "moe_ep %s: %s needs a value\n", tool, argv[i]), 2;
        int r = option(opts, argv[i], argv[i + 1]);
        if (r == -2) return fprintf(stderr, "moe_ep %s: unknown option %s\n", tool, argv[i]), usage(), 2;
        if (r) return fprintf(stderr, "moe_ep %s: bad value %s for %s\n", tool, argv[i + 1], argv[i]), 2;
    }
    return 0;
}

#ifdef MOE_EP_HAVE_CUDA

#include "core/split.h"
#include "synth.h"

#include <math.h>
#include <unistd.h>

/* ---- status checks ------------------------------------------------------------------ */

int slice_cuda_ok(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return 1;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "moe_ep: %s:%d: %s: %s\n", base ? base + 1 : file, line, what, cudaGetErrorString(e));
    return 0;
}

int slice_layer_ok(moe_ep_status_t st, const char *what)
{
    if (st == MOE_EP_SUCCESS) return 1;
    fprintf(stderr, "moe_ep: %s: %s: %s\n", what, moe_ep_status_string(st), moe_ep_last_error());
    return 0;
}

int slice_cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- timing ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median of the n timed steps' times (us); ev[2 i], ev[2 i + 1] bracket step i. */
static int elapsed_median(cudaEvent_t *ev, int n, double *median_us)
{
    double *ms = malloc(sizeof(double) * (size_t)n);
    int ok = ms != NULL;
    for (int i = 0; ok && i < n; i++) {
        float t = 0;
        ok = CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
        if (ok) ms[i] = t;
    }
    if (ok) *median_us = 1e3 * median(ms, n);
    free(ms);
    return ok;
}

/* One step of one operand: the untimed pre (may be NULL), then, when ev is
 * given, op between the two events ev[0], ev[1]. */
static int run_step(void *ctx, step_fn pre, step_fn op, int iter, cudaStream_t s, cudaEvent_t *ev)
{
    int ok = !pre || pre(ctx, iter, s);
    ok = ok && (!ev || CK(cudaEventRecord(ev[0], s)));
    ok = ok && op(ctx, iter, s);
    return ok && (!ev || CK(cudaEventRecord(ev[1], s)));
}

/* n operands (ctx[j]) timed in turn: every round runs each operand's step
 * once, the order reversed every other round, so that a drift of the GPU's
 * clocks over the run, or a step's effect on the next one (the GPU's power
 * state after a long step), falls on every operand alike. `warmup` untimed
 * rounds, then `iters` timed ones; median_us[j]: operand j's median step (us).
 * A bench that timed each backend's steps in one block measured the second
 * backend 1-5 % slower than when it ran alone or first (2026-11-30). */
int slice_time_interleaved(void *const *ctx, int n, step_fn pre, step_fn op, int warmup, int iters,
                           cudaStream_t s, double *median_us)
{
    cudaEvent_t *ev = calloc((size_t)iters * 2 * (size_t)n, sizeof *ev);
    int ok = ev != NULL && n >= 1, made = 0;
    for (; ok && made < 2 * iters * n; made++) ok = CK(cudaEventCreate(&ev[made]));
    for (int i = 0; ok && i < warmup + iters; i++)
        for (int k = 0; ok && k < n; k++) {
            int j = i % 2 ? n - 1 - k : k, timed = i >= warmup;
            ok = run_step(ctx[j], pre, op, i, s, timed ? &ev[2 * ((size_t)j * iters + (i - warmup))] : NULL);
        }
    ok = CK(cudaStreamSynchronize(s)) && ok;
    for (int j = 0; ok && j < n; j++) ok = elapsed_median(&ev[2 * (size_t)j * iters], iters, &median_us[j]);
    for (int i = 0; i < made; i++)
        if (ev[i]) CK(cudaEventDestroy(ev[i]));
    free(ev);
    return ok;
}

/* Runs warm-up steps, then `iters` timed ones; each timed one is `op` between
 * two events, after the untimed `pre` (may be NULL). Median in microseconds. */
int slice_time_steps(void *ctx, step_fn pre, step_fn op, int warmup, int iters, cudaStream_t s,
                     double *median_us)
{
    return slice_time_interleaved(&ctx, 1, pre, op, warmup, iters, s, median_us);
}

/* ---- data ------------------------------------------------------------------------- */

static int make_checkpoint(slice_t *sl)
{
    int64_t n13 = 2 * (int64_t)sl->I * sl->H, n2 = (int64_t)sl->H * sl->I;
    sl->w13 = malloc(sizeof(uint16_t) * (size_t)(n13 * sl->E8));
    sl->w2 = malloc(sizeof(uint16_t) * (size_t)(n2 * sl->E8));
    if (!sl->w13 || !sl->w2) return fprintf(stderr, "moe_ep: out of host memory\n"), 0;
    for (int e = 0; e < sl->E8; e++)
        synth_expert(sl->w13 + e * n13, sl->w2 + e * n2, e, sl->H, sl->I, SLICE_SEED, slice_cpu_threads());
    return 1;
}

/* Global expert ids of rank q: the slice's ids in[j] (j = t K + k) moved onto
 * the experts of rank (q + j) % R. in and out may be the same array. */
static void spread_ids(const slice_t *sl, const int32_t *in, int32_t *out, int q, size_t n)
{
    for (size_t j = 0; j < n; j++) out[j] = in[j] + sl->E8 * (int32_t)(((size_t)q + j) % (size_t)sl->R);
}

/* Each emulated rank's ids (R > 1: spread over the experts of every rank) and output. */
static int make_rank_inputs(slice_t *sl, dset_t *d)
{
    size_t kn = (size_t)sl->maxT * (size_t)sl->K, xn = (size_t)sl->maxT * (size_t)sl->H;
    d->rank_ids[0] = d->ids, d->rank_out[0] = d->out;
    if (sl->R == 1 || sl->self >= 0) return 1; /* NCCL: ids are already rank self's */
    int32_t *h = malloc(sizeof(int32_t) * kn);
    int ok = h != NULL;
    for (int q = 0; ok && q < sl->R; q++) {
        spread_ids(sl, d->host_ids, h, q, kn);
        ok = CK(cudaMalloc((void **)&d->rank_ids[q], sizeof(int32_t) * kn)) &&
             CK(cudaMemcpy(d->rank_ids[q], h, sizeof(int32_t) * kn, cudaMemcpyHostToDevice)) &&
             (q == 0 || CK(cudaMalloc((void **)&d->rank_out[q], sizeof(uint16_t) * xn)));
    }
    free(h);
    return ok;
}

static int make_set(slice_t *sl, int i)
{
    dset_t *d = &sl->sets[i];
    size_t T = (size_t)sl->maxT, xn = T * (size_t)sl->H, kn = T * (size_t)sl->K;
    uint16_t *hx = malloc(sizeof(uint16_t) * xn);
    float *hw = malloc(sizeof(float) * kn);
    d->host_ids = malloc(sizeof(int32_t) * kn);
    int ok = hx && hw && d->host_ids;
    if (ok) {
        synth_bf16_parallel(hx, (int64_t)xn, 1 << 20, 1.0f, SLICE_SEED, (1ull << 40) + (uint64_t)i * 4096, slice_cpu_threads());
        synth_routing(d->host_ids, hw, sl->maxT, sl->K, sl->E8, SLICE_SEED, (1ull << 41) + (uint64_t)i);
        if (sl->self >= 0) spread_ids(sl, d->host_ids, d->host_ids, sl->self, kn);
    }
    ok = ok && CK(cudaMalloc((void **)&d->x, sizeof(uint16_t) * xn)) && CK(cudaMalloc((void **)&d->out, sizeof(uint16_t) * xn));
    ok = ok && CK(cudaMalloc((void **)&d->ids, sizeof(int32_t) * kn)) && CK(cudaMalloc((void **)&d->wt, sizeof(float) * kn));
    ok = ok && CK(cudaMemcpy(d->x, hx, sizeof(uint16_t) * xn, cudaMemcpyHostToDevice));
    ok = ok && CK(cudaMemcpy(d->ids, d->host_ids, sizeof(int32_t) * kn, cudaMemcpyHostToDevice));
    ok = ok && CK(cudaMemcpy(d->wt, hw, sizeof(float) * kn, cudaMemcpyHostToDevice));
    free(hx), free(hw);
    return ok && make_rank_inputs(sl, d);
}

void slice_free(slice_t *sl)
{
    for (int i = 0; i < SLICE_MAX_SETS; i++) {
        dset_t *d = &sl->sets[i];
        void *bufs[] = {d->x, d->out, d->ids, d->wt};
        for (int j = 0; j < 4; j++)
            if (bufs[j]) CK(cudaFree(bufs[j]));
        for (int q = 0; q < SLICE_MAX_RANKS && sl->R > 1 && sl->self < 0; q++) {
            if (d->rank_ids[q]) CK(cudaFree(d->rank_ids[q]));
            if (q > 0 && d->rank_out[q]) CK(cudaFree(d->rank_out[q]));
        }
        free(d->host_ids);
    }
    if (sl->flush) CK(cudaFree(sl->flush));
    if (sl->flush_sink) CK(cudaFree(sl->flush_sink));
    free(sl->w13), free(sl->w2);
    memset(sl, 0, sizeof *sl);
}

int slice_make(slice_t *sl, const geometry_t *g, int maxT, int R)
{
    return slice_make_rank(sl, g, maxT, R, -1);
}

int slice_make_rank(slice_t *sl, const geometry_t *g, int maxT, int R, int self)
{
    int l2 = 0, dev = 0, max_r = self >= 0 ? SLICE_MAX_WORLD : SLICE_MAX_RANKS;
    memset(sl, 0, sizeof *sl);
    sl->g = g, sl->E8 = g->num_experts / 8, sl->K = g->top_k, sl->H = g->hidden, sl->I = g->intermediate;
    sl->maxT = maxT, sl->R = R < 1 ? 1 : R > max_r ? max_r : R;
    sl->self = self < 0 ? -1 : self;
    if (sl->self >= sl->R) return fprintf(stderr, "moe_ep: rank %d of a group of %d\n", self, sl->R), 0;
    if (!CK(cudaGetDevice(&dev)) || !CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev))) return 0;
    sl->flush_bytes = 2 * (size_t)l2;
    double set_bytes = (double)maxT * sl->H * 4.0 + (double)maxT * sl->K * 8.0;
    sl->nsets = (int)ceil(2.0 * l2 / set_bytes);
    sl->nsets = sl->nsets < 2 ? 2 : sl->nsets > SLICE_MAX_SETS ? SLICE_MAX_SETS : sl->nsets;
    fprintf(stderr, "%s: generating %d experts and %d input sets\n", g->name, sl->E8, sl->nsets);
    int ok = CK(cudaMalloc(&sl->flush, sl->flush_bytes)) && CK(cudaMemset(sl->flush, 0, sl->flush_bytes)) &&
             CK(cudaMalloc((void **)&sl->flush_sink, sizeof *sl->flush_sink)) && make_checkpoint(sl);
    for (int i = 0; ok && i < sl->nsets; i++) ok = make_set(sl, i);
    return ok;
}

/* ---- layers and steps ------------------------------------------------------------- */

/* Every local rank q of g (emulated: all; NCCL: this process's) gets the slice's experts. */
static moe_ep_status_t load_slice_weights(moe_ep_layer_t l, const slice_t *sl, moe_ep_group_t g, cudaStream_t s)
{
    int first = 0, n = 0;
    moe_ep_status_t st = moe_ep_group_local_ranks(g, &first, &n);
    for (int q = first; q < first + n && st == MOE_EP_SUCCESS; q++) {
        moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
        w.first_expert = q * sl->E8, w.num_experts = sl->E8, w.w13 = sl->w13, w.w2 = sl->w2;
        st = moe_ep_layer_load_experts(l, &w, (moe_ep_stream_t)s);
    }
    if (st == MOE_EP_SUCCESS && !CK(cudaStreamSynchronize(s))) st = MOE_EP_ERROR_CUDA;
    return st;
}

moe_ep_status_t slice_create_layer(const slice_t *sl, moe_ep_path_t p, moe_ep_wire_t w, moe_ep_backend_t b,
                                   moe_ep_group_t g, cudaStream_t s, moe_ep_layer_t *l)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = sl->E8 * sl->R, c.top_k = sl->K, c.hidden = sl->H, c.intermediate = sl->I;
    c.max_tokens_per_rank = sl->maxT, c.path = p, c.wire = w, c.backend = b;
    c.swiglu_limit = sl->g->swiglu_limit;
    /* NVFP4 static activation scales: x ~ N(0, 1) (amax about 5), SwiGLU output amax about 16. */
    c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 16.0f;
    c.timeout_seconds = sl->self >= 0 ? SLICE_NCCL_TIMEOUT_S : 0.0; /* seconds; 0: the default 10 */
    c.fp8_fast_accum = sl->fp8_fast_accum;
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT; /* copied by layer_create */
    if (sl->tile_rows > 0) k.gemm_tile_rows = sl->tile_rows, c.knobs = &k;
    *l = NULL;
    moe_ep_status_t st = moe_ep_layer_create(g, &c, l);
    if (st == MOE_EP_SUCCESS) st = load_slice_weights(*l, sl, g, s);
    return st;
}

int slice_flush_step(void *ctx, int iter, cudaStream_t s)
{
    const slice_t *sl = ((const run_ctx_t *)ctx)->sl;
    if (sl->flush_kind == SLICE_FLUSH_NONE) return 1;
    if (sl->flush_kind == SLICE_FLUSH_MEMSET) return CK(cudaMemsetAsync(sl->flush, iter & 0xFF, sl->flush_bytes, s));
    return CK(slice_l2_read_sweep(sl->flush, sl->flush_bytes, sl->flush_sink, s));
}

int slice_forward_step(void *ctx, int iter, cudaStream_t s)
{
    const run_ctx_t *c = ctx;
    const dset_t *d = &c->sl->sets[iter % c->sl->nsets];
    const uint16_t *x[SLICE_MAX_RANKS];
    const int32_t *ids[SLICE_MAX_RANKS];
    const float *wt[SLICE_MAX_RANKS];
    uint16_t *out[SLICE_MAX_RANKS];
    int32_t nt[SLICE_MAX_RANKS];
    int local = c->sl->self >= 0 ? 1 : c->sl->R; /* NCCL: this process's rank only */
    for (int q = 0; q < local; q++)
        x[q] = d->x, ids[q] = d->rank_ids[q], wt[q] = d->wt, out[q] = d->rank_out[q], nt[q] = c->T;
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = nt, a.x = x, a.topk_ids = ids, a.topk_weights = wt, a.out = out;
    return slice_layer_ok(moe_ep_layer_forward(c->layer, &a, (moe_ep_stream_t)s), "moe_ep_layer_forward");
}

int slice_forward_flush_step(void *ctx, int iter, cudaStream_t s)
{
    return slice_forward_step(ctx, iter, s) && slice_flush_step(ctx, iter, s);
}

int slice_stage_step(void *ctx, int iter, cudaStream_t s)
{
    const run_ctx_t *c = ctx;
    (void)iter;
    return slice_layer_ok(moe_ep_split_expert_stage(c->layer, (moe_ep_stream_t)s), "moe_ep_split_expert_stage");
}

/* Device-side errors of the timed calls (e.g. a timeout); reset so the next cell runs. */
int slice_no_async_error(moe_ep_group_t g)
{
    moe_ep_status_t status = MOE_EP_SUCCESS;
    if (!slice_layer_ok(moe_ep_group_get_async_error(g, &status), "moe_ep_group_get_async_error")) return 0;
    if (status == MOE_EP_SUCCESS) return 1;
    fprintf(stderr, "moe_ep: device error: %s: %s\n", moe_ep_status_string(status), moe_ep_last_error());
    slice_layer_ok(moe_ep_group_reset_async_error(g), "moe_ep_group_reset_async_error");
    return 0;
}

#endif /* MOE_EP_HAVE_CUDA */
