/* The public host codec: moe_ep_quantize / moe_ep_dequantize over whole
 * matrices, FP8-BLOCK weight tiles, and the NVFP4 global scale. All arithmetic
 * comes from formats/codec.h, so the host and the device agree bit for bit.
 * Rules and layouts: docs/formats.md. */
#include "core/internal.h"
#include "formats/codec.h"

#include <stdint.h>

/* ---- little-endian scale entries ------------------------------------------ */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xFFu);
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void put_f32(uint8_t *p, float f)
{
    uint32_t u = moe_ep_f2u(f);
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = 0;
    for (int i = 0; i < 4; i++) u |= (uint32_t)p[i] << (8 * i);
    return moe_ep_u2f(u);
}

/* FP4 codes: element 2j in the low nibble of byte j, 2j+1 in the high nibble. */
static void pack_fp4(const uint8_t *q, int n, uint8_t *out)
{
    for (int j = 0; j < n / 2; j++) out[j] = (uint8_t)((q[2 * j] & 0xFu) | ((q[2 * j + 1] & 0xFu) << 4));
}

static uint8_t fp4_code(const uint8_t *packed, int64_t i)
{
    uint8_t b = packed[i >> 1];
    return (uint8_t)((i & 1) ? (b >> 4) : (b & 0xFu));
}

/* ---- argument checks ------------------------------------------------------- */

static int valid_global_scale(float s) { return s > 0.0f && moe_ep_isfinite(s); }

/* Checks shared by quantize and dequantize; in and out are the element-side
 * pointers, scales the scale array (unused for BF16). */
static moe_ep_status_t check_args(moe_ep_format_t format, const void *in, const void *out,
                                  const void *scales, int64_t rows, int64_t cols,
                                  float global_scale)
{
    MOE_EP_REQUIRE((unsigned)format < MOE_EP_FORMAT_COUNT_, "unknown format %d", (int)format);
    int block = moe_ep_format_block(format);
    MOE_EP_REQUIRE(rows >= 0 && cols >= 0, "rows=%lld cols=%lld must be >= 0", (long long)rows,
                   (long long)cols);
    MOE_EP_REQUIRE(cols % block == 0, "cols=%lld is not a multiple of the %s block %d",
                   (long long)cols, moe_ep_format_name(format), block);
    MOE_EP_REQUIRE(cols == 0 || rows <= INT64_MAX / 4 / cols, "rows*cols too large");
    MOE_EP_REQUIRE(format != MOE_EP_FORMAT_NVFP4 || valid_global_scale(global_scale),
                   "NVFP4 global_scale %g must be > 0 and finite", (double)global_scale);
    if (rows == 0 || cols == 0) return MOE_EP_SUCCESS;
    MOE_EP_REQUIRE(in != NULL && out != NULL, "NULL data or values pointer");
    MOE_EP_REQUIRE(format == MOE_EP_FORMAT_BF16 || scales != NULL, "NULL scales for %s",
                   moe_ep_format_name(format));
    return MOE_EP_SUCCESS;
}

/* ---- one row ---------------------------------------------------------------- */

static void quantize_row(moe_ep_format_t format, const float *x, int64_t cols, float S,
                         uint8_t *data, uint8_t *scales)
{
    uint8_t q[MOE_EP_MX_BLOCK];
    int block = moe_ep_format_block(format);
    for (int64_t c = 0, k = 0; c < cols; c += block, k++) {
        const float *xb = x + c;
        switch (format) {
        case MOE_EP_FORMAT_BF16:
            put_u16(data + 2 * c, moe_ep_bf16_from_f32(xb[0]));
            break;
        case MOE_EP_FORMAT_MXFP8:
            scales[k] = moe_ep_mxfp8_block_encode(xb, data + c);
            break;
        case MOE_EP_FORMAT_MXFP4:
            scales[k] = moe_ep_mxfp4_block_encode(xb, q);
            pack_fp4(q, block, data + c / 2);
            break;
        case MOE_EP_FORMAT_NVFP4:
            scales[k] = moe_ep_nvfp4_block_encode(xb, S, q);
            pack_fp4(q, block, data + c / 2);
            break;
        case MOE_EP_FORMAT_FP8_BLOCK:
            put_f32(scales + 4 * k, moe_ep_fp8_block_encode(xb, data + c));
            break;
        case MOE_EP_FORMAT_FP4_WIRE:
            put_u16(scales + 2 * k, moe_ep_fp4_wire_block_encode(xb, q));
            pack_fp4(q, block, data + c / 2);
            break;
        default:
            return;
        }
    }
}

static float dequantize_one(moe_ep_format_t format, const uint8_t *data, const uint8_t *scales,
                            int64_t c, float S)
{
    int64_t k = c / moe_ep_format_block(format);
    switch (format) {
    case MOE_EP_FORMAT_BF16: return moe_ep_bf16_to_f32(get_u16(data + 2 * c));
    case MOE_EP_FORMAT_MXFP8: return moe_ep_mx8_value(data[c], scales[k]);
    case MOE_EP_FORMAT_MXFP4: return moe_ep_mx4_value(fp4_code(data, c), scales[k]);
    case MOE_EP_FORMAT_NVFP4: return moe_ep_nvfp4_value(fp4_code(data, c), scales[k], S);
    case MOE_EP_FORMAT_FP8_BLOCK: return moe_ep_fp8_block_value(data[c], get_f32(scales + 4 * k));
    case MOE_EP_FORMAT_FP4_WIRE: return moe_ep_fp4_wire_value(fp4_code(data, c), get_u16(scales + 2 * k));
    default: return 0.0f;
    }
}

