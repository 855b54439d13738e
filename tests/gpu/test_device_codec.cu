/* The device codec agrees bit for bit with the host codec (formats/codec.h):
 *   - scalar rounding (fp32 -> E4M3, E2M1, bf16) over 2^24 bit patterns that
 *     cover every exponent, plus the specials (+-0, +-inf, NaN, 448 and its
 *     neighbours);
 *   - the chunk epilogues' SwiGLU (moe_ep_swiglu_ftz) against moe_ep_swiglu's
 *     device form, on 2^24 gates with and without the clamp; the serial
 *     epilogue's E2M1 blocks (NVFP4, the FP4 wire) against the host's;
 *   - the dispatch's row encoder (rows.cuh: 8 values per lane, a block's amax
 *     shared across lanes by shuffles) against the host's whole-block
 *     encoders, for every activation format, on rows of random magnitudes
 *     with NaN and inf blocks among them;
 *   - the register tile's E2M1 word decoder (byte lookups by prmt) against
 *     the host's per-byte f16 bits, every 16-bit half in both places.
 * Outputs are poisoned before each run. Exits 77 without a usable GPU. */
extern "C" {
#include "test_util.h"
}

#include "formats/codec.h"
#include "kernels/sm90/gemm_common.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_device_codec"
#include "cuda_check.h"

/* ---- SwiGLU: the chunk epilogues' .ftz form against moe_ep_swiglu's -------------- */

__global__ void swiglu_pairs(const float *g, const float *u, int64_t n, float c, uint32_t *ftz, uint32_t *plain)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        ftz[i] = __float_as_uint(moe_ep_swiglu_ftz(g[i], u[i], c));
        plain[i] = __float_as_uint(moe_ep_swiglu(g[i], u[i], c));
    }
}

/* Gates over every exponent (2^24 bit patterns, specials first), up values
 * random; with and without the clamp: the same bits (NaN as NaN). */
static void test_swiglu(uint64_t *rng)
{
    const int64_t n = (int64_t)1 << 24;
    float *g = (float *)malloc(n * 4), *u = (float *)malloc(n * 4);
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)(i << 8) | (uint32_t)(test_rand_u64(rng) & 0xFFu);
        memcpy(&g[i], &b, 4);
        u[i] = test_rand_normal(rng, 4.0f);
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 10.0f, -10.0f, 87.0f, -87.0f, 87.5f, -87.5f,
                              88.8f, -88.8f, 126.0f, -126.0f, 1e-40f, -1e-40f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) g[i] = specials[i];
    u[1] = NAN, u[2] = INFINITY, u[3] = -INFINITY;
    float *dg, *du;
    uint32_t *dftz, *dplain;
    CK(cudaMalloc(&dg, n * 4));
    CK(cudaMalloc(&du, n * 4));
    CK(cudaMalloc(&dftz, n * 4));
    CK(cudaMalloc(&dplain, n * 4));
    CK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(du, u, n * 4, cudaMemcpyHostToDevice));
    uint32_t *ftz = (uint32_t *)malloc(n * 4), *plain = (uint32_t *)malloc(n * 4);
    const float clamps[] = {0.0f, 10.0f};
    for (int ci = 0; ci < 2; ci++) {
        CK(cudaMemset(dftz, 0xA5, n * 4));
        CK(cudaMemset(dplain, 0x5A, n * 4));
        swiglu_pairs<<<1024, 256>>>(dg, du, n, clamps[ci], dftz, dplain);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ftz, dftz, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(plain, dplain, n * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            const bool nan_a = (ftz[i] & 0x7FFFFFFFu) > 0x7F800000u, nan_b = (plain[i] & 0x7FFFFFFFu) > 0x7F800000u;
            if (!(nan_a && nan_b) && ftz[i] != plain[i] && bad++ == 0) first = i;
        }
        EXPECT(bad == 0, "swiglu (clamp %g): %lld of %lld differ (first: g %a u %a: 0x%08x, moe_ep_swiglu 0x%08x)",
               (double)clamps[ci], (long long)bad, (long long)n, first >= 0 ? g[first] : 0.0f,
               first >= 0 ? u[first] : 0.0f, first >= 0 ? ftz[first] : 0u, first >= 0 ? plain[first] : 0u);
    }
    printf("  swiglu: %lld gates, clamp 0 / 10, moe_ep_swiglu's bits\n", (long long)n);
    free(g), free(u), free(ftz), free(plain);
    CK(cudaFree(dg));
    CK(cudaFree(du));
    CK(cudaFree(dftz));
    CK(cudaFree(dplain));
}

