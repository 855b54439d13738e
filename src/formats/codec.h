/*
 * Element and block codecs shared by host (C11) and device (CUDA) code.
 *
 * Every function here is a static inline MOE_EP_HD function so the CPU
 * reference and the GPU kernels run the very same arithmetic; each fp32
 * operation is written so that neither compiler may fuse or reorder it
 * (explicit _rn intrinsics on the device, no a*b+c on the host).
 * The rules are spelled out in docs/formats.md.
 */
#ifndef MOE_EP_CODEC_H
#define MOE_EP_CODEC_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOE_EP_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define MOE_EP_HD static inline
#endif

/* Block sizes along a row. */
#define MOE_EP_MX_BLOCK 32
#define MOE_EP_NVFP4_BLOCK 16
#define MOE_EP_FP4_WIRE_BLOCK 16
#define MOE_EP_FP8_BLOCK_BLOCK 128

#define MOE_EP_E4M3_MAX 448.0f
#define MOE_EP_E2M1_MAX 6.0f
#define MOE_EP_E4M3_NAN 0x7Fu
#define MOE_EP_UE8M0_NAN 0xFFu
#define MOE_EP_BF16_NAN 0x7FC0u

/* ---- bit casts and exactly rounded fp32 operations ---------------------- */

MOE_EP_HD uint32_t moe_ep_f2u(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

MOE_EP_HD float moe_ep_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

MOE_EP_HD float moe_ep_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

MOE_EP_HD float moe_ep_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

MOE_EP_HD int moe_ep_isnan(float f) { return (moe_ep_f2u(f) & 0x7FFFFFFFu) > 0x7F800000u; }
MOE_EP_HD int moe_ep_isfinite(float f) { return (moe_ep_f2u(f) & 0x7F800000u) != 0x7F800000u; }
MOE_EP_HD float moe_ep_absf(float f) { return moe_ep_u2f(moe_ep_f2u(f) & 0x7FFFFFFFu); }

/* 2^k as fp32 for k in [-149, 127] (exact, subnormals included). */
MOE_EP_HD float moe_ep_exp2i(int k)
{
    if (k >= -126) return moe_ep_u2f((uint32_t)(k + 127) << 23);
    return moe_ep_u2f(1u << (k + 149));
}

/* ---- bf16 ---------------------------------------------------------------- */

/* fp32 -> bf16, round to nearest even; NaN -> quiet NaN with the sign kept. */
MOE_EP_HD uint16_t moe_ep_bf16_from_f32(float f)
{
    uint32_t u = moe_ep_f2u(f);
    if (moe_ep_isnan(f)) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

MOE_EP_HD float moe_ep_bf16_to_f32(uint16_t h) { return moe_ep_u2f((uint32_t)h << 16); }

/* ---- E4M3 (bias 7, no Inf, NaN = S.1111.111, max 448, min subnormal 2^-9) -- */

MOE_EP_HD uint8_t moe_ep_e4m3_from_f32(float v)
{
    if (moe_ep_isnan(v)) return MOE_EP_E4M3_NAN;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    /* The hardware conversion: round to nearest even, finite values and inf
     * beyond 448 saturate to +-448, as below (tests/gpu/test_device_codec.cu). */
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
    return (uint8_t)(pair & 0xFFu);
#else
    uint32_t sign = (moe_ep_f2u(v) >> 31) << 7;
    float a = moe_ep_absf(v);
    if (a > MOE_EP_E4M3_MAX) a = MOE_EP_E4M3_MAX;
    uint32_t code;
    if (a < 0.015625f) {
        /* Subnormal range: code = a * 2^9 rounded to nearest even integer
         * (0..8; 8 is the smallest normal, code 0x08). a * 512 is exact. */
        float q = moe_ep_mul(a, 512.0f);
        uint32_t n = (uint32_t)q;
        float frac = q - (float)n;
        if (frac > 0.5f || (frac == 0.5f && (n & 1u))) n++;
        code = n;
    } else {
        /* Normal range: round the 23-bit mantissa to 3 bits, ties to even; a
         * carry moves into the exponent. a <= 448 keeps the result <= 448. */
        uint32_t u = moe_ep_f2u(a);
        u += 0x7FFFFu + ((u >> 20) & 1u);
        u &= ~0xFFFFFu;
        uint32_t exp = (u >> 23) - 127u + 7u;
        code = (exp << 3) | ((u >> 20) & 7u);
    }
    return (uint8_t)(sign | code);
#endif
}

MOE_EP_HD float moe_ep_e4m3_to_f32(uint8_t c)
{
    uint32_t sign = (uint32_t)(c >> 7) << 31;
    uint32_t exp = (c >> 3) & 15u, man = c & 7u;
    if (exp == 15u && man == 7u) return moe_ep_u2f(sign | 0x7FC00000u);
    if (exp == 0u) return moe_ep_u2f(sign | moe_ep_f2u((float)man * 0.001953125f));
    return moe_ep_u2f(sign | ((exp - 7u + 127u) << 23) | (man << 20));
}

/* ---- E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6) --------------------------------------- */

/* Nearest, ties to the even code; clamps to 6; sign kept (-0 -> 0x8); NaN -> 0. */
MOE_EP_HD uint8_t moe_ep_e2m1_from_f32(float v)
{
    if (moe_ep_isnan(v)) return 0;
    uint8_t sign = (uint8_t)((moe_ep_f2u(v) >> 31) << 3);
    float a = moe_ep_absf(v);
    /* Count the thresholds passed; ">" at a tie rounds down, ">=" rounds up. */
    uint8_t code = (uint8_t)((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                             (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
    return (uint8_t)(sign | code);
}

/* moe_ep_e2m1_from_f32(moe_ep_clamp6(v)) for v not NaN, by one fp32 rounding
 * (the GPU's chunk encoder; test_codec checks every fp32 bit pattern): |v|
 * (at most 6) plus a magic number 1.5 * 2^(e + 22), e = |v|'s binade (0 below
 * 1), whose ulp 2^(e - 1) is E2M1's step there (0.5 below 2, 1 below 4, 2 up
 * to 6); the sum's bits minus the magic's are the steps n = rint(|v| / 2^(e - 1)),
 * ties to even n, and the code is 2 e + n (n's parity is the code's). */
MOE_EP_HD uint32_t moe_ep_e2m1_code_clamped(float v)
{
    uint32_t u = moe_ep_f2u(v), sign = (u >> 28) & 8u;
    float a = moe_ep_absf(v);
    a = a < MOE_EP_E2M1_MAX ? a : MOE_EP_E2M1_MAX;
    uint32_t eb = moe_ep_f2u(a) >> 23;
    eb = eb > 127u ? eb : 127u; /* biased: at least 1.0's */
    float magic = moe_ep_u2f(((eb + 22u) << 23) | 0x400000u);
#ifdef __CUDA_ARCH__
    float t = __fadd_rn(a, magic);
#else
    float t = a + magic;
#endif
    return sign | (moe_ep_f2u(t) - moe_ep_f2u(magic) + 2u * (eb - 127u));
}

MOE_EP_HD float moe_ep_e2m1_to_f32(uint8_t c)
{
    /* Values x2 for codes 0..7: 0 1 2 3 4 6 8 12. */
    uint32_t m = c & 7u;
    float a = (m < 4u) ? 0.5f * (float)m : (float)(2u << ((m - 4u) >> 1)) * ((m & 1u) ? 1.5f : 1.0f);
    return (c & 8u) ? -a : a;
}

/* ---- UE8M0 scale byte: 2^(b-127), 0xFF = NaN ------------------------------ */

MOE_EP_HD float moe_ep_ue8m0_to_f32(uint8_t b)
{
    if (b == MOE_EP_UE8M0_NAN) return moe_ep_u2f(0x7FC00000u);
    return moe_ep_exp2i((int)b - 127);
}

/* Scale byte for a block with absolute maximum amax (not NaN) and element
 * maximum elem_max (448 MXFP8, 6 MXFP4): q = amax / elem_max, b = 127 + the
 * smallest e with 2^e >= q, clamped to [0, 254]; 254 for q = Inf, 0 for q = 0. */
MOE_EP_HD uint8_t moe_ep_ue8m0_for_amax(float amax, float elem_max)
{
    float q = moe_ep_div(amax, elem_max);
    if (!moe_ep_isfinite(q)) return 254;
    if (q == 0.0f) return 0;
    uint32_t u = moe_ep_f2u(q);
    int e;
    uint32_t exp = u >> 23, man = u & 0x7FFFFFu;
    if (exp == 0u) {
        /* Subnormal q = man * 2^-149: e = ceil(log2(man)) - 149. */
        int lg = 0;
        while ((1u << lg) < man) lg++;
        e = lg - 149;
    } else {
        e = (int)exp - 127 + (man != 0u ? 1 : 0);
    }
    int b = 127 + e;
    if (b < 0) b = 0;
    if (b > 254) b = 254;
    return (uint8_t)b;
}

/* moe_ep_ue8m0_for_amax(amax, 448) without the division (the GPU's chunk
 * encoder; test_codec checks every fp32 bit pattern). amax = M 2^E, M in
 * [1, 2): amax / 448 = (M / 1.75) 2^(E - 8), so e = E - 8 for M <= 1.75, else
 * E - 7; the quotient's rounding cannot reach 2^e from above, as amax's next
 * value above 1.75 2^(E) gives a quotient 1.14 half-ulps past 2^e. Infinite
 * (or NaN) amax: 254; amax below 2^-111 (q near fp32's subnormals): the
 * division. amax >= 0. */
MOE_EP_HD uint8_t moe_ep_ue8m0_for_amax_e4m3(float amax)
{
    uint32_t u = moe_ep_f2u(amax) & 0x7FFFFFFFu, eb = u >> 23;
    if (eb >= 16u) return eb == 255u ? 254 : (uint8_t)(eb - 8u + ((u & 0x7FFFFFu) > 0x600000u));
    if (u == 0u) return 0;
    return moe_ep_ue8m0_for_amax(amax, MOE_EP_E4M3_MAX);
}

/* The multiplier 2^(127-b) that maps a block into the element range. */
MOE_EP_HD float moe_ep_ue8m0_encode_mul(uint8_t b) { return moe_ep_exp2i(127 - (int)b); }

/* ---- NVFP4 block scale (E4M3) with an fp32 encode scale S ----------------- */

MOE_EP_HD uint8_t moe_ep_nvfp4_scale_for_amax(float amax, float S)
{
    return moe_ep_e4m3_from_f32(moe_ep_mul(amax, moe_ep_mul(S, 1.0f / 6.0f)));
}

/* The usual NVFP4 encode scale of a tensor: 2688 / amax (448 * 6 / amax);
 * 1 when amax is 0 or not finite; FLT_MAX when 2688 / amax overflows. */
MOE_EP_HD float moe_ep_nvfp4_scale_from_amax(float amax)
{
    if (!(amax > 0.0f) || !moe_ep_isfinite(amax)) return 1.0f;
    float s = moe_ep_div(448.0f * 6.0f, amax);
    return moe_ep_isfinite(s) ? s : moe_ep_u2f(0x7F7FFFFFu);
}

/* Element multiplier 1 / (float(sb) * (1/S)); 0 when sb decodes to 0. */
MOE_EP_HD float moe_ep_nvfp4_encode_mul(uint8_t sb, float S)
{
    float s = moe_ep_e4m3_to_f32(sb);
    if (s == 0.0f) return 0.0f;
    return moe_ep_div(1.0f, moe_ep_mul(s, moe_ep_div(1.0f, S)));
}

MOE_EP_HD float moe_ep_clamp6(float v)
{
    if (v > MOE_EP_E2M1_MAX) return MOE_EP_E2M1_MAX;
    if (v < -MOE_EP_E2M1_MAX) return -MOE_EP_E2M1_MAX;
    return v;
}

/* Dequantized NVFP4 element: (e2m1 * float(sb)) / S. */
MOE_EP_HD float moe_ep_nvfp4_value(uint8_t e2m1, uint8_t sb, float S)
{
    return moe_ep_div(moe_ep_mul(moe_ep_e2m1_to_f32(e2m1), moe_ep_e4m3_to_f32(sb)), S);
}

/* ---- FP8-BLOCK scale: fmaxf(amax, 1e-4) / 448, NaN for a non-finite block -- */

MOE_EP_HD float moe_ep_fp8_block_scale(float amax)
{
    float m = amax > 1e-4f ? amax : 1e-4f;
    return moe_ep_div(m, MOE_EP_E4M3_MAX);
}

/* ---- FP4 wire scale: bf16(amax / 6), round to nearest even ---------------- */

MOE_EP_HD uint16_t moe_ep_fp4_wire_scale_for_amax(float amax)
{
    return moe_ep_bf16_from_f32(moe_ep_div(amax, MOE_EP_E2M1_MAX));
}

/* ---- Whole blocks of one row ---------------------------------------------
 * x: n contiguous fp32 values (n = the format's block). Returns the scale;
 * writes n elements (one byte each, FP4 codes unpacked in the low nibble). */

MOE_EP_HD float moe_ep_block_amax(const float *x, int n, int *has_nan, int *has_inf)
{
    float amax = 0.0f;
    int nan = 0, inf = 0;
    for (int i = 0; i < n; i++) {
        float a = moe_ep_absf(x[i]);
        if (moe_ep_isnan(a)) nan = 1;
        else if (!moe_ep_isfinite(a)) inf = 1;
        else if (a > amax) amax = a;
    }
    if (inf) amax = moe_ep_u2f(0x7F800000u);
    *has_nan = nan;
    *has_inf = inf;
    return amax;
}

/* The encoders of blocks split into parts (a GPU lane's 8 values, say): each
 * part is encoded with its whole block's amax and NaN / inf flags
 * (moe_ep_block_amax over the block), giving the bytes of the whole-block
 * encoder. Returns the block's scale. */
MOE_EP_HD uint8_t moe_ep_mxfp8_encode_part(const float *x, int n, float amax, int nan, uint8_t *q)
{
    if (nan) {
        for (int i = 0; i < n; i++) q[i] = MOE_EP_E4M3_NAN;
        return MOE_EP_UE8M0_NAN;
    }
    uint8_t b = moe_ep_ue8m0_for_amax(amax, MOE_EP_E4M3_MAX);
    float mul = moe_ep_ue8m0_encode_mul(b);
    for (int i = 0; i < n; i++) q[i] = moe_ep_e4m3_from_f32(moe_ep_mul(x[i], mul));
    return b;
}

MOE_EP_HD uint8_t moe_ep_nvfp4_encode_part(const float *x, int n, float S, float amax, int nan, uint8_t *q)
{
    if (nan) {
        for (int i = 0; i < n; i++) q[i] = 0;
        return MOE_EP_E4M3_NAN;
    }
    uint8_t sb = moe_ep_nvfp4_scale_for_amax(amax, S);
    float enc = moe_ep_nvfp4_encode_mul(sb, S);
    for (int i = 0; i < n; i++) q[i] = enc == 0.0f ? 0 : moe_ep_e2m1_from_f32(moe_ep_clamp6(moe_ep_mul(x[i], enc)));
    return sb;
}

MOE_EP_HD float moe_ep_fp8_block_encode_part(const float *x, int n, float amax, int nan_or_inf, uint8_t *q)
{
    if (nan_or_inf) {
        for (int i = 0; i < n; i++) q[i] = MOE_EP_E4M3_NAN;
        return moe_ep_u2f(0x7FC00000u);
    }
    float s = moe_ep_fp8_block_scale(amax);
    float inv = moe_ep_div(1.0f, s);
    for (int i = 0; i < n; i++) q[i] = moe_ep_e4m3_from_f32(moe_ep_mul(x[i], inv));
    return s;
}

MOE_EP_HD uint16_t moe_ep_fp4_wire_encode_part(const float *x, int n, float amax, int nan_or_inf, uint8_t *q)
{
    if (nan_or_inf) {
        for (int i = 0; i < n; i++) q[i] = 0;
        return MOE_EP_BF16_NAN;
    }
    uint16_t sb = moe_ep_fp4_wire_scale_for_amax(amax);
    float s = moe_ep_bf16_to_f32(sb);
    float enc = s == 0.0f ? 0.0f : moe_ep_div(1.0f, s);
    for (int i = 0; i < n; i++) q[i] = enc == 0.0f ? 0 : moe_ep_e2m1_from_f32(moe_ep_clamp6(moe_ep_mul(x[i], enc)));
    return sb;
}

MOE_EP_HD uint8_t moe_ep_mxfp8_block_encode(const float *x, uint8_t *q)
{
    int nan, inf;
    float amax = moe_ep_block_amax(x, MOE_EP_MX_BLOCK, &nan, &inf);
    return moe_ep_mxfp8_encode_part(x, MOE_EP_MX_BLOCK, amax, nan, q);
}

MOE_EP_HD uint8_t moe_ep_mxfp4_block_encode(const float *x, uint8_t *q)
{
    int nan, inf;
    float amax = moe_ep_block_amax(x, MOE_EP_MX_BLOCK, &nan, &inf);
    if (nan) {
        for (int i = 0; i < MOE_EP_MX_BLOCK; i++) q[i] = 0;
        return MOE_EP_UE8M0_NAN;
    }
    uint8_t b = moe_ep_ue8m0_for_amax(amax, MOE_EP_E2M1_MAX);
    float mul = moe_ep_ue8m0_encode_mul(b);
    for (int i = 0; i < MOE_EP_MX_BLOCK; i++) q[i] = moe_ep_e2m1_from_f32(moe_ep_mul(x[i], mul));
    return b;
}

MOE_EP_HD uint8_t moe_ep_nvfp4_block_encode(const float *x, float S, uint8_t *q)
{
    int nan, inf;
    float amax = moe_ep_block_amax(x, MOE_EP_NVFP4_BLOCK, &nan, &inf);
    return moe_ep_nvfp4_encode_part(x, MOE_EP_NVFP4_BLOCK, S, amax, nan, q);
}

MOE_EP_HD float moe_ep_fp8_block_encode(const float *x, uint8_t *q)
{
    int nan, inf;
    float amax = moe_ep_block_amax(x, MOE_EP_FP8_BLOCK_BLOCK, &nan, &inf);
    return moe_ep_fp8_block_encode_part(x, MOE_EP_FP8_BLOCK_BLOCK, amax, nan || inf, q);
}

MOE_EP_HD uint16_t moe_ep_fp4_wire_block_encode(const float *x, uint8_t *q)
{
    int nan, inf;
    float amax = moe_ep_block_amax(x, MOE_EP_FP4_WIRE_BLOCK, &nan, &inf);
    return moe_ep_fp4_wire_encode_part(x, MOE_EP_FP4_WIRE_BLOCK, amax, nan || inf, q);
}

/* ---- Dequantized element values ------------------------------------------ */

MOE_EP_HD float moe_ep_mx8_value(uint8_t e4m3, uint8_t b)
{
    return moe_ep_mul(moe_ep_e4m3_to_f32(e4m3), moe_ep_ue8m0_to_f32(b));
}

MOE_EP_HD float moe_ep_mx4_value(uint8_t e2m1, uint8_t b)
{
    return moe_ep_mul(moe_ep_e2m1_to_f32(e2m1), moe_ep_ue8m0_to_f32(b));
}

MOE_EP_HD float moe_ep_fp8_block_value(uint8_t e4m3, float s)
{
    return moe_ep_mul(moe_ep_e4m3_to_f32(e4m3), s);
}

MOE_EP_HD float moe_ep_fp4_wire_value(uint8_t e2m1, uint16_t sb)
{
    return moe_ep_mul(moe_ep_e2m1_to_f32(e2m1), moe_ep_bf16_to_f32(sb));
}

/* ---- SwiGLU with the optional clamp (c = 0: none) ------------------------- */

MOE_EP_HD float moe_ep_swiglu(float g, float u, float c)
{
    if (c > 0.0f) {
        g = g < c ? g : c;
        u = u < -c ? -c : (u > c ? c : u);
    }
#ifdef __CUDA_ARCH__
    /* ex2.approx and rcp.approx (a few ulp of fp32; g -> -inf gives -0):
     * the output is rounded to bf16 or coarser right after. expf and an
     * IEEE division (~35 instructions an output) made the GEMM1 epilogues
     * instruction-bound (docs/benchmarks.md). */
    float silu = __fdividef(g, __fadd_rn(1.0f, __expf(-g)));
#else
    float silu = g / (1.0f + expf(-g));
#endif
    return moe_ep_mul(silu, u);
}

#ifdef __CUDACC__
/* moe_ep_swiglu's device bits with ex2.approx.ftz and rcp.approx.ftz: the
 * same bits (tests/gpu/test_device_codec.cu) without __expf's and
 * __fdividef's subnormal fix-ups: an exponent below -126 gives a subnormal e
 * that 1 + e rounds away, and the divisor 1 + e is >= 1 (or NaN); the gate's
 * clamp by a min. 7 instructions an output fewer. The register tiles' chunk
 * epilogues and the bf16 tiles' outputs from registers (wg_bf16_pair) take
 * it; the bf16 tiles' chunk epilogue keeps moe_ep_swiglu (with this form
 * there ptxas serialised the wgmmas of mega's 128-row bf16 instance, C7515). */
__device__ __forceinline__ float moe_ep_swiglu_ftz(float g, float u, float c)
{
    if (c > 0.0f) {
        g = fminf(g, c); /* g < c ? g : c, a NaN g giving c included */
        u = u < -c ? -c : (u > c ? c : u);
    }
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmul_rn(g, -1.44269504088896341f)));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fadd_rn(1.0f, e)));
    return __fmul_rn(__fmul_rn(g, r), u);
}
#endif

/* ---- The register tile's E2M1 fragment words ----------------------------- */

/* One E2M1 pair byte (element 2j in the low nibble, 2j + 1 in the high;
 * nibble s e1 e0 m) as f16x2 bits, each value times 2^-14: fp16 bits
 * (s << 15) | (e1 e0 m << 9), normal and subnormal alike; the low nibble in
 * the low half. */
MOE_EP_HD uint32_t moe_ep_e2m1x2_f16_bits(uint32_t b)
{
    uint32_t x = (b | (b << 12)) & 0x000F000Fu; /* nibbles at bits 0 and 16 */
    return ((x & 0x00070007u) << 9) | ((x & 0x00080008u) << 12);
}

/* prmt.b32's generic form: byte n of the result is byte (s >> 4 n) & 7 of
 * the eight bytes y:x (x's bytes 0-3), or, where bit 4 n + 3 of s is set,
 * that byte's msb replicated over the byte. */
MOE_EP_HD uint32_t moe_ep_prmt(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(y), "r"(s));
    return r;
#else
    uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        uint32_t c = (s >> (4 * n)) & 15, byte = (uint32_t)(v >> (8 * (c & 7))) & 0xFF;
        if (c & 8) byte = byte & 0x80 ? 0xFF : 0;
        r |= byte << (8 * n);
    }
    return r;