/* ---- public matrix codec ---------------------------------------------------- */

moe_ep_status_t moe_ep_quantize(moe_ep_format_t format, const float *x, int64_t rows,
                                int64_t cols, float global_scale, uint8_t *data, uint8_t *scales)
{
    moe_ep_clear_error();
    MOE_EP_CHECK(check_args(format, x, data, scales, rows, cols, global_scale));
    int64_t row_data = moe_ep_format_data_bytes(format, 1, cols);
    int64_t row_scales = moe_ep_format_scales_bytes(format, 1, cols);
    for (int64_t r = 0; r < rows; r++)
        quantize_row(format, x + r * cols, cols, global_scale, data + r * row_data,
                     scales ? scales + r * row_scales : NULL);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_dequantize(moe_ep_format_t format, const uint8_t *data,
                                  const uint8_t *scales, int64_t rows, int64_t cols,
                                  float global_scale, float *out)
{
    moe_ep_clear_error();
    MOE_EP_CHECK(check_args(format, data, out, scales, rows, cols, global_scale));
    int64_t row_data = moe_ep_format_data_bytes(format, 1, cols);
    int64_t row_scales = moe_ep_format_scales_bytes(format, 1, cols);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *d = data + r * row_data;
        const uint8_t *s = scales ? scales + r * row_scales : NULL;
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = dequantize_one(format, d, s, c, global_scale);
    }
    return MOE_EP_SUCCESS;
}

/* ---- FP8-BLOCK weights: one scale per 128x128 tile ------------------------- */

#define TILE MOE_EP_FP8_BLOCK_BLOCK

static moe_ep_status_t check_weight_args(const void *in, const void *out, const void *scales,
                                         int64_t rows, int64_t cols)
{
    MOE_EP_REQUIRE(rows >= 0 && cols >= 0, "rows=%lld cols=%lld must be >= 0", (long long)rows,
                   (long long)cols);
    MOE_EP_REQUIRE(rows % TILE == 0 && cols % TILE == 0,
                   "rows=%lld and cols=%lld must be multiples of %d", (long long)rows,
                   (long long)cols, TILE);
    MOE_EP_REQUIRE(cols == 0 || rows <= INT64_MAX / 4 / cols, "rows*cols too large");
    if (rows == 0 || cols == 0) return MOE_EP_SUCCESS;
    MOE_EP_REQUIRE(in != NULL && out != NULL && scales != NULL, "NULL pointer argument");
    return MOE_EP_SUCCESS;
}

/* Absolute maximum of the tile at (r0, c0); flags NaN and Inf anywhere in it. */
static float tile_amax(const float *x, int64_t cols, int64_t r0, int64_t c0, int *bad)
{
    float amax = 0.0f;
    *bad = 0;
    for (int64_t r = r0; r < r0 + TILE; r++) {
        int nan, inf;
        float a = moe_ep_block_amax(x + r * cols + c0, TILE, &nan, &inf);
        if (nan || inf) *bad = 1;
        if (a > amax) amax = a;
    }
    return amax;
}

/* Same rule as moe_ep_fp8_block_encode, over a tile instead of a row block. */
static float tile_encode(const float *x, int64_t cols, int64_t r0, int64_t c0, uint8_t *data)
{
    int bad;
    float amax = tile_amax(x, cols, r0, c0, &bad);
    float s = bad ? moe_ep_u2f(0x7FC00000u) : moe_ep_fp8_block_scale(amax);
    float inv = moe_ep_div(1.0f, s);
    for (int64_t r = r0; r < r0 + TILE; r++)
        for (int64_t c = c0; c < c0 + TILE; c++)
            data[r * cols + c] =
                bad ? (uint8_t)MOE_EP_E4M3_NAN : moe_ep_e4m3_from_f32(moe_ep_mul(x[r * cols + c], inv));
    return s;
}

moe_ep_status_t moe_ep_quantize_fp8_block_weight(const float *x, int64_t rows, int64_t cols,
                                                 uint8_t *data, float *scales)
{
    moe_ep_clear_error();
    MOE_EP_CHECK(check_weight_args(x, data, scales, rows, cols));
    int64_t tiles_c = cols / TILE;
    for (int64_t r0 = 0; r0 < rows; r0 += TILE)
        for (int64_t c0 = 0; c0 < cols; c0 += TILE)
            scales[(r0 / TILE) * tiles_c + c0 / TILE] = tile_encode(x, cols, r0, c0, data);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_dequantize_fp8_block_weight(const uint8_t *data, const float *scales,
                                                   int64_t rows, int64_t cols, float *out)
{
    moe_ep_clear_error();
    MOE_EP_CHECK(check_weight_args(data, out, scales, rows, cols));
    int64_t tiles_c = cols / TILE;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] =
                moe_ep_fp8_block_value(data[r * cols + c], scales[(r / TILE) * tiles_c + c / TILE]);
    return MOE_EP_SUCCESS;
}

/* ---- NVFP4 global scale ------------------------------------------------------ */

float moe_ep_nvfp4_global_scale(float amax)
{
    moe_ep_clear_error();
    return moe_ep_nvfp4_scale_from_amax(amax);
}
