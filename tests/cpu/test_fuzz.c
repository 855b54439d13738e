/* Random API calls on the reference backend: configs, weights and forward
 * arguments drawn from valid values and edge cases (0, -1, INT_MAX, NaN, inf,
 * wrong formats, NULLs, ids out of range). Every call must return a known
 * status, with a message when it fails, leave its outputs untouched when it
 * fails, agree with moe_ep_layer_memory_size about the config, and never
 * crash, hang, leak or read past the buffers it was given (the valgrind and
 * sanitizer builds check the last two). Buffers are allocated at their exact
 * sizes so that an over-read is caught.
 *
 * MOE_EP_FUZZ_ITERS (default 1000; MOE_EP_TEST_QUICK: 60) iterations,
 * MOE_EP_TEST_SEED to replay one run. */
#include "moe_ep.h"
#include "test_util.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_BYTES_MAX (64u << 20) /* larger valid layers: memory_size only */

static uint32_t pick(uint64_t *rng, uint32_t n) { return (uint32_t)(test_rand_u64(rng) % n); }
static int chance(uint64_t *rng, int percent) { return (int)pick(rng, 100) < percent; }

#define PICK(rng, arr) ((arr)[pick((rng), (uint32_t)(sizeof(arr) / sizeof((arr)[0])))])

/* Successful calls per kind, printed at the end so that a run shows it got
 * past the argument checks: layers made, slices loaded, forwards run. */
static int made, slices, forwards, forwards_failed;

static int known_status(moe_ep_status_t s) { return s >= MOE_EP_SUCCESS && s <= MOE_EP_ERROR_INTERNAL; }

/* Counts a call: a known status, and a message when it failed. */
static moe_ep_status_t checked(moe_ep_status_t s, const char *what)
{
    EXPECT(known_status(s), "%s: status %d", what, (int)s);
    EXPECT(s == MOE_EP_SUCCESS || moe_ep_last_error()[0] != '\0', "%s failed without a message", what);
    EXPECT(s != MOE_EP_ERROR_INTERNAL, "%s: INTERNAL: %s", what, moe_ep_last_error());
    return s;
}

static float edge_float(uint64_t *rng)
{
    static const float v[] = {0.0f, 1.0f, 10.0f, -1.0f, 1e-40f, 3e38f};
    if (chance(rng, 15)) return NAN;
    if (chance(rng, 10)) return chance(rng, 50) ? INFINITY : -INFINITY;
    return PICK(rng, v);
}

