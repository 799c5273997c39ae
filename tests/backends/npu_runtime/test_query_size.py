"""`ZG330Backend.QuerySize(view)` / `BuyiBackend.QuerySize(view)` (npu_runtime/sizes.py): the
WEIGHT, INSTR and FTMP bytes and the user-chunk alignment, asked without a device (Ascend's
aclmdlQuerySize), equal to `logic_segment_map` after `init` on both chips for two networks; user
chunks of exactly those sizes deploy and forward like the backend's own memory."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from npu_chip_lib import CHIPS, compile_onnx
from onnx import TensorProto, helper, numpy_helper

import xir
from host_backend import HostBackend
from npu_runtime import SegmentType
from npu_runtime.sizes import SegmentSizes
from xrt import Device, HostDevice, Session, Tensor, plugins
from xrt.errors import InvalidArgumentError, UnsupportedOpError

SEGS = (SegmentType.WEIGHT, SegmentType.INSTR, SegmentType.FTMP)
#: the option that flips feature-map reuse away from the chip's default
FLIP_REUSE = {"zg330": ("disableEtmOptimize", False), "buyi": ("compressFtmp", True)}


def _init(name: str, shape: list, low: float = -0.3) -> onnx.TensorProto:
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    return numpy_helper.from_array(rng.uniform(low, 0.3, shape).astype(np.float32), name)


def conv_net() -> onnx.ModelProto:
    """Conv -> Relu -> Conv."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["y"])]
    inits = [_init("w0", [8, 3, 3, 3]), _init("b0", [8]), _init("w1", [4, 8, 1, 1])]
    return _model(nodes, inits, [1, 3, 8, 8])


