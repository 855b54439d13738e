/* Row codecs shared by the split kernels (dispatch.cu, combine.cu) and the
 * mega kernel: encoding activation rows, decoding wire rows. Rows written by
 * other blocks of a running kernel are read through L2 (__ldcg). */
#ifndef MOE_EP_ROWS_CUH
#define MOE_EP_ROWS_CUH

#include "kernels/gpu_common.cuh"

/* ---- dispatch: one token into its rows ------------------------------------
 * A warp covers 32 chunks of 8 elements of the row (16 bytes of bf16 each);
 * a format block of n elements spans n / 8 neighbouring lanes, which share
 * its amax and NaN / inf flags through shuffles, and each lane encodes its 8
 * values with them (the *_encode_part codecs: the whole-block encoder's
 * bytes). H % 128 == 0, so a block never straddles a warp's chunks. */

/* The 8 bf16 of 16 bytes u as floats. */
__device__ __forceinline__ void bf16x8_unpack(uint4 u, float v[8])
{
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; i++)
        v[2 * i] = moe_ep_bf16_to_f32((uint16_t)w[i]), v[2 * i + 1] = moe_ep_bf16_to_f32((uint16_t)(w[i] >> 16));
}

/* 8 bf16 at element offset h of row x (16-byte loads when x is aligned). */
__device__ __forceinline__ void load_bf16x8(const uint16_t *x, int64_t h, bool vec, float v[8])
{
    if (vec) {
        bf16x8_unpack(__ldcg((const uint4 *)(x + h)), v);
    } else {
        for (int i = 0; i < 8; i++) v[i] = moe_ep_bf16_to_f32(__ldcg(x + h + i));
    }
}

/* The same from shared memory: 16 bytes at shared address addr (16-byte aligned). */
__device__ __forceinline__ void load_bf16x8_shared(uint32_t addr, float v[8])
{
    uint4 u;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(addr));
    bf16x8_unpack(u, v);
}

/* max(a, b), NaN if either is NaN (max.NaN: fmaxf would drop it). */
__device__ __forceinline__ float fmax_nan(float a, float b)
{
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* The amax of the block of `lanes` lanes (a power of 2 <= 32, aligned)
 * holding v, every lane of the warp calling: NaN if any value is NaN, else inf
 * if any is inf, else the largest |v| - moe_ep_block_amax's amax and flags in
 * one value, so one shuffle a step. */
__device__ __forceinline__ float block_amax_lanes(const float v[8], int lanes)
{
    float amax = fmax_nan(fmax_nan(fmax_nan(fabsf(v[0]), fabsf(v[1])), fmax_nan(fabsf(v[2]), fabsf(v[3]))),
                          fmax_nan(fmax_nan(fabsf(v[4]), fabsf(v[5])), fmax_nan(fabsf(v[6]), fabsf(v[7]))));
    for (int o = 1; o < lanes; o <<= 1) amax = fmax_nan(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    return amax;
}

/* Four E4M3 bytes (v[0] lowest) of values that are not NaN: moe_ep_e4m3_from_f32's
 * bytes (the same cvt, round to nearest even, saturating), two a cvt. */
__device__ __forceinline__ uint32_t e4m3x4_satfinite(const float v[4], float mul)
{
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(__fmul_rn(v[1], mul)), "f"(__fmul_rn(v[0], mul)));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(__fmul_rn(v[3], mul)), "f"(__fmul_rn(v[2], mul)));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* Eight E2M1 codes of v times enc (not NaN), packed as nibbles (v[0] lowest):
 * moe_ep_e2m1_from_f32(moe_ep_clamp6(v * enc)) each. */
__device__ __forceinline__ uint32_t e2m1x8(const float v[8], float enc)
{
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) w |= moe_ep_e2m1_code_clamped(__fmul_rn(v[i], enc)) << (4 * i);
    return w;
}

/* Eight E2M1 codes (a byte each, q[0] first) as a word of nibbles, q[0] lowest. */
__device__ __forceinline__ uint32_t e2m1_nibbles8(const uint8_t *q)
{
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) w |= (uint32_t)q[i] << (4 * i);
    return w;
}