/* ---- E2M1 blocks: the serial epilogue's encoder (store_out_block) ------------------ */

__global__ void encode_e2m1_blocks(moe_ep_format_t f, const float *x, int64_t n, float S, uint8_t *data,
                                   uint8_t *scales)
{
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; 16 * b < n; b += (int64_t)gridDim.x * blockDim.x)
        store_out_block(f, x + 16 * b, 16, 0, n, 16 * b, S, data, scales, 0);
}

/* Blocks of 16 with a magnitude each from 2^-140 to 2^120 (some all zero, some
 * with a NaN or an inf) in NVFP4 (a usual S, and one whose 1 / S is
 * subnormal) and the FP4 wire, against the host's whole-block encoders. */
static void test_e2m1_blocks(uint64_t *rng)
{
    const int64_t n = (int64_t)1 << 20, blocks = n / 16;
    float *x = (float *)malloc(n * 4), *dx;
    for (int64_t b = 0; b < blocks; b++) {
        const float m = ldexpf(1.0f, (int)(test_rand_u64(rng) % 261) - 140);
        const int kind = (int)(test_rand_u64(rng) % 32), at = (int)(test_rand_u64(rng) % 16);
        for (int i = 0; i < 16; i++) x[16 * b + i] = kind == 0 ? 0.0f : test_rand_normal(rng, 1.0f) * m;
        if (kind == 1) x[16 * b + at] = NAN;
        if (kind == 2) x[16 * b + at] = -INFINITY;
        if (kind == 3) x[16 * b + at] = INFINITY;
    }
    uint8_t *hd = (uint8_t *)malloc(n / 2), *hs = (uint8_t *)malloc(blocks * 2), *gd = (uint8_t *)malloc(n / 2),
            *gs = (uint8_t *)malloc(blocks * 2), *dd, *ds;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&dd, n / 2));
    CK(cudaMalloc(&ds, blocks * 2));
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    const struct {
        moe_ep_format_t f;
        float S;
    } cases[] = {{MOE_EP_FORMAT_NVFP4, 2688.0f / 7.0f}, {MOE_EP_FORMAT_NVFP4, 3e38f}, {MOE_EP_FORMAT_FP4_WIRE, 1.0f}};
    for (int ci = 0; ci < 3; ci++) {
        const moe_ep_format_t f = cases[ci].f;
        const int sbytes = f == MOE_EP_FORMAT_NVFP4 ? 1 : 2;
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t q[16];
            if (f == MOE_EP_FORMAT_NVFP4) {
                hs[b] = moe_ep_nvfp4_block_encode(x + 16 * b, cases[ci].S, q);
            } else {
                uint16_t sc = moe_ep_fp4_wire_block_encode(x + 16 * b, q);
                memcpy(hs + 2 * b, &sc, 2);
            }
            for (int i = 0; i < 8; i++) hd[8 * b + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
        }
        CK(cudaMemset(dd, 0xA5, n / 2));
        CK(cudaMemset(ds, 0xA5, blocks * 2));
        encode_e2m1_blocks<<<256, 256>>>(f, dx, n, cases[ci].S, dd, ds);
        CK(cudaGetLastError());
        CK(cudaMemcpy(gd, dd, n / 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gs, ds, blocks * 2, cudaMemcpyDeviceToHost));
        int64_t bad_d = 0, bad_s = 0;
        for (int64_t i = 0; i < n / 2; i++) bad_d += gd[i] != hd[i];
        for (int64_t i = 0; i < blocks * sbytes; i++) bad_s += gs[i] != hs[i];
        EXPECT(bad_d == 0 && bad_s == 0, "E2M1 blocks, format %d (S %g): %lld data, %lld scale bytes differ", (int)f,
               (double)cases[ci].S, (long long)bad_d, (long long)bad_s);
    }
    printf("  E2M1 blocks: %lld of 16, nvfp4 (two S) / fp4 wire, the host's bytes\n", (long long)blocks);
    free(x), free(hd), free(hs), free(gd), free(gs);
    CK(cudaFree(dx));
    CK(cudaFree(dd));
    CK(cudaFree(ds));
}

