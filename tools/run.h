/* `moe_ep run` (the demo) and `moe_ep accuracy` (the docs/formats.md table). */
#ifndef MOE_EP_TOOL_RUN_H
#define MOE_EP_TOOL_RUN_H

#include "geometry.h"
#include "moe_ep.h"

#include <stdint.h>

typedef struct {
    const geometry_t *geometry;
    int ranks, tokens_per_rank, threads, check_tokens, device;
    moe_ep_path_t path;
    moe_ep_wire_t wire;
    moe_ep_backend_t backend;
    uint64_t seed;
    int quiet;
} run_opts_t;

typedef struct {
    double load_s, forward_s, rel_l2;
    float fc1_scale, fc2_scale;
} run_result_t;

/* Builds the layer, loads synthetic weights, runs one forward on every rank,
 * and compares check_tokens sampled tokens with an unquantized float64 layer. */
moe_ep_status_t run_layer(const run_opts_t *o, run_result_t *r);
int cmd_run(int argc, char **argv);
int run_gpu_available(void); /* a CUDA build with a usable GPU */
int cmd_accuracy(int argc, char **argv);

#endif
