"""One view over the array types the layer takes: torch tensors (CPU or CUDA),
objects with __array_interface__ (numpy), and buffer-protocol objects
(memoryview, array.array; shaped through memoryview.cast).

Kinds: "bf16" (2-byte bf16 bit patterns: torch.bfloat16, or uint16 elsewhere),
"i32", "f32", "u8" (any 1-byte type). Nothing here imports torch or numpy
unless the caller already passed one of their objects.
"""
import array
import ctypes
import sys
from math import prod

# Kinds the layer never takes (i64, f16, f64, ...) are kept by name for clear errors.
_TORCH_KINDS = {"bfloat16": "bf16", "int32": "i32", "float32": "f32", "uint8": "u8", "int8": "u8",
                "float8_e4m3fn": "u8", "float8_e8m0fnu": "u8", "int64": "i64", "float16": "f16",
                "float64": "f64", "int16": "i16"}
_TYPESTR_KINDS = {"u2": "bf16", "i4": "i32", "f4": "f32", "u1": "u8", "i1": "u8", "i8": "i64",
                  "f2": "f16", "f8": "f64", "i2": "i16"}
_BUFFER_KINDS = {("H", 2): "bf16", ("i", 4): "i32", ("l", 4): "i32", ("f", 4): "f32",
                 ("B", 1): "u8", ("b", 1): "u8", ("c", 1): "u8", ("q", 8): "i64", ("l", 8): "i64",
                 ("d", 8): "f64", ("e", 2): "f16", ("h", 2): "i16"}
_BUFFER_FORMAT = {"bf16": "H", "i32": "i", "f32": "f", "u8": "B"}
ITEMSIZE = {"bf16": 2, "i32": 4, "f32": 4, "u8": 1}


class View:
    """ptr (int or None when empty), shape (tuple), kind, device (-1 = host,
    else the CUDA index), flavor ("torch", "numpy", "buffer"), readonly; obj
    keeps the memory alive while the view is in use."""
    __slots__ = ("ptr", "shape", "kind", "device", "flavor", "obj", "readonly")

    def __init__(self, ptr, shape, kind, device, flavor, obj, readonly=False):
        self.ptr, self.shape, self.kind, self.device = ptr or None, tuple(shape), kind, device
        self.flavor, self.obj, self.readonly = flavor, obj, readonly


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def _c_strides(shape, itemsize):
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _contiguous(shape, strides, itemsize):
    return strides is None or all(n <= 1 or s == c for n, s, c in
                                  zip(shape, strides, _c_strides(shape, itemsize)))


def view(x, name):
    """A View of x, or TypeError/ValueError for an unknown type, dtype or layout."""
    if _is_torch(x):
        kind = _TORCH_KINDS.get(str(x.dtype).replace("torch.", ""))
        if kind is None:
            raise TypeError(f"{name}: unsupported dtype {x.dtype}")
        if not x.is_contiguous():
            raise ValueError(f"{name}: tensor is not contiguous (call .contiguous())")
        dev = x.device.index if x.device.type == "cuda" else -1
        if x.device.type not in ("cuda", "cpu"):
            raise ValueError(f"{name}: tensor on {x.device}, not CPU or CUDA")
        return View(x.data_ptr(), x.shape, kind, dev, "torch", x)
    ai = getattr(x, "__array_interface__", None)
    if ai is not None:
        kind = _TYPESTR_KINDS.get(ai["typestr"][1:]) if ai["typestr"][0] in "<|=" else None
        if kind is None:
            raise TypeError(f"{name}: unsupported element type {ai['typestr']}")
        if not _contiguous(ai["shape"], ai.get("strides"), int(ai["typestr"][2:])):
            raise ValueError(f"{name}: array is not C-contiguous")
        return View(ai["data"][0], ai["shape"], kind, -1, "numpy", x, ai["data"][1])
    try:
        mv = memoryview(x)
    except TypeError:
        raise TypeError(f"{name}: expected a torch tensor, a numpy array or a buffer, "
                        f"got {type(x).__name__}") from None
    kind = _BUFFER_KINDS.get((mv.format.lstrip("@=<"), mv.itemsize))
    if kind is None or (mv.format[0] == "<" and sys.byteorder != "little"):
        raise TypeError(f"{name}: unsupported buffer format {mv.format!r}")
    if not mv.c_contiguous:
        raise ValueError(f"{name}: buffer is not C-contiguous")
    if not mv.nbytes:
        return View(None, mv.shape, kind, -1, "buffer", mv)
    readonly = mv.readonly
    if readonly:  # ctypes takes the address of writable buffers only: copy (outputs refuse it)
        mv = memoryview(bytearray(mv.tobytes())).cast(mv.format.lstrip("@=<"), mv.shape)
    ptr = ctypes.addressof((ctypes.c_char * mv.nbytes).from_buffer(mv))
    return View(ptr, mv.shape, kind, -1, "buffer", mv, readonly)


def expect(v, name, shape, kind, device):
    """Checks a View's shape, kind and device (-1 host, else a CUDA index)."""
    if v.kind != kind:
        want = {"bf16": "bf16 (torch.bfloat16, or uint16 bit patterns)", "i32": "int32",
                "f32": "float32", "u8": "a 1-byte type (uint8)"}[kind]
        raise TypeError(f"{name}: element type must be {want}, got {v.kind}")
    if v.shape != tuple(shape) and (prod(v.shape) or prod(shape)):  # any empty shape fits
        raise ValueError(f"{name}: shape {list(v.shape)}, expected {list(shape)}")
    if v.device != device:
        where = lambda d: "host memory" if d < 0 else f"cuda:{d}"
        raise ValueError(f"{name}: in {where(v.device)}, expected {where(device)}")
    return v


def empty_like(v, shape, kind):
    """A new uninitialised array of the same flavor and device as View v."""
    if v.flavor == "torch":
        import torch
        dt = {"bf16": torch.bfloat16, "i32": torch.int32, "f32": torch.float32, "u8": torch.uint8}
        return torch.empty(tuple(shape), dtype=dt[kind], device=v.obj.device)
    if v.flavor == "numpy" and "numpy" in sys.modules:
        np = sys.modules["numpy"]
        return np.empty(tuple(shape), dtype={"bf16": np.uint16, "i32": np.int32,
                                             "f32": np.float32, "u8": np.uint8}[kind])
    return host_buffer(shape, kind)


def host_buffer(shape, kind, fill=None):
    """A host memoryview of the given shape (format H, i, f or B): zeros, or the flat list fill."""
    fmt = _BUFFER_FORMAT[kind]
    raw = array.array(fmt, fill).tobytes() if fill is not None else prod(shape) * ITEMSIZE[kind]
    mv = memoryview(bytearray(raw))
    return mv.cast(fmt, tuple(shape)) if len(mv) else mv.cast(fmt)  # memoryview has no [0, n]
