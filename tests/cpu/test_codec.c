/* The element and block codecs (formats/codec.h) and the public host codec
 * (moe_ep_quantize and friends) against the rules of docs/formats.md.
 * Expected values are computed independently here, in double precision, from
 * the definitions of the formats; the library's own helpers are not used to
 * build expectations except where a test says so. */
#include "test_util.h"

#include "formats/codec.h"
#include "moe_ep.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- independent definitions ------------------------------------------------ */

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Same value, same sign of zero, or both NaN. */
static int same(float a, float b) { return (isnan(a) && isnan(b)) || bits(a) == bits(b); }

/* E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN. */
static double e4m3_def(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

static const double e2m1_vals[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

static double e2m1_def(int c) { return (c & 8) ? -e2m1_vals[c & 7] : e2m1_vals[c & 7]; }

/* Nearest of n ascending magnitudes, ties to the even index, clamped to the last. */
static int nearest_even(const double *vals, int n, double a)
{
    if (a >= vals[n - 1]) return n - 1;
    int lo = 0;
    while (lo + 1 < n && vals[lo + 1] <= a) lo++;
    double d_lo = a - vals[lo], d_hi = vals[lo + 1] - a;
    if (d_lo < d_hi) return lo;
    if (d_hi < d_lo) return lo + 1;
    return (lo & 1) ? lo + 1 : lo;
}

static double e4m3_pos[127]; /* magnitudes of codes 0x00..0x7E */

static void init_tables(void)
{
    for (int c = 0; c < 127; c++) e4m3_pos[c] = e4m3_def(c);
}

static uint8_t e4m3_ref(double v)
{
    if (isnan(v)) return 0x7F;
    return (uint8_t)((signbit(v) ? 0x80 : 0) | nearest_even(e4m3_pos, 127, fabs(v)));
}

static uint8_t e2m1_ref(double v)
{
    if (isnan(v)) return 0;
    return (uint8_t)((signbit(v) ? 8 : 0) | nearest_even(e2m1_vals, 8, fabs(v)));
}

/* MX scale byte: q = amax / elem_max in fp32; b = 127 + smallest e with 2^e >= q. */
static int mx_scale_ref(float amax, float elem_max)
{
    float q = amax / elem_max;
    if (isinf(q)) return 254;
    if (q == 0.0f) return 0;
    int ex;
    double m = frexp((double)q, &ex); /* q = m * 2^ex, m in [0.5, 1) */
    int e = m == 0.5 ? ex - 1 : ex;
    int b = 127 + e;
    return b < 0 ? 0 : (b > 254 ? 254 : b);
}

/* A whole MX block (32 values) in double: returns the scale, writes codes. */
static int mx_block_ref(const float *x, int fp4, uint8_t *q)
{
    float amax = 0.0f;
    int any_nan = 0;
    for (int i = 0; i < 32; i++) {
        if (isnan(x[i])) any_nan = 1;
        else if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    }
    if (any_nan) {
        for (int i = 0; i < 32; i++) q[i] = fp4 ? 0 : 0x7F;
        return 0xFF;
    }
    int b = mx_scale_ref(amax, fp4 ? 6.0f : 448.0f);
    for (int i = 0; i < 32; i++) {
        double v = (double)x[i] * ldexp(1.0, 127 - b);
        q[i] = fp4 ? e2m1_ref(v) : e4m3_ref(v);
    }
    return b;
}

/* ---- helpers around the public API ----------------------------------------- */

static int block_of(moe_ep_format_t f)
{
    switch (f) {
    case MOE_EP_FORMAT_MXFP8:
    case MOE_EP_FORMAT_MXFP4: return 32;
    case MOE_EP_FORMAT_NVFP4:
    case MOE_EP_FORMAT_FP4_WIRE: return 16;
    case MOE_EP_FORMAT_FP8_BLOCK: return 128;
    default: return 1;
    }
}

static int is_fp4(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_MXFP4 || f == MOE_EP_FORMAT_NVFP4 || f == MOE_EP_FORMAT_FP4_WIRE;
}

static int scale_bytes(moe_ep_format_t f)
{
    if (f == MOE_EP_FORMAT_BF16) return 0;
    if (f == MOE_EP_FORMAT_FP8_BLOCK) return 4;
    return f == MOE_EP_FORMAT_FP4_WIRE ? 2 : 1;
}

static size_t data_size(moe_ep_format_t f, int64_t n)
{
    if (f == MOE_EP_FORMAT_BF16) return (size_t)n * 2;
    return is_fp4(f) ? (size_t)n / 2 : (size_t)n;
}

static size_t scales_size(moe_ep_format_t f, int64_t n) { return (size_t)(n / block_of(f)) * scale_bytes(f); }

static uint8_t code_at(moe_ep_format_t f, const uint8_t *data, int64_t i)
{
    if (!is_fp4(f)) return data[i];
    return (uint8_t)((i & 1) ? data[i / 2] >> 4 : data[i / 2] & 15);
}

static float le_f32(const uint8_t *p)
{
    return from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static uint16_t le_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Quantizes one row of n values; codes unpacked to one per element. */
static void quant_row(moe_ep_format_t f, const float *x, int n, float S, uint8_t *codes, uint8_t *scales)
{
    uint8_t data[2 * 256];
    EXPECT(n <= 256, "row too long for the helper");
    moe_ep_status_t st = moe_ep_quantize(f, x, 1, n, S, data, scales);
    EXPECT(st == MOE_EP_SUCCESS, "%s quantize: %s", moe_ep_format_name(f), moe_ep_last_error());
    for (int i = 0; i < n; i++) codes[i] = code_at(f, data, i);
}

static void dequant_row(moe_ep_format_t f, const float *x, int n, float S, float *out)
{
    uint8_t data[2 * 256], scales[64];
    moe_ep_status_t st = moe_ep_quantize(f, x, 1, n, S, data, scales);
    EXPECT(st == MOE_EP_SUCCESS, "quantize: %s", moe_ep_last_error());
    st = moe_ep_dequantize(f, data, scales, 1, n, S, out);
    EXPECT(st == MOE_EP_SUCCESS, "dequantize: %s", moe_ep_last_error());
}

static double rel_l2(const float *a, const float *ref, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- E4M3 -------------------------------------------------------------------- */

static void test_e4m3_codes(void)
{
    for (int c = 0; c < 256; c++) {
        double want = e4m3_def(c);
        float got = moe_ep_e4m3_to_f32((uint8_t)c);
        if (isnan(want)) {
            EXPECT(isnan(got), "code 0x%02X decodes to %g, want NaN", c, (double)got);
            EXPECT(moe_ep_e4m3_from_f32(got) == 0x7F, "NaN code 0x%02X re-encodes to 0x%02X", c,
                   moe_ep_e4m3_from_f32(got));
            continue;
        }
        EXPECT((double)got == want && !signbit(got) == !signbit(want), "code 0x%02X -> %a, want %a", c,
               (double)got, want);
        uint8_t back = moe_ep_e4m3_from_f32(got);
        EXPECT(back == c, "code 0x%02X re-encodes to 0x%02X", c, back);
    }
    EXPECT(moe_ep_e4m3_to_f32(0x7E) == 448.0f, "max");
    EXPECT(moe_ep_e4m3_to_f32(0x01) == 0x1p-9f, "min subnormal");
    EXPECT(moe_ep_e4m3_to_f32(0x08) == 0x1p-6f, "min normal");
}

/* Every midpoint between consecutive codes (exact in float) goes to the even code;
 * its float neighbours go to the nearer code. */
static void test_e4m3_midpoints(void)
{
    for (int c = 0; c < 0x7E; c++) {
        double mid = (e4m3_def(c) + e4m3_def(c + 1)) / 2.0;
        float m = (float)mid;
        EXPECT((double)m == mid, "midpoint after 0x%02X not exact in float", c);
        int even = (c & 1) ? c + 1 : c;
        EXPECT(moe_ep_e4m3_from_f32(m) == even, "mid %a -> 0x%02X, want 0x%02X", mid,
               moe_ep_e4m3_from_f32(m), even);
        EXPECT(moe_ep_e4m3_from_f32(-m) == (0x80 | even), "-mid %a -> 0x%02X", mid,
               moe_ep_e4m3_from_f32(-m));
        float above = nextafterf(m, INFINITY), below = nextafterf(m, 0.0f);
        EXPECT(moe_ep_e4m3_from_f32(above) == c + 1, "above mid %a -> 0x%02X, want 0x%02X",
               (double)above, moe_ep_e4m3_from_f32(above), c + 1);
        EXPECT(moe_ep_e4m3_from_f32(below) == c, "below mid %a -> 0x%02X, want 0x%02X",
               (double)below, moe_ep_e4m3_from_f32(below), c);
        EXPECT(moe_ep_e4m3_from_f32(-above) == (0x80 | (c + 1)), "-above mid 0x%02X", c);
        EXPECT(moe_ep_e4m3_from_f32(-below) == (0x80 | c), "-below mid 0x%02X", c);
    }
}

static void test_e4m3_specials(void)
{
    struct {
        float v;
        uint8_t code;
    } cases[] = {
        {448.0f, 0x7E},        {449.0f, 0x7E},         {464.0f, 0x7E},
        {1e30f, 0x7E},         {FLT_MAX, 0x7E},        {INFINITY, 0x7E},
        {-INFINITY, 0xFE},     {-449.0f, 0xFE},        {-1e30f, 0xFE},
        {NAN, 0x7F},           {-NAN, 0x7F},           {0.0f, 0x00},
        {-0.0f, 0x80},         {0x1p-9f, 0x01},        {-0x1p-9f, 0x81},
        {0x3p-10f, 0x02},      {-0x3p-10f, 0x82},      {0x1p-10f, 0x00},
        {-0x1p-10f, 0x80},     {0x1.000002p-10f, 0x01}, {0x1p-11f, 0x00},
        {-0x1p-11f, 0x80},     {1e-30f, 0x00},         {-1e-30f, 0x80},
        {FLT_TRUE_MIN, 0x00},  {-FLT_TRUE_MIN, 0x80},  {0x1p-6f, 0x08},
        {0x7p-9f, 0x07},       {0x7.8p-9f, 0x08},      {1.0f, 0x38},
        {-1.0f, 0xB8},         {240.0f, 0x77},         {232.0f, 0x76},
        {433.0f, 0x7E},        {431.0f, 0x7D},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got = moe_ep_e4m3_from_f32(cases[i].v);
        EXPECT(got == cases[i].code, "E4M3(%a) = 0x%02X, want 0x%02X", (double)cases[i].v, got,
               cases[i].code);
    }
    /* A quiet NaN with a payload and a signalling NaN. */
    EXPECT(moe_ep_e4m3_from_f32(from_bits(0x7F800001u)) == 0x7F, "sNaN");
    EXPECT(moe_ep_e4m3_from_f32(from_bits(0xFFC12345u)) == 0x7F, "-NaN payload");
}

/* ---- E2M1 and UE8M0 ------------------------------------------------------------ */

static void test_e2m1(void)
{
    for (int c = 0; c < 16; c++) {
        float got = moe_ep_e2m1_to_f32((uint8_t)c);
        double want = e2m1_def(c);
        EXPECT((double)got == want && (c == 8 ? signbit(got) != 0 : 1), "E2M1 code %d -> %g, want %g", c,
               (double)got, want);
        EXPECT(moe_ep_e2m1_from_f32(got) == c, "E2M1 code %d re-encodes to %d", c,
               moe_ep_e2m1_from_f32(got));
    }
    struct {
        float v;
        uint8_t code;
    } cases[] = {
        {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4},  {3.5f, 6},      {5.0f, 6},
        {7.0f, 7},  {6.5f, 7},  {1e30f, 7}, {INFINITY, 7}, {-INFINITY, 15}, {-7.0f, 15}, {-0.0f, 8},
        {0.0f, 0},  {NAN, 0},   {-NAN, 0},  {-0.25f, 8}, {-0.75f, 10}, {-5.0f, 14}, {-2.5f, 12},
        {0.1f, 0},  {-0.1f, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got = moe_ep_e2m1_from_f32(cases[i].v);
        EXPECT(got == cases[i].code, "E2M1(%g) = %d, want %d", (double)cases[i].v, got, cases[i].code);
    }
    /* Just around every tie: the nearer code. */
    for (int c = 0; c < 7; c++) {
        float mid = (float)((e2m1_vals[c] + e2m1_vals[c + 1]) / 2.0);
        EXPECT(moe_ep_e2m1_from_f32(nextafterf(mid, 0.0f)) == c, "below tie %g", (double)mid);
        EXPECT(moe_ep_e2m1_from_f32(nextafterf(mid, INFINITY)) == c + 1, "above tie %g", (double)mid);
        EXPECT(moe_ep_e2m1_from_f32(mid) == ((c & 1) ? c + 1 : c), "tie %g", (double)mid);
        EXPECT(moe_ep_e2m1_from_f32(-mid) == (8 | ((c & 1) ? c + 1 : c)), "-tie %g", (double)mid);
    }
}

static void test_ue8m0(void)
{
    for (int b = 0; b < 255; b++) {
        float got = moe_ep_ue8m0_to_f32((uint8_t)b);
        EXPECT((double)got == ldexp(1.0, b - 127), "UE8M0 %d -> %a", b, (double)got);
    }
    EXPECT(moe_ep_ue8m0_to_f32(0) == 0x1p-127f && moe_ep_ue8m0_to_f32(0) > 0.0f, "UE8M0 0 is 2^-127");
    EXPECT(isnan(moe_ep_ue8m0_to_f32(0xFF)), "UE8M0 0xFF is NaN");
}

/* The GPU chunk encoder's shortcuts (kernels/rows.cuh) against the codecs
 * they replace, on every exponent of both signs with the mantissas around
 * their thresholds and random ones; MOE_EP_TEST_EXHAUSTIVE=1: every fp32 bit
 * pattern (~30 s, one check). The shortcuts take no NaN. Returns 1 where both agree. */
static int chunk_shortcuts_agree(uint32_t u, int report)
{
    float x = from_bits(u), a = from_bits(u & 0x7FFFFFFFu);
    if (isnan(x)) return 1;
    uint8_t b = moe_ep_ue8m0_for_amax_e4m3(a), b_want = moe_ep_ue8m0_for_amax(a, MOE_EP_E4M3_MAX);
    uint32_t c = moe_ep_e2m1_code_clamped(x), c_want = moe_ep_e2m1_from_f32(moe_ep_clamp6(x));
    if (report) {
        EXPECT(b == b_want, "ue8m0 for amax %a: %d, want %d", (double)a, b, b_want);
        EXPECT(c == c_want, "E2M1 of %a: %u, want %u", (double)x, c, c_want);
    }
    return b == b_want && c == c_want;
}

static void test_chunk_shortcuts(uint64_t *rng)
{
    const char *env = getenv("MOE_EP_TEST_EXHAUSTIVE");
    if (env && env[0] == '1') {
        uint64_t bad = 0;
        for (uint64_t u = 0; u <= 0xFFFFFFFFull; u++)
            if (!chunk_shortcuts_agree((uint32_t)u, 0) && bad++ < 4) chunk_shortcuts_agree((uint32_t)u, 1);
        EXPECT(bad == 0, "chunk shortcuts: %llu of 2^32 fp32 patterns differ", (unsigned long long)bad);
        return;
    }
    const uint32_t mans[] = {0, 1, 2, 0x7FFFFF, 0x7FFFFE, 0x600000, 0x5FFFFF, 0x600001, 0x600002,
                             0x400000, 0x3FFFFF, 0x400001, 0x200000, 0x1FFFFF, 0x200001, 0x100000};
    for (uint32_t se = 0; se < 512; se++) {
        for (size_t i = 0; i < sizeof mans / sizeof mans[0]; i++) chunk_shortcuts_agree(se << 23 | mans[i], 1);
        for (int i = 0; i < 32; i++) chunk_shortcuts_agree(se << 23 | (uint32_t)(test_rand_u64(rng) & 0x7FFFFFu), 1);
    }
}

/* ---- MX blocks ----------------------------------------------------------------- */

/* Checks one 32-value block through the public API against the double reference,
 * including dequantization. */
static void check_mx_block(moe_ep_format_t f, const float *x, const char *what)
{
    int fp4 = f == MOE_EP_FORMAT_MXFP4;
    uint8_t codes[32], scale, want[32];
    quant_row(f, x, 32, 0.0f, codes, &scale);
    int b = mx_block_ref(x, fp4, want);
    EXPECT(scale == b, "%s %s: scale %d, want %d", moe_ep_format_name(f), what, scale, b);
    int bad = 0;
    for (int i = 0; i < 32; i++)
        if (codes[i] != want[i]) bad++;
    EXPECT(bad == 0, "%s %s: %d codes differ (e.g. x=%a -> 0x%02X want 0x%02X)", moe_ep_format_name(f),
           what, bad, (double)x[0], codes[0], want[0]);
    float out[32];
    dequant_row(f, x, 32, 0.0f, out);
    int dbad = 0;
    for (int i = 0; i < 32; i++) {
        double v = (fp4 ? e2m1_def(want[i]) : e4m3_def(want[i])) * (b == 0xFF ? NAN : ldexp(1.0, b - 127));
        if (!same(out[i], (float)v)) dbad++;
    }
    EXPECT(dbad == 0, "%s %s: %d dequantized values differ", moe_ep_format_name(f), what, dbad);
}

static void test_mx_blocks(moe_ep_format_t f)
{
    int fp4 = f == MOE_EP_FORMAT_MXFP4;
    float emax = fp4 ? 6.0f : 448.0f;
    uint8_t nan_code = fp4 ? 0 : 0x7F, max_code = fp4 ? 7 : 0x7E;
    float x[64];
    uint8_t codes[64], sc[2];
    const char *name = moe_ep_format_name(f);

    memset(x, 0, sizeof x);
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(sc[0] == 0, "%s zero block scale %d", name, sc[0]);
    for (int i = 0; i < 32; i++) EXPECT(codes[i] == 0, "%s zero block code %d", name, codes[i]);

    /* NaN in the first block only. */
    for (int i = 0; i < 64; i++) x[i] = (float)(i % 7) - 3.0f;
    x[7] = -NAN;
    quant_row(f, x, 64, 0.0f, codes, sc);
    EXPECT(sc[0] == 0xFF, "%s NaN block scale %d", name, sc[0]);
    for (int i = 0; i < 32; i++) EXPECT(codes[i] == nan_code, "%s NaN block code 0x%02X", name, codes[i]);
    EXPECT(sc[1] != 0xFF, "%s block after a NaN block", name);
    check_mx_block(f, x + 32, "after NaN");
    float out[64];
    dequant_row(f, x, 64, 0.0f, out);
    for (int i = 0; i < 32; i++) EXPECT(isnan(out[i]), "%s NaN block dequantizes to %g", name, (double)out[i]);

    /* Inf: scale 254, the Inf element saturates, the rest underflow to zero. */
    for (int i = 0; i < 32; i++) x[i] = 1.0f;
    x[3] = INFINITY;
    x[4] = -INFINITY;
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(sc[0] == 254, "%s Inf block scale %d", name, sc[0]);
    EXPECT(codes[3] == max_code && codes[4] == (fp4 ? 15 : 0xFE), "%s Inf codes 0x%02X 0x%02X", name,
           codes[3], codes[4]);
    EXPECT(codes[0] == 0, "%s finite element of an Inf block 0x%02X", name, codes[0]);

    /* amax exactly emax * 2^k -> 127 + k (clamped); just above -> 128 + k. */
    for (int k = -140; k <= 119; k++) {
        float amax = (float)ldexp(emax, k);
        if (amax == 0.0f) continue;
        for (int i = 0; i < 32; i++) x[i] = (float)ldexp((double)((i % 9) - 4) / 5.0 * emax, k);
        x[9] = (k & 1) ? -amax : amax;
        quant_row(f, x, 32, 0.0f, codes, sc);
        int want = 127 + k < 0 ? 0 : 127 + k;
        if ((double)amax == ldexp(emax, k)) {
            EXPECT(sc[0] == want, "%s amax %g*2^%d: scale %d, want %d", name, (double)emax, k, sc[0], want);
            if (k >= -127)
                EXPECT((codes[9] & (fp4 ? 7 : 0x7F)) == max_code, "%s amax element 0x%02X", name, codes[9]);
        }
        check_mx_block(f, x, "amax 2^k");
        if (k >= -126 && k <= 118) {
            x[9] = nextafterf(amax, INFINITY);
            quant_row(f, x, 32, 0.0f, codes, sc);
            EXPECT(sc[0] == 128 + k, "%s amax just above %g*2^%d: scale %d, want %d", name, (double)emax, k,
                   sc[0], 128 + k);
            /* Scaled amax is just above emax/2: 224 (E4M3 0x76) or 3.0 (E2M1 5). */
            EXPECT(codes[9] == (fp4 ? 5 : 0x76), "%s just-above element 0x%02X", name, codes[9]);
            check_mx_block(f, x, "amax just above 2^k");
        }
    }

    /* Subnormal amax: scale 0 (2^-127), elements x * 2^127. */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    x[0] = 1e-40f;
    x[1] = -3e-41f;
    x[2] = FLT_TRUE_MIN;
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(sc[0] == 0, "%s subnormal amax scale %d", name, sc[0]);
    EXPECT(codes[0] == (fp4 ? e2m1_ref((double)x[0] * 0x1p127) : e4m3_ref((double)x[0] * 0x1p127)),
           "%s subnormal element 0x%02X", name, codes[0]);
    check_mx_block(f, x, "subnormal amax");
    x[0] = (float)ldexp(emax, -127);
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(sc[0] == 0 && codes[0] == max_code, "%s amax emax*2^-127: %d 0x%02X", name, sc[0], codes[0]);
    x[0] = (float)ldexp(emax, -126);
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(sc[0] == 1 && codes[0] == max_code, "%s amax emax*2^-126: %d 0x%02X", name, sc[0], codes[0]);
    x[0] = FLT_MAX;
    check_mx_block(f, x, "FLT_MAX");
}

/* Random blocks with amax spanning 2^-140 .. 2^120 against the double reference. */
static void test_mx_random(uint64_t *rng)
{
    float x[32];
    for (int n = 0; n < 3000; n++) {
        int k = -140 + (int)(test_rand_uniform(rng) * 261.0);
        for (int i = 0; i < 32; i++) x[i] = (float)((double)test_rand_normal(rng, 1.0f) * ldexp(1.0, k));
        double r = test_rand_uniform(rng);
        if (r < 0.05) x[n % 32] = (float)ldexp(448.0, k / 2); /* exact powers of the range */
        else if (r < 0.1) x[n % 32] = (float)ldexp(6.0, k / 2);
        else if (r < 0.12) x[n % 32] = INFINITY;
        else if (r < 0.14) x[n % 32] = NAN;
        else if (r < 0.16) memset(x, 0, sizeof x);
        check_mx_block(MOE_EP_FORMAT_MXFP8, x, "random");
        check_mx_block(MOE_EP_FORMAT_MXFP4, x, "random");
    }
}

/* ---- NVFP4 ---------------------------------------------------------------------- */

static void test_nvfp4(void)
{
    const moe_ep_format_t f = MOE_EP_FORMAT_NVFP4;
    float x[32], out[32];
    uint8_t codes[32], sc[2];

    /* S = 1: amax 2688 -> scale byte 448 (0x7E), the amax element 6 (code 7). */
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 150.0f;
    x[5] = 2688.0f;
    quant_row(f, x, 16, 1.0f, codes, sc);
    EXPECT(sc[0] == 0x7E, "NVFP4 S=1 amax 2688: scale 0x%02X", sc[0]);
    EXPECT(codes[5] == 7, "NVFP4 amax element code %d", codes[5]);
    for (int i = 0; i < 16; i++) {
        /* x * 1/(448 * 1/1): 150/448 * (i-8), then E2M1 in double. */
        uint8_t want = e2m1_ref(fmin(6.0, fmax(-6.0, (double)(x[i] * (1.0f / 448.0f)))));
        EXPECT(codes[i] == want, "NVFP4 S=1 element %d: %d want %d", i, codes[i], want);
    }
    dequant_row(f, x, 16, 1.0f, out);
    for (int i = 0; i < 16; i++)
        EXPECT((double)out[i] == e2m1_def(codes[i]) * 448.0, "NVFP4 dequant %g", (double)out[i]);

    /* A general S: scale byte E4M3(amax * (S * 1/6)), dequant (e2m1 * s) / S. */
    const float S = 37.5f;
    for (int i = 0; i < 32; i++) x[i] = (float)((i * 37) % 23 - 11) * 0.731f;
    quant_row(f, x, 32, S, codes, sc);
    for (int blk = 0; blk < 2; blk++) {
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[16 * blk + i]));
        uint8_t want_sb = e4m3_ref((double)(amax * (S * (1.0f / 6.0f))));
        EXPECT(sc[blk] == want_sb, "NVFP4 S=%g scale 0x%02X want 0x%02X", (double)S, sc[blk], want_sb);
        float enc = 1.0f / ((float)e4m3_def(want_sb) * (1.0f / S));
        for (int i = 16 * blk; i < 16 * blk + 16; i++) {
            uint8_t want = e2m1_ref(fmin(6.0, fmax(-6.0, (double)(x[i] * enc))));
            EXPECT(codes[i] == want, "NVFP4 element %d: %d want %d", i, codes[i], want);
        }
    }
    dequant_row(f, x, 32, S, out);
    for (int i = 0; i < 32; i++) {
        float want = (float)(e2m1_def(codes[i]) * e4m3_def(sc[i / 16])) / S;
        EXPECT(same(out[i], want), "NVFP4 dequant %d: %a want %a", i, (double)out[i], (double)want);
    }

    /* NaN -> scale 0x7F, elements 0, dequantized NaN. */
    x[3] = NAN;
    quant_row(f, x, 32, S, codes, sc);
    EXPECT(sc[0] == 0x7F, "NVFP4 NaN scale 0x%02X", sc[0]);
    for (int i = 0; i < 16; i++) EXPECT(codes[i] == 0, "NVFP4 NaN element %d", codes[i]);
    EXPECT(sc[1] != 0x7F, "NVFP4 block after NaN");
    dequant_row(f, x, 32, S, out);
    EXPECT(isnan(out[0]) && isnan(out[15]) && !isnan(out[16]), "NVFP4 NaN block dequantizes to NaN");

    /* amax 0 -> scale 0, elements 0; scale byte rounding to 0 -> elements 0. */
    memset(x, 0, sizeof x);
    quant_row(f, x, 16, S, codes, sc);
    EXPECT(sc[0] == 0, "NVFP4 zero block scale 0x%02X", sc[0]);
    for (int i = 0; i < 16; i++) EXPECT(codes[i] == 0, "NVFP4 zero element %d", codes[i]);
    for (int i = 0; i < 16; i++) x[i] = (i & 1) ? -1e-6f : 1e-6f;
    quant_row(f, x, 16, 1.0f, codes, sc);
    EXPECT(sc[0] == 0, "NVFP4 tiny block scale 0x%02X", sc[0]);
    for (int i = 0; i < 16; i++) EXPECT(codes[i] == 0, "NVFP4 tiny element %d", codes[i]);

    /* Invalid S: INVALID_ARGUMENT, outputs untouched. */
    const float bad_s[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    for (size_t j = 0; j < sizeof bad_s / sizeof bad_s[0]; j++) {
        uint8_t data[8], scl[1];
        memset(data, 0xA5, sizeof data);
        memset(scl, 0xA5, sizeof scl);
        moe_ep_status_t st = moe_ep_quantize(f, x, 1, 16, bad_s[j], data, scl);
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "NVFP4 S=%g quantize status %d", (double)bad_s[j], st);
        EXPECT(moe_ep_last_error()[0] != '\0', "NVFP4 bad S has a message");
        int untouched = scl[0] == 0xA5;
        for (int i = 0; i < 8; i++) untouched &= data[i] == 0xA5;
        EXPECT(untouched, "NVFP4 bad S wrote outputs");
        float o[16];
        for (int i = 0; i < 16; i++) o[i] = -7.25f;
        st = moe_ep_dequantize(f, data, scl, 1, 16, bad_s[j], o);
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "NVFP4 S=%g dequantize status %d", (double)bad_s[j], st);
        untouched = 1;
        for (int i = 0; i < 16; i++) untouched &= o[i] == -7.25f;
        EXPECT(untouched, "NVFP4 bad S wrote dequantized outputs");
    }
}

/* Random S and blocks whose scale bytes span the E4M3 range (subnormals too),
 * against the formulas written out in fp32: sb = E4M3(amax * (S * (1/6))),
 * enc = 1 / (float(sb) * (1/S)), element = E2M1(clamp(x * enc)), value =
 * (e2m1 * float(sb)) / S. */
static void test_nvfp4_random(uint64_t *rng)
{
    float x[16], out[16];
    uint8_t codes[16], sb;
    int bad_mul = 0, bad_val = 0;
    for (int n = 0; n < 2000; n++) {
        float S = (float)ldexp(1.0 + test_rand_uniform(rng), -20 + (int)(40.0 * test_rand_uniform(rng)));
        for (int c = 0; c < 0x7F; c++) {
            float want = c == 0 ? 0.0f : 1.0f / ((float)e4m3_def(c) * (1.0f / S));
            bad_mul += bits(moe_ep_nvfp4_encode_mul((uint8_t)c, S)) != bits(want);
        }
        for (int e = 0; e < 16; e++) {
            uint8_t c = (uint8_t)(test_rand_u64(rng) % 0x7F);
            float want = (float)(e2m1_def(e) * e4m3_def(c)) / S;
            bad_val += !same(moe_ep_nvfp4_value((uint8_t)e, c, S), want);
        }
        double std = 6.0 / S * ldexp(1.0, -12 + (int)(22.0 * test_rand_uniform(rng)));
        for (int i = 0; i < 16; i++) x[i] = (float)((double)test_rand_normal(rng, 1.0f) * std);
        quant_row(MOE_EP_FORMAT_NVFP4, x, 16, S, codes, &sb);
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[i]));
        uint8_t want_sb = e4m3_ref((double)(amax * (S * (1.0f / 6.0f))));
        EXPECT(sb == want_sb, "NVFP4 S=%a amax=%a: scale 0x%02X want 0x%02X", (double)S, (double)amax, sb,
               want_sb);
        float enc = want_sb == 0 ? 0.0f : 1.0f / ((float)e4m3_def(want_sb) * (1.0f / S));
        int wrong = 0;
        for (int i = 0; i < 16; i++)
            wrong += codes[i] != (enc == 0.0f ? 0 : e2m1_ref(fmin(6.0, fmax(-6.0, (double)(x[i] * enc)))));
        EXPECT(wrong == 0, "NVFP4 S=%a: %d codes differ", (double)S, wrong);
        dequant_row(MOE_EP_FORMAT_NVFP4, x, 16, S, out);
        wrong = 0;
        for (int i = 0; i < 16; i++) wrong += !same(out[i], (float)(e2m1_def(codes[i]) * e4m3_def(sb)) / S);
        EXPECT(wrong == 0, "NVFP4 S=%a: %d dequantized values differ", (double)S, wrong);
    }
    EXPECT(bad_mul == 0, "NVFP4 encode multiplier differs from 1/(s*(1/S)) %d times", bad_mul);
    EXPECT(bad_val == 0, "NVFP4 value differs from (e2m1*s)/S %d times", bad_val);
}

