#include "run.h"

#include "slice.h"
#include "synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOAD_CHUNK 8 /* experts converted per load call */
#define TOKEN_STREAM (1ull << 40)

static float bf16f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cpu_threads(int threads)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return threads > 0 ? threads : (n > 0 ? (int)n : 1);
}

static moe_ep_status_t load_weights(moe_ep_layer_t layer, const run_opts_t *o)
{
    const geometry_t *g = o->geometry;
    int64_t n13 = 2 * (int64_t)g->intermediate * g->hidden, n2 = (int64_t)g->hidden * g->intermediate;
    uint16_t *w13 = malloc(sizeof(uint16_t) * (size_t)(n13 * LOAD_CHUNK));
    uint16_t *w2 = malloc(sizeof(uint16_t) * (size_t)(n2 * LOAD_CHUNK));
    moe_ep_status_t st = (w13 && w2) ? MOE_EP_SUCCESS : MOE_EP_ERROR_OUT_OF_MEMORY;
    for (int e0 = 0; st == MOE_EP_SUCCESS && e0 < g->num_experts; e0 += LOAD_CHUNK) {
        int n = g->num_experts - e0 < LOAD_CHUNK ? g->num_experts - e0 : LOAD_CHUNK;
        for (int e = 0; e < n; e++)
            synth_expert(w13 + e * n13, w2 + e * n2, e0 + e, g->hidden, g->intermediate, o->seed,
                         cpu_threads(o->threads));
        moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
        w.first_expert = e0, w.num_experts = n, w.w13 = w13, w.w2 = w2;
        st = moe_ep_layer_load_experts(layer, &w, NULL);
    }
    free(w13);
    free(w2);
    return st;
}

typedef struct {
    int R, T, K, H;
    uint16_t *x, *out; /* [R][T][H] */
    int32_t *ids;      /* [R][T][K] */
    float *weights;
    const uint16_t **xp;
    const int32_t **idp;
    const float **wp;
    uint16_t **op;
    int32_t *nt;
} batch_t;

static int batch_alloc(batch_t *b, const run_opts_t *o)
{
    const geometry_t *g = o->geometry;
    memset(b, 0, sizeof *b);
    b->R = o->ranks, b->T = o->tokens_per_rank, b->K = g->top_k, b->H = g->hidden;
    size_t rt = (size_t)b->R * b->T;
    b->x = malloc(sizeof(uint16_t) * (rt * b->H + 1));
    b->out = malloc(sizeof(uint16_t) * (rt * b->H + 1));
    b->ids = malloc(sizeof(int32_t) * (rt * b->K + 1));
    b->weights = malloc(sizeof(float) * (rt * b->K + 1));
    b->xp = malloc(sizeof(void *) * b->R);
    b->idp = malloc(sizeof(void *) * b->R);
    b->wp = malloc(sizeof(void *) * b->R);
    b->op = malloc(sizeof(void *) * b->R);
    b->nt = malloc(sizeof(int32_t) * b->R);
    if (!b->x || !b->out || !b->ids || !b->weights || !b->xp || !b->idp || !b->wp || !b->op || !b->nt)
        return -1;
    for (int r = 0; r < b->R; r++) {
        size_t tok = (size_t)r * b->T;
        synth_bf16(b->x + tok * b->H, (int64_t)b->T * b->H, 1.0f, o->seed, TOKEN_STREAM + (uint64_t)r);
        synth_routing(b->ids + tok * b->K, b->weights + tok * b->K, b->T, b->K, g->num_experts, o->seed,
                      TOKEN_STREAM + 0x10000 + (uint64_t)r);
        b->xp[r] = b->x + tok * b->H, b->op[r] = b->out + tok * b->H;
        b->idp[r] = b->ids + tok * b->K, b->wp[r] = b->weights + tok * b->K;
        b->nt[r] = b->T;
    }
    memset(b->out, 0xFF, sizeof(uint16_t) * rt * b->H); /* poison: NaN */
    return 0;
}

static void batch_free(batch_t *b)
{
    free(b->x), free(b->out), free(b->ids), free(b->weights);
    free(b->xp), free(b->idp), free(b->wp), free(b->op), free(b->nt);
}

