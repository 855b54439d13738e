"""moe_ep: one Mixture-of-Experts layer with expert parallelism (Python over libmoe_ep).

Imports without torch, numpy or the library itself; the library is loaded at
first use from $MOE_EP_LIBRARY or from this package (see _lib.library_path).
MoEEpLayer(..., process_group=pg) alone needs torch (torch.distributed): it makes
an NCCL group of pg's ranks (see layer.py).
"""
from ._lib import MoEEpError, library_path, version
from .codec import (dequantize, dequantize_fp8_block_weight, nvfp4_global_scale, quantize,
                    quantize_fp8_block_weight)
from .layer import MegaConfig, MoEEpLayer, NcclEpConfig, ReferenceConfig, SplitConfig

__all__ = ["MoEEpLayer", "MegaConfig", "SplitConfig", "ReferenceConfig", "NcclEpConfig",
           "MoEEpError", "quantize", "dequantize", "quantize_fp8_block_weight",
           "dequantize_fp8_block_weight", "nvfp4_global_scale", "library_path", "version"]