/* ---- FP8-BLOCK -------------------------------------------------------------------- */

static void test_fp8_block(void)
{
    const moe_ep_format_t f = MOE_EP_FORMAT_FP8_BLOCK;
    float x[256], out[256];
    uint8_t codes[256], sc[8];

    /* Two blocks: amax 448 (s = 1) and a tiny one (amax < 1e-4 -> s = 1e-4/448). */
    for (int i = 0; i < 128; i++) x[i] = (float)(i - 64) * 3.3f;
    x[100] = -448.0f;
    for (int i = 128; i < 256; i++) x[i] = (float)(i - 192) * 1e-6f;
    quant_row(f, x, 256, 0.0f, codes, sc);
    float s0 = le_f32(sc), s1 = le_f32(sc + 4);
    EXPECT(s0 == 1.0f, "FP8_BLOCK amax 448 scale %a", (double)s0);
    EXPECT(sc[0] == 0x00 && sc[1] == 0x00 && sc[2] == 0x80 && sc[3] == 0x3F, "FP8_BLOCK scale LE bytes");
    float want_s1 = 1e-4f / 448.0f;
    EXPECT(bits(s1) == bits(want_s1), "FP8_BLOCK amax<1e-4 scale %a want %a", (double)s1, (double)want_s1);
    for (int i = 0; i < 256; i++) {
        float s = i < 128 ? s0 : want_s1;
        uint8_t want = e4m3_ref((double)(x[i] * (1.0f / s)));
        EXPECT(codes[i] == want, "FP8_BLOCK element %d: 0x%02X want 0x%02X", i, codes[i], want);
    }
    EXPECT(codes[100] == 0xFE, "FP8_BLOCK amax element 0x%02X", codes[100]);
    dequant_row(f, x, 256, 0.0f, out);
    for (int i = 0; i < 256; i++) {
        float want = (float)(e4m3_def(codes[i]) * (double)(i < 128 ? s0 : s1));
        EXPECT(same(out[i], want), "FP8_BLOCK dequant %d: %a want %a", i, (double)out[i], (double)want);
    }

    /* A general amax: s = amax / 448 in fp32. */
    for (int i = 0; i < 128; i++) x[i] = (float)((i * 53) % 101 - 50) * 0.0173f;
    float amax = 0.0f;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(x[i]));
    quant_row(f, x, 128, 0.0f, codes, sc);
    EXPECT(bits(le_f32(sc)) == bits(amax / 448.0f), "FP8_BLOCK scale %a", (double)le_f32(sc));
    for (int i = 0; i < 128; i++)
        EXPECT(codes[i] == e4m3_ref((double)(x[i] * (1.0f / (amax / 448.0f)))), "FP8_BLOCK element %d", i);

    /* amax 0 -> s = 1e-4/448, elements 0. */
    memset(x, 0, sizeof x);
    quant_row(f, x, 128, 0.0f, codes, sc);
    EXPECT(bits(le_f32(sc)) == bits(want_s1), "FP8_BLOCK zero block scale");
    for (int i = 0; i < 128; i++) EXPECT(codes[i] == 0, "FP8_BLOCK zero element");

    /* NaN or Inf -> scale NaN (0x7FC00000), elements 0x7F; the next block is unaffected. */
    const float specials[] = {NAN, INFINITY, -INFINITY};
    for (int j = 0; j < 3; j++) {
        for (int i = 0; i < 256; i++) x[i] = (float)(i % 13) - 6.0f;
        x[77] = specials[j];
        quant_row(f, x, 256, 0.0f, codes, sc);
        EXPECT(bits(le_f32(sc)) == 0x7FC00000u, "FP8_BLOCK special %g scale %08X", (double)specials[j],
               (unsigned)bits(le_f32(sc)));
        for (int i = 0; i < 128; i++) EXPECT(codes[i] == 0x7F, "FP8_BLOCK special element 0x%02X", codes[i]);
        EXPECT(!isnan(le_f32(sc + 4)), "FP8_BLOCK block after special");
        dequant_row(f, x, 256, 0.0f, out);
        EXPECT(isnan(out[0]) && isnan(out[127]) && !isnan(out[128]), "FP8_BLOCK special dequant");
    }
}

