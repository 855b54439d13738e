/* NCCL groups.
 *
 * Without arguments (one process, GPU 0): split and mega layers on an NCCL group
 * of world size 1 (from an id, and from a caller's communicator) against the
 * emulated group of 1, bit for bit, eager and CUDA-graph replay, several
 * paths and wires; the reference backend refused; a bad expert id reported.
 *
 * With --worker (one process per rank, started by scripts/nccl_launch.sh, which
 * sets MOE_EP_RANK, MOE_EP_WORLD_SIZE, MOE_EP_NCCL_ID_FILE; rank r on GPU r):
 *   - the token and output exchanges checked by construction (each rank stamps
 *     its rank and token index into what it sends; receivers check exactly);
 *   - symmetric heap: stores through the load/store peer pointers, checked;
 *   - a full layer over R ranks vs the emulated group of 1 on the same tokens,
 *     bit for bit, uniform and skewed routing, eager and graph replay;
 *   - mismatched configs: INVALID_ARGUMENT on every rank, no hang;
 *   - the last rank never calls forward: the others get MOE_EP_ERROR_TIMEOUT (mega:
 *     the kernel's bounded waits; split: only with MOE_EP_TEST_SPLIT_TIMEOUT=1, as
 *     the watchdog's ncclCommAbort does not return while that rank lives).
 * Exits 77 (skipped) without a GPU, without NCCL, or with fewer GPUs than ranks. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, rename */
#include "layer_fixture.h"
#include "test_util.h"

#include "comm/comm.h"
#include "formats/codec.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MOE_EP_TEST_NCCL
#include <nccl.h>
#endif

#define SKIP 77
#define POISON 0xFFFFu

static const char *errmsg(void) { return moe_ep_last_error(); }

#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

static void cuda_check(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
    test_failed++;
    exit(test_summary("test_nccl"));
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) exit(1);
    return p;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- layers and inputs ----------------------------------------------------- */

static moe_ep_layer_config_t config_of(const fixture_t *f, moe_ep_path_t p, moe_ep_wire_t w, int t_max)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = f->E, c.top_k = f->K, c.hidden = f->H, c.intermediate = f->I;
    c.max_tokens_per_rank = t_max, c.swiglu_limit = f->swiglu_limit;
    c.path = p, c.wire = w, c.backend = MOE_EP_BACKEND_SPLIT;
    if (p == MOE_EP_PATH_NVFP4) c.fc1_input_scale = 500.0f, c.fc2_input_scale = 3000.0f;
    return c;
}

/* Layer on g with the experts this group's ranks own loaded from the fixture. */
static moe_ep_status_t make_layer(moe_ep_group_t g, const fixture_t *f, const moe_ep_layer_config_t *c,
                                  cudaStream_t s, moe_ep_layer_t *l)
{
    int R = 0, first = 0, n = 0;
    moe_ep_group_world_size(g, &R);
    moe_ep_group_local_ranks(g, &first, &n);
    int per = f->E / R;
    moe_ep_status_t st = moe_ep_layer_create(g, c, l);
    if (st) return st;
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = first * per, w.num_experts = n * per;
    w.w13 = f->w13 + (size_t)w.first_expert * 2 * f->I * f->H;
    w.w2 = f->w2 + (size_t)w.first_expert * f->H * f->I;
    st = moe_ep_layer_load_experts(*l, &w, (moe_ep_stream_t)s);
    if (!st) CUDA_CHECK(cudaStreamSynchronize(s));
    return st;
}

/* One rank's inputs on the device: fixture tokens [first, first + t_max). */
typedef struct {
    int t_max, H, K;
    uint16_t *x, *out;
    int32_t *ids, *t_dev;
    float *w;
} dev_io_t;

static void io_init(dev_io_t *d, const fixture_t *f, int first, int t_max)
{
    d->t_max = t_max, d->H = f->H, d->K = f->K;
    size_t xb = (size_t)t_max * f->H * 2, ib = (size_t)t_max * f->K * 4;
    CUDA_CHECK(cudaMalloc((void **)&d->x, xb));
    CUDA_CHECK(cudaMalloc((void **)&d->out, xb));
    CUDA_CHECK(cudaMalloc((void **)&d->ids, ib));
    CUDA_CHECK(cudaMalloc((void **)&d->w, ib));
    CUDA_CHECK(cudaMalloc((void **)&d->t_dev, 4));
    CUDA_CHECK(cudaMemcpy(d->x, f->x + (size_t)first * f->H, xb, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->ids, f->ids + (size_t)first * f->K, ib, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->w, f->weights + (size_t)first * f->K, ib, cudaMemcpyHostToDevice));
}

static void io_free(dev_io_t *d)
{
    cudaFree(d->x), cudaFree(d->out), cudaFree(d->ids), cudaFree(d->w), cudaFree(d->t_dev);
}

