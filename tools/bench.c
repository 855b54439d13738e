/* `moe_ep bench`: measures the GPU's ceilings (copy bandwidth, dense BF16 and
 * FP8 GEMM rates) and then, for each geometry, the "EP8 slice on one GPU": a
 * world-size-1 layer with E/8 experts, top-K, T tokens routed uniformly. For
 * every path and backend it times the whole forward and the expert stage alone
 * and compares the expert stage with its floor,
 *   max(bytes / copy bandwidth, FLOPs / tensor rate). */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>

#ifndef MOE_EP_HAVE_CUDA

int cmd_bench(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "moe_ep bench: needs a GPU build (this moe_ep was built without CUDA)\n");
    return 2;
}

#else

#include "core/split.h"
#include "geometry.h"
#include "moe_ep.h"
#include "synth.h"

#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#include <cublas_v2.h>
#pragma GCC diagnostic pop

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 16
#define MAX_SETS 8
#define GEMM_N 8192
#define COPY_BYTES ((size_t)2 << 30)
#define SEED 1

/* ---- status checks ------------------------------------------------------------ */

#define CK(call) cuda_ok((call), #call, __LINE__)
#define CB(call) cublas_ok((call), #call, __LINE__)

static int cuda_ok(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "moe_ep bench: bench.c:%d: %s: %s\n", line, what, cudaGetErrorString(e));
    return 0;
}

static int cublas_ok(cublasStatus_t s, const char *what, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    fprintf(stderr, "moe_ep bench: bench.c:%d: %s: %s\n", line, what, cublasGetStatusString(s));
    return 0;
}

static int layer_ok(moe_ep_status_t st, const char *what)
{
    if (st == MOE_EP_SUCCESS) return 1;
    fprintf(stderr, "moe_ep bench: %s: %s: %s\n", what, moe_ep_status_string(st), moe_ep_last_error());
    return 0;
}

/* ---- options -------------------------------------------------------------------- */

typedef struct {
    const geometry_t *geos[MAX_LIST];
    int ngeo, tokens[MAX_LIST], ntok, npath, nback, iters, warmup;
    moe_ep_path_t paths[MOE_EP_PATH_COUNT_];
    moe_ep_backend_t backends[MOE_EP_BACKEND_COUNT_];
    moe_ep_wire_t wire;
    const char *out;
} bench_opts_t;

static void usage_bench(void)
{
    printf("usage: moe_ep bench [--geometry ds-v4-flash,ds-v4-pro] [--tokens 8,64,512,2048,8192]\n"
           "                    [--paths all|bf16,mxfp8,nvfp4,w4a8,fp8_block] [--backends split[,mega]]\n"
           "                    [--wire bf16|mxfp8|fp4] [--iters N] [--warmup N] [--out FILE]\n"
           "  EP8 slice on one GPU: E/8 experts, top-K, T tokens, uniform routing, world size 1.\n"
           "  Env MOE_EP_COMMIT names the commit in the header (else git rev-parse).\n");
}

/* Splits a comma list into at most max items of < 32 characters; returns the count or -1. */
static int split_list(const char *s, char items[][32], int max)
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

static int name_index(const char *s, const char *(*name)(int), int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, name(i)) == 0) return i;
    return -1;
}

static const char *path_str(int i) { return moe_ep_path_name((moe_ep_path_t)i); }
static const char *wire_str(int i) { return moe_ep_wire_name((moe_ep_wire_t)i); }
static const char *backend_str(int i) { return moe_ep_backend_name((moe_ep_backend_t)i); }

static int parse_geometries(bench_opts_t *o, const char *v)
{
    char items[MAX_LIST][32];
    o->ngeo = split_list(v, items, MAX_LIST);
    for (int i = 0; i < o->ngeo; i++)
        if (!(o->geos[i] = geometry_find(items[i]))) return -1;
    return o->ngeo > 0 ? 0 : -1;
}

static int parse_tokens(bench_opts_t *o, const char *v)
{
    char items[MAX_LIST][32];
    o->ntok = split_list(v, items, MAX_LIST);
    for (int i = 0; i < o->ntok; i++)
        if ((o->tokens[i] = atoi(items[i])) < 1) return -1;
    return o->ntok > 0 ? 0 : -1;
}

static int parse_paths(bench_opts_t *o, const char *v)
{
    char items[MOE_EP_PATH_COUNT_][32];
    if (strcmp(v, "all") == 0) {
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) o->paths[p] = (moe_ep_path_t)p;
        return (o->npath = MOE_EP_PATH_COUNT_), 0;
    }
    o->npath = split_list(v, items, MOE_EP_PATH_COUNT_);
    for (int i = 0; i < o->npath; i++)
        if ((int)(o->paths[i] = (moe_ep_path_t)name_index(items[i], path_str, MOE_EP_PATH_COUNT_)) < 0)
            return -1;
    return o->npath > 0 ? 0 : -1;
}