/* ---- FP4 wire -------------------------------------------------------------------- */

static void test_fp4_wire(void)
{
    const moe_ep_format_t f = MOE_EP_FORMAT_FP4_WIRE;
    float x[32], out[32];
    uint8_t codes[32], sc[4];

    /* amax 6 -> scale bf16 1.0 (0x3F80), elements E2M1(x). */
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 0.37f;
    x[2] = 6.0f;
    /* amax 7 -> bf16(7/6) = 0x3F95 (1.1640625); 7 / 1.1640625 > 6 clamps to code 7. */
    for (int i = 16; i < 32; i++) x[i] = (float)(i - 24) * 0.41f;
    x[20] = -7.0f;
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(le_u16(sc) == 0x3F80, "FP4_WIRE amax 6 scale 0x%04X", le_u16(sc));
    EXPECT(le_u16(sc + 2) == 0x3F95, "FP4_WIRE amax 7 scale 0x%04X", le_u16(sc + 2));
    for (int i = 0; i < 32; i++) {
        float s = i < 16 ? 1.0f : 1.1640625f;
        uint8_t want = e2m1_ref(fmin(6.0, fmax(-6.0, (double)(x[i] * (1.0f / s)))));
        EXPECT(codes[i] == want, "FP4_WIRE element %d: %d want %d", i, codes[i], want);
    }
    EXPECT(codes[20] == 15, "FP4_WIRE clamped element %d", codes[20]);
    dequant_row(f, x, 32, 0.0f, out);
    for (int i = 0; i < 32; i++) /* exact: 2-bit times 8-bit significand */
        EXPECT((double)out[i] == e2m1_def(codes[i]) * (i < 16 ? 1.0 : 1.1640625), "FP4_WIRE dequant %d", i);

    /* Tiny and huge blocks: the bf16 scale keeps the range, dequantization stays exact. */
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 5) * 1e-30f;
    for (int i = 16; i < 32; i++) x[i] = (float)(i - 21) * 1e36f;
    quant_row(f, x, 32, 0.0f, codes, sc);
    EXPECT(le_u16(sc) == moe_ep_bf16_from_f32(x[15] / 6.0f), "FP4_WIRE tiny scale 0x%04X", le_u16(sc));
    EXPECT(le_u16(sc + 2) == moe_ep_bf16_from_f32(x[31] / 6.0f), "FP4_WIRE huge scale 0x%04X", le_u16(sc + 2));
    dequant_row(f, x, 32, 0.0f, out);
    for (int i = 0; i < 32; i++) {
        double s = (double)from_bits((uint32_t)le_u16(sc + 2 * (i / 16)) << 16);
        EXPECT((double)out[i] == e2m1_def(codes[i]) * s, "FP4_WIRE dequant exact %d", i);
    }
    EXPECT(rel_l2(out, x, 16) < 0.2 && rel_l2(out + 16, x + 16, 16) < 0.2, "FP4_WIRE extreme ranges");

    /* amax 0 -> scale 0, elements 0. */
    memset(x, 0, sizeof x);
    quant_row(f, x, 16, 0.0f, codes, sc);
    EXPECT(le_u16(sc) == 0, "FP4_WIRE zero scale 0x%04X", le_u16(sc));
    for (int i = 0; i < 16; i++) EXPECT(codes[i] == 0, "FP4_WIRE zero element");

    /* NaN or Inf -> scale 0x7FC0 (LE bytes C0 7F), elements 0. */
    const float specials[] = {NAN, INFINITY, -INFINITY};
    for (int j = 0; j < 3; j++) {
        for (int i = 0; i < 32; i++) x[i] = (float)(i % 5) - 2.0f;
        x[9] = specials[j];
        quant_row(f, x, 32, 0.0f, codes, sc);
        EXPECT(sc[0] == 0xC0 && sc[1] == 0x7F, "FP4_WIRE special %g scale %02X%02X", (double)specials[j],
               sc[1], sc[0]);
        for (int i = 0; i < 16; i++) EXPECT(codes[i] == 0, "FP4_WIRE special element %d", codes[i]);
        EXPECT(le_u16(sc + 2) != 0x7FC0, "FP4_WIRE block after special");
        dequant_row(f, x, 32, 0.0f, out);
        EXPECT(isnan(out[0]) && !isnan(out[16]), "FP4_WIRE special dequant");
    }
}

