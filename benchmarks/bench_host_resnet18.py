"""HostBackend float forward of resnet18 (1x224x224x3) against onnxruntime, same weights, same run.

Target (issue 11): HostBackend at most 1.5x onnxruntime's single-thread time. The float
convolutions run on the backend's own AVX-512 GEMM where the CPU has it (`host_backend.ops.sgemm`;
``HOST_GEMM=blas`` measures the numpy BLAS path instead).
"""

import numpy as np
from helpers import interleaved_best, load_average, ort_session

from host_backend import HostBackend
from xcompile import zoo
from xcompile.frontend.onnx_export import export_onnx
from xrt import HostDevice, Session, Tensor


def test_host_resnet18_vs_onnxruntime(benchmark):
    net = zoo.build("resnet18")
    x = zoo.calibration_set("resnet18", count=1)[0][0]
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    inp = [Tensor(x)]
    onnx_model = export_onnx(net)
    ort = ort_session(onnx_model.SerializeToString())
    feed = {ort.get_inputs()[0].name: np.ascontiguousarray(x.transpose(0, 3, 1, 2))}

    benchmark.pedantic(lambda: sess.forward(inp), rounds=3, warmup_rounds=1)
    host_s, ort_s = interleaved_best([lambda: sess.forward(inp), lambda: ort.run(None, feed)])
    ratio = host_s / ort_s
    benchmark.extra_info.update(host_ms=host_s * 1e3, onnxruntime_ms=ort_s * 1e3, ratio=ratio)
    ours = np.asarray(sess.forward(inp)[0])
    ref = ort.run(None, feed)[0]
    np.testing.assert_allclose(ours, ref.reshape(ours.shape), rtol=1e-3, atol=1e-3)
    print(f"\nresnet18 host {host_s * 1e3:.1f} ms, onnxruntime {ort_s * 1e3:.1f} ms, "
          f"ratio {ratio:.2f} ({load_average()})")
    assert ratio <= 1.5, f"HostBackend is {ratio:.2f}x onnxruntime (target <= 1.5x)"
