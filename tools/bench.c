/* `moe_ep bench`: measures the GPU's ceilings (copy bandwidth, dense BF16 and
 * FP8 GEMM rates) and then, for each geometry, the "EP8 slice on one GPU": a
 * world-size-1 layer with E/8 experts, top-K, T tokens routed uniformly (or,
 * with --ranks R, an emulated group of R such ranks sharing the GPU). For
 * every path and backend it times the whole forward and the expert stage alone
 * and compares the expert stage with its floor,
 *   max(bytes / copy bandwidth, FLOPs / tensor rate).
 * With --nccl, one rank of a real group of processes instead (bench_nccl.c). */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>

#ifndef MOE_EP_HAVE_CUDA

int cmd_bench(int argc, char **argv)
{
    (void)argc, (void)argv;
    return slice_needs_gpu_build("bench");
}

#else

#include "moe_ep.h"
#include "synth.h"
#ifdef MOE_EP_MEGA_TRACE
#include "kernels/mega_kernels.h" /* the item timeline (trace_mega_forward) */
#endif

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

#define GEMM_N 8192
#define COPY_BYTES ((size_t)2 << 30)

/* ---- status checks ------------------------------------------------------------ */

#define CB(call) cublas_ok((call), #call, __LINE__)

static int cublas_ok(cublasStatus_t s, const char *what, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    fprintf(stderr, "moe_ep bench: bench.c:%d: %s: %s\n", line, what, cublasGetStatusString(s));
    return 0;
}

/* ---- options -------------------------------------------------------------------- */

static void usage_bench(void)
{
    printf("usage: moe_ep bench [--geometry ds-v4-flash,ds-v4-pro] [--tokens 8,64,512,2048,8192]\n"
           "                    [--paths all|bf16,mxfp8,nvfp4,w4a8,fp8_block] [--backends split[,mega]]\n"
           "                    [--wire bf16|mxfp8|fp4] [--ranks R | --nccl] [--iters N] [--warmup N]\n"
           "                    [--fp8-fast-accum] [--tile-rows R] [--sustain-ms MS] [--flush read|memset|none]\n"
           "                    [--out FILE]\n"
           "  EP8 slice on one GPU: E/8 experts, top-K, T tokens, uniform routing, world size 1.\n"
           "  --ranks R (1..8): an emulated group of R ranks on the GPU, each with E/8 experts and T\n"
           "  tokens routed uniformly over all R E/8 experts (R = 8: the emulated EP8 group).\n"
           "  --nccl (no value): one process per GPU, a real NCCL group of W ranks built like --ranks W\n"
           "  (each rank: E/8 experts, T tokens routed over all W E/8 experts); start it with\n"
           "    scripts/nccl_launch.sh W build/tools/moe_ep bench --nccl [options]\n"
           "  (env MOE_EP_RANK, MOE_EP_WORLD_SIZE, MOE_EP_NCCL_ID_FILE; rank r on GPU r). Times the\n"
           "  whole forward (p50) and its NVLink bytes per rank; rank 0 writes the table.\n"
           "  --fp8-fast-accum: layers with config.fp8_fast_accum (fp8_block on the register tile's QGMMA instances).\n"
           "  --tile-rows R (16, 32, 64, 128): every layer's explicit knobs.gemm_tile_rows instead of the\n"
           "  heuristic's (to sweep its bounds); a path that does not run R fails its cells.\n"
           "  --sustain-ms MS (0 .. 600000, default 1500; 0: --warmup only): each cell's warm-up rounds last at least MS,\n"
           "  so that a cell is timed in the steady state its load settles in, past the power controller's\n"
           "  dip 0.6-0.9 s into a load (docs/benchmarks.md, 2026-12-02).\n"
           "  --flush read|memset|none (default read): how the L2 is flushed before each timed call: a kernel reading\n"
           "  2 x L2 bytes (clean lines left), or a memset of them (the tables before 2026-12-04: the memset's\n"
           "  dirty lines were written back inside the timed call); none: no flush (a lab's yardstick of what\n"
           "  cold code, parameters and data cost; not how the tables are timed).\n"
           "  Env MOE_EP_COMMIT names the commit in the header (else git rev-parse).\n");
}