/* A small valid config, then each field replaced by an edge value now and then. */
static moe_ep_layer_config_t random_config(uint64_t *rng, int world)
{
    static const int experts[] = {0, -1, 1, 2, 3, 4, 8, 12, 16, 64, 65536, INT_MAX};
    static const int topk[] = {0, -1, 1, 2, 3, 8, 64, 65, INT_MAX};
    static const int dims[] = {0, -128, 64, 100, 128, 256, 384, 1 << 20, INT_MAX - 127, INT_MIN};
    static const int tokens[] = {0, -1, 1, 3, 8, 1 << 20, INT_MAX};
    static const int small[] = {0, -1, 1, 2, 3, 1000000, INT_MAX};
    static const double secs[] = {0.0, -1.0, 0.5, 1e30};
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = world * (1 + (int)pick(rng, 4));
    c.top_k = 1 + (int)pick(rng, c.num_experts < 4 ? c.num_experts : 4);
    c.hidden = 128 * (1 + (int)pick(rng, 2));
    c.intermediate = 128 * (1 + (int)pick(rng, 2));
    c.max_tokens_per_rank = 1 + (int)pick(rng, 6);
    c.path = (moe_ep_path_t)pick(rng, MOE_EP_PATH_COUNT_);
    c.wire = (moe_ep_wire_t)pick(rng, MOE_EP_WIRE_COUNT_);
    c.swiglu_limit = chance(rng, 50) ? 10.0f : 0.0f;
    if (c.path == MOE_EP_PATH_NVFP4 && chance(rng, 70)) c.fc1_input_scale = 400.0f, c.fc2_input_scale = 900.0f;
    c.num_threads = 1 + (int)pick(rng, 2);
    const int p = 6; /* percent per field */
    if (chance(rng, p)) c.size = chance(rng, 50) ? 0 : sizeof c - 8;
    if (chance(rng, p)) c.num_experts = PICK(rng, experts);
    if (chance(rng, p)) c.top_k = PICK(rng, topk);
    if (chance(rng, p)) c.hidden = PICK(rng, dims);
    if (chance(rng, p)) c.intermediate = PICK(rng, dims);
    if (chance(rng, p)) c.max_tokens_per_rank = PICK(rng, tokens);
    if (chance(rng, p)) c.path = (moe_ep_path_t)(chance(rng, 50) ? -1 : MOE_EP_PATH_COUNT_);
    if (chance(rng, p)) c.wire = (moe_ep_wire_t)(chance(rng, 50) ? -1 : MOE_EP_WIRE_COUNT_);
    if (chance(rng, p)) c.backend = (moe_ep_backend_t)(int)pick(rng, 5) - 1;
    if (chance(rng, p)) c.swiglu_limit = edge_float(rng);
    if (chance(rng, p)) c.fc1_input_scale = edge_float(rng);
    if (chance(rng, p)) c.fc2_input_scale = edge_float(rng);
    if (chance(rng, p)) c.num_threads = PICK(rng, small);
    if (chance(rng, p)) c.timeout_seconds = chance(rng, 20) ? NAN : PICK(rng, secs);
    if (chance(rng, p)) c.autotune = PICK(rng, small);
    if (chance(rng, p)) c.num_sms = PICK(rng, small);
    if (chance(rng, p)) c.fp8_fast_accum = PICK(rng, small);
    return c;
}

/* ---- weights ------------------------------------------------------------ */

static moe_ep_format_t weight_format_of(moe_ep_path_t p)
{
    static const moe_ep_format_t f[MOE_EP_PATH_COUNT_] = {MOE_EP_FORMAT_BF16, MOE_EP_FORMAT_MXFP8,
                                                          MOE_EP_FORMAT_NVFP4, MOE_EP_FORMAT_MXFP4,
                                                          MOE_EP_FORMAT_FP8_BLOCK};
    return f[p];
}

/* Bytes of one [rows][cols] matrix of format f: data, scales. */
static void matrix_bytes(moe_ep_format_t f, int64_t rows, int64_t cols, int64_t *data, int64_t *scales)
{
    switch (f) {
    case MOE_EP_FORMAT_BF16: *data = rows * cols * 2, *scales = 0; break;
    case MOE_EP_FORMAT_MXFP8: *data = rows * cols, *scales = rows * cols / 32; break;
    case MOE_EP_FORMAT_NVFP4: *data = rows * cols / 2, *scales = rows * cols / 16; break;
    case MOE_EP_FORMAT_MXFP4: *data = rows * cols / 2, *scales = rows * cols / 32; break;
    default: *data = rows * cols, *scales = (rows / 128) * (cols / 128) * 4; break; /* FP8_BLOCK */
    }
}

/* Random bytes; bf16 data uniform in (-0.125, 0.125) (the sign, the exponent
 * 2^-4 .. 2^-11, random mantissa bits), with now and then a NaN or an inf.
 * Cheap: the weights of every load are drawn fresh. */
