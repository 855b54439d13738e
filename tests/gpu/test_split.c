/* The GPU backends against the CPU reference backend: every path and wire,
 * routing corner cases, token counts, EP-size bit-exactness, CUDA graph replay
 * with device-side token counts, device-side expert id errors, kernel knobs
 * (explicit and autotuned) never changing results, and a larger layer. Fresh random inputs each run (MOE_EP_TEST_SEED replays one);
 * MOE_EP_TEST_BACKENDS="split,mega" picks the GPU backends (default: split);
 * with several, each case also checks that they give the same bytes, and with
 * mega a forced timeout (one rank's tokens never arrive) must come back as
 * MOE_EP_ERROR_TIMEOUT, after which the layer works again.
 * Exits 77 (skipped) when no CUDA device is usable. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv */
#include "layer_fixture.h"
#include "test_util.h"

#include "core/mega.h"
#include "formats/codec.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANKS 8
#define POISON 0xFFFFu /* bf16 NaN: 0xFF bytes */

/* ---- plumbing ------------------------------------------------------------- */

#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

/* A failing CUDA call ends the test: later calls would fail for the same reason. */
static void cuda_check(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
    test_failed++;
    exit(test_summary("test_split"));
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int quick(void) { return getenv("MOE_EP_TEST_QUICK") != NULL; }

static moe_ep_backend_t backends[MOE_EP_BACKEND_COUNT_];
static int num_backends;

/* MOE_EP_TEST_BACKENDS: comma-separated GPU backend names; default "split". */
static void pick_backends(void)
{
    const char *env = getenv("MOE_EP_TEST_BACKENDS");
    char list[128];
    snprintf(list, sizeof list, "%s", env && *env ? env : "split");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int b = 1; b < MOE_EP_BACKEND_COUNT_ && num_backends < MOE_EP_BACKEND_COUNT_; b++)
            if (strcmp(tok, moe_ep_backend_name((moe_ep_backend_t)b)) == 0)
                backends[num_backends++] = (moe_ep_backend_t)b, found = 1;
        EXPECT(found, "MOE_EP_TEST_BACKENDS: unknown GPU backend %s", tok);
    }
    printf("GPU backends:");
    for (int i = 0; i < num_backends; i++) printf(" %s", moe_ep_backend_name(backends[i]));
    printf("\n");
}

/* Relative L2 tolerance against the reference: the looser of the path's and
 * the wire's. A quantized wire rounds y again, and where the GPU's fp32 sums
 * differ from the reference's in the last bit a rounding can flip by one FP4
 * or FP8 step (bf16 path with the fp4 wire: up to about 4e-3 seen). */
static double tolerance(moe_ep_path_t p, moe_ep_wire_t w)
{
    static const double path_tol[MOE_EP_PATH_COUNT_] = {5e-3, 1e-2, 2e-2, 2e-2, 1e-2};
    static const double wire_tol[MOE_EP_WIRE_COUNT_] = {0.0, 1e-2, 2e-2};
    return path_tol[p] > wire_tol[w] ? path_tol[p] : wire_tol[w];
}

/* ---- layers --------------------------------------------------------------- */

/* Tokens of each rank: rank r takes fixture tokens [first[r], first[r] + nt[r]). */
typedef struct {
    int R;
    int32_t nt[MAX_RANKS];
    int first[MAX_RANKS];
} split_t;

static split_t split_strided(int R, int T, int stride)
{
    split_t s;
    memset(&s, 0, sizeof s);
    s.R = R;
    for (int r = 0; r < R; r++) s.nt[r] = T, s.first[r] = r * stride;
    return s;
}

typedef struct {
    moe_ep_path_t path;
    moe_ep_wire_t wire;
    moe_ep_backend_t backend;
    int R, max_tokens;
    float s1, s2; /* NVFP4 fc1/fc2 input scales */
    const moe_ep_knobs_t *knobs;
    int autotune;
    double timeout_seconds;
    int num_sms; /* config.num_sms: 0 = every SM */
    int fp8_fast_accum;
} spec_t;

static spec_t make_spec(moe_ep_path_t path, moe_ep_wire_t wire, int R, int max_tokens)
{
    spec_t s = {path, wire, MOE_EP_BACKEND_REFERENCE, R, max_tokens, 0.0f, 0.0f, NULL, 0, 0.0, 0, 0};
    return s;
}

/* fp8_fast_accum (FP8-BLOCK on QGMMA, reduced-precision FP8 sums): the GEMMs
 * are ~5e-3 from the fp32 reference, and every requantization or wire rounding
 * that lands on the other side of a rounding point moves an element by a
 * whole FP8/FP4 step (measured: bf16 wire 3-6e-3, MXFP8 wire 5e-3-1.5e-2,
 * FP4 wire 1.6-3.6e-2 at 2 tokens); about 3x above the largest seen, since
 * the inputs are fresh random numbers on every run. */
static double spec_tolerance(const spec_t *s)
{
    static const double fast_tol[MOE_EP_WIRE_COUNT_] = {2e-2, 4e-2, 1e-1};
    return s->fp8_fast_accum && s->path == MOE_EP_PATH_FP8_BLOCK ? fast_tol[s->wire] : tolerance(s->path, s->wire);
}

static const char *errmsg(void) { return moe_ep_last_error(); }

/* Group and layer for the spec's backend (GPU: device 0), with the fixture's
 * bf16 checkpoint loaded from host memory, or from device memory when
 * dev_w13/dev_w2 are given. */
static moe_ep_status_t make_layer_from(const fixture_t *f, const spec_t *s, cudaStream_t stream,
                                       const void *dev_w13, const void *dev_w2,
                                       moe_ep_group_t *g, moe_ep_layer_t *l)
{
    int gpu = s->backend != MOE_EP_BACKEND_REFERENCE;
    *g = NULL, *l = NULL;
    moe_ep_status_t st = moe_ep_group_create_emulated(s->R, gpu ? 0 : -1, g);
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = f->E, c.top_k = f->K, c.hidden = f->H, c.intermediate = f->I;
    c.max_tokens_per_rank = s->max_tokens, c.swiglu_limit = f->swiglu_limit;
    c.path = s->path, c.wire = s->wire, c.backend = s->backend;
    if (s->path == MOE_EP_PATH_NVFP4) c.fc1_input_scale = s->s1, c.fc2_input_scale = s->s2;
    c.knobs = s->knobs, c.autotune = s->autotune, c.timeout_seconds = s->timeout_seconds, c.num_sms = s->num_sms;
    c.fp8_fast_accum = s->fp8_fast_accum;
    if (!st) st = moe_ep_layer_create(*g, &c, l);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = f->E;
    w.on_device = dev_w13 != NULL;
    w.w13 = dev_w13 ? dev_w13 : f->w13, w.w2 = dev_w2 ? dev_w2 : f->w2;
    if (!st) st = moe_ep_layer_load_experts(*l, &w, gpu ? (moe_ep_stream_t)stream : NULL);
    if (!st && gpu) CUDA_CHECK(cudaStreamSynchronize(stream));
    return st;
}

static moe_ep_status_t make_layer(const fixture_t *f, const spec_t *s, cudaStream_t stream,
                                  moe_ep_group_t *g, moe_ep_layer_t *l)
{
    return make_layer_from(f, s, stream, NULL, NULL, g, l);
}

static void free_layer(moe_ep_group_t g, moe_ep_layer_t l)
{
    moe_ep_layer_destroy(l);
    moe_ep_group_destroy(g);
}

typedef fixture_ptrs_t ptrs_t;

/* Forward arguments over base arrays laid out like the fixture (host or device). */
static moe_ep_forward_args_t make_args(ptrs_t *p, const fixture_t *f, const split_t *sp,
                                       const uint16_t *x, const int32_t *ids, const float *wt,
                                       uint16_t *out)
{
    return fixture_args(p, f, sp->R, sp->first, sp->nt, x, ids, wt, out);
}

/* NVFP4: activation scales calibrated on the reference layer over every token. */
static void nvfp4_scales(const fixture_t *f, spec_t *s)
{
    if (s->path != MOE_EP_PATH_NVFP4) return;
    spec_t r = *s;
    r.backend = MOE_EP_BACKEND_REFERENCE, r.R = 1, r.max_tokens = f->total_tokens;
    r.s1 = r.s2 = 0.0f;
    moe_ep_group_t g;
    moe_ep_layer_t l;
    split_t sp = split_strided(1, f->total_tokens, 0);
    ptrs_t p;
    moe_ep_forward_args_t a = make_args(&p, f, &sp, f->x, f->ids, f->weights, NULL);
    moe_ep_status_t st = make_layer(f, &r, NULL, &g, &l);
    if (!st) st = moe_ep_layer_calibrate_nvfp4(l, &a, &s->s1, &s->s2);
    EXPECT(st == MOE_EP_SUCCESS, "nvfp4 calibration: %s", errmsg());
    free_layer(g, l);
}