/* Unquantized float64 layer for token t (global index) using the bf16 checkpoint. */
static void float64_token(const run_opts_t *o, const batch_t *b, int64_t t, uint16_t *w13,
                          uint16_t *w2, double *h, double *y)
{
    const geometry_t *g = o->geometry;
    int64_t H = g->hidden, I = g->intermediate;
    double c = g->swiglu_limit;
    for (int64_t j = 0; j < H; j++) y[j] = 0;
    for (int k = 0; k < b->K; k++) {
        int e = b->ids[t * b->K + k];
        if (e < 0) continue;
        synth_expert(w13, w2, e, g->hidden, g->intermediate, o->seed, cpu_threads(o->threads));
        for (int64_t j = 0; j < 2 * I; j++) {
            double acc = 0;
            for (int64_t d = 0; d < H; d++) acc += (double)bf16f(w13[j * H + d]) * bf16f(b->x[t * H + d]);
            h[j] = acc;
        }
        for (int64_t i = 0; i < I; i++) {
            double gv = h[i], uv = h[I + i];
            if (c > 0) gv = gv < c ? gv : c, uv = uv < -c ? -c : (uv > c ? c : uv);
            h[i] = gv / (1.0 + exp(-gv)) * uv;
        }
        for (int64_t j = 0; j < H; j++) {
            double acc = 0;
            for (int64_t d = 0; d < I; d++) acc += (double)bf16f(w2[j * I + d]) * h[d];
            y[j] += b->weights[t * b->K + k] * acc;
        }
    }
}

static double check_against_float64(const run_opts_t *o, const batch_t *b)
{
    const geometry_t *g = o->geometry;
    int64_t H = g->hidden, I = g->intermediate, total = (int64_t)b->R * b->T;
    int n = o->check_tokens < total ? o->check_tokens : (int)total;
    uint16_t *w13 = malloc(sizeof(uint16_t) * (size_t)(2 * I * H)), *w2 = malloc(sizeof(uint16_t) * (size_t)(H * I));
    double *h = malloc(sizeof(double) * (size_t)(2 * I)), *y = malloc(sizeof(double) * (size_t)H);
    double num = 0, den = 0;
    for (int s = 0; w13 && w2 && h && y && s < n; s++) {
        int64_t t = total * s / n; /* spread over the ranks */
        float64_token(o, b, t, w13, w2, h, y);
        for (int64_t j = 0; j < H; j++) {
            double d = bf16f(b->out[t * H + j]) - y[j];
            num += d * d, den += y[j] * y[j];
        }
    }
    free(w13), free(w2), free(h), free(y);
    return den > 0 ? sqrt(num / den) : NAN;
}

static int count_unwritten(const batch_t *b)
{
    int64_t n = (int64_t)b->R * b->T * b->H, bad = 0;
    for (int64_t i = 0; i < n; i++) bad += isnan(bf16f(b->out[i]));
    return (int)bad;
}

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>

