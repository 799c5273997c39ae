"""HostBackend per-op dispatch: a chain of 200 Relus on a 1x1x1x8 map, where the kernels do
almost nothing and the time is the session's and the backend's own. Beside it, interleaved:
the same 200 numpy calls alone (the kernels' floor) and onnxruntime running the chain.

Target (the speed issue): at most 10 us per op above the numpy floor.
"""

import numpy as np
from helpers import interleaved_best, load_average, ort_session

from host_backend import HostBackend
from xcompile.frontend.onnx_export import export_onnx
from xir import NetworkBuilder
from xrt import HostDevice, Session, Tensor

N = 200


def test_host_dispatch_per_op(benchmark):
    b = NetworkBuilder("relu_chain")
    y = b.input([1, 1, 1, 8], layout="NHWC")
    for _ in range(N):
        y = b.relu(y)
    b.output(y)
    net = b.build()
    sess = Session.Create([HostBackend], net.view(0), [HostDevice.Default()])
    sess.apply()
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 1, 1, 8)
    inp = [Tensor(a)]
    ort = ort_session(export_onnx(net).SerializeToString())
    feed = {ort.get_inputs()[0].name: np.ascontiguousarray(a.transpose(0, 3, 1, 2))}

    def numpy_floor():
        z = a
        for _ in range(N):
            z = np.maximum(z, np.float32(0))
        return z

    benchmark.pedantic(lambda: sess.forward(inp), rounds=20, warmup_rounds=2)
    ours, floor, theirs = interleaved_best(
        [lambda: sess.forward(inp), numpy_floor, lambda: ort.run(None, feed)], rounds=30)
    per_op = (ours - floor) / N * 1e6
    benchmark.extra_info.update(per_op_us=per_op, onnxruntime_per_op_us=theirs / N * 1e6)
    np.testing.assert_array_equal(np.asarray(sess.forward(inp)[0]), np.maximum(a, 0))
    print(f"\nHostBackend dispatch {per_op:.1f} us per op above numpy's "
          f"{floor / N * 1e6:.1f} us; onnxruntime {theirs / N * 1e6:.1f} us per node "
          f"({load_average()})")
    assert per_op <= 10.0, f"HostBackend dispatch {per_op:.1f} us per op (target <= 10 us)"
