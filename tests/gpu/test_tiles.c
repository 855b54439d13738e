/* GEMM tile kernels agree bit for bit: the split backend picks 16-row tiles
 * (mma.sync) for decode-sized batches, 64-row tiles (mma.sync) in between and
 * 128-row tiles (TMA + wgmma, bf16) for large ones. A token's output must not
 * depend on that choice (batch invariance), and the large batch must match the
 * CPU reference. Exits 77 without a usable GPU. */
#include "layer_fixture.h"
#include "test_util.h"

#include "formats/codec.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_tiles"
#include "cuda_check.h"

/* Split backend, one rank, tokens [t0, t0 + T) of the fixture -> out (host). */
/* tile_rows: explicit knobs.gemm_tile_rows, 0 = the heuristic's. */
static moe_ep_status_t gpu_run(const fixture_t *f, moe_ep_path_t path, int t0, int T, int max_tokens, int tile_rows,
                               uint16_t *out)
{
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    moe_ep_status_t st = moe_ep_group_create_emulated(1, 0, &g);
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = f->E, c.top_k = f->K, c.hidden = f->H, c.intermediate = f->I;
    c.max_tokens_per_rank = max_tokens, c.path = path, c.backend = MOE_EP_BACKEND_SPLIT;
    c.swiglu_limit = f->swiglu_limit;
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = tile_rows;
    if (tile_rows) c.knobs = &k;
    if (path == MOE_EP_PATH_NVFP4) /* the activation scales fixture_run gives the reference */
        c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 2.0f;
    if (!st) st = moe_ep_layer_create(g, &c, &l);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = f->E, w.w13 = f->w13, w.w2 = f->w2;
    if (!st) st = moe_ep_layer_load_experts(l, &w, NULL);
    size_t nx = (size_t)T * f->H * 2, nk = (size_t)T * f->K * 4;
    void *dx, *dout, *dids, *dw;
    CK(cudaMalloc(&dx, nx + 16));
    CK(cudaMalloc(&dout, nx + 16));
    CK(cudaMalloc(&dids, nk + 16));
    CK(cudaMalloc(&dw, nk + 16));
    CK(cudaMemcpy(dx, f->x + (size_t)t0 * f->H, nx, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dids, f->ids + (size_t)t0 * f->K, nk, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, f->weights + (size_t)t0 * f->K, nk, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xFF, nx)); /* poison: bf16 NaN */
    int32_t nt[1] = {T};
    const uint16_t *x[1] = {dx};
    const int32_t *ids[1] = {dids};
    const float *wt[1] = {dw};
    uint16_t *o[1] = {dout};
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = nt, a.x = x, a.topk_ids = ids, a.topk_weights = wt, a.out = o;
    if (!st) st = moe_ep_layer_forward(l, &a, NULL);
    CK(cudaDeviceSynchronize());
    moe_ep_status_t dev = MOE_EP_SUCCESS;
    if (!st) moe_ep_group_get_async_error(g, &dev);
    if (!st) st = dev;
    CK(cudaMemcpy(out, dout, nx, cudaMemcpyDeviceToHost));
    cudaFree(dx), cudaFree(dout), cudaFree(dids), cudaFree(dw);
    moe_ep_layer_destroy(l);
    moe_ep_group_destroy(g);
    return st;
}

