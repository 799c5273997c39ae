"""xir.serialize: vendor-style json + raw round trips, and one pytest.raises test per invariant."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import op_family_nets
import pytest

import xir
from xir import BF16, FP32, INT8, Layout, MemType, NetworkBuilder, QuantizedType, TensorType
from xir.serialize import (
    RAW_ALIGN,
    RAW_MAGIC,
    load_json,
    load_network,
    loads,
    network_from_dict,
    network_to_dict,
    read_raw,
    read_raw_bytes,
    save_network,
)
from xir.serialize.json import dumps

DATA = Path(__file__).resolve().parents[2] / "data"
EXAMPLE = DATA / "conv2d_example.json"


# --- networks --------------------------------------------------------------------------------

def build_all_ops() -> xir.Network:
    """A network using every registered op type, quantized types, tiled layouts and mtypes."""
    rng = np.random.default_rng(7)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    b = NetworkBuilder("all_ops", framework_kind="onnx", framework_version="1.15",
                       icraft_version="0.1.0", tags={"origin": "test", "nested": {"a": [1, 2]}})
    x = b.input([1, 8, 8, 4], layout="NHWC", name="image")
    c = b.conv2d(x, b.params(f32(3, 3, 4, 8), "w0", layout="HWIO"), b.params(f32(8), "b0"),
                 pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, name="conv0")
    bn = b.batch_norm2d(c, f32(8), f32(8), f32(8), np.abs(f32(8)) + 1, epsilon=1e-3)
    r = b.relu(bn)  # max_value = inf
    r6 = b.relu(r, max_value=6.0, alpha=0.1, name="relu6")
    mp = b.max_pool2d(r6, pool_height=2, pool_width=2, stride_height=2, stride_width=2)
    ap = b.avg_pool2d(mp, pool_height=3, pool_width=3, pad_top=1, pad_bottom=1, pad_left=1,
                      pad_right=1, count_include_pad=True, ceil_mode=True)
    ct = b.conv_transpose2d(ap, f32(2, 2, 8, 4), stride_height=2, stride_width=2)
    s1, s2, s3 = b.split(ct, axis=3, sections=[1, 1, 2])
    cat = b.concat(s1, s2, s3, axis=-1)
    add = b.add(cat, cat)
    sub = b.sub(add, f32(4))
    mul = b.multiply(sub, np.array([True, False, True, True]))
    sg = b.sigmoid(mul)
    si = b.silu(sg)
    hs = b.hardswish(b.tanh(b.gelu(b.erf(b.power(si, power=-0.5, scale=2.0, shift=1.0)))))
    up = b.upsample(hs, scale_height=2, scale_width=2)
    rs = b.resize(up, out_height=5, out_width=7, mode="bilinear", coordinate_mode="align_corners")
    pd = b.pad(rs, pad_before=[0, 1, 0, 0], pad_after=[0, 0, 1, 0], mode="edge")
    sl = b.slice(pd, begin=[0, 0, 0, 0], end=[1, 6, 8, 4], step=[1, 2, 1, 1])
    sl = b.op("ChannelShuffle", [sl], groups=2)
    tr = b.transpose(sl, perm=[0, 3, 1, 2])
    rh = b.reshape(tr, shape=[1, 4, -1])
    uq = b.unsqueeze(rh, axes=[0])
    sq = b.squeeze(uq, axes=[0])
    mm = b.matmul(sq, f32(24, 6), f32(6))
    sm = b.softmax(mm, axis=-1)
    ln, _, _ = b.layer_norm(sm, f32(6), f32(6), axis=-1, epsilon=1e-3, stats=True)
    ln = b.div(ln, b.sqrt(b.reduce_mean(b.multiply(ln, ln), axes=[-1], keepdims=True)))
    gn = b.group_norm(b.lrn(hs, size=3, alpha=2e-4, beta=0.5, bias=2.0), f32(4), f32(4),
                      num_groups=2)
    # hardware path: align, cast to a tiled quantized layout, HardOp, cast back, prune
    al = b.align_axis(c, axis=3, align_unit=16)
    q = QuantizedType(INT8, 0.05, 3)
    hw_t = TensorType(q, [1, 1, 8, 8, 16], "NCHWc16")
    cq = b.cast(al, out_types=[hw_t])
    instr = b.params(np.arange(12, dtype=np.uint64) * 0x0101010101010101, "instr")
    wq = b.params(rng.integers(-128, 128, (16, 16), dtype=np.int8), "hw_w",
                  element=QuantizedType(INT8, np.linspace(0.01, 0.02, 16), 0, axis=1))
    hb = b.params(rng.integers(-1000, 1000, 16, dtype=np.int32), "hw_b")
    hard = b.op("HardOp", [cq], out_types=[hw_t], instr=instr, params=[wq, hb],
                compile_target="@zhuget(330)", origin_ops_id=[1, 2], layer_count=3,
                device_info={"npu": "zg330", "cu": 16}, sub_hard_ops=[7, 8])
    cf = b.cast(hard, out_types=[TensorType(FP32, [1, 8, 8, 16], "NHWC")])
    pr = b.prune_axis(cf, axis=3, size=8)
    h16 = b.multiply(pr, b.params(np.ones(8, np.float16), "half"))
    hbf = b.add(h16, b.params(np.zeros(8, np.uint16), "bf", element=BF16))
    h16b = b.add(hbf, b.params(np.arange(8, dtype=np.int16), "i16"))
    b.output(ln, gn, h16b)
    net = b.build()
    # memory types as a compiler would set them
    hard_op = next(op for op in net.ops if op.op_type == "HardOp")
    hard_op.inputs[0].mtype = MemType("ocm", 0x200)
    hard_op.outputs[0].mtype = MemType("etm", 0x1000)
    instr.mtype = MemType("chunk", 0x40, chunk_id=2)
    wq.mtype = MemType("etm", 0x40)
    hard_op.outputs[0].tags["real"] = True
    net.getOpById(1).tags["fused"] = ["bn"]
    net.validate()
    return net


def build_conv2d_example() -> xir.Network:
    """The network of docs/xir-format.md and tests/data/conv2d_example.json."""
    b = NetworkBuilder("conv2d_example", framework_kind="onnx", framework_version="1.15",
                       icraft_version="0.1.0")
    x = b.input([1, 4, 4, 2], layout="NHWC", name="image")
    w = b.params(((np.arange(36, dtype=np.float32) - 18) / 8).reshape(3, 3, 2, 2),
                 "conv1.weight", layout="HWIO")
    bias = b.params(np.array([0.5, -0.25], np.float32), "conv1.bias", layout="C")
    y = b.conv2d(x, w, bias, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, name="conv1")
    y.name = "conv1.out"
    z = b.relu(y, name="relu1")
    z.name = "relu1.out"
    b.output(z)
    return b.build()


def canon(net: xir.Network) -> dict:
    obj = network_to_dict(net)
    obj.pop("params_bytes")
    obj.pop("params_md5")
    return obj


def assert_same(a: xir.Network, b: xir.Network) -> None:
    assert canon(a) == canon(b)
    pa, pb = a.params(), b.params()
    assert [p.v_id for p in pa] == [p.v_id for p in pb]
    for p, q in zip(pa, pb):
        assert q.data.dtype == p.data.dtype and q.data.shape == p.data.shape
        assert q.data.tobytes() == p.data.tobytes()


@pytest.fixture(scope="module")
def all_ops() -> xir.Network:
    return build_all_ops()


@pytest.fixture
def saved(tmp_path, all_ops):
    """(json path, raw path) of the all-ops network."""
    jp = tmp_path / "net.json"
    save_network(all_ops, jp)
    return jp, tmp_path / "net.raw"


@pytest.fixture(scope="module")
def small_dict() -> dict:
    """The json object of the example network (params_md5 matching its raw)."""
    return json.loads(EXAMPLE.read_text())


def op_obj(obj: dict, op_type: str) -> dict:
    return next(o for o in obj["ops"] if o["_type_key"] == f"icraft::xir::{op_type}")


# --- round trips -----------------------------------------------------------------------------

def _family_nets() -> list[xir.Network]:
    """The op-family networks of tests/support/op_family_nets.py (OnnxGraph's needs onnx)."""
    nets = [op_family_nets.pointwise_net(), op_family_nets.reduce_index_net(),
            op_family_nets.recurrent_net()]
    try:
        import onnx  # noqa: F401
    except ImportError:
        return nets
    return nets + [op_family_nets.onnx_graph_net()]


def test_every_registered_op_is_covered(all_ops):
    covered = {op.op_type for net in [all_ops, *_family_nets()] for op in net.ops}
    missing = sorted(set(xir.OP_REGISTRY) - covered)
    assert not missing, f"add these op types to build_all_ops() or op_family_nets: {missing}"


@pytest.mark.parametrize("index", range(4))
def test_op_family_networks_round_trip(index, tmp_path):
    nets = _family_nets()
    if index >= len(nets):
        pytest.skip("onnx is not installed")
    net = nets[index]
    save_network(net, tmp_path / "f.json")
    back = load_network(tmp_path / "f.json")
    assert_same(net, back)
    for p, q in zip(net.params(), back.params()):
        np.testing.assert_array_equal(p.data, q.data)
    save_network(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "f.json").read_bytes()


def test_json_raw_round_trip(saved, all_ops):
    jp, rp = saved
    assert rp.exists()
    loaded = load_network(jp)
    assert_same(all_ops, loaded)
    assert loaded.source_file == str(jp)
    assert loaded.params_bytes == rp.stat().st_size == all_ops.params_bytes
    assert loaded.params_md5 == hashlib.md5(rp.read_bytes()).hexdigest()
    # writing the loaded network again gives byte-identical files
    save_network(loaded, jp.with_name("again.json"))
    assert jp.with_name("again.json").read_bytes() == jp.read_bytes()
    assert jp.with_name("again.raw").read_bytes() == rp.read_bytes()


def test_round_trip_details(saved):
    jp, _ = saved
    net = load_network(jp)
    relus = [op for op in net.ops if op.op_type == "Relu"]
    assert relus[0].max_value == float("inf") and relus[1].max_value == 6.0
    assert relus[1].alpha == pytest.approx(0.1)
    split = next(op for op in net.ops if op.op_type == "Split")
    assert [v.shape[3] for v in split.outputs] == [1, 1, 2]
    hard = next(op for op in net.ops if op.op_type == "HardOp")
    assert hard.instr.data.dtype == np.uint64
    assert hard.instr.data[1] == 0x0101010101010101
    assert hard.instr.mtype == MemType("chunk", 0x40, 2)
    assert hard.inputs[0].mtype.encode() == "@ocm(0x200)"
    assert hard.outputs[0].mtype.encode() == "@etm(0x1000)"
    assert hard.outputs[0].dtype.layout == Layout("NCHWc16")
    assert hard.outputs[0].dtype.element_dtype == QuantizedType(INT8, 0.05, 3)
    wq = hard.params[0]
    assert wq.dtype.element_dtype.axis == 1 and wq.dtype.element_dtype.scale.size == 16
    assert hard.compile_target == "@zhuget(330)"
    assert hard.device_info == {"npu": "zg330", "cu": 16} and hard.layer_count == 3
    assert hard.origin_ops_id == [1, 2] and hard.sub_hard_ops == [7, 8]
    # one object per v_id: the cast output read by the HardOp is the cast's output object
    cast = net.ops[net.index(hard.op_id) - 1]
    assert cast.outputs[0] is hard.inputs[0]
    assert hard.inputs[0].producer is cast and hard in hard.inputs[0].consumers
    # fresh ids come after the loaded ones
    assert net.newOpId() > max(net.opIds())
    assert net.newVId() > max(p.v_id for p in net.params())
    # params are writable views
    hard.params[1].data[0] = 1


def test_inf_encoding_in_text(saved):
    text = saved[0].read_text()
    assert '"max_value": "inf"' in text
    assert "Infinity" not in text and "NaN" not in text


def test_float_attribute_nan_and_negative_inf_round_trip():
    b = NetworkBuilder("nan")
    x = b.input([1, 2, 2, 1])
    y = b.pad(x, pad_before=[0, 1, 1, 0], pad_after=[0, 0, 0, 0], value=float("nan"))
    b.output(b.relu(y, threshold=float("-inf")))
    net = loads(dumps(b.build()))
    assert np.isnan(net.ops[1].value) and net.ops[2].threshold == float("-inf")


def test_in_memory_round_trip(all_ops):
    obj = network_to_dict(all_ops)
    net = network_from_dict(copy.deepcopy(obj))
    assert canon(net) == canon(all_ops)
    assert network_to_dict(net) == obj


def test_sub_hard_ops_as_ops_round_trip():
    b = NetworkBuilder("merged")
    x = b.input([1, 4], dtype=INT8)
    instr = b.params(np.arange(4, dtype=np.uint64), "instr")
    inner = xir.HardOp([x], [xir.Value(90, TensorType(INT8, [1, 4]))], op_id=50, instr=instr,
                       layer_count=1)
    y = b.op("HardOp", [x], out_types=[TensorType(INT8, [1, 4])], instr=instr,
             sub_hard_ops=[inner, 3])
    b.output(y)
    net = b.build()
    again = network_from_dict(network_to_dict(net))
    sub = again.ops[1].sub_hard_ops
    assert isinstance(sub[0], xir.HardOp) and sub[0].op_id == 50 and sub[1] == 3
    assert sub[0].instr is again.ops[1].instr  # same v_id, same object
    assert network_to_dict(again) == network_to_dict(net)


def test_unicode_names_and_empty_params(tmp_path):
    b = NetworkBuilder("网络")
    x = b.input([1, 0], name="输入")
    y = b.add(x, b.params(np.zeros((1, 0), np.float32), "空"))
    b.output(y)
    net = b.build()
    save_network(net, tmp_path / "u.json")
    again = load_network(tmp_path / "u.json")
    assert again.name == "网络" and again.ops[0].outputs[0].name == "输入"
    assert again.params()[0].data.shape == (1, 0)


def test_network_without_params(tmp_path):
    b = NetworkBuilder("noparams")
    b.output(b.relu(b.input([2, 3])))
    net = b.build()
    save_network(net, tmp_path / "n.json")
    raw = (tmp_path / "n.raw").read_bytes()
    assert raw == RAW_MAGIC + b"\0\0\0\0"
    load_network(tmp_path / "n.json")


def test_network_methods_use_serializer(tmp_path, all_ops):
    all_ops.save(tmp_path / "m.json")
    net = xir.Network.CreateFromJsonFile(tmp_path / "m.json")
    assert all(not p.hasData() for p in net.params())
    net.loadParamsFromFile(tmp_path / "m.raw")
    assert_same(all_ops, net)


def test_raw_layout(saved, all_ops):
    _, rp = saved
    raw = rp.read_bytes()
    params = all_ops.params()
    assert raw[:12] == RAW_MAGIC
    count = int.from_bytes(raw[12:16], "little")
    assert count == len(params)
    pos = -(-(16 + 12 * count) // RAW_ALIGN) * RAW_ALIGN
    for i, p in enumerate(params):
        entry = raw[16 + 12 * i: 28 + 12 * i]
        v_id = int.from_bytes(entry[:4], "little", signed=True)
        off = int.from_bytes(entry[4:], "little")
        assert v_id == p.v_id and off == pos and off % RAW_ALIGN == 0
        assert raw[off:off + p.storageBytes()] == p.data.astype(p.data.dtype.newbyteorder("<"))\
            .tobytes()
        end = off + p.storageBytes()
        pos = -(-end // RAW_ALIGN) * RAW_ALIGN
    assert end == len(raw)


# --- the documented example ------------------------------------------------------------------

def test_conv2d_example_parses_and_validates():
    net = load_network(EXAMPLE)
    net.validate()
    conv = net.ops[1]
    assert conv.op_type == "Conv2d"
    assert (conv.stride_height, conv.pad_top, conv.groups, conv.padding_mode) == \
        (1, 1, 1, "zeros")
    assert conv.inputs[1].dtype.layout == Layout("HWIO")
    assert conv.outputs[0].shape == (1, 4, 4, 2)
    assert_same(build_conv2d_example(), net)


def test_conv2d_example_files_are_what_the_writer_writes(tmp_path):
    """The raw is byte-identical; the json too, except for op attributes added since the file was
    made (a file without them reads them at their defaults). Regenerate with
    `python tests/unit/xir/test_xir_serialize.py --regen` and paste into docs/xir-format.md."""
    save_network(build_conv2d_example(), tmp_path / "conv2d_example.json")
    assert (tmp_path / "conv2d_example.raw").read_bytes() == EXAMPLE.with_suffix(".raw")\
        .read_bytes()
    written = json.loads((tmp_path / "conv2d_example.json").read_text())
    on_disk = json.loads(EXAMPLE.read_text())
    for w_op, f_op in zip(written["ops"], on_disk["ops"]):
        attrs = xir.OP_REGISTRY[w_op["_type_key"].split("::")[-1]].ATTRS
        for key in set(w_op) - set(f_op):
            assert key in attrs, f"the writer adds {key!r}, which is no attribute"
            del w_op[key]
    assert written == on_disk


def test_conv2d_example_is_in_the_docs():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "xir-format.md").read_text()
    assert EXAMPLE.read_text().strip() in doc


# --- atomic writes ---------------------------------------------------------------------------

def test_failed_save_leaves_old_files_and_no_temp(tmp_path, all_ops):
    jp = tmp_path / "net.json"
    save_network(all_ops, jp)
    before = (jp.read_bytes(), jp.with_suffix(".raw").read_bytes())
    broken = build_all_ops()
    broken.params()[0]._data = None
    with pytest.raises(xir.FieldTypeError, match="no data"):
        save_network(broken, jp)
    broken = build_all_ops()
    broken.tags["bad"] = float("inf")
    with pytest.raises(xir.FieldTypeError, match="json"):
        save_network(broken, jp)
    assert (jp.read_bytes(), jp.with_suffix(".raw").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "net.raw"]


def _pair(jp):
    """What a loader sees: the params of the pair at `jp` (or the error it raises)."""
    net = load_network(jp)
    return [np.asarray(p.data).tobytes() for p in net.params()]


@pytest.mark.parametrize("step", range(8))
def test_a_failure_at_any_save_step_leaves_the_old_or_the_new_pair(tmp_path, all_ops,
                                                                   monkeypatch, step):
    """Every os call a save makes (temporary files, writes, fsyncs, renames) fails in turn,
    as a full disk would: afterwards the loader reads the old pair or the new one."""
    jp = tmp_path / "net.json"
    save_network(all_ops, jp)
    old = _pair(jp)
    changed = build_all_ops()
    changed.params()[0]._data = np.asarray(changed.params()[0]._data) * 0 + 1
    calls = {"n": 0}
    real = {name: getattr(os, name) for name in ("replace", "fsync", "fdopen")}

    def failing(name):
        def call(*a, **k):
            calls["n"] += 1
            if calls["n"] == step + 1:
                raise OSError(28, f"No space left on device ({name})")
            return real[name](*a, **k)
        return call

    for name in real:
        monkeypatch.setattr(os, name, failing(name))
    failed = False
    try:
        save_network(changed, jp)
    except OSError:
        failed = True
    monkeypatch.undo()
    got = _pair(jp)
    save_network(changed, tmp_path / "new.json")
    new = _pair(tmp_path / "new.json")
    assert got in (old, new)
    if not failed:
        assert got == new and step >= calls["n"]
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("net."))
    assert names[:2] == ["net.json", "net.raw"] and not [n for n in names if n.endswith(".tmp")]


def test_a_save_killed_between_its_renames_is_read_as_the_new_pair(tmp_path, all_ops):
    """The state a kill after the json's rename leaves: new json, old raw, the new raw under
    its content-addressed name. The loader reads the new pair; the next save tidies up."""
    jp = tmp_path / "net.json"
    save_network(all_ops, jp)
    old_raw = jp.with_suffix(".raw").read_bytes()
    changed = build_all_ops()
    changed.params()[0]._data = np.asarray(changed.params()[0]._data) * 0 + 1
    save_network(changed, jp)
    new = _pair(jp)
    staged = tmp_path / f"net.raw.{changed.params_md5}"
    jp.with_suffix(".raw").rename(staged)
    jp.with_suffix(".raw").write_bytes(old_raw)
    assert _pair(jp) == new
    save_network(changed, jp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "net.raw"]


def test_saved_files_follow_the_umask(tmp_path, all_ops):
    old = os.umask(0o027)
    try:
        save_network(all_ops, tmp_path / "net.json")
    finally:
        os.umask(old)
    assert {(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {0o640}


def test_save_refuses_invalid_network(tmp_path):
    net = build_conv2d_example()
    net.ops[1].attrs["stride_height"] = 2
    with pytest.raises(xir.ShapeMismatchError):
        save_network(net, tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


# --- one pytest.raises per invariant: json ---------------------------------------------------

def test_bad_json_syntax_names_position():
    text = '{\n  "_type_key": "icraft::xir::Network",\n  "ops": [1,,2]\n}'
    with pytest.raises(xir.JsonSyntaxError) as info:
        loads(text, file="bad.json")
    err = info.value
    assert (err.line, err.column) == (3, 13) and err.position == text.index(",,") + 1
    assert "bad.json" in str(err) and "line 3 column 13" in str(err)


def test_non_utf8_bytes_name_position():
    with pytest.raises(xir.JsonSyntaxError) as info:
        loads(b'{"name": "\xff"}')
    assert info.value.position == 10 and info.value.line == 1


def test_nan_and_deep_nesting_are_syntax_errors():
    with pytest.raises(xir.JsonSyntaxError):
        loads('{"a": NaN}')
    with pytest.raises(xir.JsonSyntaxError):
        loads("[" * 100000 + "]" * 100000)


def test_top_level_must_be_network():
    with pytest.raises(xir.FieldTypeError, match="object"):
        loads("[]")
    with pytest.raises(xir.FieldTypeError, match="Network"):
        loads('{"_type_key": "icraft::xir::Value"}')


def test_unknown_type_key(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["_type_key"] = "icraft::xir::Frobnicate"
    with pytest.raises(xir.UnknownTypeKeyError) as info:
        network_from_dict(obj, file="net.json")
    assert info.value.op_id == 1 and "net.json" in str(info.value) and "Frobnicate" in str(
        info.value)


def test_unknown_type_key_of_a_value(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["inputs"][1]["_type_key"] = "icraft::xir::Tensor"
    with pytest.raises(xir.UnknownTypeKeyError) as info:
        network_from_dict(obj)
    assert info.value.field == "inputs[1]._type_key"


def test_missing_field(small_dict):
    obj = copy.deepcopy(small_dict)
    del op_obj(obj, "Conv2d")["outputs"]
    with pytest.raises(xir.MissingFieldError) as info:
        network_from_dict(obj, file="net.json")
    err = info.value
    assert (err.op_id, err.field) == (1, "outputs")
    assert "net.json: op 1: field 'outputs'" in str(err)


def test_missing_nested_field(small_dict):
    obj = copy.deepcopy(small_dict)
    del op_obj(obj, "Conv2d")["inputs"][1]["dtype"]["shape"]
    with pytest.raises(xir.MissingFieldError) as info:
        network_from_dict(obj)
    assert info.value.field == "inputs[1].dtype.shape"


def test_missing_required_attribute():
    b = NetworkBuilder("r")
    b.output(b.reshape(b.input([2, 3]), shape=[6]))
    obj = network_to_dict(b.build())
    del obj["ops"][1]["shape"]
    with pytest.raises(xir.MissingFieldError) as info:
        network_from_dict(obj)
    assert info.value.field == "shape" and info.value.op_id == 1


@pytest.mark.parametrize("path, bad", [
    (("op_id",), "1"),
    (("stride_height",), True),
    (("groups",), 1.0),
    (("padding_mode",), 0),
    (("inputs",), {"a": 1}),
    (("inputs", 0), [1]),
    (("inputs", 0, "v_id"), False),
    (("inputs", 0, "dtype"), "@fp(32)"),
    (("inputs", 0, "dtype", "shape"), [1, "4", 4, 2]),
    (("inputs", 0, "dtype", "element_dtype"), "@fp(31)"),
    (("inputs", 0, "mtype"), "@etm(zz)"),
    (("compile_target"), "gpu@"),
    (("tags",), []),
])
def test_wrong_field_type(small_dict, path, bad):
    obj = copy.deepcopy(small_dict)
    node = op_obj(obj, "Conv2d")
    path = (path,) if isinstance(path, str) else path
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(xir.FieldTypeError) as info:
        network_from_dict(obj, file="net.json")
    if path == ("op_id",):  # the op id itself is unreadable: the op's position is named
        assert info.value.op_id is None and info.value.field == "ops[1].op_id"
    else:
        assert info.value.op_id == 1 and info.value.field is not None


def test_wrong_network_field_type(small_dict):
    obj = copy.deepcopy(small_dict)
    obj["params_bytes"] = "264"
    with pytest.raises(xir.FieldTypeError, match="params_bytes"):
        network_from_dict(obj)


def test_unknown_field_in_current_version(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["stride_heigth"] = 2
    with pytest.raises(xir.FieldTypeError, match="stride_heigth"):
        network_from_dict(obj)
    obj["tags"]["xir_format"] = "1.99"  # a newer minor revision may add fields: ignored
    network_from_dict(obj)


def test_dangling_input(small_dict):
    obj = copy.deepcopy(small_dict)
    relu = op_obj(obj, "Relu")
    relu["inputs"][0]["v_id"] = 999
    with pytest.raises(xir.DanglingReferenceError) as info:
        network_from_dict(obj)
    assert info.value.op_id == relu["op_id"] and info.value.field == "inputs[0]"


def test_duplicate_op_id(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Relu")["op_id"] = op_obj(obj, "Conv2d")["op_id"]
    with pytest.raises(xir.DuplicateIdError, match="op_id 1"):
        network_from_dict(obj)


def test_duplicate_v_id_with_conflicting_definition(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Relu")["inputs"][0]["dtype"]["shape"] = [1, 4, 4, 3]
    with pytest.raises(xir.DuplicateIdError, match="v_id 3 .*dtype") as info:
        network_from_dict(obj)
    assert info.value.op_id == op_obj(obj, "Relu")["op_id"]


def test_duplicate_v_id_between_value_and_params(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["inputs"][1]["v_id"] = 0
    with pytest.raises(xir.DuplicateIdError, match="v_id 0"):
        network_from_dict(obj)


def test_ops_out_of_order_is_a_cycle(small_dict):
    obj = copy.deepcopy(small_dict)
    obj["ops"][1], obj["ops"][2] = obj["ops"][2], obj["ops"][1]
    with pytest.raises(xir.CycleError, match="execution order"):
        network_from_dict(obj)


def test_shape_mismatch(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["stride_height"] = 2
    with pytest.raises(xir.ShapeMismatchError) as info:
        network_from_dict(obj, file="net.json")
    assert info.value.op_id == 1 and "net.json" in str(info.value)


def test_newer_major_version_is_refused(small_dict):
    obj = copy.deepcopy(small_dict)
    obj["tags"]["xir_format"] = "2.0"
    with pytest.raises(xir.NetworkFormatError, match="newer than this reader"):
        network_from_dict(obj)


def test_bad_md5_text_is_refused(small_dict):
    obj = copy.deepcopy(small_dict)
    obj["params_md5"] = "xyz"
    with pytest.raises(xir.FieldTypeError, match="params_md5"):
        network_from_dict(obj)


def test_quantized_zero_point_out_of_range(small_dict):
    obj = copy.deepcopy(small_dict)
    for v in (op_obj(obj, "Relu")["inputs"][0], op_obj(obj, "Conv2d")["outputs"][0]):
        v["dtype"]["element_dtype"] = {"_type_key": "icraft::xir::QuantizedType",
                                       "storage": "@sint(8)", "scale": [0.5],
                                       "zero_point": [10**30], "axis": None}
    with pytest.raises(xir.FieldTypeError, match="zero_point"):
        network_from_dict(obj)


# --- one pytest.raises per invariant: raw ----------------------------------------------------

def test_raw_truncated(saved):
    jp, rp = saved
    net = load_json(jp)
    rp.write_bytes(rp.read_bytes()[:-10])
    with pytest.raises(xir.RawTruncatedError) as info:
        read_raw(net, rp)
    assert str(rp) in str(info.value)


def test_raw_truncated_header_and_blob():
    net = build_conv2d_example()  # in memory: no md5, so the structural checks speak
    raw = EXAMPLE.with_suffix(".raw").read_bytes()
    for cut in (5, 14, 30):
        with pytest.raises(xir.RawTruncatedError):
            read_raw_bytes(net, raw[:cut])
    with pytest.raises(xir.RawTruncatedError, match="blob"):
        read_raw_bytes(net, raw[:-3])


def test_raw_oversized(saved):
    jp, rp = saved
    net = load_json(jp)
    rp.write_bytes(rp.read_bytes() + b"\0" * 64)
    with pytest.raises(xir.RawSizeError, match="params_bytes"):
        read_raw(net, rp)


def test_raw_trailing_garbage_without_md5():
    net = build_conv2d_example()
    with pytest.raises(xir.RawSizeError, match="trailing"):
        read_raw_bytes(net, EXAMPLE.with_suffix(".raw").read_bytes() + b"junk")


def test_raw_wrong_magic(saved):
    jp, rp = saved
    net = load_json(jp)
    raw = bytearray(rp.read_bytes())
    raw[1:11] = b"ICRAFT_RAX"
    rp.write_bytes(bytes(raw))
    with pytest.raises(xir.RawMagicError):
        read_raw(net, rp)


def test_raw_md5_mismatch(saved):
    jp, rp = saved
    net = load_json(jp)
    raw = bytearray(rp.read_bytes())
    raw[-1] ^= 0x40
    rp.write_bytes(bytes(raw))
    with pytest.raises(xir.RawChecksumError, match="md5"):
        read_raw(net, rp)
    assert all(not p.hasData() for p in net.params())  # nothing half-filled


def _patch_md5(net: xir.Network, raw: bytes) -> None:
    net.params_bytes, net.params_md5 = len(raw), hashlib.md5(raw).hexdigest()


def test_raw_blob_size_mismatch(small_dict):
    obj = copy.deepcopy(small_dict)
    op_obj(obj, "Conv2d")["inputs"][1]["dtype"]["element_dtype"] = "@fp(16)"  # 72 bytes, not 144
    net = network_from_dict(obj)
    with pytest.raises(xir.RawSizeError, match="v_id 2 starts at offset 256") as info:
        read_raw(net, EXAMPLE.with_suffix(".raw"))
    assert info.value.field == "header[1]"


def test_raw_unknown_duplicate_and_missing_v_id():
    net = build_conv2d_example()
    raw = bytearray(EXAMPLE.with_suffix(".raw").read_bytes())
    first_v_id = raw[16:20]
    bad = bytearray(raw)
    bad[16:20] = (4242).to_bytes(4, "little")
    with pytest.raises(xir.RawFileError, match="4242"):
        read_raw_bytes(net, bytes(bad))
    bad = bytearray(raw)
    bad[28:32] = first_v_id
    with pytest.raises(xir.RawFileError, match="twice"):
        read_raw_bytes(net, bytes(bad))
    bad = bytearray(raw)
    bad[12:16] = (1).to_bytes(4, "little")
    with pytest.raises(xir.RawFileError):
        read_raw_bytes(net, bytes(bad))


def test_raw_errors_are_value_errors_too():
    assert issubclass(xir.RawChecksumError, ValueError)
    assert issubclass(xir.JsonSyntaxError, xir.NetworkFormatError)


if __name__ == "__main__" and "--regen" in sys.argv:
    os.makedirs(DATA, exist_ok=True)
    save_network(build_conv2d_example(), EXAMPLE)
    print(f"wrote {EXAMPLE} and {EXAMPLE.with_suffix('.raw')}")