/* ---- scalars ---------------------------------------------------------------- */

__global__ void encode_scalars(const float *x, int64_t n, uint8_t *e4m3, uint8_t *e2m1, uint16_t *bf16)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        e4m3[i] = moe_ep_e4m3_from_f32(x[i]);
        e2m1[i] = moe_ep_e2m1_from_f32(x[i]);
        bf16[i] = moe_ep_bf16_from_f32(x[i]);
    }
}

static void test_scalars(uint64_t *rng)
{
    const int64_t n = (int64_t)1 << 24;
    float *x = (float *)malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) { /* bit patterns: every exponent, random low bits */
        uint32_t u = (uint32_t)(i << 8) | (uint32_t)(test_rand_u64(rng) & 0xFFu);
        memcpy(&x[i], &u, 4);
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, -448.0f, 464.0f, 463.99f, 480.0f,
                              0.015625f, 0.0078125f, 0.001953125f, 0.0009765625f, 6.0f, 5.0f, 0.25f, 0.75f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) x[i] = specials[i];
    float *dx;
    uint8_t *d8, *d4;
    uint16_t *d16;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&d8, n));
    CK(cudaMalloc(&d4, n));
    CK(cudaMalloc(&d16, n * 2));
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d8, 0xA5, n));
    CK(cudaMemset(d4, 0xA5, n));
    CK(cudaMemset(d16, 0xA5, n * 2));
    encode_scalars<<<1024, 256>>>(dx, n, d8, d4, d16);
    CK(cudaGetLastError());
    uint8_t *g8 = (uint8_t *)malloc(n), *g4 = (uint8_t *)malloc(n);
    uint16_t *g16 = (uint16_t *)malloc(n * 2);
    CK(cudaMemcpy(g8, d8, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g4, d4, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g16, d16, n * 2, cudaMemcpyDeviceToHost));
    int64_t bad8 = 0, bad4 = 0, bad16 = 0, first8 = -1;
    for (int64_t i = 0; i < n; i++) {
        if (g8[i] != moe_ep_e4m3_from_f32(x[i]) && bad8++ == 0) first8 = i;
        bad4 += g4[i] != moe_ep_e2m1_from_f32(x[i]);
        bad16 += g16[i] != moe_ep_bf16_from_f32(x[i]);
    }
    EXPECT(bad8 == 0, "e4m3: %lld of %lld differ (first: %a gpu 0x%02x host 0x%02x)", (long long)bad8, (long long)n,
           first8 >= 0 ? x[first8] : 0.0f, first8 >= 0 ? g8[first8] : 0, first8 >= 0 ? moe_ep_e4m3_from_f32(x[first8]) : 0);
    EXPECT(bad4 == 0, "e2m1: %lld of %lld differ", (long long)bad4, (long long)n);
    EXPECT(bad16 == 0, "bf16: %lld of %lld differ", (long long)bad16, (long long)n);
    printf("  scalars: %lld values, e4m3 / e2m1 / bf16 differences %lld / %lld / %lld\n", (long long)n,
           (long long)bad8, (long long)bad4, (long long)bad16);
    test_swiglu(rng);
    test_e2m1_blocks(rng);
    free(x), free(g8), free(g4), free(g16);
    CK(cudaFree(dx));
    CK(cudaFree(d8));
    CK(cudaFree(d4));
    CK(cudaFree(d16));
}