static int parse_backends(bench_opts_t *o, const char *v)
{
    char items[MOE_EP_BACKEND_COUNT_][32];
    o->nback = split_list(v, items, MOE_EP_BACKEND_COUNT_);
    for (int i = 0; i < o->nback; i++) {
        int b = name_index(items[i], backend_str, MOE_EP_BACKEND_COUNT_);
        if (b <= 0) return -1; /* GPU backends only */
        o->backends[i] = (moe_ep_backend_t)b;
    }
    return o->nback > 0 ? 0 : -1;
}

static int parse_option(bench_opts_t *o, const char *k, const char *v)
{
    if (strcmp(k, "--geometry") == 0) return parse_geometries(o, v);
    if (strcmp(k, "--tokens") == 0) return parse_tokens(o, v);
    if (strcmp(k, "--paths") == 0) return parse_paths(o, v);
    if (strcmp(k, "--backends") == 0) return parse_backends(o, v);
    if (strcmp(k, "--wire") == 0)
        return (int)(o->wire = (moe_ep_wire_t)name_index(v, wire_str, MOE_EP_WIRE_COUNT_)) < 0 ? -1 : 0;
    if (strcmp(k, "--iters") == 0) return (o->iters = atoi(v)) >= 1 ? 0 : -1;
    if (strcmp(k, "--warmup") == 0) return (o->warmup = atoi(v)) >= 0 ? 0 : -1;
    if (strcmp(k, "--out") == 0) return (o->out = v), 0;
    return -2;
}

/* Returns 0, 1 for --help, or 2 on a bad option. */
static int parse_bench(int argc, char **argv, bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    parse_geometries(o, "ds-v4-flash,ds-v4-pro");
    parse_tokens(o, "8,64,512,2048,8192");
    parse_paths(o, "all");
    parse_backends(o, "split");
    o->wire = MOE_EP_WIRE_BF16, o->iters = 50, o->warmup = 5;
    for (int i = 0; i < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage_bench(), 1;
        if (i + 1 >= argc) return fprintf(stderr, "moe_ep bench: %s needs a value\n", argv[i]), 2;
        int r = parse_option(o, argv[i], argv[i + 1]);
        if (r == -2) return fprintf(stderr, "moe_ep bench: unknown option %s\n", argv[i]), usage_bench(), 2;
        if (r) return fprintf(stderr, "moe_ep bench: bad value %s for %s\n", argv[i + 1], argv[i]), 2;
    }
    return 0;
}

/* ---- timing ------------------------------------------------------------------------ */

/* Enqueues one step on the stream; returns 1 on success. */
typedef int (*step_fn)(void *ctx, int iter, cudaStream_t s);

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

static int elapsed_median(cudaEvent_t *ev, int iters, double *median_us)
{
    double *ms = malloc(sizeof(double) * (size_t)iters);
    int ok = ms != NULL;
    for (int i = 0; ok && i < iters; i++) {
        float t = 0;
        ok = CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
        if (ok) ms[i] = t;
    }
    if (ok) *median_us = 1e3 * median(ms, iters);
    free(ms);
    return ok;
}

/* Runs warm-up steps, then `iters` timed ones; each timed one is `op` between
 * two events, after the untimed `pre` (may be NULL). Median in microseconds. */
static int time_steps(void *ctx, step_fn pre, step_fn op, int warmup, int iters, cudaStream_t s,
                      double *median_us)
{
    cudaEvent_t *ev = calloc((size_t)iters * 2, sizeof *ev);
    int ok = ev != NULL, made = 0;
    for (; ok && made < 2 * iters; made++) ok = CK(cudaEventCreate(&ev[made]));
    for (int i = 0; ok && i < warmup; i++) ok = (!pre || pre(ctx, i, s)) && op(ctx, i, s);
    for (int i = 0; ok && i < iters; i++) {
        ok = !pre || pre(ctx, warmup + i, s);
        ok = ok && CK(cudaEventRecord(ev[2 * i], s));
        ok = ok && op(ctx, warmup + i, s);
        ok = ok && CK(cudaEventRecord(ev[2 * i + 1], s));
    }
    ok = CK(cudaStreamSynchronize(s)) && ok;
    ok = ok && elapsed_median(ev, iters, median_us);
    for (int i = 0; i < made; i++)
        if (ev[i]) CK(cudaEventDestroy(ev[i]));
    free(ev);
    return ok;
}

/* ---- ceilings ------------------------------------------------------------------------ */

typedef struct {
    double copy_bps, bf16_flops, fp8_flops;
    int fp8_estimated;
    char fp8_note[160];
} ceilings_t;

