"""Compile time and peak resident memory of `xrt compile` for a VGG-class model: the onnx
package's light vgg19 (143 M parameters, 575 MB of float weights) with seeded weights, compiled
for zg330 in a child process so its own peak is measured.

Target (issue 10): peak RSS <= 3x the float model's bytes + 1 GB. Slow (a few minutes on this
shared machine): `-m slow`.
"""

import numpy as np
import pytest
from bench_compile import compile_child
from helpers import load_average

pytest.importorskip("onnx")
pytestmark = pytest.mark.slow


def test_vgg19_compile_memory(benchmark, tmp_path):
    import onnx
    from corpus import images, light_model

    model = light_model("vgg19")
    float_bytes = sum(int(np.prod(i.dims)) * 4 for i in model.graph.initializer)
    path = tmp_path / "vgg19.onnx"
    onnx.save(model, path)
    del model
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, im in enumerate(images((1, 3, 224, 224), 4)):
        np.save(cal / f"{k}.npy", im)
    args = ["compile", str(path), "--target", "zg330", "--calib", str(cal), "-o",
            str(tmp_path / "out")]
    seconds, cpu, peak = benchmark.pedantic(lambda: compile_child(args), rounds=1, iterations=1)
    limit = 3 * float_bytes + 1e9
    benchmark.extra_info.update(seconds=round(seconds, 1), cpu_seconds=round(cpu, 1),
                                peak_rss_gb=round(peak / 1e9, 3), load=load_average())
    print(f"\nvgg19 compile: {seconds:.0f} s wall, {cpu:.0f} s CPU, peak RSS "
          f"{peak / 1e9:.2f} GB, float model "
          f"{float_bytes / 1e6:.0f} MB, target <= {limit / 1e9:.2f} GB ({load_average()})")
    assert peak <= limit, f"peak RSS {peak / 1e9:.2f} GB > {limit / 1e9:.2f} GB"
