/* The CPU reference layer (see reference.h): weight storage, loading, and the
 * forward pass as plain loops over experts on a few threads. */
#include "reference/reference.h"

#include "formats/codec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Rows of one expert computed together (one weight-row dequantization serves
 * them all); more rows per expert become more work items. */
#define REF_ROWS_PER_ITEM 32

struct moe_ep_ref_state {
    uint8_t *w13, *w13_scales; /* [local experts][expert_bytes.w13_*] */
    uint8_t *w2, *w2_scales;   /* [local experts][expert_bytes.w2_*]  */
    float *w13_gs, *w2_gs;     /* [local experts] NVFP4 encode scales  */
};

static int64_t expert_total(const moe_ep_expert_bytes_t *b)
{
    return b->w13_data + b->w13_scales + b->w2_data + b->w2_scales + 2 * (int64_t)sizeof(float);
}

size_t moe_ep_ref_host_bytes(const moe_ep_layer_config_t *c, int num_local_experts)
{
    moe_ep_expert_bytes_t b =
        moe_ep_expert_bytes(moe_ep_path_weight_format(c->path), c->hidden, c->intermediate);
    return (size_t)(expert_total(&b) * num_local_experts);
}

moe_ep_status_t moe_ep_ref_create(moe_ep_layer_t l)
{
    if (l->cfg.backend != MOE_EP_BACKEND_REFERENCE) return MOE_EP_SUCCESS;
    struct moe_ep_ref_state *s = calloc(1, sizeof *s);
    if (!s) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "reference state");
    l->ref = s;
    size_t n = (size_t)l->num_local_experts;
    const moe_ep_expert_bytes_t *b = &l->expert_bytes;
    s->w13 = malloc(n * (size_t)b->w13_data);
    s->w2 = malloc(n * (size_t)b->w2_data);
    s->w13_scales = malloc(n * (size_t)b->w13_scales + 1);
    s->w2_scales = malloc(n * (size_t)b->w2_scales + 1);
    s->w13_gs = malloc(n * sizeof(float));
    s->w2_gs = malloc(n * sizeof(float));
    if (!s->w13 || !s->w2 || !s->w13_scales || !s->w2_scales || !s->w13_gs || !s->w2_gs)
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "reference weights: %zu bytes",
                           moe_ep_ref_host_bytes(&l->cfg, l->num_local_experts));
    return MOE_EP_SUCCESS;
}

void moe_ep_ref_destroy(moe_ep_layer_t l)
{
    struct moe_ep_ref_state *s = l->ref;
    if (!s) return;
    free(s->w13);
    free(s->w2);
    free(s->w13_scales);
    free(s->w2_scales);
    free(s->w13_gs);
    free(s->w2_gs);
    free(s);
    l->ref = NULL;
}

/* ---- loading --------------------------------------------------------------- */

typedef struct {
    moe_ep_layer_t layer;
    const moe_ep_expert_weights_t *w;
    atomic_int failed;
} load_ctx_t;

static float bf16_matrix_amax(const uint16_t *m, int64_t n)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(moe_ep_bf16_to_f32(m[i]));
        if (a > amax) amax = a;
    }
    return amax;
}

/* Quantizes one bf16 checkpoint matrix [rows][cols] into the path's format. */
static moe_ep_status_t quantize_matrix(moe_ep_format_t f, const uint16_t *src, int64_t rows,
                                       int64_t cols, uint8_t *data, uint8_t *scales, float *gs)
{
    int64_t n = rows * cols;
    if (f == MOE_EP_FORMAT_BF16) {
        memcpy(data, src, (size_t)n * 2);
        *gs = 1.0f;
        return MOE_EP_SUCCESS;
    }
    float *tmp = malloc((size_t)n * sizeof(float));
    if (!tmp) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "weight conversion buffer");
    for (int64_t i = 0; i < n; i++) tmp[i] = moe_ep_bf16_to_f32(src[i]);
    *gs = f == MOE_EP_FORMAT_NVFP4 ? moe_ep_nvfp4_global_scale(bf16_matrix_amax(src, n)) : 1.0f;
    moe_ep_status_t st = f == MOE_EP_FORMAT_FP8_BLOCK
                             ? moe_ep_quantize_fp8_block_weight(tmp, rows, cols, data, (float *)(void *)scales)
                             : moe_ep_quantize(f, tmp, rows, cols, *gs, data, scales);
    free(tmp);
    return st;
}

