/* Weight preprocessing at load time: checkpoint layout (bf16, or already
 * quantized with scales) -> the kernel layout of split_kernels.h: W13 rows
 * interleaved in 256-row tiles (128 gate, 128 up), scales per row, FP8-BLOCK
 * tile scales repeated on each row, NVFP4 global scales S per matrix; the
 * register tile's layers get each 16-byte chunk of their data rows permuted
 * for its fragment loads (prep_permute_fragments), and MX layers there their
 * weights' multipliers as records (prep_weight_records, rs_mults.cuh).
 * Quantization uses the codec shared with the host, so a bf16 checkpoint
 * quantized here equals the host codec's bytes. */
#include "kernels/gpu_common.cuh"
#include "kernels/sm90/rs_mults.cuh"

#define PREP_THREADS 256

/* Checkpoint row of kernel row p of W13 ([2I][H]); W2 rows map to themselves. */
__device__ __forceinline__ int64_t w13_source_row(int64_t p, int I)
{
    int64_t j = p / 256, w = p % 256;
    return w < 128 ? 128 * j + w : I + 128 * j + (w - 128);
}

/* amax over a bf16 matrix, NaN skipped (as on the host), into *out (fp32 bits). */
__global__ void prep_amax(const uint16_t *m, int64_t n, uint32_t *out)
{
    float a = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = moe_ep_absf(moe_ep_bf16_to_f32(m[i]));
        if (v > a) a = v;
    }
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, __float_as_uint(a));
}

__global__ void prep_scale_from_amax(const uint32_t *amax, float *S, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) S[i] = moe_ep_nvfp4_scale_from_amax(__uint_as_float(amax[i]));
}

/* FP8-BLOCK: one block per 128x128 tile of a [rows][cols] bf16 matrix:
 * scale = fmaxf(amax, 1e-4) / 448, NaN when the tile holds a NaN or an Inf. */
__global__ void prep_fp8_tile_scales(const uint16_t *m, int cols, float *scales)
{
    __shared__ float red[PREP_THREADS];
    __shared__ int bad_any;
    int tiles_c = cols / 128, tr = blockIdx.x / tiles_c, tc = blockIdx.x % tiles_c;
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    float a = 0.0f;
    int bad = 0;
    for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
        float v = moe_ep_absf(moe_ep_bf16_to_f32(m[(int64_t)(tr * 128 + i / 128) * cols + tc * 128 + i % 128]));
        if (!moe_ep_isfinite(v)) bad = 1;
        else if (v > a) a = v;
    }
    red[threadIdx.x] = a;
    if (bad) bad_any = 1;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) scales[blockIdx.x] = bad_any ? moe_ep_u2f(0x7FC00000u) : moe_ep_fp8_block_scale(red[0]);
}

struct prep_matrix {
    int rows, cols, I;   /* I > 0: W13 interleave */
    moe_ep_format_t fmt; /* kernel weight format */
    uint8_t *data, *scales;
    const float *S;      /* NVFP4 encode scale of this matrix (device) */
    const float *tiles;  /* FP8-BLOCK [rows/128][cols/128] tile scales */
};

