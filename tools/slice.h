/* The "EP8 slice on one GPU" shared by `moe_ep bench` and `moe_ep tune`: a
 * world-size-1 layer with E/8 experts, top-K, T tokens routed uniformly.
 * Option lists, CUDA-event timing, the synthetic inputs and the slice layers. */
#ifndef MOE_EP_TOOL_SLICE_H
#define MOE_EP_TOOL_SLICE_H

#include "geometry.h"
#include "moe_ep.h"

#include <stddef.h>
#include <stdint.h>

#define SLICE_MAX_LIST 16

/* Without CUDA: says that `moe_ep <tool>` needs a GPU build; returns exit code 2. */
int slice_needs_gpu_build(const char *tool);

/* ---- option lists (no GPU needed); each returns the count, or -1 ---------- */

/* Splits a comma list into at most max items of < 32 characters. */
int slice_split_list(const char *s, char items[][32], int max);
/* Index of s among name(0..count-1), or -1. */
int slice_name_index(const char *s, const char *(*name)(int), int count);
const char *slice_path_str(int i);
const char *slice_wire_str(int i);
const char *slice_backend_str(int i);
/* A whole decimal number in [lo, hi] (all of v), into *out: 0, or -1 (nothing written). */
int slice_parse_int(const char *v, int lo, int hi, int *out);
/* "8,64,512": positive token counts, at most SLICE_MAX_LIST. */
int slice_parse_tokens(const char *v, int *tokens);
/* "all" or a list of path names. */
int slice_parse_paths(const char *v, moe_ep_path_t *paths);
/* A wire name: 0, or -1. */
int slice_parse_wire(const char *v, moe_ep_wire_t *wire);

/* "--key value" pairs through option(opts, key, value), which returns 0, -1
 * (bad value) or -2 (unknown key); -h / --help prints usage. Returns 0, 1 for
 * help, or 2 on a bad option (after a message naming `tool`). */
int slice_parse_args(int argc, char **argv, const char *tool, int (*option)(void *, const char *, const char *),
                     void (*usage)(void), void *opts);

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>

#define SLICE_MAX_SETS 8
#define SLICE_SEED 1
/* bench --flush: how the L2 is emptied before each timed call (slice_flush_step) */
enum { SLICE_FLUSH_READS = 0, SLICE_FLUSH_MEMSET = 1, SLICE_FLUSH_NONE = 2 };

/* CUDA and moe_ep status checks: print the failure, return 0 on error. */
#define CK(call) slice_cuda_ok((call), #call, __FILE__, __LINE__)
int slice_cuda_ok(cudaError_t e, const char *what, const char *file, int line);
int slice_layer_ok(moe_ep_status_t st, const char *what);
int slice_cpu_threads(void);

/* Enqueues one step on the stream; returns 1 on success. */
typedef int (*step_fn)(void *ctx, int iter, cudaStream_t s);

/* Runs warm-up steps, then `iters` timed ones; each timed one is `op` between
 * two events, after the untimed `pre` (may be NULL). Median in microseconds. */
int slice_time_steps(void *ctx, step_fn pre, step_fn op, int warmup, int iters, cudaStream_t s,
                     double *median_us);
/* The same for n operands (ctx[0..n-1]) timed in turn, round by round (see slice.c). */
int slice_time_interleaved(void *const *ctx, int n, step_fn pre, step_fn op, int warmup, int iters,
                           cudaStream_t s, double *median_us);

#define SLICE_MAX_RANKS 8   /* emulated ranks sharing one GPU */
#define SLICE_MAX_WORLD 64  /* NCCL ranks (one per process), the library's limit */
#define SLICE_NCCL_TIMEOUT_S 30.0 /* config.timeout_seconds of NCCL slice layers */

/* One input set on the device: x, ids, weights, out for max T tokens. With R
 * ranks, every rank takes the same x and weights, its own ids (rank q's: the
 * slice's ids moved onto the experts of rank (q + t K + k) % R, so routing
 * stays uniform over all R E/8 experts) and its own out. Emulated (self < 0):
 * rank_ids[q], rank_out[q] for every q. NCCL (self >= 0): ids and out are
 * rank self's, and rank_ids[0], rank_out[0] point at them. */
