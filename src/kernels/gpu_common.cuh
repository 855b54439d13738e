/* Shared by the .cu files: status from CUDA launches, the device error word,
 * and loading 8 elements of a quantized row as bf16. */
#ifndef MOE_EP_GPU_COMMON_CUH
#define MOE_EP_GPU_COMMON_CUH

#include "core/internal.h"
#include "formats/codec.h"
#include "kernels/split_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

/* After a launch: MOE_EP_ERROR_CUDA with the kernel's name on failure. */
static inline moe_ep_status_t moe_ep_launch_check(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return MOE_EP_SUCCESS;
    return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* First error wins; later kernels of the forward see it and do nothing. */
__device__ __forceinline__ void moe_ep_dev_fail(uint32_t *error, uint32_t kind, uint32_t detail)
{
    atomicCAS(error, 0u, (kind << 24) | (detail & 0xFFFFFFu));
}

__device__ __forceinline__ bool moe_ep_dev_failed(const uint32_t *error)
{
    return *(volatile const uint32_t *)error != 0u;
}

/* Block size along a row and bytes per scale of a format (device side). */
__host__ __device__ __forceinline__ int moe_ep_dev_block(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_MXFP8 || f == MOE_EP_FORMAT_MXFP4 ? 32
           : f == MOE_EP_FORMAT_FP8_BLOCK                       ? 128
           : f == MOE_EP_FORMAT_BF16                            ? 1
                                                                : 16;
}

__host__ __device__ __forceinline__ int moe_ep_dev_scale_size(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_FP8_BLOCK ? 4 : f == MOE_EP_FORMAT_FP4_WIRE ? 2 : f == MOE_EP_FORMAT_BF16 ? 0 : 1;
}

__host__ __device__ __forceinline__ int64_t moe_ep_dev_row_bytes(moe_ep_format_t f, int64_t n)
{
    return f == MOE_EP_FORMAT_BF16 ? 2 * n
           : (f == MOE_EP_FORMAT_NVFP4 || f == MOE_EP_FORMAT_MXFP4 || f == MOE_EP_FORMAT_FP4_WIRE) ? n / 2
                                                                                              : n;
}

__host__ __device__ __forceinline__ int64_t moe_ep_dev_scale_row_bytes(moe_ep_format_t f, int64_t n)
{
    return f == MOE_EP_FORMAT_BF16 ? 0 : n / moe_ep_dev_block(f) * moe_ep_dev_scale_size(f);
}

__device__ __forceinline__ uint32_t moe_ep_pack_bf16x2(float lo, float hi)
{
    return (uint32_t)moe_ep_bf16_from_f32(lo) | ((uint32_t)moe_ep_bf16_from_f32(hi) << 16);
}

/* Elements k..k+7 (k % 8 == 0) of a row as 8 bf16 (a uint4). Block scales that
 * keep the value exact in bf16 are folded in (MX: powers of two; NVFP4: the
 * E4M3 block scale, leaving the global S for the epilogue); FP8-BLOCK scales
 * are not (the GEMM applies them per 128-wide K block). */
__device__ __forceinline__ uint4 moe_ep_load8_bf16(moe_ep_format_t f, const uint8_t *data,
                                                  const uint8_t *scales, int k)
{
    float v[8];
    if (f == MOE_EP_FORMAT_BF16) return *(const uint4 *)(data + 2 * k);
    if (f == MOE_EP_FORMAT_MXFP8 || f == MOE_EP_FORMAT_FP8_BLOCK) {
        uint2 q = *(const uint2 *)(data + k);
        float m = f == MOE_EP_FORMAT_MXFP8 ? moe_ep_ue8m0_to_f32(scales[k / 32]) : 1.0f;
        for (int i = 0; i < 8; i++) {
            uint32_t w = i < 4 ? q.x : q.y;
            v[i] = moe_ep_mul(moe_ep_e4m3_to_f32((uint8_t)(w >> (8 * (i & 3)))), m);
        }
    } else {
        uint32_t q = *(const uint32_t *)(data + k / 2);
        float m = f == MOE_EP_FORMAT_MXFP4 ? moe_ep_ue8m0_to_f32(scales[k / 32])
                                           : moe_ep_e4m3_to_f32(scales[k / 16]);
        for (int i = 0; i < 8; i++) v[i] = moe_ep_mul(moe_ep_e2m1_to_f32((uint8_t)((q >> (4 * i)) & 15u)), m);
    }
    uint4 r;
    r.x = moe_ep_pack_bf16x2(v[0], v[1]);
    r.y = moe_ep_pack_bf16x2(v[2], v[3]);
    r.z = moe_ep_pack_bf16x2(v[4], v[5]);
    r.w = moe_ep_pack_bf16x2(v[6], v[7]);
    return r;
}

__host__ __device__ __forceinline__ moe_ep_format_t moe_ep_path_act_format_dev(moe_ep_path_t p)
{
    return p == MOE_EP_PATH_BF16 ? MOE_EP_FORMAT_BF16
           : p == MOE_EP_PATH_NVFP4 ? MOE_EP_FORMAT_NVFP4
           : p == MOE_EP_PATH_FP8_BLOCK ? MOE_EP_FORMAT_FP8_BLOCK
                                        : MOE_EP_FORMAT_MXFP8;
}

__host__ __device__ __forceinline__ moe_ep_format_t moe_ep_path_weight_format_dev(moe_ep_path_t p)
{
    return p == MOE_EP_PATH_BF16 ? MOE_EP_FORMAT_BF16
           : p == MOE_EP_PATH_MXFP8 ? MOE_EP_FORMAT_MXFP8
           : p == MOE_EP_PATH_NVFP4 ? MOE_EP_FORMAT_NVFP4
           : p == MOE_EP_PATH_W4A8 ? MOE_EP_FORMAT_MXFP4
                                   : MOE_EP_FORMAT_FP8_BLOCK;
}

__host__ __device__ __forceinline__ moe_ep_format_t moe_ep_wire_format_dev(moe_ep_wire_t w)
{
    return w == MOE_EP_WIRE_BF16 ? MOE_EP_FORMAT_BF16 : w == MOE_EP_WIRE_MXFP8 ? MOE_EP_FORMAT_MXFP8 : MOE_EP_FORMAT_FP4_WIRE;
}

/* fp32 scale of 128-block kb of an FP8-BLOCK row. */
__device__ __forceinline__ float moe_ep_fp8_block_row_scale(const uint8_t *scales, int kb)
{
    return ((const float *)scales)[kb];
}

#endif
