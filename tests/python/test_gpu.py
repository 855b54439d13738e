"""GPU tests of the Python package (torch + a CUDA device; each test skips
cleanly without them, or where the library says UNSUPPORTED, e.g. not sm_90a).
Run: python3 tests/python/test_gpu.py, or pytest tests/python.

The split backend against a float64 layer in torch with the rounding points of
docs/formats.md (taken through the library's host codec on CPU tensors),
CUDA-graph capture + replay against eager, emulated R=2 against R=1 (bit for
bit), the mega backend (against torch, and byte for byte against split), and
NCCL groups of one rank made through a torch.distributed process group (byte for
byte against the emulated group of one)."""
import functools
import itertools
import os
import tempfile

import _harness
import moe_ep
from moe_ep import MegaConfig, MoEEpError, MoEEpLayer, NcclEpConfig, SplitConfig

E, K, H, I, T = 16, 4, 512, 256, 40  # geometry of tests/gpu/test_split.c
LIMIT = 7.0
S1, S2 = 2688.0 / 5, 2688.0 / 2
WEIGHT_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "w4a8": "mxfp4", "fp8_block": "fp8_block"}
ACT_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "w4a8": "mxfp8", "fp8_block": "fp8_block"}
WIRE_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "fp4": "fp4_wire"}
# rel L2 vs float64: the looser of tests/cpu/test_layer.c's (CPU vs float64) and
# tests/gpu/test_split.c's (GPU vs CPU) tolerances.
PATH_TOL = {"bf16": 5e-3, "mxfp8": 1e-2, "nvfp4": 2e-2, "w4a8": 2e-2, "fp8_block": 1e-2}
WIRE_TOL = {"bf16": 0.0, "mxfp8": 1e-2, "fp4": 2e-2}


def cuda_torch():
    try:
        import torch
    except ImportError:
        raise _harness.SkipTest("torch is not installed")
    if not torch.cuda.is_available():
        raise _harness.SkipTest("no CUDA device")
    return torch


class Fixture:
    def __init__(self, torch, seed=3):
        g = torch.Generator().manual_seed(seed)
        self.w13 = (torch.randn(E, 2 * I, H, generator=g) * H ** -0.5).bfloat16()  # CPU
        self.w2 = (torch.randn(E, H, I, generator=g) * I ** -0.5).bfloat16()
        self.x = torch.randn(T, H, generator=g).bfloat16()
        scores = torch.rand(T, E, generator=g)
        top = scores.topk(K, dim=1)
        self.ids = top.indices.int()
        self.ids[1, 2] = -1  # an unused slot
        self.ids[5] = -1     # a token with none
        self.weights = torch.softmax(top.values, dim=1).float()

    def cuda(self):
        return [a.cuda() for a in (self.x, self.ids, self.weights)]


def layer(path, wire, backend=SplitConfig, R=1, weights=None, **kw):
    try:
        return MoEEpLayer(E, K, H, I, max_tokens_per_rank=T, world_size=R, emulated=R > 1,
                          weights=weights, backend=backend(path=path, combine=wire),
                          swiglu_limit=LIMIT, fc1_input_scale=S1 if path == "nvfp4" else 0.0,
                          fc2_input_scale=S2 if path == "nvfp4" else 0.0, **kw)
    except MoEEpError as e:
        if e.status_name == "MOE_EP_ERROR_UNSUPPORTED" and backend is SplitConfig:
            raise _harness.SkipTest(f"split backend unsupported here: {e.message}")
        raise


def rounded(fmt, m, gs=1.0, tiles=False):
    """m [rows, cols] float32 CPU after one quantize + dequantize through the codec."""
    m = m.float().contiguous()
    if tiles and fmt == "fp8_block":
        return moe_ep.dequantize_fp8_block_weight(*moe_ep.quantize_fp8_block_weight(m))
    return moe_ep.dequantize(fmt, *moe_ep.quantize(fmt, m, gs), m.shape[0], m.shape[1], gs)


def torch_layer(torch, fx, path, wire):
    """out [T, H] float64 on the CPU, every rounding point of the path applied."""
    wf, af = WEIGHT_FMT[path], ACT_FMT[path]
    def weight(w):  # [rows, cols] bf16 -> as the layer loads it, float64
        return rounded(wf, w, moe_ep.nvfp4_global_scale(w.float().abs().max().item()), tiles=True).double()
    x = rounded(af, fx.x, S1).double()
    out = torch.zeros(T, H, dtype=torch.float64)
    for e in range(E):
        t, k = (fx.ids == e).nonzero(as_tuple=True)
        if len(t) == 0:
            continue
        h = x[t] @ weight(fx.w13[e]).T                                           # [n, 2I]
        g, u = h[:, :I].clamp(max=LIMIT), h[:, I:].clamp(-LIMIT, LIMIT)
        a = rounded(af, (g / (1 + torch.exp(-g)) * u).float(), S2).double()      # [n, I]
        y = rounded(WIRE_FMT[wire], (a @ weight(fx.w2[e]).T).float()).double()   # [n, H]
        out.index_put_((t,), fx.weights[t, k].double()[:, None] * y, accumulate=True)
    return out


def rel_l2(got, want):
    got = got.cpu().double()
    return ((got - want).norm() / want.norm()).item()


