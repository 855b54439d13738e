/* API misuse: every bad call returns INVALID_ARGUMENT (or UNSUPPORTED for a
 * valid request this build cannot serve) with a message, and leaves outputs
 * untouched. */
#include "layer_fixture.h"
#include "test_util.h"

#include <string.h>

#define EXPECT_STATUS(call, want)                                                           \
    do {                                                                                    \
        moe_ep_status_t st_ = (call);                                                       \
        EXPECT(st_ == (want), "%s returned %s", #call, moe_ep_status_string(st_));          \
        EXPECT(st_ == MOE_EP_SUCCESS || moe_ep_last_error()[0] != '\0', "%s: no message", #call); \
    } while (0)

static moe_ep_layer_config_t small_config(void)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = 8, c.top_k = 2, c.hidden = 128, c.intermediate = 128, c.max_tokens_per_rank = 4;
    return c;
}

static void test_groups(void)
{
    moe_ep_group_t g = (moe_ep_group_t)0x1;
    EXPECT_STATUS(moe_ep_group_create_emulated(2, -1, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_group_create_emulated(0, -1, &g), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_group_create_emulated(-3, -1, &g), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_group_create_emulated(2, -7, &g), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT(g == (moe_ep_group_t)0x1, "group written on failure");
    int ws = -5;
    EXPECT_STATUS(moe_ep_group_world_size(NULL, &ws), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT(ws == -5, "world size written on failure");
    EXPECT_STATUS(moe_ep_group_destroy(NULL), MOE_EP_SUCCESS);
}

static void test_configs(moe_ep_group_t g)
{
    moe_ep_layer_t l = (moe_ep_layer_t)0x1;
    moe_ep_layer_config_t c;
#define BAD_CONFIG(stmt)                                                                  \
    do {                                                                                  \
        c = small_config();                                                               \
        stmt;                                                                             \
        EXPECT_STATUS(moe_ep_layer_create(g, &c, &l), MOE_EP_ERROR_INVALID_ARGUMENT);     \
        size_t db = 7, hb = 7;                                                            \
        EXPECT_STATUS(moe_ep_layer_memory_size(g, &c, &db, &hb), MOE_EP_ERROR_INVALID_ARGUMENT); \
        EXPECT(db == 7 && hb == 7, "memory sizes written on failure: " #stmt);          \
    } while (0)
    BAD_CONFIG(c.size = sizeof c - 4);
    BAD_CONFIG(c.size = 0);
    BAD_CONFIG(c.num_experts = 0);
    BAD_CONFIG(c.num_experts = 7); /* not a multiple of the world size 2 */
    BAD_CONFIG(c.top_k = 0);
    BAD_CONFIG(c.top_k = 9);
    BAD_CONFIG(c.hidden = 100);
    BAD_CONFIG(c.hidden = -128);
    BAD_CONFIG(c.intermediate = 64);
    BAD_CONFIG(c.max_tokens_per_rank = 0);
    BAD_CONFIG(c.path = (moe_ep_path_t)17);
    BAD_CONFIG(c.path = (moe_ep_path_t)-1);
    BAD_CONFIG(c.wire = (moe_ep_wire_t)9);
    BAD_CONFIG(c.backend = (moe_ep_backend_t)5);
    BAD_CONFIG(c.swiglu_limit = -1.0f);
    BAD_CONFIG(c.fc1_input_scale = -2.0f);
    BAD_CONFIG(c.num_threads = -1);
    BAD_CONFIG(c.timeout_seconds = -1.0);
    BAD_CONFIG(c.num_sms = -1);
    BAD_CONFIG(c.fp8_fast_accum = 2);
    EXPECT(l == (moe_ep_layer_t)0x1, "layer written on failure");
    c = small_config();
    EXPECT_STATUS(moe_ep_layer_create(NULL, &c, &l), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_create(g, NULL, &l), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_create(g, &c, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    /* Limits of the split backend are checked before anything else. */
    c = small_config();
    c.backend = MOE_EP_BACKEND_SPLIT, c.max_tokens_per_rank = 1 << 20, c.top_k = 8, c.num_experts = 1024;
    moe_ep_group_t big;
    EXPECT_STATUS(moe_ep_group_create_emulated(1024, -1, &big), MOE_EP_SUCCESS);
    EXPECT_STATUS(moe_ep_layer_create(big, &c, &l), MOE_EP_ERROR_INVALID_ARGUMENT);
    moe_ep_group_destroy(big);
    c = small_config();
    c.backend = MOE_EP_BACKEND_SPLIT, c.hidden = 65536;
    EXPECT_STATUS(moe_ep_layer_create(g, &c, &l), MOE_EP_ERROR_INVALID_ARGUMENT);
    c = small_config();
    /* A GPU backend on a CPU group is a valid request this group can't serve. */
    c.backend = MOE_EP_BACKEND_SPLIT;
    moe_ep_status_t st = moe_ep_layer_create(g, &c, &l);
    EXPECT(st == MOE_EP_ERROR_UNSUPPORTED || st == MOE_EP_ERROR_INVALID_ARGUMENT,
           "split backend on a CPU group: %s", moe_ep_status_string(st));
}

static void test_weights_and_forward(moe_ep_group_t g, uint64_t *rng)
{
    moe_ep_layer_config_t c = small_config();
    moe_ep_layer_t l;
    EXPECT_STATUS(moe_ep_layer_create(g, &c, &l), MOE_EP_SUCCESS);
    fixture_t f;
    fixture_init(&f, 8, 2, 128, 128, 8, ROUTE_UNIFORM, rng);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.first_expert = 0, w.num_experts = 8, w.w13 = f.w13, w.w2 = f.w2;

    int32_t nt[2] = {4, 4};
    const uint16_t *x[2] = {f.x, f.x + 4 * 128};
    const int32_t *ids[2] = {f.ids, f.ids + 8};
    const float *wt[2] = {f.weights, f.weights + 8};
    static uint16_t out_buf[8 * 128];
    uint16_t *o[2] = {out_buf, out_buf + 4 * 128};
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = nt, a.x = x, a.topk_ids = ids, a.topk_weights = wt, a.out = o;

    /* Forward before every expert is loaded. */
    memset(out_buf, 0xAB, sizeof out_buf);
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);

    moe_ep_expert_weights_t bad = w;
    bad.size = 3;
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.first_expert = 4; /* runs past the last expert */
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.num_experts = 0;
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.w13 = NULL;
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.format = MOE_EP_FORMAT_NVFP4; /* not the path's format */
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.format = (moe_ep_format_t)42;
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    bad = w, bad.on_device = 1;
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &bad, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_load_experts(l, NULL, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_load_experts(NULL, &w, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &w, NULL), MOE_EP_SUCCESS);

    /* Bad forward arguments: outputs stay as they were. */
    memset(out_buf, 0xAB, sizeof out_buf);
    moe_ep_forward_args_t b = a;
    b.size = 1;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_forward(l, NULL, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_layer_forward(NULL, &a, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    int32_t too_many[2] = {4, 5}, negative[2] = {-1, 4};
    b = a, b.num_tokens = too_many;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    b = a, b.num_tokens = negative;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    b = a, b.x = NULL;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    const uint16_t *x_null[2] = {f.x, NULL};
    b = a, b.x = x_null;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    b = a, b.num_tokens = NULL;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    int32_t saved = f.ids[5];
    f.ids[5] = 8; /* expert id == E */
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    f.ids[5] = -2;
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    f.ids[5] = saved;
    int untouched = 1;
    for (size_t i = 0; i < sizeof out_buf / 2; i++) untouched &= out_buf[i] == 0xABAB;
    EXPECT(untouched, "outputs written by a failing forward");

    /* NVFP4 without activation scales must be refused until calibrated. */
    EXPECT_STATUS(moe_ep_layer_calibrate_nvfp4(l, &a, NULL, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    /* The good call still works after all of that, and T = 0 is fine. */
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_SUCCESS);
    int32_t zero[2] = {0, 0};
    b = a, b.num_tokens = zero;
    EXPECT_STATUS(moe_ep_layer_forward(l, &b, NULL), MOE_EP_SUCCESS);
    moe_ep_layer_config_t got = MOE_EP_LAYER_CONFIG_INIT;
    EXPECT_STATUS(moe_ep_layer_get_config(l, &got), MOE_EP_SUCCESS);
    EXPECT(got.timeout_seconds == 10.0 && got.num_experts == 8, "get_config");
    moe_ep_layer_destroy(l);

    /* NVFP4: refused until the activation scales are set, then calibrated. */
    c.path = MOE_EP_PATH_NVFP4;
    EXPECT_STATUS(moe_ep_layer_create(g, &c, &l), MOE_EP_SUCCESS);
    EXPECT_STATUS(moe_ep_layer_load_experts(l, &w, NULL), MOE_EP_SUCCESS);
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_ERROR_INVALID_ARGUMENT);
    float s1 = 0, s2 = 0;
    EXPECT_STATUS(moe_ep_layer_calibrate_nvfp4(l, &a, &s1, &s2), MOE_EP_SUCCESS);
    EXPECT(s1 > 0 && s2 > 0, "calibrated scales %g %g", (double)s1, (double)s2);
    EXPECT_STATUS(moe_ep_layer_forward(l, &a, NULL), MOE_EP_SUCCESS);
    moe_ep_layer_destroy(l);
    fixture_free(&f);
}

static void test_codec_misuse(void)
{
    float x[32] = {1};
    uint8_t d[32], s[8];
    memset(d, 0x5A, sizeof d);
    EXPECT_STATUS(moe_ep_quantize((moe_ep_format_t)99, x, 1, 32, 1.0f, d, s), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_quantize(MOE_EP_FORMAT_MXFP8, NULL, 1, 32, 1.0f, d, s), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_quantize(MOE_EP_FORMAT_MXFP8, x, 1, 31, 1.0f, d, s), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(moe_ep_quantize(MOE_EP_FORMAT_NVFP4, x, 1, 32, 0.0f, d, s), MOE_EP_ERROR_INVALID_ARGUMENT);
    EXPECT(d[0] == 0x5A && d[31] == 0x5A, "codec output written on failure");
    EXPECT(moe_ep_status_string((moe_ep_status_t)1234) != NULL, "status string of an unknown value");
}

int main(void)
{
    uint64_t rng = test_seed();
    test_groups();
    moe_ep_group_t g;
    EXPECT_STATUS(moe_ep_group_create_emulated(2, -1, &g), MOE_EP_SUCCESS);
    test_configs(g);
    test_weights_and_forward(g, &rng);
    test_codec_misuse();
    moe_ep_group_destroy(g);
    return test_summary("test_api");
}
