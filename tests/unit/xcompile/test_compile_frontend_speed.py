"""The compile's non-quantization costs (issue 30.5) without changing what it writes: the
optimize stage shares its source's weights read-only instead of copying them, and the stage
writer encodes each json node once. Byte-identity and immutability, no timings."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest

import xir
from xcompile.passes import copy_network, optimize
from xir.serialize.json import encode
from xir.serialize.json.write import dump_pair


def _net(rng: np.random.Generator) -> xir.Network:
    """Conv -> BatchNorm -> Relu -> Conv: the BatchNorm folds (new weights), the second
    convolution's weights pass through untouched."""
    b = xir.NetworkBuilder("speed")
    x = b.input([1, 6, 6, 3], layout="NHWC")
    y = b.conv2d(x, rng.normal(0, 0.5, (3, 3, 3, 4)).astype(np.float32),
                 rng.normal(0, 0.1, 4).astype(np.float32))
    c = 4
    y = b.batch_norm2d(y, rng.uniform(0.5, 1.5, c).astype(np.float32),
                       rng.normal(0, 0.2, c).astype(np.float32),
                       rng.normal(0, 0.2, c).astype(np.float32),
                       rng.uniform(0.5, 1.5, c).astype(np.float32), epsilon=1e-3)
    y = b.relu(y)
    b.output(b.conv2d(y, rng.normal(0, 0.5, (1, 1, 4, 2)).astype(np.float32)))
    return b.build()


def test_optimize_shares_weights_read_only_and_leaves_its_input_alone():
    net = _net(np.random.default_rng(0))
    before = {p.v_id: p.data.copy() for p in net.params()}
    src = {p.v_id: p.data for p in net.params()}
    opt = optimize(net)
    convs = [op for op in opt.ops if op.op_type == "Conv2d"]
    assert len(convs) == 2 and "BatchNorm2d" not in [op.op_type for op in opt.ops]
    # the source network: same arrays, same values, still writable
    for p in net.params():
        assert p.data is src[p.v_id] and p.data.flags.writeable
        np.testing.assert_array_equal(p.data, before[p.v_id])
    shared = [p for p in opt.params() if p.v_id in src
              and np.shares_memory(p.data, src[p.v_id])]
    assert shared, "the untouched convolution's weights should be shared, not copied"
    for p in shared:
        assert not p.data.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            p.data[...] = 0  # a pass writing in place fails loudly
    folded = convs[0].inputs[1]  # BatchNorm folding built new weights
    assert not np.shares_memory(folded.data, src[folded.v_id])
    np.testing.assert_array_equal(net.params()[0].data, before[net.params()[0].v_id])


def test_copy_network_is_a_read_only_view_of_every_weight():
    net = _net(np.random.default_rng(1))
    cp = copy_network(net)
    assert [p.v_id for p in cp.params()] == [p.v_id for p in net.params()]
    for a, b in zip(net.params(), cp.params()):
        assert a is not b and np.shares_memory(a.data, b.data)
        assert a.data.flags.writeable and not b.data.flags.writeable
    assert dump_pair(cp)[1] == dump_pair(net)[1]