/* One thread per (kernel row, 32 elements) of a bf16 checkpoint matrix. */
__global__ void prep_quantize(const uint16_t *src, prep_matrix p)
{
    int64_t chunks = p.cols / 32, item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (int64_t)p.rows * chunks) return;
    int64_t row = item / chunks, c = (item % chunks) * 32;
    int64_t srow = p.I > 0 ? w13_source_row(row, p.I) : row;
    float v[32];
    for (int i = 0; i < 32; i++) v[i] = moe_ep_bf16_to_f32(src[srow * p.cols + c + i]);
    uint8_t *d = p.data + row * moe_ep_row_data_bytes(p.fmt, p.cols);
    uint8_t *s = p.scales + row * moe_ep_row_scale_bytes(p.fmt, p.cols);
    uint8_t q[32];
    switch (p.fmt) {
    case MOE_EP_FORMAT_BF16:
        for (int i = 0; i < 32; i++) ((uint16_t *)d)[c + i] = src[srow * p.cols + c + i];
        break;
    case MOE_EP_FORMAT_MXFP8: s[c / 32] = moe_ep_mxfp8_block_encode(v, d + c); break;
    case MOE_EP_FORMAT_MXFP4:
        s[c / 32] = moe_ep_mxfp4_block_encode(v, q);
        for (int i = 0; i < 16; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
        break;
    case MOE_EP_FORMAT_NVFP4:
        s[c / 16] = moe_ep_nvfp4_block_encode(v, *p.S, q);
        s[c / 16 + 1] = moe_ep_nvfp4_block_encode(v + 16, *p.S, q + 16);
        for (int i = 0; i < 16; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
        break;
    default: { /* FP8-BLOCK with the tile's scale */
        float ts = p.tiles[(srow / 128) * (p.cols / 128) + c / 128];
        float inv = moe_ep_div(1.0f, ts);
        for (int i = 0; i < 32; i++)
            d[c + i] = moe_ep_isnan(ts) ? (uint8_t)MOE_EP_E4M3_NAN : moe_ep_e4m3_from_f32(moe_ep_mul(v[i], inv));
        if (c % 128 == 0) ((float *)s)[c / 128] = ts;
    }
    }
}

/* Pre-quantized checkpoint: one thread per kernel row copies data and scales
 * (FP8-BLOCK: expands the tile scales onto the row). */
__global__ void prep_copy(const uint8_t *src, const uint8_t *src_scales, prep_matrix p)
{
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= p.rows) return;
    int64_t srow = p.I > 0 ? w13_source_row(row, p.I) : row;
    int64_t rb = moe_ep_row_data_bytes(p.fmt, p.cols), sb = moe_ep_row_scale_bytes(p.fmt, p.cols);
    for (int64_t i = 0; i < rb; i += 4) *(uint32_t *)(p.data + row * rb + i) = *(const uint32_t *)(src + srow * rb + i);
    if (p.fmt == MOE_EP_FORMAT_FP8_BLOCK) {
        const float *tiles = (const float *)src_scales;
        for (int kb = 0; kb < p.cols / 128; kb++)
            ((float *)(p.scales + row * sb))[kb] = tiles[(srow / 128) * (p.cols / 128) + kb];
    } else {
        for (int64_t i = 0; i < sb; i++) p.scales[row * sb + i] = src_scales[srow * sb + i];
    }
}

/* The register tile's weight layout (fp8_rs_tile.cuh, fr_load_word): in each
 * 16-byte chunk of a row, word q gathers quad lane q's fragment bytes. E4M3
 * (a chunk is one k16 step): bytes 2q, 2q + 1, 8 + 2q, 9 + 2q; E2M1 (two
 * steps, two elements a byte): bytes q, q + 4, q + 8, q + 12, then their bits
 * spread (codec.h: moe_ep_e2m1_word_spread). One thread per chunk, in place. */
__global__ void prep_permute_fragments(uint8_t *data, int64_t chunks, int e2m1)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    uint4 v = ((const uint4 *)data)[i];
    const uint32_t in[4] = {v.x, v.y, v.z, v.w};
    uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
            int src = e2m1 ? q + 4 * b : 2 * q + (b & 1) + 8 * (b >> 1);
            out[q] |= ((in[src / 4] >> (8 * (src % 4))) & 0xFFu) << (8 * b);
        }
    if (e2m1)
#pragma unroll
        for (int q = 0; q < 4; q++) out[q] = moe_ep_e2m1_word_spread(out[q]);
    ((uint4 *)data)[i] = make_uint4(out[0], out[1], out[2], out[3]);
}

