/* Host side of the TMA tiles: tensor maps over K-major operand arrays, made
 * with the driver's cuTensorMapEncodeTiled (found through the runtime, so no
 * link against libcuda). */
#ifndef MOE_EP_TMA_MAP_CUH
#define MOE_EP_TMA_MAP_CUH

#include "core/internal.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

static inline PFN_cuTensorMapEncodeTiled_v12000 tma_encode_fn(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

/* A 2-D tensor map over K-major [rows][cols] elements of elem_bytes (2: bf16,
 * 1: e4m3 as bytes) with a box of box_rows rows x box_bytes bytes of K:
 * 128 bytes with the 128-byte swizzle (one swizzle atom: 64 bf16 or 128 e4m3
 * elements, wgmma operand layout), or fewer unswizzled (dense rows). */
static inline moe_ep_status_t tma_map_rows_pitch(CUtensorMap *m, const void *base, int64_t rows, int64_t cols,
                                                 int64_t pitch, int elem_bytes, int box_bytes, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = tma_encode_fn();
    if (!fn) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)(pitch * elem_bytes)};
    cuuint32_t box[2] = {(cuuint32_t)(box_bytes / elem_bytes), (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUtensorMapDataType type = elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
    CUtensorMapSwizzle swz = box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE;
    CUresult r = fn(m, type, 2, (void *)base, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return MOE_EP_SUCCESS;
}

/* Rows of cols elements, each pitch apart (the rows' own width: tma_map_rows). */
static inline moe_ep_status_t tma_map_rows(CUtensorMap *m, const void *base, int64_t rows, int64_t cols,
                                           int elem_bytes, int box_bytes, int box_rows)
{
    return tma_map_rows_pitch(m, base, rows, cols, cols, elem_bytes, box_bytes, box_rows);
}

/* [rows][cols] bytes with boxes of box_rows x 64 bytes, 64-byte swizzle
 * (16-byte chunk c of box row r at chunk c ^ ((r >> 1) & 3)). */
static inline moe_ep_status_t tma_map_rows_swizzle64(CUtensorMap *m, const void *base, int64_t rows, int64_t cols,
                                                     int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = tma_encode_fn();
    if (!fn) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)cols};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)base, dims, strides, box, elem,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "cuTensorMapEncodeTiled failed (%d)", (int)r);
    return MOE_EP_SUCCESS;
}

/* The wgmma operand layout: box_rows x 128 bytes, 128-byte swizzle. */
static inline moe_ep_status_t tma_map_k_major(CUtensorMap *m, const void *base, int64_t rows, int64_t cols,
                                              int elem_bytes, int box_rows)
{
    return tma_map_rows(m, base, rows, cols, elem_bytes, 128, box_rows);
}

#endif