/* moe_ep_nvfp4_encode_mul(sb, S) for sb not NaN, given inv_S = moe_ep_div(1, S)
 * (once per loop: a division): the scale decoded by the cvt (every E4M3 is an
 * f16). NaN sb: NaN (not finite). */
__device__ __forceinline__ float nvfp4_encode_mul(uint8_t sb, float inv_S)
{
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)sb));
    const float s = __half2float(__ushort_as_half((unsigned short)h2));
    return s == 0.0f ? 0.0f : moe_ep_div(1.0f, moe_ep_mul(s, inv_S));
}

/* encode_chunk's inv_S for format f: 1 / S for NVFP4 (a division), else unused. */
__device__ __forceinline__ float nvfp4_inv_scale(moe_ep_format_t f, float S)
{
    return f == MOE_EP_FORMAT_NVFP4 ? moe_ep_div(1.0f, S) : 0.0f;
}

/* An E2M1 block's scale for its amax (NVFP4: the E4M3 byte, global scale S,
 * inv_S = 1 / S; the FP4 wire: the bf16 bits) and *enc, the multiplier of its
 * values; *exact: the shortcuts (e2m1x8) give the codec's bytes: no NaN (nor,
 * FP4 wire, inf) in the block and enc finite (a huge S: 1 / S subnormal, enc
 * inf, 0 * enc NaN), else the caller takes the codec. */
__device__ __forceinline__ uint32_t e2m1_scale_for_amax(moe_ep_format_t f, float amax, float S, float inv_S,
                                                        float *enc, bool *exact)
{
    if (f == MOE_EP_FORMAT_NVFP4) {
        const uint8_t sb = moe_ep_nvfp4_scale_for_amax(amax, S);
        *enc = nvfp4_encode_mul(sb, inv_S);
        *exact = !moe_ep_isnan(amax) && moe_ep_isfinite(*enc);
        return sb;
    }
    const uint16_t sb = moe_ep_fp4_wire_scale_for_amax(amax);
    const float s = moe_ep_bf16_to_f32(sb);
    *enc = s == 0.0f ? 0.0f : moe_ep_div(1.0f, s);
    *exact = moe_ep_isfinite(amax) && moe_ep_isfinite(*enc);
    return sb;
}

/* The encoded chunk of 8 values: `bytes` data bytes in q, the block scale (or
 * none) in scale_bits; lane leaders of blocks write the scale. */
struct enc_chunk {
    uint4 q;           /* bf16: 16 bytes; E4M3: 8; E2M1: 4 (packed nibbles) */
    uint32_t scale;    /* UE8M0 / E4M3 byte, the bf16 bits of an FP4-wire scale, or the fp32 bits of an
                          FP8-BLOCK scale */
};

/* A lane's 8 values of a block in format f (not bf16) with the block's amax
 * (block_amax_lanes): the bytes and scale of the host's *_encode_part codecs
 * (tests/gpu/test_device_codec.cu), with the divisions and per-value NaN tests
 * taken out where the block's amax settles them (moe_ep_ue8m0_for_amax_e4m3,
 * moe_ep_e2m1_code_clamped: test_codec checks every fp32 input). */
__device__ __forceinline__ enc_chunk encode_chunk_scaled(moe_ep_format_t f, const float v[8], float amax, float S,
                                                         float inv_S)
{
    enc_chunk e = {make_uint4(0, 0, 0, 0), 0};
    const bool nan = moe_ep_isnan(amax), finite = moe_ep_isfinite(amax);
    if (f == MOE_EP_FORMAT_MXFP8) {
        const uint8_t b = moe_ep_ue8m0_for_amax_e4m3(amax);
        const float mul = moe_ep_ue8m0_encode_mul(b);
        e.q.x = nan ? 0x7F7F7F7Fu : e4m3x4_satfinite(v, mul);
        e.q.y = nan ? 0x7F7F7F7Fu : e4m3x4_satfinite(v + 4, mul);
        e.scale = nan ? MOE_EP_UE8M0_NAN : b;
    } else if (f == MOE_EP_FORMAT_FP8_BLOCK) {
        if (!finite) {
            e.q.x = e.q.y = 0x7F7F7F7Fu;
            e.scale = 0x7FC00000u;
            return e;
        }
        const float s = moe_ep_fp8_block_scale(amax), inv = moe_ep_div(1.0f, s);
        e.q.x = e4m3x4_satfinite(v, inv), e.q.y = e4m3x4_satfinite(v + 4, inv);
        e.scale = __float_as_uint(s);
    } else { /* E2M1: NVFP4 or the FP4 wire */
        float enc;
        bool exact;
        const uint32_t sb = e2m1_scale_for_amax(f, amax, S, inv_S, &enc, &exact);
        if (!exact) { /* cold: the codec */
            uint8_t q[8];
            e.scale = f == MOE_EP_FORMAT_NVFP4 ? moe_ep_nvfp4_encode_part(v, 8, S, amax, nan, q)
                                               : moe_ep_fp4_wire_encode_part(v, 8, amax, !finite, q);
            e.q.x = e2m1_nibbles8(q);
            return e;
        }
        e.q.x = enc == 0.0f ? 0u : e2m1x8(v, enc);
        e.scale = sb;
    }
    return e;
}