static int parse_geometries(bench_opts_t *o, const char *v)
{
    char items[SLICE_MAX_LIST][32];
    o->ngeo = slice_split_list(v, items, SLICE_MAX_LIST);
    for (int i = 0; i < o->ngeo; i++)
        if (!(o->geos[i] = geometry_find(items[i]))) return -1;
    return o->ngeo > 0 ? 0 : -1;
}

static int parse_tokens(bench_opts_t *o, const char *v)
{
    return (o->ntok = slice_parse_tokens(v, o->tokens)) > 0 ? 0 : -1;
}

static int parse_paths(bench_opts_t *o, const char *v)
{
    return (o->npath = slice_parse_paths(v, o->paths)) > 0 ? 0 : -1;
}

static int parse_backends(bench_opts_t *o, const char *v)
{
    char items[MOE_EP_BACKEND_COUNT_][32];
    o->nback = slice_split_list(v, items, MOE_EP_BACKEND_COUNT_);
    for (int i = 0; i < o->nback; i++) {
        int b = slice_name_index(items[i], slice_backend_str, MOE_EP_BACKEND_COUNT_);
        if (b <= 0) return -1; /* GPU backends only */
        o->backends[i] = (moe_ep_backend_t)b;
    }
    return o->nback > 0 ? 0 : -1;
}

static int parse_option(void *opts, const char *k, const char *v)
{
    bench_opts_t *o = opts;
    if (strcmp(k, "--geometry") == 0) return parse_geometries(o, v);
    if (strcmp(k, "--tokens") == 0) return parse_tokens(o, v);
    if (strcmp(k, "--paths") == 0) return parse_paths(o, v);
    if (strcmp(k, "--backends") == 0) return parse_backends(o, v);
    if (strcmp(k, "--wire") == 0)
        return slice_parse_wire(v, &o->wire);
    if (strcmp(k, "--iters") == 0) return slice_parse_int(v, 1, 1000000, &o->iters);
    if (strcmp(k, "--warmup") == 0) return slice_parse_int(v, 0, 1000000, &o->warmup);
    if (strcmp(k, "--out") == 0) return (o->out = v), 0;
    if (strcmp(k, "--sustain-ms") == 0) return slice_parse_int(v, 0, 600000, &o->sustain_ms);
    if (strcmp(k, "--flush") == 0) {
        o->flush_kind = strcmp(v, "read") == 0     ? SLICE_FLUSH_READS
                        : strcmp(v, "memset") == 0 ? SLICE_FLUSH_MEMSET
                        : strcmp(v, "none") == 0   ? SLICE_FLUSH_NONE
                                                   : -1;
        return o->flush_kind < 0 ? -1 : 0;
    }
    if (strcmp(k, "--ranks") == 0) return slice_parse_int(v, 1, SLICE_MAX_RANKS, &o->ranks);
    if (strcmp(k, "--tile-rows") == 0) {
        int r = slice_parse_int(v, 16, 128, &o->tile_rows);
        return !r && (o->tile_rows == 16 || o->tile_rows == 32 || o->tile_rows == 64 || o->tile_rows == 128) ? 0 : -1;
    }
    return -2;
}

/* Removes every `flag` (an option without a value) from argv; 1 if there was one. */
static int take_flag(int *argc, char **argv, const char *flag)
{
    int found = 0, n = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], flag) == 0) found = 1;
        else argv[n++] = argv[i];
    }
    *argc = n;
    return found;
}

/* Returns 0, 1 for --help, or 2 on a bad option. */
static int parse_bench(int argc, char **argv, bench_opts_t *o)
{
    memset(o, 0, sizeof *o);
    parse_geometries(o, "ds-v4-flash,ds-v4-pro");
    parse_tokens(o, "8,64,512,2048,8192");
    parse_paths(o, "all");
    parse_backends(o, "split");
    o->wire = MOE_EP_WIRE_BF16, o->iters = 50, o->warmup = 5, o->ranks = 1, o->sustain_ms = 1500;
    o->nccl = take_flag(&argc, argv, "--nccl");
    o->fp8_fast_accum = take_flag(&argc, argv, "--fp8-fast-accum");
    int r = slice_parse_args(argc, argv, "bench", parse_option, usage_bench, o);
    if (r == 0 && o->nccl && o->ranks != 1)
        return fprintf(stderr, "moe_ep bench: --nccl takes W from nccl_launch.sh, not --ranks\n"), 2;
    return r;
}

