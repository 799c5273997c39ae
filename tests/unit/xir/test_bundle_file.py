"""`xir.Bundle` (issue 29, point 6; docs/xir-format.md, "Bundles"): members sharing their
weight blocks, in one file. Built from small lowered-like networks (HardOps with instruction
words and a weight block at an ETM address): equal blocks become one Params for every member,
laid out once above every member's addresses, the lowered address kept; the file round-trips
from a path and from a buffer; every damage is refused naming what is damaged."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from xir import INT8, NetworkBuilder, TensorType
from xir.bundle import BUNDLE_MAGIC, LOWERED_AT
from xir.errors import (
    FieldTypeError,
    NetworkFileNotFoundError,
    NetworkFormatError,
    RawChecksumError,
    RawSizeError,
    RawTruncatedError,
    XirError,
)
from xir.values import MemType


def _member(size: int, seed: int = 0) -> xir.Network:
    """Input -> three HardOps -> Output, as a lowering lays them out: weight blocks from ETM
    address 64, 64-aligned; the second block's bytes depend on `size` (a pool over the input),
    so it differs between members and shifts the third."""
    rng = np.random.default_rng(seed)
    b = NetworkBuilder("toy")
    x = b.input([1, size], dtype=INT8)
    blocks = [rng.integers(0, 255, 100, dtype=np.uint8),
              np.full(10 + size, size % 251, np.uint8),
              rng.integers(0, 255, 70, dtype=np.uint8)]
    v = b.add(x, b.params(np.arange(size, dtype=np.int8).reshape(1, size) % 3, "host.bias"))
    v = b.multiply(v, b.params(np.full((1, 1), 2, np.int8), "host.scale"))  # same in all
    addr = 64
    for i, blk in enumerate(blocks):
        instr = b.params(np.arange(4, dtype=np.uint64) + 100 * i + size, f"l{i}.instr")
        w = b.params(blk, f"l{i}.weights")
        w.mtype = MemType("etm", addr)
        instr.mtype = MemType("etm", 4096 + 64 * i)
        v = b.op("HardOp", [v], out_types=[TensorType(INT8, [1, size])], instr=instr,
                 params=[w], name=f"l{i}", compile_target="@zhuget(330)",
                 device_info={"layers": 1})
        v.mtype = MemType("etm", 2048 + 256 * i)
        addr += (blk.nbytes + 63) // 64 * 64
    b.output(v)
    return b.build()


def _bundle() -> xir.Bundle:
    return xir.Bundle.from_networks({"s8": _member(8), "s16": _member(16), "s24": _member(24)},
                                    name="toy")


def _weights(net):
    return [op.params[0] for op in net.ops if op.op_type == "HardOp"]


def test_equal_blocks_become_one_params_laid_out_once():
    lowered = {k: [p.mtype.addr for p in _weights(_member(n))]
               for k, n in (("s8", 8), ("s16", 16), ("s24", 24))}
    bundle = _bundle()
    assert bundle.names() == ["s8", "s16", "s24"]
    nets = [bundle.network(k) for k in bundle.names()]
    w = [_weights(n) for n in nets]
    assert w[0][0] is w[1][0] is w[2][0] and w[0][2] is w[1][2] is w[2][2]
    assert len({id(x[1]) for x in w}) == 3  # the size-bound block: one per member
    assert len(bundle.blocks) == 2 + 3
    assert bundle.shared_bytes < bundle.separate_bytes()
    # the union starts above everything a member uses, shared blocks first
    assert bundle.weight_base >= 4096 + 3 * 64 and bundle.weight_base % (1 << 20) == 0
    assert w[0][0].mtype.addr == bundle.weight_base
    assert sorted(p.mtype.addr for p in bundle.blocks)[-1] < \
        bundle.weight_base + bundle.weight_bytes
    for k, net in zip(bundle.names(), nets):  # the instructions' address is kept
        hard = [op for op in net.ops if op.op_type == "HardOp"]
        assert [op.device_info[LOWERED_AT] for op in hard] == lowered[k]
        assert net.tags["bundle"]["member"] == k
    # a block's offsets never overlap
    spans = sorted((p.mtype.addr, p.mtype.addr + p.storageBytes()) for p in bundle.blocks)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("via", ["file", "buffer", "bytearray"])
def test_round_trip(tmp_path, via):
    bundle = _bundle()
    if via == "file":
        path = tmp_path / "toy_ZG.bundle"
        bundle.save(path)
        again = xir.Bundle.CreateFromFile(path)
    else:
        data = bundle.dumpToBuffer()
        again = xir.Bundle.CreateFromBuffer(data if via == "buffer" else bytearray(data))
    assert again.names() == bundle.names() and again.name == "toy"
    assert (again.weight_base, again.weight_bytes) == (bundle.weight_base, bundle.weight_bytes)
    for k in bundle.names():
        a, b = bundle.network(k), again.network(k)
        assert a.dumpJsonToStr() == b.dumpJsonToStr()
        for p, q in zip(a.params(), b.params()):
            np.testing.assert_array_equal(p.data, q.data)
    w = [_weights(again.network(k)) for k in again.names()]
    assert w[0][0] is w[1][0] is w[2][0]  # still one object per shared block
    assert again.dumpToBuffer() == bundle.dumpToBuffer()
    if via == "buffer":  # views into the caller's bytes: read-only
        assert not w[0][0].data.flags.writeable


def test_host_constants_equal_in_members_are_one_params():
    bundle = _bundle()
    nets = [bundle.network(k) for k in bundle.names()]
    scale = [next(op for op in n.ops if op.op_type == "Multiply").inputs[1] for n in nets]
    bias = [next(op for op in n.ops if op.op_type == "Add").inputs[1] for n in nets]
    assert scale[0] is scale[1] is scale[2] and bundle.host_params == [scale[0]]
    assert len({id(p) for p in bias}) == 3  # their shape follows the input: one each
    again = xir.Bundle.CreateFromBuffer(bytearray(bundle.dumpToBuffer()))
    scale = [next(op for op in again.network(k).ops if op.op_type == "Multiply").inputs[1]
             for k in again.names()]
    assert scale[0] is scale[1] is scale[2]
    scale[0].setData(np.full((1, 1), 3, np.int8))  # a host refit through one member
    assert int(scale[2].data[0, 0]) == 3


def test_new_data_through_one_member_is_every_members():
    bundle = xir.Bundle.CreateFromBuffer(bytearray(_bundle().dumpToBuffer()))
    a, c = (bundle.network(k) for k in ("s8", "s24"))
    new = np.zeros(100, np.uint8)
    _weights(a)[0].setData(new)
    np.testing.assert_array_equal(_weights(c)[0].data, new)


def test_a_bundle_of_bundle_members_keeps_the_lowered_addresses():
    first = _bundle()
    lowered = [op.device_info[LOWERED_AT] for op in first.network("s16").ops
               if op.op_type == "HardOp"]
    again = xir.Bundle.from_networks({"a": first.network("s16"), "b": _member(40)}, name="x")
    assert [op.device_info[LOWERED_AT] for op in again.network("a").ops
            if op.op_type == "HardOp"] == lowered
    assert again.weight_base > first.weight_base  # above the first union too


def test_unknown_member_is_an_xir_error():
    bundle = _bundle()
    with pytest.raises(xir.BundleMemberNotFoundError, match=r"no member 's9'.*'s8', 's16'"):
        bundle.network("s9")
    with pytest.raises(XirError):
        bundle.network(8)


def _section_offset(data: bytes, which: str, member: str | None = None) -> int:
    """Absolute offset of a section of the bundle file, read from its manifest."""
    import json
    import struct

    _, _, _, n, _ = struct.unpack_from("<8sIIQ16s", data, 0)
    man = json.loads(data[40:40 + n])
    start = (40 + n + 63) // 64 * 64
    if which == "block":
        return start + man["blocks"][0]["offset"]
    m = next(m for m in man["members"] if m["name"] == member)
    return start + (m["json"]["offset"] if which == "json" else m["params"][0]["offset"])


@pytest.mark.parametrize("where, error, match", [
    ("json", RawChecksumError, r"member 's16': the md5 of its network json"),
    ("params", RawChecksumError, r"member 's16': the md5 of its params v_id \d+"),
    ("block", RawChecksumError, r"weight block 'l0.weights'.*md5 of its data"),
    ("manifest", RawChecksumError, "manifest's md5"),
])
def test_a_corrupted_bundle_is_refused_naming_the_part(where, error, match):
    data = bytearray(_bundle().dumpToBuffer())
    at = 60 if where == "manifest" else _section_offset(bytes(data), where, "s16") + 3
    data[at] ^= 0x5A
    with pytest.raises(error, match=match) as info:
        xir.Bundle.CreateFromBuffer(bytes(data))
    assert info.value.file == "<buffer>"


def test_truncated_padded_and_foreign_files_are_refused(tmp_path):
    data = _bundle().dumpToBuffer()
    with pytest.raises(RawTruncatedError, match="manifest says"):
        xir.Bundle.CreateFromBuffer(data[:-10])
    with pytest.raises(RawSizeError, match="manifest says"):
        xir.Bundle.CreateFromBuffer(data + b"\0")
    with pytest.raises(RawTruncatedError, match="header"):
        xir.Bundle.CreateFromBuffer(data[:20])
    with pytest.raises(NetworkFormatError, match="not an xir bundle"):
        xir.Bundle.CreateFromBuffer(b"\xA5ICRAFT_RAW\xA5" + data[12:])
    assert data.startswith(BUNDLE_MAGIC)
    with pytest.raises(NetworkFileNotFoundError):
        xir.Bundle.CreateFromFile(tmp_path / "missing.bundle")
    with pytest.raises(NetworkFormatError, match="for a file use CreateFromFile"):
        xir.Bundle.CreateFromBuffer("toy.bundle")
    with pytest.raises(XirError, match="buffer"):
        xir.Bundle.CreateFromBuffer(12)


def test_what_cannot_be_bundled_is_refused():
    with pytest.raises(NetworkFormatError, match="at least one member"):
        xir.Bundle.from_networks({})
    with pytest.raises(FieldTypeError, match="not an xir Network"):
        xir.Bundle.from_networks({"a": object()})
    net = _member(8)
    with pytest.raises(NetworkFormatError, match="same network object"):
        xir.Bundle.from_networks([("a", net), ("b", net)])
    with pytest.raises(NetworkFormatError, match="two members are named 'a'"):
        xir.Bundle.from_networks([("a", net), ("a", _member(8))])
    other = _member(16)
    for op in other.ops:
        if op.op_type == "HardOp":
            op.compile_target = "@fmsh(buyi)"
    with pytest.raises(NetworkFormatError, match="lowered for one target"):
        xir.Bundle.from_networks({"a": _member(8), "b": other})
    bare = xir.Network.CreateFromJsonStr(_member(8).dumpJsonToStr())  # no raw loaded
    with pytest.raises(FieldTypeError, match="has no weight data"):
        xir.Bundle.from_networks({"a": bare})