def test_backends_against_torch_float64():
    torch = cuda_torch()
    fx = Fixture(torch)
    for backend, path, wire in itertools.product((SplitConfig, MegaConfig), WEIGHT_FMT, WIRE_FMT):
        with layer(path, wire, backend=backend, weights=(fx.w13, fx.w2)) as lay:  # host weights
            out = lay(*fx.cuda())
        torch.cuda.synchronize()
        err, tol = rel_l2(out, torch_layer(torch, fx, path, wire)), max(PATH_TOL[path], WIRE_TOL[wire])
        print(f"  {backend.__name__:11s} path {path:9s} wire {wire:5s}: rel L2 {err:.3e} (tol {tol:.0e})")
        assert out.dtype == torch.bfloat16 and out.device.type == "cuda"
        assert err < tol, (path, wire, err)
        assert not out[5].any(), "a token with no used slot must get zeros"


def test_cuda_graph_replay_equals_eager():
    torch = cuda_torch()
    fx = Fixture(torch)
    for backend in (SplitConfig, MegaConfig):
        graph_replay_equals_eager(torch, fx, backend)


def graph_replay_equals_eager(torch, fx, backend):
    x, ids, w = fx.cuda()
    with layer("mxfp8", "fp4", backend=backend, weights=(fx.w13.cuda(), fx.w2.cuda())) as lay:  # device weights
        lay.warmup(T)
        eager = lay(x, ids, w)
        static = torch.empty_like(eager)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            lay(x, ids, w, out=static)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static.view(torch.int16), eager.view(torch.int16))
        x.copy_(torch.randn_like(x, dtype=torch.float32).bfloat16())  # new inputs, same buffers
        graph.replay()
        eager = lay(x, ids, w)
        torch.cuda.synchronize()
        assert torch.equal(static.view(torch.int16), eager.view(torch.int16))
        lay.check_async_error()


def test_emulated_two_ranks_equal_one():
    torch = cuda_torch()
    fx = Fixture(torch)
    x, ids, w = fx.cuda()
    for path, wire in (("w4a8", "mxfp8"), ("fp8_block", "bf16"), ("nvfp4", "fp4")):
        with layer(path, wire, weights=(fx.w13, fx.w2)) as one:
            want = one(x, ids, w)
        halves = [(fx.w13[:E // 2], fx.w2[:E // 2]), (fx.w13[E // 2:], fx.w2[E // 2:])]
        with layer(path, wire, R=2, weights=halves) as two:
            got = two([x[:13], x[13:]], [ids[:13], ids[13:]], [w[:13], w[13:]])
        torch.cuda.synchronize()
        assert torch.equal(torch.cat(got).view(torch.int16), want.view(torch.int16)), (path, wire)


def test_mega_equals_split():
    torch = cuda_torch()
    fx = Fixture(torch)
    for path, wire in (("w4a8", "bf16"), ("nvfp4", "mxfp8"), ("bf16", "fp4")):
        outs = []
        for backend in (SplitConfig, MegaConfig):
            with layer(path, wire, backend=backend, weights=(fx.w13, fx.w2)) as lay:
                outs.append(lay(*fx.cuda()))
        torch.cuda.synchronize()
        assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), (path, wire)


def test_process_group_equals_emulated():
    """process_group= with a gloo group of one process (rank 0 makes the NCCL id, the group
    hands it out, the layer makes an NCCL group of one) and SplitConfig(comm=NcclEpConfig())
    without one: byte for byte the emulated group of one, split and mega."""
    torch = cuda_torch()
    import torch.distributed as dist
    if not dist.is_available():
        raise _harness.SkipTest("torch.distributed is not available")
    if dist.is_initialized():
        raise _harness.SkipTest("torch.distributed is already initialized")
    fx = Fixture(torch)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"),
                                world_size=1, rank=0)
        try:
            pg = dist.group.WORLD
            for path, wire in (("w4a8", "mxfp8"), ("nvfp4", "fp4"), ("bf16", "bf16")):
                for backend in (SplitConfig, MegaConfig):  # split first: it skips where unsupported
                    outs = []
                    for cfg, kw in ((backend, {}),                     # emulated, the expected bytes
                                    (backend, {"process_group": pg}),
                                    (functools.partial(backend, comm=NcclEpConfig()), {})):
                        try:
                            with layer(path, wire, backend=cfg, weights=(fx.w13, fx.w2), **kw) as lay:
                                assert (lay.world_size, lay.first_rank, lay.num_local_ranks) == (1, 0, 1)
                                outs.append(lay(*fx.cuda()))
                                lay.check_async_error()
                        except MoEEpError as e:
                            if "without NCCL" in e.message:
                                raise _harness.SkipTest(e.message)
                            raise
                    torch.cuda.synchronize()
                    for got in outs[1:]:
                        assert torch.equal(got.view(torch.int16), outs[0].view(torch.int16)), \
                            (backend.__name__, path, wire)
        finally:
            dist.destroy_process_group()


def test_bad_tensors_refused():
    torch = cuda_torch()
    fx = Fixture(torch)
    x, ids, w = fx.cuda()
    with layer("bf16", "bf16", weights=(fx.w13, fx.w2)) as lay:
        for exc, args in ((ValueError, (fx.x, ids, w)),                  # x on the CPU
                          (TypeError, (x, ids.long(), w)),               # int64 ids
                          (TypeError, (x.float(), ids, w)),              # fp32 x
                          (ValueError, (x.t().contiguous().t(), ids, w)),  # not contiguous
                          (ValueError, (x[:, :256].contiguous(), ids, w))):
            try:
                lay(*args)
            except exc:
                continue
            raise AssertionError(f"{exc.__name__} expected")


if __name__ == "__main__":
    _harness.run_all(dict(globals()))