/* ---- ceilings ------------------------------------------------------------------------ */

/* The ceilings, each measured twice. Sustained (the floors use these): timed
 * after SUSTAIN_MS of the same step back to back. The H200 caps its power
 * (700 W): under sustained tensor work its SM clock fell from 1980 MHz to
 * ~1470 within ~100 ms (nvidia-smi beside the bench, 2026-12-02), and every
 * bench cell runs in that state, its warm-up and timed calls enqueued back to
 * back. Burst (*_burst; reported only): the first steps after the GPU idled,
 * at clocks not yet capped. */
typedef struct {
    double copy_bps, bf16_flops, fp8_flops;
    double copy_burst_bps, bf16_burst_flops, fp8_burst_flops;
    int fp8_estimated;
    char fp8_note[160];
} ceilings_t;

#define SUSTAIN_MS 500.0 /* back-to-back steps before a sustained ceiling is timed */
#define SUSTAIN_ITERS 20

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

/* Step `op` timed in a burst (3 warm-up, 10 timed: *burst_us) and then sustained
 * (SUSTAIN_MS of steps, then SUSTAIN_ITERS timed: *us); medians in us. */
static int time_ceiling(void *ctx, step_fn op, cudaStream_t s, double *burst_us, double *us)
{
    if (!slice_time_steps(ctx, NULL, op, 3, 10, s, burst_us)) return 0;
    int warm = (int)(SUSTAIN_MS * 1e3 / (*burst_us > 1.0 ? *burst_us : 1.0)) + 1;
    return slice_time_steps(ctx, NULL, op, warm, SUSTAIN_ITERS, s, us);
}

static int copy_step(void *ctx, int iter, cudaStream_t s)
{
    gemm_ctx_t *g = ctx;
    (void)iter;
    return CK(cudaMemcpyAsync(g->b, g->a, g->bytes, cudaMemcpyDeviceToDevice, s));
}