int run_gpu_available(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* The batch on the GPU: one allocation per tensor, ranks back to back. */
static moe_ep_status_t forward_on_gpu(moe_ep_layer_t layer, moe_ep_group_t group, batch_t *b, double *seconds)
{
    size_t rt = (size_t)b->R * b->T, nx = rt * b->H * 2, nk = rt * b->K * 4;
    uint16_t *dx = NULL, *dout = NULL;
    int32_t *dids = NULL;
    float *dw = NULL;
    moe_ep_status_t st = MOE_EP_ERROR_CUDA;
    const uint16_t *x[64];
    const int32_t *ids[64];
    const float *w[64];
    uint16_t *out[64];
    if (b->R > 64 || cudaMalloc((void **)&dx, nx + 16) || cudaMalloc((void **)&dout, nx + 16) ||
        cudaMalloc((void **)&dids, nk + 16) || cudaMalloc((void **)&dw, nk + 16) ||
        cudaMemcpy(dx, b->x, nx, cudaMemcpyHostToDevice) || cudaMemcpy(dids, b->ids, nk, cudaMemcpyHostToDevice) ||
        cudaMemcpy(dw, b->weights, nk, cudaMemcpyHostToDevice) || cudaMemset(dout, 0xFF, nx + 16))
        goto done;
    for (int r = 0; r < b->R; r++) {
        size_t tok = (size_t)r * b->T;
        x[r] = dx + tok * b->H, out[r] = dout + tok * b->H, ids[r] = dids + tok * b->K, w[r] = dw + tok * b->K;
    }
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = b->nt, a.x = x, a.topk_ids = ids, a.topk_weights = w, a.out = out;
    st = moe_ep_layer_forward(layer, &a, NULL); /* warm-up: module load, first touch */
    for (int i = 0; st == MOE_EP_SUCCESS && i < 2; i++) {
        double t0 = wall_seconds();
        st = moe_ep_layer_forward(layer, &a, NULL);
        if (st == MOE_EP_SUCCESS && cudaDeviceSynchronize() != cudaSuccess) st = MOE_EP_ERROR_CUDA;
        *seconds = wall_seconds() - t0;
    }
    moe_ep_status_t dev = MOE_EP_SUCCESS;
    if (st == MOE_EP_SUCCESS) moe_ep_group_get_async_error(group, &dev);
    if (st == MOE_EP_SUCCESS) st = dev;
    if (st == MOE_EP_SUCCESS && cudaMemcpy(b->out, dout, nx, cudaMemcpyDeviceToHost) != cudaSuccess)
        st = MOE_EP_ERROR_CUDA;
done:
    cudaFree(dx), cudaFree(dout), cudaFree(dids), cudaFree(dw);
    return st;
}
#else
int run_gpu_available(void) { return 0; }

static moe_ep_status_t forward_on_gpu(moe_ep_layer_t layer, moe_ep_group_t group, batch_t *b, double *seconds)
{
    (void)layer, (void)group, (void)b, (void)seconds;
    return MOE_EP_ERROR_UNSUPPORTED;
}
#endif

/* NVFP4 activation scales for a GPU layer (calibration runs on the reference
 * backend only): fc1 from amax(x); fc2 from the SwiGLU bound c^2 (|silu(min(g, c))|
 * and |clamp(u)| are at most c), or an assumed amax of 16 without a limit. */
static void gpu_nvfp4_scales(const run_opts_t *o, const batch_t *b, moe_ep_layer_config_t *c)
{
    float amax = 0.0f, lim = o->geometry->swiglu_limit;
    for (size_t i = 0; i < (size_t)b->R * b->T * b->H; i++) amax = fmaxf(amax, fabsf(bf16f(b->x[i])));
    c->fc1_input_scale = moe_ep_nvfp4_global_scale(amax);
    c->fc2_input_scale = moe_ep_nvfp4_global_scale(lim > 0 ? lim * lim : 16.0f);
}

moe_ep_status_t run_layer(const run_opts_t *o, run_result_t *r)
{
    const geometry_t *g = o->geometry;
    moe_ep_group_t group = NULL;
    moe_ep_layer_t layer = NULL;
    batch_t b;
    memset(&b, 0, sizeof b);
    memset(r, 0, sizeof *r);
    int gpu = o->backend != MOE_EP_BACKEND_REFERENCE;
    moe_ep_status_t st = moe_ep_group_create_emulated(o->ranks, gpu ? o->device : -1, &group);
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = g->num_experts, c.top_k = g->top_k, c.hidden = g->hidden;
    c.intermediate = g->intermediate, c.max_tokens_per_rank = o->tokens_per_rank > 0 ? o->tokens_per_rank : 1;
    c.path = o->path, c.wire = o->wire, c.backend = o->backend, c.swiglu_limit = g->swiglu_limit;
    c.num_threads = o->threads;
    if (!st && batch_alloc(&b, o) != 0) st = MOE_EP_ERROR_OUT_OF_MEMORY;
    if (!st && gpu && o->path == MOE_EP_PATH_NVFP4) gpu_nvfp4_scales(o, &b, &c);
    r->fc1_scale = c.fc1_input_scale, r->fc2_scale = c.fc2_input_scale;
    if (!st) st = moe_ep_layer_create(group, &c, &layer);
    double t0 = wall_seconds();
    if (!st) st = load_weights(layer, o);
    r->load_s = wall_seconds() - t0;
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = b.nt, a.x = b.xp, a.topk_ids = b.idp, a.topk_weights = b.wp, a.out = b.op;
    if (!st && !gpu && o->path == MOE_EP_PATH_NVFP4)
        st = moe_ep_layer_calibrate_nvfp4(layer, &a, &r->fc1_scale, &r->fc2_scale);
    t0 = wall_seconds();
    if (!st) st = gpu ? forward_on_gpu(layer, group, &b, &r->forward_s) : moe_ep_layer_forward(layer, &a, NULL);
    if (!gpu) r->forward_s = wall_seconds() - t0;
    if (!st && count_unwritten(&b) > 0) st = MOE_EP_ERROR_INTERNAL;
    r->rel_l2 = (!st && o->check_tokens > 0) ? check_against_float64(o, &b) : NAN;
    if (st) fprintf(stderr, "moe_ep: %s\n", moe_ep_last_error());
    batch_free(&b);
    moe_ep_layer_destroy(layer);
    moe_ep_group_destroy(group);
    return st;
}

/* ---- command line ------------------------------------------------------------ */

static int parse_enum(const char *s, const char *(*name)(int), int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(s, name(i)) == 0) return i;
    return -1;
}

