#include "layer_fixture.h"

#include "test_util.h"

#include <stdlib.h>
#include <string.h>

void fixture_init(fixture_t *f, int E, int K, int H, int I, int total_tokens, route_t route,
                  uint64_t *rng)
{
    memset(f, 0, sizeof *f);
    f->E = E, f->K = K, f->H = H, f->I = I, f->total_tokens = total_tokens;
    f->swiglu_limit = 10.0f;
    f->w13 = malloc(sizeof(uint16_t) * (size_t)E * 2 * I * H);
    f->w2 = malloc(sizeof(uint16_t) * (size_t)E * H * I);
    f->x = malloc(sizeof(uint16_t) * ((size_t)total_tokens * H + 1));
    f->ids = malloc(sizeof(int32_t) * ((size_t)total_tokens * K + 1));
    f->weights = malloc(sizeof(float) * ((size_t)total_tokens * K + 1));
    test_fill_bf16(f->w13, (int64_t)E * 2 * I * H, 0.05f, rng);
    test_fill_bf16(f->w2, (int64_t)E * H * I, 0.05f, rng);
    test_fill_bf16(f->x, (int64_t)total_tokens * H, 1.0f, rng);
    for (int t = 0; t < total_tokens; t++) {
        for (int k = 0; k < K; k++) {
            int32_t id;
            switch (route) {
            case ROUTE_ONE_EXPERT: id = E - 1; break;
            case ROUTE_ONE_RANK: id = (int32_t)(test_rand_u64(rng) % (uint64_t)(E / 2 > 0 ? E / 2 : 1)); break;
            case ROUTE_SPARSE: id = test_rand_u64(rng) % 3 == 0 ? (int32_t)(test_rand_u64(rng) % (uint64_t)E) : -1; break;
            default: id = (int32_t)(test_rand_u64(rng) % (uint64_t)E); break;
            }
            f->ids[t * K + k] = id;
            f->weights[t * K + k] = (float)test_rand_uniform(rng);
        }
    }
}

void fixture_free(fixture_t *f)
{
    free(f->w13);
    free(f->w2);
    free(f->x);
    free(f->ids);
    free(f->weights);
}

moe_ep_forward_args_t fixture_args(fixture_ptrs_t *p, const fixture_t *f, int R, const int *first,
                                   const int32_t *nt, const uint16_t *x, const int32_t *ids, const float *wt,
                                   uint16_t *out)
{
    for (int r = 0; r < R && r < FIXTURE_MAX_RANKS; r++) {
        size_t t = (size_t)first[r];
        p->x[r] = x + t * f->H, p->out[r] = out ? out + t * f->H : NULL;
        p->ids[r] = ids + t * f->K, p->wt[r] = wt + t * f->K;
    }
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = nt, a.x = p->x, a.topk_ids = p->ids, a.topk_weights = p->wt, a.out = p->out;
    return a;
}

moe_ep_status_t fixture_run(const fixture_t *f, int R, moe_ep_path_t path, moe_ep_wire_t wire,
                            uint16_t *out)
{
    moe_ep_group_t g = NULL;
    moe_ep_layer_t l = NULL;
    moe_ep_status_t st = moe_ep_group_create_emulated(R, -1, &g);
    if (st) return st;
    int T = f->total_tokens / R;
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = f->E, c.top_k = f->K, c.hidden = f->H, c.intermediate = f->I;
    c.max_tokens_per_rank = T > 0 ? T : 1;
    c.path = path, c.wire = wire, c.swiglu_limit = f->swiglu_limit;
    if (path == MOE_EP_PATH_NVFP4) c.fc1_input_scale = 2688.0f / 5.0f, c.fc2_input_scale = 2688.0f / 2.0f;
    st = moe_ep_layer_create(g, &c, &l);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = f->E, w.w13 = f->w13, w.w2 = f->w2;
    if (!st) st = moe_ep_layer_load_experts(l, &w, NULL);
    int32_t nt[FIXTURE_MAX_RANKS];
    int first[FIXTURE_MAX_RANKS];
    for (int r = 0; r < R && r < FIXTURE_MAX_RANKS; r++) nt[r] = T, first[r] = r * T;
    fixture_ptrs_t p;
    moe_ep_forward_args_t a = fixture_args(&p, f, R, first, nt, f->x, f->ids, f->weights, out);
    if (!st) st = moe_ep_layer_forward(l, &a, NULL);
    moe_ep_layer_destroy(l);
    moe_ep_group_destroy(g);
    return st;
}