typedef struct {
    void *a, *b, *c;
    size_t bytes;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t algo;
    void *workspace;
    size_t workspace_bytes;
} gemm_ctx_t;

static int copy_step(void *ctx, int iter, cudaStream_t s)
{
    gemm_ctx_t *g = ctx;
    (void)iter;
    return CK(cudaMemcpyAsync(g->b, g->a, g->bytes, cudaMemcpyDeviceToDevice, s));
}

static int measure_copy(cudaStream_t s, double *bps)
{
    gemm_ctx_t g;
    memset(&g, 0, sizeof g);
    g.bytes = COPY_BYTES;
    double us = 0;
    int ok = CK(cudaMalloc(&g.a, g.bytes)) && CK(cudaMalloc(&g.b, g.bytes));
    ok = ok && CK(cudaMemsetAsync(g.a, 0x5A, g.bytes, s));
    ok = ok && time_steps(&g, NULL, copy_step, 2, 10, s, &us);
    if (ok) *bps = 2.0 * (double)g.bytes / (us * 1e-6); /* read + write */
    if (g.a) CK(cudaFree(g.a));
    if (g.b) CK(cudaFree(g.b));
    return ok;
}

static int bf16_gemm_step(void *ctx, int iter, cudaStream_t s)
{
    gemm_ctx_t *g = ctx;
    const float alpha = 1.0f, beta = 0.0f;
    (void)iter, (void)s;
    return CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, GEMM_N, GEMM_N, GEMM_N, &alpha, g->a,
                           CUDA_R_16BF, GEMM_N, g->b, CUDA_R_16BF, GEMM_N, &beta, g->c, CUDA_R_16BF,
                           GEMM_N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static int fp8_gemm_step(void *ctx, int iter, cudaStream_t s)
{
    gemm_ctx_t *g = ctx;
    const float alpha = 1.0f, beta = 0.0f;
    (void)iter;
    return CB(cublasLtMatmul(g->lt, g->op, &alpha, g->a, g->la, g->b, g->lb, &beta, g->c, g->lc, g->c,
                             g->lc, &g->algo.algo, g->workspace, g->workspace_bytes, s));
}

/* Random E4M3 bytes with exponents 5..9 (|v| in [1/4, 8)): no NaN, no overflow. */
static void random_e4m3(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)((x & 0x80) | ((5 + (x >> 8) % 5) << 3) | ((x >> 16) & 7));
    }
}

static int cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Random A, B of bytes_per_elem (2: bf16, 1: e4m3) into g->a, g->b. */
static int random_operands(gemm_ctx_t *g, int bytes_per_elem)
{
    size_t n = (size_t)GEMM_N * GEMM_N, bytes = n * (size_t)bytes_per_elem;
    void *h = malloc(bytes);
    int ok = h != NULL;
    for (int m = 0; ok && m < 2; m++) {
        if (bytes_per_elem == 2) synth_bf16_parallel(h, (int64_t)n, 1 << 20, 1.0f, SEED, 77 + (uint64_t)m, cpu_threads());
        else random_e4m3(h, n, 99 + (uint64_t)m);
        ok = CK(cudaMemcpy(m ? g->b : g->a, h, bytes, cudaMemcpyHostToDevice));
    }
    free(h);
    return ok;
}

static int measure_bf16(gemm_ctx_t *g, cudaStream_t s, double *flops)
{
    double us = 0;
    int ok = random_operands(g, 2) && CB(cublasCreate(&g->blas));
    ok = ok && CB(cublasSetStream(g->blas, s));
    ok = ok && time_steps(g, NULL, bf16_gemm_step, 3, 10, s, &us);
    if (ok) *flops = 2.0 * GEMM_N * GEMM_N * (double)GEMM_N / (us * 1e-6);
    if (g->blas) CB(cublasDestroy(g->blas));
    return ok;
}

/* TN FP8 E4M3 x E4M3 -> bf16, fp32 compute, through cublasLt. */
static int setup_fp8(gemm_ctx_t *g)
{
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint64_t ws = g->workspace_bytes;
    cublasLtMatmulPreference_t pref = NULL;
    int found = 0;
    int ok = CB(cublasLtCreate(&g->lt)) && CB(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ok = ok && CB(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    ok = ok && CB(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    ok = ok && CB(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_8F_E4M3, GEMM_N, GEMM_N, GEMM_N));
    ok = ok && CB(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_8F_E4M3, GEMM_N, GEMM_N, GEMM_N));
    ok = ok && CB(cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_16BF, GEMM_N, GEMM_N, GEMM_N));
    ok = ok && CB(cublasLtMatmulPreferenceCreate(&pref));
    ok = ok && CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    ok = ok && CB(cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->lc, g->lc, pref, 1, &g->algo, &found));
    if (ok && found < 1) fprintf(stderr, "moe_ep bench: cublasLt found no FP8 algorithm\n");
    if (pref) CB(cublasLtMatmulPreferenceDestroy(pref));
    return ok && found >= 1;
}