static void poison_out(const dev_io_t *d, cudaStream_t s)
{
    CUDA_CHECK(cudaMemsetAsync(d->out, 0xFF, (size_t)d->t_max * d->H * 2, s));
}

/* Enqueues one forward: T on the host, or (T < 0) from d->t_dev. */
static moe_ep_status_t forward(moe_ep_layer_t l, const dev_io_t *d, int T, cudaStream_t s)
{
    const uint16_t *x[1] = {d->x};
    const int32_t *ids[1] = {d->ids};
    const float *w[1] = {d->w};
    uint16_t *out[1] = {d->out};
    int32_t nt[1] = {T};
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    if (T >= 0) a.num_tokens = nt;
    else a.num_tokens_device = d->t_dev;
    a.x = x, a.topk_ids = ids, a.topk_weights = w, a.out = out;
    return moe_ep_layer_forward(l, &a, (moe_ep_stream_t)s);
}

static void read_out(const dev_io_t *d, uint16_t *host, cudaStream_t s)
{
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(host, d->out, (size_t)d->t_max * d->H * 2, cudaMemcpyDeviceToHost));
}

/* Eager forward with T tokens on both layers (outputs poisoned first):
 * identical bytes expected. */
static void compare_eager(moe_ep_layer_t ref, moe_ep_layer_t l, dev_io_t *dr, dev_io_t *dl, int T,
                          cudaStream_t s, const char *label)
{
    size_t n = (size_t)T * dr->H;
    uint16_t *a = xmalloc(dr->t_max * (size_t)dr->H * 2), *b = xmalloc(dr->t_max * (size_t)dr->H * 2);
    poison_out(dr, s), poison_out(dl, s);
    moe_ep_status_t st = forward(ref, dr, T, s);
    EXPECT(st == MOE_EP_SUCCESS, "%s: emulated forward: %s", label, errmsg());
    st = forward(l, dl, T, s);
    EXPECT(st == MOE_EP_SUCCESS, "%s: NCCL forward: %s", label, errmsg());
    read_out(dr, a, s), read_out(dl, b, s);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += a[i] != b[i];
    EXPECT(diff == 0, "%s T=%d: %zu of %zu outputs differ from the emulated group", label, T, diff, n);
    int nonpoison = 1;
    for (size_t i = 0; i < n && nonpoison; i++) nonpoison = b[i] != POISON || a[i] == POISON;
    EXPECT(nonpoison, "%s T=%d: output not written", label, T);
    free(a), free(b);
}

/* The NCCL layer captured once with num_tokens_device, replayed per T,
 * against eager forwards of the emulated layer. */