#endif
}

/* A word of 8 E2M1 as rows store them (element e at bits 4 e .. 4 e + 3) as
 * the four f16x2 of moe_ep_e2m1x2_f16_bits (o[b]: elements 2 b, 2 b + 1).
 * Each element's f16 high byte (m << 1) | (s << 7): the magnitudes e1 e0 m
 * looked up (bytes 0x0E0C0A08'06040200), the signs as sign-replicated bytes
 * (element 2 k's sign is the msb of byte k of w << 4, element 2 k + 1's of
 * byte k of w); then each pair spread into its halves' high bytes, the low
 * bytes 0. 13 instructions a word where a byte at a time took ~33 (SASS of
 * the NVFP4 128-row producer at a914f61). */
MOE_EP_HD void moe_ep_e2m1_word_f16(uint32_t w, uint32_t o[4])
{
    const uint32_t mag = w & 0x77777777u, ws = w << 4;
    const uint32_t lo = moe_ep_prmt(0x06040200u, 0x0E0C0A08u, mag) | (moe_ep_prmt(ws, w, 0xD9C8u) & 0x80808080u);
    const uint32_t hi = moe_ep_prmt(0x06040200u, 0x0E0C0A08u, mag >> 16) | (moe_ep_prmt(ws, w, 0xFBEAu) & 0x80808080u);
    o[0] = moe_ep_prmt(lo, 0u, 0x1404u), o[1] = moe_ep_prmt(lo, 0u, 0x3424u);
    o[2] = moe_ep_prmt(hi, 0u, 0x1404u), o[3] = moe_ep_prmt(hi, 0u, 0x3424u);
}

