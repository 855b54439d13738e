/* Row codecs of the reference: dequantize a stored weight row, and round an
 * activation or output row through a format (quantize, then dequantize). */
#include "formats/codec.h"
#include "reference/reference.h"

#include <string.h>

/* E4M3 code -> fp32 with integer ops only (vectorizes): the 7 magnitude bits
 * placed at fp32 bits 20..26 read as 2^-120 times the E4M3 value, subnormals
 * included; equal to moe_ep_e4m3_to_f32 for all 256 codes (tested). */
static float e4m3_fast(uint32_t c)
{
    float f = moe_ep_u2f((c & 0x7Fu) << 20) * 0x1p120f;
    uint32_t u = moe_ep_f2u(f) | ((c & 0x80u) << 24);
    return moe_ep_u2f((c & 0x7Fu) == 0x7Fu ? (u | 0x7FC00000u) : u);
}

static float load_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void row_bf16(const uint8_t *d, int64_t cols, float *out)
{
    for (int64_t c = 0; c < cols; c++) out[c] = moe_ep_bf16_to_f32(load_u16(d + 2 * c));
}

/* The multiplier of E4M3 block b of a row (MXFP8: UE8M0 byte; FP8-BLOCK: fp32
 * scale of the 128x128 tile), or the 16-entry value table of an FP4 block. */
static float e4m3_block_mul(moe_ep_format_t format, const uint8_t *scales, int64_t nb, int64_t row,
                            int64_t b)
{
    if (format == MOE_EP_FORMAT_MXFP8) return moe_ep_ue8m0_to_f32(scales[row * nb + b]);
    return load_f32(scales + 4 * ((row / 128) * nb + b));
}

static void e2m1_block_table(moe_ep_format_t format, uint8_t scale, float global_scale, float *t)
{
    /* Codes 8..15 are the negatives of 0..7 (IEEE mul and div are sign-symmetric). */
    for (int c = 0; c < 8; c++) {
        t[c] = format == MOE_EP_FORMAT_MXFP4 ? moe_ep_mx4_value((uint8_t)c, scale)
                                             : moe_ep_nvfp4_value((uint8_t)c, scale, global_scale);
        t[c + 8] = -t[c];
    }
}

void moe_ep_ref_weight_row(moe_ep_format_t format, const uint8_t *data, const uint8_t *scales,
                           float global_scale, int64_t cols, int64_t row, float *out)
{
    int block = moe_ep_format_block(format);
    int64_t nb = cols / block;
    if (format == MOE_EP_FORMAT_BF16) {
        row_bf16(data + 2 * row * cols, cols, out);
    } else if (format == MOE_EP_FORMAT_MXFP8 || format == MOE_EP_FORMAT_FP8_BLOCK) {
        const uint8_t *d = data + row * cols;
        for (int64_t b = 0; b < nb; b++) {
            float m = e4m3_block_mul(format, scales, nb, row, b);
            for (int i = 0; i < block; i++) out[b * block + i] = e4m3_fast(d[b * block + i]) * m;
        }
    } else if (format == MOE_EP_FORMAT_MXFP4 || format == MOE_EP_FORMAT_NVFP4) {
        const uint8_t *d = data + row * cols / 2;
        float t[16];
        for (int64_t b = 0; b < nb; b++) {
            e2m1_block_table(format, scales[row * nb + b], global_scale, t);
            for (int i = 0; i < block; i += 2) {
                uint8_t byte = d[(b * block + i) / 2];
                out[b * block + i] = t[byte & 15];
                out[b * block + i + 1] = t[byte >> 4];
            }
        }
    }
}

void moe_ep_ref_round_row(moe_ep_format_t format, float *x, int64_t n, float global_scale)
{
    uint8_t q[MOE_EP_FP8_BLOCK_BLOCK];
    int block = moe_ep_format_block(format);
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        float *v = x + b0;
        switch (format) {
        case MOE_EP_FORMAT_BF16: v[0] = moe_ep_bf16_to_f32(moe_ep_bf16_from_f32(v[0])); break;
        case MOE_EP_FORMAT_MXFP8: {
            uint8_t s = moe_ep_mxfp8_block_encode(v, q);
            for (int i = 0; i < block; i++) v[i] = moe_ep_mx8_value(q[i], s);
            break;
        }
        case MOE_EP_FORMAT_MXFP4: {
            uint8_t s = moe_ep_mxfp4_block_encode(v, q);
            for (int i = 0; i < block; i++) v[i] = moe_ep_mx4_value(q[i], s);
            break;
        }
        case MOE_EP_FORMAT_NVFP4: {
            uint8_t s = moe_ep_nvfp4_block_encode(v, global_scale, q);
            for (int i = 0; i < block; i++) v[i] = moe_ep_nvfp4_value(q[i], s, global_scale);
            break;
        }
        case MOE_EP_FORMAT_FP8_BLOCK: {
            float s = moe_ep_fp8_block_encode(v, q);
            for (int i = 0; i < block; i++) v[i] = moe_ep_fp8_block_value(q[i], s);
            break;
        }
        case MOE_EP_FORMAT_FP4_WIRE: {
            uint16_t s = moe_ep_fp4_wire_block_encode(v, q);
            for (int i = 0; i < block; i++) v[i] = moe_ep_fp4_wire_value(q[i], s);
            break;
        }
        default: return;
        }
    }
}
