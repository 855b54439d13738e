/* Random GPU layers (split and mega, emulated groups of 1, 2 or 4 ranks on
 * device 0) and random sequences of calls on them: good forwards with host or
 * device token counts, graph replays, device-side bad ids and bad counts
 * (async INVALID_ARGUMENT, outputs untouched, the layer working again after a
 * reset), host-side bad counts, a NULL array with device counts. Configs mix small geometries with edge values
 * of the GPU fields (num_sms, explicit knobs valid or not, fp8_fast_accum,
 * weights from host or device memory). A good forward must agree with the CPU
 * reference within a loose bound (precision is test_split's; this looks for
 * wrong rows, crashes and hangs); a layer's device memory must stay within
 * what moe_ep_layer_memory_size said, and come back once every layer is gone.
 *
 * MOE_EP_FUZZ_ITERS (default 40; MOE_EP_TEST_QUICK: 12), MOE_EP_TEST_SEED.
 * Exits 77 (skipped) when no CUDA device is usable. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "layer_fixture.h"
#include "test_util.h"

#include "formats/codec.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_fuzz_gpu"
#include "cuda_check.h"

#define MAX_RANKS 4
#define POISON 0xFFFFu
/* Far above every path's and wire's error (fp8_fast_accum on the FP4 wire:
 * up to 3.6e-2 seen, test_split), far below a wrong row's (~1). */
#define LOOSE_REL_L2 0.25

static uint32_t pick(uint64_t *rng, uint32_t n) { return (uint32_t)(test_rand_u64(rng) % n); }
static int chance(uint64_t *rng, int percent) { return (int)pick(rng, 100) < percent; }
static const char *errmsg(void) { return moe_ep_last_error(); }

typedef struct {
    int R, T_max;
    int32_t nt[MAX_RANKS]; /* rank r: fixture tokens [r * T_max, r * T_max + nt[r]) */
    fixture_t f;
    uint16_t *x, *out;     /* device, [R * T_max][H] */
    int32_t *ids, *nt_dev; /* device */
    float *wt;
    size_t out_bytes;
} case_t;

static moe_ep_layer_config_t random_config(uint64_t *rng, int R)
{
    static const int Hs[] = {128, 256, 512}, sms[] = {0, 0, 1, 3, 1000};
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = R * (1 + (int)pick(rng, 3));
    c.top_k = 1 + (int)pick(rng, (uint32_t)(c.num_experts < 6 ? c.num_experts : 6));
    c.hidden = Hs[pick(rng, 3)], c.intermediate = 128 * (1 + (int)pick(rng, 2));
    c.max_tokens_per_rank = 1 + (int)pick(rng, 48);
    c.path = (moe_ep_path_t)pick(rng, MOE_EP_PATH_COUNT_), c.wire = (moe_ep_wire_t)pick(rng, MOE_EP_WIRE_COUNT_);
    c.backend = chance(rng, 50) ? MOE_EP_BACKEND_MEGA : MOE_EP_BACKEND_SPLIT;
    c.swiglu_limit = chance(rng, 50) ? 10.0f : 0.0f;
    if (c.path == MOE_EP_PATH_NVFP4) c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 2.0f;
    c.num_sms = sms[pick(rng, 5)];
    c.timeout_seconds = chance(rng, 50) ? 0.0 : 2.0;
    c.fp8_fast_accum = chance(rng, 30);
    return c;
}

/* Explicit knobs, valid or not (create then returns INVALID_ARGUMENT), now and then. */
static const moe_ep_knobs_t *random_knobs(uint64_t *rng, moe_ep_knobs_t *k)
{
    static const int rows[] = {0, 16, 32, 64, 128, 7}, ctas[] = {0, 1, 2, 5};
    if (!chance(rng, 30)) return NULL;
    *k = (moe_ep_knobs_t)MOE_EP_KNOBS_INIT;
    k->gemm_tile_rows = rows[pick(rng, 6)], k->gemm_ctas_per_sm = ctas[pick(rng, 4)];
    return k;
}