static void *random_bytes(uint64_t *rng, int64_t n, int bf16)
{
    if (n <= 0) return NULL;
    uint8_t *p = malloc((size_t)n);
    for (int64_t i = 0; i < n; i += 8) {
        uint64_t r = test_rand_u64(rng);
        memcpy(p + i, &r, (size_t)(n - i < 8 ? n - i : 8));
    }
    if (bf16) {
        uint16_t *h = (uint16_t *)p;
        for (int64_t i = 0; i < n / 2; i++) /* sign, exponent 123 - (0..7), 7 mantissa bits */
            h[i] = (uint16_t)((h[i] & 0x807Fu) | (uint16_t)((123u - ((h[i] >> 7) & 7u)) << 7));
        if (chance(rng, 10)) h[pick(rng, (uint32_t)(n / 2))] = chance(rng, 50) ? 0x7FC0 : 0x7F80;
    }
    return p;
}

typedef struct {
    moe_ep_expert_weights_t w;
    void *w13, *w13s, *w2, *w2s;
    float *g13, *g2;
} weights_t;

static float *random_globals(uint64_t *rng, int n)
{
    float *g = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) g[i] = chance(rng, 10) ? edge_float(rng) : 100.0f + 50.0f * (float)pick(rng, 10);
    return g;
}

/* Experts [first, first + n) in the path's format (or bf16, or now and then
 * another one), each pointer now and then NULL. */
static void random_weights(weights_t *wt, uint64_t *rng, const moe_ep_layer_config_t *c, int first, int n)
{
    memset(wt, 0, sizeof *wt);
    moe_ep_expert_weights_t w = MOE_EP_EXPERT_WEIGHTS_INIT;
    w.format = chance(rng, 50) ? MOE_EP_FORMAT_BF16 : weight_format_of(c->path);
    if (chance(rng, 5)) w.format = (moe_ep_format_t)pick(rng, MOE_EP_FORMAT_COUNT_ + 1);
    w.first_expert = first, w.num_experts = n;
    int64_t H = c->hidden, I = c->intermediate, d13, s13, d2, s2;
    moe_ep_format_t f = w.format < MOE_EP_FORMAT_FP4_WIRE ? w.format : MOE_EP_FORMAT_FP8_BLOCK;
    matrix_bytes(f, 2 * I, H, &d13, &s13);
    matrix_bytes(f, H, I, &d2, &s2);
    wt->w13 = random_bytes(rng, n * d13, f == MOE_EP_FORMAT_BF16);
    wt->w2 = random_bytes(rng, n * d2, f == MOE_EP_FORMAT_BF16);
    wt->w13s = random_bytes(rng, n * s13, 0);
    wt->w2s = random_bytes(rng, n * s2, 0);
    if (f == MOE_EP_FORMAT_FP8_BLOCK) { /* fp32 scales: mostly sane, now and then NaN, 0 or negative */
        float *a = wt->w13s, *b = wt->w2s;
        for (int64_t i = 0; i < n * s13 / 4; i++) a[i] = chance(rng, 3) ? edge_float(rng) : 0.01f;
        for (int64_t i = 0; i < n * s2 / 4; i++) b[i] = chance(rng, 3) ? edge_float(rng) : 0.01f;
    }
    if (f == MOE_EP_FORMAT_NVFP4) wt->g13 = random_globals(rng, n), wt->g2 = random_globals(rng, n);
    w.w13 = chance(rng, 4) ? NULL : wt->w13, w.w2 = chance(rng, 4) ? NULL : wt->w2;
    w.w13_scales = chance(rng, 4) ? NULL : wt->w13s, w.w2_scales = chance(rng, 4) ? NULL : wt->w2s;
    w.w13_global_scale = chance(rng, 4) ? NULL : wt->g13, w.w2_global_scale = chance(rng, 4) ? NULL : wt->g2;
    if (chance(rng, 3)) w.size = 0;
    if (chance(rng, 3)) w.on_device = 1;
    wt->w = w;
}

static void free_weights(weights_t *wt)
{
    free(wt->w13), free(wt->w13s), free(wt->w2), free(wt->w2s), free(wt->g13), free(wt->g2);
}

/* Loads the experts in random slices, now and then a bad call (a slice out of
 * range, a bad count, a broken descriptor); a failed slice is retried or, now
 * and then, left out. Returns whether every expert was loaded. */