/* ---- E2M1 words: the register tile's decoder (prmt on the device) ---------------- */

__global__ void e2m1_words(const uint32_t *w, int64_t n, uint32_t *o)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        moe_ep_e2m1_word_f16(w[i], o + 4 * i);
}

/* Every 16-bit half in both places (the other half random), against the host's per-byte bits. */
static void test_e2m1_words(uint64_t *rng)
{
    const int64_t n = 2 * 65536;
    uint32_t *w = (uint32_t *)malloc(n * 4), *g = (uint32_t *)malloc(n * 16), *dw, *dg;
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)test_rand_u64(rng), h = (uint32_t)(i % 65536);
        w[i] = i < 65536 ? (r & 0xFFFF0000u) | h : (r & 0xFFFFu) | h << 16;
    }
    CK(cudaMalloc(&dw, n * 4));
    CK(cudaMalloc(&dg, n * 16));
    CK(cudaMemcpy(dw, w, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dg, 0xA5, n * 16));
    e2m1_words<<<256, 256>>>(dw, n, dg);
    CK(cudaGetLastError());
    CK(cudaMemcpy(g, dg, n * 16, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int q = 0; q < 4; q++) bad += g[4 * i + q] != moe_ep_e2m1x2_f16_bits((w[i] >> (8 * q)) & 0xFF);
    EXPECT(bad == 0, "E2M1 words: %lld of %lld pairs differ", (long long)bad, (long long)(4 * n));
    printf("  E2M1 words: %lld words, %lld pairs differ\n", (long long)n, (long long)bad);
    free(w), free(g);
    CK(cudaFree(dw));
    CK(cudaFree(dg));
}

/* ---- rows: the dispatch's encoder ----------------------------------------------- */

__global__ void encode_rows(moe_ep_format_t f, const uint16_t *x, int H, float S, uint8_t *data, uint8_t *scales)
{
    int32_t row = blockIdx.x;
    dispatch_row(f, x + (int64_t)row * H, H, S, data, scales, &row, 1, true, threadIdx.x, blockDim.x);
}

/* Host: row r of x in format f, block by block, into (data, scales). */
static void host_rows(moe_ep_format_t f, const uint16_t *x, int rows, int H, float S, uint8_t *data, uint8_t *scales)
{
    int64_t db = moe_ep_row_data_bytes(f, H), sb = moe_ep_act_scale_stride(f, H);
    int blk = f == MOE_EP_FORMAT_BF16 ? 1 : moe_ep_format_block(f);
    float v[128];
    uint8_t q[128];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < H; c += blk) {
            for (int i = 0; i < blk; i++) v[i] = moe_ep_bf16_to_f32(x[(int64_t)r * H + c + i]);
            uint8_t *d = data + r * db, *s = scales + r * sb;
            if (f == MOE_EP_FORMAT_BF16) {
                memcpy(d + 2 * c, &x[(int64_t)r * H + c], 2);
            } else if (f == MOE_EP_FORMAT_MXFP8) {
                s[c / 32] = moe_ep_mxfp8_block_encode(v, d + c);
            } else if (f == MOE_EP_FORMAT_FP8_BLOCK) {
                float sc = moe_ep_fp8_block_encode(v, d + c);
                memcpy(s + 4 * (c / 128), &sc, 4);
            } else {
                s[c / 16] = moe_ep_nvfp4_block_encode(v, S, q);
                for (int i = 0; i < 8; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
            }
        }
}

/* Rows of bf16 with a magnitude per 128-block from 2^-20 to 2^20 (every
 * eighth block from 2^-140 to 2^120: subnormal bf16, and amax whose MX scale
 * takes the division), some blocks holding a NaN or an inf, some all zero. */
