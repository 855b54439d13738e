/* The reference layer: against an independent float64 computation, EP-size
 * invariance, routing cases, pre-quantized loading, NVFP4 calibration. */
#include "layer_fixture.h"
#include "test_util.h"

#include "formats/codec.h"
#include "reference/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int quick(void) { return getenv("MOE_EP_TEST_QUICK") != NULL; }

static moe_ep_format_t weight_format(moe_ep_path_t p)
{
    static const moe_ep_format_t f[] = {MOE_EP_FORMAT_BF16, MOE_EP_FORMAT_MXFP8, MOE_EP_FORMAT_NVFP4,
                                        MOE_EP_FORMAT_MXFP4, MOE_EP_FORMAT_FP8_BLOCK};
    return f[p];
}

static moe_ep_format_t act_format(moe_ep_path_t p)
{
    static const moe_ep_format_t f[] = {MOE_EP_FORMAT_BF16, MOE_EP_FORMAT_MXFP8, MOE_EP_FORMAT_NVFP4,
                                        MOE_EP_FORMAT_MXFP8, MOE_EP_FORMAT_FP8_BLOCK};
    return f[p];
}

static size_t scale_bytes(moe_ep_format_t f, int64_t rows, int64_t cols)
{
    static const int block[] = {1, 32, 16, 32, 128, 16}, bytes[] = {0, 1, 1, 1, 4, 2};
    return (size_t)(rows * (cols / block[f]) * bytes[f]) + 4;
}

static size_t data_bytes(moe_ep_format_t f, int64_t rows, int64_t cols)
{
    if (f == MOE_EP_FORMAT_BF16) return (size_t)(rows * cols * 2);
    int fp4 = f == MOE_EP_FORMAT_NVFP4 || f == MOE_EP_FORMAT_MXFP4 || f == MOE_EP_FORMAT_FP4_WIRE;
    return (size_t)(fp4 ? rows * cols / 2 : rows * cols);
}

/* Quantizes then dequantizes a [rows][cols] fp32 matrix in place through the
 * public codec (FP8-BLOCK weights on 128x128 tiles when tiles = 1). */
static void round_matrix(moe_ep_format_t f, float *m, int64_t rows, int64_t cols, float gs, int tiles)
{
    uint8_t *d = malloc(data_bytes(f, rows, cols) + 4), *s = malloc(scale_bytes(f, rows, cols) + (size_t)rows * cols / 32);
    if (f == MOE_EP_FORMAT_FP8_BLOCK && tiles) {
        moe_ep_quantize_fp8_block_weight(m, rows, cols, d, (float *)(void *)s);
        moe_ep_dequantize_fp8_block_weight(d, (const float *)(const void *)s, rows, cols, m);
    } else {
        moe_ep_quantize(f, m, rows, cols, gs, d, s);
        moe_ep_dequantize(f, d, s, rows, cols, gs, m);
    }
    free(d);
    free(s);
}

static float amax_of(const float *m, int64_t n)
{
    float a = 0;
    for (int64_t i = 0; i < n; i++) a = fabsf(m[i]) > a ? fabsf(m[i]) : a;
    return a;
}

