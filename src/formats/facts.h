/* Facts about the element formats, compute paths and wires, as static inline
 * host/device functions: the C host code and the CUDA kernels share one
 * definition. */
#ifndef MOE_EP_FORMAT_FACTS_H
#define MOE_EP_FORMAT_FACTS_H

#include "formats/codec.h"
#include "moe_ep.h"

/* Elements per scale along a row: 32 MX, 16 NVFP4 and FP4 wire, 128 FP8-BLOCK, 1 BF16. */
MOE_EP_HD int moe_ep_format_block(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_MXFP8 || f == MOE_EP_FORMAT_MXFP4 ? 32
           : f == MOE_EP_FORMAT_FP8_BLOCK                       ? 128
           : f == MOE_EP_FORMAT_BF16                            ? 1
                                                                : 16;
}

/* Bytes per scale: 4 FP8-BLOCK (fp32), 2 FP4 wire (bf16), 0 BF16, else 1. */
MOE_EP_HD int moe_ep_format_scale_bytes(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_FP8_BLOCK ? 4 : f == MOE_EP_FORMAT_FP4_WIRE ? 2 : f == MOE_EP_FORMAT_BF16 ? 0 : 1;
}

MOE_EP_HD int moe_ep_format_is_fp4(moe_ep_format_t f)
{
    return f == MOE_EP_FORMAT_NVFP4 || f == MOE_EP_FORMAT_MXFP4 || f == MOE_EP_FORMAT_FP4_WIRE;
}

/* Bytes of data / of scales of a row of n elements (n a multiple of the block). */
MOE_EP_HD int64_t moe_ep_row_data_bytes(moe_ep_format_t f, int64_t n)
{
    return f == MOE_EP_FORMAT_BF16 ? 2 * n : moe_ep_format_is_fp4(f) ? n / 2 : n;
}

MOE_EP_HD int64_t moe_ep_row_scale_bytes(moe_ep_format_t f, int64_t n)
{
    return f == MOE_EP_FORMAT_BF16 ? 0 : n / moe_ep_format_block(f) * moe_ep_format_scale_bytes(f);
}

/* Scale bytes per activation row in the GPU row buffers (xq, aq): padded to a
 * multiple of 16 so that GEMM tiles read them as aligned 16-byte L2 copies. */
MOE_EP_HD int64_t moe_ep_act_scale_stride(moe_ep_format_t f, int64_t n)
{
    return (moe_ep_row_scale_bytes(f, n) + 15) / 16 * 16;
}

/* The same for a [rows][cols] matrix with row-wise blocks. */
MOE_EP_HD int64_t moe_ep_format_data_bytes(moe_ep_format_t f, int64_t rows, int64_t cols)
{
    return rows * moe_ep_row_data_bytes(f, cols);
}

MOE_EP_HD int64_t moe_ep_format_scales_bytes(moe_ep_format_t f, int64_t rows, int64_t cols)
{
    return rows * moe_ep_row_scale_bytes(f, cols);
}

/* Formats of a compute path and of a combine wire. */
MOE_EP_HD moe_ep_format_t moe_ep_path_weight_format(moe_ep_path_t p)
{
    return p == MOE_EP_PATH_BF16    ? MOE_EP_FORMAT_BF16
           : p == MOE_EP_PATH_MXFP8 ? MOE_EP_FORMAT_MXFP8
           : p == MOE_EP_PATH_NVFP4 ? MOE_EP_FORMAT_NVFP4
           : p == MOE_EP_PATH_W4A8  ? MOE_EP_FORMAT_MXFP4
                                    : MOE_EP_FORMAT_FP8_BLOCK;
}

MOE_EP_HD moe_ep_format_t moe_ep_path_act_format(moe_ep_path_t p)
{
    return p == MOE_EP_PATH_BF16        ? MOE_EP_FORMAT_BF16
           : p == MOE_EP_PATH_NVFP4     ? MOE_EP_FORMAT_NVFP4
           : p == MOE_EP_PATH_FP8_BLOCK ? MOE_EP_FORMAT_FP8_BLOCK
                                        : MOE_EP_FORMAT_MXFP8;
}

MOE_EP_HD moe_ep_format_t moe_ep_wire_format(moe_ep_wire_t w)
{
    return w == MOE_EP_WIRE_BF16 ? MOE_EP_FORMAT_BF16 : w == MOE_EP_WIRE_MXFP8 ? MOE_EP_FORMAT_MXFP8 : MOE_EP_FORMAT_FP4_WIRE;
}

#endif