def _old_pretty(obj, indent=0, ascii_only=False, width=100):
    """The writer's layout as it was first written (every node encoded on one line at every
    level above it): the reference the faster one must equal byte for byte."""
    def flat_of(o):
        return json.dumps(o, ensure_ascii=ascii_only, allow_nan=False,
                          default=encode._json_default, separators=(", ", ": "))

    flat = flat_of(obj)
    if len(flat) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 2)
    if isinstance(obj, list):
        items = [pad + _old_pretty(x, indent + 2, ascii_only, width) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{flat_of(str(k))}: {_old_pretty(v, indent + 2, ascii_only, width)}"
             for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


@pytest.mark.parametrize("ascii_only", [False, True])
def test_json_layout_is_the_same_text(ascii_only):
    net = optimize(_net(np.random.default_rng(2)))
    obj = encode.network_to_dict(net)
    obj["tags"]["odd"] = {"é\u4e2d" * 30: [1.5, {"k": list(range(40))}], "x" * 96: 1,
                          "e": {}, "l": [[]] * 40, "a": np.arange(50), "t": (1, 2) * 30,
                          7: "int key", "n": [-0.0, 1e300, 5e-324, 2**70, True, None, 0.1,
                                              np.float64(2.5), np.int64(-3), 1.5e16]}
    want = _old_pretty(obj, ascii_only=ascii_only) + "\n"
    assert encode.dumps(obj, ascii_only=ascii_only) == want


def test_unwritable_tags_still_fail_before_anything_is_written(tmp_path):
    net = _net(np.random.default_rng(3))
    net.tags["bad"] = {"x" * 200: object()}
    with pytest.raises(xir.XirError, match="cannot be written as json"):
        net.save(tmp_path / "n.json")
    assert list(tmp_path.iterdir()) == []
    net.tags["bad"] = {"x" * 200: 1, (1, 2): 3}  # a key json cannot hold, in a long object
    with pytest.raises(xir.XirError, match="cannot be written as json"):
        encode.dumps(encode.network_to_dict(net))
    net.tags["bad"] = {"x" * 200: [float("nan")]}
    with pytest.raises(xir.XirError, match="cannot be written as json"):
        encode.dumps(encode.network_to_dict(net))


def test_raw_written_from_the_arrays_equals_their_bytes(tmp_path):
    """The raw writer hands each array's buffer to the file and md5 (no tobytes copy): the
    same bytes and md5 as the arrays' own bytes, for every dtype and a 0-d array."""
    from xir.serialize.raw import write_raw_stream

    b = xir.NetworkBuilder("dtypes")
    x = b.input([1, 2, 2, 3], layout="NHWC")
    b.output(b.add(x, np.float32(2.0)))
    net = b.build()
    for k, arr in enumerate([np.arange(6, dtype=np.int16).reshape(2, 3),
                             np.array([True, False, True]), np.float16([1.5, -2]),
                             np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
                             np.array(3, dtype=np.int8)]):
        net.newParams(arr, f"p{k}")
    params = net.params()
    buf = io.BytesIO()
    size, md5 = write_raw_stream(buf, params)
    data = buf.getvalue()
    assert size == len(data) and md5 == hashlib.md5(data).hexdigest()
    from xir.serialize.raw import raw_layout

    _, offsets, _ = raw_layout([p.storageBytes() for p in params])
    for p, off in zip(params, offsets):
        want = np.ascontiguousarray(p.data).tobytes()
        assert data[off:off + len(want)] == want


@pytest.mark.parametrize("shape,perm", [((300, 700), (1, 0)), ((64, 48, 3, 3), (2, 3, 1, 0)),
                                        ((7, 300, 5, 40), (3, 1, 0, 2)), ((2, 3), (1, 0))])
def test_importer_c_order_is_the_transposed_array(shape, perm):
    from xcompile.frontend.onnx_import.importer import c_order

    a = np.random.default_rng(4).normal(size=shape).astype(np.float32).transpose(perm)
    got = c_order(a)
    assert got.flags.c_contiguous and got.dtype == a.dtype and got.shape == a.shape
    assert got.tobytes() == np.ascontiguousarray(a).tobytes()


def _pack_reference(w, groups, dtype):
    """The MPE layout read off its definition: [g][ob][ky][kx][ib][i][o] holds
    w[ky, kx, ib*ICB + i, g*cout_g + ob*OCB + o], 0 outside the weights."""
    from npu_model.asm import DEFAULT

    kh, kw, cin_g, cout = w.shape
    cout_g = cout // groups
    cu, ocb = DEFAULT.channel_unit(dtype), DEFAULT.oc_block(dtype)
    nob, nib = -(-cout_g // ocb), -(-cin_g // cu)
    out = np.zeros((groups, nob, kh, kw, nib, cu, ocb), w.dtype)
    c = np.arange(nib * cu).reshape(nib, cu)
    o = np.arange(nob * ocb).reshape(nob, ocb)
    for g in range(groups):
        for ob in range(nob):
            for ib in range(nib):
                ci, oi = c[ib][:, None], o[ob][None, :]
                ok = (ci < cin_g) & (oi < cout_g)
                vals = w[:, :, np.minimum(ci, cin_g - 1), g * cout_g + np.minimum(oi, cout_g - 1)]
                out[g, ob, :, :, ib] = np.where(ok, vals, 0)
    return out.astype(w.dtype.newbyteorder("<")).view(np.uint8).ravel()


@pytest.mark.parametrize("dtype", ["int8", "int16"])
@pytest.mark.parametrize("shape,groups", [((3, 3, 3, 16), 1), ((1, 1, 70, 45), 1),
                                          ((3, 3, 8, 12), 2), ((5, 3, 5, 12), 4)])
def test_pack_conv_weights_matches_the_mpe_layout(shape, groups, dtype):
    from npu_model.asm import pack_conv_weights

    info = np.iinfo(dtype)
    w = np.random.default_rng(5).integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    got = pack_conv_weights(w, groups, dtype)
    assert got.dtype == np.uint8
    assert got.tobytes() == _pack_reference(w, groups, np.dtype(dtype).name).tobytes()