/* Independent float64 implementation with the same rounding points. */
static void naive_layer(const fixture_t *f, moe_ep_path_t path, moe_ep_wire_t wire, double *out)
{
    int64_t H = f->H, I = f->I, K = f->K;
    moe_ep_format_t wf = weight_format(path), af = act_format(path);
    moe_ep_format_t yf = wire == MOE_EP_WIRE_BF16 ? MOE_EP_FORMAT_BF16
                         : wire == MOE_EP_WIRE_MXFP8 ? MOE_EP_FORMAT_MXFP8 : MOE_EP_FORMAT_FP4_WIRE;
    float s1 = 2688.0f / 5.0f, s2 = 2688.0f / 2.0f;
    float *w13 = malloc(sizeof(float) * (size_t)(f->E * 2 * I * H));
    float *w2 = malloc(sizeof(float) * (size_t)(f->E * H * I));
    for (int64_t i = 0; i < f->E * 2 * I * H; i++) w13[i] = moe_ep_bf16_to_f32(f->w13[i]);
    for (int64_t i = 0; i < f->E * H * I; i++) w2[i] = moe_ep_bf16_to_f32(f->w2[i]);
    for (int e = 0; e < f->E; e++) {
        float *a = w13 + e * 2 * I * H, *b = w2 + e * H * I;
        round_matrix(wf, a, 2 * I, H, moe_ep_nvfp4_global_scale(amax_of(a, 2 * I * H)), 1);
        round_matrix(wf, b, H, I, moe_ep_nvfp4_global_scale(amax_of(b, H * I)), 1);
    }
    float *xq = malloc(sizeof(float) * (size_t)H), *act = malloc(sizeof(float) * (size_t)I);
    float *y = malloc(sizeof(float) * (size_t)H);
    double *h = malloc(sizeof(double) * (size_t)(2 * I));
    for (int t = 0; t < f->total_tokens; t++) {
        double *o = out + t * H;
        for (int64_t j = 0; j < H; j++) o[j] = 0;
        for (int64_t i = 0; i < H; i++) xq[i] = moe_ep_bf16_to_f32(f->x[t * H + i]);
        round_matrix(af, xq, 1, H, s1, 0);
        for (int64_t k = 0; k < K; k++) {
            int e = f->ids[t * K + k];
            if (e < 0) continue;
            for (int64_t j = 0; j < 2 * I; j++) {
                double acc = 0;
                for (int64_t d = 0; d < H; d++) acc += (double)w13[(e * 2 * I + j) * H + d] * xq[d];
                h[j] = acc;
            }
            for (int64_t g = 0; g < I; g++) {
                double c = f->swiglu_limit, gv = h[g] < c ? h[g] : c;
                double uv = h[I + g] < -c ? -c : (h[I + g] > c ? c : h[I + g]);
                act[g] = (float)(gv / (1.0 + exp(-gv)) * uv);
            }
            round_matrix(af, act, 1, I, s2, 0);
            for (int64_t j = 0; j < H; j++) {
                double acc = 0;
                for (int64_t d = 0; d < I; d++) acc += (double)w2[(e * H + j) * I + d] * act[d];
                y[j] = (float)acc;
            }
            round_matrix(yf, y, 1, H, 1.0f, 0);
            for (int64_t j = 0; j < H; j++) o[j] += (double)f->weights[t * K + k] * y[j];
        }
    }
    free(w13), free(w2), free(xq), free(act), free(y), free(h);
}

