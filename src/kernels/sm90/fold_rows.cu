/* Split's fold pass: every row of a GEMM's MX or NVFP4 activations into fp16
 * (fold_rows.cuh), before the GEMM's 128-row register tiles take them by TMA.
 * A warp a row, four 16-byte loads a lane in flight; rows [0,
 * expert_offset[E]) (the count is on the device: no host synchronisation). */
#include "kernels/sm90/fold_rows.cuh"

#define FOLD_WARPS 8

/* MX (MXFP8 rows, UE8M0 scales folded in) or, MX false, FP8-BLOCK's E4M3 rows alone. */
template <bool MX>
__global__ void __launch_bounds__(32 * FOLD_WARPS) fold_mx_rows(gemm_args g, uint16_t *out)
{
    if (moe_ep_dev_failed(g.error)) return;
    const int lane = threadIdx.x % 32, words = g.K / 128, chunks = g.K / 16; /* scale words (4 bytes), 16-byte chunks */
    const int64_t rows = g.expert_offset[g.E];
    for (int64_t r = blockIdx.x * FOLD_WARPS + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * FOLD_WARPS) {
        const uint8_t *sc = g.a_scales + r * g.a_scale_stride;
        uint32_t m = 0;
        if (MX)
            for (int i = lane; i < words; i += 32) m = __vmaxu4(m, __ldg((const unsigned int *)sc + i));
        const uint32_t ref = MX ? fold_row_ref(m) : 0u;
        const uint4 *src = (const uint4 *)(g.a + r * g.K);
        uint4 *dst = (uint4 *)(out + r * g.a16_pitch);
        for (int c0 = lane; c0 < chunks; c0 += 4 * 32) { /* chunk c: k32 block c / 2 */
            uint4 v[4];
            uint32_t b[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c0 + 32 * j < chunks) v[j] = __ldg(src + c0 + 32 * j), b[j] = MX ? __ldg(sc + (c0 + 32 * j) / 2) : 0u;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (c0 + 32 * j >= chunks) continue;
                if (MX) {
                    fold_chunk(v[j], ref, b[j], dst + 2 * (c0 + 32 * j));
                } else {
                    uint4 lo, hi;
                    e4m3x16_to_f16(v[j], lo, hi);
                    dst[2 * (c0 + 32 * j)] = lo, dst[2 * (c0 + 32 * j) + 1] = hi;
                }
            }
        }
    }
}

/* NVFP4 rows (E2M1, K / 2 bytes; E4M3 scales per 16): the same, 32 elements a chunk. */
__global__ void __launch_bounds__(32 * FOLD_WARPS) fold_nv_rows(gemm_args g, uint16_t *out)
{
    if (moe_ep_dev_failed(g.error)) return;
    const int lane = threadIdx.x % 32, chunks = g.K / 32; /* 16-byte chunks of 32 E2M1 */
    const int64_t rows = g.expert_offset[g.E];
    for (int64_t r = blockIdx.x * FOLD_WARPS + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * FOLD_WARPS) {
        const uint16_t *sc = (const uint16_t *)(g.a_scales + r * g.a_scale_stride); /* a chunk's two scale bytes */
        const uint4 *src = (const uint4 *)(g.a + r * (g.K / 2));
        uint4 *dst = (uint4 *)(out + r * g.a16_pitch);
        for (int c0 = lane; c0 < chunks; c0 += 4 * 32) {
            uint4 v[4];
            uint32_t b[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c0 + 32 * j < chunks) v[j] = __ldg(src + c0 + 32 * j), b[j] = __ldg(sc + c0 + 32 * j);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c0 + 32 * j < chunks) fold_chunk_nv(v[j], b[j], dst + 4 * (c0 + 32 * j));
        }
    }
}

/* The rows of GEMM g (MXFP8 activations: MXFP8 or W4A8 layers; NVFP4; FP8-BLOCK) into out
 * ([rows_capacity][g.a16_pitch] fp16), on num_sms SMs. */
moe_ep_status_t moe_ep_fold_rows(const gemm_args &g, uint16_t *out, int64_t rows_capacity, int num_sms, cudaStream_t s)
{
    const moe_ep_format_t f = g.a_fmt;
    if ((f != MOE_EP_FORMAT_MXFP8 && f != MOE_EP_FORMAT_NVFP4 && f != MOE_EP_FORMAT_FP8_BLOCK) || g.K % 128 || g.a16_pitch < g.K)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "fold_rows: MXFP8, NVFP4 or FP8-BLOCK rows, K %% 128, a pitch of K or more");
    int64_t blocks = (rows_capacity + FOLD_WARPS - 1) / FOLD_WARPS, cap = (int64_t)num_sms * 8;
    const unsigned grid = (unsigned)(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
    if (f == MOE_EP_FORMAT_NVFP4) fold_nv_rows<<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    else if (f == MOE_EP_FORMAT_MXFP8) fold_mx_rows<true><<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    else fold_mx_rows<false><<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    return moe_ep_launch_check("fold_rows");
}