/* Reference forward; out [total_tokens][H] on the host. */
static moe_ep_status_t ref_forward(const fixture_t *f, const spec_t *s, const split_t *sp,
                                   uint16_t *out)
{
    spec_t r = *s;
    r.backend = MOE_EP_BACKEND_REFERENCE;
    moe_ep_group_t g;
    moe_ep_layer_t l;
    ptrs_t p;
    moe_ep_forward_args_t a = make_args(&p, f, sp, f->x, f->ids, f->weights, out);
    moe_ep_status_t st = make_layer(f, &r, NULL, &g, &l);
    if (!st) st = moe_ep_layer_forward(l, &a, NULL);
    free_layer(g, l);
    return st;
}

/* ---- device buffers ------------------------------------------------------- */

typedef struct {
    uint16_t *x, *out;
    int32_t *ids, *nt;
    float *wt;
    size_t out_bytes;
} dbuf_t;

static void dev_init(dbuf_t *d, const fixture_t *f)
{
    size_t n = (size_t)f->total_tokens, H = (size_t)f->H, K = (size_t)f->K;
    d->out_bytes = n * H * sizeof(uint16_t);
    CUDA_CHECK(cudaMalloc((void **)&d->x, n * H * sizeof(uint16_t)));
    CUDA_CHECK(cudaMalloc((void **)&d->out, d->out_bytes));
    CUDA_CHECK(cudaMalloc((void **)&d->ids, n * K * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc((void **)&d->wt, n * K * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&d->nt, MAX_RANKS * sizeof(int32_t)));
    CUDA_CHECK(cudaMemcpy(d->x, f->x, n * H * sizeof(uint16_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->ids, f->ids, n * K * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->wt, f->weights, n * K * sizeof(float), cudaMemcpyHostToDevice));
}

static void dev_free(dbuf_t *d)
{
    CUDA_CHECK(cudaFree(d->x));
    CUDA_CHECK(cudaFree(d->out));
    CUDA_CHECK(cudaFree(d->ids));
    CUDA_CHECK(cudaFree(d->wt));
    CUDA_CHECK(cudaFree(d->nt));
}

static void dev_poison(const dbuf_t *d, cudaStream_t s)
{
    CUDA_CHECK(cudaMemsetAsync(d->out, 0xFF, d->out_bytes, s));
}

static void dev_read_out(const dbuf_t *d, uint16_t *out, cudaStream_t s)
{
    CUDA_CHECK(cudaMemcpyAsync(out, d->out, d->out_bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

/* Writes the split's token counts into the device array (stream-ordered). */
static void dev_set_counts(const dbuf_t *d, const split_t *sp, cudaStream_t s)
{
    CUDA_CHECK(cudaMemcpyAsync(d->nt, sp->nt, sizeof(int32_t) * (size_t)sp->R,
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s)); /* sp->nt may be a temporary */
}

/* Enqueues one GPU forward; device_nt: token counts from d->nt. */
static moe_ep_status_t gpu_forward(moe_ep_layer_t l, const fixture_t *f, const dbuf_t *d,
                                   const split_t *sp, int device_nt, cudaStream_t s)
{
    ptrs_t p;
    moe_ep_forward_args_t a = make_args(&p, f, sp, d->x, d->ids, d->wt, d->out);
    if (device_nt) a.num_tokens = NULL, a.num_tokens_device = d->nt;
    return moe_ep_layer_forward(l, &a, (moe_ep_stream_t)s);
}

static moe_ep_status_t async_error(moe_ep_group_t g)
{
    moe_ep_status_t status = MOE_EP_ERROR_INTERNAL;
    moe_ep_status_t st = moe_ep_group_get_async_error(g, &status);
    EXPECT(st == MOE_EP_SUCCESS, "moe_ep_group_get_async_error: %s", errmsg());
    return status;
}

/* Waits for the stream; returns the group's device-side error status. */
static moe_ep_status_t finish(moe_ep_group_t g, cudaStream_t s)
{
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaGetLastError());
    return async_error(g);
}

/* Poisons the outputs, runs one forward, waits, and copies the outputs to out
 * (also after a failure, so a caller can check they stayed poisoned). */
static moe_ep_status_t poisoned_forward(moe_ep_group_t g, moe_ep_layer_t l, const fixture_t *f, const dbuf_t *d,
                                        const split_t *sp, int device_nt, cudaStream_t s, uint16_t *out)
{
    dev_poison(d, s);
    moe_ep_status_t st = gpu_forward(l, f, d, sp, device_nt, s);
    if (!st) st = finish(g, s);
    dev_read_out(d, out, s);
    return st;
}

/* Creates the GPU layer, runs `runs` forwards (host token counts, outputs
 * poisoned before each), checks they agree bit for bit, and returns the
 * outputs [total_tokens][H] in out. */
static moe_ep_status_t gpu_run(const fixture_t *f, const spec_t *s, const split_t *sp,
                               const dbuf_t *d, cudaStream_t stream, int runs, uint16_t *out)
{
    moe_ep_group_t g;
    moe_ep_layer_t l;
    moe_ep_status_t st = make_layer(f, s, stream, &g, &l);
    uint16_t *again = xmalloc(d->out_bytes);
    for (int i = 0; i < runs && !st; i++) {
        dev_poison(d, stream);
        st = gpu_forward(l, f, d, sp, 0, stream);
        if (!st) st = finish(g, stream);
        if (!st) dev_read_out(d, i == 0 ? out : again, stream);
        if (!st && i > 0)
            EXPECT(memcmp(out, again, d->out_bytes) == 0, "%s/%s R=%d: run %d differs from run 0",
                   moe_ep_path_name(s->path), moe_ep_wire_name(s->wire), s->R, i);
    }
    free(again);
    free_layer(g, l);
    return st;
}

/* ---- comparisons ---------------------------------------------------------- */

typedef struct {
    int64_t unwritten, nans, outside, nonzero_unrouted;
    double err;
} cmp_t;

static int token_rank(const split_t *sp, int t)
{
    for (int r = 0; r < sp->R; r++)
        if (t >= sp->first[r] && t < sp->first[r] + sp->nt[r]) return r;
    return -1;
}

static int unrouted(const fixture_t *f, int t)
{
    for (int k = 0; k < f->K; k++)
        if (f->ids[t * f->K + k] >= 0) return 0;
    return 1;
}

/* got vs want over the split's tokens; other rows must still be poisoned. */
static cmp_t compare(const fixture_t *f, const split_t *sp, const uint16_t *got,
                     const uint16_t *want)
{
    cmp_t c = {0, 0, 0, 0, 0.0};
    double num = 0, den = 0;
    for (int t = 0; t < f->total_tokens; t++) {
        int in = token_rank(sp, t) >= 0, none = unrouted(f, t);
        for (int i = 0; i < f->H; i++) {
            size_t j = (size_t)t * f->H + i;
            float g = moe_ep_bf16_to_f32(got[j]), w = moe_ep_bf16_to_f32(want[j]);
            if (!in) {
                c.outside += got[j] != POISON;
                continue;
            }
            if (got[j] == POISON) c.unwritten++;
            else if (isnan(g)) c.nans++;
            c.nonzero_unrouted += none && got[j] != 0;
            num += ((double)g - w) * ((double)g - w), den += (double)w * w;
        }
    }
    c.err = den > 0 ? sqrt(num / den) : sqrt(num);
    return c;
}

static void check_case(const char *name, const fixture_t *f, const split_t *sp,
                       const uint16_t *got, const uint16_t *want, double tol)
{
    cmp_t c = compare(f, sp, got, want);
    printf("  %-52s rel L2 %.3e (tol %.0e)\n", name, c.err, tol);
    EXPECT(c.unwritten == 0, "%s: %lld output elements not written", name, (long long)c.unwritten);
    EXPECT(c.nans == 0, "%s: %lld NaN outputs", name, (long long)c.nans);
    EXPECT(c.outside == 0, "%s: %lld elements written outside the tokens' rows", name,
           (long long)c.outside);
    EXPECT(c.nonzero_unrouted == 0, "%s: %lld nonzero outputs of tokens with every slot -1",
           name, (long long)c.nonzero_unrouted);
    EXPECT(c.err <= tol, "%s: rel L2 %.3e > %.0e", name, c.err, tol);
}

/* Reference vs every GPU backend on the same fixture, weights and split. */
static void versus_reference(const char *name, const fixture_t *f, spec_t s, const split_t *sp,
                             const dbuf_t *d, cudaStream_t stream)
{
    uint16_t *want = xmalloc(d->out_bytes), *got = xmalloc(d->out_bytes), *first = xmalloc(d->out_bytes);
    memset(want, 0xFF, d->out_bytes);
    nvfp4_scales(f, &s);
    moe_ep_status_t st = ref_forward(f, &s, sp, want);
    EXPECT(st == MOE_EP_SUCCESS, "%s: reference: %s", name, errmsg());
    for (int b = 0; b < num_backends && !st; b++) {
        char label[160];
        snprintf(label, sizeof label, "%s %s/%s %s", moe_ep_backend_name(backends[b]),
                 moe_ep_path_name(s.path), moe_ep_wire_name(s.wire), name);
        s.backend = backends[b];
        if (s.backend == MOE_EP_BACKEND_MEGA && f->H % 256 != 0) continue; /* split only (layer.c) */
        memset(got, 0xFF, d->out_bytes);
        moe_ep_status_t gs = gpu_run(f, &s, sp, d, stream, 1, got);
        EXPECT(gs == MOE_EP_SUCCESS, "%s: %s (%s)", label, moe_ep_status_string(gs), errmsg());
        if (gs == MOE_EP_SUCCESS) check_case(label, f, sp, got, want, spec_tolerance(&s));
        if (b == 0) memcpy(first, got, d->out_bytes);
        else /* every GPU backend has the same rounding points: the same bytes */
            EXPECT(memcmp(first, got, d->out_bytes) == 0, "%s: bytes differ from the %s backend's", label,
                   moe_ep_backend_name(backends[0]));
    }
    free(want), free(got), free(first);
}

/* ---- cases ---------------------------------------------------------------- */

static const char *route_name(route_t r);

/* Explicit knobs {tile rows, CTAs per SM} valid for the fixture's shapes and
 * the path: {16,1} {64,1} {16,2} {64,2} (and {128, 1}, the HGMMA tile, on
 * bf16); the quantized paths with the wgmma shapes run only one tile kind:
 * the register tile, 128, 64, 32 or 16 rows (fp16 HGMMA; FP8-BLOCK with
 * fp8_fast_accum QGMMA), and have nothing to tune. Returns how many; *one_tile
 * says whether they are the register tile's. */
static int valid_knob_sets(const fixture_t *f, moe_ep_path_t path, const int (**sets)[2], int *one_tile)
{
    static const int all[5][2] = {{16, 1}, {64, 1}, {16, 2}, {64, 2}, {128, 1}},
                     rs[6][2] = {{16, 1}, {32, 1}, {64, 1}, {128, 1}, {64, 2}, {128, 2}};
    int wg_shapes = f->H % 256 == 0 && f->I % 128 == 0;
    *one_tile = path != MOE_EP_PATH_BF16 && wg_shapes;
    *sets = *one_tile ? rs : all;
    return *one_tile ? 6 : path == MOE_EP_PATH_BF16 && wg_shapes ? 5 : 4;
}

/* One of valid_knob_sets at random. */
static moe_ep_knobs_t random_valid_knobs(const fixture_t *f, moe_ep_path_t path, uint64_t *rng)
{
    const int(*sets)[2];
    int one_tile, i = (int)(test_rand_u64(rng) % (uint64_t)valid_knob_sets(f, path, &sets, &one_tile));
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = sets[i][0], k.gemm_ctas_per_sm = sets[i][1];
    return k;
}

/* One GPU backend at random: its heuristic knobs on every SM, then random
 * explicit knobs on a random number of SMs, give the same bytes. */
static void random_knobs_same_bytes(const char *name, const fixture_t *f, spec_t s, const split_t *sp,
                                    const dbuf_t *d, uint64_t *rng, cudaStream_t stream)
{
    s.backend = backends[test_rand_u64(rng) % (uint64_t)num_backends];
    if (s.backend == MOE_EP_BACKEND_MEGA && f->H % 256 != 0) s.backend = MOE_EP_BACKEND_SPLIT;
    nvfp4_scales(f, &s);
    uint16_t *base = xmalloc(d->out_bytes), *out = xmalloc(d->out_bytes);
    moe_ep_status_t st = gpu_run(f, &s, sp, d, stream, 1, base);
    moe_ep_knobs_t k = random_valid_knobs(f, s.path, rng);
    s.knobs = &k, s.num_sms = 1 + (int)(test_rand_u64(rng) % 140);
    if (!st) st = gpu_run(f, &s, sp, d, stream, 1, out);
    printf("  %s %s knobs {%d, %d} on %d SMs: %s\n", moe_ep_backend_name(s.backend), name, k.gemm_tile_rows,
           k.gemm_ctas_per_sm, s.num_sms, st ? errmsg() : memcmp(base, out, d->out_bytes) ? "DIFFER" : "same bytes");
    EXPECT(st == MOE_EP_SUCCESS && memcmp(base, out, d->out_bytes) == 0, "%s %s knobs {%d, %d}, %d SMs: %s",
           moe_ep_backend_name(s.backend), name, k.gemm_tile_rows, k.gemm_ctas_per_sm, s.num_sms,
           st ? errmsg() : "bytes differ from the heuristic knobs'");
    free(base), free(out);
}

/* Random geometries (the fixed cases below use a few): E = R x 1..4, K up to
 * 8, H and I multiples of 128 (H % 256 != 0: split only, its other tiles),
 * uneven token counts per rank (0 included), a random path, wire and routing;
 * against the reference, mega against split bit for bit, and random explicit
 * knobs and SM counts against the heuristic's bytes. */
static void test_random_shapes(uint64_t *rng, cudaStream_t stream)
{
    static const int Rs[] = {1, 2, 4, 8}, Hs[] = {128, 256, 384, 512, 768, 1024}, Is[] = {128, 256, 384, 512, 640};
    const int cases = quick() ? 3 : 12;
    printf("random shapes (%d cases)\n", cases);
    for (int c = 0; c < cases; c++) {
        int R = Rs[test_rand_u64(rng) % 4], E = R * (int)(1 + test_rand_u64(rng) % 4);
        int K = 1 + (int)(test_rand_u64(rng) % (uint64_t)(E < 8 ? E : 8));
        int H = Hs[test_rand_u64(rng) % 6], I = Is[test_rand_u64(rng) % 5];
        int T_max = 1 + (int)(test_rand_u64(rng) % 96);
        route_t route = (route_t)(test_rand_u64(rng) % 4);
        fixture_t f;
        fixture_init(&f, E, K, H, I, R * T_max, route, rng);
        dbuf_t d;
        dev_init(&d, &f);
        split_t sp = split_strided(R, 0, T_max);
        for (int r = 0; r < R; r++) sp.nt[r] = (int32_t)(test_rand_u64(rng) % (uint64_t)(T_max + 1));
        moe_ep_path_t path = (moe_ep_path_t)(test_rand_u64(rng) % MOE_EP_PATH_COUNT_);
        moe_ep_wire_t wire = (moe_ep_wire_t)(test_rand_u64(rng) % MOE_EP_WIRE_COUNT_);
        char name[96];
        snprintf(name, sizeof name, "E %d K %d H %d I %d R %d T<=%d %s", E, K, H, I, R, T_max, route_name(route));
        spec_t spec = make_spec(path, wire, R, T_max);
        versus_reference(name, &f, spec, &sp, &d, stream);
        random_knobs_same_bytes(name, &f, spec, &sp, &d, rng, stream);
        dev_free(&d);
        fixture_free(&f);
    }
}

enum { SE = 16, SK = 4, SH = 512, SI = 256, ST = 40, SMAX = 48 };

/* Every path x every wire, R=2, 40 tokens per rank (not a multiple of any tile). */
static void test_paths_wires(uint64_t *rng, cudaStream_t stream)
{
    printf("paths x wires (E %d, K %d, H %d, I %d, R 2, T %d)\n", SE, SK, SH, SI, ST);
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * ST, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(2, ST, ST);
    for (int p = 0; p < MOE_EP_PATH_COUNT_; p++)
        for (int w = 0; w < MOE_EP_WIRE_COUNT_; w++)
            versus_reference("uniform", &f, make_spec((moe_ep_path_t)p, (moe_ep_wire_t)w, 2, SMAX),
                             &sp, &d, stream);
    dev_free(&d);
    fixture_free(&f);
}

static const char *route_name(route_t r)
{
    static const char *n[] = {"uniform", "one-expert", "one-rank", "sparse"};
    return n[r];
}

/* Routing corner cases, every path (wire varies with the path). */
static void test_routes(uint64_t *rng, cudaStream_t stream)
{
    printf("routing cases\n");
    route_t routes[] = {ROUTE_ONE_EXPERT, ROUTE_ONE_RANK, ROUTE_SPARSE};
    for (int ri = 0; ri < 3; ri++) {
        fixture_t f;
        fixture_init(&f, SE, SK, SH, SI, 2 * ST, routes[ri], rng);
        dbuf_t d;
        dev_init(&d, &f);
        split_t sp = split_strided(2, ST, ST);
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
            moe_ep_wire_t w = (moe_ep_wire_t)((p + ri) % MOE_EP_WIRE_COUNT_);
            versus_reference(route_name(routes[ri]), &f, make_spec((moe_ep_path_t)p, w, 2, SMAX),
                             &sp, &d, stream);
        }
        dev_free(&d);
        fixture_free(&f);
    }
}

/* T = 0, 1, max_tokens_per_rank, and uneven counts across ranks. */
static void test_token_counts(uint64_t *rng, cudaStream_t stream)
{
    printf("token counts (max_tokens_per_rank %d)\n", SMAX);
    static const int32_t counts[][2] = {{0, 0}, {1, 1}, {SMAX, SMAX}, {SMAX, 0}, {0, 17}, {1, SMAX}};
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * SMAX, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        split_t sp = split_strided(2, 0, SMAX);
        sp.nt[0] = counts[c][0], sp.nt[1] = counts[c][1];
        char name[48];
        snprintf(name, sizeof name, "T = {%d, %d}", (int)sp.nt[0], (int)sp.nt[1]);
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
            if (quick() && p != MOE_EP_PATH_MXFP8) continue;
            moe_ep_wire_t w = (moe_ep_wire_t)((p + (int)c) % MOE_EP_WIRE_COUNT_);
            versus_reference(name, &f, make_spec((moe_ep_path_t)p, w, 2, SMAX), &sp, &d, stream);
        }
    }
    dev_free(&d);
    fixture_free(&f);
}

/* The same 64 tokens on R = 1, 2, 4, 8 ranks give the same bytes, run after run. */
static void test_ep_invariance(uint64_t *rng, cudaStream_t stream)
{
    enum { TOTAL = 64 };
    printf("EP-size bit-exactness (R = 1, 2, 4, 8; %d tokens)\n", TOTAL);
    route_t routes[] = {ROUTE_UNIFORM, ROUTE_ONE_EXPERT, ROUTE_SPARSE};
    for (int ri = 0; ri < 3; ri++) {
        fixture_t f;
        fixture_init(&f, SE, SK, SH, SI, TOTAL, routes[ri], rng);
        dbuf_t d;
        dev_init(&d, &f);
        uint16_t *base = xmalloc(d.out_bytes), *out = xmalloc(d.out_bytes);
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++)
            for (int b = 0; b < num_backends; b++) {
                spec_t s = make_spec((moe_ep_path_t)p, (moe_ep_wire_t)(p % MOE_EP_WIRE_COUNT_), 1, TOTAL);
                s.backend = backends[b];
                nvfp4_scales(&f, &s);
                for (int R = 1; R <= MAX_RANKS; R *= 2) {
                    split_t sp = split_strided(R, TOTAL / R, TOTAL / R);
                    s.R = R, s.max_tokens = TOTAL / R;
                    moe_ep_status_t st = gpu_run(&f, &s, &sp, &d, stream, 2, R == 1 ? base : out);
                    EXPECT(st == MOE_EP_SUCCESS, "%s %s R=%d: %s", route_name(routes[ri]),
                           moe_ep_path_name(p), R, errmsg());
                    if (R > 1 && !st)
                        EXPECT(memcmp(base, out, d.out_bytes) == 0, "%s %s %s: R=%d differs from R=1",
                               moe_ep_backend_name(s.backend), route_name(routes[ri]),
                               moe_ep_path_name(p), R);
                }
                printf("  %s %s/%s %s: R = 1, 2, 4, 8 compared\n", moe_ep_backend_name(s.backend),
                       moe_ep_path_name(s.path), moe_ep_wire_name(s.wire), route_name(routes[ri]));
            }
        free(base), free(out);
        dev_free(&d);
        fixture_free(&f);
    }
}