static int load_all(moe_ep_layer_t l, uint64_t *rng, const moe_ep_layer_config_t *c)
{
    int E = c->num_experts, next = 0, all = 1;
    char *done = calloc((size_t)E, 1);
    while (next < E) {
        int n = 1 + (int)pick(rng, (uint32_t)(E - next < 3 ? E - next : 3)), first = next;
        if (chance(rng, 5)) first = PICK(rng, ((const int[]){-1, E, E - 1, INT_MAX}));
        if (chance(rng, 3)) n = PICK(rng, ((const int[]){0, -1, E + 1}));
        int in_range = first >= 0 && n > 0 && first <= E - n;
        weights_t wt;
        random_weights(&wt, rng, c, first, in_range ? n : 1);
        wt.w.num_experts = n;
        moe_ep_status_t s = checked(moe_ep_layer_load_experts(l, &wt.w, NULL), "load_experts");
        free_weights(&wt);
        EXPECT(s != MOE_EP_SUCCESS || in_range, "load_experts(%d, %d) of %d experts succeeded", first, n, E);
        if (s == MOE_EP_SUCCESS && in_range) memset(done + first, 1, (size_t)n), slices++;
        if (first == next && in_range && (s == MOE_EP_SUCCESS || chance(rng, 30))) next += n;
    }
    for (int e = 0; e < E; e++) all &= done[e];
    free(done);
    return all;
}

/* ---- forward ------------------------------------------------------------ */

typedef struct {
    int R;
    int32_t *nt;
    uint16_t **x, **out;
    int32_t **ids;
    float **wts;
    size_t *out_bytes;
} io_t;

static void io_free(io_t *io)
{
    for (int r = 0; r < io->R; r++) free(io->x[r]), free(io->out[r]), free(io->ids[r]), free(io->wts[r]);
    free(io->nt), free(io->x), free(io->out), free(io->ids), free(io->wts), free(io->out_bytes);
}

/* Tokens of every rank at their exact sizes; ids mostly valid, -1 now and
 * then, and (rarely) out of range; weights now and then NaN or inf. */
static void random_io(io_t *io, uint64_t *rng, const moe_ep_layer_config_t *c, int R)
{
    io->R = R;
    io->nt = calloc((size_t)R, sizeof(int32_t));
    io->x = calloc((size_t)R, sizeof(void *)), io->out = calloc((size_t)R, sizeof(void *));
    io->ids = calloc((size_t)R, sizeof(void *)), io->wts = calloc((size_t)R, sizeof(void *));
    io->out_bytes = calloc((size_t)R, sizeof(size_t));
    int K = c->top_k, H = c->hidden, E = c->num_experts;
    for (int r = 0; r < R; r++) {
        int T = (int)pick(rng, (uint32_t)c->max_tokens_per_rank + 1);
        io->nt[r] = T;
        if (T == 0) continue;
        io->x[r] = random_bytes(rng, (int64_t)T * H * 2, 1);
        io->out_bytes[r] = (size_t)T * H * 2;
        io->out[r] = malloc(io->out_bytes[r]);
        io->ids[r] = malloc(sizeof(int32_t) * (size_t)T * K);
        io->wts[r] = malloc(sizeof(float) * (size_t)T * K);
        for (int i = 0; i < T * K; i++) {
            io->ids[r][i] = chance(rng, 15) ? -1 : (int32_t)pick(rng, (uint32_t)E);
            if (chance(rng, 1)) io->ids[r][i] = PICK(rng, ((const int32_t[]){-2, E, INT_MAX, INT_MIN}));
            io->wts[r][i] = chance(rng, 3) ? edge_float(rng) : (float)test_rand_uniform(rng);
        }
        /* The same expert twice in a token: allowed (two slots). */
    }
    if (chance(rng, 3)) io->nt[pick(rng, (uint32_t)R)] = PICK(rng, ((const int32_t[]){-1, c->max_tokens_per_rank + 1, INT_MAX}));
}