static void fill_rows(uint16_t *x, int rows, int H, uint64_t *rng)
{
    test_fill_bf16(x, (int64_t)rows * H, 1.0f, rng);
    for (int64_t b = 0; b < (int64_t)rows * H / 128; b++) {
        const bool wide = b % 8 == 7;
        float m = wide ? ldexpf(1.0f, (int)(test_rand_u64(rng) % 261) - 140)
                       : ldexpf(1.0f, (int)(test_rand_u64(rng) % 41) - 20);
        int kind = (int)(test_rand_u64(rng) % 16);
        for (int i = 0; i < 128; i++) {
            uint16_t *p = &x[b * 128 + i];
            *p = kind == 0 ? 0 : moe_ep_bf16_from_f32(moe_ep_bf16_to_f32(*p) * m);
        }
        int at = (int)(test_rand_u64(rng) % 128);
        if (kind == 1) x[b * 128 + at] = 0x7FC0; /* NaN */
        if (kind == 2) x[b * 128 + at] = 0xFF80; /* -inf */
    }
}

static void test_rows(uint64_t *rng)
{
    const int rows = 64, H = 4096 + 128; /* not a multiple of the 256-thread block's 2048 elements */
    int64_t n = (int64_t)rows * H;
    uint16_t *x = (uint16_t *)malloc(n * 2), *dx;
    fill_rows(x, rows, H, rng);
    CK(cudaMalloc(&dx, n * 2));
    CK(cudaMemcpy(dx, x, n * 2, cudaMemcpyHostToDevice));
    /* NVFP4 twice: a usual S, and one so large that 1 / S is subnormal (the encoder's
     * fallback: zeros times an infinite multiplier) */
    const moe_ep_format_t fmts[] = {MOE_EP_FORMAT_BF16, MOE_EP_FORMAT_MXFP8, MOE_EP_FORMAT_FP8_BLOCK,
                                    MOE_EP_FORMAT_NVFP4, MOE_EP_FORMAT_NVFP4};
    for (int fi = 0; fi < 5; fi++) {
        moe_ep_format_t f = fmts[fi];
        const float S = fi == 4 ? 3e38f : 2688.0f / 7.0f;
        size_t db = (size_t)rows * moe_ep_row_data_bytes(f, H), sb = (size_t)rows * moe_ep_act_scale_stride(f, H);
        uint8_t *hd = (uint8_t *)malloc(db), *hs = (uint8_t *)calloc(sb + 1, 1);
        uint8_t *gd = (uint8_t *)malloc(db), *gs = (uint8_t *)calloc(sb + 1, 1), *dd, *ds;
        host_rows(f, x, rows, H, S, hd, hs);
        CK(cudaMalloc(&dd, db));
        CK(cudaMalloc(&ds, sb + 1));
        for (int threads = 128; threads <= 384; threads += 128) { /* the split's and the mega's block sizes */
            CK(cudaMemset(dd, 0xFF, db));
            CK(cudaMemset(ds, 0, sb + 1));
            encode_rows<<<rows, threads>>>(f, dx, H, S, dd, ds);
            CK(cudaGetLastError());
            CK(cudaMemcpy(gd, dd, db, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(gs, ds, sb + 1, cudaMemcpyDeviceToHost));
            size_t bad_d = 0, bad_s = 0;
            for (size_t i = 0; i < db; i++) bad_d += gd[i] != hd[i];
            for (size_t i = 0; i < sb; i++) bad_s += gs[i] != hs[i];
            EXPECT(bad_d == 0 && bad_s == 0,
                   "format %d (S %g), %d threads: %zu of %zu data bytes, %zu of %zu scale bytes differ", (int)f,
                   (double)S, threads, bad_d, db, bad_s, sb);
        }
        free(hd), free(hs), free(gd), free(gs);
        CK(cudaFree(dd));
        CK(cudaFree(ds));
    }
    printf("  rows: %d x %d, bf16 / mxfp8 / fp8_block / nvfp4 (two S), 128 / 256 / 384 threads\n", rows, H);
    free(x);
    CK(cudaFree(dx));
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("test_device_codec: no usable CUDA device, skipped\n");
        return 77;
    }
    uint64_t rng = test_seed();
    printf("device codec == host codec, bit for bit\n");
    test_scalars(&rng);
    test_rows(&rng);
    test_e2m1_words(&rng);
    return test_summary("test_device_codec");
}