/* ---- BF16 -------------------------------------------------------------------------- */

static void test_bf16(void)
{
    /* 1 + 2^-8 ties to 1.0 (even), just above goes up, 1 + 3*2^-8 ties up to even. */
    const float x[] = {1.0f, 0x1.01p0f, nextafterf(0x1.01p0f, 2.0f), 0x1.03p0f, -2.5f, NAN, INFINITY, -0.0f};
    const uint16_t want[] = {0x3F80, 0x3F80, 0x3F81, 0x3F82, 0xC020, 0x7FC0, 0x7F80, 0x8000};
    const int n = (int)(sizeof x / sizeof x[0]);
    uint8_t data[16];
    float out[8];
    EXPECT(moe_ep_quantize(MOE_EP_FORMAT_BF16, x, 1, n, 0.0f, data, NULL) == MOE_EP_SUCCESS,
           "BF16 with NULL scales: %s", moe_ep_last_error());
    for (int i = 0; i < n; i++)
        EXPECT(le_u16(data + 2 * i) == want[i], "BF16(%a) = 0x%04X want 0x%04X", (double)x[i],
               le_u16(data + 2 * i), want[i]);
    EXPECT(data[0] == 0x80 && data[1] == 0x3F, "BF16 little-endian");
    EXPECT(moe_ep_dequantize(MOE_EP_FORMAT_BF16, data, NULL, 1, n, 0.0f, out) == MOE_EP_SUCCESS,
           "BF16 dequantize");
    for (int i = 0; i < n; i++)
        EXPECT(same(out[i], from_bits((uint32_t)want[i] << 16)), "BF16 dequant %d", i);
}

