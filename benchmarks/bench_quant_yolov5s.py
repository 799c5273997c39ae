"""Quantization time of yolov5s, and the int8 integer reference against onnxruntime int8 (QDQ).

Target (issue 3): the HostBackend integer-reference forward of yolov5s-int8 at most 3x
onnxruntime's int8 QDQ model of the same network (onnxruntime's own static quantizer, same
calibration images), same run, one thread.
"""

import time

import numpy as np
import pytest
from helpers import interleaved_best, load_average, ort_session

from host_backend import HostBackend
from xcompile import zoo
from xcompile.passes import optimize
from xcompile.quant.quantize import quantize_network
from xrt import HostDevice, Session, Tensor

SIZE = 640


@pytest.fixture(scope="module")
def yolo():
    net = zoo.build("yolov5s", input_size=SIZE)
    calib = zoo.calibration_set("yolov5s", count=4, input_size=SIZE)
    return net, calib


def test_quantize_yolov5s_time(benchmark, yolo):
    net, calib = yolo
    opt = optimize(net)
    t0 = time.perf_counter()
    qnet = benchmark.pedantic(lambda: quantize_network(opt, calib, bits=8, method="kl"),
                              rounds=1, iterations=1)
    benchmark.extra_info["quantize_s"] = time.perf_counter() - t0
    assert any(v.dtype.is_quantized() for op in qnet.ops for v in op.outputs)


def test_int8_reference_vs_onnxruntime_qdq(benchmark, yolo, tmp_path):
    ort_quant = pytest.importorskip("onnxruntime.quantization")
    from xcompile.frontend.onnx_export import export_onnx

    net, calib = yolo
    qnet = quantize_network(optimize(net), calib, bits=8, method="kl")
    sess = Session.Create([HostBackend], qnet.view(0), [HostDevice.Default()])
    sess.apply()
    inp = [Tensor(calib[0][0])]

    fp32_path, qdq_path = tmp_path / "yolo.onnx", tmp_path / "yolo_qdq.onnx"
    import onnx

    export_onnx(net, str(fp32_path))
    name = onnx.load(str(fp32_path)).graph.input[0].name

    class Reader(ort_quant.CalibrationDataReader):
        def __init__(self):
            self.items = iter([{name: np.ascontiguousarray(s[0].transpose(0, 3, 1, 2))}
                               for s in calib])

        def get_next(self):
            return next(self.items, None)

    ort_quant.quantize_static(str(fp32_path), str(qdq_path), Reader(),
                              quant_format=ort_quant.QuantFormat.QDQ, per_channel=True,
                              activation_type=ort_quant.QuantType.QInt8,
                              weight_type=ort_quant.QuantType.QInt8)
    ort = ort_session(qdq_path.read_bytes())
    feed = {name: np.ascontiguousarray(calib[0][0].transpose(0, 3, 1, 2))}

    benchmark.pedantic(lambda: sess.forward(inp), rounds=2, warmup_rounds=1)
    ours_s, ort_s = interleaved_best([lambda: sess.forward(inp), lambda: ort.run(None, feed)],
                                     rounds=3, warmup=1)
    ratio = ours_s / ort_s
    benchmark.extra_info.update(int_ref_ms=ours_s * 1e3, ort_int8_ms=ort_s * 1e3, ratio=ratio)
    print(f"\nyolov5s int8: integer reference {ours_s * 1e3:.0f} ms, onnxruntime QDQ "
          f"{ort_s * 1e3:.0f} ms, ratio {ratio:.2f} ({load_average()})")
    assert ratio <= 3.0, f"integer reference is {ratio:.2f}x onnxruntime int8 (target <= 3x)"