static int measure_copy(cudaStream_t s, ceilings_t *c)
{
    gemm_ctx_t g;
    memset(&g, 0, sizeof g);
    g.bytes = COPY_BYTES;
    double us = 0, burst_us = 0;
    int ok = CK(cudaMalloc(&g.a, g.bytes)) && CK(cudaMalloc(&g.b, g.bytes));
    ok = ok && CK(cudaMemsetAsync(g.a, 0x5A, g.bytes, s));
    ok = ok && time_ceiling(&g, copy_step, s, &burst_us, &us);
    if (ok) /* read + write */
        c->copy_bps = 2.0 * (double)g.bytes / (us * 1e-6), c->copy_burst_bps = 2.0 * (double)g.bytes / (burst_us * 1e-6);
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

/* Random A, B of bytes_per_elem (2: bf16, 1: e4m3) into g->a, g->b. */
static int random_operands(gemm_ctx_t *g, int bytes_per_elem)
{
    size_t n = (size_t)GEMM_N * GEMM_N, bytes = n * (size_t)bytes_per_elem;
    void *h = malloc(bytes);
    int ok = h != NULL;
    for (int m = 0; ok && m < 2; m++) {
        if (bytes_per_elem == 2) synth_bf16_parallel(h, (int64_t)n, 1 << 20, 1.0f, SLICE_SEED, 77 + (uint64_t)m, slice_cpu_threads());
        else random_e4m3(h, n, 99 + (uint64_t)m);
        ok = CK(cudaMemcpy(m ? g->b : g->a, h, bytes, cudaMemcpyHostToDevice));
    }
    free(h);
    return ok;
}

#define GEMM_FLOPS (2.0 * GEMM_N * GEMM_N * (double)GEMM_N)

static int measure_bf16(gemm_ctx_t *g, cudaStream_t s, ceilings_t *c)
{
    double us = 0, burst_us = 0;
    int ok = random_operands(g, 2) && CB(cublasCreate(&g->blas));
    ok = ok && CB(cublasSetStream(g->blas, s));
    ok = ok && time_ceiling(g, bf16_gemm_step, s, &burst_us, &us);
    if (ok) c->bf16_flops = GEMM_FLOPS / (us * 1e-6), c->bf16_burst_flops = GEMM_FLOPS / (burst_us * 1e-6);
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

static int measure_fp8(gemm_ctx_t *g, cudaStream_t s, ceilings_t *c)
{
    double us = 0, burst_us = 0;
    int ok = random_operands(g, 1) && setup_fp8(g);
    ok = ok && time_ceiling(g, fp8_gemm_step, s, &burst_us, &us);
    if (ok) c->fp8_flops = GEMM_FLOPS / (us * 1e-6), c->fp8_burst_flops = GEMM_FLOPS / (burst_us * 1e-6);
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
    ok = ok && measure_bf16(&g, s, c);
    if (ok && !measure_fp8(&g, s, c)) {
        CK(cudaGetLastError());
        c->fp8_flops = 2.0 * c->bf16_flops, c->fp8_burst_flops = 2.0 * c->bf16_burst_flops, c->fp8_estimated = 1;
        snprintf(c->fp8_note, sizeof c->fp8_note, "estimated as 2x BF16: cublasLt FP8 GEMM failed (see above)");
        fprintf(stderr, "moe_ep bench: %s\n", c->fp8_note);
    }
    void *bufs[] = {g.a, g.b, g.c, g.workspace};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) CK(cudaFree(bufs[i]));
    return ok;
}

/* ---- EP8 slice: data -------------------------------------------------------------------- */

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

double bench_wire_bytes_per_elem(moe_ep_wire_t w)
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
                   rows * H * act_bytes_per_elem(p) + rows * H * bench_wire_bytes_per_elem(w);
    double flops = 2.0 * rows * 3.0 * H * I;
    bytes *= sl->R, flops *= sl->R; /* R ranks: R times the slice's experts, tokens and rows */
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

#ifdef MOE_EP_MEGA_TRACE
/* Builds with -DMOE_EP_MEGA_TRACE=ON: one more mega forward (L2 flushed
 * first) with its item timeline recorded, summed per item kind on stderr:
 * items, the span from the first start to the last end (us from the
 * kernel's first item), the blocks' busy time, their wait for inputs and
 * (staged items) for their rows' bulk copies. */
static const char *g_trace_path_name = "?"; /* the path of the cell being timed */

static void trace_dump(const char *label, const moe_ep_mega_trace_rec_t *r, uint32_t m)
{
    const char *path = getenv("MOE_EP_MEGA_TRACE_DUMP"); /* appends "label block kind t0 tw stall t1" lines */
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    for (uint32_t i = 0; i < m; i++)
        fprintf(f, "%s %u %u %llu %llu %llu %llu\n", label, r[i].block, r[i].kind, r[i].t0, r[i].tw, r[i].stall,
                r[i].t1);
    fclose(f);
}

static void trace_mega_forward(run_ctx_t *c, cudaStream_t s, const char *label)
{
    static const char *kinds[MOE_EP_MEGA_ITEM_KINDS] = {"send", "count", "dispatch", "gemm1", "gemm2",
                                                               "rows", "combine", "start", "exit", "fold"};
    enum { CAP = 1 << 20 };
    moe_ep_mega_trace_rec_t *r = (moe_ep_mega_trace_rec_t *)malloc(CAP * sizeof *r);
    uint32_t n = 0;
    cudaEvent_t ev[2] = {NULL, NULL};
    float event_ms = 0;
    /* the forward between two events as the bench times it: two flushes first, so that the host has
     * enqueued the forward's launch before the GPU reaches the first event (as in the timed rounds) */
    int ok = r && CK(cudaEventCreate(&ev[0])) && CK(cudaEventCreate(&ev[1])) &&
             slice_layer_ok(moe_ep_mega_trace_start(CAP), "moe_ep_mega_trace_start") && slice_flush_step(c, 0, s) &&
             slice_flush_step(c, 0, s) &&
             CK(cudaEventRecord(ev[0], s)) && slice_forward_step(c, 0, s) && CK(cudaEventRecord(ev[1], s)) &&
             CK(cudaStreamSynchronize(s)) && CK(cudaEventElapsedTime(&event_ms, ev[0], ev[1])) &&
             slice_layer_ok(moe_ep_mega_trace_fetch(r, CAP, &n), "trace fetch");
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (ok && n > 0) {
        uint32_t m = n < CAP ? n : CAP;
        unsigned long long t_first = r[0].t0, t_last = r[0].t1;
        for (uint32_t i = 0; i < m; i++) {
            t_first = r[i].t0 < t_first ? r[i].t0 : t_first;
            t_last = r[i].t1 > t_last ? r[i].t1 : t_last;
        }
        trace_dump(label, r, m);
        fprintf(stderr,
                "  mega timeline: %u records, %.1f us from the first block's start to the last exit's end; "
                "the forward between events %.1f us\n",
                n, (t_last - t_first) / 1e3, 1e3 * event_ms);
        for (int k = 0; k < MOE_EP_MEGA_ITEM_KINDS; k++) {
            unsigned long long lo = ~0ull, hi = 0;
            double busy = 0, wait = 0, stall = 0;
            uint32_t count = 0;
            for (uint32_t i = 0; i < m; i++) {
                if ((int)r[i].kind != k) continue;
                count++, busy += (double)(r[i].t1 - r[i].t0), wait += (double)(r[i].tw - r[i].t0);
                stall += (double)r[i].stall;
                lo = r[i].t0 < lo ? r[i].t0 : lo, hi = r[i].t1 > hi ? r[i].t1 : hi;
            }
            if (count)
                fprintf(stderr,
                        "    %-8s %7u items, from %9.1f to %9.1f us, busy %10.1f block-us (waiting %10.1f,"
                        " on staged rows %10.1f)\n",
                        kinds[k], count, (lo - t_first) / 1e3, (hi - t_first) / 1e3, busy / 1e3, wait / 1e3,
                        stall / 1e3);
        }
    }
    free(r);
}
#endif

/* Warm-up rounds for one T's cells: o->warmup, or more, so that they last
 * o->sustain_ms (one untimed probe round gives a round's time): a cell is then
 * timed in the steady state its own load settles in (FLOP-bound cells: the
 * power cap the sustained ceilings were measured at; memory-bound ones draw
 * less and keep higher clocks), not partly at the clocks of a GPU that idled
 * while the layers were built. The default, 1500 ms, lies past the power
 * controller's dip: 0.6-0.9 s into a sustained load after an idle gap, as the
 * draw first meets the 700 W cap, the SM clock dips (nvidia-smi minima
 * 1020-1290 MHz) for ~200 ms, then settles (kernel lab,
 * `dev/lab_claimed.sh ssssss`: the same kernel timed there 1.14-1.35x the others).
 * With 200 ms a path's first cells were timed there or not by how long the
 * cells before them ran (bf16 pro T = 512: 1847 us in one table, 1638 with
 * 1500 ms, 1572-1595 alone with either).
 * -1 on a failed probe. */
static int sustained_warmup(const bench_opts_t *o, void *const *ctx, int m, cudaStream_t s)
{
    double us[MOE_EP_BACKEND_COUNT_], round_us = 0;
    if (o->sustain_ms <= 0) return o->warmup;
    if (!slice_time_interleaved(ctx, m, slice_flush_step, slice_forward_step, 0, 1, s, us)) return -1;
    for (int k = 0; k < m; k++) round_us += us[k];
    const double want = 1e3 * o->sustain_ms / (round_us > 1.0 ? round_us : 1.0);
    return want > o->warmup ? (want < 1e6 ? (int)want + 1 : 1000000) : o->warmup;
}

/* The forwards of every backend alive at one T, timed in turn round by round
 * (slice_time_interleaved); then the split backend's expert stage alone. */
static void time_cells(const bench_opts_t *o, moe_ep_group_t *g, run_ctx_t *c, const int *ok, cudaStream_t s,
                       cell_t *cells, int n)
{
    void *ctx[MOE_EP_BACKEND_COUNT_];
    int idx[MOE_EP_BACKEND_COUNT_], m = 0;
    double us[MOE_EP_BACKEND_COUNT_];
    for (int b = 0; b < n; b++)
        if (ok[b]) idx[m] = b, ctx[m++] = &c[b];
    if (m == 0) return;
    const int warmup = sustained_warmup(o, ctx, m, s);
    int timed = warmup >= 0 && slice_time_interleaved(ctx, m, slice_flush_step, slice_forward_step, warmup, o->iters, s, us);
    for (int k = 0; k < m; k++) {
        int b = idx[k];
        cells[b].fwd_us = us[k];
        cells[b].fwd_state = timed && slice_no_async_error(g[b]) ? CELL_OK : CELL_ERR;
#ifdef MOE_EP_MEGA_TRACE
        if (cells[b].fwd_state == CELL_OK && o->backends[b] == MOE_EP_BACKEND_MEGA) {
            char label[96];
            snprintf(label, sizeof label, "%s/%s/T%d", g_trace_path_name, c[b].sl->g->name, c[b].T);
            trace_mega_forward(&c[b], s, label);
        }
#endif
        if (o->backends[b] != MOE_EP_BACKEND_SPLIT) continue; /* n/a: the hook is the split backend's */
        int st = slice_time_steps(&c[b], slice_forward_flush_step, slice_stage_step, o->warmup, o->iters, s,
                                  &cells[b].stage_us);
        cells[b].stage_state = st && slice_no_async_error(g[b]) ? CELL_OK : CELL_ERR;
    }
}

/* cells[t * stride + b] for every T and backend of one path. Every
 * backend's layer is alive at once and, at each T, the backends' forwards are
 * timed in turn, one forward each per round: a drift of the GPU's clocks over
 * the run (5-7 % seen between runs) then shows in every column alike, so
 * their ratio at a T compares like with like. Where the layers do not fit
 * the GPU together (out of memory: MXFP8 pro's emulated EP8 group on an
 * 80 GB H100), each backend is timed alone, one after the other. */
static void bench_path(const bench_opts_t *o, const slice_t *sl, const ceilings_t *ce, moe_ep_path_t p,
                       cudaStream_t s, cell_t *cells, int stride)
{
    moe_ep_group_t g[MOE_EP_BACKEND_COUNT_] = {NULL};
    moe_ep_layer_t l[MOE_EP_BACKEND_COUNT_] = {NULL};
    int ok[MOE_EP_BACKEND_COUNT_], oom = 0;
    for (int b = 0; b < o->nback; b++) {
        ok[b] = slice_layer_ok(moe_ep_group_create_emulated(sl->R, 0, &g[b]), "moe_ep_group_create_emulated");
        moe_ep_status_t st = ok[b] ? slice_create_layer(sl, p, o->wire, o->backends[b], g[b], s, &l[b]) : MOE_EP_SUCCESS;
        oom |= st == MOE_EP_ERROR_OUT_OF_MEMORY;
        ok[b] = ok[b] && slice_layer_ok(st, "layer create/load");
    }
    if (oom && o->nback > 1) { /* the backends' layers do not fit the GPU together: each alone, unpaired */
        for (int b = 0; b < o->nback; b++) {
            if (l[b]) slice_layer_ok(moe_ep_layer_destroy(l[b]), "moe_ep_layer_destroy");
            if (g[b]) slice_layer_ok(moe_ep_group_destroy(g[b]), "moe_ep_group_destroy");
        }
        fprintf(stderr, "moe_ep bench: %s's %d layers do not fit the GPU together: each backend timed alone "
                        "(unpaired: their ratio is good to a few percent)\n", moe_ep_path_name(p), o->nback);
        for (int b = 0; b < o->nback; b++) {
            bench_opts_t one = *o;
            one.nback = 1, one.backends[0] = o->backends[b];
            bench_path(&one, sl, ce, p, s, cells + b, stride);
        }
        return;
    }
    for (int t = 0; t < o->ntok; t++) {
        int T = o->tokens[t];
        run_ctx_t c[MOE_EP_BACKEND_COUNT_];
        cell_t *row = &cells[t * stride];
        for (int b = 0; b < o->nback; b++) {
            row[b].floor_us = floor_us(sl, ce, p, o->wire, T);
            row[b].fwd_state = row[b].stage_state = ok[b] ? CELL_NA : CELL_ERR;
            c[b] = (run_ctx_t){sl, l[b], T};
        }
#ifdef MOE_EP_MEGA_TRACE
        g_trace_path_name = moe_ep_path_name(p);
#endif
        time_cells(o, g, c, ok, s, row, o->nback);
        for (int b = 0; b < o->nback; b++)
            if (ok[b])
                fprintf(stderr, "%s T=%d %s/%s: forward %.1f us, expert stage %.1f us, floor %.1f us\n",
                        sl->g->name, T, moe_ep_path_name(p), moe_ep_backend_name(o->backends[b]),
                        row[b].fwd_state == CELL_OK ? row[b].fwd_us : NAN,
                        row[b].stage_state == CELL_OK ? row[b].stage_us : NAN, row[b].floor_us);
    }
    for (int b = 0; b < o->nback; b++) {
        if (l[b]) slice_layer_ok(moe_ep_layer_destroy(l[b]), "moe_ep_layer_destroy");
        if (g[b]) slice_layer_ok(moe_ep_group_destroy(g[b]), "moe_ep_group_destroy");
    }
}

int bench_max_tokens(const bench_opts_t *o)
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
    int made = slice_make(&sl, g, bench_max_tokens(o), o->ranks);
    sl.fp8_fast_accum = o->fp8_fast_accum, sl.tile_rows = o->tile_rows, sl.flush_kind = o->flush_kind;
    if (made)
        for (int p = 0; p < o->npath; p++)
            bench_path(o, &sl, ce, o->paths[p], s, &cells[p * o->nback], o->npath * o->nback);
    slice_free(&sl);
}

