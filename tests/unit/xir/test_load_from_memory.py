"""Networks loaded from memory: `Network.CreateFromJsonStr` and `loadParamsFromBuffer`
(zero-copy where the buffer allows, the buffer kept alive by the Params), the same checks as the
file path with "<buffer>" where a file name would be, and `dumpJsonToStr`/`dumpParamsToBuffer`."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

import xir
from xir import NetworkBuilder
from xir.serialize import load_network, save_network

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "conv2d_example.json"


def build(seed: int = 0) -> xir.Network:
    """Conv + relu + conv: three Params blobs."""
    rng = np.random.default_rng(seed)
    b = NetworkBuilder("mem")
    x = b.input([1, 6, 6, 3], layout="NHWC", name="x")
    w0 = b.params(rng.standard_normal((3, 3, 3, 8)).astype(np.float32), "w0", layout="HWIO")
    b0 = b.params(rng.standard_normal(8).astype(np.float32), "b0")
    y = b.relu(b.conv2d(x, w0, b0, pad_top=1, pad_bottom=1, pad_left=1, pad_right=1))
    w1 = b.params(rng.standard_normal((1, 1, 8, 5)).astype(np.float32), "w1", layout="HWIO")
    b.output(b.conv2d(y, w1))
    return b.build()


@pytest.fixture
def pair(tmp_path) -> tuple[str, bytes, xir.Network]:
    """(json text, raw bytes, the network loaded from the files)."""
    save_network(build(), tmp_path / "m.json")
    text = (tmp_path / "m.json").read_text(encoding="utf-8")
    raw = (tmp_path / "m.raw").read_bytes()
    return text, raw, load_network(tmp_path / "m.json")


def same_params(a: xir.Network, b: xir.Network) -> None:
    pa, pb = a.params(), b.params()
    assert [p.v_id for p in pa] == [p.v_id for p in pb] and pa
    for p, q in zip(pa, pb):
        assert p.data.dtype == q.data.dtype and p.data.tobytes() == q.data.tobytes()


def addresses(buf: np.ndarray) -> tuple[int, int]:
    return buf.ctypes.data, buf.ctypes.data + buf.nbytes


def inside(arr: np.ndarray, lo_hi: tuple[int, int]) -> bool:
    lo, hi = lo_hi
    return lo <= arr.ctypes.data and arr.ctypes.data + arr.nbytes <= hi


# --- json ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["str", "bytes", "bytearray", "memoryview"])
def test_json_from_memory_equals_file(pair, kind):
    text, raw, ref = pair
    data = {"str": text, "bytes": text.encode(), "bytearray": bytearray(text.encode()),
            "memoryview": memoryview(text.encode())}[kind]
    net = xir.Network.CreateFromJsonStr(data)
    assert net.opIds() == ref.opIds() and net.params_md5 == ref.params_md5
    assert all(p.data is None for p in net.params())
    assert net.loadParamsFromBuffer(raw) is net
    same_params(net, ref)
    assert xir.Network.from_json is xir.Network.CreateFromJsonStr


def test_json_errors_name_the_buffer(pair):
    text = pair[0]
    with pytest.raises(xir.JsonSyntaxError) as info:
        xir.Network.CreateFromJsonStr(text[:-10])
    assert info.value.file == "<buffer>" and str(info.value).startswith("<buffer>:")
    bad = text.replace('"stride_height": 1', '"stride_heigth": 1', 1)
    with pytest.raises(xir.FieldTypeError, match="stride_heigth") as info:
        xir.Network.CreateFromJsonStr(bad)
    assert info.value.file == "<buffer>" and info.value.op_id is not None
    with pytest.raises(xir.NetworkFormatError, match="str or bytes"):
        xir.Network.CreateFromJsonStr(42)  # type: ignore[arg-type]
    with pytest.raises(xir.NetworkFormatError, match="file name: use CreateFromJsonFile"):
        xir.Network.CreateFromJsonStr("out/yolov5s_ZG.json")


# --- raw: zero copy --------------------------------------------------------------------------

def test_bytes_give_read_only_views_into_the_buffer(pair):
    text, raw, ref = pair
    net = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(raw)
    span = addresses(np.frombuffer(raw, np.uint8))
    for p in net.params():
        assert not p.data.flags.writeable and p.data.flags.aligned
        assert inside(p.data, span)  # a view, no copy
    with pytest.raises(ValueError, match="read-only"):
        net.params()[0].data[...] = 0
    same_params(net, ref)


def test_bytearray_gives_writable_views_that_see_the_callers_writes(pair):
    text, raw, _ = pair
    buf = bytearray(raw)
    net = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(buf)
    p = net.params()[0]
    assert p.data.flags.writeable
    off = p.data.ctypes.data - np.frombuffer(buf, np.uint8).ctypes.data
    buf[off:off + 4] = np.float32(123.5).tobytes()
    assert p.data.reshape(-1)[0] == np.float32(123.5)
    with pytest.raises(BufferError):  # the exporter is pinned while the Params use it
        buf.extend(b"x")


@pytest.mark.parametrize("kind", ["memoryview", "readonly_memoryview", "numpy", "numpy_ro"])
def test_other_buffers_are_viewed_in_place(pair, kind):
    text, raw, ref = pair
    arr = np.frombuffer(bytearray(raw), np.uint8)
    data = {"memoryview": memoryview(arr), "readonly_memoryview": memoryview(raw),
            "numpy": arr, "numpy_ro": np.frombuffer(raw, np.uint8)}[kind]
    net = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(data)
    span = addresses(np.frombuffer(data, np.uint8))
    assert all(inside(p.data, span) for p in net.params())
    assert all(p.data.flags.writeable == (kind in ("memoryview", "numpy"))
               for p in net.params())
    same_params(net, ref)


def test_buffer_lives_as_long_as_the_params_use_it(pair):
    text, raw, ref = pair
    arr = np.frombuffer(bytearray(raw), np.uint8).copy()
    gone = weakref.ref(arr)
    net = xir.Network.CreateFromJsonStr(text).load_params_from_buffer(arr)
    del arr
    gc.collect()
    assert gone() is not None  # the network still needs it
    same_params(net, ref)
    del net
    gc.collect()
    assert gone() is None  # released with the network


@pytest.mark.parametrize("kind", ["unaligned", "strided"])
def test_unaligned_or_strided_buffers_are_copied(pair, kind):
    text, raw, ref = pair
    if kind == "unaligned":
        big = np.zeros(len(raw) + 64, np.uint8)
        big[1:1 + len(raw)] = np.frombuffer(raw, np.uint8)
        data = big[1:1 + len(raw)]
    else:
        big = np.zeros(2 * len(raw), np.uint8)
        big[::2] = np.frombuffer(raw, np.uint8)
        data = big[::2]
    net = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(data)
    for p in net.params():
        assert p.data.flags.aligned and not np.shares_memory(p.data, big)
    same_params(net, ref)


# --- raw: the same checks as a file ----------------------------------------------------------

def test_corrupted_buffer_is_a_checksum_error_naming_the_buffer(pair):
    text, raw, _ = pair
    bad = bytearray(raw)
    bad[-1] ^= 0xFF
    net = xir.Network.CreateFromJsonStr(text)
    with pytest.raises(xir.RawChecksumError) as info:
        net.loadParamsFromBuffer(bytes(bad))
    assert info.value.file == "<buffer>" and "<buffer>" in str(info.value)
    assert all(p.data is None for p in net.params())  # nothing changed


@pytest.mark.parametrize("cut,err", [(5, xir.RawTruncatedError), (-3, xir.RawTruncatedError),
                                     ("junk", xir.RawSizeError), ("magic", xir.RawMagicError)])
def test_truncated_or_damaged_buffers(pair, cut, err):
    text, raw, _ = pair
    data = raw + b"junk" if cut == "junk" else b"X" + raw[1:] if cut == "magic" else raw[:cut]
    with pytest.raises(err) as info:
        xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(data)
    assert info.value.file == "<buffer>"


@pytest.mark.parametrize("thing", ["a string", [1, 2, 3], 12, None])
def test_non_buffers_are_refused(pair, thing):
    net = xir.Network.CreateFromJsonStr(pair[0])
    with pytest.raises(xir.RawFileError, match="bytes, bytearray, memoryview") as info:
        net.loadParamsFromBuffer(thing)  # type: ignore[arg-type]
    assert info.value.file == "<buffer>"
    assert ("loadParamsFromFile" in str(info.value)) == isinstance(thing, str)


def test_file_path_still_gives_writable_arrays():
    net = load_network(EXAMPLE)
    assert all(p.data.flags.writeable for p in net.params())


# --- dumping to memory -----------------------------------------------------------------------

def test_dump_to_memory_is_what_save_writes(tmp_path):
    net = build(seed=3)
    text, raw = net.dumpJsonToStr(), net.dumpParamsToBuffer()
    save_network(net, tmp_path / "m.json")
    assert raw == (tmp_path / "m.raw").read_bytes()
    assert text == (tmp_path / "m.json").read_text(encoding="utf-8")
    back = xir.Network.CreateFromJsonStr(text).loadParamsFromBuffer(raw)
    same_params(back, net)


def test_a_network_from_memory_runs_like_the_file_one(pair):
    from host_backend import HostBackend
    from xrt import HostDevice, Session, Tensor

    text, raw, ref = pair
    mem = xir.Network.CreateFromJsonStr(text.encode()).loadParamsFromBuffer(raw)
    x = np.random.default_rng(1).standard_normal((1, 6, 6, 3)).astype(np.float32)
    outs = []
    for net in (ref, mem):
        s = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
        s.apply()
        outs.append(np.asarray(s.forward([Tensor(x)])[0]).copy())
        s.close()
    assert outs[0].tobytes() == outs[1].tobytes() and np.abs(outs[0]).max() > 0


def test_damaged_buffers_only_ever_raise_xir_errors(pair):
    """200 random damages (byte flips, cuts, insertions) of the raw, through every buffer kind:
    each is refused with an XirError naming <buffer> (the md5 covers every byte, padding
    included) and the network is left unchanged."""
    text, raw, _ = pair
    rng = np.random.default_rng(11)
    kinds = [bytes, bytearray, memoryview, lambda b: np.frombuffer(bytearray(b), np.uint8)]
    for k in range(200):
        data = bytearray(raw)
        what = k % 3
        at = int(rng.integers(0, len(data)))
        if what == 0:
            data[at] ^= int(rng.integers(1, 256))
        elif what == 1:
            del data[at:]
        else:
            data[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 70)), dtype=np.uint8))
        net = xir.Network.CreateFromJsonStr(text)
        with pytest.raises(xir.XirError) as info:
            net.loadParamsFromBuffer(kinds[k % 4](bytes(data)))
        assert info.value.file == "<buffer>"
        assert all(p.data is None for p in net.params())