static void poison(io_t *io)
{
    for (int r = 0; r < io->R; r++)
        if (io->out[r]) memset(io->out[r], 0xA5, io->out_bytes[r]);
}

static int untouched(const io_t *io)
{
    for (int r = 0; r < io->R; r++)
        for (size_t i = 0; i < io->out_bytes[r]; i++)
            if (((const uint8_t *)io->out[r])[i] != 0xA5) return 0;
    return 1;
}

/* A token whose slots are all -1 gets zeros (the API's promise). */
static int empty_tokens_zero(const io_t *io, const moe_ep_layer_config_t *c)
{
    for (int r = 0; r < io->R; r++)
        for (int t = 0; t < io->nt[r]; t++) {
            int any = 0;
            for (int k = 0; k < c->top_k; k++) any |= io->ids[r][t * c->top_k + k] >= 0;
            if (any) continue;
            for (int h = 0; h < c->hidden; h++)
                if (io->out[r][(size_t)t * c->hidden + h] != 0) return 0;
        }
    return 1;
}

static void forward_once(moe_ep_layer_t l, uint64_t *rng, const moe_ep_layer_config_t *c, int R, int loaded)
{
    io_t io;
    random_io(&io, rng, c, R);
    moe_ep_forward_args_t a = MOE_EP_FORWARD_ARGS_INIT;
    a.num_tokens = io.nt, a.x = (const uint16_t *const *)io.x, a.topk_ids = (const int32_t *const *)io.ids;
    a.topk_weights = (const float *const *)io.wts, a.out = io.out;
    int32_t dev_tokens[64] = {0};
    switch (pick(rng, 40)) { /* now and then one argument broken */
    case 0: a.size = 0; break;
    case 1: a.num_tokens = NULL; break;
    case 2: a.x = NULL; break;
    case 3: a.topk_ids = NULL; break;
    case 4: a.topk_weights = NULL; break;
    case 5: a.out = NULL; break;
    case 6: a.num_tokens_device = dev_tokens; break; /* a device pointer on a CPU layer */
    default: break;
    }
    poison(&io);
    int bad_tokens = 0, bad_ids = 0;
    for (int r = 0; r < R; r++) {
        bad_tokens |= io.nt[r] < 0 || io.nt[r] > c->max_tokens_per_rank;
        for (int i = 0; !bad_tokens && io.ids[r] && i < io.nt[r] * c->top_k; i++)
            bad_ids |= io.ids[r][i] < -1 || io.ids[r][i] >= c->num_experts;
    }
    int nvfp4_unset = c->path == MOE_EP_PATH_NVFP4 && !(c->fc1_input_scale > 0 && c->fc2_input_scale > 0);
    if (nvfp4_unset && chance(rng, 50)) {
        float s1 = -3, s2 = -3;
        moe_ep_status_t s = checked(moe_ep_layer_calibrate_nvfp4(l, &a, &s1, &s2), "calibrate_nvfp4");
        EXPECT(s != MOE_EP_SUCCESS || (s1 > 0 && s2 > 0 && isfinite(s1) && isfinite(s2)), "calibrated %g %g",
               (double)s1, (double)s2);
        EXPECT(s == MOE_EP_SUCCESS || (s1 == -3 && s2 == -3), "calibrate wrote its outputs on failure");
        if (s == MOE_EP_SUCCESS) nvfp4_unset = 0;
    }
    moe_ep_status_t s = checked(moe_ep_layer_forward(l, &a, NULL), "forward");
    s == MOE_EP_SUCCESS ? forwards++ : forwards_failed++;
    int args_ok = a.size && a.num_tokens && a.x && a.topk_ids && a.topk_weights && a.out && !a.num_tokens_device;
    if (s != MOE_EP_SUCCESS) {
        EXPECT(untouched(&io), "a failing forward (%s) wrote outputs", moe_ep_last_error());
        EXPECT(!(args_ok && loaded && !bad_tokens && !bad_ids && !nvfp4_unset), "good forward failed: %s",
               moe_ep_last_error());
    } else {
        EXPECT(args_ok && loaded && !bad_tokens && !bad_ids, "bad forward returned SUCCESS (args %d loaded %d "
               "tokens %d ids %d)", args_ok, loaded, !bad_tokens, !bad_ids);
        EXPECT(empty_tokens_zero(&io, c), "a token without experts is not zero");
    }
    io_free(&io);
}