/* A whole 16-value block in E2M1 (the serial epilogue: a thread a block) of
 * format f, NVFP4 or the FP4 wire: the scale and the codes of the host's
 * moe_ep_nvfp4_block_encode / moe_ep_fp4_wire_block_encode, the codes as
 * nibbles (v[0] lowest) in *q; by the chunks' shortcuts, where the seven
 * compares of each code took ~35 instructions. */
__device__ __forceinline__ uint32_t e2m1_block16(moe_ep_format_t f, const float *v, float S, uint2 *q)
{
    float lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 8; i++) lo[i] = v[i], hi[i] = v[8 + i];
    const float amax = fmax_nan(block_amax_lanes(lo, 1), block_amax_lanes(hi, 1));
    float enc;
    bool exact;
    const uint32_t scale = e2m1_scale_for_amax(f, amax, S, nvfp4_inv_scale(f, S), &enc, &exact);
    if (!exact) { /* cold: the codec */
        uint8_t c[16];
        const uint32_t sb = f == MOE_EP_FORMAT_NVFP4 ? moe_ep_nvfp4_block_encode(v, S, c) : moe_ep_fp4_wire_block_encode(v, c);
        q->x = e2m1_nibbles8(c), q->y = e2m1_nibbles8(c + 8);
        return sb;
    }
    q->x = enc == 0.0f ? 0u : e2m1x8(lo, enc);
    q->y = enc == 0.0f ? 0u : e2m1x8(hi, enc);
    return scale;
}

/* The chunk of 8 values v in format f; S, inv_S: NVFP4's global scale and
 * nvfp4_inv_scale(f, S), which callers compute once, outside their loops (the
 * compiler left the division inside). */
__device__ __forceinline__ enc_chunk encode_chunk_of(moe_ep_format_t f, const float v[8], float S, float inv_S)
{
    if (f == MOE_EP_FORMAT_BF16) {
        enc_chunk e = {make_uint4(moe_ep_pack_bf16x2(v[0], v[1]), moe_ep_pack_bf16x2(v[2], v[3]),
                                  moe_ep_pack_bf16x2(v[4], v[5]), moe_ep_pack_bf16x2(v[6], v[7])),
                       0};
        return e;
    }
    return encode_chunk_scaled(f, v, block_amax_lanes(v, moe_ep_format_block(f) / 8), S, inv_S);
}

/* The same with 1 / S computed here (NVFP4: a division a chunk). */
__device__ __forceinline__ enc_chunk encode_chunk(moe_ep_format_t f, const float v[8], float S)
{
    return encode_chunk_of(f, v, S, nvfp4_inv_scale(f, S));
}

/* Writes chunk h / 8 (elements h .. h + 7) of activation row `row`. */
__device__ __forceinline__ void store_chunk(moe_ep_format_t f, const enc_chunk &e, int64_t H, int64_t h,
                                            uint8_t *data, uint8_t *scales, int64_t row)
{
    uint8_t *d = data + row * moe_ep_row_data_bytes(f, H);
    uint8_t *s = scales + row * moe_ep_act_scale_stride(f, H);
    int blk = f == MOE_EP_FORMAT_BF16 ? 8 : moe_ep_format_block(f);
    if (f == MOE_EP_FORMAT_BF16) *(uint4 *)(d + 2 * h) = e.q;
    else if (f == MOE_EP_FORMAT_NVFP4) *(uint32_t *)(d + h / 2) = e.q.x;
    else *(uint2 *)(d + h) = make_uint2(e.q.x, e.q.y);
    if (f == MOE_EP_FORMAT_BF16 || h % blk) return;
    if (f == MOE_EP_FORMAT_FP8_BLOCK) ((uint32_t *)s)[h / blk] = e.scale;
    else s[h / blk] = (uint8_t)e.scale;
}