/* Captures one forward reading num_tokens_device; returns 0 on success. */
static int capture_forward(moe_ep_layer_t l, const fixture_t *f, const dbuf_t *d,
                           const split_t *sp, cudaStream_t s, cudaGraphExec_t *exec)
{
    cudaGraph_t graph = NULL;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    moe_ep_status_t st = gpu_forward(l, f, d, sp, 1, s);
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    EXPECT(st == MOE_EP_SUCCESS, "forward during capture: %s", errmsg());
    EXPECT(e == cudaSuccess, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
    if (e == cudaSuccess && st == MOE_EP_SUCCESS) {
        e = cudaGraphInstantiate(exec, graph, 0);
        EXPECT(e == cudaSuccess, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
    }
    if (graph) CUDA_CHECK(cudaGraphDestroy(graph));
    (void)cudaGetLastError(); /* a failed capture leaves a non-sticky error */
    return e != cudaSuccess || st != MOE_EP_SUCCESS;
}

/* Graph replay with counts written into the device array vs eager forwards. */
static void replay_counts(moe_ep_group_t g, moe_ep_layer_t l, const fixture_t *f, const dbuf_t *d,
                          cudaGraphExec_t exec, cudaStream_t s, const char *label)
{
    static const int32_t counts[][2] = {{SMAX, SMAX}, {1, 1}, {17, 40}, {0, 5}, {0, 0}, {33, SMAX}};
    uint16_t *graph_out = xmalloc(d->out_bytes), *eager_out = xmalloc(d->out_bytes);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        split_t sp = split_strided(2, 0, SMAX);
        sp.nt[0] = counts[c][0], sp.nt[1] = counts[c][1];
        dev_set_counts(d, &sp, s);
        dev_poison(d, s);
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        moe_ep_status_t st = finish(g, s);
        EXPECT(st == MOE_EP_SUCCESS, "%s: replay T={%d,%d}: %s", label, (int)sp.nt[0], (int)sp.nt[1],
               moe_ep_status_string(st));
        dev_read_out(d, graph_out, s);
        st = poisoned_forward(g, l, f, d, &sp, 0, s, eager_out);
        EXPECT(st == MOE_EP_SUCCESS, "%s: eager T={%d,%d}: %s", label, (int)sp.nt[0], (int)sp.nt[1], errmsg());
        cmp_t cm = compare(f, &sp, graph_out, eager_out);
        EXPECT(cm.unwritten == 0 && cm.outside == 0, "%s: replay T={%d,%d}: %lld unwritten, %lld outside",
               label, (int)sp.nt[0], (int)sp.nt[1], (long long)cm.unwritten, (long long)cm.outside);
        EXPECT(memcmp(graph_out, eager_out, d->out_bytes) == 0, "%s: replay T={%d,%d} differs from eager",
               label, (int)sp.nt[0], (int)sp.nt[1]);
    }
    printf("  %s: graph replayed for %zu token counts\n", label, sizeof counts / sizeof counts[0]);
    free(graph_out), free(eager_out);
}

/* Eager forward with device counts equals host counts. */
static void device_counts_eager(moe_ep_group_t g, moe_ep_layer_t l, const fixture_t *f,
                                const dbuf_t *d, cudaStream_t s, const char *label)
{
    uint16_t *a = xmalloc(d->out_bytes), *b = xmalloc(d->out_bytes);
    split_t sp = split_strided(2, 0, SMAX);
    sp.nt[0] = 29, sp.nt[1] = SMAX;
    dev_set_counts(d, &sp, s);
    moe_ep_status_t st = poisoned_forward(g, l, f, d, &sp, 1, s, a);
    EXPECT(st == MOE_EP_SUCCESS, "%s: forward with num_tokens_device: %s", label, errmsg());
    st = poisoned_forward(g, l, f, d, &sp, 0, s, b);
    EXPECT(st == MOE_EP_SUCCESS, "%s: forward: %s", label, errmsg());
    EXPECT(memcmp(a, b, d->out_bytes) == 0, "%s: num_tokens_device differs from num_tokens", label);
    free(a), free(b);
}

static void test_graph(uint64_t *rng, cudaStream_t stream)
{
    printf("CUDA graph with num_tokens_device\n");
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * SMAX, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    static const moe_ep_path_t paths[] = {MOE_EP_PATH_MXFP8, MOE_EP_PATH_NVFP4};
    static const moe_ep_wire_t wires[] = {MOE_EP_WIRE_BF16, MOE_EP_WIRE_FP4};
    for (int b = 0; b < num_backends; b++)
        for (int i = 0; i < 2; i++) {
            spec_t s = make_spec(paths[i], wires[i], 2, SMAX);
            s.backend = backends[b];
            nvfp4_scales(&f, &s);
            char label[96];
            snprintf(label, sizeof label, "%s %s/%s", moe_ep_backend_name(s.backend),
                     moe_ep_path_name(s.path), moe_ep_wire_name(s.wire));
            moe_ep_group_t g;
            moe_ep_layer_t l;
            moe_ep_status_t st = make_layer(&f, &s, stream, &g, &l);
            EXPECT(st == MOE_EP_SUCCESS, "%s: %s", label, errmsg());
            if (!st) device_counts_eager(g, l, &f, &d, stream, label);
            split_t sp = split_strided(2, SMAX, SMAX);
            cudaGraphExec_t exec = NULL;
            if (!st && capture_forward(l, &f, &d, &sp, stream, &exec) == 0) {
                replay_counts(g, l, &f, &d, exec, stream, label);
                CUDA_CHECK(cudaGraphExecDestroy(exec));
            }
            free_layer(g, l);
        }
    dev_free(&d);
    fixture_free(&f);
}

static int all_poison(const uint16_t *o, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (o[i] != POISON) return 0;
    return 1;
}

/* A bad id is reported after sync, outputs untouched, later forwards do
 * nothing until the error is reset; then a good forward works again. */
static void bad_id_sequence(moe_ep_group_t g, moe_ep_layer_t l, const fixture_t *f, const dbuf_t *d,
                            const uint16_t *good, int32_t bad, cudaStream_t s)
{
    split_t sp = split_strided(2, ST, ST);
    size_t nids = (size_t)f->total_tokens * f->K, slot = (size_t)(ST + 7) * f->K + 2;
    uint16_t *out = xmalloc(d->out_bytes);
    int32_t *ids = xmalloc(nids * sizeof(int32_t));
    memcpy(ids, f->ids, nids * sizeof(int32_t));
    ids[slot] = bad; /* rank 1, token 7, slot 2 */
    CUDA_CHECK(cudaMemcpy(d->ids, ids, nids * sizeof(int32_t), cudaMemcpyHostToDevice));
    dev_poison(d, s);
    moe_ep_status_t st = gpu_forward(l, f, d, &sp, 0, s);
    EXPECT(st == MOE_EP_SUCCESS, "id %d: forward should enqueue: %s", (int)bad, errmsg());
    st = finish(g, s);
    EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "id %d: async error %s, want INVALID_ARGUMENT",
           (int)bad, moe_ep_status_string(st));
    EXPECT(st == MOE_EP_SUCCESS || moe_ep_last_error()[0] != '\0', "id %d: no detail", (int)bad);
    printf("  id %d: %s (%s)\n", (int)bad, moe_ep_status_string(st), errmsg());
    dev_read_out(d, out, s);
    EXPECT(all_poison(out, d->out_bytes / 2), "id %d: outputs written despite the error", (int)bad);
    /* Good inputs, error not reset: the forward must do nothing. */
    CUDA_CHECK(cudaMemcpy(d->ids, f->ids, nids * sizeof(int32_t), cudaMemcpyHostToDevice));
    dev_poison(d, s);
    (void)gpu_forward(l, f, d, &sp, 0, s);
    st = finish(g, s);
    EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "id %d: error not kept until reset (%s)", (int)bad,
           moe_ep_status_string(st));
    dev_read_out(d, out, s);
    EXPECT(all_poison(out, d->out_bytes / 2), "id %d: forward before reset wrote outputs", (int)bad);
    /* Reset: works again, same bytes as before. */
    EXPECT(moe_ep_group_reset_async_error(g) == MOE_EP_SUCCESS, "reset: %s", errmsg());
    EXPECT(async_error(g) == MOE_EP_SUCCESS, "id %d: error still reported after reset", (int)bad);
    st = poisoned_forward(g, l, f, d, &sp, 0, s, out);
    EXPECT(st == MOE_EP_SUCCESS, "id %d: forward after reset: %s", (int)bad, errmsg());
    EXPECT(memcmp(out, good, d->out_bytes) == 0, "id %d: forward after reset differs", (int)bad);
    free(out), free(ids);
}

