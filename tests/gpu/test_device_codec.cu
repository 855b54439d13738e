/* The device codec agrees bit for bit with the host codec (formats/codec.h):
 *   - scalar rounding (fp32 -> E4M3, E2M1, bf16) over 2^24 bit patterns that
 *     cover every exponent, plus the specials (+-0, +-inf, NaN, 448 and its
 *     neighbours);
 *   - the dispatch's row encoder (rows.cuh: 8 values per lane, a block's amax
 *     shared across lanes by shuffles) against the host's whole-block
 *     encoders, for every activation format, on rows of random magnitudes
 *     with NaN and inf blocks among them.
 * Outputs are poisoned before each run. Exits 77 without a usable GPU. */
extern "C" {
#include "test_util.h"
}

#include "formats/codec.h"
#include "kernels/rows.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_device_codec"
#include "cuda_check.h"

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
    free(x), free(g8), free(g4), free(g16);
    CK(cudaFree(dx));
    CK(cudaFree(d8));
    CK(cudaFree(d4));
    CK(cudaFree(d16));
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

/* Rows of bf16 with a magnitude per 128-block from 2^-20 to 2^20, some blocks
 * holding a NaN or an inf, some all zero. */
static void fill_rows(uint16_t *x, int rows, int H, uint64_t *rng)
{
    test_fill_bf16(x, (int64_t)rows * H, 1.0f, rng);
    for (int64_t b = 0; b < (int64_t)rows * H / 128; b++) {
        float m = ldexpf(1.0f, (int)(test_rand_u64(rng) % 41) - 20);
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
    const float S = 2688.0f / 7.0f;
    int64_t n = (int64_t)rows * H;
    uint16_t *x = (uint16_t *)malloc(n * 2), *dx;
    fill_rows(x, rows, H, rng);
    CK(cudaMalloc(&dx, n * 2));
    CK(cudaMemcpy(dx, x, n * 2, cudaMemcpyHostToDevice));
    const moe_ep_format_t fmts[] = {MOE_EP_FORMAT_BF16, MOE_EP_FORMAT_MXFP8, MOE_EP_FORMAT_FP8_BLOCK,
                                    MOE_EP_FORMAT_NVFP4};
    for (int fi = 0; fi < 4; fi++) {
        moe_ep_format_t f = fmts[fi];
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
            EXPECT(bad_d == 0 && bad_s == 0, "format %d, %d threads: %zu of %zu data bytes, %zu of %zu scale bytes differ",
                   (int)f, threads, bad_d, db, bad_s, sb);
        }
        free(hd), free(hs), free(gd), free(gs);
        CK(cudaFree(dd));
        CK(cudaFree(ds));
    }
    printf("  rows: %d x %d, bf16 / mxfp8 / fp8_block / nvfp4, 128 / 256 / 384 threads\n", rows, H);
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
    return test_summary("test_device_codec");
}

