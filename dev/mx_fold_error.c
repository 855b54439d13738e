/* Kernel lab, offline (CPU): how exact an MXFP8 dot product stays when the
 * register tile folds the UE8M0 scales into its fp16 operands, per reference
 * span. Today's tile (fp8_rs_tile.cuh, rs_mults.cuh): each k32 block's 2^b as
 * 2^-(ref - b) with ref the largest byte of its 128-wide K block, one partial
 * sum per 128 K, promoted with 2^(ref_x + ref_w). The lead of docs/design.md
 * (forty-sixth session): ref the largest byte of the whole row, one sum over
 * K, no promotion. Both against the exact products of the dequantized values,
 * on test_tiles' spread case (x's 32-blocks over 2^40, W13's over 2^20,
 * spread_blocks) and without it. The operands are rounded as the GPU does
 * (cvt.rn.f16x2.e4m3x2 exact, then mul.rn.f16x2 by the f16 multiplier: round
 * to nearest even, subnormals to 2^-24); sums in double (the tile's are fp32:
 * this measures the folding alone).
 *   cc -O2 -Isrc dev/mx_fold_error.c -lm -o /tmp/mx_fold_error && /tmp/mx_fold_error */
#include "formats/codec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { T = 64, N = 256, H = 512, KB32 = H / 32 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static float normal(float std)
{
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)) * std;
}

/* test_tiles' spread_blocks: element i of 32-block b of row r times 2^((7 b + 3 r) % (2 span + 1) - span). */
static void fill(float *m, int rows, float std, int span)
{
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < H; i++) {
            float v = moe_ep_bf16_to_f32(moe_ep_bf16_from_f32(normal(std)));
            if (span) v = moe_ep_bf16_to_f32(moe_ep_bf16_from_f32(ldexpf(v, ((i / 32) * 7 + r * 3) % (2 * span + 1) - span)));
            m[(size_t)r * H + i] = v;
        }
}

/* fp16 round to nearest even, subnormals down to 2^-24 (no overflow here). */
static double round_f16(double v)
{
    if (v == 0.0) return 0.0;
    int e;
    frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
    double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    return rint(v / q) * q;
}

/* The fp16 operand of an E4M3 byte times 2^-d, as the tile makes it. */
static double operand(uint8_t q, int d)
{
    double m = d > 24 ? 0.0 : round_f16(ldexp(1.0, -d)); /* fr_pow2_f16x2: 2^-25 and below round to 0 */
    return round_f16((double)moe_ep_e4m3_to_f32(q) * m);
}

static void quantize(const float *m, int rows, uint8_t *q, uint8_t *b)
{
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < KB32; k++) b[r * KB32 + k] = moe_ep_mxfp8_block_encode(m + (size_t)r * H + 32 * k, q + (size_t)r * H + 32 * k);
}

static int max_byte(const uint8_t *b, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++) m = b[i] > m ? b[i] : m;
    return m;
}

/* rel L2 of the two folded forms against the exact products. */
static void run(int span_x, int span_w)
{
    static float x[T * H], w[N * H];
    static uint8_t xq[T * H], wq[N * H], xb[T * KB32], wb[N * KB32];
    fill(x, T, 1.0f, span_x), fill(w, N, 0.05f, span_w);
    quantize(x, T, xq, xb), quantize(w, N, wq, wb);
    double e_blk = 0, e_row = 0, norm = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const uint8_t *a = xq + (size_t)t * H, *c = wq + (size_t)n * H, *ab = xb + t * KB32, *cb = wb + n * KB32;
            double exact = 0, blk = 0, row = 0;
            const int rx = max_byte(ab, KB32), rw = max_byte(cb, KB32);
            for (int k128 = 0; k128 < H / 128; k128++) {
                const int bx = max_byte(ab + 4 * k128, 4), bw = max_byte(cb + 4 * k128, 4);
                double part = 0;
                for (int i = 128 * k128; i < 128 * k128 + 128; i++) {
                    const int j = i / 32;
                    exact += (double)moe_ep_mx8_value(a[i], ab[j]) * (double)moe_ep_mx8_value(c[i], cb[j]);
                    part += operand(a[i], bx - ab[j]) * operand(c[i], bw - cb[j]);
                    row += operand(a[i], rx - ab[j]) * operand(c[i], rw - cb[j]);
                }
                blk += part * ldexp(1.0, bx + bw - 254);
            }
            row *= ldexp(1.0, rx + rw - 254);
            e_blk += (blk - exact) * (blk - exact), e_row += (row - exact) * (row - exact), norm += exact * exact;
        }
    printf("x spread 2^%d, W spread 2^%d: rel L2 of the dot products: per-128 reference (today) %.3e, per-row reference (the lead) %.3e\n",
           2 * span_x, 2 * span_w, sqrt(e_blk / norm), sqrt(e_row / norm));
}

int main(void)
{
    run(0, 0);
    run(20, 10); /* test_tiles' spread case */
    run(5, 3);   /* milder: 2^10 and 2^6 within a row */
    run(8, 4);
    return 0;
}
