"""CPU tests of the Python package on the reference backend; need neither torch
nor numpy (numpy-only tests skip without it). Run: python3 tests/python/test_reference.py
or pytest tests/python.

The oracle is an independent float64 layer in pure Python with the rounding
points of docs/formats.md, "Rounding points of the layer", taken through the
library's host codec, as tests/cpu/test_layer.c does."""
import ctypes
import random
from array import array
from math import exp, sqrt
from operator import mul

import _harness
import moe_ep
from moe_ep import MoEEpError, MoEEpLayer, ReferenceConfig

E, K, H, I, T = 8, 2, 256, 128, 5
LIMIT = 7.0                      # swiglu_limit
S1, S2 = 2688.0 / 5, 2688.0 / 2  # NVFP4 activation encode scales (x, SwiGLU output)
PATHS = ("bf16", "mxfp8", "nvfp4", "w4a8", "fp8_block")
WIRES = ("bf16", "mxfp8", "fp4")
WEIGHT_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "w4a8": "mxfp4", "fp8_block": "fp8_block"}
ACT_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "nvfp4": "nvfp4", "w4a8": "mxfp8", "fp8_block": "fp8_block"}
WIRE_FMT = {"bf16": "bf16", "mxfp8": "mxfp8", "fp4": "fp4_wire"}
TOL = {"bf16": 4e-3, "nvfp4": 2e-2}  # rel L2 vs float64 as in tests/cpu/test_layer.c; others 1e-2


def shaped(a, shape):
    """A memoryview of array a with the given shape (1-D when empty: memoryview has no [0, n])."""
    return memoryview(a).cast("B").cast(a.typecode, shape) if len(a) else memoryview(a)


def bf16_bits(values):
    """float -> bf16 bit patterns (via fp32, round to nearest even; finite values)."""
    return array("H", [(u + 0x7FFF + ((u >> 16) & 1)) >> 16 for u in array("I", array("f", values).tobytes())])


def bf16_values(bits):
    return array("f", array("I", [b << 16 for b in bits]).tobytes())


