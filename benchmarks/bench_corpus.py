"""The corpus table of the README: the onnx package's light models with seeded weights,
compiled for zg330 by `xrt compile` in a child process (its time and peak RSS), run on
sim://zg330 against the integer reference (bit-exact?) and against onnxruntime float; our int8
output cosine next to onnxruntime's own int8 (quantize_static, QDQ, per-channel weights, the
same four calibration images).

    python -m pytest benchmarks/bench_corpus.py --benchmark-only -s      # prints the table
"""

import numpy as np
import pytest
from helpers import load_average, xrt_peak_rss

pytest.importorskip("onnxruntime")


def _compile(path, cal, out) -> tuple[float, int]:
    return xrt_peak_rss(["compile", str(path), "--target", "zg330", "--calib", str(cal), "-o",
                         str(out), "--name", path.stem])


def _row(name, tmp):
    import onnx
    import onnxruntime as ort
    from corpus import forward_once, images, light_model, load_stage

    from host_backend import HostBackend
    from xcompile.placement import placement
    from xcompile.quant.onnxruntime_int8 import quantize_static_int8
    from xcompile.quant.report import cosine
    from xrt import Device, HostDevice
    from zg330backend import ZG330Backend

    model = light_model(name)
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    del model
    cal = tmp / f"{name}_cal"
    cal.mkdir()
    samples = images(shape, 4)
    for k, im in enumerate(samples):
        np.save(cal / f"{k}.npy", im)
    seconds, rss = _compile(path, cal, tmp / name)

    def load(stage):
        return load_stage(tmp / name / f"{name}_{stage}.json")

    zg, adapted = load("ZG"), load("adapted")
    where = placement(zg, "zg330")
    x = images(shape, 1, seed=9)[0]
    dev = Device.Open("sim://zg330")
    chip, _ = forward_once(zg, [ZG330Backend, HostBackend], [dev, HostDevice.Default()], x)
    dev.close()
    ref, _ = forward_once(adapted, [HostBackend], [HostDevice.Default()], x)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    qs = ort.InferenceSession(quantize_static_int8(str(path), [[a] for a in samples],
                                                   str(tmp / f"{name}_int8.onnx")),
                              providers=["CPUExecutionProvider"])
    theirs = cosine(qs.run(None, {qs.get_inputs()[0].name: x})[0], want)
    host = ", ".join(f"{t} {n}" for c in where.host.values() for t, n in c.items()
                     if t not in ("Cast", "AlignAxis", "PruneAxis"))
    return (f"| {name} | {where.npu_ops} in {where.hardops} HardOps | {where.host_ops} "
            f"({host or 'edges only'}) | {cosine(chip, want):.4f} | {theirs:.4f} | "
            f"{'yes' if chip.tobytes() == ref.tobytes() else 'NO'} | {seconds:.0f} s | "
            f"{rss / 1e9:.2f} GB |")


def test_corpus_table(benchmark, tmp_path):
    from corpus import LIGHT

    def table() -> list[str]:
        rows = []
        for n in LIGHT:
            rows.append(_row(n, tmp_path))
            print(rows[-1], flush=True)
        return rows

    rows = benchmark.pedantic(table, rounds=1, iterations=1)
    print(f"\ncorpus on zg330 ({load_average()})")
    print("| network | ops on chip | ops on host | int8 cosine (ours) | onnxruntime int8 "
          "cosine | bit-exact | compile | peak RSS |")
    print("|---|---|---|---:|---:|---|---:|---:|")
    print("\n".join(rows))
    assert all("| NO |" not in r for r in rows)