static void teardown_fp8(gemm_ctx_t *g)
{
    if (g->la) CB(cublasLtMatrixLayoutDestroy(g->la));
    if (g->lb) CB(cublasLtMatrixLayoutDestroy(g->lb));
    if (g->lc) CB(cublasLtMatrixLayoutDestroy(g->lc));
    if (g->op) CB(cublasLtMatmulDescDestroy(g->op));
    if (g->lt) CB(cublasLtDestroy(g->lt));
}

static int measure_fp8(gemm_ctx_t *g, cudaStream_t s, double *flops)
{
    double us = 0;
    int ok = random_operands(g, 1) && setup_fp8(g);
    ok = ok && time_steps(g, NULL, fp8_gemm_step, 3, 10, s, &us);
    if (ok) *flops = 2.0 * GEMM_N * GEMM_N * (double)GEMM_N / (us * 1e-6);
    teardown_fp8(g);
    return ok;
}

static int measure_gemms(cudaStream_t s, ceilings_t *c)
{
    gemm_ctx_t g;
    memset(&g, 0, sizeof g);
    size_t n = (size_t)GEMM_N * GEMM_N;
    g.workspace_bytes = (size_t)64 << 20;
    int ok = CK(cudaMalloc(&g.a, 2 * n)) && CK(cudaMalloc(&g.b, 2 * n)) && CK(cudaMalloc(&g.c, 2 * n));
    ok = ok && CK(cudaMalloc(&g.workspace, g.workspace_bytes));
    ok = ok && measure_bf16(&g, s, &c->bf16_flops);
    if (ok && !measure_fp8(&g, s, &c->fp8_flops)) {
        CK(cudaGetLastError());
        c->fp8_flops = 2.0 * c->bf16_flops, c->fp8_estimated = 1;
        snprintf(c->fp8_note, sizeof c->fp8_note, "estimated as 2x BF16: cublasLt FP8 GEMM failed (see above)");
        fprintf(stderr, "moe_ep bench: %s\n", c->fp8_note);
    }
    void *bufs[] = {g.a, g.b, g.c, g.workspace};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) CK(cudaFree(bufs[i]));
    return ok;
}

/* ---- EP8 slice: data -------------------------------------------------------------------- */

/* One input set on the device: x, ids, weights, out for max T tokens. */
typedef struct {
    uint16_t *x, *out;
    int32_t *ids;
    float *wt;
    int32_t *host_ids; /* [max T][K], for counting the experts hit */
} dset_t;

typedef struct {
    const geometry_t *g;
    int E8, K, H, I, maxT, nsets;
    uint16_t *w13, *w2; /* host bf16 checkpoint [E8][2I][H], [E8][H][I] */
    dset_t sets[MAX_SETS];
    void *flush;
    size_t flush_bytes;
} slice_t;

static int make_checkpoint(slice_t *sl)
{
    int64_t n13 = 2 * (int64_t)sl->I * sl->H, n2 = (int64_t)sl->H * sl->I;
    sl->w13 = malloc(sizeof(uint16_t) * (size_t)(n13 * sl->E8));
    sl->w2 = malloc(sizeof(uint16_t) * (size_t)(n2 * sl->E8));
    if (!sl->w13 || !sl->w2) return fprintf(stderr, "moe_ep bench: out of host memory\n"), 0;
    for (int e = 0; e < sl->E8; e++)
        synth_expert(sl->w13 + e * n13, sl->w2 + e * n2, e, sl->H, sl->I, SEED, cpu_threads());
    return 1;
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
        synth_bf16_parallel(hx, (int64_t)xn, 1 << 20, 1.0f, SEED, (1ull << 40) + (uint64_t)i * 4096, cpu_threads());
        synth_routing(d->host_ids, hw, sl->maxT, sl->K, sl->E8, SEED, (1ull << 41) + (uint64_t)i);
    }
    ok = ok && CK(cudaMalloc((void **)&d->x, sizeof(uint16_t) * xn)) && CK(cudaMalloc((void **)&d->out, sizeof(uint16_t) * xn));
    ok = ok && CK(cudaMalloc((void **)&d->ids, sizeof(int32_t) * kn)) && CK(cudaMalloc((void **)&d->wt, sizeof(float) * kn));
    ok = ok && CK(cudaMemcpy(d->x, hx, sizeof(uint16_t) * xn, cudaMemcpyHostToDevice));
    ok = ok && CK(cudaMemcpy(d->ids, d->host_ids, sizeof(int32_t) * kn, cudaMemcpyHostToDevice));
    ok = ok && CK(cudaMemcpy(d->wt, hw, sizeof(float) * kn, cudaMemcpyHostToDevice));
    free(hx), free(hw);
    return ok;
}