static const char *path_name(int i) { return moe_ep_path_name((moe_ep_path_t)i); }
static const char *wire_name(int i) { return moe_ep_wire_name((moe_ep_wire_t)i); }
static const char *backend_name(int i) { return moe_ep_backend_name((moe_ep_backend_t)i); }

static void usage_run(const char *cmd)
{
    printf("usage: moe_ep %s [--geometry NAME] [--ranks R] [--tokens T] [--path P] [--wire W]\n"
           "                  [--backend B] [--threads N] [--check N] [--seed S]\n"
           "  path: bf16 mxfp8 nvfp4 w4a8 fp8_block   wire: bf16 mxfp8 fp4\n"
           "  backend: reference split mega (default: split when a GPU is usable, else reference)\n"
           "geometries:\n", cmd);
    geometry_list();
}

/* A seed: a whole number (decimal, 0x hex or 0 octal), all of v. */
static int parse_seed(const char *v, uint64_t *seed)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (end == v || *end || errno || *v == '-') return -1;
    *seed = x;
    return 0;
}

/* Parses the options shared by run and accuracy; returns 0, or 1 to stop (help/error). */
static int parse_opts(int argc, char **argv, run_opts_t *o, const char *cmd)
{
    for (int i = 0; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "-h") == 0 || strcmp(k, "--help") == 0) return usage_run(cmd), 1;
        if (!v) return fprintf(stderr, "moe_ep %s: %s needs a value\n", cmd, k), 1;
        i++;
        int bad = 0;
        if (strcmp(k, "--geometry") == 0) o->geometry = geometry_find(v);
        else if (strcmp(k, "--ranks") == 0) bad = slice_parse_int(v, 1, 1024, &o->ranks);
        else if (strcmp(k, "--tokens") == 0) bad = slice_parse_int(v, 1, 1 << 20, &o->tokens_per_rank);
        else if (strcmp(k, "--threads") == 0) bad = slice_parse_int(v, 0, 4096, &o->threads);
        else if (strcmp(k, "--check") == 0) bad = slice_parse_int(v, 0, 1 << 20, &o->check_tokens);
        else if (strcmp(k, "--seed") == 0) bad = parse_seed(v, &o->seed);
        else if (strcmp(k, "--path") == 0) o->path = (moe_ep_path_t)parse_enum(v, path_name, MOE_EP_PATH_COUNT_);
        else if (strcmp(k, "--wire") == 0) o->wire = (moe_ep_wire_t)parse_enum(v, wire_name, MOE_EP_WIRE_COUNT_);
        else if (strcmp(k, "--backend") == 0) o->backend = (moe_ep_backend_t)parse_enum(v, backend_name, MOE_EP_BACKEND_COUNT_);
        else return fprintf(stderr, "moe_ep %s: unknown option %s\n", cmd, k), 1;
        if (bad) return fprintf(stderr, "moe_ep %s: bad value %s for %s\n", cmd, v, k), 1;
        if (!o->geometry) return fprintf(stderr, "moe_ep %s: unknown geometry %s\n", cmd, v), 1;
        if ((int)o->path < 0 || (int)o->wire < 0 || (int)o->backend < 0)
            return fprintf(stderr, "moe_ep %s: unknown value %s for %s\n", cmd, v, k), 1;
    }
    return 0;
}