static void load_one_expert(void *ctx_, int e, int thread)
{
    load_ctx_t *ctx = ctx_;
    moe_ep_layer_t l = ctx->layer;
    const moe_ep_expert_weights_t *w = ctx->w;
    struct moe_ep_ref_state *s = l->ref;
    const moe_ep_expert_bytes_t *b = &l->expert_bytes;
    int le = w->first_expert - l->first_expert + e; /* local expert index */
    int64_t H = l->cfg.hidden, I = l->cfg.intermediate;
    uint8_t *d13 = s->w13 + le * b->w13_data, *s13 = s->w13_scales + le * b->w13_scales;
    uint8_t *d2 = s->w2 + le * b->w2_data, *s2 = s->w2_scales + le * b->w2_scales;
    if (w->format == MOE_EP_FORMAT_BF16) {
        const uint16_t *w13 = (const uint16_t *)w->w13 + e * 2 * I * H;
        const uint16_t *w2 = (const uint16_t *)w->w2 + e * H * I;
        if (quantize_matrix(l->weight_format, w13, 2 * I, H, d13, s13, &s->w13_gs[le]) ||
            quantize_matrix(l->weight_format, w2, H, I, d2, s2, &s->w2_gs[le]))
            atomic_store(&ctx->failed, 1);
        return;
    }
    memcpy(d13, (const uint8_t *)w->w13 + e * b->w13_data, (size_t)b->w13_data);
    memcpy(s13, (const uint8_t *)w->w13_scales + e * b->w13_scales, (size_t)b->w13_scales);
    memcpy(d2, (const uint8_t *)w->w2 + e * b->w2_data, (size_t)b->w2_data);
    memcpy(s2, (const uint8_t *)w->w2_scales + e * b->w2_scales, (size_t)b->w2_scales);
    s->w13_gs[le] = w->format == MOE_EP_FORMAT_NVFP4 ? w->w13_global_scale[e] : 1.0f;
    s->w2_gs[le] = w->format == MOE_EP_FORMAT_NVFP4 ? w->w2_global_scale[e] : 1.0f;
}

moe_ep_status_t moe_ep_ref_load_experts(moe_ep_layer_t l, const moe_ep_expert_weights_t *w)
{
    load_ctx_t ctx = {l, w, 0};
    moe_ep_parallel_for(w->num_experts, l->cfg.num_threads, load_one_expert, &ctx);
    if (atomic_load(&ctx.failed))
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "quantizing bf16 weights of experts [%d, %d)",
                           w->first_expert, w->first_expert + w->num_experts);
    return MOE_EP_SUCCESS;
}

/* ---- forward ---------------------------------------------------------------- */

/* fp32 dot products of one weight row w with 4 rows x[0..3], each with 16
 * partial sums in a fixed order: vectorizes without -ffast-math, and every
 * row gets the same bits however rows are grouped, on every machine. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void dot16x4(const float *restrict w, const float *const x[4], int64_t n, float out[4])
{
    const float *restrict x0 = x[0], *restrict x1 = x[1], *restrict x2 = x[2], *restrict x3 = x[3];
    float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
    for (int64_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) {
            float wv = w[i + l];
            a0[l] += wv * x0[i + l];
            a1[l] += wv * x1[i + l];
            a2[l] += wv * x2[i + l];
            a3[l] += wv * x3[i + l];
        }
    float *acc[4] = {a0, a1, a2, a3};
    for (int r = 0; r < 4; r++) {
        for (int half = 8; half > 0; half >>= 1)
            for (int l = 0; l < half; l++) acc[r][l] += acc[r][l + half];
        out[r] = acc[r][0];
    }
}

/* out[i * stride] = dot(w, x[i]) for i < n (n rows in groups of 4). */
static void dot_rows(const float *w, const float *const *x, int n, int64_t len, float *out,
                     int64_t stride)
{
    for (int i = 0; i < n; i += 4) {
        const float *xs[4];
        float d[4];
        for (int r = 0; r < 4; r++) xs[r] = x[i + r < n ? i + r : i];
        dot16x4(w, xs, len, d);
        for (int r = 0; r < 4 && i + r < n; r++) out[(i + r) * stride] = d[r];
    }
}