static void test_bad_ids(uint64_t *rng, cudaStream_t stream)
{
    printf("expert id out of range\n");
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * ST, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    uint16_t *good = xmalloc(d.out_bytes);
    for (int b = 0; b < num_backends; b++) {
        spec_t s = make_spec(MOE_EP_PATH_MXFP8, MOE_EP_WIRE_BF16, 2, SMAX);
        s.backend = backends[b];
        moe_ep_group_t g;
        moe_ep_layer_t l;
        moe_ep_status_t st = make_layer(&f, &s, stream, &g, &l);
        EXPECT(st == MOE_EP_SUCCESS, "%s: %s", moe_ep_backend_name(s.backend), errmsg());
        split_t sp = split_strided(2, ST, ST);
        if (!st) {
            st = poisoned_forward(g, l, &f, &d, &sp, 0, stream, good);
            EXPECT(st == MOE_EP_SUCCESS, "good forward: %s", errmsg());
        }
        if (!st) bad_id_sequence(g, l, &f, &d, good, SE, stream);
        if (!st) bad_id_sequence(g, l, &f, &d, good, -2, stream);
        free_layer(g, l);
    }
    free(good);
    dev_free(&d);
    fixture_free(&f);
}

/* bf16 weights given in device memory load to the same bytes as host weights. */
static void test_device_weights(uint64_t *rng, cudaStream_t stream)
{
    printf("weights from device memory\n");
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * ST, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    size_t n13 = sizeof(uint16_t) * SE * 2 * SI * SH, n2 = sizeof(uint16_t) * SE * SH * SI;
    void *w13, *w2;
    CUDA_CHECK(cudaMalloc(&w13, n13));
    CUDA_CHECK(cudaMalloc(&w2, n2));
    CUDA_CHECK(cudaMemcpy(w13, f.w13, n13, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w2, f.w2, n2, cudaMemcpyHostToDevice));
    uint16_t *a = xmalloc(d.out_bytes), *b = xmalloc(d.out_bytes);
    split_t sp = split_strided(2, ST, ST);
    for (int bi = 0; bi < num_backends; bi++)
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
            spec_t s = make_spec((moe_ep_path_t)p, MOE_EP_WIRE_BF16, 2, SMAX);
            s.backend = backends[bi];
            nvfp4_scales(&f, &s);
            moe_ep_status_t st = gpu_run(&f, &s, &sp, &d, stream, 1, a);
            moe_ep_group_t g;
            moe_ep_layer_t l;
            g = NULL, l = NULL;
            if (!st) st = make_layer_from(&f, &s, stream, w13, w2, &g, &l);
            if (!st) {
                dev_poison(&d, stream);
                st = gpu_forward(l, &f, &d, &sp, 0, stream);
            }
            if (!st) st = finish(g, stream);
            if (!st) dev_read_out(&d, b, stream);
            EXPECT(st == MOE_EP_SUCCESS, "%s %s: %s", moe_ep_backend_name(s.backend), moe_ep_path_name(p), errmsg());
            EXPECT(st || memcmp(a, b, d.out_bytes) == 0, "%s %s: device-loaded weights give other outputs",
                   moe_ep_backend_name(s.backend), moe_ep_path_name(p));
            free_layer(g, l);
        }
    printf("  every path compared\n");
    free(a), free(b);
    CUDA_CHECK(cudaFree(w13));
    CUDA_CHECK(cudaFree(w2));
    dev_free(&d);
    fixture_free(&f);
}

