"""The host codec of docs/formats.md (bit-exact with the GPU kernels).

Arrays are host arrays (numpy, or memoryviews as moe_ep._tensor takes them);
results come back as numpy arrays when x is one, else as shaped memoryviews.
"""
from ctypes import c_float

from . import _lib
from ._tensor import empty_like, expect, view

BLOCK = {"bf16": 1, "mxfp8": 32, "nvfp4": 16, "mxfp4": 32, "fp8_block": 128, "fp4_wire": 16}
FP4 = ("nvfp4", "mxfp4", "fp4_wire")


def data_shape(fmt, rows, cols):
    """Shape and kind of the element data of a [rows, cols] matrix in fmt."""
    if fmt == "bf16":
        return (rows, cols), "bf16"
    return (rows, cols // 2 if fmt in FP4 else cols), "u8"


def scale_shape(fmt, rows, cols, tiles=False):
    """Shape and kind of the scales: per block along a row, or per 128x128 tile (FP8-BLOCK weights)."""
    if fmt == "fp8_block":
        return ((rows // 128, cols // 128) if tiles else (rows, cols // 128)), "f32"
    return (rows, cols // BLOCK[fmt]), "bf16" if fmt == "fp4_wire" else "u8"


def _matrix(fmt, x, tiles=False):
    if fmt not in BLOCK:
        raise ValueError(f"format {fmt!r} not one of {', '.join(BLOCK)}")
    v = view(x, "x")
    if len(v.shape) != 2:
        raise ValueError(f"x: shape {list(v.shape)}, expected [rows, cols]")
    rows, cols = v.shape
    if cols % BLOCK[fmt] or (tiles and rows % 128):
        raise ValueError(f"x: [{rows}, {cols}] not a whole number of {fmt} blocks")
    return expect(v, "x", v.shape, "f32", -1), rows, cols


def quantize(fmt, x, global_scale=1.0):
    """x [rows, cols] float32 -> (data, scales); scales None for bf16. global_scale: NVFP4's S."""
    v, rows, cols = _matrix(fmt, x)
    data = empty_like(v, *data_shape(fmt, rows, cols))
    scales = None if fmt == "bf16" else empty_like(v, *scale_shape(fmt, rows, cols))
    _lib.call("moe_ep_quantize", _lib.FORMATS.index(fmt), v.ptr, rows, cols, global_scale,
              view(data, "data").ptr, scales is not None and view(scales, "scales").ptr or None)
    return data, scales


def dequantize(fmt, data, scales, rows, cols, global_scale=1.0):
    """(data, scales) of a [rows, cols] matrix -> float32 [rows, cols]."""
    d = expect(view(data, "data"), "data", *data_shape(fmt, rows, cols), -1)
    s = None if fmt == "bf16" else expect(view(scales, "scales"), "scales",
                                          *scale_shape(fmt, rows, cols), -1)
    out = empty_like(d, (rows, cols), "f32")
    _lib.call("moe_ep_dequantize", _lib.FORMATS.index(fmt), d.ptr, s and s.ptr, rows, cols,
              global_scale, view(out, "out").ptr)
    return out


def quantize_fp8_block_weight(x):
    """x [rows, cols] float32, both multiples of 128 -> (data [rows, cols] uint8, scales [rows/128, cols/128] float32)."""
    v, rows, cols = _matrix("fp8_block", x, tiles=True)
    data = empty_like(v, (rows, cols), "u8")
    scales = empty_like(v, *scale_shape("fp8_block", rows, cols, tiles=True))
    _lib.call("moe_ep_quantize_fp8_block_weight", v.ptr, rows, cols, view(data, "data").ptr,
              view(scales, "scales").ptr)
    return data, scales


def dequantize_fp8_block_weight(data, scales):
    """Inverse of quantize_fp8_block_weight -> float32 [rows, cols]."""
    d = view(data, "data")
    rows, cols = d.shape if len(d.shape) == 2 else (0, 0)
    expect(d, "data", (rows, cols), "u8", -1)
    s = expect(view(scales, "scales"), "scales", *scale_shape("fp8_block", rows, cols, True), -1)
    out = empty_like(d, (rows, cols), "f32")
    _lib.call("moe_ep_dequantize_fp8_block_weight", d.ptr, s.ptr, rows, cols, view(out, "out").ptr)
    return out


def nvfp4_global_scale(amax):
    """NVFP4 encode scale S for a tensor with absolute maximum amax (2688 / amax)."""
    return _lib.lib().moe_ep_nvfp4_global_scale(c_float(amax))