class Fixture:
    """Checkpoint weights (bf16, all E experts), T tokens; token 1 leaves slot 1
    unused (-1), token 3 uses no slot (its output must be zeros)."""

    def __init__(self, seed=1):
        rng = random.Random(seed)
        self.w13 = bf16_bits([rng.gauss(0, H ** -0.5) for _ in range(E * 2 * I * H)])  # [E, 2I, H]
        self.w2 = bf16_bits([rng.gauss(0, I ** -0.5) for _ in range(E * H * I)])        # [E, H, I]
        self.x = bf16_bits([rng.gauss(0, 1) for _ in range(T * H)])                     # [T, H]
        self.ids = array("i", [e for _ in range(T) for e in rng.sample(range(E), K)])  # [T, K]
        self.ids[1 * K + 1] = -1
        self.ids[3 * K:4 * K] = array("i", [-1] * K)
        w = [rng.random() + 0.1 for _ in range(T * K)]
        self.weights = array("f", [v / sum(w[t // K * K:t // K * K + K]) for t, v in enumerate(w)])

    def weights_of(self, first, n):
        """(w13, w2) of experts [first, first + n) as shaped bf16 memoryviews."""
        a, b = 2 * I * H, H * I
        return (shaped(self.w13[first * a:(first + n) * a], (n, 2 * I, H)),
                shaped(self.w2[first * b:(first + n) * b], (n, H, I)))

    def inputs(self, t0, t1):
        """x, topk_ids, topk_weights of tokens [t0, t1)."""
        return (shaped(self.x[t0 * H:t1 * H], (t1 - t0, H)), shaped(self.ids[t0 * K:t1 * K], (t1 - t0, K)),
                shaped(self.weights[t0 * K:t1 * K], (t1 - t0, K)))


def make_layer(path, wire, R=1, weights=None, **kw):
    kw.setdefault("fc1_input_scale", S1 if path == "nvfp4" else 0.0)
    kw.setdefault("fc2_input_scale", S2 if path == "nvfp4" else 0.0)
    return MoEEpLayer(E, K, H, I, max_tokens_per_rank=8, world_size=R, emulated=R > 1,
                      weights=weights, backend=ReferenceConfig(path=path, combine=wire),
                      swiglu_limit=LIMIT, **kw)


def run(fx, path, wire, R=1, split=(3,)):
    """Output bits [T * H] of a layer with R emulated ranks; rank r gets tokens
    [split[r-1], split[r]) (R = 2: tokens 0..2 and 3..4)."""
    per_rank = [fx.weights_of(r * E // R, E // R) for r in range(R)]
    with make_layer(path, wire, R, per_rank if R > 1 else per_rank[0]) as layer:
        if R == 1:
            out = [layer(*fx.inputs(0, T))]
        else:
            bounds = (0,) + split + (T,)
            ins = [fx.inputs(bounds[r], bounds[r + 1]) for r in range(R)]
            out = layer(*(list(col) for col in zip(*ins)))
    return array("H", b"".join(o.tobytes() for o in out))


# -- the float64 oracle -----------------------------------------------------------------
def rounded(fmt, values, cols, gs=1.0, tiles=False):
    """values ([rows][cols] row-major) after one quantize + dequantize through the codec."""
    x = shaped(array("f", values), (len(values) // cols, cols))
    if tiles and fmt == "fp8_block":
        out = moe_ep.dequantize_fp8_block_weight(*moe_ep.quantize_fp8_block_weight(x))
    else:
        out = moe_ep.dequantize(fmt, *moe_ep.quantize(fmt, x, gs), x.shape[0], cols, gs)
    return out.cast("B").cast("f").tolist()


def expert_outputs(fx, path):
    """{(t, k): y [H]}: expert outputs before the wire, float64 GEMMs."""
    wf, af, ys = WEIGHT_FMT[path], ACT_FMT[path], {}
    w13, w2 = bf16_values(fx.w13), bf16_values(fx.w2)
    def matrix(w, e, rows, cols):  # expert e's rows of a weight, rounded as the layer loads it
        m = w[e * rows * cols:(e + 1) * rows * cols]
        m = rounded(wf, m, cols, moe_ep.nvfp4_global_scale(max(map(abs, m))), tiles=True)
        return [m[j * cols:(j + 1) * cols] for j in range(rows)]
    used = sorted({e for e in fx.ids if e >= 0})
    a13 = {e: matrix(w13, e, 2 * I, H) for e in used}
    a2 = {e: matrix(w2, e, H, I) for e in used}
    xv = bf16_values(fx.x)
    for t in range(T):
        xq = rounded(af, xv[t * H:(t + 1) * H], H, S1)
        for k in range(K):
            e = fx.ids[t * K + k]
            if e < 0:
                continue
            h = [sum(map(mul, row, xq)) for row in a13[e]]
            g = [min(v, LIMIT) for v in h[:I]]
            u = [max(-LIMIT, min(v, LIMIT)) for v in h[I:]]
            act = rounded(af, [gi / (1 + exp(-gi)) * ui for gi, ui in zip(g, u)], I, S2)
            ys[t, k] = array("f", [sum(map(mul, row, act)) for row in a2[e]])  # fp32 y
    return ys


def oracle(fx, ys, wire):
    """out [T * H] float64: sum over used slots of w[t, k] * wire(y)."""
    out = [0.0] * (T * H)
    for (t, k), y in ys.items():
        w = fx.weights[t * K + k]
        for j, v in enumerate(rounded(WIRE_FMT[wire], y, H)):
            out[t * H + j] += w * v
    return out


def rel_l2(bits, want):
    got = bf16_values(bits)
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return sqrt(num / den) if den else sqrt(num)


# -- tests ------------------------------------------------------------------------------
FX = Fixture()


def test_every_path_and_wire_against_float64():
    for path in PATHS:
        ys = expert_outputs(FX, path)
        for wire in WIRES:
            got = run(FX, path, wire)
            err, tol = rel_l2(got, oracle(FX, ys, wire)), TOL.get(path, 1e-2)
            print(f"  path {path:9s} wire {wire:5s}: rel L2 {err:.3e} (tol {tol:.0e})")
            assert err < tol, (path, wire, err)
            assert not any(got[3 * H:4 * H]), "a token with no used slot must get zeros"


def test_emulated_two_ranks_equal_one_bit_for_bit():
    for i, path in enumerate(PATHS):
        wire = WIRES[i % len(WIRES)]
        assert run(FX, path, wire, R=2) == run(FX, path, wire), (path, wire)
        assert run(FX, path, wire, R=2, split=(0,)) == run(FX, path, wire), "rank 0 with 0 tokens"


def stacked(parts, shape, fmt):
    """One [n, *shape] memoryview from n per-expert arrays."""
    data = b"".join(p.tobytes() for p in parts)
    return memoryview(bytearray(data)).cast(fmt, (len(parts),) + shape)


def prequantized(fx, path):
    """The dict moe_ep_expert_weights_t describes, quantized by the codec as the layer would."""
    w13, w2, wf, d = bf16_values(fx.w13), bf16_values(fx.w2), WEIGHT_FMT[path], {}
    for name, w, rows, cols in (("w13", w13, 2 * I, H), ("w2", w2, H, I)):
        q, gs = [], []
        for e in range(E):
            m = shaped(array("f", w[e * rows * cols:(e + 1) * rows * cols]), (rows, cols))
            gs.append(moe_ep.nvfp4_global_scale(max(map(abs, m.cast("B").cast("f")))))
            q.append(moe_ep.quantize_fp8_block_weight(m) if wf == "fp8_block" else moe_ep.quantize(wf, m, gs[-1]))
        d[name] = stacked([a for a, _ in q], q[0][0].shape, "B")
        d[name + "_scales"] = stacked([s for _, s in q], q[0][1].shape, q[0][1].format)
        if wf == "nvfp4":
            d[name + "_global_scale"] = memoryview(array("f", gs))
    return d


def test_prequantized_weights_match_bf16_loading():
    for path in PATHS[1:]:
        with make_layer(path, "bf16", weights=prequantized(FX, path)) as layer:
            got = layer(*FX.inputs(0, T))
        assert got.tobytes() == run(FX, path, "bf16").tobytes(), path


def test_nvfp4_calibration():
    layer = make_layer("nvfp4", "bf16", weights=FX.weights_of(0, E), fc1_input_scale=0.0, fc2_input_scale=0.0)
    try:
        layer(*FX.inputs(0, T))
        raise AssertionError("forward without NVFP4 activation scales must fail")
    except MoEEpError as e:
        assert e.status_name == "MOE_EP_ERROR_INVALID_ARGUMENT" and "calibrate" in e.message, e
    s1, s2 = layer.calibrate_nvfp4(*FX.inputs(0, T))
    assert s1 > 0 and s2 > 0, (s1, s2)
    assert len(layer(*FX.inputs(0, T)).tobytes()) == T * H * 2


def expect_raises(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


def test_bad_inputs_refused_before_any_c_call():
    layer = make_layer("mxfp8", "bf16", weights=FX.weights_of(0, E))
    x, ids, w = FX.inputs(0, T)
    calls, real_call = [], moe_ep._lib.call
    moe_ep._lib.call = lambda name, *a: calls.append(name) or real_call(name, *a)
    try:
        f32_x = shaped(array("f", [0.0] * (T * H)), (T, H))
        i64_ids = shaped(array("q", [0] * (T * K)), (T, K))
        strided = type("Strided", (), {"__array_interface__": {  # every other column of [T, 2H]
            "shape": (T, H), "typestr": "<u2", "data": (0, False), "strides": (4 * H, 4), "version": 3}})()
        cases = [(ValueError, (FX.inputs(0, T)[0][:2], ids, w)),                   # T differs
                 (ValueError, (shaped(FX.x[:T * 128], (T, 128)), ids, w)),          # wrong H
                 (ValueError, (x, shaped(FX.ids[:T], (T, 1)), w)),                  # wrong K
                 (TypeError, (f32_x, ids, w)),                                      # x not bf16
                 (TypeError, (x, i64_ids, w)),                                      # ids int64
                 (TypeError, (x, w, w)),                                            # ids float
                 (TypeError, (object(), ids, w)),                                   # not an array
                 (ValueError, (strided, ids, w)),                                   # not contiguous
                 (ValueError, ([x], [ids], [w, w]))]                                # list lengths
        for exc, args in cases:
            expect_raises(exc, layer.forward, *args)
        expect_raises(ValueError, layer.forward, x, ids, w, out=shaped(array("H", [0] * H), (1, H)))
        expect_raises(ValueError, layer.forward, x, ids, w, out=memoryview(bytes(T * H * 2)).cast("H", (T, H)))
        expect_raises(ValueError, layer.load_weights, FX.weights_of(0, E)[::-1])  # swapped shapes
        expect_raises(ValueError, layer.load_weights, {"w13": x})                   # keys missing
        expect_raises(ValueError, make_layer, "fp9", "bf16")
        expect_raises(ValueError, make_layer, "bf16", "bf16", device=0)
        two = make_layer("bf16", "bf16", R=2)
        expect_raises(ValueError, two.forward, x, ids, w)                           # needs lists
    finally:
        moe_ep._lib.call = real_call
    assert not [c for c in calls if c in ("moe_ep_layer_forward", "moe_ep_layer_load_experts")], calls
    layer.forward(memoryview(x.tobytes()).cast("H", (T, H)), ids, w)  # a read-only input is fine


def test_too_many_tokens_refused():
    with MoEEpLayer(E, K, H, I, max_tokens_per_rank=4, weights=FX.weights_of(0, E)) as layer:
        e = expect_raises(ValueError, layer.forward, *FX.inputs(0, T))
        assert "max_tokens_per_rank" in str(e), e


def test_library_errors_become_moe_ep_error():
    layer = make_layer("bf16", "bf16")
    e = expect_raises(MoEEpError, layer.forward, *FX.inputs(0, T))  # no weights loaded
    assert isinstance(e, RuntimeError) and e.status_name == "MOE_EP_ERROR_INVALID_ARGUMENT"
    assert "load every expert" in e.message and e.call == "moe_ep_layer_forward", e
    layer.load_weights(FX.weights_of(0, E))
    x, ids, w = FX.inputs(0, T)
    bad = shaped(array("i", [E] * (T * K)), (T, K))  # expert id out of range
    assert isinstance(expect_raises(MoEEpError, layer.forward, x, bad, w), MoEEpError)
    e = expect_raises(MoEEpError, MoEEpLayer, 6, K, H, I, 8, world_size=4, emulated=True)
    assert e.call == "moe_ep_layer_create", e  # 6 experts on 4 ranks


def test_bad_group_arguments_refused():
    split, nccl = moe_ep.SplitConfig, moe_ep.NcclEpConfig()
    e = expect_raises((ImportError, RuntimeError, TypeError), MoEEpLayer, E, K, H, I, 8,
                      process_group=object(), backend=split(), device=0)
    assert "process_group" in str(e), e  # no torch, torch.distributed not initialized, not a group
    expect_raises(ValueError, MoEEpLayer, E, K, H, I, 8, process_group=object())  # reference backend
    expect_raises(ValueError, MoEEpLayer, E, K, H, I, 8, world_size=2)            # neither kind
    expect_raises(TypeError, MoEEpLayer, E, K, H, I, 8, backend=nccl)             # not a backend
    expect_raises(TypeError, MoEEpLayer, E, K, H, I, 8, backend=split(comm="nccl"), device=0)
    expect_raises(ValueError, MoEEpLayer, E, K, H, I, 8, backend=split(comm=nccl), device=0,
                  world_size=2)  # an NCCL group of more than one rank needs process_group=
    expect_raises(ValueError, MoEEpLayer, E, K, H, I, 8, backend=split(comm=nccl), device=0,
                  world_size=2, emulated=True)


def test_nccl_comm_works_or_raises():
    """SplitConfig(comm=NcclEpConfig()) alone: an NCCL group of one rank, or MoEEpError
    (no GPU, or a build without NCCL: MOE_EP_ERROR_UNSUPPORTED)."""
    try:
        MoEEpLayer(E, K, H, I, 8, backend=moe_ep.SplitConfig(comm=moe_ep.NcclEpConfig()),
                   device=0).close()
    except MoEEpError as e:
        print(f"  {e.call}: {e.status_name}: {e.message}")


class FakeDistributed:
    """torch.distributed as _nccl_group uses it, for one rank of a group of `world`."""

    def __init__(self, rank, world, rank0_payload=None):
        self.rank, self.world, self.rank0_payload, self.sent = rank, world, rank0_payload, []

    def get_rank(self, group):
        return self.rank

    def get_world_size(self, group):
        return self.world

    def all_gather_object(self, out, obj, group):
        assert group == "pg" and len(out) == self.world
        self.sent.append(obj)
        out[:] = [obj if r == self.rank else self.rank0_payload if r == 0 else None
                  for r in range(self.world)]


def bootstrap(rank, world, rank0_payload=None, id_error=None):
    """A split layer on process_group "pg" as `rank` makes it, with torch.distributed and
    the C calls faked: (fake torch.distributed, the C calls made, the id bytes created from)."""
    fake, calls = FakeDistributed(rank, world, rank0_payload), []
    id_bytes = bytes(range(100, 228))  # 128 bytes, NULs nowhere but bytes above 127 too

    def call(name, *args):
        calls.append(name)
        if name == "moe_ep_get_unique_id":
            if id_error:
                raise MoEEpError(3, id_error, name)
            ctypes.memmove(ctypes.addressof(args[0]._obj), id_bytes, len(id_bytes))
        elif name == "moe_ep_group_create_from_id":
            uid, w, r, dev, group = args
            calls.append((bytes(uid._obj), w, r, dev))
            group._obj.value = 0x1000
        elif name == "moe_ep_group_local_ranks":
            args[1]._obj.value, args[2]._obj.value = rank, 1
        elif name == "moe_ep_layer_create":
            args[2]._obj.value = 0x2000
        elif name not in ("moe_ep_layer_destroy", "moe_ep_group_destroy"):
            raise AssertionError(f"unexpected C call {name}")

    real_call, real_dist = moe_ep._lib.call, moe_ep.layer._torch_distributed
    moe_ep._lib.call, moe_ep.layer._torch_distributed = call, lambda pg: fake
    try:
        with MoEEpLayer(E, K, H, I, 8, process_group="pg", backend=moe_ep.SplitConfig(),
                        device=0) as layer:
            assert (layer.world_size, layer.first_rank, layer.num_local_ranks) == (world, rank, 1)
            assert layer.experts_per_rank == E // world
    except MoEEpError as e:
        calls.append(e)
    finally:
        moe_ep._lib.call, moe_ep.layer._torch_distributed = real_call, real_dist
    return fake, calls, id_bytes


def test_process_group_bootstrap_passes_the_id():
    fake, calls, id_bytes = bootstrap(0, 2)  # rank 0 makes the id and sends its 128 bytes
    assert fake.sent == [id_bytes], fake.sent
    assert calls[:3] == ["moe_ep_get_unique_id", "moe_ep_group_create_from_id",
                         (id_bytes, 2, 0, 0)], calls
    fake, calls, _ = bootstrap(1, 2, rank0_payload=id_bytes)  # rank 1 takes rank 0's
    assert fake.sent == [None], fake.sent
    assert calls[:2] == ["moe_ep_group_create_from_id", (id_bytes, 2, 1, 0)], calls
    assert calls[2:] == ["moe_ep_group_local_ranks", "moe_ep_layer_create",
                         "moe_ep_layer_destroy", "moe_ep_group_destroy"], calls


def test_process_group_id_error_reaches_every_rank():
    """A build without NCCL: rank 0's error goes through the group, so no rank waits."""
    message = "unsupported: NCCL groups: moe_ep was built without NCCL"
    fake, calls, _ = bootstrap(0, 2, id_error=message)
    assert fake.sent == [(3, message)] and calls[0] == "moe_ep_get_unique_id", (fake.sent, calls)
    assert isinstance(calls[-1], MoEEpError), calls
    fake, calls, _ = bootstrap(1, 2, rank0_payload=(3, message))
    e = calls[-1]
    assert calls[:1] == [e] and e.status_name == "MOE_EP_ERROR_UNSUPPORTED", calls
    assert message in e.message and e.call == "moe_ep_get_unique_id", e


def test_gpu_backends_work_or_raise():
    """Without a GPU (CI) the split and mega backends must raise MoEEpError, not crash."""
    for cfg in (moe_ep.SplitConfig(path="mxfp8"), moe_ep.MegaConfig(path="w4a8")):
        try:
            MoEEpLayer(E, K, H, I, 8, backend=cfg, device=0).close()
        except MoEEpError as e:
            print(f"  {type(cfg).__name__}: {e.status_name}: {e.message}")


def test_warmup_and_knobs():
    with make_layer("w4a8", "fp4", R=2, weights=FX.weights_of(0, E)) as layer:
        layer.warmup()
        assert layer.get_knobs(4) == ({"gemm_tile_rows": 0, "gemm_ctas_per_sm": 0}, "heuristic")
        layer.check_async_error()


def test_numpy_arrays():
    try:
        import numpy as np
    except ImportError:
        raise _harness.SkipTest("numpy is not installed")
    x, ids, w = (np.frombuffer(a.tobytes(), dtype=dt).reshape(a.shape) for a, dt in
                 zip(FX.inputs(0, T), (np.uint16, np.int32, np.float32)))
    with make_layer("mxfp8", "mxfp8", weights=tuple(np.array(a) for a in FX.weights_of(0, E))) as layer:
        out = layer(x, ids, w)
        assert isinstance(out, np.ndarray) and out.dtype == np.uint16 and out.shape == (T, H)
        assert out.tobytes() == run(FX, "mxfp8", "mxfp8").tobytes()
        expect_raises(ValueError, layer, np.zeros((T, 2 * H), np.uint16)[:, ::2], ids, w)
        expect_raises(TypeError, layer, x, ids.astype(np.int64), w)
        expect_raises(TypeError, layer, x, ids, w.astype(np.float64))
        expect_raises(ValueError, layer, x[None], ids, w)
    data, scales = moe_ep.quantize("nvfp4", np.ones((2, 32), np.float32), 2688.0)
    assert data.shape == (2, 16) and scales.shape == (2, 2) and data.dtype == np.uint8


if __name__ == "__main__":
    _harness.run_all(dict(globals()))