/* ---- kernel knobs --------------------------------------------------------- */

/* The layer's knobs for T tokens match want (both fields) and come from src. */
static void expect_knobs(moe_ep_layer_t l, int T, const moe_ep_knobs_t *want, moe_ep_knob_source_t src,
                         const char *label)
{
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    moe_ep_knob_source_t got = (moe_ep_knob_source_t)-1;
    EXPECT(moe_ep_layer_get_knobs(l, T, &k, &got) == MOE_EP_SUCCESS, "%s: get_knobs: %s", label, errmsg());
    EXPECT(got == src && (!want || (k.gemm_tile_rows == want->gemm_tile_rows &&
                                    k.gemm_ctas_per_sm == want->gemm_ctas_per_sm)),
           "%s: knobs (%d, %d) from %d, want (%d, %d) from %d", label, k.gemm_tile_rows, k.gemm_ctas_per_sm,
           (int)got, want ? want->gemm_tile_rows : 0, want ? want->gemm_ctas_per_sm : 0, (int)src);
}

/* One forward on a fresh layer of spec s; its outputs into out, then the
 * layer's knobs for T are checked. */
static void knob_forward(const fixture_t *f, const spec_t *s, const split_t *sp, const dbuf_t *d,
                         cudaStream_t stream, uint16_t *out, const moe_ep_knobs_t *want,
                         moe_ep_knob_source_t src, const char *label)
{
    moe_ep_group_t g;
    moe_ep_layer_t l;
    moe_ep_status_t st = make_layer(f, s, stream, &g, &l);
    if (!st) dev_poison(d, stream);
    if (!st) st = gpu_forward(l, f, d, sp, 0, stream);
    if (!st) st = finish(g, stream);
    EXPECT(st == MOE_EP_SUCCESS, "%s: %s", label, errmsg());
    if (!st) dev_read_out(d, out, stream);
    if (!st) expect_knobs(l, sp->nt[0], want, src, label);
    free_layer(g, l);
}

/* Every explicit knob set (valid_knob_sets), then autotuning (into a
 * temporary knob cache), then the cache, give the same bytes. */