/* ---- report ---------------------------------------------------------------------------- */

typedef struct {
    bench_stamp_t st;
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

int bench_stamp(bench_stamp_t *st, int device)
{
    struct cudaDeviceProp prop;
    memset(st, 0, sizeof *st);
    if (!CK(cudaGetDeviceProperties(&prop, device))) return 0;
    snprintf(st->device, sizeof st->device, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(st->date, sizeof st->date, "%Y-%m-%d %H:%M UTC", &tm);
    get_commit(st->commit, sizeof st->commit);
    return 1;
}

static void print_header(FILE *f, const header_t *h, const bench_opts_t *o)
{
    const ceilings_t *c = &h->ceil;
    fprintf(f, "# moe_ep bench\n\n");
    fprintf(f, "- device: %s\n- date: %s\n- commit: %s\n", h->st.device, h->st.date, h->st.commit);
    fprintf(f, "- ceilings sustained (the floors use these): median of %d after %.0f ms of the same step back to back,"
               " the power-capped state FLOP-bound cells are timed in\n", SUSTAIN_ITERS, SUSTAIN_MS);
    fprintf(f, "- copy bandwidth (D2D memcpy of 2 GiB, read + write, sustained): %.2f TB/s\n", c->copy_bps / 1e12);
    fprintf(f, "- BF16 GEMM 8192^3 (cublasGemmEx, fp32 compute, sustained): %.0f TFLOP/s\n", c->bf16_flops / 1e12);
    fprintf(f, "- FP8 E4M3 GEMM 8192^3 (cublasLt TN, fp32 compute, bf16 out, sustained): %.0f TFLOP/s%s%s\n",
            c->fp8_flops / 1e12, c->fp8_estimated ? " -- " : "", c->fp8_estimated ? c->fp8_note : "");
    fprintf(f, "- the same in a burst (median of 10 after 3, the GPU idle before; not used): copy %.2f TB/s,"
               " BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s\n",
            c->copy_burst_bps / 1e12, c->bf16_burst_flops / 1e12, c->fp8_burst_flops / 1e12);
    if (o->fp8_fast_accum) fprintf(f, "- fp8_fast_accum: on (fp8_block GEMMs on the register tile's QGMMA instances)\n");
    if (o->tile_rows) fprintf(f, "- knobs: gemm_tile_rows %d on every layer (--tile-rows; not the heuristic's)\n", o->tile_rows);
    if (o->ranks == 1)
        fprintf(f, "- EP8 slice on one GPU: E/8 experts, top-K, world size 1, T tokens (T*K rows), uniform routing;");
    else
        fprintf(f, "- emulated group of %d ranks on one GPU, E/8 experts each (the slice's weights on every rank),"
                   " T tokens per rank routed uniformly over all %d x E/8 experts; floor = %d x the slice's;",
                o->ranks, o->ranks, o->ranks);
    fprintf(f, " wire %s; median of %d iterations after %d warm-up rounds or more, lasting at least %d ms;"
               " L2 flushed before each timed call (%s);"
               " inputs rotate over >= 2 sets; at each T a path's backends' forwards are timed in turn (one each per round, the order reversed every other round)\n",
            moe_ep_wire_name(o->wire), o->iters, o->warmup, o->sustain_ms,
            o->flush_kind == SLICE_FLUSH_MEMSET ? "a memset of 2 x L2 bytes, its dirty lines written back in the call"
            : o->flush_kind == SLICE_FLUSH_NONE ? "not at all (--flush none)"
                                                : "reads of 2 x L2 bytes");
    fprintf(f, "- floor = max(bytes / copy bandwidth, FLOPs / tensor rate); FLOPs = 2*rows*3*H*I; bytes ="
               " weights of the experts hit (path format) + x and out (bf16) + rows*H (activation format)"
               " + rows*H (wire format); FP8 rate for mxfp8, w4a8, fp8_block, BF16 rate for bf16, nvfp4\n");
    fprintf(f, "- stage = expert stage alone (moe_ep_split_expert_stage), fwd = whole moe_ep_layer_forward;"
               " times in us, ratio = stage / floor, fwd ratio = fwd / floor (the issues' mega target)\n\n");
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
            fprintf(f, " %s stage | %s floor | %s ratio | %s fwd | %s fwd ratio |", n, n, n, n, n);
        }
    fprintf(f, "\n|---|---:|");
    for (int i = 0; i < o->npath * o->nback; i++) fprintf(f, "---:|---:|---:|---:|---:|");
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
                print_cell_value(f, c->fwd_state, " %.2f |", c->fwd_us / c->floor_us);
            }
            fprintf(f, "\n");
        }
}