/* Encodes the 8 values v of chunk h / 8 of a token and, where `write`,
 * stores them into its rows rows[0..K) that are >= 0. Every lane of the warp
 * calls it (shuffles), `write` false for lanes without a chunk. */
__device__ __forceinline__ void dispatch_chunk(moe_ep_format_t f, const float v[8], int64_t H, int64_t h, float S,
                                               uint8_t *data, uint8_t *scales, const int32_t *rows, int K, bool write)
{
    enc_chunk e = encode_chunk(f, v, S);
    for (int k = 0; k < K && write; k++)
        if (rows[k] >= 0) store_chunk(f, e, H, h, data, scales, rows[k]);
}

/* Quantizes token row x (H bf16) once into format f and writes it to the rows
 * rows[0..K) that are >= 0 (none when !write). Threads tid of nthreads (a
 * multiple of 32), all of them calling. */
__device__ __forceinline__ void dispatch_row(moe_ep_format_t f, const uint16_t *x, int64_t H, float S,
                                             uint8_t *data, uint8_t *scales, const int32_t *rows, int K, bool write,
                                             int tid, int nthreads)
{
    bool vec = ((uintptr_t)x & 15) == 0;
    int lane = tid & 31;
    int64_t chunks = H / 8;
    for (int64_t c0 = tid - lane; c0 < chunks; c0 += nthreads) { /* warp-uniform: shuffles inside */
        int64_t h = (c0 + lane) * 8;
        bool on = c0 + lane < chunks;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (on) load_bf16x8(x, h, vec, v);
        dispatch_chunk(f, v, H, h, S, data, scales, rows, K, on && write);
    }
}

/* ---- combine: one token from its rows ------------------------------------- */

/* The 8 values of one wire chunk from its bytes: bf16 (u, 16 bytes), MXFP8
 * (u.x, u.y and the block's scale byte sb) or FP4 (u.x and the bf16 bits of
 * the block's scale in sb). */
__device__ __forceinline__ void wire_decode8(moe_ep_wire_t wire, uint4 u, uint32_t sb, float v[8])
{
    if (wire == MOE_EP_WIRE_BF16) {
        bf16x8_unpack(u, v);
    } else if (wire == MOE_EP_WIRE_MXFP8) {
        for (int i = 0; i < 4; i++)
            v[i] = moe_ep_mx8_value((uint8_t)(u.x >> (8 * i)), (uint8_t)sb),
            v[4 + i] = moe_ep_mx8_value((uint8_t)(u.y >> (8 * i)), (uint8_t)sb);
    } else {
        for (int i = 0; i < 8; i++) v[i] = moe_ep_fp4_wire_value((uint8_t)((u.x >> (4 * i)) & 15u), (uint16_t)sb);
    }
}

/* Elements h .. h + 7 of wire row `row` (H elements) of output rows (y, ys). */
__device__ __forceinline__ void wire_values8(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys, int64_t H,
                                             int64_t row, int64_t h, float v[8])
{
    uint4 u = make_uint4(0, 0, 0, 0);
    uint32_t sb = 0;
    if (wire == MOE_EP_WIRE_BF16) {
        u = __ldcg((const uint4 *)(y + 2 * (row * H + h)));
    } else if (wire == MOE_EP_WIRE_MXFP8) {
        uint2 d = __ldcg((const uint2 *)(y + row * H + h));
        u.x = d.x, u.y = d.y, sb = __ldcg(ys + row * (H / 32) + h / 32);
    } else {
        u.x = __ldcg((const uint32_t *)(y + row * (H / 2) + h / 2));
        sb = __ldcg((const unsigned short *)ys + row * (H / 16) + h / 16);
    }
    wire_decode8(wire, u, sb, v);
}

/* The same from one row staged in shared memory: its data bytes y and scale
 * bytes ys (the layouts of a row of the wire buffers). */
