/* Device helpers shared by the register tile's kernel labs (rs_tile.cu,
 * rs_pipe.cu): the library's failure hook, the weights' records, random
 * fills and an allocation. Include after kernels/sm90/fp8_rs_tile.cuh and
 * lab_common.cuh. */
#ifndef MOE_EP_RS_LAB_COMMON_CUH
#define MOE_EP_RS_LAB_COMMON_CUH

#include <stdarg.h>

extern "C" moe_ep_status_t moe_ep_fail_at(moe_ep_status_t status, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s:%d: ", file, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return status;
}

/* The weights' multiplier records (as weights.cu's prep_weight_records). */
__global__ void lab_weight_records(const uint8_t *scales, int64_t rows, int K, int e2m1, int nv, uint32_t *records)
{
    fr_weight_records_item(scales, rows, K, e2m1 != 0, nv != 0, records, (int64_t)blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void fill_random(uint8_t *p, int64_t n, uint32_t seed, int e4m3)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        /* E4M3: exponent field 5..9 (2^-2 .. 2^2), any sign and mantissa; E2M1 pairs: any byte */
        p[i] = e4m3 ? (uint8_t)((h & 0x87) | (((h >> 8) % 5 + 5) << 3)) : (uint8_t)h;
    }
}

__global__ void fill_u32(uint32_t *p, int64_t n, uint32_t v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

static void *dev_alloc(size_t n)
{
    void *p;
    CHECK(cudaMalloc(&p, n < 16 ? 16 : n));
    return p;
}

/* E experts of rows_per_expert rows each in tiles of tile_rows: their row and
 * tile offsets and a zeroed error word, on the device, into g (freed by
 * lab_layout_free). */
static void lab_layout(gemm_args &g, int E, int rows_per_expert, int tile_rows)
{
    int32_t *eo = (int32_t *)malloc(2 * (E + 1) * sizeof(int32_t)), *to = eo + E + 1; /* host: row, then tile offsets */
    if (!eo) {
        printf("lab_layout: out of host memory\n");
        exit(1);
    }
    for (int e = 0; e <= E; e++) eo[e] = e * rows_per_expert, to[e] = e * ((rows_per_expert + tile_rows - 1) / tile_rows);
    int32_t *d_eo = (int32_t *)dev_alloc((E + 1) * 4), *d_to = (int32_t *)dev_alloc((E + 1) * 4);
    CHECK(cudaMemcpy(d_eo, eo, (E + 1) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_to, to, (E + 1) * 4, cudaMemcpyHostToDevice));
    free(eo);
    g.expert_offset = d_eo, g.tile_offset = d_to;
    uint32_t *err = (uint32_t *)dev_alloc(4);
    CHECK(cudaMemset(err, 0, 4));
    g.error = err;
}

static void lab_layout_free(const gemm_args &g)
{
    cudaFree((void *)g.expert_offset), cudaFree((void *)g.tile_offset), cudaFree((void *)g.error);
}

#endif
