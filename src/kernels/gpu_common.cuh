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

/* Blocks per SM of the per-token grid-stride kernels (dispatch, combine):
 * 8 x 256 threads fill an SM. */
#define MOE_EP_TOKEN_BLOCKS_PER_SM 8

/* Blocks of a grid-stride loop over n items: n, at most blocks_per_sm per SM. */
static inline unsigned moe_ep_stride_grid(int64_t n, int sms, int blocks_per_sm)
{
    int64_t cap = (int64_t)(sms > 0 ? sms : 1) * (blocks_per_sm > 0 ? blocks_per_sm : 1); /* never a 0-block grid */
    return (unsigned)(n < 1 ? 1 : (n < cap ? n : cap));
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

/* Two fp32 -> bf16 (round to nearest even) in one word, lo in the low half:
 * the hardware conversion, the codec's quiet NaN (sign and payload kept,
 * where the hardware gives a canonical NaN) when either is NaN. */
__device__ __forceinline__ uint32_t moe_ep_pack_bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    if (moe_ep_isnan(lo)) r = (r & 0xFFFF0000u) | (__float_as_uint(lo) >> 16) | 0x0040u;
    if (moe_ep_isnan(hi)) r = (r & 0x0000FFFFu) | ((__float_as_uint(hi) | 0x00400000u) & 0xFFFF0000u);
    return r;
}

#endif
