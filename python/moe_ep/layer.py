"""MoEEpLayer: one MoE layer with expert parallelism over libmoe_ep (ctypes).

Groups: an emulated group (world_size=R, emulated=True: R ranks in this process,
forward takes lists), or an NCCL group of one rank per process and GPU
(process_group=pg, a torch.distributed group: rank 0 of pg makes the NCCL unique
id, every rank receives it through pg and creates its rank of the group).
"""
import sys
from math import prod
from ctypes import byref, c_float, c_int, c_int32, c_void_p, pointer, sizeof
from dataclasses import dataclass
from typing import ClassVar, Optional

from . import _lib
from ._lib import ExpertWeights, ForwardArgs, Knobs, LayerConfig, MoEEpError, UniqueId
from ._tensor import empty_like, expect, host_buffer, view
from .codec import data_shape, scale_shape

WEIGHT_FORMAT = {"bf16": "bf16", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "w4a8": "mxfp4",
                 "fp8_block": "fp8_block"}  # path -> its pre-quantized weight format
WEIGHT_KEYS = ("w13", "w13_scales", "w13_global_scale", "w2", "w2_scales", "w2_global_scale")


@dataclass(frozen=True)
class ReferenceConfig:
    """CPU oracle: host arrays everywhere. num_threads 0 = all cores."""
    path: str = "bf16"
    combine: str = "bf16"
    num_threads: int = 0
    backend: ClassVar[str] = "reference"


@dataclass(frozen=True)
class NcclEpConfig:
    """Communication through NCCL, as SplitConfig(comm=NcclEpConfig()) or MegaConfig(comm=...):
    the layer's group is an NCCL group (one rank per process and GPU), never an emulated one.
    With process_group= that is what happens anyway; without, it is an NCCL group of one
    rank (world_size 1) in this process. Builds without NCCL raise MoEEpError
    (MOE_EP_ERROR_UNSUPPORTED)."""


@dataclass(frozen=True)
class SplitConfig:
    """GPU: communication, then separate kernels. knobs: None or a dict with
    gemm_tile_rows / gemm_ctas_per_sm (docs/knobs.md); autotune: time candidates at first use;
    comm: None (NCCL with process_group=, else emulated) or NcclEpConfig() (NCCL always);
    num_sms: SMs the layer's persistent grids fill (0: all); fp8_fast_accum: fp8_block path,
    sum FP8 products in the FP8 tensor cores (faster, about 5e-3 from fp32 sums)."""
    path: str = "bf16"
    combine: str = "bf16"
    knobs: Optional[dict] = None
    autotune: bool = False
    comm: Optional[NcclEpConfig] = None
    num_sms: int = 0
    fp8_fast_accum: bool = False
    backend: ClassVar[str] = "split"


@dataclass(frozen=True)
class MegaConfig(SplitConfig):
    """GPU: one persistent kernel per forward (same options as SplitConfig)."""
    backend: ClassVar[str] = "mega"


def _name_index(names, value, what):
    if value not in names:
        raise ValueError(f"{what} {value!r} not one of {', '.join(names)}")
    return names.index(value)


def _torch_distributed(process_group):
    """torch.distributed, once process_group is known to be one of its groups."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise ImportError("moe_ep: process_group= takes a torch.distributed process group, "
                          "and torch is not installed") from e
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("moe_ep: process_group=: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError("moe_ep: process_group must be a torch.distributed.ProcessGroup, got "
                        f"{type(process_group).__name__}")
    return dist


def _nccl_group(device, process_group=None, world=1, rank=0):
    """A new NCCL group's handle, this process being rank `rank` of `world` on CUDA device
    `device`: process_group's ranks (collective over it), or this process alone when None."""
    uid, group = UniqueId(), c_void_p()
    if process_group is None:
        _lib.call("moe_ep_get_unique_id", byref(uid))
    else:
        dist = _torch_distributed(process_group)
        payload = None
        if rank == 0:  # its error travels too, so that no rank waits for an id that never comes
            try:
                _lib.call("moe_ep_get_unique_id", byref(uid))
                payload = bytes(uid)
            except MoEEpError as e:
                payload = (e.status, e.message)
        gathered = [None] * world
        dist.all_gather_object(gathered, payload, group=process_group)
        payload = gathered[0]
        if isinstance(payload, tuple):
            raise MoEEpError(payload[0], payload[1] + " (on rank 0 of process_group)",
                             "moe_ep_get_unique_id")
        if not isinstance(payload, bytes) or len(payload) != sizeof(UniqueId):
            raise RuntimeError(f"moe_ep: rank 0 of process_group sent {type(payload).__name__}, "
                               f"not the {sizeof(UniqueId)} bytes of an NCCL unique id")
        uid = UniqueId.from_buffer_copy(payload)
    _lib.call("moe_ep_group_create_from_id", byref(uid), world, rank, device, byref(group))
    return group