static double rel_l2(const uint16_t *got, const uint16_t *want, size_t n, int *nan)
{
    double num = 0, den = 0;
    *nan = 0;
    for (size_t i = 0; i < n; i++) {
        double gv = moe_ep_bf16_to_f32(got[i]), wv = moe_ep_bf16_to_f32(want[i]);
        if (isnan(gv)) (*nan)++;
        num += (gv - wv) * (gv - wv), den += wv * wv;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Multiplies element i of each 32-block b of every row of a [rows][n] bf16
 * matrix by 2^((b * 7 + row * 3) % (2 span + 1) - span): 32-blocks of one
 * 128-wide K block then differ by up to 2^(2 span) (the register tile folds
 * an MX block's scale into fp16 only exactly up to 2^15 below the largest
 * for E4M3, 2^23 for E2M1). */
static void spread_blocks(uint16_t *m, int rows, int n, int span)
{
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) {
            int e = ((i / 32) * 7 + r * 3) % (2 * span + 1) - span;
            m[(size_t)r * n + i] = moe_ep_bf16_from_f32(ldexpf(moe_ep_bf16_to_f32(m[(size_t)r * n + i]), e));
        }
}

/* Large batch (128-row tiles for bf16) vs the reference, and its first tokens
 * run alone in smaller batches (16- or 64-row mma.sync tiles; the register
 * tile's 16- to 64-row instances), bit for bit.
 * spread: activations and W13 with 32-blocks of very different magnitudes. */
static void test_path(moe_ep_path_t path, int spread, uint64_t *rng)
{
    enum { E = 4, K = 2, H = 512, I = 256, T = 512 };
    fixture_t f;
    fixture_init(&f, E, K, H, I, T, ROUTE_UNIFORM, rng);
    if (spread) spread_blocks(f.x, T, H, 20), spread_blocks(f.w13, E * 2 * I, H, 10);
    for (int t = 0; t < T; t++) /* distinct experts per token */
        if (f.ids[t * K + 1] == f.ids[t * K]) f.ids[t * K + 1] = (f.ids[t * K] + 1) % E;
    size_t n = (size_t)T * H;
    uint16_t *big = malloc(2 * n), *ref = malloc(2 * n), *small = malloc(2 * n), *mid = malloc(2 * n);
    memset(ref, 0xFF, 2 * n);
    moe_ep_status_t st = fixture_run(&f, 1, path, MOE_EP_WIRE_BF16, ref);
    EXPECT(st == MOE_EP_SUCCESS, "reference: %s", moe_ep_last_error());
    st = gpu_run(&f, path, 0, T, T, 0, big);
    EXPECT(st == MOE_EP_SUCCESS, "%s large: %s", moe_ep_path_name(path), moe_ep_last_error());
    int nan;
    double err = rel_l2(big, ref, n, &nan);
    double tol = path == MOE_EP_PATH_BF16 ? 5e-3 : path == MOE_EP_PATH_NVFP4 || path == MOE_EP_PATH_W4A8 ? 2e-2 : 1e-2;
    printf("  %-9s T=%d (%d rows per expert)%s: rel L2 vs reference %.3e, unwritten %d\n", moe_ep_path_name(path), T,
           T * K / E, spread ? ", 32-blocks spread" : "", err, nan);
    EXPECT(nan == 0 && err <= tol, "%s: rel L2 %.3e (tol %.0e), %d unwritten", moe_ep_path_name(path), err, tol, nan);
    for (size_t i = 0, shown = 0; i < n && shown < 6 && err > tol; i++) /* where the large batch is off */
        if (fabsf(moe_ep_bf16_to_f32(big[i]) - moe_ep_bf16_to_f32(ref[i])) > 0.05f * (1.0f + fabsf(moe_ep_bf16_to_f32(ref[i])))) {
            printf("    token %zu col %zu: gpu %g ref %g\n", i / H, i % H, moe_ep_bf16_to_f32(big[i]), moe_ep_bf16_to_f32(ref[i]));
            shown++;
        }
    /* 4, 12, 20 and 48 rows per expert on average: the register tile's 16-
     * 32-, 64- and 128-row instances; bf16 16, 16, 128, 128 */
    static const int firsts[] = {8, 24, 40, 96};
    for (int i = 0; i < 4; i++) {
        const int n_tok = firsts[i];
        uint16_t *part = i == 0 ? small : mid;
        st = gpu_run(&f, path, 0, n_tok, T, 0, part);
        EXPECT(st == MOE_EP_SUCCESS, "%s %d tokens: %s", moe_ep_path_name(path), n_tok, moe_ep_last_error());
        EXPECT(memcmp(part, big, (size_t)n_tok * H * 2) == 0,
               "%s: %d tokens alone differ from the same tokens in a batch of %d", moe_ep_path_name(path), n_tok, T);
    }
    /* The 128-row register tile at 20, 40, 80 and 112 rows per expert on
     * average: its wgmma N follows each tile's valid rows (64, 96 or 128:
     * fr_consume), the same bits as the full tiles of the batch of T. */
    static const int wide[] = {40, 80, 160, 224};
    for (int i = 0; i < 4 && path != MOE_EP_PATH_BF16; i++) {
        st = gpu_run(&f, path, 0, wide[i], T, 128, mid);
        EXPECT(st == MOE_EP_SUCCESS, "%s %d tokens, 128-row tiles: %s", moe_ep_path_name(path), wide[i], moe_ep_last_error());
        EXPECT(memcmp(mid, big, (size_t)wide[i] * H * 2) == 0,
               "%s: %d tokens on 128-row tiles differ from the same tokens in a batch of %d", moe_ep_path_name(path),
               wide[i], T);
    }
    free(big), free(ref), free(small), free(mid);
    fixture_free(&f);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_tiles: no usable CUDA device, skipped\n");
        return 77;
    }
    uint64_t rng = test_seed();
    printf("tile kernels (16-row mma.sync, 64-row mma.sync, 128-row wgmma for bf16) agree\n");
    for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) test_path((moe_ep_path_t)p, 0, &rng);
    test_path(MOE_EP_PATH_MXFP8, 1, &rng);
    test_path(MOE_EP_PATH_W4A8, 1, &rng);
    return test_summary("test_tiles");
}