/* The host's record sizes (split_kernels.h, allocations) are the device layout's. */
static_assert(MOE_EP_WEIGHT_RECORD_BYTES(MOE_EP_PATH_MXFP8, 256, 128) == 4 * FR_REC_WORDS(0, 0), "MXFP8 records");
static_assert(MOE_EP_WEIGHT_RECORD_BYTES(MOE_EP_PATH_W4A8, 256, 128) == 4 * FR_REC_WORDS(0, 1), "W4A8 records");
static_assert(MOE_EP_WEIGHT_RECORD_BYTES(MOE_EP_PATH_NVFP4, 256, 128) == 4 * FR_REC_WORDS(1, 1), "NVFP4 records");

/* MX and NVFP4 weights on the register tile: the multiplier records of a
 * [rows][K] matrix (rows % 256, K % 128) from its scales, one thread per row
 * and 128-wide K block (rs_mults.cuh). */
__global__ void prep_weight_records(const uint8_t *scales, int64_t rows, int K, int e2m1, int nv, uint32_t *records)
{
    fr_weight_records_item(scales, rows, K, e2m1 != 0, nv != 0, records,
                           (int64_t)blockIdx.x * blockDim.x + threadIdx.x);
}

static unsigned blocks_for(int64_t n) { return (unsigned)((n + PREP_THREADS - 1) / PREP_THREADS); }

/* One matrix of one expert from a bf16 checkpoint; scratch holds >= 1 + tiles floats. */
static moe_ep_status_t prep_from_bf16(const uint16_t *src, prep_matrix p, float *S_out, float *scratch,
                                      cudaStream_t s)
{
    int64_t n = (int64_t)p.rows * p.cols;
    if (p.fmt == MOE_EP_FORMAT_NVFP4) {
        cudaMemsetAsync(scratch, 0, sizeof(float), s);
        prep_amax<<<256, PREP_THREADS, 0, s>>>(src, n, (uint32_t *)scratch);
        prep_scale_from_amax<<<1, 32, 0, s>>>((const uint32_t *)scratch, S_out, 1);
        p.S = S_out;
    } else if (p.fmt == MOE_EP_FORMAT_FP8_BLOCK) {
        prep_fp8_tile_scales<<<(p.rows / 128) * (p.cols / 128), PREP_THREADS, 0, s>>>(src, p.cols, scratch);
        p.tiles = scratch;
    }
    MOE_EP_CHECK(moe_ep_launch_check("prep scales"));
    prep_quantize<<<blocks_for(n / 32), PREP_THREADS, 0, s>>>(src, p);
    return moe_ep_launch_check("prep_quantize");
}

static moe_ep_status_t prep_one(const moe_ep_split_dims_t *d, moe_ep_format_t src_format, prep_matrix p,
                                const void *src, const void *src_scales, const float *src_gs, float *gs,
                                float *scratch, cudaStream_t s)
{
    const float one = 1.0f;
    if (p.fmt != MOE_EP_FORMAT_NVFP4) cudaMemcpyAsync(gs, &one, sizeof one, cudaMemcpyHostToDevice, s);
    if (src_format == MOE_EP_FORMAT_BF16) return prep_from_bf16((const uint16_t *)src, p, gs, scratch, s);
    if (p.fmt == MOE_EP_FORMAT_NVFP4) cudaMemcpyAsync(gs, src_gs, sizeof(float), cudaMemcpyDeviceToDevice, s);
    prep_copy<<<blocks_for(p.rows), PREP_THREADS, 0, s>>>((const uint8_t *)src, (const uint8_t *)src_scales, p);
    return moe_ep_launch_check("prep_copy");
}