static void free_slice(slice_t *sl)
{
    for (int i = 0; i < MAX_SETS; i++) {
        dset_t *d = &sl->sets[i];
        void *bufs[] = {d->x, d->out, d->ids, d->wt};
        for (int j = 0; j < 4; j++)
            if (bufs[j]) CK(cudaFree(bufs[j]));
        free(d->host_ids);
    }
    if (sl->flush) CK(cudaFree(sl->flush));
    free(sl->w13), free(sl->w2);
    memset(sl, 0, sizeof *sl);
}

/* Input sets: enough that the largest T's inputs do not all fit in twice the L2. */
static int make_slice(slice_t *sl, const geometry_t *g, int maxT)
{
    int l2 = 0;
    memset(sl, 0, sizeof *sl);
    sl->g = g, sl->E8 = g->num_experts / 8, sl->K = g->top_k, sl->H = g->hidden, sl->I = g->intermediate;
    sl->maxT = maxT;
    if (!CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0))) return 0;
    sl->flush_bytes = 2 * (size_t)l2;
    double set_bytes = (double)maxT * sl->H * 4.0 + (double)maxT * sl->K * 8.0;
    sl->nsets = (int)ceil(2.0 * l2 / set_bytes);
    sl->nsets = sl->nsets < 2 ? 2 : sl->nsets > MAX_SETS ? MAX_SETS : sl->nsets;
    fprintf(stderr, "%s: generating %d experts and %d input sets\n", g->name, sl->E8, sl->nsets);
    int ok = CK(cudaMalloc(&sl->flush, sl->flush_bytes)) && make_checkpoint(sl);
    for (int i = 0; ok && i < sl->nsets; i++) ok = make_set(sl, i);
    return ok;
}

/* Mean number of experts that receive at least one of the first T tokens' rows. */
static double experts_hit(const slice_t *sl, int T)
{
    double sum = 0;
    char *hit = calloc((size_t)sl->E8, 1);
    for (int i = 0; hit && i < sl->nsets; i++) {
        memset(hit, 0, (size_t)sl->E8);
        for (int64_t j = 0; j < (int64_t)T * sl->K; j++) hit[sl->sets[i].host_ids[j]] = 1;
        for (int e = 0; e < sl->E8; e++) sum += hit[e];
    }
    free(hit);
    return sum / sl->nsets;
}

/* ---- EP8 slice: floor ------------------------------------------------------------------- */

static double weight_bytes_per_elem(moe_ep_path_t p)
{
    static const double b[MOE_EP_PATH_COUNT_] = {2.0, 1.0 + 1.0 / 32, 0.5 + 1.0 / 16, 0.5 + 1.0 / 32,
                                                 1.0 + 4.0 / 16384};
    return b[p];
}

static double act_bytes_per_elem(moe_ep_path_t p)
{
    static const double b[MOE_EP_PATH_COUNT_] = {2.0, 1.0 + 1.0 / 32, 0.5 + 1.0 / 16, 1.0 + 1.0 / 32,
                                                 1.0 + 4.0 / 128};
    return b[p];
}

static double wire_bytes_per_elem(moe_ep_wire_t w)
{
    static const double b[MOE_EP_WIRE_COUNT_] = {2.0, 1.0 + 1.0 / 32, 0.5 + 2.0 / 16};
    return b[w];
}

static int uses_fp8_tensor_cores(moe_ep_path_t p)
{
    return p == MOE_EP_PATH_MXFP8 || p == MOE_EP_PATH_W4A8 || p == MOE_EP_PATH_FP8_BLOCK;
}

/* Expert-stage floor in microseconds. */
static double floor_us(const slice_t *sl, const ceilings_t *c, moe_ep_path_t p, moe_ep_wire_t w, int T)
{
    double H = sl->H, I = sl->I, rows = (double)T * sl->K;
    double bytes = experts_hit(sl, T) * 3.0 * H * I * weight_bytes_per_elem(p) + 2.0 * T * H * 2.0 +
                   rows * H * act_bytes_per_elem(p) + rows * H * wire_bytes_per_elem(w);
    double flops = 2.0 * rows * 3.0 * H * I;
    double rate = uses_fp8_tensor_cores(p) ? c->fp8_flops : c->bf16_flops;
    double t_bytes = bytes / c->copy_bps, t_flops = flops / rate;
    return 1e6 * (t_bytes > t_flops ? t_bytes : t_flops);
}

/* ---- EP8 slice: timing ------------------------------------------------------------------- */