def _torch_stream(device):
    """torch's current CUDA stream handle on device, or None (the default stream) without torch."""
    torch = sys.modules.get("torch")
    return c_void_p(torch.cuda.current_stream(device).cuda_stream) if torch else None


class MoEEpLayer:
    """One MoE layer (SwiGLU experts) on an EP group; see README.md, "Python".

    Geometry: num_experts E (global), top_k K, hidden H, intermediate I.
    weights: (w13 [E_local, 2I, H], w2 [E_local, H, I]) bf16 checkpoint tensors of the
    local experts, a dict of pre-quantized arrays (keys as moe_ep_expert_weights_t: w13,
    w13_scales, w13_global_scale, w2, ...), or a list of those, one per local rank.
    world_size=R with emulated=True runs R ranks in this process; forward then takes and
    returns lists of R per-rank tensors. process_group=pg (a torch.distributed group; split
    or mega) makes an NCCL group of pg's ranks, this process being rank pg.rank() on
    device (default torch.cuda.current_device()); forward then takes this rank's tensors.
    On an NCCL group creation, forward and close() are collective: every rank of pg makes
    them, in the same order (close explicitly or with `with`, not by garbage collection).
    """

    def __init__(self, num_experts, top_k, hidden, intermediate, max_tokens_per_rank, *,
                 world_size=1, emulated=False, process_group=None, weights=None, backend=None,
                 device=None, swiglu_limit=0.0, fc1_input_scale=0.0, fc2_input_scale=0.0,
                 timeout_seconds=0.0):
        self._layer = self._group = None
        self.backend = backend if backend is not None else ReferenceConfig()
        if isinstance(self.backend, NcclEpConfig):
            raise TypeError("NcclEpConfig chooses the communication, not the backend: pass "
                            "SplitConfig(comm=NcclEpConfig()) or MegaConfig(comm=NcclEpConfig())")
        if not isinstance(self.backend, (ReferenceConfig, SplitConfig)):
            raise TypeError("backend must be a ReferenceConfig, SplitConfig or MegaConfig")
        comm = getattr(self.backend, "comm", None)
        if comm is not None and not isinstance(comm, NcclEpConfig):
            raise TypeError(f"comm must be None or NcclEpConfig(), got {type(comm).__name__}")
        nccl = process_group is not None or comm is not None
        if nccl and emulated:
            raise ValueError("emulated=True excludes an NCCL group (process_group= or "
                             "comm=NcclEpConfig())")
        if nccl and isinstance(self.backend, ReferenceConfig):
            raise ValueError("process_group=: the reference backend runs on emulated groups only; "
                             "NCCL groups take SplitConfig or MegaConfig")
        pg_rank = 0
        if process_group is not None:
            dist = _torch_distributed(process_group)
            pg_size, pg_rank = dist.get_world_size(group=process_group), dist.get_rank(group=process_group)
            if pg_rank < 0:
                raise ValueError("process_group: this process is not one of its ranks")
            if world_size not in (1, pg_size):
                raise ValueError(f"world_size {world_size} differs from process_group's size {pg_size}")
            world_size = pg_size
        elif world_size != 1 and (nccl or not emulated):
            raise ValueError(f"world_size={world_size} needs emulated=True (all ranks in this "
                             "process) or process_group= (one rank per process)")
        self.num_experts, self.top_k, self.hidden = num_experts, top_k, hidden
        self.intermediate, self.max_tokens_per_rank, self.world_size = intermediate, max_tokens_per_rank, world_size
        self.path = self.backend.path
        cfg = LayerConfig(sizeof(LayerConfig), num_experts, top_k, hidden, intermediate,
                          max_tokens_per_rank, _name_index(_lib.PATHS, self.backend.path, "path"),
                          _name_index(_lib.WIRES, self.backend.combine, "combine"),
                          _lib.BACKENDS.index(self.backend.backend), swiglu_limit, fc1_input_scale,
                          fc2_input_scale, 0, timeout_seconds, None, 0)
        if isinstance(self.backend, ReferenceConfig):
            if device not in (None, -1, "cpu"):
                raise ValueError("the reference backend runs on the CPU: device must be None")
            self.device, cfg.num_threads = -1, self.backend.num_threads
        else:
            self.device = self._device_index(device)
            cfg.autotune, cfg.num_sms = int(self.backend.autotune), int(self.backend.num_sms)
            cfg.fp8_fast_accum = int(self.backend.fp8_fast_accum)
            if self.backend.knobs:
                cfg.knobs = pointer(Knobs(sizeof(Knobs), **self.backend.knobs))  # copied by create
        group, layer, first, local = c_void_p(), c_void_p(), c_int(), c_int()
        if nccl:
            group = _nccl_group(self.device, process_group, world_size, pg_rank)
        else:
            _lib.call("moe_ep_group_create_emulated", world_size, self.device, byref(group))
        self._group = group
        try:
            _lib.call("moe_ep_group_local_ranks", group, byref(first), byref(local))
            _lib.call("moe_ep_layer_create", group, byref(cfg), byref(layer))
        except BaseException:
            self.close()
            raise
        self._layer, self.first_rank, self.num_local_ranks = layer, first.value, local.value
        self.experts_per_rank = num_experts // world_size
        if weights is not None:
            self.load_weights(weights)

    @staticmethod
    def _device_index(device):
        if device is None:
            torch = sys.modules.get("torch")
            return torch.cuda.current_device() if torch else 0
        index = getattr(device, "index", device)  # torch.device or int
        if index is None and getattr(device, "type", None) == "cuda":  # torch.device("cuda")
            return MoEEpLayer._device_index(None)
        if getattr(device, "type", "cuda") != "cuda" or not isinstance(index, int) or index < 0:
            raise ValueError(f"GPU backends need a CUDA device index, got {device!r}")
        return index

    # -- lifetime ----------------------------------------------------------------------
    def close(self):
        """Frees the layer and its group (also done when the object is collected)."""
        if self._layer:
            _lib.call("moe_ep_layer_destroy", self._layer)
        if self._group:
            _lib.call("moe_ep_group_destroy", self._group)
        self._layer = self._group = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._layer:
            raise ValueError("moe_ep: the layer is closed")
        return self._layer

    # -- weights -----------------------------------------------------------------------
    def load_weights(self, weights, first_expert=None):
        """Loads (w13, w2) bf16 or a dict of pre-quantized arrays for experts
        [first_expert, first_expert + n) (default: this process's first expert),
        or a list of those, one per local rank. Host or (GPU backends) CUDA arrays."""
        first = self.first_rank * self.experts_per_rank if first_expert is None else first_expert
        if isinstance(weights, list):
            if len(weights) != self.num_local_ranks:
                raise ValueError(f"weights: {len(weights)} per-rank entries for "
                                 f"{self.num_local_ranks} local ranks")
            for r, w in enumerate(weights):
                self._load(w, first + r * self.experts_per_rank)
        else:
            self._load(weights, first)

    def _load(self, w, first):
        if isinstance(w, tuple):
            if len(w) != 2:
                raise ValueError("weights: expected (w13, w2)")
            fmt, parts = "bf16", {"w13": w[0], "w2": w[1]}
        elif isinstance(w, dict):
            unknown = set(w) - set(WEIGHT_KEYS) - {"format"}
            if unknown:
                raise ValueError(f"weights: unknown keys {sorted(unknown)}; expected {WEIGHT_KEYS}")
            fmt, parts = w.get("format", WEIGHT_FORMAT[self.path]), w
            if fmt not in ("bf16", WEIGHT_FORMAT[self.path]):
                raise ValueError(f"weights: format {fmt!r}; path {self.path} takes bf16 or "
                                 f"{WEIGHT_FORMAT[self.path]}")
        else:
            raise TypeError("weights: expected (w13, w2), a dict of pre-quantized arrays, or a list")
        views = {k: view(v, k) for k, v in parts.items() if k != "format" and v is not None}
        if "w13" not in views or "w2" not in views:
            raise ValueError("weights: w13 and w2 are required")
        n = views["w13"].shape[0] if views["w13"].shape else 0
        dev = views["w13"].device
        if dev >= 0 and dev != self.device:
            raise ValueError(f"weights: on cuda:{dev}; the layer takes host arrays"
                             + (f" or cuda:{self.device} tensors" if self.device >= 0 else ""))
        H, I = self.hidden, self.intermediate
        need = {}
        for name, rows, cols in (("w13", 2 * I, H), ("w2", H, I)):
            shape, kind = data_shape(fmt, rows, cols)
            need[name] = ((n,) + shape, kind)
            if fmt != "bf16":
                shape, kind = scale_shape(fmt, rows, cols, tiles=True)
                need[name + "_scales"] = ((n,) + shape, kind)
            if fmt == "nvfp4":
                need[name + "_global_scale"] = ((n,), "f32")
        if set(views) != set(need):
            raise ValueError(f"weights in {fmt}: expected exactly {sorted(need)}, got {sorted(views)}")
        for k, (shape, kind) in need.items():
            expect(views[k], f"weights[{k!r}]", shape, kind, dev)
        ptr = lambda k: views[k].ptr if k in views else None
        ew = ExpertWeights(sizeof(ExpertWeights), _lib.FORMATS.index(fmt), first, n, int(dev >= 0),
                           *(ptr(k) for k in WEIGHT_KEYS))
        _lib.call("moe_ep_layer_load_experts", self._handle(), byref(ew),
                  _torch_stream(self.device) if self.device >= 0 else None)

    # -- forward -----------------------------------------------------------------------
    def _args(self, x, topk_ids, topk_weights, out, need_out):
        """(ForwardArgs, per-rank lists of outputs, views to keep alive, multi)."""
        R, multi = self.num_local_ranks, isinstance(x, (list, tuple))
        if not multi and R != 1:
            raise ValueError(f"an emulated group of {R} ranks takes lists of {R} per-rank tensors")
        xs, ids, ws = (x, topk_ids, topk_weights) if multi else ([x], [topk_ids], [topk_weights])
        outs = list(out) if multi and out is not None else [out] * R if not multi else [None] * R
        if not all(isinstance(a, (list, tuple)) and len(a) == R for a in (xs, ids, ws, outs)):
            raise ValueError(f"x, topk_ids, topk_weights (and out) must be lists of {R} tensors")
        H, K, keep, tokens = self.hidden, self.top_k, [], []
        for r in range(R):
            at = f" (rank {self.first_rank + r})" if multi else ""
            vx = view(xs[r], "x" + at)
            T = 0 if not prod(vx.shape) else vx.shape[0] if len(vx.shape) == 2 else -1
            if not 0 <= T <= self.max_tokens_per_rank:
                raise ValueError(f"x{at}: shape {list(vx.shape)}, expected [T, {H}] with "
                                 f"T <= max_tokens_per_rank {self.max_tokens_per_rank}")
            expect(vx, "x" + at, (T, H), "bf16", self.device)
            vi = expect(view(ids[r], "topk_ids" + at), "topk_ids" + at, (T, K), "i32", self.device)
            vw = expect(view(ws[r], "topk_weights" + at), "topk_weights" + at, (T, K), "f32",
                        self.device)
            if need_out and outs[r] is None:
                outs[r] = empty_like(vx, (T, H), "bf16")
            vo = expect(view(outs[r], "out" + at), "out" + at, (T, H), "bf16", self.device) \
                if need_out else None
            if vo is not None and vo.readonly:
                raise ValueError(f"out{at}: read-only array")
            keep.append((vx, vi, vw, vo))
            tokens.append(T)
        arr = lambda i: (c_void_p * R)(*(k[i].ptr for k in keep))
        args = ForwardArgs(sizeof(ForwardArgs), (c_int32 * R)(*tokens), None, arr(0), arr(1),
                           arr(2), arr(3) if need_out else None)
        return args, outs, keep, multi

    def forward(self, hidden_states, topk_ids, topk_weights, out=None):
        """out = the layer applied to hidden_states [T, H] bf16, topk_ids [T, K] int32
        (global expert ids, -1 = unused), topk_weights [T, K] float32; out [T, H] bf16
        (allocated when None). GPU backends: CUDA tensors on the layer's device, enqueued
        on torch's current stream without a host sync. Emulated groups: lists per rank."""
        args, outs, keep, multi = self._args(hidden_states, topk_ids, topk_weights, out, True)
        if self.device < 0:
            _lib.call("moe_ep_layer_forward", self._handle(), byref(args), None)
        else:
            import torch
            with torch.cuda.device(self.device):
                _lib.call("moe_ep_layer_forward", self._handle(), byref(args),
                          _torch_stream(self.device))
        return outs if multi else outs[0]

    __call__ = forward

    def calibrate_nvfp4(self, hidden_states, topk_ids, topk_weights):
        """NVFP4 path, reference backend: sets and returns (fc1_input_scale, fc2_input_scale)
        from a calibration batch (same arguments as forward)."""
        args, _, keep, _ = self._args(hidden_states, topk_ids, topk_weights, None, False)
        s1, s2 = c_float(), c_float()
        _lib.call("moe_ep_layer_calibrate_nvfp4", self._handle(), byref(args), byref(s1), byref(s2))
        return s1.value, s2.value

    def warmup(self, num_tokens=None):
        """Runs one forward with num_tokens tokens per rank (default max_tokens_per_rank on
        GPU backends, 1 on the reference) so that knob selection and autotuning happen
        before CUDA-graph capture. Repeat for each batch size the graphs will serve."""
        T, K, E, H = num_tokens or (self.max_tokens_per_rank if self.device >= 0 else 1), \
            self.top_k, self.num_experts, self.hidden
        if self.device >= 0:
            import torch
            dev = f"cuda:{self.device}"
            inputs = (torch.zeros((T, H), dtype=torch.bfloat16, device=dev),
                      (torch.arange(T * K, dtype=torch.int32, device=dev) % E).view(T, K),
                      torch.full((T, K), 1.0 / K, dtype=torch.float32, device=dev))
        else:
            inputs = (host_buffer((T, H), "bf16"), host_buffer((T, K), "i32", [i % E for i in range(T * K)]),
                      host_buffer((T, K), "f32", [1.0 / K] * (T * K)))
        per_rank = lambda a: [a] * self.num_local_ranks if self.num_local_ranks > 1 else a
        self.forward(*(per_rank(a) for a in inputs))

    def get_knobs(self, num_tokens):
        """(knobs dict, source name) a forward with num_tokens tokens per rank runs with."""
        k, src = Knobs(sizeof(Knobs)), c_int()
        _lib.call("moe_ep_layer_get_knobs", self._handle(), num_tokens, byref(k), byref(src))
        return {"gemm_tile_rows": k.gemm_tile_rows, "gemm_ctas_per_sm": k.gemm_ctas_per_sm}, \
            _lib.KNOB_SOURCES[src.value]

    def check_async_error(self, reset=False):
        """Raises MoEEpError for an error the kernels recorded (never synchronizes: sync the
        stream first to see a given forward); reset=True clears it before raising."""
        st = c_int()
        _lib.call("moe_ep_group_get_async_error", self._group, byref(st))
        if st.value != _lib.STATUS_OK:
            message = _lib.lib().moe_ep_last_error().decode()
            if reset:
                _lib.call("moe_ep_group_reset_async_error", self._group)
            raise _lib.MoEEpError(st.value, message, "moe_ep_group_get_async_error")