/* ---- round trips on random data ---------------------------------------------------- */

static void test_round_trip(uint64_t *rng)
{
    enum { ROWS = 8, COLS = 512, N = ROWS * COLS };
    static float x[N], y1[N], y2[N];
    static uint8_t d1[2 * N], d2[2 * N], s1[N], s2[N];
    const double bound[] = {0.005, 0.05, 0.15, 0.2, 0.05, 0.15}; /* indexed by format */
    const float stds[] = {1e-3f, 1.0f, 1e3f};
    for (int fi = 0; fi < MOE_EP_FORMAT_COUNT_; fi++) {
        moe_ep_format_t f = (moe_ep_format_t)fi;
        const char *name = moe_ep_format_name(f);
        int blk = block_of(f);
        for (int si = 0; si < 3; si++) {
            test_fill_normal(x, N, stds[si], rng);
            float amax = 0.0f;
            for (int i = 0; i < N; i++) amax = fmaxf(amax, fabsf(x[i]));
            float S = f == MOE_EP_FORMAT_NVFP4 ? moe_ep_nvfp4_global_scale(amax) : 0.0f;
            uint8_t *sp1 = f == MOE_EP_FORMAT_BF16 ? NULL : s1, *sp2 = f == MOE_EP_FORMAT_BF16 ? NULL : s2;
            int ok = moe_ep_quantize(f, x, ROWS, COLS, S, d1, sp1) == MOE_EP_SUCCESS &&
                     moe_ep_dequantize(f, d1, sp1, ROWS, COLS, S, y1) == MOE_EP_SUCCESS &&
                     moe_ep_quantize(f, y1, ROWS, COLS, S, d2, sp2) == MOE_EP_SUCCESS &&
                     moe_ep_dequantize(f, d2, sp2, ROWS, COLS, S, y2) == MOE_EP_SUCCESS;
            EXPECT(ok, "%s round trip calls: %s", name, moe_ep_last_error());
            double err = rel_l2(y1, x, N);
            EXPECT(err < bound[fi], "%s std %g: relative L2 error %.4g >= %.4g", name, (double)stds[si], err,
                   bound[fi]);
            if (f == MOE_EP_FORMAT_BF16 || f == MOE_EP_FORMAT_FP8_BLOCK || f == MOE_EP_FORMAT_FP4_WIRE) {
                /* Requantizing the dequantized values reproduces every byte. */
                EXPECT(memcmp(d1, d2, data_size(f, N)) == 0 &&
                           memcmp(s1, s2, scales_size(f, N)) == 0,
                       "%s std %g: quantize(dequantize(q)) != q", name, (double)stds[si]);
                continue;
            }
            /* MX and NVFP4: per block. A block whose largest element is the top of
             * the range reproduces its bytes. MX blocks whose largest element
             * rounded down to half the range (224 E4M3, 3.0 E2M1) come back with
             * the scale one lower and the codes doubled: same values. */
            int nblocks = N / blk, same_bytes = 0, top_blocks = 0;
            for (int b = 0; b < nblocks; b++) {
                int top = 0;
                for (int i = b * blk; i < (b + 1) * blk; i++) {
                    int m = code_at(f, d1, i) & (is_fp4(f) ? 7 : 0x7F);
                    if (m > top) top = m;
                }
                int bytes_equal = s1[b] == s2[b];
                for (int i = b * blk; i < (b + 1) * blk; i++) bytes_equal &= code_at(f, d1, i) == code_at(f, d2, i);
                same_bytes += bytes_equal;
                int low_top = f == MOE_EP_FORMAT_MXFP8 ? top == 0x76 : (f == MOE_EP_FORMAT_MXFP4 ? top == 5 : 0);
                int full_top = f == MOE_EP_FORMAT_NVFP4 ? top == 7 : !low_top;
                top_blocks += full_top;
                if (full_top)
                    EXPECT(bytes_equal, "%s std %g block %d (top code 0x%02X): bytes changed", name,
                           (double)stds[si], b, top);
                if (low_top)
                    EXPECT(s2[b] == s1[b] - 1, "%s block %d: low top, scale %d -> %d", name, b, s1[b], s2[b]);
            }
            if (f != MOE_EP_FORMAT_NVFP4) {
                int vsame = 1;
                for (int i = 0; i < N; i++) vsame &= same(y1[i], y2[i]);
                EXPECT(vsame, "%s std %g: dequantize(quantize(y)) != y", name, (double)stds[si]);
            }
            /* NVFP4 block scales are E4M3 (step <= 1/8): the largest element lands
             * in [5.6, 6.4] and encodes as 6 unless the block scale is subnormal. */
            int need = f == MOE_EP_FORMAT_NVFP4 ? nblocks * 9 / 10 : nblocks / 2;
            EXPECT(top_blocks >= need, "%s: only %d of %d blocks at the top of the range", name, top_blocks,
                   nblocks);
            EXPECT(same_bytes >= top_blocks, "%s: %d blocks reproduce bytes", name, same_bytes);
        }
    }
}