__device__ __forceinline__ void wire_values8_staged(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys, int h,
                                                    float v[8])
{
    uint4 u = make_uint4(0, 0, 0, 0);
    uint32_t sb = 0;
    if (wire == MOE_EP_WIRE_BF16) {
        u = *(const uint4 *)(y + 2 * h);
    } else if (wire == MOE_EP_WIRE_MXFP8) {
        uint2 d = *(const uint2 *)(y + h);
        u.x = d.x, u.y = d.y, sb = ys[h / 32];
    } else {
        u.x = *(const uint32_t *)(y + h / 2), sb = ((const unsigned short *)ys)[h / 16];
    }
    wire_decode8(wire, u, sb, v);
}

/* Prefetch into L2 of wire_values8's data bytes (no registers held: the
 * combine's loads then wait on L2, not on memory, one after the other). */
__device__ __forceinline__ void wire_prefetch8(moe_ep_wire_t wire, const uint8_t *y, int64_t H, int64_t row, int64_t h)
{
    const uint8_t *p = wire == MOE_EP_WIRE_BF16 ? y + 2 * (row * H + h) : wire == MOE_EP_WIRE_MXFP8 ? y + row * H + h
                                                                                                  : y + row * (H / 2) + h / 2;
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

/* out[h .. h + 7] = bf16 of acc[0..7] (one 16-byte store where aligned). */
__device__ __forceinline__ void store_bf16x8(uint16_t *out, int64_t h, const float acc[8])
{
    if (((uintptr_t)out & 15) == 0) {
        *(uint4 *)(out + h) = make_uint4(moe_ep_pack_bf16x2(acc[0], acc[1]), moe_ep_pack_bf16x2(acc[2], acc[3]),
                                         moe_ep_pack_bf16x2(acc[4], acc[5]), moe_ep_pack_bf16x2(acc[6], acc[7]));
    } else {
        for (int i = 0; i < 8; i++) out[h + i] = moe_ep_bf16_from_f32(acc[i]);
    }
}

/* out[h .. h + 7] = bf16 of the sum over slots k = 0..K-1 (in that order)
 * with rows[k] >= 0 of fmaf(w[k], y[rows[k]][h ..], acc). */
__device__ __forceinline__ void combine_chunk(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys, int H, int K,
                                              const int32_t *rows, const float *w, uint16_t *out, int64_t h)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v[8];
    for (int k = 0; k < K; k++) /* every slot's bytes on their way to L2 before the first load waits */
        if (rows[k] >= 0) wire_prefetch8(wire, y, H, rows[k], h);
    for (int k = 0; k < K; k++) {
        if (rows[k] < 0) continue;
        float wk = w[k];
        wire_values8(wire, y, ys, H, rows[k], h, v);
        for (int i = 0; i < 8; i++) acc[i] = fmaf(wk, v[i], acc[i]);
    }
    store_bf16x8(out, h, acc);
}

/* combine_chunk with the token's rows staged in shared memory: slot k's
 * data bytes at y + k * data_bytes, its scales at ys + k * scale_bytes
 * (only slots with rows[k] >= 0 are read). The same sums, bit for bit. */
__device__ __forceinline__ void combine_chunk_staged(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys,
                                                     int data_bytes, int scale_bytes, int K, const int32_t *rows,
                                                     const float *w, uint16_t *out, int h)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v[8];
    for (int k = 0; k < K; k++) {
        if (rows[k] < 0) continue;
        float wk = w[k];
        wire_values8_staged(wire, y + k * data_bytes, ys + k * scale_bytes, h, v);
        for (int i = 0; i < 8; i++) acc[i] = fmaf(wk, v[i], acc[i]);
    }
    store_bf16x8(out, h, acc);
}

/* combine_chunk over a token's row (H % 8 == 0): threads tid of nthreads,
 * 8 consecutive h each. */
__device__ __forceinline__ void combine_row(moe_ep_wire_t wire, const uint8_t *y, const uint8_t *ys, int H, int K,
                                            const int32_t *rows, const float *w, uint16_t *out, int tid, int nthreads)
{
    for (int64_t h = (int64_t)tid * 8; h < H; h += (int64_t)nthreads * 8) combine_chunk(wire, y, ys, H, K, rows, w, out, h);
}

#endif