static void compare_graph(moe_ep_layer_t ref, moe_ep_layer_t l, dev_io_t *dr, dev_io_t *dl,
                          cudaStream_t s, const char *label)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    moe_ep_status_t st = forward(l, dl, -1, s);
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    EXPECT(st == MOE_EP_SUCCESS && e == cudaSuccess, "%s: capture: %s / %s", label, errmsg(),
           cudaGetErrorString(e));
    if (st || e) return;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int counts[4] = {dl->t_max, 5, 0, dl->t_max / 2 + 1};
    size_t bytes = (size_t)dl->t_max * dl->H * 2;
    uint16_t *a = xmalloc(bytes), *b = xmalloc(bytes);
    for (int i = 0; i < 4; i++) {
        int T = counts[i];
        poison_out(dr, s), poison_out(dl, s);
        EXPECT(forward(ref, dr, T, s) == MOE_EP_SUCCESS, "%s: emulated: %s", label, errmsg());
        CUDA_CHECK(cudaMemcpyAsync(dl->t_dev, &T, 4, cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        read_out(dr, a, s), read_out(dl, b, s);
        EXPECT(memcmp(a, b, (size_t)T * dl->H * 2) == 0, "%s: graph replay T=%d differs", label, T);
    }
    free(a), free(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}

static void check_no_async_error(moe_ep_group_t g, const char *label)
{
    moe_ep_status_t as = MOE_EP_SUCCESS;
    moe_ep_group_get_async_error(g, &as);
    EXPECT(as == MOE_EP_SUCCESS, "%s: async error: %s", label, errmsg());
}

/* ---- one process, world size 1 ------------------------------------------- */

static void test_world1(moe_ep_group_t g, const char *how, uint64_t *rng, cudaStream_t s)
{
    static const struct { moe_ep_path_t p; moe_ep_wire_t w; int fast; } combos[] = { /* fast: fp8_fast_accum */
        {MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 0},   {MOE_EP_PATH_MXFP8, MOE_EP_WIRE_MXFP8, 0},
        {MOE_EP_PATH_NVFP4, MOE_EP_WIRE_FP4, 0},   {MOE_EP_PATH_W4A8, MOE_EP_WIRE_BF16, 0},
        {MOE_EP_PATH_FP8_BLOCK, MOE_EP_WIRE_MXFP8, 0}, {MOE_EP_PATH_FP8_BLOCK, MOE_EP_WIRE_BF16, 1}};
    const int T_max = 48;
    moe_ep_group_t eg = NULL;
    EXPECT(moe_ep_group_create_emulated(1, 0, &eg) == MOE_EP_SUCCESS, "emulated group: %s", errmsg());
    for (size_t n = 0; n < 2 * sizeof combos / sizeof combos[0]; n++) {
        size_t i = n / 2; /* each combination on the split, then the mega backend */
        fixture_t f;
        fixture_init(&f, 8, 3, 256, 256, T_max, i == 2 ? ROUTE_SPARSE : ROUTE_UNIFORM, rng);
        moe_ep_layer_config_t c = config_of(&f, combos[i].p, combos[i].w, T_max);
        c.backend = n % 2 ? MOE_EP_BACKEND_MEGA : MOE_EP_BACKEND_SPLIT;
        c.fp8_fast_accum = combos[i].fast;
        moe_ep_layer_t ref = NULL, l = NULL;
        char label[96];
        snprintf(label, sizeof label, "world 1 (%s) %s %s/%s%s", how, moe_ep_backend_name(c.backend),
                 moe_ep_path_name(combos[i].p), moe_ep_wire_name(combos[i].w), combos[i].fast ? " fast accum" : "");
        moe_ep_status_t st = make_layer(eg, &f, &c, s, &ref);
        EXPECT(st == MOE_EP_SUCCESS, "%s: emulated layer: %s", label, errmsg());
        if (!st) st = make_layer(g, &f, &c, s, &l);
        EXPECT(st == MOE_EP_SUCCESS, "%s: NCCL layer: %s", label, errmsg());
        if (!st) {
            dev_io_t dr, dl;
            io_init(&dr, &f, 0, T_max), io_init(&dl, &f, 0, T_max);
            compare_eager(ref, l, &dr, &dl, T_max, s, label);
            compare_eager(ref, l, &dr, &dl, 7, s, label);
            compare_graph(ref, l, &dr, &dl, s, label);
            check_no_async_error(g, label);
            io_free(&dr), io_free(&dl);
        }
        printf("  %s\n", label);
        moe_ep_layer_destroy(l), moe_ep_layer_destroy(ref);
        fixture_free(&f);
    }
    moe_ep_group_destroy(eg);
}

/* A bad expert id on world size 1: INVALID_ARGUMENT from the device, output
 * untouched; the reference backend refused on an NCCL group. */
static void test_world1_errors(moe_ep_group_t g, uint64_t *rng, cudaStream_t s)
{
    fixture_t f;
    fixture_init(&f, 8, 2, 256, 128, 16, ROUTE_UNIFORM, rng);
    moe_ep_layer_config_t c = config_of(&f, MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 16);
    moe_ep_layer_t l = NULL;
    c.backend = MOE_EP_BACKEND_REFERENCE;
    EXPECT(moe_ep_layer_create(g, &c, &l) != MOE_EP_SUCCESS,
           "reference backend on an NCCL group accepted (layer.c must call moe_ep_group_check_config)");
    moe_ep_layer_destroy(l);
    f.ids[5 * f.K + 1] = 99;
    for (int b = 0; b < 2; b++) {
        l = NULL;
        c.backend = b ? MOE_EP_BACKEND_MEGA : MOE_EP_BACKEND_SPLIT;
        const char *name = moe_ep_backend_name(c.backend);
        EXPECT(moe_ep_group_check_config(g, &c) == MOE_EP_SUCCESS, "%s: check_config: %s", name, errmsg());
        if (make_layer(g, &f, &c, s, &l) != MOE_EP_SUCCESS) {
            EXPECT(0, "%s: layer: %s", name, errmsg());
            continue;
        }
        dev_io_t d;
        io_init(&d, &f, 0, 16);
        poison_out(&d, s);
        EXPECT(forward(l, &d, 16, s) == MOE_EP_SUCCESS, "%s: forward: %s", name, errmsg());
        uint16_t *h = xmalloc((size_t)16 * f.H * 2);
        read_out(&d, h, s);
        moe_ep_status_t as = MOE_EP_SUCCESS;
        moe_ep_group_get_async_error(g, &as);
        EXPECT(as == MOE_EP_ERROR_INVALID_ARGUMENT, "%s: bad expert id: async %s", name, moe_ep_status_string(as));
        int untouched = 1;
        for (int i = 0; i < 16 * f.H; i++) untouched &= h[i] == POISON;
        EXPECT(untouched, "%s: bad expert id: output written", name);
        EXPECT(moe_ep_group_reset_async_error(g) == MOE_EP_SUCCESS, "reset: %s", errmsg());
        free(h);
        io_free(&d);
        moe_ep_layer_destroy(l);
    }
    fixture_free(&f);
}

static int run_single(void)
{
    moe_ep_unique_id_t id;
    if (moe_ep_get_unique_id(&id) == MOE_EP_ERROR_UNSUPPORTED) {
        printf("SKIP: %s\n", errmsg());
        return SKIP;
    }
    uint64_t seed = test_seed(), rng = seed;
    cudaStream_t s;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaStreamCreate(&s));
    moe_ep_group_t g = NULL;
    moe_ep_status_t st = moe_ep_group_create_from_id(&id, 1, 0, 0, &g);
    EXPECT(st == MOE_EP_SUCCESS, "create_from_id: %s", errmsg());
    if (!st) {
        int first = -1, n = -1, R = 0;
        moe_ep_group_local_ranks(g, &first, &n);
        moe_ep_group_world_size(g, &R);
        EXPECT(first == 0 && n == 1 && R == 1, "local ranks %d+%d of %d", first, n, R);
        test_world1(g, "from id", &rng, s);
        test_world1_errors(g, &rng, s);
        moe_ep_group_destroy(g);
    }
#ifdef MOE_EP_TEST_NCCL
    ncclUniqueId u;
    ncclComm_t comm = NULL;
    EXPECT(ncclGetUniqueId(&u) == ncclSuccess && ncclCommInitRank(&comm, 1, u, 0) == ncclSuccess,
           "caller's communicator");
    g = NULL;
    st = comm ? moe_ep_group_create_nccl(comm, 0, &g) : MOE_EP_ERROR_NCCL;
    EXPECT(st == MOE_EP_SUCCESS, "create_nccl: %s", errmsg());
    if (comm) ncclCommDestroy(comm); /* the group keeps its own */
    if (!st) {
        test_world1(g, "caller's comm", &rng, s);
        moe_ep_group_destroy(g);
    }
#endif
    cudaStreamDestroy(s);
    return test_summary("test_nccl");
}

/* ---- workers: one process per rank ---------------------------------------- */

typedef struct {
    int rank, world;
    moe_ep_group_t g;
    cudaStream_t s;
    uint64_t seed;
} worker_t;

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

/* Rank 0 writes the id (to a temporary name, then renamed); the others wait
 * up to 120 s for it. */
static int share_id(const worker_t *w, moe_ep_unique_id_t *id)
{
    const char *path = getenv("MOE_EP_NCCL_ID_FILE");
    if (!path) return -1;
    if (w->rank == 0) {
        if (moe_ep_get_unique_id(id) != MOE_EP_SUCCESS) return -1;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0) return -1;
        return rename(tmp, path);
    }
    for (int i = 0; i < 12000; i++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t n = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (n == 1) return 0;
        }
        sleep_ms(10);
    }
    return -1;
}

