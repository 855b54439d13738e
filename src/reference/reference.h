/* The CPU reference backend: the oracle every GPU path is tested against.
 * It stores weights in the path's weight format (as the kernels do), applies
 * every rounding point of docs/formats.md, and accumulates dot products in
 * fp32 with 16 fixed partial sums (the order never depends on which rows
 * share an expert, so results are position independent). */
#ifndef MOE_EP_REFERENCE_H
#define MOE_EP_REFERENCE_H

#include "core/objects.h"

size_t moe_ep_ref_host_bytes(const moe_ep_layer_config_t *config, int num_local_experts);
moe_ep_status_t moe_ep_ref_create(moe_ep_layer_t layer);
void moe_ep_ref_destroy(moe_ep_layer_t layer);
moe_ep_status_t moe_ep_ref_load_experts(moe_ep_layer_t layer, const moe_ep_expert_weights_t *w);
moe_ep_status_t moe_ep_ref_forward(moe_ep_layer_t layer, const moe_ep_forward_args_t *args);
moe_ep_status_t moe_ep_ref_calibrate_nvfp4(moe_ep_layer_t layer, const moe_ep_forward_args_t *args,
                                           float *fc1_input_scale, float *fc2_input_scale);

/* Runs fn(ctx, item, thread) for item in [0, n) on up to `threads` threads
 * (0 = all cores); items are taken in order from a shared counter. */
moe_ep_status_t moe_ep_parallel_for(int n, int threads, void (*fn)(void *ctx, int item, int thread),
                                    void *ctx);
int moe_ep_cpu_count(void);

/* Dequantizes row `row` of a [rows][cols] weight matrix stored in `format`
 * (host layout of moe_ep_expert_weights_t) into out[cols] fp32. */
void moe_ep_ref_weight_row(moe_ep_format_t format, const uint8_t *data, const uint8_t *scales,
                           float global_scale, int64_t cols, int64_t row, float *out);
/* Rounds a row of n values in place through `format` (quantize, dequantize). */
void moe_ep_ref_round_row(moe_ep_format_t format, float *x, int64_t n, float global_scale);

#endif
