"""Compile time work (issue 30.5) must not change what a compile writes: the same bytes at
any thread count, and the cost of an int16 raise counted on the very int8 network the
mixed-precision search started from, which the pipeline keeps (written once, read back)
instead of quantizing it a third time."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcompile.pipeline as pipeline
from xcompile.pipeline import DEFAULTS, compile_model

SHAPE = (1, 3, 16, 16)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("XRT_PROGRESS", "0")


def _digests(folder) -> dict[str, str]:
    return {f: hashlib.md5((folder / f).read_bytes()).hexdigest()
            for f in sorted(os.listdir(folder))}


def test_compile_writes_the_same_bytes_at_any_thread_count(tmp_path):
    """tiny_cnn for zg330 (calibration, GPTQ, probes and lowering) with the kernels' pool on
    one thread and on every thread Numba has: every stage's json and raw byte for byte."""
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    outs = []
    before = numba.get_num_threads()
    try:
        for k, threads in enumerate([1, most]):
            numba.set_num_threads(threads)
            out = tmp_path / f"t{k}"
            compile_model({**DEFAULTS, "model": "tiny_cnn", "target": "zg330",
                           "output": str(out), "calib_count": 2})
            outs.append(_digests(out))
    finally:
        numba.set_num_threads(before)
    assert len(outs[0]) >= 10 and any(f.endswith("_ZG.raw") for f in outs[0])
    assert outs[0] == outs[1]


def _three_convs(rng: np.random.Generator) -> onnx.ModelProto:
    """conv_a -> relu -> conv_b -> relu -> conv_c (3x3, 64 channels). conv_b writes one
    channel 1000x larger than the rest, which conv_c does not read: in int8 the channels conv_c
    reads round to nothing, and raising conv_c to int16 repairs it."""
    wa = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    wb = rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32)
    wb[0] *= 1000.0
    wc = rng.normal(0, 0.3, (64, 8, 3, 3)).astype(np.float32)
    wc[:, 0] = 0.0
    inits = [numpy_helper.from_array(a, n) for a, n in ((wa, "wa"), (wb, "wb"), (wc, "wc"))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1] * 4, name="conv_a"),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["ar", "wb"], ["b"], pads=[1] * 4, name="conv_b"),
             helper.make_node("Relu", ["b"], ["br"], name="relu_b"),
             helper.make_node("Conv", ["br", "wc"], ["y"], pads=[1] * 4, name="conv_c")]
    graph = helper.make_graph(
        nodes, "three_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_raise_is_costed_on_the_int8_network_the_search_held(tmp_path, monkeypatch):
    """With a raise kept, the int8 network is quantized once (then only the search's raises),
    not again for the cost of the raise; its cycles equal those of the int8 network quantized
    afresh (the former path), and its temporary copy is not left in the output folder."""
    import xir

    rng = np.random.default_rng(0)
    path = tmp_path / "net.onnx"
    onnx.save(_three_convs(rng), str(path))
    cal = tmp_path / "cal"
    cal.mkdir()
    for k in range(3):
        np.save(cal / f"{k}.npy", rng.normal(0, 1, SHAPE).astype(np.float32))
    calls = []
    quantize_network = pipeline.quantize_network

    def counted(*args, **kw):
        calls.append(kw.get("op_bits"))
        return quantize_network(*args, **kw)

    monkeypatch.setattr(pipeline, "quantize_network", counted)
    opts = {**DEFAULTS, "model": str(path), "calib": str(cal), "output": str(tmp_path / "o"),
            "method": "minmax", "target": "zg330", "max_int16": "100%"}
    written = compile_model(opts)
    mp = xir.Network.CreateFromJsonFile(written["ZG"]).tags["quantization"]["mixed_precision"]
    assert mp["raised"] == ["conv_c"]
    assert not calls[0] and all(calls[1:])  # int8 once, then only the search's raises
    assert sorted(os.listdir(tmp_path / "o")) == sorted(
        os.path.basename(p)[:-len(".json")] + ext for p in written.values()
        for ext in (".json", ".raw"))
    # the former path: the int8 network quantized again, lowered, one cycles-only forward
    from xcompile.passes import optimize
    from xcompile.quant.calibrate import load_calibration
    from xcompile.quant.qdq import import_qdq
    from xrt import plugins

    optimized = optimize(import_qdq(str(path), None))
    samples = load_calibration(str(cal), optimized)
    fresh = pipeline._int8_cycles(optimized, samples, opts, None, plugins.target("zg330"),
                                  "three_convs")
    assert mp["cycles_int8"] == fresh and 0 < fresh < mp["cycles_mixed"]