static void knobs_same_bytes(const fixture_t *f, spec_t s, const split_t *sp, const dbuf_t *d,
                             cudaStream_t stream, uint16_t *base, uint16_t *out)
{
    char label[96];
    const int(*sets)[2];
    int one_tile, n_sets = valid_knob_sets(f, s.path, &sets, &one_tile);
    moe_ep_knob_source_t tuned = one_tile ? MOE_EP_KNOBS_HEURISTIC : MOE_EP_KNOBS_AUTOTUNED,
                         cached = one_tile ? MOE_EP_KNOBS_HEURISTIC : MOE_EP_KNOBS_CACHE;
    for (int i = 0; i < n_sets; i++) {
        moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
        k.gemm_tile_rows = sets[i][0], k.gemm_ctas_per_sm = sets[i][1];
        s.knobs = &k;
        snprintf(label, sizeof label, "%s/%s knobs {%d, %d}", moe_ep_path_name(s.path), moe_ep_wire_name(s.wire),
                 sets[i][0], sets[i][1]);
        knob_forward(f, &s, sp, d, stream, i ? out : base, &k, MOE_EP_KNOBS_EXPLICIT, label);
        EXPECT(i == 0 || memcmp(base, out, d->out_bytes) == 0, "%s: differs from the first knobs", label);
    }
    for (int sms = 1; sms <= 7; sms += 6) { /* the SMs given to the layer: fewer blocks, the same bytes */
        s.knobs = NULL, s.num_sms = sms;
        snprintf(label, sizeof label, "%s/%s num_sms %d", moe_ep_path_name(s.path), moe_ep_wire_name(s.wire), sms);
        knob_forward(f, &s, sp, d, stream, out, NULL, MOE_EP_KNOBS_HEURISTIC, label);
        EXPECT(memcmp(base, out, d->out_bytes) == 0, "%s: differs from knobs {16, 1}", label);
    }
    s.num_sms = 0;
    s.knobs = NULL, s.autotune = 1;
    snprintf(label, sizeof label, "%s/%s autotuned", moe_ep_path_name(s.path), moe_ep_wire_name(s.wire));
    knob_forward(f, &s, sp, d, stream, out, NULL, tuned, label);
    EXPECT(memcmp(base, out, d->out_bytes) == 0, "%s: differs from knobs {16, 1}", label);
    s.autotune = 0;
    snprintf(label, sizeof label, "%s/%s from the cache", moe_ep_path_name(s.path), moe_ep_wire_name(s.wire));
    knob_forward(f, &s, sp, d, stream, out, NULL, cached, label);
    EXPECT(memcmp(base, out, d->out_bytes) == 0, "%s: differs from knobs {16, 1}", label);
}

/* An autotuning layer captured into a graph at its first forward: no timing
 * (it would synchronize), and the replay gives the same bytes. */
static void knobs_capture(const fixture_t *f, spec_t s, const split_t *sp, const dbuf_t *d,
                          cudaStream_t stream, const uint16_t *base, uint16_t *out)
{
    moe_ep_group_t g;
    moe_ep_layer_t l;
    s.autotune = 1, s.max_tokens = SMAX * 2; /* a bucket not tuned yet */
    moe_ep_status_t st = make_layer(f, &s, stream, &g, &l);
    EXPECT(st == MOE_EP_SUCCESS, "autotune capture: %s", errmsg());
    cudaGraphExec_t exec = NULL;
    dev_set_counts(d, sp, stream);
    if (!st && capture_forward(l, f, d, sp, stream, &exec) == 0) {
        dev_poison(d, stream);
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
        EXPECT(finish(g, stream) == MOE_EP_SUCCESS, "autotune capture: replay failed");
        dev_read_out(d, out, stream);
        EXPECT(memcmp(base, out, d->out_bytes) == 0, "autotune capture: replay differs");
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
        moe_ep_knob_source_t src = MOE_EP_KNOBS_AUTOTUNED;
        EXPECT(moe_ep_layer_get_knobs(l, SMAX * 2, &k, &src) == MOE_EP_SUCCESS && src != MOE_EP_KNOBS_AUTOTUNED,
               "autotune capture: the bucket was tuned during capture");
    }
    free_layer(g, l);
}

static void test_knobs(uint64_t *rng, cudaStream_t stream)
{
    printf("kernel knobs never change results\n");
    char dir[64], cache[96], lock[112];
    snprintf(dir, sizeof dir, "/tmp/moe_ep_test_split.XXXXXX");
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cache, sizeof cache, "%s/knobs.txt", dir);
    snprintf(lock, sizeof lock, "%s.lock", cache);
    setenv("MOE_EP_KNOB_CACHE", cache, 1);
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * ST, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    uint16_t *base = xmalloc(d.out_bytes), *out = xmalloc(d.out_bytes);
    split_t sp = split_strided(2, ST, ST);
    for (int b = 0; b < num_backends; b++)
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
            spec_t s = make_spec((moe_ep_path_t)p, (moe_ep_wire_t)(p % MOE_EP_WIRE_COUNT_), 2, SMAX);
            s.backend = backends[b];
            nvfp4_scales(&f, &s);
            knobs_same_bytes(&f, s, &sp, &d, stream, base, out);
            if (p == MOE_EP_PATH_MXFP8) knobs_capture(&f, s, &sp, &d, stream, base, out);
            printf("  %s %s/%s: explicit, autotuned and cached knobs compared\n", moe_ep_backend_name(s.backend),
                   moe_ep_path_name(s.path), moe_ep_wire_name(s.wire));
        }
    unsetenv("MOE_EP_KNOB_CACHE");
    unlink(cache), unlink(lock), rmdir(dir);
    free(base), free(out);
    dev_free(&d);
    fixture_free(&f);
}