/* One forward (or calibration) pass over all local ranks' rows. A row is one
 * (rank, token, slot); row id = row_base[rank] + t * K + k. */
typedef struct {
    moe_ep_layer_t layer;
    const moe_ep_forward_args_t *args;
    int calibrate;          /* 1: x unrounded, record amax of the SwiGLU output, no GEMM2 */
    int64_t *token_of_row;  /* [rows] global token index (into xq) */
    int64_t *rows_by_expert;/* [rows] row ids sorted by local expert */
    int64_t *expert_start;  /* [local experts + 1] */
    int *item_expert;       /* [items] */
    int64_t *item_first;    /* [items] index into rows_by_expert */
    int *item_count;
    float *xq;              /* [tokens][H] x after the path's activation rounding */
    float *y;               /* [rows][H] expert outputs after the wire rounding */
    int64_t *token_base;    /* [local ranks + 1] global token index of each rank */
    _Atomic float amax_act;
    atomic_int failed;
} fwd_ctx_t;

static void atomic_max_float(_Atomic float *m, float v)
{
    float cur = atomic_load(m);
    while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
    }
}

static void round_tokens(void *ctx_, int r, int thread)
{
    fwd_ctx_t *ctx = ctx_;
    moe_ep_layer_t l = ctx->layer;
    int64_t H = l->cfg.hidden;
    moe_ep_format_t af = moe_ep_path_act_format(l->cfg.path);
    for (int64_t t = ctx->token_base[r]; t < ctx->token_base[r + 1]; t++) {
        const uint16_t *x = ctx->args->x[r] + (t - ctx->token_base[r]) * H;
        float *xq = ctx->xq + t * H;
        for (int64_t i = 0; i < H; i++) xq[i] = moe_ep_bf16_to_f32(x[i]);
        if (!ctx->calibrate) moe_ep_ref_round_row(af, xq, H, l->cfg.fc1_input_scale);
    }
}

static void expert_item(void *ctx_, int item, int thread)
{
    fwd_ctx_t *ctx = ctx_;
    moe_ep_layer_t l = ctx->layer;
    struct moe_ep_ref_state *s = l->ref;
    const moe_ep_expert_bytes_t *b = &l->expert_bytes;
    int64_t H = l->cfg.hidden, I = l->cfg.intermediate;
    int le = ctx->item_expert[item], n = ctx->item_count[item];
    const int64_t *rows = ctx->rows_by_expert + ctx->item_first[item];
    moe_ep_format_t wf = l->weight_format, af = moe_ep_path_act_format(l->cfg.path);
    float *wrow = malloc((size_t)(H > I ? H : I) * sizeof(float));
    float *h = malloc((size_t)(n * 2 * I) * sizeof(float));
    float *a = malloc((size_t)(n * I) * sizeof(float));
    float *y = malloc((size_t)(n * H) * sizeof(float));
    const float *xr[REF_ROWS_PER_ITEM], *ar[REF_ROWS_PER_ITEM];
    if (!wrow || !h || !a || !y) {
        atomic_store(&ctx->failed, 1);
        goto done;
    }
    for (int i = 0; i < n; i++) xr[i] = ctx->xq + ctx->token_of_row[rows[i]] * H, ar[i] = a + i * I;
    for (int64_t j = 0; j < 2 * I; j++) {
        moe_ep_ref_weight_row(wf, s->w13 + le * b->w13_data, s->w13_scales + le * b->w13_scales,
                              s->w13_gs[le], H, j, wrow);
        dot_rows(wrow, xr, n, H, h + j, 2 * I);
    }
    for (int i = 0; i < n; i++) {
        float *ai = a + i * I, *hi = h + i * 2 * I;
        for (int64_t g = 0; g < I; g++) ai[g] = moe_ep_swiglu(hi[g], hi[I + g], l->cfg.swiglu_limit);
        if (ctx->calibrate)
            for (int64_t g = 0; g < I; g++) atomic_max_float(&ctx->amax_act, fabsf(ai[g]));
        else
            moe_ep_ref_round_row(af, ai, I, l->cfg.fc2_input_scale);
    }
    if (ctx->calibrate) goto done;
    for (int64_t j = 0; j < H; j++) {
        moe_ep_ref_weight_row(wf, s->w2 + le * b->w2_data, s->w2_scales + le * b->w2_scales,
                              s->w2_gs[le], I, j, wrow);
        dot_rows(wrow, ar, n, I, y + j, H);
    }
    for (int i = 0; i < n; i++) memcpy(ctx->y + rows[i] * H, y + i * H, (size_t)H * sizeof(float));
    for (int i = 0; i < n; i++)
        moe_ep_ref_round_row(moe_ep_wire_format(l->cfg.wire), ctx->y + rows[i] * H, H, 1.0f);
done:
    free(wrow);
    free(h);
    free(a);
    free(y);
}