static double rel_l2(const uint16_t *got, const double *want, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = moe_ep_bf16_to_f32(got[i]), d = g - want[i];
        if (isnan(g)) return INFINITY;
        num += d * d, den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_against_float64(uint64_t *rng)
{
    fixture_t f;
    fixture_init(&f, 8, 3, 256, 128, quick() ? 8 : 24, ROUTE_UNIFORM, rng);
    int64_t n = (int64_t)f.total_tokens * f.H;
    uint16_t *out = malloc(sizeof(uint16_t) * (size_t)n);
    double *want = malloc(sizeof(double) * (size_t)n);
    for (int p = 0; p < MOE_EP_PATH_COUNT_; p++)
        for (int w = 0; w < MOE_EP_WIRE_COUNT_; w++) {
            if (quick() && w > 0 && p > 0) continue;
            memset(out, 0xFF, sizeof(uint16_t) * (size_t)n); /* poison: NaN */
            moe_ep_status_t st = fixture_run(&f, 2, (moe_ep_path_t)p, (moe_ep_wire_t)w, out);
            EXPECT(st == MOE_EP_SUCCESS, "path %d wire %d: %s", p, w, moe_ep_last_error());
            naive_layer(&f, (moe_ep_path_t)p, (moe_ep_wire_t)w, want);
            /* bf16 output rounding alone is ~2e-3; where activations or the combine wire are
             * quantized, a value near a rounding boundary can round the other way in fp32 vs
             * float64, and one FP4 wire element that does moves rel L2 by ~5e-3 at 8 tokens. */
            double tol_path = p == MOE_EP_PATH_BF16 ? 4e-3 : p == MOE_EP_PATH_NVFP4 ? 2e-2 : 1e-2;
            double tol_wire = w == MOE_EP_WIRE_FP4 ? 2e-2 : w == MOE_EP_WIRE_MXFP8 ? 1e-2 : 0;
            double tol = tol_path > tol_wire ? tol_path : tol_wire;
            double err = rel_l2(out, want, n);
            EXPECT(err < tol, "path %s wire %s: rel L2 %.3g vs float64", moe_ep_path_name(p),
                   moe_ep_wire_name(w), err);
        }
    free(out), free(want);
    fixture_free(&f);
}

static void test_ep_invariance(uint64_t *rng)
{
    route_t routes[] = {ROUTE_UNIFORM, ROUTE_ONE_EXPERT, ROUTE_ONE_RANK, ROUTE_SPARSE};
    for (int ri = 0; ri < 4; ri++) {
        fixture_t f;
        fixture_init(&f, 16, 4, 128, 128, 16, routes[ri], rng);
        int64_t n = (int64_t)f.total_tokens * f.H;
        uint16_t *base = malloc(2 * (size_t)n), *out = malloc(2 * (size_t)n);
        for (int p = 0; p < MOE_EP_PATH_COUNT_; p++) {
            if (quick() && p != MOE_EP_PATH_MXFP8) continue;
            moe_ep_wire_t wire = (moe_ep_wire_t)(p % MOE_EP_WIRE_COUNT_);
            memset(base, 0xFF, 2 * (size_t)n);
            EXPECT(fixture_run(&f, 1, (moe_ep_path_t)p, wire, base) == MOE_EP_SUCCESS, "%s", moe_ep_last_error());
            for (int R = 2; R <= 8; R *= 2) {
                memset(out, 0xFF, 2 * (size_t)n);
                EXPECT(fixture_run(&f, R, (moe_ep_path_t)p, wire, out) == MOE_EP_SUCCESS, "%s", moe_ep_last_error());
                EXPECT(memcmp(base, out, 2 * (size_t)n) == 0, "route %d path %s: R=%d differs from R=1",
                       ri, moe_ep_path_name(p), R);
            }
            /* Run-to-run determinism. */
            memset(out, 0xFF, 2 * (size_t)n);
            fixture_run(&f, 1, (moe_ep_path_t)p, wire, out);
            EXPECT(memcmp(base, out, 2 * (size_t)n) == 0, "route %d path %s: not deterministic", ri, moe_ep_path_name(p));
        }
        if (routes[ri] == ROUTE_SPARSE) {
            /* A token with every slot -1 gets zeros. */
            for (int t = 0; t < f.total_tokens; t++) {
                int used = 0;
                for (int k = 0; k < f.K; k++) used |= f.ids[t * f.K + k] >= 0;
                for (int i = 0; !used && i < f.H; i++) EXPECT(base[t * f.H + i] == 0, "token %d unused but nonzero", t);
            }
        }
        free(base), free(out);
        fixture_free(&f);
    }
}

/* Batch invariance: a token's output does not depend on its neighbours. */
static void test_batch_invariance(uint64_t *rng)
{
    fixture_t f;
    fixture_init(&f, 8, 2, 128, 128, 8, ROUTE_UNIFORM, rng);
    uint16_t full[8 * 128], one[128];
    EXPECT(fixture_run(&f, 1, MOE_EP_PATH_MXFP8, MOE_EP_WIRE_MXFP8, full) == 0, "%s", moe_ep_last_error());
    fixture_t g = f;
    g.total_tokens = 1;
    g.x = f.x + 5 * 128, g.ids = f.ids + 5 * 2, g.weights = f.weights + 5 * 2;
    EXPECT(fixture_run(&g, 1, MOE_EP_PATH_MXFP8, MOE_EP_WIRE_MXFP8, one) == 0, "%s", moe_ep_last_error());
    EXPECT(memcmp(one, full + 5 * 128, sizeof one) == 0, "token 5 alone differs from token 5 in a batch");
    fixture_free(&f);
}

/* Loading pre-quantized weights gives the same bytes as loading bf16. */
static void test_prequantized(uint64_t *rng)
{
    fixture_t f;
    fixture_init(&f, 4, 2, 256, 128, 8, ROUTE_UNIFORM, rng);
    int64_t H = f.H, I = f.I, n = (int64_t)f.total_tokens * H;
    for (int p = 1; p < MOE_EP_PATH_COUNT_; p++) {
        moe_ep_format_t wf = weight_format((moe_ep_path_t)p);
        size_t d13 = data_bytes(wf, 2 * I, H), d2 = data_bytes(wf, H, I);
        size_t s13 = wf == MOE_EP_FORMAT_FP8_BLOCK ? (size_t)(2 * I / 128 * H / 128 * 4) : scale_bytes(wf, 2 * I, H) - 4;
        size_t s2 = wf == MOE_EP_FORMAT_FP8_BLOCK ? (size_t)(H / 128 * I / 128 * 4) : scale_bytes(wf, H, I) - 4;
        uint8_t *q13 = malloc(d13 * 4), *q2 = malloc(d2 * 4), *sc13 = malloc(s13 * 4), *sc2 = malloc(s2 * 4);
        float gs13[4], gs2[4], *tmp = malloc(sizeof(float) * (size_t)(2 * I * H));
        for (int e = 0; e < 4; e++) {
            for (int64_t i = 0; i < 2 * I * H; i++) tmp[i] = moe_ep_bf16_to_f32(f.w13[e * 2 * I * H + i]);
            gs13[e] = moe_ep_nvfp4_global_scale(amax_of(tmp, 2 * I * H));
            if (wf == MOE_EP_FORMAT_FP8_BLOCK) moe_ep_quantize_fp8_block_weight(tmp, 2 * I, H, q13 + e * d13, (float *)(void *)(sc13 + e * s13));
            else moe_ep_quantize(wf, tmp, 2 * I, H, gs13[e], q13 + e * d13, sc13 + e * s13);
            for (int64_t i = 0; i < H * I; i++) tmp[i] = moe_ep_bf16_to_f32(f.w2[e * H * I + i]);
            gs2[e] = moe_ep_nvfp4_global_scale(amax_of(tmp, H * I));
            if (wf == MOE_EP_FORMAT_FP8_BLOCK) moe_ep_quantize_fp8_block_weight(tmp, H, I, q2 + e * d2, (float *)(void *)(sc2 + e * s2));
            else moe_ep_quantize(wf, tmp, H, I, gs2[e], q2 + e * d2, sc2 + e * s2);
        }
        uint16_t *a = malloc(2 * (size_t)n), *b = malloc(2 * (size_t)n);
        EXPECT(fixture_run(&f, 2, (moe_ep_path_t)p, MOE_EP_WIRE_BF16, a) == 0, "%s", moe_ep_last_error());
        /* Same layer, weights given pre-quantized. */
        moe_ep_group_t g;
        moe_ep_layer_t l;
        moe_ep_group_create_emulated(2, -1, &g);
        moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
        c.num_experts = 4, c.top_k = 2, c.hidden = (int)H, c.intermediate = (int)I, c.max_tokens_per_rank = 4;
        c.path = (moe_ep_path_t)p, c.swiglu_limit = f.swiglu_limit;
        c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 2.0f;
        EXPECT(moe_ep_layer_create(g, &c, &l) == 0, "%s", moe_ep_last_error());
        moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
        w.format = wf, w.first_expert = 0, w.num_experts = 4;
        w.w13 = q13, w.w13_scales = sc13, w.w2 = q2, w.w2_scales = sc2, w.w13_global_scale = gs13, w.w2_global_scale = gs2;
        EXPECT(moe_ep_layer_load_experts(l, &w, NULL) == 0, "%s", moe_ep_last_error());
        int32_t nt[2] = {4, 4};
        const uint16_t *x[2] = {f.x, f.x + 4 * H};
        const int32_t *ids[2] = {f.ids, f.ids + 8};
        const float *wt[2] = {f.weights, f.weights + 8};
        uint16_t *o[2] = {b, b + 4 * H};
        moe_ep_forward_args_t args = MOE_EP_FORWARD_ARGS_INIT;
        args.num_tokens = nt, args.x = x, args.topk_ids = ids, args.topk_weights = wt, args.out = o;
        EXPECT(moe_ep_layer_forward(l, &args, NULL) == 0, "%s", moe_ep_last_error());
        EXPECT(memcmp(a, b, 2 * (size_t)n) == 0, "path %s: pre-quantized load differs from bf16 load", moe_ep_path_name(p));
        moe_ep_layer_destroy(l);
        moe_ep_group_destroy(g);
        free(q13), free(q2), free(sc13), free(sc2), free(tmp), free(a), free(b);
    }
    fixture_free(&f);
}

/* The reference's fast weight-row decoder equals the public codec's
 * dequantization bit for bit, on random bytes covering every code. */
static void test_weight_rows(uint64_t *rng)
{
    enum { ROWS = 128, COLS = 256 };
    static uint8_t data[ROWS * COLS * 2], scales[ROWS * COLS];
    static float want[ROWS * COLS], got[COLS];
    for (int f = 0; f < MOE_EP_FORMAT_FP4_WIRE; f++) {
        for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)test_rand_u64(rng);
        for (size_t i = 0; i < sizeof scales; i++) scales[i] = (uint8_t)(100 + test_rand_u64(rng) % 40);
        if (f == MOE_EP_FORMAT_BF16)
            for (size_t i = 0; i < sizeof data; i += 2) data[i + 1] &= 0x7F; /* no NaN / huge */
        if (f == MOE_EP_FORMAT_FP8_BLOCK) {
            float *fs = (float *)(void *)scales;
            for (int i = 0; i < (ROWS / 128) * (COLS / 128); i++) fs[i] = (float)test_rand_uniform(rng) * 0.01f;
            moe_ep_dequantize_fp8_block_weight(data, fs, ROWS, COLS, want);
        } else {
            moe_ep_dequantize((moe_ep_format_t)f, data, scales, ROWS, COLS, 3.5f, want);
        }
        int same = 1;
        for (int r = 0; r < ROWS; r++) {
            moe_ep_ref_weight_row((moe_ep_format_t)f, data, scales, 3.5f, COLS, r, got);
            for (int c = 0; c < COLS; c++) {
                float w = want[r * COLS + c], g = got[c];
                same &= (isnan(w) && isnan(g)) || memcmp(&w, &g, 4) == 0;
            }
        }
        EXPECT(same, "format %d: reference weight rows differ from moe_ep_dequantize", f);
    }
}

int main(void)
{
    uint64_t rng = test_seed();
    test_weight_rows(&rng);
    test_against_float64(&rng);
    test_ep_invariance(&rng);
    test_batch_invariance(&rng);
    test_prequantized(&rng);
    return test_summary("test_layer");
}
