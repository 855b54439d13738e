/* Split's fold pass: every row of a GEMM's MX, NVFP4 or FP8-BLOCK activations into fp16
 * (fold_rows.cuh), before the GEMM's 128-row register tiles take them by TMA.
 * A warp a row, a lane a 16-byte fp16 word (fold_word_cvt), four words' loads in flight; rows [0,
 * expert_offset[E]) (the count is on the device: no host synchronisation). */
#include "kernels/sm90/fold_rows.cuh"

#define FOLD_WARPS 8

/* KIND (fold_kind_of): MX (MXFP8 rows, UE8M0 scales folded in), NVFP4 (E2M1 rows of K / 2 bytes, E4M3
 * scales per 16), or E4M3 widened alone (FP8-BLOCK). */
template <int KIND>
__global__ void __launch_bounds__(32 * FOLD_WARPS) fold_rows(gemm_args g, uint16_t *out)
{
    if (moe_ep_dev_failed(g.error)) return;
    const int lane = threadIdx.x % 32, scale_words = g.K / 128; /* MX: a row's UE8M0 bytes, 4 a word */
    const int64_t rows = g.expert_offset[g.E];
    for (int64_t r = blockIdx.x * FOLD_WARPS + threadIdx.x / 32; r < rows; r += (int64_t)gridDim.x * FOLD_WARPS) {
        const uint8_t *sc = g.a_scales + r * g.a_scale_stride;
        uint32_t ref = 0;
        if constexpr (KIND == FOLD_MX) {
            uint32_t m = 0;
            for (int i = lane; i < scale_words; i += 32) m = __vmaxu4(m, __ldg((const unsigned int *)sc + i));
            ref = fold_row_ref(m);
        }
        const uint8_t *src = g.a + r * FOLD_ROW_BYTES(KIND, g.K);
        uint4 *dst = (uint4 *)(out + r * g.a16_pitch);
        for (int o0 = lane; o0 < g.K / 8; o0 += 4 * 32) { /* fp16 words o0, o0 + 32, ..: four words' loads in flight */
            fold_word_src v[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (o0 + 32 * j < g.K / 8) v[j] = fold_word_load<KIND>(src, sc, o0 + 32 * j);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (o0 + 32 * j < g.K / 8) dst[o0 + 32 * j] = fold_word_cvt<KIND>(v[j], ref);
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
    if (f == MOE_EP_FORMAT_NVFP4) fold_rows<FOLD_NV><<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    else if (f == MOE_EP_FORMAT_MXFP8) fold_rows<FOLD_MX><<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    else fold_rows<FOLD_E4M3><<<grid, 32 * FOLD_WARPS, 0, s>>>(g, out);
    return moe_ep_launch_check("fold_rows");
}