typedef struct {
    uint16_t *x, *out;
    int32_t *ids;
    float *wt;
    int32_t *host_ids; /* [max T][K], the ids in `ids` (self >= 0: global ids of rank self) */
    int32_t *rank_ids[SLICE_MAX_RANKS]; /* R > 1: [max T][K] each */
    uint16_t *rank_out[SLICE_MAX_RANKS]; /* R > 1: [max T][H] each (rank 0: out) */
} dset_t;

typedef struct {
    const geometry_t *g;
    int E8, K, H, I, maxT, nsets;
    int R;              /* ranks, each with E/8 experts (1: the EP8 slice) */
    int self;           /* -1: R emulated ranks on this GPU; else the one NCCL rank of this process */
    int fp8_fast_accum; /* config.fp8_fast_accum of the layers (bench --fp8-fast-accum) */
    int tile_rows;      /* > 0: the layers' explicit knobs.gemm_tile_rows (bench --tile-rows) */
    uint16_t *w13, *w2; /* host bf16 checkpoint [E8][2I][H], [E8][H][I] */
    dset_t sets[SLICE_MAX_SETS];
    void *flush;        /* 2 x L2 bytes, swept before each timed call (slice_flush_step) */
    size_t flush_bytes;
    uint32_t *flush_sink; /* one device word the read sweep may write (l2_flush.cu) */
    int flush_kind;       /* SLICE_FLUSH_READS: reads (l2_flush.cu), no dirty lines left; _MEMSET: a memset of
                             `flush` (bench --flush memset; the tables before the fortieth session); _NONE: none */
} slice_t;

/* The slice of geometry g (E % 8 == 0 and K <= E/8) for up to maxT tokens on
 * each of R emulated ranks (1..8; R = 8: the whole layer's experts on one
 * GPU, every rank loading the slice's checkpoint): the checkpoint, and enough
 * input sets that the largest T's inputs do not all fit in twice the L2.
 * Returns 1 on success; free with slice_free. */
int slice_make(slice_t *sl, const geometry_t *g, int maxT, int R);
/* The same for rank `self` of an NCCL group of R ranks (1..SLICE_MAX_WORLD):
 * the checkpoint, and only rank self's inputs. */
int slice_make_rank(slice_t *sl, const geometry_t *g, int maxT, int R, int self);
void slice_free(slice_t *sl);

/* A slice layer (a group of sl->R ranks with E/8 experts each: emulated, or
 * NCCL with sl->self its rank, timeout SLICE_NCCL_TIMEOUT_S) with the weights
 * of the group's local ranks loaded. On failure *l is NULL when creation
 * failed, else the layer whose load failed (destroy it). */
moe_ep_status_t slice_create_layer(const slice_t *sl, moe_ep_path_t p, moe_ep_wire_t w, moe_ep_backend_t b,
                                   moe_ep_group_t g, cudaStream_t s, moe_ep_layer_t *l);

/* Steps over a layer: input set iter % nsets, T tokens. */
typedef struct {
    const slice_t *sl;
    moe_ep_layer_t layer;
    int T;
} run_ctx_t;

int slice_flush_step(void *ctx, int iter, cudaStream_t s);         /* L2 flush (flush_kind: how) */
/* l2_flush.cu: every byte of buf (bytes % 16 == 0) read through L2 on s; sink: one device word. */
cudaError_t slice_l2_read_sweep(const void *buf, size_t bytes, uint32_t *sink, cudaStream_t s);
int slice_forward_step(void *ctx, int iter, cudaStream_t s);       /* moe_ep_layer_forward, every local rank */
int slice_forward_flush_step(void *ctx, int iter, cudaStream_t s); /* forward, then flush */
int slice_stage_step(void *ctx, int iter, cudaStream_t s);         /* the split expert stage alone */
/* 1 when the group recorded no device error; else prints it, resets it, 0. */
int slice_no_async_error(moe_ep_group_t g);
#endif

#endif