/* ---- FP8-BLOCK weights (128x128 tiles) --------------------------------------------- */

static void test_fp8_block_weight(uint64_t *rng)
{
    enum { R = 256, C = 384, TR = R / 128, TC = C / 128 };
    static float x[R * C], out[R * C];
    static uint8_t data[R * C], data2[R * C];
    float sc[TR * TC], sc2[TR * TC];
    const float stds[TR * TC] = {1.0f, 1.0f, 1.0f, 1e-6f, 0.0f, 100.0f};
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) x[r * C + c] = test_rand_normal(rng, stds[(r / 128) * TC + c / 128]);
    x[5 * C + 200] = NAN;               /* tile (0,1) */
    x[100 * C + 300] = -INFINITY;       /* tile (0,2) */
    x[130 * C + 10] = 3e-5f;            /* tile (1,0): amax < 1e-4 */
    EXPECT(moe_ep_quantize_fp8_block_weight(x, R, C, data, sc) == MOE_EP_SUCCESS, "weight quantize: %s",
           moe_ep_last_error());
    EXPECT(moe_ep_dequantize_fp8_block_weight(data, sc, R, C, out) == MOE_EP_SUCCESS, "weight dequantize");
    for (int t = 0; t < TR * TC; t++) {
        int r0 = (t / TC) * 128, c0 = (t % TC) * 128, bad = 0;
        float amax = 0.0f;
        for (int r = r0; r < r0 + 128; r++)
            for (int c = c0; c < c0 + 128; c++) {
                float v = x[r * C + c];
                if (isnan(v) || isinf(v)) bad = 1;
                else amax = fmaxf(amax, fabsf(v));
            }
        float s = bad ? NAN : fmaxf(amax, 1e-4f) / 448.0f;
        EXPECT(bad ? isnan(sc[t]) : bits(sc[t]) == bits(s), "tile %d scale %a want %a", t, (double)sc[t],
               (double)s);
        int wrong = 0, dwrong = 0;
        for (int r = r0; r < r0 + 128; r++)
            for (int c = c0; c < c0 + 128; c++) {
                uint8_t want = bad ? 0x7F : e4m3_ref((double)(x[r * C + c] * (1.0f / s)));
                wrong += data[r * C + c] != want;
                dwrong += !same(out[r * C + c], (float)(e4m3_def(want) * (double)s));
            }
        EXPECT(wrong == 0, "tile %d: %d codes differ", t, wrong);
        EXPECT(dwrong == 0, "tile %d: %d dequantized values differ", t, dwrong);
    }
    EXPECT(isnan(sc[1]) && isnan(sc[2]) && !isnan(sc[0]), "NaN/Inf tiles");
    EXPECT(bits(sc[3]) == bits(1e-4f / 448.0f) && bits(sc[4]) == bits(1e-4f / 448.0f), "tiny tiles use 1e-4");
    /* Finite tiles requantize to the same bytes. */
    EXPECT(moe_ep_quantize_fp8_block_weight(out, R, C, data2, sc2) == MOE_EP_SUCCESS, "weight requantize");
    int same_tiles = 1;
    for (int t = 0; t < TR * TC; t++) {
        if (isnan(sc[t])) continue;
        same_tiles &= bits(sc[t]) == bits(sc2[t]);
        int r0 = (t / TC) * 128, c0 = (t % TC) * 128;
        for (int r = r0; r < r0 + 128; r++) same_tiles &= memcmp(data + r * C + c0, data2 + r * C + c0, 128) == 0;
    }
    EXPECT(same_tiles, "weight quantize(dequantize(q)) != q");
    float err_x[128 * 128], err_y[128 * 128];
    for (int r = 0; r < 128; r++)
        for (int c = 0; c < 128; c++) {
            err_x[r * 128 + c] = x[(128 + r) * C + 256 + c];
            err_y[r * 128 + c] = out[(128 + r) * C + 256 + c];
        }
    EXPECT(rel_l2(err_y, err_x, 128 * 128) < 0.05, "weight tile error %g", rel_l2(err_y, err_x, 128 * 128));

    /* A 128x128 tile whose rows all equal one activation block: same scale, same codes. */
    static float tile[128 * 128];
    uint8_t tdata[128 * 128], act[128], as[4];
    float ts;
    for (int c = 0; c < 128; c++) tile[c] = test_rand_normal(rng, 2.0f);
    for (int r = 1; r < 128; r++) memcpy(tile + r * 128, tile, 128 * sizeof(float));
    EXPECT(moe_ep_quantize_fp8_block_weight(tile, 128, 128, tdata, &ts) == MOE_EP_SUCCESS, "tile");
    EXPECT(moe_ep_quantize(MOE_EP_FORMAT_FP8_BLOCK, tile, 1, 128, 0.0f, act, as) == MOE_EP_SUCCESS, "act");
    EXPECT(bits(ts) == bits(le_f32(as)) && memcmp(tdata + 127 * 128, act, 128) == 0,
           "weight tile and activation block rules agree");
}

