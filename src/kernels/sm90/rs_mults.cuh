/* Multipliers of the register tile (fp8_rs_tile.cuh), and the weights'
 * records of them made once at load (weights.cu: prep_weight_records), which
 * one bulk copy per raw stage puts in shared memory as the consumers read
 * them (before, the tile's producer made them from the scale bytes at every
 * stage: MXFP8 decode 9-12 % of the tile's time, dev/wgmma_lab/rs_tile.cu).
 *
 * MXFP8 and W4A8 fold each k32 block's UE8M0 scale 2^b into the fp16
 * operand as 2^-(ref - b), ref the largest byte of the row over all of K,
 * and apply 2^ref to the sums after the K loop (no promotion). NVFP4 folds
 * each k16 block's E4M3 scale, times 2^7, into the fp16 operand (exact). */
#ifndef MOE_EP_RS_MULTS_CUH
#define MOE_EP_RS_MULTS_CUH

#include "kernels/gpu_common.cuh"

/* f16x2 product, round to nearest (exact for the exponent shifts used here). */
__device__ __forceinline__ uint32_t fr_hmul2(uint32_t a, uint32_t b)
{
    uint32_t o;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(o) : "r"(a), "r"(b));
    return o;
}

/* The 128-block's reference byte: the largest of the four UE8M0 bytes in w. */
__device__ __forceinline__ uint32_t fr_mx_ref(uint32_t w)
{
    return max(max(w & 0xFF, (w >> 8) & 0xFF), max((w >> 16) & 0xFF, w >> 24));
}

/* 2^e (e <= 15) as f16x2: through fp32 (exact) and one rounding to fp16,
 * which keeps the subnormals down to 2^-24 and gives 0 below (2^-25 ties to
 * even); 4 instructions where the fp16 bits took 8 with selects. */
__device__ __forceinline__ uint32_t fr_pow2_f16x2(int e)
{
    float f = __int_as_float(max(e + 127, 0) << 23);
    uint32_t h;
    asm("cvt.rn.f16x2.f32 %0, %1, %1;\n" : "=r"(h) : "f"(f));
    return h;
}

/* The multiplier 2^-(ref - b) of byte b as f16x2 (0 below 2^-24). */
__device__ __forceinline__ uint32_t fr_mx_mult(uint32_t ref, uint32_t b) { return fr_pow2_f16x2((int)b - (int)ref); }

/* W4A8's weights: 2^(14 - (ref - b)), undoing moe_ep_e2m1x2_f16_bits' 2^-14 as well. */
__device__ __forceinline__ uint32_t fr_mx_mult_e2m1(uint32_t ref, uint32_t b) { return fr_pow2_f16x2(14 + (int)b - (int)ref); }

/* NVFP4's scales are staged times 2^7 (this, f16x2), so an operand is
 * moe_ep_e2m1x2_f16_bits' value x 2^-14 times one multiplier: value x scale x 2^-7,
 * exact in fp16 (at least 2^-17 with at most 6 significant bits, at most
 * 21); the sums come out x 2^-14 exactly and the epilogue undoes it. */
#define FR_F16_2P7 0x58005800u

/* The E4M3 pair in the low (HI false) or high 16 bits of w as f16x2
 * (exact). The halves split in PTX (mov.b32 {l, h}): ptxas then reads the
 * high one as the register's upper half (F2FP's .H1), where a C shift cost
 * a SHF a pair (32 a stage in MXFP8's 128-row consumer loop, SASS); the
 * register tile's E4M3 widening and the NVFP4 scales below. */
template <bool HI>
__device__ __forceinline__ uint32_t fr_e4m3x2(uint32_t w)
{
    uint32_t o;
    if constexpr (HI) asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, h;\n}" : "=r"(o) : "r"(w));
    else asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(o) : "r"(w));
    return o;
}

/* NVFP4's fold of eight E2M1 codes (nibbles of w, the first lowest) of a
 * block whose E4M3 scale x 2^7 is the f16 m (both halves): eight fp16, the
 * values x 2^-7 (exact). The folds' (fold_rows.cuh: split's pass, mega's
 * fold items and dispatch) and mega's GEMM1 epilogue writing GEMM2's rows
 * (epilogue_chunks_of's FOLD16), through fold_nv_word_of: one function, so
 * the bits agree. */