enum { CELL_NA = 0, CELL_OK = 1, CELL_ERR = 2 };

typedef struct {
    int stage_state, fwd_state;
    double stage_us, floor_us, fwd_us;
} cell_t;

typedef struct {
    const slice_t *sl;
    moe_ep_layer_t layer;
    int T;
} run_ctx_t;

static int flush_step(void *ctx, int iter, cudaStream_t s)
{
    const run_ctx_t *c = ctx;
    return CK(cudaMemsetAsync(c->sl->flush, iter & 0xFF, c->sl->flush_bytes, s));
}

static int forward_step(void *ctx, int iter, cudaStream_t s)
{
    const run_ctx_t *c = ctx;
    const dset_t *d = &c->sl->sets[iter % c->sl->nsets];
    const uint16_t *x = d->x;
    const int32_t *ids = d->ids;
    const float *wt = d->wt;
    uint16_t *out = d->out;
    int32_t nt = c->T;
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = &nt, a.x = &x, a.topk_ids = &ids, a.topk_weights = &wt, a.out = &out;
    return layer_ok(moe_ep_layer_forward(c->layer, &a, (moe_ep_stream_t)s), "moe_ep_layer_forward");
}

static int forward_flush_step(void *ctx, int iter, cudaStream_t s)
{
    return forward_step(ctx, iter, s) && flush_step(ctx, iter, s);
}

static int stage_step(void *ctx, int iter, cudaStream_t s)
{
    const run_ctx_t *c = ctx;
    (void)iter;
    return layer_ok(moe_ep_split_expert_stage(c->layer, (moe_ep_stream_t)s), "moe_ep_split_expert_stage");
}

/* Device-side errors of the timed calls (e.g. a timeout); reset so the next cell runs. */
static int no_async_error(moe_ep_group_t g)
{
    moe_ep_status_t status = MOE_EP_SUCCESS;
    if (!layer_ok(moe_ep_group_get_async_error(g, &status), "moe_ep_group_get_async_error")) return 0;
    if (status == MOE_EP_SUCCESS) return 1;
    fprintf(stderr, "moe_ep bench: device error: %s: %s\n", moe_ep_status_string(status), moe_ep_last_error());
    layer_ok(moe_ep_group_reset_async_error(g), "moe_ep_group_reset_async_error");
    return 0;
}

static void time_cell(const bench_opts_t *o, moe_ep_group_t g, run_ctx_t *c, moe_ep_backend_t b,
                      cudaStream_t s, cell_t *cell)
{
    int ok = time_steps(c, flush_step, forward_step, o->warmup, o->iters, s, &cell->fwd_us);
    ok = ok && no_async_error(g);
    cell->fwd_state = ok ? CELL_OK : CELL_ERR;
    if (b != MOE_EP_BACKEND_SPLIT) return; /* n/a: the hook is the split backend's */
    ok = time_steps(c, forward_flush_step, stage_step, o->warmup, o->iters, s, &cell->stage_us);
    ok = ok && no_async_error(g);
    cell->stage_state = ok ? CELL_OK : CELL_ERR;
}

static moe_ep_status_t load_slice_weights(moe_ep_layer_t l, const slice_t *sl, cudaStream_t s)
{
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = sl->E8, w.w13 = sl->w13, w.w2 = sl->w2;
    moe_ep_status_t st = moe_ep_layer_load_experts(l, &w, (moe_ep_stream_t)s);
    if (st == MOE_EP_SUCCESS && !CK(cudaStreamSynchronize(s))) st = MOE_EP_ERROR_CUDA;
    return st;
}

static moe_ep_status_t create_slice_layer(const bench_opts_t *o, const slice_t *sl, moe_ep_path_t p,
                                          moe_ep_backend_t b, moe_ep_group_t g, cudaStream_t s,
                                          moe_ep_layer_t *l)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = sl->E8, c.top_k = sl->K, c.hidden = sl->H, c.intermediate = sl->I;
    c.max_tokens_per_rank = sl->maxT, c.path = p, c.wire = o->wire, c.backend = b;
    c.swiglu_limit = sl->g->swiglu_limit;
    /* NVFP4 static activation scales: x ~ N(0, 1) (amax about 5), SwiGLU output amax about 16. */
    c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 16.0f;
    *l = NULL;
    moe_ep_status_t st = moe_ep_layer_create(g, &c, l);
    if (st == MOE_EP_SUCCESS) st = load_slice_weights(*l, sl, s);
    return st;
}