static void case_init(case_t *cs, const moe_ep_layer_config_t *c, int R, uint64_t *rng)
{
    memset(cs, 0, sizeof *cs);
    cs->R = R, cs->T_max = c->max_tokens_per_rank;
    fixture_init(&cs->f, c->num_experts, c->top_k, c->hidden, c->intermediate, R * cs->T_max,
                 (route_t)pick(rng, 4), rng);
    cs->f.swiglu_limit = c->swiglu_limit;
    for (int r = 0; r < R; r++) cs->nt[r] = (int32_t)pick(rng, (uint32_t)cs->T_max + 1);
    size_t n = (size_t)R * cs->T_max, H = (size_t)c->hidden, K = (size_t)c->top_k;
    cs->out_bytes = n * H * 2;
    CK(cudaMalloc((void **)&cs->x, n * H * 2));
    CK(cudaMalloc((void **)&cs->out, cs->out_bytes));
    CK(cudaMalloc((void **)&cs->ids, n * K * 4));
    CK(cudaMalloc((void **)&cs->wt, n * K * 4));
    CK(cudaMalloc((void **)&cs->nt_dev, MAX_RANKS * 4));
    CK(cudaMemcpy(cs->x, cs->f.x, n * H * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(cs->ids, cs->f.ids, n * K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(cs->wt, cs->f.weights, n * K * 4, cudaMemcpyHostToDevice));
}

static void case_free(case_t *cs)
{
    void *bufs[] = {cs->x, cs->out, cs->ids, cs->wt, cs->nt_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CK(cudaFree(bufs[i]));
    fixture_free(&cs->f);
}

typedef fixture_ptrs_t ptrs_t;

/* Forward arguments over base arrays laid out like the fixture (host or device). */
static moe_ep_forward_args_t args_of(ptrs_t *p, const case_t *cs, const int32_t *nt, const uint16_t *x,
                                     const int32_t *ids, const float *wt, uint16_t *out)
{
    int first[MAX_RANKS];
    for (int r = 0; r < cs->R; r++) first[r] = r * cs->T_max;
    return fixture_args(p, &cs->f, cs->R, first, nt, x, ids, wt, out);
}

/* The CPU reference of the case (host outputs [R * T_max][H], poisoned rows past each rank's T). */
static moe_ep_status_t reference(const case_t *cs, moe_ep_layer_config_t c, uint16_t *want)
{
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    c.backend = MOE_EP_BACKEND_REFERENCE, c.knobs = NULL, c.num_sms = 0, c.fp8_fast_accum = 0;
    memset(want, 0xFF, cs->out_bytes);
    moe_ep_status_t st = moe_ep_group_create_emulated(cs->R, -1, &g);
    if (!st) st = moe_ep_layer_create(g, &c, &l);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = cs->f.E, w.w13 = cs->f.w13, w.w2 = cs->f.w2;
    if (!st) st = moe_ep_layer_load_experts(l, &w, NULL);
    ptrs_t p;
    moe_ep_forward_args_t a = args_of(&p, cs, cs->nt, cs->f.x, cs->f.ids, cs->f.weights, want);
    if (!st) st = moe_ep_layer_forward(l, &a, NULL);
    moe_ep_layer_destroy(l);
    moe_ep_group_destroy(g);
    return st;
}

/* Loads the bf16 checkpoint from host or device memory. */
static moe_ep_status_t load(moe_ep_layer_t l, const case_t *cs, int on_device, cudaStream_t s)
{
    const fixture_t *f = &cs->f;
    size_t b13 = (size_t)f->E * 2 * f->I * f->H * 2, b2 = (size_t)f->E * f->H * f->I * 2;
    void *d13 = NULL, *d2 = NULL;
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = f->E, w.w13 = f->w13, w.w2 = f->w2, w.on_device = on_device;
    if (on_device) {
        CK(cudaMalloc(&d13, b13));
        CK(cudaMalloc(&d2, b2));
        CK(cudaMemcpy(d13, f->w13, b13, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d2, f->w2, b2, cudaMemcpyHostToDevice));
        w.w13 = d13, w.w2 = d2;
    }
    moe_ep_status_t st = moe_ep_layer_load_experts(l, &w, (moe_ep_stream_t)s);
    CK(cudaStreamSynchronize(s));
    if (on_device) {
        CK(cudaFree(d13));
        CK(cudaFree(d2));
    }
    return st;
}

static moe_ep_status_t async_status(moe_ep_group_t g)
{
    moe_ep_status_t a = MOE_EP_ERROR_INTERNAL;
    EXPECT(moe_ep_group_get_async_error(g, &a) == MOE_EP_SUCCESS, "get_async_error: %s", errmsg());
    return a;
}

/* got against want: rows of each rank's tokens within LOOSE_REL_L2, the other rows untouched. */
static void compare(const case_t *cs, const uint16_t *got, const uint16_t *want, const char *what)
{
    double num = 0, den = 0;
    long outside = 0, nans = 0;
    for (int r = 0; r < cs->R; r++)
        for (int t = 0; t < cs->T_max; t++)
            for (int h = 0; h < cs->f.H; h++) {
                size_t i = ((size_t)r * cs->T_max + t) * cs->f.H + h;
                if (t >= cs->nt[r]) {
                    outside += got[i] != POISON;
                    continue;
                }
                float g = moe_ep_bf16_to_f32(got[i]), w = moe_ep_bf16_to_f32(want[i]);
                nans += isnan(g) != 0;
                num += ((double)g - w) * ((double)g - w), den += (double)w * w;
            }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    EXPECT(outside == 0 && nans == 0 && err <= LOOSE_REL_L2, "%s: rel L2 %.3e, %ld NaN, %ld written outside", what,
           err, nans, outside);
}

/* Poisons the outputs, enqueues one forward (host counts, device counts or a
 * graph replay), waits; returns the enqueue's status, *async the group's. */
enum { FWD_HOST, FWD_DEVICE, FWD_GRAPH };
static moe_ep_status_t forward(moe_ep_group_t g, moe_ep_layer_t l, case_t *cs, const int32_t *nt, int how,
                               cudaStream_t s, uint16_t *got, moe_ep_status_t *async)
{
    ptrs_t p;
    moe_ep_forward_args_t a = args_of(&p, cs, nt, cs->x, cs->ids, cs->wt, cs->out);
    CK(cudaMemsetAsync(cs->out, 0xFF, cs->out_bytes, s));
    CK(cudaMemcpyAsync(cs->nt_dev, nt, sizeof(int32_t) * (size_t)cs->R, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s)); /* nt may be a temporary */
    if (how != FWD_HOST) a.num_tokens = NULL, a.num_tokens_device = cs->nt_dev;
    moe_ep_status_t st;
    if (how == FWD_GRAPH) {
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        st = moe_ep_layer_forward(l, &a, (moe_ep_stream_t)s);
        cudaError_t e = cudaStreamEndCapture(s, &graph);
        EXPECT(e == cudaSuccess, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
        if (e != cudaSuccess && !st) st = MOE_EP_ERROR_CUDA;
        (void)cudaGetLastError(); /* a failed capture leaves a non-sticky error */
        if (!st) CK(cudaGraphInstantiate(&exec, graph, 0));
        if (!st) CK(cudaGraphLaunch(exec, s));
        if (exec) CK(cudaGraphExecDestroy(exec));
        if (graph) CK(cudaGraphDestroy(graph));
    } else {
        st = moe_ep_layer_forward(l, &a, (moe_ep_stream_t)s);
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    *async = async_status(g);
    CK(cudaMemcpy(got, cs->out, cs->out_bytes, cudaMemcpyDeviceToHost));
    return st;
}

static int all_poison(const uint16_t *o, size_t bytes)
{
    for (size_t i = 0; i < bytes / 2; i++)
        if (o[i] != POISON) return 0;
    return 1;
}

/* A device-side error (a bad id in slot `slot`, or a bad device count): the
 * forward enqueues, the group reports INVALID_ARGUMENT, outputs stay poisoned;
 * after the reset the group is clean. */
static void bad_on_device(moe_ep_group_t g, moe_ep_layer_t l, case_t *cs, int bad_count, uint64_t *rng,
                          cudaStream_t s, uint16_t *got, const char *name)
{
    int32_t nt[MAX_RANKS];
    memcpy(nt, cs->nt, sizeof nt);
    size_t slot = 0;
    int32_t saved = 0;
    if (bad_count) {
        nt[pick(rng, (uint32_t)cs->R)] = chance(rng, 50) ? -1 : cs->T_max + 1;
    } else {
        int r = (int)pick(rng, (uint32_t)cs->R);
        if (nt[r] == 0) nt[r] = 1;
        slot = ((size_t)r * cs->T_max + pick(rng, (uint32_t)nt[r])) * cs->f.K + pick(rng, (uint32_t)cs->f.K);
        int32_t bad = chance(rng, 50) ? cs->f.E : -2;
        CK(cudaMemcpy(&saved, cs->ids + slot, 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(cs->ids + slot, &bad, 4, cudaMemcpyHostToDevice));
    }
    moe_ep_status_t async, st = forward(g, l, cs, nt, FWD_DEVICE, s, got, &async);
    EXPECT(st == MOE_EP_SUCCESS && async == MOE_EP_ERROR_INVALID_ARGUMENT, "%s: bad %s: enqueue %s, async %s (%s)",
           name, bad_count ? "count" : "id", moe_ep_status_string(st), moe_ep_status_string(async), errmsg());
    EXPECT(all_poison(got, cs->out_bytes), "%s: bad %s: outputs written", name, bad_count ? "count" : "id");
    if (!bad_count) CK(cudaMemcpy(cs->ids + slot, &saved, 4, cudaMemcpyHostToDevice));
    EXPECT(moe_ep_group_reset_async_error(g) == MOE_EP_SUCCESS, "%s: reset: %s", name, errmsg());
    EXPECT(async_status(g) == MOE_EP_SUCCESS, "%s: error still reported after the reset", name);
}

/* One random layer and 2-6 random calls on it. */
static void iteration(uint64_t *rng, cudaStream_t s, int it)
{
    int R = 1 << pick(rng, 3);
    moe_ep_layer_config_t c = random_config(rng, R);
    moe_ep_knobs_t kn;
    c.knobs = random_knobs(rng, &kn);
    char name[160];
    snprintf(name, sizeof name, "#%d %s %s/%s R %d E %d K %d H %d I %d T<=%d sms %d knobs {%d, %d}%s", it,
             moe_ep_backend_name(c.backend), moe_ep_path_name(c.path), moe_ep_wire_name(c.wire), R, c.num_experts,
             c.top_k, c.hidden, c.intermediate, c.max_tokens_per_rank, c.num_sms, c.knobs ? kn.gemm_tile_rows : 0,
             c.knobs ? kn.gemm_ctas_per_sm : 0, c.fp8_fast_accum ? " fast" : "");
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    EXPECT(moe_ep_group_create_emulated(R, 0, &g) == MOE_EP_SUCCESS, "%s: group: %s", name, errmsg());
    case_t cs;
    case_init(&cs, &c, R, rng);
    size_t reported = 0, free_before = 0, free_after = 0, total = 0;
    moe_ep_status_t st = moe_ep_layer_memory_size(g, &c, &reported, NULL);
    CK(cudaMemGetInfo(&free_before, &total));
    if (!st) st = moe_ep_layer_create(g, &c, &l);
    if (st != MOE_EP_SUCCESS) { /* refused: a bad knob, or mega's hidden % 256 */
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT || st == MOE_EP_ERROR_UNSUPPORTED, "%s: create: %s (%s)", name,
               moe_ep_status_string(st), errmsg());
        EXPECT(c.knobs || (c.backend == MOE_EP_BACKEND_MEGA && c.hidden % 256), "%s: refused: %s", name, errmsg());
        printf("  %s: refused (%s)\n", name, errmsg());
        case_free(&cs);
        moe_ep_group_destroy(g);
        return;
    }
    uint16_t *want = malloc(cs.out_bytes), *got = malloc(cs.out_bytes);
    st = load(l, &cs, chance(rng, 50), s);
    EXPECT(st == MOE_EP_SUCCESS, "%s: load: %s", name, errmsg());
    if (!st) st = reference(&cs, c, want);
    EXPECT(st == MOE_EP_SUCCESS, "%s: reference: %s", name, errmsg());
    int calls = 2 + (int)pick(rng, 5);
    for (int i = 0; i < calls && !st; i++) {
        int kind = (int)pick(rng, 7);
        moe_ep_status_t async = MOE_EP_SUCCESS, fs = MOE_EP_SUCCESS;
        if (kind <= FWD_GRAPH) { /* good: host counts, device counts, a graph replay */
            fs = forward(g, l, &cs, cs.nt, kind, s, got, &async);
            EXPECT(fs == MOE_EP_SUCCESS && async == MOE_EP_SUCCESS, "%s: forward %d: %s / %s (%s)", name, kind,
                   moe_ep_status_string(fs), moe_ep_status_string(async), errmsg());
            if (!fs && !async) compare(&cs, got, want, name);
        } else if (kind == 3 || kind == 4) {
            bad_on_device(g, l, &cs, kind == 4, rng, s, got, name);
        } else if (kind == 5) { /* a bad host count: refused at once, nothing enqueued */
            int32_t nt[MAX_RANKS];
            memcpy(nt, cs.nt, sizeof nt);
            nt[pick(rng, (uint32_t)R)] = chance(rng, 50) ? -1 : cs.T_max + 1;
            fs = forward(g, l, &cs, nt, FWD_HOST, s, got, &async);
            EXPECT(fs == MOE_EP_ERROR_INVALID_ARGUMENT && async == MOE_EP_SUCCESS && all_poison(got, cs.out_bytes),
                   "%s: bad host count: %s / %s", name, moe_ep_status_string(fs), moe_ep_status_string(async));
        } else { /* device counts with one rank's array NULL: refused at once (any count may be > 0) */
            ptrs_t p;
            moe_ep_forward_args_t a = args_of(&p, &cs, NULL, cs.x, cs.ids, cs.wt, cs.out);
            a.num_tokens_device = cs.nt_dev;
            int r = (int)pick(rng, (uint32_t)R);
            p.x[r] = NULL;
            fs = moe_ep_layer_forward(l, &a, (moe_ep_stream_t)s);
            EXPECT(fs == MOE_EP_ERROR_INVALID_ARGUMENT, "%s: device counts, rank %d's x NULL: %s", name, r,
                   moe_ep_status_string(fs));
        }
    }
    /* The layer's device memory after its calls, within what moe_ep_layer_memory_size said (the
     * slack: allocation granularity). */
    CK(cudaMemGetInfo(&free_after, &total));
    size_t used = free_before > free_after ? free_before - free_after : 0;
    EXPECT(used <= reported + reported / 10 + (32u << 20), "%s: the layer took %.1f MiB, memory_size said %.1f MiB",
           name, used / 1048576.0, reported / 1048576.0);
    printf("  %s: %d calls; device memory %.1f MiB (memory_size %.1f MiB)\n", name, calls, used / 1048576.0,
           reported / 1048576.0);
    free(want), free(got);
    case_free(&cs);
    EXPECT(moe_ep_layer_destroy(l) == MOE_EP_SUCCESS, "%s: layer_destroy: %s", name, errmsg());
    EXPECT(moe_ep_group_destroy(g) == MOE_EP_SUCCESS, "%s: group_destroy: %s", name, errmsg());
}

int main(void)
{
    /* Every module loaded with the context: device memory taken later is the layers'. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("test_fuzz_gpu: skipped: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 77;
    }
    CK(cudaSetDevice(0));
    setenv("MOE_EP_KNOB_CACHE", "off", 1);
    uint64_t rng = test_seed();
    const char *env = getenv("MOE_EP_FUZZ_ITERS");
    int iters = env ? atoi(env) : getenv("MOE_EP_TEST_QUICK") ? 12 : 40;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaFree(NULL)); /* the context, before the first reading */
    size_t free0 = 0, free1 = 0, total = 0;
    CK(cudaMemGetInfo(&free0, &total));
    for (int i = 0; i < iters; i++) iteration(&rng, s, i);
    CK(cudaMemGetInfo(&free1, &total));
    printf("device memory free: %.1f MiB before, %.1f MiB after\n", free0 / 1048576.0, free1 / 1048576.0);
    EXPECT(free1 + (8u << 20) >= free0, "device memory not given back: %.1f MiB", (free0 - free1) / 1048576.0);
    CK(cudaStreamDestroy(s));
    return test_summary(TEST_NAME);
}