__device__ __forceinline__ uint4 fold_nv_word(uint32_t w, uint32_t m)
{
    uint32_t o[4];
    moe_ep_e2m1_word_f16(w, o);
#pragma unroll
    for (int b = 0; b < 4; b++) o[b] = fr_hmul2(o[b], m);
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* NVFP4: 8 E2M1 (word w) of the k16 block with E4M3 scale byte sb -> 8 fp16
 * (fold_nv_word with the scale x 2^7 as f16, as fr_store_e4m3x8 stages it). */
__device__ __forceinline__ uint4 fold_nv_word_of(uint32_t w, uint32_t sb)
{
    const uint32_t h = fr_hmul2(fr_e4m3x2<false>(sb), FR_F16_2P7) & 0xFFFFu;
    return fold_nv_word(w, h | h << 16);
}

/* NVFP4: eight E4M3 scale bytes -> eight f16 times 2^7 (exact: FR_F16_2P7)
 * into a uint16_t table, stride apart. */
__device__ __forceinline__ void fr_store_e4m3x8(uint16_t *out, int stride, uint2 v)
{
    const uint32_t pairs[4] = {fr_e4m3x2<false>(v.x), fr_e4m3x2<true>(v.x), fr_e4m3x2<false>(v.y), fr_e4m3x2<true>(v.y)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t o = fr_hmul2(pairs[i], FR_F16_2P7);
        out[(2 * i) * stride] = (uint16_t)o, out[(2 * i + 1) * stride] = (uint16_t)(o >> 16);
    }
}

/* The weights' record of one 256-row group and one 128-wide K block, at
 * ((row / 256) * (K / 128) + k block) * FR_REC_WORDS(nv, e2m1) words of the
 * matrix's array, n the row within the group:
 *   MXFP8 (3 KB): halves [j * 256 + n], j = 0..3: the k32 block j multiplier
 *                 as f16 (fr_mx_mult; the consumer doubles it into f16x2);
 *                 word [2 * 256 + n]: 2^ref, fp32 bits (the row's, the same in every K block);
 *   W4A8 (5 KB):  words [j * 256 + n]: the same multipliers (fr_mx_mult_e2m1)
 *                 as f16x2, word [4 * 256 + n]: 2^ref;
 *   NVFP4 (4 KB): halves [j * 256 + n], j = 0..7: the k16 block j scale
 *                 times 2^7 as f16 (fr_store_e4m3x8).
 * 12 (MXFP8), 20 (W4A8) or 16 (NVFP4) bytes per row and 128 K beside the 4
 * or 8 bytes of scales they come from. At decode the tile streams them with
 * the weights: MXFP8's were 20 bytes too (5 KB beside a stage's 32 KB of
 * E4M3 weights); halved, its decode tiles run 1-3 % faster, where W4A8's,
 * bound by their consumers' work rather than by bytes, ran 0-2 % slower
 * with the extra doubling (2026-12-01). */
#define FR_REC_ROWS 256
#define FR_REC_WORDS(nv, e2m1) ((nv) ? 4 * FR_REC_ROWS : (e2m1) ? 5 * FR_REC_ROWS : 3 * FR_REC_ROWS)
/* MXFP8's multipliers are f16 halves, W4A8's f16x2 words. */
#define FR_REC_HALVES(nv, e2m1) (!(nv) && !(e2m1))

/* Item i (of rows x K / 128; the row fastest, so the records' stores are
 * coalesced) of the records of a [rows][K] matrix (rows % 256, K % 128) from
 * its scales ([rows][K / 32] UE8M0 or [rows][K / 16] E4M3 bytes). */
__device__ __forceinline__ void fr_weight_records_item(const uint8_t *scales, int64_t rows, int K, bool e2m1,
                                                       bool nv, uint32_t *records, int64_t i)
{
    const int64_t kbs = K / 128;
    if (i >= rows * kbs) return;
    const int n = (int)(i % FR_REC_ROWS);
    const int64_t rest = i / FR_REC_ROWS, kb = rest % kbs, group = rest / kbs, row = group * FR_REC_ROWS + n;
    uint32_t *rec = records + (group * kbs + kb) * FR_REC_WORDS(nv, e2m1);
    if (nv) {
        fr_store_e4m3x8((uint16_t *)rec + n, FR_REC_ROWS, *(const uint2 *)(scales + row * (K / 16) + 8 * kb));
        return;
    }
    const uint32_t *rs = (const uint32_t *)(scales + row * (K / 32)), w = rs[kb];
    uint32_t m = 0;
    for (int64_t i = 0; i < kbs; i++) m = __vmaxu4(m, rs[i]); /* the row's reference: its largest byte over K */
    const uint32_t ref = fr_mx_ref(m);
    const bool halves = FR_REC_HALVES(nv, e2m1);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t b = (w >> (8 * j)) & 0xFF, m = e2m1 ? fr_mx_mult_e2m1(ref, b) : fr_mx_mult(ref, b);
        if (halves) ((uint16_t *)rec)[j * FR_REC_ROWS + n] = (uint16_t)m;
        else rec[j * FR_REC_ROWS + n] = m;
    }
    rec[(halves ? 2 : 4) * FR_REC_ROWS + n] = __float_as_uint(moe_ep_ue8m0_to_f32((uint8_t)ref));
}

#endif