/* ---- one iteration ------------------------------------------------------ */

static int world_of(uint64_t *rng)
{
    static const int w[] = {1, 1, 2, 2, 4, 0, -1, 1 << 20};
    return chance(rng, 90) ? PICK(rng, ((const int[]){1, 2, 4})) : PICK(rng, w);
}

static void iteration(uint64_t *rng)
{
    int world = world_of(rng);
    moe_ep_group_t g = (moe_ep_group_t)0x1;
    moe_ep_status_t s = checked(moe_ep_group_create_emulated(world, -1, &g), "group_create");
    if (s != MOE_EP_SUCCESS) {
        EXPECT(g == (moe_ep_group_t)0x1, "group written on failure");
        return;
    }
    moe_ep_layer_config_t c = random_config(rng, world);
    size_t db = 7, hb = 7;
    moe_ep_status_t ms = checked(moe_ep_layer_memory_size(g, &c, &db, &hb), "memory_size");
    EXPECT(ms == MOE_EP_SUCCESS || (db == 7 && hb == 7), "memory_size wrote on failure");
    if (ms == MOE_EP_SUCCESS && db + hb > LAYER_BYTES_MAX) { /* valid but too large to make here */
        moe_ep_group_destroy(g);
        return;
    }
    moe_ep_layer_t l = (moe_ep_layer_t)0x1;
    s = checked(moe_ep_layer_create(g, &c, &l), "layer_create");
    EXPECT((s == MOE_EP_SUCCESS) == (ms == MOE_EP_SUCCESS) || s == MOE_EP_ERROR_OUT_OF_MEMORY,
           "create %s but memory_size %s (%s)", moe_ep_status_string(s), moe_ep_status_string(ms),
           moe_ep_last_error());
    if (s != MOE_EP_SUCCESS) {
        EXPECT(l == (moe_ep_layer_t)0x1, "layer written on failure");
        moe_ep_group_destroy(g);
        return;
    }
    made++;
    moe_ep_layer_config_t got = MOE_EP_LAYER_CONFIG_INIT;
    checked(moe_ep_layer_get_config(l, &got), "get_config");
    moe_ep_knobs_t kn = MOE_EP_KNOBS_INIT;
    moe_ep_knob_source_t src;
    checked(moe_ep_layer_get_knobs(l, PICK(rng, ((const int[]){-1, 0, 1, INT_MAX})), &kn, &src), "get_knobs");
    int loaded = chance(rng, 10) ? 0 : load_all(l, rng, &got);
    for (int i = 0, n = 1 + (int)pick(rng, 3); i < n; i++) forward_once(l, rng, &got, world, loaded);
    EXPECT(moe_ep_layer_destroy(l) == MOE_EP_SUCCESS, "layer_destroy");
    EXPECT(moe_ep_group_destroy(g) == MOE_EP_SUCCESS, "group_destroy");
}

int main(void)
{
    uint64_t rng = test_seed();
    const char *e = getenv("MOE_EP_FUZZ_ITERS");
    int iters = e ? atoi(e) : getenv("MOE_EP_TEST_QUICK") ? 60 : 1000;
    for (int i = 0; i < iters; i++) iteration(&rng);
    printf("%d iterations: %d layers made, %d slices loaded, %d forwards run, %d refused\n", iters, made, slices,
           forwards, forwards_failed);
    return test_summary("test_fuzz");
}