/* ---- API misuse ------------------------------------------------------------------- */

static int all_bytes(const void *p, size_t n, uint8_t v)
{
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

static void expect_invalid(moe_ep_status_t st, const char *what)
{
    EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT, "%s: status %d", what, st);
    EXPECT(moe_ep_last_error()[0] != '\0', "%s: empty last error", what);
}

static void test_api_misuse(void)
{
    static float x[256], out[256];
    static uint8_t data[512], sc[64];
    float wsc[4];
    for (int i = 0; i < 256; i++) x[i] = (float)i - 100.0f;
    memset(data, 0xA5, sizeof data);
    memset(sc, 0xA5, sizeof sc);
    memset(out, 0xA5, sizeof out);
    memset(wsc, 0xA5, sizeof wsc);
    const moe_ep_format_t mx = MOE_EP_FORMAT_MXFP8;

    expect_invalid(moe_ep_quantize(mx, NULL, 1, 32, 0.0f, data, sc), "NULL x");
    expect_invalid(moe_ep_quantize(mx, x, 1, 32, 0.0f, NULL, sc), "NULL data");
    expect_invalid(moe_ep_quantize(mx, x, 1, 32, 0.0f, data, NULL), "NULL scales");
    expect_invalid(moe_ep_quantize(mx, x, -1, 32, 0.0f, data, sc), "negative rows");
    expect_invalid(moe_ep_quantize(mx, x, 1, -32, 0.0f, data, sc), "negative cols");
    expect_invalid(moe_ep_quantize(mx, x, 1, 33, 0.0f, data, sc), "MXFP8 cols 33");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_MXFP4, x, 1, 48, 0.0f, data, sc), "MXFP4 cols 48");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_NVFP4, x, 1, 8, 1.0f, data, sc), "NVFP4 cols 8");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_FP8_BLOCK, x, 1, 64, 0.0f, data, sc), "FP8_BLOCK cols 64");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_FP4_WIRE, x, 1, 17, 0.0f, data, sc), "FP4_WIRE cols 17");
    expect_invalid(moe_ep_quantize((moe_ep_format_t)99, x, 1, 32, 0.0f, data, sc), "format 99");
    expect_invalid(moe_ep_quantize((moe_ep_format_t)-1, x, 1, 32, 0.0f, data, sc), "format -1");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_COUNT_, x, 1, 32, 0.0f, data, sc), "format COUNT_");
    expect_invalid(moe_ep_quantize(MOE_EP_FORMAT_BF16, NULL, 1, 4, 0.0f, data, NULL), "BF16 NULL x");
    EXPECT(all_bytes(data, sizeof data, 0xA5) && all_bytes(sc, sizeof sc, 0xA5), "failed quantize wrote output");

    expect_invalid(moe_ep_dequantize(mx, NULL, sc, 1, 32, 0.0f, out), "dequantize NULL data");
    expect_invalid(moe_ep_dequantize(mx, data, NULL, 1, 32, 0.0f, out), "dequantize NULL scales");
    expect_invalid(moe_ep_dequantize(mx, data, sc, 1, 32, 0.0f, NULL), "dequantize NULL out");
    expect_invalid(moe_ep_dequantize(mx, data, sc, -2, 32, 0.0f, out), "dequantize negative rows");
    expect_invalid(moe_ep_dequantize(mx, data, sc, 1, 40, 0.0f, out), "dequantize cols 40");
    expect_invalid(moe_ep_dequantize((moe_ep_format_t)99, data, sc, 1, 32, 0.0f, out), "dequantize format 99");
    EXPECT(all_bytes(out, sizeof out, 0xA5), "failed dequantize wrote output");

    expect_invalid(moe_ep_quantize_fp8_block_weight(NULL, 128, 128, data, wsc), "weight NULL x");
    expect_invalid(moe_ep_quantize_fp8_block_weight(x, 128, 128, NULL, wsc), "weight NULL data");
    expect_invalid(moe_ep_quantize_fp8_block_weight(x, 128, 128, data, NULL), "weight NULL scales");
    expect_invalid(moe_ep_quantize_fp8_block_weight(x, 100, 128, data, wsc), "weight rows 100");
    expect_invalid(moe_ep_quantize_fp8_block_weight(x, 128, 64, data, wsc), "weight cols 64");
    expect_invalid(moe_ep_quantize_fp8_block_weight(x, -128, 128, data, wsc), "weight negative rows");
    expect_invalid(moe_ep_dequantize_fp8_block_weight(data, NULL, 128, 128, out), "weight dequant NULL scales");
    expect_invalid(moe_ep_dequantize_fp8_block_weight(data, wsc, 128, 96, out), "weight dequant cols 96");
    expect_invalid(moe_ep_dequantize_fp8_block_weight(data, wsc, 128, 128, NULL), "weight dequant NULL out");
    EXPECT(all_bytes(data, sizeof data, 0xA5) && all_bytes(wsc, sizeof wsc, 0xA5) &&
               all_bytes(out, sizeof out, 0xA5),
           "failed weight call wrote output");

    /* A successful call clears the last error; empty matrices are fine. */
    EXPECT(moe_ep_quantize(mx, x, 0, 32, 0.0f, data, sc) == MOE_EP_SUCCESS, "zero rows");
    EXPECT(moe_ep_last_error()[0] == '\0', "success clears the last error: %s", moe_ep_last_error());
    EXPECT(moe_ep_quantize(mx, NULL, 0, 0, 0.0f, NULL, NULL) == MOE_EP_SUCCESS, "empty with NULL");
    EXPECT(moe_ep_dequantize(MOE_EP_FORMAT_NVFP4, data, sc, 3, 0, 1.0f, out) == MOE_EP_SUCCESS, "zero cols");
    EXPECT(moe_ep_quantize_fp8_block_weight(x, 0, 128, data, wsc) == MOE_EP_SUCCESS, "weight zero rows");
    EXPECT(all_bytes(data, sizeof data, 0xA5) && all_bytes(out, sizeof out, 0xA5), "empty call wrote output");
}

