/* Kernel knobs: where each forward's knobs come from (see knobs.h), the
 * layer's per-bucket table, and moe_ep_layer_get_knobs. */
#include "core/knobs.h"

#include "kernels/split_kernels.h"

#include <stdio.h>
#include <string.h>

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define CACHE_PATH_BYTES 4096

static const int tune_tiles[] = {16, 64}, tune_ctas[] = {1, 2};

static int ctas_ok(int v) { return v >= 1 && v <= 4; }

/* The tile rows a layer of this config can run: FP8-BLOCK, MXFP8, W4A8 and NVFP4 with the
 * wgmma tiles' shapes only one tile kind (the register tile, 128, 64, 32 or
 * 16: its fp16 HGMMA instances, FP8-BLOCK with fp8_fast_accum its QGMMA
 * ones, at every T: moe_ep_single_tile); bf16 with the HGMMA tile's
 * shapes 16, 64 or 128; else 16, 64. */
static int tile_allowed(const moe_ep_layer_config_t *c, int v)
{
    if (moe_ep_single_tile(c->path, c->hidden, c->intermediate, c->fp8_fast_accum))
        return moe_ep_single_tile_allows(v);
    if (v == 128) return moe_ep_hgmma_fits(c->path, c->hidden, c->intermediate);
    return v == 16 || v == 64;
}

static moe_ep_knobs_t make_knobs(int tile_rows, int ctas_per_sm)
{
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = tile_rows, k.gemm_ctas_per_sm = ctas_per_sm;
    return k;
}

moe_ep_status_t moe_ep_knobs_check_config(const moe_ep_layer_config_t *c)
{
    MOE_EP_REQUIRE(c->autotune == 0 || c->autotune == 1, "autotune %d: 0 or 1", c->autotune);
    const moe_ep_knobs_t *k = c->knobs;
    if (!k) return MOE_EP_SUCCESS;
    MOE_EP_REQUIRE(k->size == sizeof(moe_ep_knobs_t),
                   "knobs.size %zu != sizeof(moe_ep_knobs_t) %zu: use MOE_EP_KNOBS_INIT", k->size,
                   sizeof(moe_ep_knobs_t));
    MOE_EP_REQUIRE(k->gemm_tile_rows == 0 || tile_allowed(c, k->gemm_tile_rows),
                   "knobs.gemm_tile_rows %d: 0 (not set), 16 or 64; 128 (the HGMMA tile) only for bf16; "
                   "quantized paths only 128, 64, 32 or 16 (their register tile), when hidden %% 256 == 0 "
                   "and intermediate %% 128 == 0 (path %s, hidden %d, intermediate %d)",
                   k->gemm_tile_rows, moe_ep_path_name(c->path), c->hidden, c->intermediate);
    MOE_EP_REQUIRE(k->gemm_ctas_per_sm == 0 || ctas_ok(k->gemm_ctas_per_sm),
                   "knobs.gemm_ctas_per_sm %d: 0 (not set) or 1..4", k->gemm_ctas_per_sm);
    return MOE_EP_SUCCESS;
}

void moe_ep_knobs_init(moe_ep_layer_t l)
{
    l->knobs_explicit = make_knobs(0, 0);
    if (l->cfg.knobs) {
        l->knobs_explicit = *l->cfg.knobs;
        l->cfg.knobs = &l->knobs_explicit; /* the caller's struct may go away */
    }
}

/* GEMM tile rows for this forward. Layers whose shapes allow a TMA + wgmma
 * tile run it at every T: the register tile (FP8-BLOCK with fp8_fast_accum
 * its QGMMA instances, else its exact fp16 HGMMA ones), as MXFP8 and W4A8 (the
 * only tile kind either may run: moe_ep_single_tile), 16 to 128 rows
 * (moe_ep_single_tile_rows); bf16
 * the 128-row HGMMA tile (measured on the EP8 slices, T = 8 .. 512: 1.25-3.4x
 * faster than the best mma.sync tile even when mostly empty: its TMA ring
 * streams the weights at close to the copy bandwidth). Otherwise 16 when
 * experts get few rows on average (decode batches: less tensor work on
 * padding), 64 else. A row's arithmetic does not depend on its tile among
 * those a layer may run (bf16 HGMMA and mma.sync sum each element over K in
 * the same order with the same bits). With device-side token counts the host
 * bound max_tokens_per_rank is used. GEMM CTAs per SM: 0, as many as fit
 * (the occupancy calculator). */