def branchy_net() -> onnx.ModelProto:
    """Stem conv, two branches (3x3 conv / 1x1 conv) concatenated, a residual Add, MaxPool,
    a last conv: feature maps with overlapping lifetimes, so FTMP reuse changes the size."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["s"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["sr", "w2"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["m"]),
             helper.make_node("Add", ["m", "sr"], ["res"]),
             helper.make_node("MaxPool", ["res"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w4", "b4"], ["y"], pads=[1, 1, 1, 1])]
    inits = [_init("w0", [16, 3, 3, 3]), _init("b0", [16]), _init("w1", [8, 16, 3, 3]),
             _init("w2", [8, 16, 1, 1]), _init("w3", [16, 16, 1, 1]),
             _init("w4", [10, 16, 3, 3]), _init("b4", [10])]
    return _model(nodes, inits, [1, 3, 16, 16])


def _model(nodes, inits, shape) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


NETS = {"conv": (conv_net, (1, 3, 8, 8)), "branchy": (branchy_net, (1, 3, 16, 16))}
_CACHE: dict = {}


def compiled(target: str, net: str):
    if (target, net) not in _CACHE:
        make, shape = NETS[net]
        _CACHE[target, net] = compile_onnx(make(), shape, target)
    return _CACHE[target, net]


@pytest.fixture(params=sorted(CHIPS))
def chip(request):
    name, url = CHIPS[request.param]
    dev = Device.Open(url)
    yield request.param, plugins.backend_class(name), dev
    dev.close()


def as_map(sizes: SegmentSizes) -> dict:
    return {st: sizes[st] for st in SEGS}


def after_init(npu, dev, lowered, option: str | None = None) -> tuple[Session, dict]:
    s = Session.Create([npu, HostBackend], lowered.view(0), [dev, HostDevice.Default()])
    if option:
        getattr(s.backends[0], option)()
    seg = s.backends[0].logic_segment_map
    return s, {st: seg[st].byte_size for st in SEGS}


@pytest.mark.parametrize("net", sorted(NETS))
def test_query_size_equals_logic_segments_after_init(chip, net):
    target, npu, dev = chip
    c = compiled(target, net)
    sizes = npu.QuerySize(c.lowered.view(0))
    assert isinstance(sizes, SegmentSizes) and sizes.align == 4096
    assert sizes.weight > 0 and sizes.instr > 0 and sizes.ftmp > 0
    s, seg = after_init(npu, dev, c.lowered)
    s.close()
    assert as_map(sizes) == seg
    assert (sizes.weightSize, sizes.workSize) == (sizes.weight, sizes.ftmp)
    assert npu.query_size(c.lowered) == sizes  # a whole Network, the Pythonic alias
    # the other feature-map reuse setting, as the chip's option sets it
    option, reuse = FLIP_REUSE[target]
    flipped = npu.QuerySize(c.lowered.view(0), etm_reuse=reuse)
    s, seg = after_init(npu, dev, c.lowered, option)
    s.close()
    assert flipped.etm_reuse is reuse and as_map(flipped) == seg


def test_reuse_changes_the_ftmp_figure_of_a_branchy_network(chip):
    target, npu, _ = chip
    view = compiled(target, "branchy").lowered.view(0)
    on, off = npu.QuerySize(view, etm_reuse=True), npu.QuerySize(view, etm_reuse=False)
    assert on.ftmp < off.ftmp and (on.weight, on.instr) == (off.weight, off.instr)


def test_query_needs_no_device_and_no_parameter_data(chip):
    target, npu, _ = chip
    lowered = compiled(target, "branchy").lowered
    json_only = xir.Network.CreateFromJsonStr(lowered.dumpJsonToStr())  # no raw loaded
    assert all(p.data is None for p in json_only.params())
    assert npu.QuerySize(json_only.view(0)) == npu.QuerySize(lowered.view(0))


def test_user_chunks_of_the_queried_sizes_deploy_and_forward(chip):
    target, npu, dev = chip
    c = compiled(target, "branchy")
    sizes = npu.QuerySize(c.lowered.view(0))
    x = np.random.default_rng(3).normal(size=c.lowered.inputs()[0].shape).astype(np.float32)
    s0 = Session.Create([npu, HostBackend], c.lowered.view(0), [dev, HostDevice.Default()])
    s0.apply()
    want = [np.asarray(t).copy() for t in s0.forward([Tensor(x)])]
    s0.close()
    region = dev.defaultMemRegion()
    chunks = {st: region.malloc(sizes.chunk_bytes(st), True, sizes.align) for st in SEGS}
    s = Session.Create([npu, HostBackend], c.lowered.view(0), [dev, HostDevice.Default()])
    try:
        nb = s.backends[0]
        for st, chunk in chunks.items():
            nb.userReuseSegment(chunk, st)
        s.apply()
        got = [np.asarray(t).copy() for t in s.forward([Tensor(x)])]
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
        for st, chunk in chunks.items():  # deployed into the user's chunks
            assert nb.phy_segment_map[st].phy_addr == chunk.addr
    finally:
        s.close()
    small = region.malloc(sizes.weight - 1, True, sizes.align)  # one byte short: refused
    s = Session.Create([npu, HostBackend], c.lowered.view(0), [dev, HostDevice.Default()])
    try:
        with pytest.raises(InvalidArgumentError, match=f"{sizes.weight} are needed"):
            s.backends[0].userReuseSegment(small, SegmentType.WEIGHT)
    finally:
        s.close()


def test_refused_arguments(chip):
    target, npu, _ = chip
    other = next(t for t in CHIPS if t != target)
    with pytest.raises(UnsupportedOpError, match="compiled for"):
        npu.QuerySize(compiled(other, "conv").lowered.view(0))
    with pytest.raises(UnsupportedOpError, match="no HardOp"):
        npu.QuerySize(compiled(target, "conv").adapted.view(0))
    with pytest.raises(InvalidArgumentError, match="network or a network view"):
        npu.QuerySize("net.json")
    sizes = npu.QuerySize(compiled(target, "conv").lowered)
    with pytest.raises(InvalidArgumentError, match="WEIGHT, INSTR and FTMP only"):
        sizes[SegmentType.INPUT]
