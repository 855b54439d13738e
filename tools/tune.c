/* `moe_ep tune`: for each path and T, times the expert stage of the EP8 slice
 * on one GPU (tools/slice.h) with the built-in heuristic's knobs and with
 * every candidate (GEMM tile rows {16, 64} x GEMM CTAs per SM {1, 2}, and 128,
 * the wgmma tile, where the layer runs it), prints
 * the comparison, and writes the fastest candidate to the knob cache
 * (docs/knobs.md) for the slice layer's key. */
#define _POSIX_C_SOURCE 200809L
#include "tune.h"

#include "slice.h"

#include <stdio.h>

#ifndef MOE_EP_HAVE_CUDA

int cmd_tune(int argc, char **argv)
{
    (void)argc, (void)argv;
    return slice_needs_gpu_build("tune");
}

#else

#include "core/knobs.h"
#include "tune/knob_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CANDIDATES 5 /* {16, 64} x {1, 2}, then 128 (wgmma) where the layer runs it */
#define TIMINGS (1 + CANDIDATES) /* the heuristic, then the candidates */

typedef struct {
    const geometry_t *geo;
    int tokens[SLICE_MAX_LIST], ntok, npath, iters, warmup;
    moe_ep_path_t paths[MOE_EP_PATH_COUNT_];
    moe_ep_wire_t wire;
    moe_ep_backend_t backend;
} tune_opts_t;

typedef enum { CELL_NONE = 0, CELL_OK, CELL_ERR } cell_state_t;

typedef struct {
    cell_state_t state;
    moe_ep_knobs_t heur, best; /* best: the fastest candidate */
    double heur_us, best_us;
    int stored;                /* best written to the cache */
} cell_t;

typedef struct {
    int done, total;
} progress_t;

static void usage_tune(void)
{
    printf("usage: moe_ep tune [--geometry NAME] [--tokens 8,64,512,2048,8192]\n"
           "                   [--paths all|bf16,mxfp8,nvfp4,w4a8,fp8_block] [--wire bf16|mxfp8|fp4]\n"
           "                   [--backend split|mega] [--iters N] [--warmup N]\n"
           "  EP8 slice on one GPU (E/8 experts, top-K, world size 1): times the split backend's\n"
           "  expert stage (or the mega backend's whole forward) with the heuristic's knobs and with\n"
           "  GEMM tile rows {16, 64} x CTAs per SM {1, 2} and the 128-row wgmma tile where the layer\n"
           "  runs it, and writes the fastest candidate to the knob cache (MOE_EP_KNOB_CACHE, else\n"
           "  $XDG_CACHE_HOME/moe_ep/knobs.txt, else ~/.cache/moe_ep/knobs.txt; docs/knobs.md).\n");
}

static int parse_option(void *opts, const char *k, const char *v)
{
    tune_opts_t *o = opts;
    if (strcmp(k, "--geometry") == 0) return (o->geo = geometry_find(v)) ? 0 : -1;
    if (strcmp(k, "--tokens") == 0) return (o->ntok = slice_parse_tokens(v, o->tokens)) > 0 ? 0 : -1;
    if (strcmp(k, "--paths") == 0) return (o->npath = slice_parse_paths(v, o->paths)) > 0 ? 0 : -1;
    if (strcmp(k, "--wire") == 0) return slice_parse_wire(v, &o->wire);
    if (strcmp(k, "--iters") == 0) return slice_parse_int(v, 1, 1000000, &o->iters);
    if (strcmp(k, "--warmup") == 0) return slice_parse_int(v, 0, 1000000, &o->warmup);
    if (strcmp(k, "--backend") == 0) {
        int b = slice_name_index(v, slice_backend_str, MOE_EP_BACKEND_COUNT_);
        return b > 0 ? (o->backend = (moe_ep_backend_t)b, 0) : -1; /* GPU backends only */
    }
    return -2;
}

static int parse_tune(int argc, char **argv, tune_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->geo = geometry_find("ds-v4-flash");
    o->ntok = slice_parse_tokens("8,64,512,2048,8192", o->tokens);
    o->npath = slice_parse_paths("all", o->paths);
    o->wire = MOE_EP_WIRE_BF16, o->iters = 20, o->warmup = 3, o->backend = MOE_EP_BACKEND_SPLIT;
    return slice_parse_args(argc, argv, "tune", parse_option, usage_tune, o);
}