static moe_ep_knobs_t heuristic(moe_ep_layer_t l, int64_t rows)
{
    const moe_ep_layer_config_t *c = &l->cfg;
    if (moe_ep_single_tile(c->path, c->hidden, c->intermediate, c->fp8_fast_accum))
        return make_knobs(moe_ep_single_tile_rows(rows, l->num_local_experts), 0);
    if (moe_ep_hgmma_fits(c->path, c->hidden, c->intermediate)) return make_knobs(128, 0);
    if (rows <= 24 * (int64_t)l->num_local_experts) return make_knobs(16, 0);
    return make_knobs(64, 0);
}

moe_ep_status_t moe_ep_knobs_forward_shape(moe_ep_layer_t l, const moe_ep_forward_args_t *a,
                                           int *tokens, int64_t *rows)
{
    int t_max = 0;
    int64_t sum = 0;
    for (int r = 0; r < l->group->local_ranks; r++) {
        int t = a->num_tokens_device || !a->num_tokens ? l->cfg.max_tokens_per_rank : a->num_tokens[r];
        sum += t;
        t_max = t > t_max ? t : t_max;
    }
    *tokens = t_max, *rows = sum * l->cfg.top_k;
    return MOE_EP_SUCCESS;
}

static moe_ep_knob_slot_t *slot_of(moe_ep_layer_t l, int tokens)
{
    int i = 0;
    while (i < MOE_EP_KNOB_BUCKETS - 1 && (1 << i) < tokens) i++;
    return &l->knob_slots[i];
}

static moe_ep_status_t device_name(moe_ep_layer_t l, char *name, size_t size)
{
    snprintf(name, size, "cpu");
#ifdef MOE_EP_HAVE_CUDA
    if (l->group->device < 0) return MOE_EP_SUCCESS;
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, l->group->device);
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
    snprintf(name, size, "%.*s", (int)size - 1, p.name); /* cut to the key's length */
#endif
    return MOE_EP_SUCCESS;
}

/* The layer's key in the cache file (worked out once). */
static moe_ep_status_t layer_key(moe_ep_layer_t l, const moe_ep_knob_key_t **key)
{
    moe_ep_knob_key_t *k = &l->knob_key;
    if (!l->knob_key_ready) {
        char name[MOE_EP_KNOB_DEVICE_MAX];
        MOE_EP_CHECK(device_name(l, name, sizeof name));
        MOE_EP_CHECK(moe_ep_knob_key_set_device(k, name));
        k->path = l->cfg.path, k->wire = l->cfg.wire, k->backend = l->cfg.backend;
        k->world = l->group->world_size, k->E = l->cfg.num_experts, k->K = l->cfg.top_k;
        k->H = l->cfg.hidden, k->I = l->cfg.intermediate;
        l->knob_key_ready = 1;
    }
    *key = k;
    return MOE_EP_SUCCESS;
}

/* Every bucket's entry from the cache file (exact, else nearest larger, else
 * nearest smaller bucket). */
static moe_ep_status_t fill_from_cache(moe_ep_layer_t l)
{
    char path[CACHE_PATH_BYTES];
    int on = 0;
    const moe_ep_knob_key_t *key;
    MOE_EP_CHECK(moe_ep_knob_cache_path(path, sizeof path, &on));
    if (!on) return MOE_EP_SUCCESS;
    MOE_EP_CHECK(layer_key(l, &key));
    moe_ep_knob_table_t t;
    MOE_EP_CHECK(moe_ep_knob_table_load(&t, path));
    moe_ep_status_t s = MOE_EP_SUCCESS;
    for (int i = 0; i < MOE_EP_KNOB_BUCKETS && s == MOE_EP_SUCCESS; i++) {
        const moe_ep_knob_entry_t *e = NULL;
        s = moe_ep_knob_table_lookup(&t, key, (int64_t)1 << i, &e);
        if (e) l->knob_slots[i].cached = make_knobs(e->tile_rows, e->ctas_per_sm);
    }
    moe_ep_knob_table_free(&t);
    return s;
}

/* The knobs are advisory: a cache that cannot be read or written is one
 * warning line, and the layer carries on. */
static void warn_cache(const char *what)
{
    fprintf(stderr, "moe_ep: knob cache: %s: %s\n", what, moe_ep_last_error());
    moe_ep_clear_error();
}

static void read_cache_once(moe_ep_layer_t l)
{
    if (l->knob_cache_read) return;
    l->knob_cache_read = 1;
    if (fill_from_cache(l) != MOE_EP_SUCCESS) warn_cache("not read, using the built-in heuristics");
}