static uint16_t bf16_of(float v) { return moe_ep_bf16_from_f32(v); }

/* Output payload of slot (t, k) of a token of rank src computed on rank q:
 * small integers, exact in bf16 and in their sums. */
static int payload(int q, int src, int t, int k, int h)
{
    return (q * 7 + src * 11 + t * 3 + k * 5 + h) % 61 + 1;
}

/* The exchanges alone, checked by construction: x[t][h] carries (rank, t, h),
 * ids route slot k of token t to a known expert; every rank checks each
 * source's T, x and its own experts' ids; then each rank fills output rows for
 * the slots it received with payload(q, src, t, k, h), and each token's
 * combined output must be the exact sum over its slots. */
static void test_exchange(worker_t *w)
{
    const int K = 3, H = 128, T_max = 20, E = 2 * w->world;
    int T = 5 + 3 * w->rank % 16; /* different T per rank */
    if (T > T_max) T = T_max;
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = E, c.top_k = K, c.hidden = H, c.intermediate = 128, c.max_tokens_per_rank = T_max;
    c.backend = MOE_EP_BACKEND_SPLIT;
    moe_ep_xchg_t *x = NULL;
    moe_ep_status_t st = moe_ep_xchg_create(w->g, &c, &x);
    EXPECT(st == MOE_EP_SUCCESS, "exchange: %s", errmsg());
    if (st) return;
    /* Inputs: x = rank + t/256 + h/65536 patterns as bf16 integers; ids. */
    uint16_t *hx = xmalloc((size_t)T_max * H * 2);
    int32_t *hid = xmalloc((size_t)T_max * K * 4);
    float *hw = xmalloc((size_t)T_max * K * 4);
    for (int t = 0; t < T_max; t++) {
        for (int h = 0; h < H; h++) hx[t * H + h] = bf16_of((float)(w->rank * 64 + t + (h % 4) * 4096));
        for (int k = 0; k < K; k++) {
            int id = (w->rank + t + 2 * k) % E;
            hid[t * K + k] = (t + k) % 4 == 3 ? -1 : id;
            hw[t * K + k] = 1.0f;
        }
    }
    uint16_t *dx, *dout;
    int32_t *dids;
    float *dw;
    CUDA_CHECK(cudaMalloc((void **)&dx, (size_t)T_max * H * 2));
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)T_max * H * 2));
    CUDA_CHECK(cudaMalloc((void **)&dids, (size_t)T_max * K * 4));
    CUDA_CHECK(cudaMalloc((void **)&dw, (size_t)T_max * K * 4));
    CUDA_CHECK(cudaMemcpy(dx, hx, (size_t)T_max * H * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dids, hid, (size_t)T_max * K * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw, hw, (size_t)T_max * K * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dout, 0xFF, (size_t)T_max * H * 2));
    const uint16_t *xs[1] = {dx};
    const int32_t *is[1] = {dids};
    const float *ws[1] = {dw};
    uint16_t *os[1] = {dout};
    int32_t nt[1] = {T};
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = nt, a.x = xs, a.topk_ids = is, a.topk_weights = ws, a.out = os;
    moe_ep_split_bufs_t b;
    memset(&b, 0, sizeof b);
    b.error = w->g->error_dev, b.error_mapped = w->g->error_mapped_dev;
    moe_ep_split_io_t io;
    st = moe_ep_xchg_tokens(w->g, x, &b, &a, &io, (moe_ep_stream_t)w->s);
    EXPECT(st == MOE_EP_SUCCESS, "token exchange: %s", errmsg());
    CUDA_CHECK(cudaStreamSynchronize(w->s));
    int R = w->world, per = E / R, bad = 0;
    int32_t *tin = xmalloc(sizeof(int32_t) * R);
    int32_t *rid = xmalloc((size_t)R * T_max * K * 4);
    uint16_t *rx = xmalloc((size_t)T_max * H * 2);
    CUDA_CHECK(cudaMemcpy(tin, io.t_device, sizeof(int32_t) * R, cudaMemcpyDeviceToHost));
    for (int src = 0; src < R; src++) {
        int Ts = 5 + 3 * src % 16 > T_max ? T_max : 5 + 3 * src % 16;
        EXPECT(tin[src] == Ts, "T of rank %d arrived as %d, expected %d", src, tin[src], Ts);
        CUDA_CHECK(cudaMemcpy(rid + (size_t)src * T_max * K, io.ids[src], (size_t)T_max * K * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(rx, io.x[src], (size_t)T_max * H * 2, cudaMemcpyDeviceToHost));
        for (int t = 0; t < Ts; t++) {
            for (int h = 0; h < H; h++) bad += rx[t * H + h] != bf16_of((float)(src * 64 + t + (h % 4) * 4096));
            for (int k = 0; k < K; k++) {
                int id = (t + k) % 4 == 3 ? -1 : (src + t + 2 * k) % E;
                int mine = id >= w->rank * per && id < (w->rank + 1) * per;
                bad += rid[((size_t)src * T_max + t) * K + k] != (mine ? id : -1);
            }
        }
    }
    EXPECT(bad == 0, "token exchange: %d values differ from what the senders stamped", bad);
    /* Output rows for the slots received here, in arrival order. */
    int64_t rows_cap = (int64_t)R * T_max * K, nrows = 0;
    int32_t *ros = xmalloc(sizeof(int32_t) * rows_cap);
    uint16_t *y = xmalloc((size_t)rows_cap * H * 2);
    for (int src = 0; src < R; src++)
        for (int t = 0; t < T_max; t++)
            for (int k = 0; k < K; k++) {
                int64_t i = ((int64_t)src * T_max + t) * K + k;
                ros[i] = -1;
                if (t < tin[src] && rid[i] >= 0) {
                    for (int h = 0; h < H; h++) y[nrows * H + h] = bf16_of((float)payload(w->rank, src, t, k, h));
                    ros[i] = (int32_t)nrows++;
                }
            }
    int32_t *dros;
    uint8_t *dy;
    CUDA_CHECK(cudaMalloc((void **)&dros, sizeof(int32_t) * rows_cap));
    CUDA_CHECK(cudaMalloc((void **)&dy, (size_t)rows_cap * H * 2 + 16));
    CUDA_CHECK(cudaMemcpy(dros, ros, sizeof(int32_t) * rows_cap, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dy, y, (size_t)rows_cap * H * 2, cudaMemcpyHostToDevice));
    b.tokens = (int32_t *)io.t_device, b.row_of_slot = dros, b.y = dy, b.y_scales = dy;
    moe_ep_split_dims_t d;
    memset(&d, 0, sizeof d);
    d.R = R, d.E = per, d.K = K, d.H = H, d.I = 128, d.T_max = T_max, d.first_expert = w->rank * per;
    d.num_experts_global = E, d.wire = MOE_EP_WIRE_BF16;
    st = moe_ep_xchg_outputs(w->g, x, &d, &b, &a, (moe_ep_stream_t)w->s);
    EXPECT(st == MOE_EP_SUCCESS, "output exchange: %s", errmsg());
    CUDA_CHECK(cudaStreamSynchronize(w->s));
    CUDA_CHECK(cudaMemcpy(hx, dout, (size_t)T_max * H * 2, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int t = 0; t < T_max; t++)
        for (int h = 0; h < H; h++) {
            int sum = 0;
            for (int k = 0; k < K; k++) {
                int id = hid[t * K + k];
                if (id >= 0) sum += payload(id / per, w->rank, t, k, h);
            }
            uint16_t want = t < T ? bf16_of((float)sum) : (uint16_t)POISON;
            bad += hx[t * H + h] != want;
        }
    EXPECT(bad == 0, "output exchange: %d of %d combined values differ from the stamped sums", bad, T_max * H);
    check_no_async_error(w->g, "exchange");
    printf("  rank %d: exchanges checked by construction (T=%d, %lld rows here)\n", w->rank, T, (long long)nrows);
    cudaFree(dx), cudaFree(dout), cudaFree(dids), cudaFree(dw), cudaFree(dros), cudaFree(dy);
    free(hx), free(hid), free(hw), free(tin), free(rid), free(rx), free(ros), free(y);
    moe_ep_xchg_destroy(w->g, x);
}

/* Stores through the load/store peer pointers: rank r writes its stamp into
 * slot r of every reachable peer's heap; after a barrier each rank checks the
 * slots of the peers it can reach. */
static void test_heap(worker_t *w)
{
    moe_ep_heap_t h;
    moe_ep_status_t st = moe_ep_heap_create(w->g, 1 << 20, &h);
    EXPECT(st == MOE_EP_SUCCESS, "heap: %s", errmsg());
    if (st) return;
    void **peers = xmalloc(sizeof(void *) * w->world);
    CUDA_CHECK(cudaMemcpy(peers, h.peers, sizeof(void *) * w->world, cudaMemcpyDeviceToHost));
    uint32_t stamp[16];
    int reach = 0;
    for (int q = 0; q < w->world; q++) {
        if (!peers[q]) continue;
        reach++;
        for (int i = 0; i < 16; i++) stamp[i] = 0xAB000000u | (uint32_t)w->rank << 12 | (uint32_t)q << 4 | (uint32_t)i;
        CUDA_CHECK(cudaMemcpy((uint8_t *)peers[q] + 64 * w->rank, stamp, sizeof stamp, cudaMemcpyDefault));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT(peers[w->rank] != NULL, "no pointer to this rank's own heap");
    /* Barrier: a config check with a new digest is an all-gather. */
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = w->world, c.top_k = 1, c.hidden = 128, c.intermediate = 128;
    c.max_tokens_per_rank = 1000 + w->world, c.backend = MOE_EP_BACKEND_SPLIT;
    EXPECT(moe_ep_group_check_config(w->g, &c) == MOE_EP_SUCCESS, "barrier: %s", errmsg());
    uint32_t *mine = xmalloc(64 * (size_t)w->world);
    CUDA_CHECK(cudaMemcpy(mine, h.base, 64 * (size_t)w->world, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int src = 0; src < w->world && h.window; src++) {
        if (!peers[src]) continue; /* not in this rank's load/store team */
        for (int i = 0; i < 16; i++)
            bad += mine[src * 16 + i] != (0xAB000000u | (uint32_t)src << 12 | (uint32_t)w->rank << 4 | (uint32_t)i);
    }
    EXPECT(bad == 0, "heap: %d words differ from the peers' stamps", bad);
    printf("  rank %d: heap %s, %d of %d ranks load/store reachable, %s\n", w->rank,
           h.window ? "in an NCCL window" : "NOT in a window (fallback)", reach, w->world,
           h.nccl_alloc ? "ncclMemAlloc" : "cudaMalloc");
    free(peers), free(mine);
    moe_ep_heap_destroy(w->g, &h);
}

/* A full layer over every rank vs the emulated group of 1 on this rank's
 * tokens (fast: config.fp8_fast_accum). */
static void test_layer(worker_t *w, moe_ep_backend_t backend, moe_ep_path_t p, moe_ep_wire_t wi, route_t route,
                       int fast)
{
    const int T_max = 32, E = 4 * w->world, K = 4;
    uint64_t rng = w->seed + (uint64_t)p * 131 + (uint64_t)wi * 17 + (uint64_t)route; /* same on every rank */
    fixture_t f;
    fixture_init(&f, E, K, 256, 128, T_max * w->world, route, &rng);
    moe_ep_layer_config_t c = config_of(&f, p, wi, T_max);
    c.backend = backend, c.fp8_fast_accum = fast;
    char label[96];
    snprintf(label, sizeof label, "rank %d/%d %s %s/%s route %d%s", w->rank, w->world, moe_ep_backend_name(backend),
             moe_ep_path_name(p), moe_ep_wire_name(wi), (int)route, fast ? " fast accum" : "");
    moe_ep_group_t eg = NULL;
    moe_ep_layer_t ref = NULL, l = NULL;
    moe_ep_status_t st = moe_ep_group_create_emulated(1, w->rank, &eg);
    if (!st) st = make_layer(eg, &f, &c, w->s, &ref);
    EXPECT(st == MOE_EP_SUCCESS, "%s: emulated layer: %s", label, errmsg());
    moe_ep_status_t st2 = make_layer(w->g, &f, &c, w->s, &l); /* collective: every rank makes it */
    EXPECT(st2 == MOE_EP_SUCCESS, "%s: NCCL layer: %s", label, errmsg());
    if (!st && !st2) {
        dev_io_t dr, dl;
        io_init(&dr, &f, w->rank * T_max, T_max), io_init(&dl, &f, w->rank * T_max, T_max);
        compare_eager(ref, l, &dr, &dl, T_max, w->s, label);
        compare_eager(ref, l, &dr, &dl, 3 + w->rank, w->s, label); /* T differs per rank */
        compare_graph(ref, l, &dr, &dl, w->s, label);
        check_no_async_error(w->g, label);
        io_free(&dr), io_free(&dl);
    }
    printf("  %s\n", label);
    moe_ep_layer_destroy(l), moe_ep_layer_destroy(ref), moe_ep_group_destroy(eg);
    fixture_free(&f);
}

/* The last rank asks for other experts: INVALID_ARGUMENT everywhere. */
static void test_mismatch(worker_t *w)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = 4 * w->world, c.top_k = 2, c.hidden = 256, c.intermediate = 128;
    c.max_tokens_per_rank = 8, c.backend = MOE_EP_BACKEND_SPLIT;
    if (w->world > 1 && w->rank == w->world - 1) c.num_experts = 8 * w->world;
    moe_ep_status_t st = moe_ep_group_check_config(w->g, &c);
    if (w->world > 1) {
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "mismatch: check_config gave %s", moe_ep_status_string(st));
        EXPECT(strstr(errmsg(), "num_experts") != NULL, "mismatch message: %s", errmsg());
        printf("  rank %d: mismatch reported: %s\n", w->rank, errmsg());
        moe_ep_layer_t l = NULL;
        st = moe_ep_layer_create(w->g, &c, &l);
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "mismatch: layer_create gave %s", moe_ep_status_string(st));
        moe_ep_layer_destroy(l);
    }
    c.num_experts = 4 * w->world;
    st = moe_ep_group_check_config(w->g, &c);
    EXPECT(st == MOE_EP_SUCCESS, "matching configs after a mismatch: %s", errmsg());
}