/* ds-v4-flash-like H and I with few experts. */
static void test_large(uint64_t *rng, cudaStream_t stream)
{
    printf("large layer (E 8, K 2, H 4096, I 2048, R 2, T 64)\n");
    fixture_t f;
    fixture_init(&f, 8, 2, 4096, 2048, 128, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(2, 64, 64);
    versus_reference("large", &f, make_spec(MOE_EP_PATH_MXFP8, MOE_EP_WIRE_BF16, 2, 64), &sp, &d, stream);
    if (!quick())
        versus_reference("large", &f, make_spec(MOE_EP_PATH_NVFP4, MOE_EP_WIRE_FP4, 2, 64), &sp, &d, stream);
    dev_free(&d);
    fixture_free(&f);
}

/* A fixture of R x T tokens too large for fixture_init's normal draws: x
 * uniform in (-2, 2) from an xorshift, uniform routing over E experts. */
static void large_fixture(fixture_t *f, int E, int K, int H, int I, int tokens, uint64_t *rng)
{
    fixture_init(f, E, K, H, I, 1, ROUTE_UNIFORM, rng); /* the weights */
    free(f->x), free(f->ids), free(f->weights);
    size_t n = (size_t)tokens;
    f->total_tokens = tokens;
    f->x = xmalloc(n * H * 2), f->ids = xmalloc(n * K * 4), f->weights = xmalloc(n * K * 4);
    uint64_t z = test_rand_u64(rng) | 1;
    for (size_t i = 0; i < n * H; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        float v = (float)((int64_t)(z >> 40) - (1 << 23)) / (float)(1 << 22); /* (-2, 2) */
        uint32_t u;
        memcpy(&u, &v, 4);
        f->x[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < n * K; i++)
        f->ids[i] = (int32_t)(test_rand_u64(rng) % (uint64_t)E), f->weights[i] = (float)test_rand_uniform(rng);
}

/* Rows at byte offsets past 2^32 (int32 offsets would wrap): 8 ranks of 8192
 * tokens, top-6, H 7168 (ds-v4-pro's), so 393 216 expert rows of 14 KB in
 * bf16 (5.6 GB), I 128 to keep the GEMMs small; 48 tokens spread over every
 * rank (the last token included) against the reference run on them alone
 * (a token's output does not depend on the others). Needs ~40 GB free. */
static void test_large_offsets(uint64_t *rng, cudaStream_t stream)
{
    enum { R = 8, T = 8192, K = 6, H = 7168, I = 128, E = 8, SAMPLES = 48 };
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (quick() || free_b < ((size_t)40 << 30)) {
        printf("large offsets: skipped (%s)\n", quick() ? "MOE_EP_TEST_QUICK" : "less than 40 GB free");
        return;
    }
    printf("large offsets (E %d, K %d, H %d, I %d, R %d, T %d: %d rows)\n", E, K, H, I, R, T, R * T * K);
    fixture_t f, sub;
    large_fixture(&f, E, K, H, I, R * T, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(R, T, T);
    sub = f; /* the same weights; the sampled tokens' inputs */
    sub.total_tokens = SAMPLES;
    sub.x = xmalloc((size_t)SAMPLES * H * 2), sub.ids = xmalloc(SAMPLES * K * 4), sub.weights = xmalloc(SAMPLES * K * 4);
    int tok[SAMPLES];
    for (int j = 0; j < SAMPLES; j++) {
        tok[j] = R * T - 1 - j * (R * T / SAMPLES);
        memcpy(sub.x + (size_t)j * H, f.x + (size_t)tok[j] * H, H * 2);
        memcpy(sub.ids + j * K, f.ids + (size_t)tok[j] * K, K * 4);
        memcpy(sub.weights + j * K, f.weights + (size_t)tok[j] * K, K * 4);
    }
    split_t one = split_strided(1, SAMPLES, 0);
    uint16_t *got = xmalloc(d.out_bytes), *want = xmalloc((size_t)SAMPLES * H * 2);
    static const moe_ep_path_t paths[] = {MOE_EP_PATH_BF16, MOE_EP_PATH_MXFP8};
    for (int p = 0; p < 2; p++) {
        spec_t s = make_spec(paths[p], MOE_EP_WIRE_BF16, 1, SAMPLES);
        moe_ep_status_t st = ref_forward(&sub, &s, &one, want);
        EXPECT(st == MOE_EP_SUCCESS, "large offsets: reference: %s", errmsg());
        for (int b = 0; b < num_backends && !st; b++) {
            spec_t g = make_spec(paths[p], MOE_EP_WIRE_BF16, R, T);
            g.backend = backends[b];
            moe_ep_status_t gs = gpu_run(&f, &g, &sp, &d, stream, 1, got);
            EXPECT(gs == MOE_EP_SUCCESS, "large offsets %s %s: %s", moe_ep_backend_name(g.backend),
                   moe_ep_path_name(g.path), errmsg());
            if (gs) continue;
            double num = 0, den = 0;
            for (int j = 0; j < SAMPLES; j++)
                for (int h = 0; h < H; h++) {
                    double a = moe_ep_bf16_to_f32(got[(size_t)tok[j] * H + h]), w = moe_ep_bf16_to_f32(want[(size_t)j * H + h]);
                    num += (a - w) * (a - w), den += w * w;
                }
            double err = den > 0 ? sqrt(num / den) : sqrt(num);
            printf("  %s %s/bf16: %d sampled tokens (the last %d), rel L2 %.3e\n", moe_ep_backend_name(g.backend),
                   moe_ep_path_name(g.path), SAMPLES, tok[0], err);
            EXPECT(err <= tolerance(g.path, g.wire), "large offsets %s %s: rel L2 %.3e (NaN: a wrong row)",
                   moe_ep_backend_name(g.backend), moe_ep_path_name(g.path), err);
        }
    }
    free(got), free(want);
    free(sub.x), free(sub.ids), free(sub.weights);
    dev_free(&d);
    fixture_free(&f);
}

/* Case p of PATH_WIRE_CASES: every path on the bf16 wire, then MXFP8 on the
 * MXFP8 and FP4 wires. */
enum { PATH_WIRE_CASES = MOE_EP_PATH_COUNT_ + 2 };
static void path_wire_case(int p, moe_ep_path_t *path, moe_ep_wire_t *wire)
{
    *path = p < MOE_EP_PATH_COUNT_ ? (moe_ep_path_t)p : MOE_EP_PATH_MXFP8;
    *wire = p < MOE_EP_PATH_COUNT_ ? MOE_EP_WIRE_BF16 : p == MOE_EP_PATH_COUNT_ ? MOE_EP_WIRE_MXFP8 : MOE_EP_WIRE_FP4;
}

/* Token rows x and output rows out one bf16 past their allocations, so not
 * 16-byte aligned: dispatch and combine take their 2-byte paths, and every
 * path (wire bf16, plus MXFP8 and FP4 wires once) gives the aligned run's
 * bytes, on every backend under test. W4A8 and NVFP4 again on the 128-row tile
 * (its A16 form): mega's dispatch folds the aligned run's rows itself, the
 * unaligned run's rows are folded by fold items (mega_fold.cuh). */
static void test_unaligned(uint64_t *rng, cudaStream_t stream)
{
    printf("unaligned token and output rows (E 4, K 2, H 256, I 128, T 48)\n");
    fixture_t f;
    fixture_init(&f, 4, 2, 256, 128, 48, ROUTE_UNIFORM, rng);
    dbuf_t d, u;
    dev_init(&d, &f);
    u = d; /* ids, weights and counts shared */
    size_t n = (size_t)f.total_tokens * f.H;
    uint16_t *xb, *ob;
    CUDA_CHECK(cudaMalloc((void **)&xb, (n + 8) * sizeof(uint16_t)));
    CUDA_CHECK(cudaMalloc((void **)&ob, (n + 8) * sizeof(uint16_t)));
    u.x = xb + 1, u.out = ob + 1;
    CUDA_CHECK(cudaMemcpy(u.x, f.x, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    split_t sp = split_strided(1, 48, 48);
    uint16_t *a = xmalloc(d.out_bytes), *b = xmalloc(d.out_bytes);
    moe_ep_knobs_t k128 = MOE_EP_KNOBS_INIT;
    k128.gemm_tile_rows = 128, k128.gemm_ctas_per_sm = 1;
    for (int p = 0; p <= PATH_WIRE_CASES + 1; p++) /* the last two: W4A8 and NVFP4 on the 128-row tile */
        for (int i = 0; i < num_backends; i++) {
            moe_ep_path_t path = p == PATH_WIRE_CASES ? MOE_EP_PATH_W4A8 : MOE_EP_PATH_NVFP4;
            moe_ep_wire_t wire = MOE_EP_WIRE_BF16;
            if (p < PATH_WIRE_CASES) path_wire_case(p, &path, &wire);
            spec_t s = make_spec(path, wire, 1, 48);
            s.backend = backends[i];
            if (p >= PATH_WIRE_CASES) s.knobs = &k128;
            nvfp4_scales(&f, &s);
            moe_ep_status_t st = gpu_run(&f, &s, &sp, &d, stream, 1, a);
            if (!st) st = gpu_run(&f, &s, &sp, &u, stream, 1, b);
            EXPECT(st == MOE_EP_SUCCESS && memcmp(a, b, d.out_bytes) == 0, "unaligned %s %s/%s: %s",
                   moe_ep_backend_name(s.backend), moe_ep_path_name(path), moe_ep_wire_name(wire),
                   st ? errmsg() : "bytes differ from the aligned run");
        }
    free(a), free(b);
    CUDA_CHECK(cudaFree(xb));
    CUDA_CHECK(cudaFree(ob));
    dev_free(&d);
    fixture_free(&f);
}

/* One block (num_sms 1) for 80 tokens of 2048: a dispatch item then stages
 * its 80 x rows through a ring of 4 stages several times over, and a combine
 * item its 40 tokens' wire rows, so the mega kernel's ring refills run (the
 * other cases fit their rows in the first pass). Every path on the bf16
 * wire, MXFP8 on the MXFP8 and FP4 wires, against the reference and across
 * backends. */
static void test_staged_rings(uint64_t *rng, cudaStream_t stream)
{
    printf("staged rings refilled (E 8, K 4, H 2048, I 128, T 80, num_sms 1)\n");
    fixture_t f;
    fixture_init(&f, 8, 4, 2048, 128, 80, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(1, 80, 80);
    for (int p = 0; p < PATH_WIRE_CASES; p++) {
        moe_ep_path_t path;
        moe_ep_wire_t wire;
        path_wire_case(p, &path, &wire);
        spec_t s = make_spec(path, wire, 1, 80);
        s.num_sms = 1;
        versus_reference("staged rings", &f, s, &sp, &d, stream);
    }
    dev_free(&d);
    fixture_free(&f);
}

/* Enough rows per expert for the heuristic's 128-row TMA + wgmma tile (bf16,
 * rows >= 128 x experts), on every backend under test (mega runs it inside
 * its persistent kernel); versus_reference also compares mega with split. */
static void test_wgmma_tile(uint64_t *rng, cudaStream_t stream)
{
    printf("wgmma tile (bf16; E 4, K 2, H 512, I 256, R 2, T 512: 2048 rows)\n");
    fixture_t f;
    fixture_init(&f, 4, 2, 512, 256, 1024, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(2, 512, 512);
    for (int i = 0; i < num_backends; i++) { /* the heuristic must pick the wgmma tile here */
        spec_t s = make_spec(MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 2, 512);
        s.backend = backends[i];
        moe_ep_group_t g;
        moe_ep_layer_t l;
        moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
        moe_ep_knob_source_t src;
        moe_ep_status_t made = make_layer(&f, &s, stream, &g, &l);
        moe_ep_status_t st = made ? made : moe_ep_layer_get_knobs(l, 512, &k, &src);
        EXPECT(st == MOE_EP_SUCCESS && k.gemm_tile_rows == 128, "wgmma %s: knobs tile %d (%s)",
               moe_ep_backend_name(s.backend), k.gemm_tile_rows, st ? errmsg() : "want 128");
        if (!made) free_layer(g, l);
    }
    versus_reference("wgmma", &f, make_spec(MOE_EP_PATH_BF16, MOE_EP_WIRE_MXFP8, 2, 512), &sp, &d, stream);
    sp.nt[1] = 300; /* a partial last tile on some experts; mega: its wide 144-row tiles (~406 rows an expert: 3) */
    versus_reference("wgmma uneven", &f, make_spec(MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 2, 512), &sp, &d, stream);
    /* the quantized paths' 128-row register tile at the same rows (mega: NVFP4's, MXFP8's and W4A8's
     * A16 tiles at 144 rows, 3 an expert; FP8-BLOCK's at 128) */
    for (int p = MOE_EP_PATH_MXFP8; p < MOE_EP_PATH_COUNT_; p++)
        versus_reference("128-row tile uneven", &f, make_spec((moe_ep_path_t)p, MOE_EP_WIRE_BF16, 2, 512), &sp, &d,
                         stream);
    sp.nt[1] = 256; /* ~384 rows an expert: mega's 144-row register tiles three an expert, 128 rows each up to 384 (mega_tile_rows) */
    for (int p = MOE_EP_PATH_MXFP8; p < MOE_EP_PATH_COUNT_; p++)
        versus_reference("144-row tile at 384 rows", &f, make_spec((moe_ep_path_t)p, MOE_EP_WIRE_BF16, 2, 512), &sp, &d,
                         stream);
    sp.nt[0] = 280, sp.nt[1] = 0; /* ~140 rows an expert: mega's wide tiles one or two an expert, widths 64-144 */
    versus_reference("wgmma wide", &f, make_spec(MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 2, 512), &sp, &d, stream);
    for (int p = MOE_EP_PATH_MXFP8; p < MOE_EP_PATH_COUNT_; p++) /* mega's 144-row register tiles at widths 64-144 */
        for (int w = 0; w < MOE_EP_WIRE_COUNT_; w++) /* GEMM2's epilogue in each wire format */
            versus_reference("144-row tile", &f, make_spec((moe_ep_path_t)p, (moe_ep_wire_t)w, 2, 512), &sp, &d, stream);
    dev_free(&d);
    fixture_free(&f);
    /* above the swapped range (E 2, K 2: ~600 / ~500 tokens a rank, ~1100 rows an expert): split's
     * 128-row tiles in place, mega's wide swapped tiles 8 an expert */
    fixture_init(&f, 2, 2, 512, 256, 1100, ROUTE_UNIFORM, rng);
    dev_init(&d, &f);
    sp = split_strided(2, 600, 600);
    sp.nt[1] = 500;
    versus_reference("wgmma wide many", &f, make_spec(MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, 2, 600), &sp, &d, stream);
    dev_free(&d);
    fixture_free(&f);
}

/* fp8_fast_accum: FP8-BLOCK on the register tile's QGMMA instances. Every
 * wire against the reference (its own tolerances) with both GPU backends
 * giving the same bytes; EP sizes R = 1, 2, 4, 8 the same bytes; explicit
 * knobs (16, 32, 64 and 128 rows) the same bytes and 48 rows refused; graph
 * replay equals eager. */
static void test_fp8_fast_accum(uint64_t *rng, cudaStream_t stream)
{
    enum { TOTAL = 64 };
    printf("fp8_fast_accum (FP8-BLOCK on QGMMA)\n");
    setenv("MOE_EP_KNOB_CACHE", "off", 1);
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * SMAX, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    uint16_t *base = xmalloc(d.out_bytes), *out = xmalloc(d.out_bytes);
    split_t sp = split_strided(2, ST, ST);
    for (int w = 0; w < MOE_EP_WIRE_COUNT_; w++) {
        spec_t s = make_spec(MOE_EP_PATH_FP8_BLOCK, (moe_ep_wire_t)w, 2, SMAX);
        s.fp8_fast_accum = 1;
        versus_reference("fast accum", &f, s, &sp, &d, stream);
    }
    for (int b = 0; b < num_backends; b++) {
        spec_t s = make_spec(MOE_EP_PATH_FP8_BLOCK, MOE_EP_WIRE_MXFP8, 1, TOTAL);
        s.backend = backends[b], s.fp8_fast_accum = 1;
        for (int R = 1; R <= MAX_RANKS; R *= 2) {
            split_t ep = split_strided(R, TOTAL / R, TOTAL / R);
            s.R = R, s.max_tokens = TOTAL / R;
            moe_ep_status_t st = gpu_run(&f, &s, &ep, &d, stream, 2, R == 1 ? base : out);
            EXPECT(st == MOE_EP_SUCCESS, "fast accum R=%d: %s", R, errmsg());
            if (R > 1 && !st)
                EXPECT(memcmp(base, out, d.out_bytes) == 0, "%s fast accum: R=%d differs from R=1",
                       moe_ep_backend_name(s.backend), R);
        }
        printf("  %s fp8_block/mxfp8 fast accum: R = 1, 2, 4, 8 compared\n", moe_ep_backend_name(s.backend));
        s.R = 2, s.max_tokens = SMAX;
        knobs_same_bytes(&f, s, &sp, &d, stream, base, out);
        moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
        k.gemm_tile_rows = 48;
        s.knobs = &k;
        moe_ep_group_t g;
        moe_ep_layer_t l;
        moe_ep_status_t st = make_layer(&f, &s, stream, &g, &l);
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "fast accum with 48-row tiles: %s, want INVALID_ARGUMENT",
               moe_ep_status_string(st));
        if (g) moe_ep_group_destroy(g);
        s.knobs = NULL;
        char label[96];
        snprintf(label, sizeof label, "%s fp8_block/mxfp8 fast accum", moe_ep_backend_name(s.backend));
        st = make_layer(&f, &s, stream, &g, &l);
        EXPECT(st == MOE_EP_SUCCESS, "%s: %s", label, errmsg());
        cudaGraphExec_t exec = NULL;
        split_t full = split_strided(2, SMAX, SMAX);
        if (!st && capture_forward(l, &f, &d, &full, stream, &exec) == 0) {
            replay_counts(g, l, &f, &d, exec, stream, label);
            CUDA_CHECK(cudaGraphExecDestroy(exec));
        }
        free_layer(g, l);
    }
    unsetenv("MOE_EP_KNOB_CACHE");
    free(base), free(out);
    dev_free(&d);
    fixture_free(&f);
}

/* Mega: rank 1's tokens never arrive; the forward must end (not hang) with
 * MOE_EP_ERROR_TIMEOUT naming the wait, and after a reset the layer gives the
 * split backend's bytes again. */
static void test_timeout(uint64_t *rng, cudaStream_t stream)
{
    int has_mega = 0;
    for (int b = 0; b < num_backends; b++) has_mega |= backends[b] == MOE_EP_BACKEND_MEGA;
    if (!has_mega) return;
    printf("mega: forced timeout (rank 1 never arrives, timeout 0.2 s)\n");
    fixture_t f;
    fixture_init(&f, SE, SK, SH, SI, 2 * ST, ROUTE_UNIFORM, rng);
    dbuf_t d;
    dev_init(&d, &f);
    split_t sp = split_strided(2, ST, ST);
    uint16_t *want = xmalloc(d.out_bytes), *got = xmalloc(d.out_bytes);
    spec_t s = make_spec(MOE_EP_PATH_MXFP8, MOE_EP_WIRE_BF16, 2, SMAX);
    s.backend = MOE_EP_BACKEND_SPLIT;
    EXPECT(gpu_run(&f, &s, &sp, &d, stream, 1, want) == MOE_EP_SUCCESS, "timeout: split run: %s", errmsg());
    s.backend = MOE_EP_BACKEND_MEGA, s.timeout_seconds = 0.2;
    moe_ep_group_t g;
    moe_ep_layer_t l;
    moe_ep_status_t st = make_layer(&f, &s, stream, &g, &l);
    EXPECT(st == MOE_EP_SUCCESS, "timeout: mega layer: %s", errmsg());
    if (!st) {
        EXPECT(moe_ep_mega_set_absent_rank(l, 1) == MOE_EP_SUCCESS, "set_absent_rank: %s", errmsg());
        st = poisoned_forward(g, l, &f, &d, &sp, 0, stream, got);
        EXPECT(st == MOE_EP_ERROR_TIMEOUT, "timeout: got %s (%s)", moe_ep_status_string(st), errmsg());
        printf("  reported: %s\n", errmsg());
        st = gpu_forward(l, &f, &d, &sp, 0, stream); /* a recorded error: the forward does nothing */
        EXPECT(st == MOE_EP_SUCCESS && finish(g, stream) == MOE_EP_ERROR_TIMEOUT, "timeout: error not kept");
        EXPECT(moe_ep_mega_set_absent_rank(l, -1) == MOE_EP_SUCCESS, "set_absent_rank: %s", errmsg());
        EXPECT(moe_ep_group_reset_async_error(g) == MOE_EP_SUCCESS, "reset: %s", errmsg());
        st = poisoned_forward(g, l, &f, &d, &sp, 0, stream, got);
        EXPECT(st == MOE_EP_SUCCESS && memcmp(got, want, d.out_bytes) == 0,
               "timeout: after the reset the layer does not give the split's bytes (%s)", moe_ep_status_string(st));
    }
    free_layer(g, l);
    free(want), free(got);
    dev_free(&d);
    fixture_free(&f);
}

int main(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("test_split: skipped: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 77;
    }
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    pick_backends();
    uint64_t rng = test_seed();
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    test_paths_wires(&rng, stream);
    test_routes(&rng, stream);
    test_token_counts(&rng, stream);
    test_ep_invariance(&rng, stream);
    test_graph(&rng, stream);
    test_bad_ids(&rng, stream);
    test_device_weights(&rng, stream);
    test_knobs(&rng, stream);
    test_large(&rng, stream);
    test_large_offsets(&rng, stream);
    test_unaligned(&rng, stream);
    test_staged_rings(&rng, stream);
    test_wgmma_tile(&rng, stream);
    test_random_shapes(&rng, stream);
    test_fp8_fast_accum(&rng, stream);
    test_timeout(&rng, stream);
    CUDA_CHECK(cudaStreamDestroy(stream));
    return test_summary("test_split");
}