static void progress(progress_t *p, const char *what)
{
    static const char bar[] = "##############################";
    int width = (int)sizeof bar - 1, fill = p->total ? p->done * width / p->total : width;
    fprintf(stderr, "\r[%.*s%*s] %3d/%d %-28s", fill, bar, width - fill, "", p->done, p->total, what);
    if (p->done >= p->total) fputc('\n', stderr);
    fflush(stderr);
}

/* Median time in us with these knobs forced on the layer: the split backend's
 * expert stage (on the rows of a forward), the mega backend's whole forward. */
static int time_knobs(const tune_opts_t *o, moe_ep_group_t g, run_ctx_t *c, const moe_ep_knobs_t *k,
                      cudaStream_t s, double *us)
{
    if (!slice_layer_ok(moe_ep_knobs_force(c->layer, k), "moe_ep_knobs_force")) return 0;
    int ok = o->backend == MOE_EP_BACKEND_MEGA
                 ? slice_time_steps(c, slice_flush_step, slice_forward_step, o->warmup, o->iters, s, us)
                 : slice_time_steps(c, slice_forward_flush_step, slice_stage_step, o->warmup, o->iters, s, us);
    return ok && slice_no_async_error(g);
}

static moe_ep_knobs_t candidate(int i)
{
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = i == 4 ? 128 : i / 2 ? 64 : 16, k.gemm_ctas_per_sm = i == 4 ? 1 : 1 + i % 2;
    return k;
}

/* The heuristic, then every candidate; the fastest candidate goes to the
 * cache unless the heuristic beats it (its knobs may be none the file can
 * hold: CTAs per SM from the occupancy calculator, the 128-row wgmma tile). */
static void tune_cell(const tune_opts_t *o, moe_ep_group_t g, run_ctx_t *c, moe_ep_path_t p, cudaStream_t s,
                      progress_t *pr, cell_t *cell)
{
    char what[48];
    snprintf(what, sizeof what, "%s T=%d", moe_ep_path_name(p), c->T);
    int ok = slice_layer_ok(moe_ep_knobs_heuristic(c->layer, c->T, &cell->heur), "moe_ep_knobs_heuristic");
    cell->best_us = INFINITY;
    for (int i = -1; i < CANDIDATES; i++, pr->done++, progress(pr, what)) {
        moe_ep_knobs_t k = i < 0 ? cell->heur : candidate(i);
        if (!moe_ep_knobs_tile_allowed(c->layer, k.gemm_tile_rows)) continue;
        double us = 0;
        ok = ok && time_knobs(o, g, c, &k, s, &us);
        if (ok && i < 0) cell->heur_us = us;
        if (ok && i >= 0 && us < cell->best_us) cell->best = k, cell->best_us = us;
    }
    moe_ep_knobs_force(c->layer, NULL);
    cell->state = ok ? CELL_OK : CELL_ERR;
    if (ok && cell->best_us <= cell->heur_us)
        cell->stored = slice_layer_ok(moe_ep_knobs_store(c->layer, c->T, &cell->best, cell->best_us),
                                      "writing the knob cache");
}

/* cells[t] for every T of one path. */
static void tune_path(const tune_opts_t *o, const slice_t *sl, moe_ep_path_t p, cudaStream_t s, progress_t *pr,
                      cell_t *cells)
{
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    int ok = slice_layer_ok(moe_ep_group_create_emulated(1, 0, &g), "moe_ep_group_create_emulated");
    ok = ok && slice_layer_ok(slice_create_layer(sl, p, o->wire, o->backend, g, s, &l), "layer create/load");
    for (int t = 0; t < o->ntok; t++) {
        run_ctx_t c = {sl, l, o->tokens[t]};
        if (ok) tune_cell(o, g, &c, p, s, pr, &cells[t]);
        else cells[t].state = CELL_ERR, pr->done += TIMINGS;
    }
    if (l) slice_layer_ok(moe_ep_layer_destroy(l), "moe_ep_layer_destroy");
    if (g) slice_layer_ok(moe_ep_group_destroy(g), "moe_ep_group_destroy");
}

static void knobs_str(const moe_ep_knobs_t *k, char *out, size_t n)
{
    char ctas[16] = "occupancy";
    if (k->gemm_ctas_per_sm) snprintf(ctas, sizeof ctas, "%d", k->gemm_ctas_per_sm);
    snprintf(out, n, "%d%s / %s", k->gemm_tile_rows, k->gemm_tile_rows == 128 ? " (wgmma)" : "", ctas);
}