/* A fragment word of four pair bytes p0..p3 (fp8_rs_tile.cuh: p0 / p1 the
 * k16 step's a[0] / a[2] pairs, p2 / p3 the next step's) stored with its bits
 * spread, so that moe_ep_e2m1_word_pairs makes moe_ep_e2m1x2_f16_bits of a
 * pair with one shift (or none) and a mask: 1, 4, 2 and 4 instructions
 * where a byte at a time took 7. Each pair's two magnitudes (e1 e0 m) and
 * two signs take 8 of the 32 bits. Low-element magnitude / sign bits (the
 * high element's are 16 above):
 *   p0:  9-11 / 15    p1:  0-2 / 13    p2:  6-8 / 12    p3:  3-5 / 14
 * (No choice lets every pair take one shift and one mask: the 32 bits are
 * not a union of four shifts of one pair's pattern.) */
MOE_EP_HD uint32_t moe_ep_e2m1_word_spread(uint32_t w)
{
    const int mag_at[4] = {9, 0, 6, 3}, sign_at[4] = {15, 13, 12, 14};
    uint32_t o = 0;
    for (int p = 0; p < 4; p++)
        for (int h = 0; h < 2; h++) {
            uint32_t nib = (w >> (8 * p + 4 * h)) & 0xFu;
            o |= (nib & 7u) << (mag_at[p] + 16 * h);
            o |= (nib >> 3) << (sign_at[p] + 16 * h);
        }
    return o;
}

/* The pairs of a spread word for step `odd` (0: p0, p1; 1: p2, p3) as
 * moe_ep_e2m1x2_f16_bits gives them: *lo of a[0] (or a[1]), *hi of a[2] (a[3]). */
MOE_EP_HD void moe_ep_e2m1_word_pairs(uint32_t w, int odd, uint32_t *lo, uint32_t *hi)
{
    if (!odd) *lo = w & 0x8E008E00u, *hi = ((w << 9) & 0x0E000E00u) | ((w << 2) & 0x80008000u);
    else *lo = (w << 3) & 0x8E008E00u, *hi = ((w << 6) & 0x0E000E00u) | ((w << 1) & 0x80008000u);
}

#endif /* MOE_EP_CODEC_H */