/* out_t = bf16(sum over k in slot order of fmaf(w[t,k], y_tk, acc)). */
static void combine_rank(void *ctx_, int r, int thread)
{
    fwd_ctx_t *ctx = ctx_;
    moe_ep_layer_t l = ctx->layer;
    int64_t H = l->cfg.hidden, K = l->cfg.top_k;
    const moe_ep_forward_args_t *a = ctx->args;
    int64_t T = a->num_tokens[r], row0 = ctx->token_base[r] * K;
    for (int64_t t = 0; t < T; t++) {
        uint16_t *out = a->out[r] + t * H;
        for (int64_t i = 0; i < H; i++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                if (a->topk_ids[r][t * K + k] < 0) continue;
                acc = fmaf(a->topk_weights[r][t * K + k], ctx->y[(row0 + t * K + k) * H + i], acc);
            }
            out[i] = moe_ep_bf16_from_f32(acc);
        }
    }
}

static moe_ep_status_t check_ids(moe_ep_layer_t l, const moe_ep_forward_args_t *a)
{
    int nr = l->group->local_ranks, K = l->cfg.top_k, E = l->cfg.num_experts;
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < (int64_t)a->num_tokens[r] * K; i++) {
            int32_t id = a->topk_ids[r][i];
            MOE_EP_REQUIRE(id >= -1 && id < E, "rank %d token %lld slot %lld: expert id %d not in [-1, %d)",
                           l->group->first_rank + r, (long long)(i / K), (long long)(i % K), id, E);
            MOE_EP_REQUIRE(id < 0 || (id >= l->first_expert && id < l->first_expert + l->num_local_experts),
                           "expert %d is not on this process's ranks (the reference backend needs an emulated group)", id);
        }
    return MOE_EP_SUCCESS;
}

/* Counting sort of rows by expert, then work items of <= REF_ROWS_PER_ITEM rows. */
static int plan_rows(fwd_ctx_t *c, int64_t rows)
{
    moe_ep_layer_t l = c->layer;
    int nr = l->group->local_ranks, K = l->cfg.top_k, nle = l->num_local_experts;
    int n_items = 0;
    memset(c->expert_start, 0, (size_t)(nle + 1) * sizeof(int64_t));
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < (int64_t)c->args->num_tokens[r] * K; i++) {
            int32_t id = c->args->topk_ids[r][i];
            if (id >= 0) c->expert_start[id - l->first_expert + 1]++;
        }
    for (int e = 0; e < nle; e++) c->expert_start[e + 1] += c->expert_start[e];
    int64_t *fill = calloc((size_t)nle, sizeof(int64_t));
    if (!fill) return -1;
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < (int64_t)c->args->num_tokens[r] * K; i++) {
            int32_t id = c->args->topk_ids[r][i];
            int64_t row = c->token_base[r] * K + i;
            c->token_of_row[row] = c->token_base[r] + i / K;
            if (id < 0) continue;
            int le = id - l->first_expert;
            c->rows_by_expert[c->expert_start[le] + fill[le]++] = row;
        }
    free(fill);
    for (int e = 0; e < nle; e++)
        for (int64_t f = c->expert_start[e]; f < c->expert_start[e + 1]; f += REF_ROWS_PER_ITEM) {
            int64_t left = c->expert_start[e + 1] - f;
            c->item_expert[n_items] = e;
            c->item_first[n_items] = f;
            c->item_count[n_items] = (int)(left < REF_ROWS_PER_ITEM ? left : REF_ROWS_PER_ITEM);
            n_items++;
        }
    (void)rows;
    return n_items;
}

