"""Mutated json and raw files either load (and validate) or raise an xir.XirError — nothing else.

The valid files are made once; each hypothesis case applies one mutation: truncation, bit flips,
deletion of a field anywhere in the json tree, replacing a node by a value of another json type,
duplicating / removing / moving list elements, and for the raw: truncation, bit flips, appended
bytes and header rewrites — half of the raw cases with the json's params_bytes/params_md5 patched
to match, so that the checks behind the md5 get exercised too.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation import at, paths

import xir
from xir import FP32, INT8, MemType, NetworkBuilder, QuantizedType, TensorType
from xir.serialize import (
    load_network,
    loads,
    network_from_dict,
    network_to_dict,
    read_raw_bytes,
    save_network,
)

JSON_CASES = 2000
RAW_CASES = 1000
FILE_CASES = 100


def _build() -> xir.Network:
    rng = np.random.default_rng(3)
    b = NetworkBuilder("mutant", framework_kind="onnx", tags={"k": [1, {"x": None}]})
    x = b.input([1, 4, 4, 3], layout="NHWC", name="in")
    c = b.conv2d(x, b.params(rng.standard_normal((3, 3, 3, 6)).astype(np.float32), "w",
                             layout="HWIO"),
                 b.params(rng.standard_normal(6).astype(np.float32), "b"),
                 pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, name="conv")
    r = b.relu(c)
    s1, s2 = b.split(r, axis=3, sections=[2, 4])
    cat = b.concat(s2, s1, axis=3)
    al = b.align_axis(cat, axis=3, align_unit=16)
    hw_t = TensorType(QuantizedType(INT8, 0.1, -2), [1, 1, 4, 4, 16], "NCHWc16")
    cq = b.cast(al, out_types=[hw_t])
    instr = b.params(np.arange(6, dtype=np.uint64) << np.uint64(40), "instr")
    wq = b.params(rng.integers(-128, 128, (16, 16), dtype=np.int8), "hw_w",
                  element=QuantizedType(INT8, np.linspace(0.01, 0.02, 16), 0, axis=0))
    hard = b.op("HardOp", [cq], out_types=[hw_t], instr=instr, params=[wq],
                compile_target="@zhuget(330)", origin_ops_id=[1, 2], layer_count=1,
                device_info={"cu": 16})
    cf = b.cast(hard, out_types=[TensorType(FP32, [1, 4, 4, 16], "NHWC")])
    pr = b.prune_axis(cf, axis=3, size=6)
    mx = b.max_pool2d(pr, pool_height=2, pool_width=2, stride_height=2, stride_width=2)
    b.output(b.reshape(mx, shape=[1, -1]))
    net = b.build()
    cq.mtype = MemType("ocm", 0x100)
    hard.mtype = MemType("etm", 0x2000)
    instr.mtype = MemType("chunk", 0x40, chunk_id=1)
    return net


def _make_files() -> tuple[bytes, bytes]:
    with tempfile.TemporaryDirectory() as d:
        save_network(_build(), os.path.join(d, "m.json"))
        with open(os.path.join(d, "m.json"), "rb") as f, open(os.path.join(d, "m.raw"), "rb") as g:
            return f.read(), g.read()


JSON_BYTES, RAW_BYTES = _make_files()
JSON_OBJ = json.loads(JSON_BYTES)


ALL_PATHS = paths(JSON_OBJ)
KEY_PATHS = [p for p in ALL_PATHS if p and isinstance(p[-1], str)]
LIST_PATHS = [p for p in ALL_PATHS if isinstance(at(JSON_OBJ, p), list) and at(JSON_OBJ, p)]
REPLACEMENTS = [
    None, True, False, 0, -1, 1, 7, 2**31, -(2**31) - 1, 2**64, 10**40, 0.5, -0.0, 1e308,
    "", "x", "inf", "-inf", "nan", "@fp(32)", "@sint(8)", "@layout(NHWC)", "@etm(0x40)",
    "@hostt", "icraft::xir::Value", [], [0], [1, 2], [-1], ["a"], [None], [[]], {}, {"a": 1},
    {"_type_key": "icraft::xir::Value"}, {"_type_key": "icraft::xir::Params", "v_id": 1},
    {"_type_key": "icraft::xir::TensorType", "element_dtype": "@fp(32)", "shape": []},
    {"_type_key": "icraft::xir::Relu"}, {"_type_key": "icraft::xir::Network"},
]


def _load_json_ok(data: bytes | str, raw: bytes = RAW_BYTES) -> None:
    """The property: load, validate, fill params; or an XirError naming the file."""
    try:
        net = loads(data, file="mutant.json")
    except xir.XirError as err:
        assert err.file == "mutant.json", err
        return
    net.validate()
    # whatever the reader accepts, the writer writes back and the reader accepts again
    again = network_from_dict(network_to_dict(net))
    assert network_to_dict(again) == network_to_dict(net)
    try:
        read_raw_bytes(net, raw, file="mutant.raw")
    except xir.XirError as err:
        assert err.file == "mutant.raw", err
        return
    assert all(p.hasData() for p in net.params())


# --- json ------------------------------------------------------------------------------------

@st.composite
def json_mutants(draw) -> bytes | str:
    kind = draw(st.sampled_from(["truncate", "bitflip", "delete", "swap", "list", "list",
                                 "swap"]))
    if kind == "truncate":
        return JSON_BYTES[:draw(st.integers(0, len(JSON_BYTES) - 1))]
    if kind == "bitflip":
        data = bytearray(JSON_BYTES)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
        return bytes(data)
    obj = json.loads(JSON_BYTES)
    if kind == "delete":
        path = draw(st.sampled_from(KEY_PATHS))
        del at(obj, path[:-1])[path[-1]]
    elif kind == "swap":
        path = draw(st.sampled_from(ALL_PATHS))
        new = draw(st.sampled_from(REPLACEMENTS))
        if path:
            at(obj, path[:-1])[path[-1]] = new
        else:
            obj = new
    else:
        path = draw(st.sampled_from(LIST_PATHS))
        items = at(obj, path)
        i = draw(st.integers(0, len(items) - 1))
        how = draw(st.sampled_from(["dup", "remove", "move"]))
        if how == "dup":
            items.insert(draw(st.integers(0, len(items))), json.loads(json.dumps(items[i])))
        elif how == "remove":
            del items[i]
        else:
            items.insert(draw(st.integers(0, len(items) - 1)), items.pop(i))
    return json.dumps(obj)


@settings(max_examples=JSON_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(json_mutants())
def test_mutated_json_loads_or_raises_xir_error(data):
    _load_json_ok(data)


def test_unmutated_files_load():
    _load_json_ok(JSON_BYTES)
    net = loads(JSON_BYTES)
    read_raw_bytes(net, RAW_BYTES)
    assert all(p.hasData() for p in net.params())


# --- raw -------------------------------------------------------------------------------------

def _patched_json(raw: bytes) -> bytes:
    obj = json.loads(JSON_BYTES)
    obj["params_bytes"] = len(raw)
    obj["params_md5"] = hashlib.md5(raw).hexdigest()
    return json.dumps(obj).encode()


@st.composite
def raw_mutants(draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "bitflip", "append", "header", "header"]))
    data = bytearray(RAW_BYTES)
    if kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif kind == "bitflip":
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif kind == "append":
        data += draw(st.binary(min_size=1, max_size=130))
    else:  # rewrite a header word: count, a v_id or an offset
        count = int.from_bytes(data[12:16], "little")
        spots = [(12, 4)] + [(16 + 12 * i, 4) for i in range(count)] + \
            [(20 + 12 * i, 8) for i in range(count)]
        at, size = draw(st.sampled_from(spots))
        value = draw(st.one_of(st.integers(0, 2 ** (8 * size) - 1), st.integers(0, 600)))
        data[at:at + size] = value.to_bytes(size, "little")
    return bytes(data)


@settings(max_examples=RAW_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw_mutants(), st.booleans())
def test_mutated_raw_loads_or_raises_xir_error(raw, patch):
    net = loads(_patched_json(raw) if patch else JSON_BYTES)
    try:
        read_raw_bytes(net, raw, file="mutant.raw")
    except xir.XirError as err:
        assert err.file == "mutant.raw"
        assert all(not p.hasData() for p in net.params()), "half-filled after an error"
        return
    assert patch or raw == RAW_BYTES, "a mutated raw passed the md5 check"
    for p in net.params():
        assert p.data.dtype == p.dtype.numpy_dtype and p.data.shape == p.dtype.shape


# --- through real files ------------------------------------------------------------------------

@settings(max_examples=FILE_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(json_mutants(), raw_mutants())
def test_mutated_file_pairs_load_or_raise_xir_error(tmp_path_factory, js, raw):
    d = tmp_path_factory.mktemp("pair")
    jp = d / "net.json"
    jp.write_bytes(js if isinstance(js, bytes) else js.encode())
    (d / "net.raw").write_bytes(raw)
    try:
        net = load_network(jp)
    except xir.XirError as err:
        assert err.file in (str(jp), str(d / "net.raw")), err
        return
    net.validate()
