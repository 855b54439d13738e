"""ctypes declarations of include/moe_ep.h and the library loader.

The library is found at $MOE_EP_LIBRARY when set, else beside this file (where
`pip install ./python` puts it). It is loaded at first use, so importing the
package needs neither the library nor torch nor numpy.
"""
import ctypes
import os
from ctypes import POINTER, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_void_p

# Enum orders of include/moe_ep.h.
PATHS = ("bf16", "mxfp8", "nvfp4", "w4a8", "fp8_block")
WIRES = ("bf16", "mxfp8", "fp4")
BACKENDS = ("reference", "split", "mega")
FORMATS = ("bf16", "mxfp8", "nvfp4", "mxfp4", "fp8_block", "fp4_wire")
KNOB_SOURCES = ("heuristic", "cache", "autotuned", "explicit")
STATUS_NAMES = ("MOE_EP_SUCCESS", "MOE_EP_ERROR_INVALID_ARGUMENT", "MOE_EP_ERROR_OUT_OF_MEMORY",
                "MOE_EP_ERROR_UNSUPPORTED", "MOE_EP_ERROR_CUDA", "MOE_EP_ERROR_NCCL",
                "MOE_EP_ERROR_TIMEOUT", "MOE_EP_ERROR_INTERNAL")
STATUS_OK = 0


class MoEEpError(RuntimeError):
    """A call into libmoe_ep failed: .status (int), .status_name ("MOE_EP_ERROR_..."),
    .message (moe_ep_last_error()), .call (the C function)."""

    def __init__(self, status, message, call):
        self.status, self.message, self.call = status, message, call
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        super().__init__(f"{call}: {self.status_name}: {message}")


class Knobs(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("gemm_tile_rows", c_int), ("gemm_ctas_per_sm", c_int)]


class LayerConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("num_experts", c_int), ("top_k", c_int), ("hidden", c_int),
                ("intermediate", c_int), ("max_tokens_per_rank", c_int), ("path", c_int),
                ("wire", c_int), ("backend", c_int), ("swiglu_limit", c_float),
                ("fc1_input_scale", c_float), ("fc2_input_scale", c_float), ("num_threads", c_int),
                ("timeout_seconds", c_double), ("knobs", POINTER(Knobs)), ("autotune", c_int),
                ("num_sms", c_int), ("fp8_fast_accum", c_int)]


class ExpertWeights(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("format", c_int), ("first_expert", c_int),
                ("num_experts", c_int), ("on_device", c_int), ("w13", c_void_p),
                ("w13_scales", c_void_p), ("w13_global_scale", c_void_p), ("w2", c_void_p),
                ("w2_scales", c_void_p), ("w2_global_scale", c_void_p)]


class UniqueId(ctypes.Structure):
    """moe_ep_unique_id_t: bytes(uid) is its MOE_EP_UNIQUE_ID_BYTES bytes,
    UniqueId.from_buffer_copy(data) makes one from them."""
    _fields_ = [("internal", ctypes.c_char * 128)]  # MOE_EP_UNIQUE_ID_BYTES


class ForwardArgs(ctypes.Structure):
    # Each pointer below points at an array indexed by local rank.
    _fields_ = [("size", c_size_t), ("num_tokens", POINTER(c_int32)),
                ("num_tokens_device", c_void_p), ("x", POINTER(c_void_p)),
                ("topk_ids", POINTER(c_void_p)), ("topk_weights", POINTER(c_void_p)),
                ("out", POINTER(c_void_p))]


_P, _I64 = c_void_p, c_int64
_SIGNATURES = {  # name: (restype, argtypes); None restype = moe_ep_status_t (int)
    "moe_ep_status_string": (c_char_p, [c_int]),
    "moe_ep_last_error": (c_char_p, []),
    "moe_ep_version": (None, [POINTER(c_int)] * 3),
    "moe_ep_quantize": (c_int, [c_int, _P, _I64, _I64, c_float, _P, _P]),
    "moe_ep_dequantize": (c_int, [c_int, _P, _P, _I64, _I64, c_float, _P]),
    "moe_ep_quantize_fp8_block_weight": (c_int, [_P, _I64, _I64, _P, _P]),
    "moe_ep_dequantize_fp8_block_weight": (c_int, [_P, _P, _I64, _I64, _P]),
    "moe_ep_nvfp4_global_scale": (c_float, [c_float]),
    "moe_ep_group_create_emulated": (c_int, [c_int, c_int, POINTER(_P)]),
    "moe_ep_get_unique_id": (c_int, [POINTER(UniqueId)]),
    "moe_ep_group_create_from_id": (c_int, [POINTER(UniqueId), c_int, c_int, c_int, POINTER(_P)]),
    "moe_ep_group_destroy": (c_int, [_P]),
    "moe_ep_group_local_ranks": (c_int, [_P, POINTER(c_int), POINTER(c_int)]),
    "moe_ep_group_get_async_error": (c_int, [_P, POINTER(c_int)]),
    "moe_ep_group_reset_async_error": (c_int, [_P]),
    "moe_ep_layer_create": (c_int, [_P, POINTER(LayerConfig), POINTER(_P)]),
    "moe_ep_layer_destroy": (c_int, [_P]),
    "moe_ep_layer_load_experts": (c_int, [_P, POINTER(ExpertWeights), _P]),
    "moe_ep_layer_forward": (c_int, [_P, POINTER(ForwardArgs), _P]),
    "moe_ep_layer_calibrate_nvfp4": (c_int, [_P, POINTER(ForwardArgs), POINTER(c_float),
                                             POINTER(c_float)]),
    "moe_ep_layer_get_knobs": (c_int, [_P, c_int, POINTER(Knobs), POINTER(c_int)]),
    "moe_ep_layer_get_config": (c_int, [_P, POINTER(LayerConfig)]),
}
_lib = None


def library_path():
    """Where the library is loaded from: $MOE_EP_LIBRARY, else the package's copy."""
    env = os.environ.get("MOE_EP_LIBRARY")
    return env if env else os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmoe_ep.so")


def lib():
    """The loaded library, with every function's signature declared."""
    global _lib
    if _lib is None:
        path = library_path()
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"moe_ep: cannot load {path} ({e}); build it with `pip install ./python` "
                          "or set MOE_EP_LIBRARY=/path/to/libmoe_ep.so") from e
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype, fn.argtypes = restype, argtypes
        _lib = handle
    return _lib


def check(status, call):
    """Raises MoEEpError for a failed status, with the library's last error."""
    if status != STATUS_OK:
        raise MoEEpError(status, lib().moe_ep_last_error().decode(), call)


def call(name, *args):
    """Calls a status-returning function; raises MoEEpError on failure."""
    check(getattr(lib(), name)(*args), name)


def version():
    """(major, minor, patch) of the loaded library."""
    v = [c_int(), c_int(), c_int()]
    lib().moe_ep_version(*v)
    return tuple(x.value for x in v)
