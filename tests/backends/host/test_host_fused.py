"""The HostBackend's segments (`forwardSegment`, a Session's plain forward): float Conv2d
chains (Conv2d, BatchNorm2d, Add, Relu) in one pass over the GEMM result give the op-by-op
results byte for byte, stay within float tolerance of onnxruntime, and stop where an
intermediate value is read elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from host_backend import HostBackend, fused
from xcompile import zoo
from xrt import HostDevice, Session, Tensor


@pytest.fixture(scope="module")
def small_resnet():
    net = zoo.build("resnet18", input_size=64, batch=2)
    x = np.random.default_rng(3).standard_normal((2, 64, 64, 3)).astype(np.float32)
    return net, x


def _session(net):
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    return sess


def _chains(sess) -> list[fused.Chain]:
    (backend,) = [b for b in sess.backends if isinstance(b, HostBackend)]
    return [s for steps in backend._segments.values() for s in steps
            if isinstance(s, fused.Chain)]


def test_plain_forward_fuses_the_chains_and_matches_op_by_op(small_resnet, monkeypatch):
    net, x = small_resnet
    sess = _session(net)
    ran = []
    real = HostBackend.getForwardFunc  # what forwardOp runs (an own forwardOp stops fusion)
    monkeypatch.setattr(HostBackend, "getForwardFunc",
                        lambda self, op: ran.append(op.op_type) or real(self, op))
    plain = np.asarray(sess.forward([Tensor(x)])[0]).copy()
    chains = _chains(sess)
    convs = [op for op in net.view(0).ops if op.op_type == "Conv2d"]
    # every Conv2d of resnet18 heads a chain: its BatchNorm2d, then Relu, or Add and Relu
    assert len(chains) == len(convs) == 20
    assert all(c.bn is not None for c in chains)
    assert sum(c.add is not None for c in chains) == 8
    # the stem, 8 blocks' inner convs and 8 block ends (downsample convs end at the BN)
    assert sum(c.relu is not None for c in chains) == 17
    assert not {"Conv2d", "BatchNorm2d", "Add"} & set(ran)  # none of them ran op by op
    sess.setPostCallBack(lambda *args: None)  # asks about single ops: op by op
    ran.clear()
    per_op = np.asarray(sess.forward([Tensor(x)])[0])
    assert ran.count("Conv2d") == 20 and ran.count("BatchNorm2d") == 20
    assert plain.tobytes() == per_op.tobytes()
    sess.setPostCallBack(None)
    again = np.asarray(sess.forward([Tensor(x)])[0])
    assert again.tobytes() == plain.tobytes()


def test_fused_forward_is_close_to_onnxruntime(small_resnet):
    ort = pytest.importorskip("onnxruntime")
    from xcompile.frontend.onnx_export import export_onnx

    net, x = small_resnet
    sess = _session(net)
    ours = np.asarray(sess.forward([Tensor(x)])[0])
    assert _chains(sess)
    ref_sess = ort.InferenceSession(export_onnx(net).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    feed = {ref_sess.get_inputs()[0].name: np.ascontiguousarray(x.transpose(0, 3, 1, 2))}
    ref = ref_sess.run(None, feed)[0]
    np.testing.assert_allclose(ours, ref.reshape(ours.shape), rtol=1e-3, atol=1e-3)


def test_a_value_read_elsewhere_ends_the_chain(small_resnet):
    net, _ = small_resnet
    ops = tuple(net.view(0).ops)
    final = tuple(v.v_id for v in net.view(0).outputs())
    conv = next(op for op in ops if op.op_type == "Conv2d")
    bn = ops[ops.index(conv) + 1]
    assert bn.op_type == "BatchNorm2d"
    steps = fused.plan_segment(ops, (*final,))
    first = next(s for s in steps if isinstance(s, fused.Chain))
    assert first.conv is conv and first.bn is bn
    # the conv's output wanted after the segment: no chain from it
    steps = fused.plan_segment(ops, (*final, conv.outputs[0].v_id))
    assert conv in steps and not any(isinstance(s, fused.Chain) and s.conv is conv
                                     for s in steps)
    # its BatchNorm2d's output wanted: the chain stops there (no Relu joins it)
    steps = fused.plan_segment(ops, (*final, bn.outputs[0].v_id))
    chain = next(s for s in steps if isinstance(s, fused.Chain) and s.conv is conv)
    assert chain.bn is bn and chain.relu is None and chain.last is bn


def test_blas_gemm_runs_the_chains_op_by_op(small_resnet, monkeypatch):
    net, x = small_resnet
    fast = np.asarray(_session(net).forward([Tensor(x)])[0]).copy()
    monkeypatch.setenv("HOST_GEMM", "blas")
    sess = _session(net)
    plain = np.asarray(sess.forward([Tensor(x)])[0]).copy()
    sess.setPostCallBack(lambda *args: None)
    assert np.asarray(sess.forward([Tensor(x)])[0]).tobytes() == plain.tobytes()
    np.testing.assert_allclose(plain, fast, rtol=1e-4, atol=1e-4)


def test_host_segments_pass_the_conformance_check():
    from xrt.testing import run_conformance

    report = run_conformance("Host", only="forward_segment", trials=1)
    (r,) = report.results
    assert r.status in ("passed", "skipped"), r.message


@pytest.mark.parametrize("c", [1, 7, 64, 513])
def test_batch_norm_constants_compiled_are_the_float64_formula(c):
    """The compiled per-channel constants are numpy's float64 formula rounded once, bit for
    bit (float32 params of shape (c,)); other params take the numpy formula itself."""
    from host_backend.ops import norm

    rng = np.random.default_rng(c)
    params = [rng.standard_normal(c).astype(np.float32) for _ in range(3)]
    params.append((rng.random(c) * 3).astype(np.float32))
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + 1e-3)
    want = (a.astype(np.float32), (bias - mean * a).astype(np.float32))
    got = norm.batch_norm_scale_shift(params, {"epsilon": 1e-3}, c)
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    wide = norm.batch_norm_scale_shift([p.astype(np.float64) for p in params],
                                       {"epsilon": 1e-3}, c)
    assert [g.tobytes() for g in wide] == [w.tobytes() for w in want]


@pytest.mark.parametrize("shape,stride", [((1, 20, 20, 32), 1), ((2, 30, 30, 32), 1),
                                          ((2, 15, 15, 24), 2)])
def test_run_chain_is_the_kernels_one_after_another(shape, stride):
    """`run_chain` on the GEMM's pixel grids (stride 1 with pad pixels, batches, strided):
    the op-by-op kernels' bytes, BatchNorm2d, Add and Relu."""
    from types import SimpleNamespace

    from host_backend.ops import activation, conv, elementwise, norm, sgemm

    if not sgemm.enabled():
        pytest.skip("no AVX-512: the chains run op by op")
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((3, 3, shape[3], 48)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    bn = [rng.standard_normal(48).astype(np.float32) for _ in range(3)]
    bn.append((rng.random(48) + 0.5).astype(np.float32))
    cattrs = {"stride_height": stride, "stride_width": stride, "pad_top": 1, "pad_bottom": 1,
              "pad_left": 1, "pad_right": 1}
    battrs = {"epsilon": 1e-5}
    (y,) = conv.conv2d([x, w, bias], dict(cattrs))
    (y,) = norm.batch_norm2d([y, *bn], battrs)
    res = rng.standard_normal(y.shape).astype(np.float32)
    (y,) = elementwise.add([res, y], {})
    (want,) = activation.relu([y], {})
    op = SimpleNamespace
    chain = fused.Chain(op(attrs=cattrs), op(attrs=battrs), op(attrs={}), op(attrs={}), 0)
    got = fused.run_chain(chain, [x, w, bias], bn, res)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_a_segment_missing_a_feed_names_the_value(small_resnet):
    from xrt.errors import XrtError

    net, x = small_resnet
    sess = _session(net)
    (backend,) = [b for b in sess.backends if isinstance(b, HostBackend)]
    ops = tuple(op for op in net.view(0).ops if op.op_type not in ("Input", "Output"))
    wanted = (ops[-1].outputs[0].v_id,)
    with pytest.raises(XrtError, match=r"forwardSegment: op \d+ \(Conv2d\) reads value \d+"):
        backend.forwardSegment(ops, {}, wanted)
