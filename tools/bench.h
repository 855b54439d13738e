/* `moe_ep bench`: the EP8 slice of a model on one GPU against its roofline floor
 * (bench.c), or with --nccl one rank of a real group of processes (bench_nccl.c). */
#ifndef MOE_EP_TOOL_BENCH_H
#define MOE_EP_TOOL_BENCH_H

#include "slice.h"

#include <stdio.h>

/* Returns the process exit code (2 without a GPU build or on bad options). */
int cmd_bench(int argc, char **argv);

typedef struct {
    const geometry_t *geos[SLICE_MAX_LIST];
    int ngeo, tokens[SLICE_MAX_LIST], ntok, npath, nback, iters, warmup;
    int ranks; /* emulated ranks sharing the GPU, each with E/8 experts (1: the EP8 slice) */
    int nccl;  /* 1: this process is one rank of an NCCL group (scripts/nccl_launch.sh) */
    int fp8_fast_accum; /* 1: layers with config.fp8_fast_accum (fp8_block on QGMMA) */
    int tile_rows;      /* > 0: every layer's explicit knobs.gemm_tile_rows (--tile-rows); 0: the layer's choice */
    int sustain_ms;     /* each cell's warm-up lasts at least this long (--sustain-ms; see tools/bench.c) */
    int flush_kind; /* --flush: SLICE_FLUSH_READS (default), _MEMSET (dirty lines) or _NONE (slice.h) */
    moe_ep_path_t paths[MOE_EP_PATH_COUNT_];
    moe_ep_backend_t backends[MOE_EP_BACKEND_COUNT_];
    moe_ep_wire_t wire;
    const char *out;
} bench_opts_t;

/* What the report's header says about the run: device, UTC date, commit. */
typedef struct {
    char device[320], date[64], commit[64];
} bench_stamp_t;

/* Fills the stamp for CUDA device `device`; returns 1, or 0 on a CUDA error. */
int bench_stamp(bench_stamp_t *st, int device);
/* Bytes per element of a combine wire row (scales included). */
double bench_wire_bytes_per_elem(moe_ep_wire_t w);
/* The largest T of the list. */
int bench_max_tokens(const bench_opts_t *o);
/* print(f, ctx) to stdout and, when path is set, to that file; returns 0, or 1
 * when the file cannot be written. */
int bench_emit(const char *path, void (*print)(FILE *, const void *), const void *ctx);

/* --nccl: this process is rank MOE_EP_RANK of MOE_EP_WORLD_SIZE (GPU = rank);
 * returns the exit code. */
int bench_nccl(const bench_opts_t *o);

#endif