/* Fills k's unset fields from `from`; the first source that fills one is the
 * source reported. */
static void merge(moe_ep_knobs_t *k, const moe_ep_knobs_t *from, moe_ep_knob_source_t from_source,
                  moe_ep_knob_source_t *source, int *have_source)
{
    int used = 0;
    if (!k->gemm_tile_rows && from->gemm_tile_rows) k->gemm_tile_rows = from->gemm_tile_rows, used = 1;
    if (!k->gemm_ctas_per_sm && from->gemm_ctas_per_sm) k->gemm_ctas_per_sm = from->gemm_ctas_per_sm, used = 1;
    if (used && !*have_source) *source = from_source, *have_source = 1;
}

moe_ep_status_t moe_ep_knobs_resolve(moe_ep_layer_t l, int tokens, int64_t rows, int may_read,
                                     moe_ep_knobs_t *knobs, moe_ep_knob_source_t *source)
{
    MOE_EP_REQUIRE(tokens >= 0 && tokens <= l->cfg.max_tokens_per_rank, "tokens %d not in [0, %d]",
                   tokens, l->cfg.max_tokens_per_rank);
    moe_ep_knob_source_t src = MOE_EP_KNOBS_HEURISTIC;
    moe_ep_knobs_t k = make_knobs(0, 0);
    if (l->knobs_forced.size) {
        k = l->knobs_forced, src = MOE_EP_KNOBS_EXPLICIT;
    } else {
        if (may_read) read_cache_once(l);
        const moe_ep_knob_slot_t *slot = slot_of(l, tokens);
        moe_ep_knobs_t h = heuristic(l, rows);
        int have = 0;
        merge(&k, &l->knobs_explicit, MOE_EP_KNOBS_EXPLICIT, &src, &have);
        merge(&k, &slot->tuned, MOE_EP_KNOBS_AUTOTUNED, &src, &have);
        merge(&k, &slot->cached, MOE_EP_KNOBS_CACHE, &src, &have);
        merge(&k, &h, MOE_EP_KNOBS_HEURISTIC, &src, &have);
        if (!tile_allowed(&l->cfg, k.gemm_tile_rows)) k.gemm_tile_rows = h.gemm_tile_rows; /* a stray cache entry */
    }
    *knobs = k;
    if (source) *source = src;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knobs_tune_candidates(moe_ep_layer_t l, int tokens, moe_ep_knobs_t *cand, int max,
                                             int *n)
{
    moe_ep_knob_slot_t *slot = slot_of(l, tokens);
    const moe_ep_knobs_t *x = &l->knobs_explicit;
    *n = 0;
    if (!l->cfg.autotune || l->knobs_forced.size || slot->tune_tried) return MOE_EP_SUCCESS;
    slot->tune_tried = 1;
    const moe_ep_layer_config_t *c = &l->cfg;
    if (moe_ep_single_tile(c->path, c->hidden, c->intermediate, c->fp8_fast_accum)) return MOE_EP_SUCCESS; /* one tile, one CTA per SM */
    /* 128 (the HGMMA tile, one CTA per SM: CTAs per SM do not apply) where the layer can run it */
    int with_wgmma = tile_allowed(c, 128) && (!x->gemm_tile_rows || x->gemm_tile_rows == 128);
    int nt = x->gemm_tile_rows ? (x->gemm_tile_rows == 128 ? 0 : 1) : 2, nc = x->gemm_ctas_per_sm ? 1 : 2;
    if (nt * nc + with_wgmma < 2) return MOE_EP_SUCCESS; /* explicit knobs leave one choice */
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nc && *n < max; j++)
            cand[(*n)++] = make_knobs(x->gemm_tile_rows ? x->gemm_tile_rows : tune_tiles[i],
                                      x->gemm_ctas_per_sm ? x->gemm_ctas_per_sm : tune_ctas[j]);
    if (with_wgmma && *n < max) cand[(*n)++] = make_knobs(128, 1);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knobs_set_tuned(moe_ep_layer_t l, int tokens, const moe_ep_knobs_t *knobs, double us)
{
    slot_of(l, tokens)->tuned = *knobs;
    if (!moe_ep_knob_values_ok(knobs->gemm_tile_rows, knobs->gemm_ctas_per_sm))
        return MOE_EP_SUCCESS; /* nothing the cache file can hold */
    if (moe_ep_knobs_store(l, tokens, knobs, us) != MOE_EP_SUCCESS) warn_cache("autotuned knobs not saved");
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knobs_force(moe_ep_layer_t l, const moe_ep_knobs_t *knobs)
{
    MOE_EP_REQUIRE(l != NULL, "layer is NULL");
    if (!knobs) {
        memset(&l->knobs_forced, 0, sizeof l->knobs_forced); /* size 0: off */
        return MOE_EP_SUCCESS;
    }
    int tile = knobs->gemm_tile_rows;
    MOE_EP_REQUIRE(moe_ep_knobs_tile_allowed(l, tile) &&
                       (knobs->gemm_ctas_per_sm == 0 || ctas_ok(knobs->gemm_ctas_per_sm)),
                   "forced knobs (%d, %d): tile rows the layer can run (16, 64; 128 bf16 HGMMA; quantized "
                   "paths with hidden %% 256 == 0 and intermediate %% 128 == 0 128, 64, 32 or 16), "
                   "CTAs per SM 0..4",
                   knobs->gemm_tile_rows, knobs->gemm_ctas_per_sm);
    l->knobs_forced = make_knobs(knobs->gemm_tile_rows, knobs->gemm_ctas_per_sm);
    return MOE_EP_SUCCESS;
}

int moe_ep_knobs_tile_allowed(moe_ep_layer_t l, int tile_rows)
{
    return tile_allowed(&l->cfg, tile_rows);
}

moe_ep_status_t moe_ep_knobs_heuristic(moe_ep_layer_t l, int tokens, moe_ep_knobs_t *knobs)
{
    MOE_EP_REQUIRE(l != NULL && knobs != NULL, "NULL argument");
    MOE_EP_REQUIRE(tokens >= 0 && tokens <= l->cfg.max_tokens_per_rank, "tokens %d not in [0, %d]",
                   tokens, l->cfg.max_tokens_per_rank);
    *knobs = heuristic(l, (int64_t)tokens * l->group->local_ranks * l->cfg.top_k);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knobs_store(moe_ep_layer_t l, int tokens, const moe_ep_knobs_t *knobs, double us)
{
    MOE_EP_REQUIRE(l != NULL && knobs != NULL, "NULL argument");
    char path[CACHE_PATH_BYTES];
    int on = 0;
    MOE_EP_CHECK(moe_ep_knob_cache_path(path, sizeof path, &on));
    if (!on) return MOE_EP_SUCCESS;
    const moe_ep_knob_key_t *key;
    MOE_EP_CHECK(layer_key(l, &key));
    moe_ep_knob_entry_t e;
    memset(&e, 0, sizeof e);
    e.key = *key, e.tile_rows = knobs->gemm_tile_rows, e.ctas_per_sm = knobs->gemm_ctas_per_sm, e.us = us;
    MOE_EP_CHECK(moe_ep_knob_bucket(tokens, &e.tokens));
    return moe_ep_knob_cache_store(path, &e);
}

moe_ep_status_t moe_ep_layer_get_knobs(moe_ep_layer_t layer, int num_tokens, moe_ep_knobs_t *knobs,
                                       moe_ep_knob_source_t *source)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(layer != NULL && knobs != NULL, "layer or knobs is NULL");
    MOE_EP_REQUIRE(knobs->size == sizeof(moe_ep_knobs_t),
                   "knobs.size %zu != sizeof(moe_ep_knobs_t) %zu: use MOE_EP_KNOBS_INIT", knobs->size,
                   sizeof(moe_ep_knobs_t));
    MOE_EP_REQUIRE(num_tokens >= 0 && num_tokens <= layer->cfg.max_tokens_per_rank,
                   "num_tokens %d not in [0, max_tokens_per_rank %d]", num_tokens,
                   layer->cfg.max_tokens_per_rank);
    moe_ep_knobs_t k = make_knobs(0, 0);
    moe_ep_knob_source_t src = MOE_EP_KNOBS_HEURISTIC;
    if (layer->cfg.backend != MOE_EP_BACKEND_REFERENCE) {
        int64_t rows = (int64_t)num_tokens * layer->group->local_ranks * layer->cfg.top_k;
        MOE_EP_CHECK(moe_ep_knobs_resolve(layer, num_tokens, rows, 1, &k, &src));
        if (!k.gemm_ctas_per_sm) k.gemm_ctas_per_sm = 1; /* occupancy calculator: reported as 1 */
    }
    *knobs = k;
    if (source) *source = src;
    return MOE_EP_SUCCESS;
}