/* The last rank never calls forward: the others time out (bounded: split:
 * the group's watchdog uses the largest timeout of its layers, 10 s here;
 * mega: the kernel's waits, 3 s), outputs untouched, later forwards refused. */
static void test_timeout(worker_t *w, moe_ep_backend_t backend)
{
    const int T_max = 8;
    const char *name = moe_ep_backend_name(backend);
    uint64_t rng = w->seed + 99;
    fixture_t f;
    fixture_init(&f, 2 * w->world, 2, 256, 128, T_max * w->world, ROUTE_UNIFORM, &rng);
    moe_ep_layer_config_t c = config_of(&f, MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, T_max);
    c.timeout_seconds = 3, c.backend = backend;
    moe_ep_layer_t l = NULL;
    moe_ep_status_t st = make_layer(w->g, &f, &c, w->s, &l);
    EXPECT(st == MOE_EP_SUCCESS, "%s timeout layer: %s", name, errmsg());
    if (st) return;
    if (w->rank == w->world - 1) {
        printf("  rank %d: %s: not calling forward\n", w->rank, name);
        if (backend == MOE_EP_BACKEND_SPLIT) {
            sleep_ms(25000); /* the others abort meanwhile; exit without collective teardown */
            fixture_free(&f);
            return;
        }
        sleep_ms(6000); /* the others' kernels give up meanwhile (they write into our heap) */
        moe_ep_layer_destroy(l); /* no collective in a mega layer's teardown */
        fixture_free(&f);
        return;
    }
    dev_io_t d;
    io_init(&d, &f, w->rank * T_max, T_max);
    poison_out(&d, w->s);
    time_t t0 = time(NULL);
    EXPECT(forward(l, &d, T_max, w->s) == MOE_EP_SUCCESS, "%s forward enqueue: %s", name, errmsg());
    printf("  rank %d: %s: forward enqueued\n", w->rank, name);
    uint16_t *h = xmalloc((size_t)T_max * f.H * 2);
    read_out(&d, h, w->s); /* returns once the watchdog aborted the exchange / the kernel's waits gave up */
    double waited = difftime(time(NULL), t0);
    printf("  rank %d: %s: outputs read after %.0f s\n", w->rank, name, waited);
    EXPECT(waited < 20, "%s: timed out only after %.0f s", name, waited);
    moe_ep_status_t as = MOE_EP_SUCCESS;
    moe_ep_group_get_async_error(w->g, &as);
    EXPECT(as == MOE_EP_ERROR_TIMEOUT, "%s: missing rank: async status %s", name, moe_ep_status_string(as));
    printf("  rank %d: %s: %s after %.0f s: %s\n", w->rank, name, moe_ep_status_string(as), waited, errmsg());
    int untouched = 1;
    for (int i = 0; i < T_max * f.H; i++) untouched &= h[i] == POISON;
    EXPECT(untouched, "%s: timed-out forward wrote outputs", name);
    EXPECT(forward(l, &d, T_max, w->s) == MOE_EP_ERROR_TIMEOUT, "%s: forward after the timeout: %s", name, errmsg());
    free(h);
    io_free(&d);
    printf("  rank %d: %s: destroying the layer\n", w->rank, name);
    moe_ep_layer_destroy(l);
    if (backend == MOE_EP_BACKEND_MEGA) moe_ep_group_reset_async_error(w->g);
    printf("  rank %d: %s: done\n", w->rank, name);
    fixture_free(&f);
}