/* cells[t] for every T of one path and backend. */
static void bench_layer(const bench_opts_t *o, const slice_t *sl, const ceilings_t *ce,
                        moe_ep_path_t p, moe_ep_backend_t b, cudaStream_t s, cell_t *cells, int stride)
{
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    int ok = layer_ok(moe_ep_group_create_emulated(1, 0, &g), "moe_ep_group_create_emulated");
    ok = ok && layer_ok(create_slice_layer(o, sl, p, b, g, s, &l), "layer create/load");
    for (int t = 0; t < o->ntok; t++) {
        cell_t *cell = &cells[t * stride];
        int T = o->tokens[t];
        cell->floor_us = floor_us(sl, ce, p, o->wire, T);
        cell->fwd_state = cell->stage_state = ok ? CELL_NA : CELL_ERR;
        if (!ok) continue;
        run_ctx_t c = {sl, l, T};
        time_cell(o, g, &c, b, s, cell);
        fprintf(stderr, "%s T=%d %s/%s: forward %.1f us, expert stage %.1f us, floor %.1f us\n",
                sl->g->name, T, moe_ep_path_name(p), moe_ep_backend_name(b),
                cell->fwd_state == CELL_OK ? cell->fwd_us : NAN,
                cell->stage_state == CELL_OK ? cell->stage_us : NAN, cell->floor_us);
    }
    if (l) layer_ok(moe_ep_layer_destroy(l), "moe_ep_layer_destroy");
    if (g) layer_ok(moe_ep_group_destroy(g), "moe_ep_group_destroy");
}

static int max_tokens(const bench_opts_t *o)
{
    int m = 1;
    for (int t = 0; t < o->ntok; t++) m = o->tokens[t] > m ? o->tokens[t] : m;
    return m;
}

/* cells [ntok][npath][nback] of one geometry. */
static void bench_geometry(const bench_opts_t *o, const geometry_t *g, const ceilings_t *ce,
                           cudaStream_t s, cell_t *cells)
{
    int n = o->ntok * o->npath * o->nback;
    for (int i = 0; i < n; i++) cells[i].fwd_state = cells[i].stage_state = CELL_ERR;
    if (g->num_experts % 8 || g->top_k > g->num_experts / 8) {
        fprintf(stderr, "moe_ep bench: %s: EP8 slice needs E %% 8 == 0 and K <= E/8\n", g->name);
        return;
    }
    slice_t sl;
    if (make_slice(&sl, g, max_tokens(o)))
        for (int p = 0; p < o->npath; p++)
            for (int b = 0; b < o->nback; b++)
                bench_layer(o, &sl, ce, o->paths[p], o->backends[b], s, &cells[p * o->nback + b],
                            o->npath * o->nback);
    free_slice(&sl);
}

/* ---- report ---------------------------------------------------------------------------- */

typedef struct {
    char device[320], date[64], commit[64];
    ceilings_t ceil;
} header_t;

static void get_commit(char *out, size_t n)
{
    const char *env = getenv("MOE_EP_COMMIT");
    snprintf(out, n, "%s", env && *env ? env : "unknown");
    if (env && *env) return;
    FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (!p) return;
    char line[64];
    if (fgets(line, sizeof line, p) && line[0] != '\n') {
        line[strcspn(line, "\r\n")] = '\0';
        snprintf(out, n, "%s", line);
    }
    pclose(p);
}