static run_opts_t default_opts(void)
{
    run_opts_t o;
    memset(&o, 0, sizeof o);
    o.geometry = geometry_find("ds-v4-flash");
    o.ranks = 8, o.tokens_per_rank = 64, o.check_tokens = 8, o.device = -1, o.seed = 1;
    o.path = MOE_EP_PATH_MXFP8, o.wire = MOE_EP_WIRE_BF16;
    o.backend = run_gpu_available() ? MOE_EP_BACKEND_SPLIT : MOE_EP_BACKEND_REFERENCE;
    o.device = 0; /* used by the GPU backends */
    return o;
}

int cmd_run(int argc, char **argv)
{
    run_opts_t o = default_opts();
    if (parse_opts(argc, argv, &o, "run")) return 2;
    const geometry_t *g = o.geometry;
    printf("moe_ep run: %s (H %d, I %d, E %d, top-%d), EP%d emulated, %d tokens per rank\n",
           g->name, g->hidden, g->intermediate, g->num_experts, g->top_k, o.ranks, o.tokens_per_rank);
    printf("  backend %s (%s), path %s, combine wire %s\n", moe_ep_backend_name(o.backend),
           o.backend == MOE_EP_BACKEND_REFERENCE ? "CPU" : "GPU 0", moe_ep_path_name(o.path),
           moe_ep_wire_name(o.wire));
    run_result_t r;
    moe_ep_status_t st = run_layer(&o, &r);
    if (st != MOE_EP_SUCCESS) {
        printf("FAILED: %s\n", moe_ep_status_string(st));
        return 1;
    }
    if (o.path == MOE_EP_PATH_NVFP4)
        printf("  nvfp4 activation scales (%s): fc1 %g, fc2 %g\n",
               o.backend == MOE_EP_BACKEND_REFERENCE ? "calibrated" : "amax(x) and the SwiGLU bound",
               (double)r.fc1_scale, (double)r.fc2_scale);
    printf("  weights generated and loaded in %.2f s\n", r.load_s);
    printf("  forward (all %d ranks, %d rows): %.6f s%s\n", o.ranks, o.ranks * o.tokens_per_rank * g->top_k,
           r.forward_s, o.backend == MOE_EP_BACKEND_REFERENCE ? "" : " (after one warm-up, host clock, synchronized)");
    printf("  relative L2 error vs unquantized float64 layer (%d sampled tokens): %.3e\n",
           o.check_tokens, r.rel_l2);
    return 0;
}

int cmd_accuracy(int argc, char **argv)
{
    run_opts_t o = default_opts();
    o.check_tokens = 16;
    if (parse_opts(argc, argv, &o, "accuracy")) return 2;
    printf("accuracy: %s, EP%d, %d tokens per rank, %d tokens checked against float64\n\n",
           o.geometry->name, o.ranks, o.tokens_per_rank, o.check_tokens);
    printf("| path | wire bf16 | wire mxfp8 | wire fp4 |\n|---|---|---|---|\n");
    for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
        printf("| %s |", moe_ep_path_name((moe_ep_path_t)p));
        for (int w = 0; w < MOE_EP_WIRE_COUNT_; w++) {
            o.path = (moe_ep_path_t)p, o.wire = (moe_ep_wire_t)w;
            run_result_t r;
            if (run_layer(&o, &r) != MOE_EP_SUCCESS) return 1;
            printf(" %.2e |", r.rel_l2);
            fflush(stdout);
        }
        printf("\n");
    }
    return 0;
}