static int run_worker(void)
{
    worker_t w;
    memset(&w, 0, sizeof w);
    w.rank = env_int("MOE_EP_RANK", -1), w.world = env_int("MOE_EP_WORLD_SIZE", -1);
    if (w.rank < 0 || w.world < 1 || w.rank >= w.world) {
        fprintf(stderr, "--worker needs MOE_EP_RANK and MOE_EP_WORLD_SIZE (scripts/nccl_launch.sh)\n");
        return 1;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < w.world) {
        printf("SKIP: %d ranks need %d GPUs, %d usable\n", w.world, w.world, count);
        return SKIP;
    }
    moe_ep_unique_id_t probe;
    if (w.rank == 0 && moe_ep_get_unique_id(&probe) == MOE_EP_ERROR_UNSUPPORTED) {
        printf("SKIP: %s\n", errmsg());
        return SKIP; /* the others time out waiting for the id and skip too */
    }
    moe_ep_unique_id_t id;
    if (share_id(&w, &id) != 0) {
        printf("SKIP: no unique id from rank 0\n");
        return SKIP;
    }
    w.seed = (uint64_t)env_int("MOE_EP_TEST_SEED", 12345);
    CUDA_CHECK(cudaSetDevice(w.rank));
    CUDA_CHECK(cudaStreamCreate(&w.s));
    moe_ep_status_t st = moe_ep_group_create_from_id(&id, w.world, w.rank, w.rank, &w.g);
    EXPECT(st == MOE_EP_SUCCESS, "rank %d: create_from_id: %s", w.rank, errmsg());
    if (st) return test_summary("test_nccl --worker");
    test_exchange(&w);
    test_heap(&w);
    test_mismatch(&w);
    /* Every path x wire on both backends; the routing cycles through uniform,
     * skewed (one rank, one expert) and sparse (-1 slots). */
    static const route_t routes[] = {ROUTE_UNIFORM, ROUTE_ONE_RANK, ROUTE_SPARSE, ROUTE_ONE_EXPERT};
    int n = 0;
    for (int b = 0; b < 2; b++)
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++)
            for (int wi = 0; wi < MOE_EP_WIRE_COUNT_; wi++, n++)
                test_layer(&w, b ? MOE_EP_BACKEND_MEGA : MOE_EP_BACKEND_SPLIT, (moe_ep_path_t)p, (moe_ep_wire_t)wi,
                           routes[n % 4], 0);
    for (int b = 0; b < 2; b++) /* FP8-BLOCK with fp8_fast_accum (the QGMMA instances), skewed and uniform */
        for (int r = 0; r < 2; r++)
            test_layer(&w, b ? MOE_EP_BACKEND_MEGA : MOE_EP_BACKEND_SPLIT, MOE_EP_PATH_FP8_BLOCK,
                       r ? MOE_EP_WIRE_FP4 : MOE_EP_WIRE_MXFP8, r ? ROUTE_ONE_EXPERT : ROUTE_UNIFORM, 1);
    if (w.world > 1) test_timeout(&w, MOE_EP_BACKEND_MEGA); /* in-kernel waits: the group stays usable */
    /* Split over NCCL: the watchdog's ncclCommAbort does not return while the
     * absent rank keeps its communicator (NCCL 2.28, H200 x2, 2026-11-29), so
     * the forward never drains: a known failure, run only on request. */
    int aborted = w.world > 1 && env_int("MOE_EP_TEST_SPLIT_TIMEOUT", 0);
    if (aborted) test_timeout(&w, MOE_EP_BACKEND_SPLIT); /* last: the communicator is aborted */
    int rc = test_summary("test_nccl --worker");
    if (aborted && w.rank == w.world - 1) return rc; /* peers are gone: no teardown */
    moe_ep_group_destroy(w.g);
    cudaStreamDestroy(w.s);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("SKIP: no CUDA device usable\n");
        return SKIP;
    }
    setvbuf(stdout, NULL, _IONBF, 0); /* a killed rank still shows how far it got */
    if (argc > 1 && strcmp(argv[1], "--worker") == 0) return run_worker();
    return run_single();
}