static void print_row(const tune_opts_t *o, int p, int t, const cell_t *c)
{
    char heur[48], best[48];
    if (c->state != CELL_OK) {
        printf("| %s | %d | err | | | | |\n", moe_ep_path_name(o->paths[p]), o->tokens[t]);
        return;
    }
    knobs_str(&c->heur, heur, sizeof heur);
    knobs_str(&c->best, best, sizeof best);
    printf("| %s | %d | %s | %.1f | %.1f | %.2f | %s%s |\n", moe_ep_path_name(o->paths[p]), o->tokens[t], heur,
           c->heur_us, c->best_us, c->heur_us / c->best_us, best,
           c->stored ? "" : c->best_us > c->heur_us ? " (heuristic faster: not written)" : " (not written)");
}

static void print_report(const tune_opts_t *o, const slice_t *sl, const char *cache, const cell_t *cells)
{
    printf("# moe_ep tune\n\n- geometry: %s, EP8 slice: E %d (world size 1), K %d, H %d, I %d, wire %s, %s backend\n",
           o->geo->name, sl->E8, sl->K, sl->H, sl->I, moe_ep_wire_name(o->wire), moe_ep_backend_name(o->backend));
    printf("- %s, median of %d after %d warm-up, L2 flushed before each; times in us;"
           " speedup = heuristic / tuned\n- knob cache: %s\n\n",
           o->backend == MOE_EP_BACKEND_MEGA ? "whole forward" : "expert stage alone", o->iters, o->warmup, cache);
    printf("| path | T | heuristic (tile rows / CTAs per SM) | heuristic us | tuned us | speedup |"
           " tuned (tile rows / CTAs per SM) |\n|---|---:|---|---:|---:|---:|---|\n");
    for (int p = 0; p < o->npath; p++)
        for (int t = 0; t < o->ntok; t++) print_row(o, p, t, &cells[p * o->ntok + t]);
}

static int max_tokens(const tune_opts_t *o)
{
    int m = 1;
    for (int t = 0; t < o->ntok; t++) m = o->tokens[t] > m ? o->tokens[t] : m;
    return m;
}

static int run_tune(const tune_opts_t *o, cudaStream_t s, const char *cache)
{
    slice_t sl;
    cell_t *cells = calloc((size_t)o->npath * (size_t)o->ntok, sizeof *cells);
    if (!cells || !slice_make(&sl, o->geo, max_tokens(o), 1)) {
        free(cells);
        return 1;
    }
    progress_t pr = {0, o->npath * o->ntok * TIMINGS};
    for (int p = 0; p < o->npath; p++) tune_path(o, &sl, o->paths[p], s, &pr, cells + p * o->ntok);
    print_report(o, &sl, cache, cells);
    int errors = 0;
    for (int i = 0; i < o->npath * o->ntok; i++) errors += cells[i].state != CELL_OK;
    slice_free(&sl);
    free(cells);
    return errors ? 1 : 0;
}

int cmd_tune(int argc, char **argv)
{
    tune_opts_t o;
    int r = parse_tune(argc, argv, &o);
    if (r) return r == 1 ? 0 : 2;
    const geometry_t *g = o.geo;
    if (g->num_experts % 8 || g->top_k > g->num_experts / 8)
        return fprintf(stderr, "moe_ep tune: %s: the EP8 slice needs E %% 8 == 0 and K <= E/8\n", g->name), 2;
    int count = 0, on = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return fprintf(stderr, "moe_ep tune: no usable GPU: %s\n", e ? cudaGetErrorString(e) : "no device"), 2;
    char cache[4096];
    if (!slice_layer_ok(moe_ep_knob_cache_path(cache, sizeof cache, &on), "knob cache path")) return 2;
    if (!on) snprintf(cache, sizeof cache, "off (MOE_EP_KNOB_CACHE=off or no HOME): nothing written");
    fprintf(stderr, "moe_ep tune: %s, knob cache %s\n", g->name, cache);
    cudaStream_t s = NULL;
    if (!CK(cudaSetDevice(0)) || !CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) return 1;
    r = run_tune(&o, s, cache);
    CK(cudaStreamDestroy(s));
    return r;
}

#endif /* MOE_EP_HAVE_CUDA */
