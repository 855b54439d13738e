/* Shared by the .cu files: status from CUDA launches, the device error word,
 * and format facts on the device. */
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

#endif