int bench_emit(const char *path, void (*print)(FILE *, const void *), const void *ctx)
{
    print(stdout, ctx);
    fflush(stdout);
    if (!path) return 0;
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "moe_ep bench: cannot write %s\n", path), 1;
    print(f, ctx);
    return fclose(f) == 0 ? 0 : 1;
}

typedef struct {
    const bench_opts_t *o;
    const header_t *h;
    const cell_t *cells;
} report_t;

static void print_report(FILE *f, const void *ctx)
{
    const report_t *r = ctx;
    print_header(f, r->h, r->o);
    print_table(f, r->o, r->cells);
}

static int measure_ceilings(cudaStream_t s, ceilings_t *c)
{
    fprintf(stderr, "measuring ceilings (copy 2 GiB, GEMM 8192^3 BF16 and FP8)\n");
    if (!measure_copy(s, c) || !measure_gemms(s, c)) return 0;
    fprintf(stderr, "sustained: copy %.2f TB/s, BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s%s; burst: %.2f, %.0f, %.0f\n",
            c->copy_bps / 1e12, c->bf16_flops / 1e12, c->fp8_flops / 1e12, c->fp8_estimated ? " (estimated)" : "",
            c->copy_burst_bps / 1e12, c->bf16_burst_flops / 1e12, c->fp8_burst_flops / 1e12);
    return 1;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts_t o;
    int r = parse_bench(argc, argv, &o);
    if (r) return r == 1 ? 0 : 2;
    if (o.nccl) return bench_nccl(&o);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return fprintf(stderr, "moe_ep bench: no usable GPU: %s\n", e ? cudaGetErrorString(e) : "no device"), 2;
    header_t h;
    memset(&h, 0, sizeof h);
    cudaStream_t s = NULL;
    if (!CK(cudaSetDevice(0)) || !bench_stamp(&h.st, 0) || !CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)))
        return 1;
    fprintf(stderr, "device %s\n", h.st.device);
    if (!measure_ceilings(s, &h.ceil)) return CK(cudaStreamDestroy(s)), 1;
    size_t per_geo = (size_t)o.ntok * o.npath * o.nback;
    cell_t *cells = calloc(per_geo * (size_t)o.ngeo, sizeof *cells);
    if (!cells) return 1;
    for (int gi = 0; gi < o.ngeo; gi++) bench_geometry(&o, o.geos[gi], &h.ceil, s, cells + gi * per_geo);
    report_t rep = {&o, &h, cells};
    r = bench_emit(o.out, print_report, &rep);
    free(cells);
    CK(cudaStreamDestroy(s));
    return r;
}

#endif /* MOE_EP_HAVE_CUDA */