static int get_header(header_t *h)
{
    struct cudaDeviceProp prop;
    memset(h, 0, sizeof *h);
    if (!CK(cudaGetDeviceProperties(&prop, 0))) return 0;
    snprintf(h->device, sizeof h->device, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(h->date, sizeof h->date, "%Y-%m-%d %H:%M UTC", &tm);
    get_commit(h->commit, sizeof h->commit);
    return 1;
}

static void print_header(FILE *f, const header_t *h, const bench_opts_t *o)
{
    const ceilings_t *c = &h->ceil;
    fprintf(f, "# moe_ep bench\n\n");
    fprintf(f, "- device: %s\n- date: %s\n- commit: %s\n", h->device, h->date, h->commit);
    fprintf(f, "- copy bandwidth (D2D memcpy of 2 GiB, read + write, median of 10): %.2f TB/s\n", c->copy_bps / 1e12);
    fprintf(f, "- BF16 GEMM 8192^3 (cublasGemmEx, fp32 compute): %.0f TFLOP/s\n", c->bf16_flops / 1e12);
    fprintf(f, "- FP8 E4M3 GEMM 8192^3 (cublasLt TN, fp32 compute, bf16 out): %.0f TFLOP/s%s%s\n",
            c->fp8_flops / 1e12, c->fp8_estimated ? " -- " : "", c->fp8_estimated ? c->fp8_note : "");
    fprintf(f, "- EP8 slice on one GPU: E/8 experts, top-K, world size 1, T tokens (T*K rows), uniform routing;"
               " wire %s; median of %d iterations after %d warm-up; L2 flushed before each timed call;"
               " inputs rotate over >= 2 sets\n", moe_ep_wire_name(o->wire), o->iters, o->warmup);
    fprintf(f, "- floor = max(bytes / copy bandwidth, FLOPs / tensor rate); FLOPs = 2*rows*3*H*I; bytes ="
               " weights of the experts hit (path format) + x and out (bf16) + rows*H (activation format)"
               " + rows*H (wire format); FP8 rate for mxfp8, w4a8, fp8_block, BF16 rate for bf16, nvfp4\n");
    fprintf(f, "- stage = expert stage alone (moe_ep_split_expert_stage), fwd = whole moe_ep_layer_forward;"
               " times in us, ratio = stage / floor\n\n");
}

static void print_cell_value(FILE *f, int state, const char *fmt, double v)
{
    if (state == CELL_OK) fprintf(f, fmt, v);
    else fprintf(f, " %s |", state == CELL_ERR ? "err" : "n/a");
}

static void print_table_head(FILE *f, const bench_opts_t *o)
{
    fprintf(f, "| geometry | T |");
    for (int p = 0; p < o->npath; p++)
        for (int b = 0; b < o->nback; b++) {
            char n[48];
            snprintf(n, sizeof n, "%s%s%s", moe_ep_path_name(o->paths[p]), o->nback > 1 ? " " : "",
                     o->nback > 1 ? moe_ep_backend_name(o->backends[b]) : "");
            fprintf(f, " %s stage | %s floor | %s ratio | %s fwd |", n, n, n, n);
        }
    fprintf(f, "\n|---|---:|");
    for (int i = 0; i < o->npath * o->nback; i++) fprintf(f, "---:|---:|---:|---:|");
    fprintf(f, "\n");
}

static void print_table(FILE *f, const bench_opts_t *o, const cell_t *cells)
{
    int per_geo = o->ntok * o->npath * o->nback, per_tok = o->npath * o->nback;
    print_table_head(f, o);
    for (int gi = 0; gi < o->ngeo; gi++)
        for (int t = 0; t < o->ntok; t++) {
            fprintf(f, "| %s | %d |", o->geos[gi]->name, o->tokens[t]);
            for (int i = 0; i < per_tok; i++) {
                const cell_t *c = &cells[gi * per_geo + t * per_tok + i];
                print_cell_value(f, c->stage_state, " %.1f |", c->stage_us);
                fprintf(f, " %.1f |", c->floor_us);
                print_cell_value(f, c->stage_state, " %.2f |", c->stage_us / c->floor_us);
                print_cell_value(f, c->fwd_state, " %.1f |", c->fwd_us);
            }
            fprintf(f, "\n");
        }
}

static int write_report(const bench_opts_t *o, const header_t *h, const cell_t *cells)
{
    print_header(stdout, h, o);
    print_table(stdout, o, cells);
    if (!o->out) return 0;
    FILE *f = fopen(o->out, "w");
    if (!f) return fprintf(stderr, "moe_ep bench: cannot write %s\n", o->out), 1;
    print_header(f, h, o);
    print_table(f, o, cells);
    return fclose(f) == 0 ? 0 : 1;
}

static int measure_ceilings(cudaStream_t s, ceilings_t *c)
{
    fprintf(stderr, "measuring ceilings (copy 2 GiB, GEMM 8192^3 BF16 and FP8)\n");
    if (!measure_copy(s, &c->copy_bps) || !measure_gemms(s, c)) return 0;
    fprintf(stderr, "copy %.2f TB/s, BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s%s\n", c->copy_bps / 1e12,
            c->bf16_flops / 1e12, c->fp8_flops / 1e12, c->fp8_estimated ? " (estimated)" : "");
    return 1;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts_t o;
    int r = parse_bench(argc, argv, &o);
    if (r) return r == 1 ? 0 : 2;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return fprintf(stderr, "moe_ep bench: no usable GPU: %s\n", e ? cudaGetErrorString(e) : "no device"), 2;
    header_t h;
    cudaStream_t s = NULL;
    if (!CK(cudaSetDevice(0)) || !get_header(&h) || !CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)))
        return 1;
    fprintf(stderr, "device %s\n", h.device);
    if (!measure_ceilings(s, &h.ceil)) return CK(cudaStreamDestroy(s)), 1;
    size_t per_geo = (size_t)o.ntok * o.npath * o.nback;
    cell_t *cells = calloc(per_geo * (size_t)o.ngeo, sizeof *cells);
    if (!cells) return 1;
    for (int gi = 0; gi < o.ngeo; gi++) bench_geometry(&o, o.geos[gi], &h.ceil, s, cells + gi * per_geo);
    r = write_report(&o, &h, cells);
    free(cells);
    CK(cudaStreamDestroy(s));
    return r;
}

#endif /* MOE_EP_HAVE_CUDA */