static void free_ctx(fwd_ctx_t *c)
{
    free(c->token_of_row);
    free(c->rows_by_expert);
    free(c->expert_start);
    free(c->item_expert);
    free(c->item_first);
    free(c->item_count);
    free(c->xq);
    free(c->y);
    free(c->token_base);
}

/* Runs the expert stage; on success ctx holds y (or amax_act when calibrating). */
static moe_ep_status_t run_experts(fwd_ctx_t *c)
{
    moe_ep_layer_t l = c->layer;
    int nr = l->group->local_ranks, K = l->cfg.top_k;
    int64_t H = l->cfg.hidden;
    MOE_EP_CHECK(check_ids(l, c->args));
    c->token_base = calloc((size_t)nr + 1, sizeof(int64_t));
    if (!c->token_base) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "token offsets");
    for (int r = 0; r < nr; r++) c->token_base[r + 1] = c->token_base[r] + c->args->num_tokens[r];
    int64_t tokens = c->token_base[nr], rows = tokens * K;
    size_t nrow = (size_t)rows + 1;
    c->token_of_row = malloc(nrow * sizeof(int64_t));
    c->rows_by_expert = malloc(nrow * sizeof(int64_t));
    c->expert_start = malloc(((size_t)l->num_local_experts + 1) * sizeof(int64_t));
    size_t max_items = nrow + (size_t)l->num_local_experts;
    c->item_expert = malloc(max_items * sizeof(int));
    c->item_first = malloc(max_items * sizeof(int64_t));
    c->item_count = malloc(max_items * sizeof(int));
    c->xq = malloc(((size_t)tokens + 1) * (size_t)H * sizeof(float));
    c->y = c->calibrate ? NULL : malloc(nrow * (size_t)H * sizeof(float));
    if (!c->token_of_row || !c->rows_by_expert || !c->expert_start || !c->item_expert ||
        !c->item_first || !c->item_count || !c->xq || (!c->calibrate && !c->y))
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "reference forward buffers (%lld rows)",
                           (long long)rows);
    int n_items = plan_rows(c, rows);
    if (n_items < 0) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "row plan");
    moe_ep_parallel_for(nr, l->cfg.num_threads, round_tokens, c);
    moe_ep_parallel_for(n_items, l->cfg.num_threads, expert_item, c);
    if (atomic_load(&c->failed))
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "reference expert scratch");
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_ref_forward(moe_ep_layer_t l, const moe_ep_forward_args_t *args)
{
    fwd_ctx_t c;
    memset(&c, 0, sizeof c);
    c.layer = l;
    c.args = args;
    moe_ep_status_t st = run_experts(&c);
    if (st == MOE_EP_SUCCESS) moe_ep_parallel_for(l->group->local_ranks, l->cfg.num_threads, combine_rank, &c);
    free_ctx(&c);
    return st;
}

static float x_amax(const moe_ep_forward_args_t *a, int nr, int64_t H)
{
    float amax = 0.0f;
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < (int64_t)a->num_tokens[r] * H; i++) {
            float v = fabsf(moe_ep_bf16_to_f32(a->x[r][i]));
            if (v > amax) amax = v;
        }
    return amax;
}

moe_ep_status_t moe_ep_ref_calibrate_nvfp4(moe_ep_layer_t l, const moe_ep_forward_args_t *args,
                                           float *fc1_input_scale, float *fc2_input_scale)
{
    fwd_ctx_t c;
    memset(&c, 0, sizeof c);
    c.layer = l;
    c.args = args;
    c.calibrate = 1;
    moe_ep_status_t st = run_experts(&c);
    if (st == MOE_EP_SUCCESS) {
        *fc1_input_scale = moe_ep_nvfp4_global_scale(x_amax(args, l->group->local_ranks, l->cfg.hidden));
        *fc2_input_scale = moe_ep_nvfp4_global_scale(atomic_load(&c.amax_act));
    }
    free_ctx(&c);
    return st;
}
