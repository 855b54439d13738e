/* Kernel knobs of a layer (docs/knobs.md): explicit (config.knobs) >
 * autotuned (config.autotune) > the knob cache file > built-in heuristics,
 * field by field. What a layer learns is kept per token bucket in the layer,
 * so the cache file is read at most once per layer. */
#ifndef MOE_EP_KNOBS_H
#define MOE_EP_KNOBS_H

#include "core/objects.h"

#ifdef __cplusplus
extern "C" {
#endif

/* config.knobs (NULL, or size == sizeof and each value 0 or valid) and config.autotune. */
moe_ep_status_t moe_ep_knobs_check_config(const moe_ep_layer_config_t *config);
/* Copies config.knobs (checked) into the layer; l->cfg.knobs then points at the copy. */
void moe_ep_knobs_init(moe_ep_layer_t l);

/* A forward's T for the bucket tables (the largest T of the local ranks) and
 * its rows for the heuristic (sum of T times K); with device-side counts both
 * use max_tokens_per_rank. */
moe_ep_status_t moe_ep_knobs_forward_shape(moe_ep_layer_t l, const moe_ep_forward_args_t *args,
                                           int *tokens, int64_t *rows);

/* The knobs of a forward with T = tokens and `rows` rows, as the launch takes
 * them: gemm_ctas_per_sm 0 = as many as fit (occupancy calculator). may_read:
 * the cache file may be read now (the first time; never while capturing). */
moe_ep_status_t moe_ep_knobs_resolve(moe_ep_layer_t l, int tokens, int64_t rows, int may_read,
                                     moe_ep_knobs_t *knobs, moe_ep_knob_source_t *source);

/* Autotuning: the candidates to time now for T's bucket (tile rows {16, 64}
 * x CTAs per SM {1, 2} less what explicit knobs fix, plus the 128-row wgmma
 * tile where the layer can run it); *n = 0 when there is nothing to do
 * (autotune off, bucket already tried, knobs forced, or explicit knobs leave
 * one choice). Marks the bucket as tried. */
moe_ep_status_t moe_ep_knobs_tune_candidates(moe_ep_layer_t l, int tokens, moe_ep_knobs_t *cand, int max,
                                             int *n);
/* Keeps the winner for T's bucket and writes it to the cache file (unless
 * its CTAs per SM are the occupancy calculator's, which the file cannot
 * hold); a failed write is one warning line, not an error. */
moe_ep_status_t moe_ep_knobs_set_tuned(moe_ep_layer_t l, int tokens, const moe_ep_knobs_t *knobs,
                                       double us);

/* Tools (moe_ep tune): run every forward with exactly these knobs (tile rows
 * 16 or 64, or 128 where the layer can run the wgmma tile; CTAs per SM 0..4,
 * 0 = occupancy), or as usual again after NULL. */
moe_ep_status_t moe_ep_knobs_force(moe_ep_layer_t l, const moe_ep_knobs_t *knobs);
/* 1 if the layer can run GEMM tiles of this many rows (16, 64; 128: bf16 with
 * the wgmma tile's shapes). */
int moe_ep_knobs_tile_allowed(moe_ep_layer_t l, int tile_rows);
/* The built-in heuristic for T tokens on every local rank (launch values). */
moe_ep_status_t moe_ep_knobs_heuristic(moe_ep_layer_t l, int tokens, moe_ep_knobs_t *knobs);
/* Writes knobs (both set) as the layer's cache entry for T's bucket; nothing
 * when the cache is off. */
moe_ep_status_t moe_ep_knobs_store(moe_ep_layer_t l, int tokens, const moe_ep_knobs_t *knobs, double us);

#ifdef __cplusplus
}
#endif
#endif