extern "C" moe_ep_status_t moe_ep_launch_prep_weights(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                      moe_ep_format_t src_format, int le0, int n,
                                                      const void *src_w13, const void *src_w13_scales,
                                                      const float *src_gs13, const void *src_w2,
                                                      const void *src_w2_scales, const float *src_gs2,
                                                      float *scratch, moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    moe_ep_format_t wf = moe_ep_path_weight_format(d->path);
    int64_t H = d->H, I = d->I;
    int64_t src13 = src_format == MOE_EP_FORMAT_BF16 ? 2 * (2 * I * H) : moe_ep_row_data_bytes(wf, H) * 2 * I;
    int64_t src2 = src_format == MOE_EP_FORMAT_BF16 ? 2 * (H * I) : moe_ep_row_data_bytes(wf, I) * H;
    int64_t ss13 = wf == MOE_EP_FORMAT_FP8_BLOCK ? (2 * I / 128) * (H / 128) * 4 : moe_ep_row_scale_bytes(wf, H) * 2 * I;
    int64_t ss2 = wf == MOE_EP_FORMAT_FP8_BLOCK ? (H / 128) * (I / 128) * 4 : moe_ep_row_scale_bytes(wf, I) * H;
    if (src_format == MOE_EP_FORMAT_NVFP4 && (!src_gs13 || !src_gs2))
        return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "nvfp4 global scales missing");
    for (int i = 0; i < n; i++) {
        int le = le0 + i;
        prep_matrix m13 = {(int)(2 * I), (int)H, (int)I, wf,
                           b->w13 + le * moe_ep_row_data_bytes(wf, H) * 2 * I,
                           b->w13_scales + le * moe_ep_row_scale_bytes(wf, H) * 2 * I, NULL, NULL};
        prep_matrix m2 = {(int)H, (int)I, 0, wf, b->w2 + le * moe_ep_row_data_bytes(wf, I) * H,
                          b->w2_scales + le * moe_ep_row_scale_bytes(wf, I) * H, NULL, NULL};
        MOE_EP_CHECK(prep_one(d, src_format, m13, (const uint8_t *)src_w13 + i * src13,
                              src_w13_scales ? (const uint8_t *)src_w13_scales + i * ss13 : NULL,
                              src_gs13 ? src_gs13 + i : NULL, b->w13_gs + le, scratch, s));
        MOE_EP_CHECK(prep_one(d, src_format, m2, (const uint8_t *)src_w2 + i * src2,
                              src_w2_scales ? (const uint8_t *)src_w2_scales + i * ss2 : NULL,
                              src_gs2 ? src_gs2 + i : NULL, b->w2_gs + le, scratch, s));
        if (moe_ep_rs_tile_on(d->path, d->H, d->I, d->fp8_fast_accum)) {
            int e2m1 = wf == MOE_EP_FORMAT_MXFP4 || wf == MOE_EP_FORMAT_NVFP4;
            int64_t c13 = moe_ep_row_data_bytes(wf, H) * 2 * I / 16, c2 = moe_ep_row_data_bytes(wf, I) * H / 16;
            prep_permute_fragments<<<blocks_for(c13), PREP_THREADS, 0, s>>>(m13.data, c13, e2m1);
            prep_permute_fragments<<<blocks_for(c2), PREP_THREADS, 0, s>>>(m2.data, c2, e2m1);
            MOE_EP_CHECK(moe_ep_launch_check("prep_permute_fragments"));
        }
        if (moe_ep_weight_records_on(d->path, d->H, d->I, d->fp8_fast_accum)) {
            int e2m1 = wf == MOE_EP_FORMAT_MXFP4, nv = wf == MOE_EP_FORMAT_NVFP4;
            prep_weight_records<<<blocks_for(2 * I * (H / 128)), PREP_THREADS, 0, s>>>(
                m13.scales, 2 * I, (int)H, e2m1, nv, b->w13_mult + le * MOE_EP_WEIGHT_RECORD_BYTES(d->path, 2 * I, H) / 4);
            prep_weight_records<<<blocks_for(H * (I / 128)), PREP_THREADS, 0, s>>>(
                m2.scales, H, (int)I, e2m1, nv, b->w2_mult + le * MOE_EP_WEIGHT_RECORD_BYTES(d->path, H, I) / 4);
            MOE_EP_CHECK(moe_ep_launch_check("prep_weight_records"));
        }
    }
    return MOE_EP_SUCCESS;
}