static void test_global_scale(void)
{
    EXPECT(moe_ep_nvfp4_global_scale(2688.0f) == 1.0f, "S(2688)");
    EXPECT(moe_ep_nvfp4_global_scale(1.0f) == 2688.0f, "S(1)");
    EXPECT(moe_ep_nvfp4_global_scale(448.0f) == 6.0f, "S(448)");
    EXPECT(bits(moe_ep_nvfp4_global_scale(3.7f)) == bits(2688.0f / 3.7f), "S(3.7)");
    const float one[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        EXPECT(moe_ep_nvfp4_global_scale(one[i]) == 1.0f, "S(%g) = %g", (double)one[i],
               (double)moe_ep_nvfp4_global_scale(one[i]));
    float tiny = moe_ep_nvfp4_global_scale(FLT_TRUE_MIN);
    EXPECT(tiny > 0.0f && isfinite(tiny), "S(tiny) = %g must stay a valid encode scale", (double)tiny);
}

/* The register tile's E2M1 fragment words: a spread word's pairs, as the
 * tile decodes them, are the bytes' own f16x2 bits (every byte value in
 * every place, the other bytes random). */
static void test_e2m1_words(uint64_t *rng)
{
    for (int i = 0; i < 4 * 256 * 16; i++) { /* place p = (i / 16) % 4, byte b = i / 64 */
        uint32_t w = (uint32_t)test_rand_u64(rng), p = (uint32_t)(i / 16) % 4, b = (uint32_t)(i / 64) % 256;
        w = (w & ~(0xFFu << (8 * p))) | (b << (8 * p));
        uint32_t s = moe_ep_e2m1_word_spread(w), lo, hi;
        for (int odd = 0; odd < 2; odd++) {
            moe_ep_e2m1_word_pairs(s, odd, &lo, &hi);
            uint32_t want_lo = moe_ep_e2m1x2_f16_bits((w >> (16 * odd)) & 0xFF),
                     want_hi = moe_ep_e2m1x2_f16_bits((w >> (16 * odd + 8)) & 0xFF);
            EXPECT(lo == want_lo && hi == want_hi, "E2M1 word %08x step %d: pairs %08x %08x, want %08x %08x", w, odd,
                   lo, hi, want_lo, want_hi);
        }
    }
    /* a stored word's four pairs by byte lookups: every byte value in every place */
    for (int i = 0; i < 4 * 256 * 4; i++) {
        uint32_t w = (uint32_t)test_rand_u64(rng), p = (uint32_t)(i / 4) % 4, b = (uint32_t)(i / 16) % 256, o[4];
        w = (w & ~(0xFFu << (8 * p))) | (b << (8 * p));
        moe_ep_e2m1_word_f16(w, o);
        for (int q = 0; q < 4; q++)
            EXPECT(o[q] == moe_ep_e2m1x2_f16_bits((w >> (8 * q)) & 0xFF), "E2M1 word %08x pair %d: %08x, want %08x", w,
                   q, o[q], moe_ep_e2m1x2_f16_bits((w >> (8 * q)) & 0xFF));
    }
    /* and the f16x2 bits are the values x 2^-14 */
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t h = moe_ep_e2m1x2_f16_bits(b);
        for (int half = 0; half < 2; half++) {
            uint32_t f = (h >> (16 * half)) & 0xFFFF, e = (f >> 10) & 31, m = f & 1023;
            double v = (e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14)) * ((f >> 15) ? -1.0 : 1.0);
            double want = (double)moe_ep_e2m1_to_f32((uint8_t)((b >> (4 * half)) & 15)) * ldexp(1.0, -14);
            EXPECT(v == want, "E2M1 pair %02x half %d: %g, want %g", b, half, v, want);
        }
    }
}

int main(void)
{
    uint64_t rng = test_seed();
    init_tables();
    test_e4m3_codes();
    test_e4m3_midpoints();
    test_e4m3_specials();
    test_e2m1();
    test_e2m1_words(&rng);
    test_ue8m0();
    test_chunk_shortcuts(&rng);
    test_mx_blocks(MOE_EP_FORMAT_MXFP8);
    test_mx_blocks(MOE_EP_FORMAT_MXFP4);
    test_mx_random(&rng);
    test_nvfp4();
    test_nvfp4_random(&rng);
    test_fp8_block();
    test_fp4_wire();
    test_bf16();
    test_round_trip(&rng);
    test_fp8_block_weight(&rng);
    test_api_misuse();
    test_global_scale();
    return test_summary("test_codec");
}
