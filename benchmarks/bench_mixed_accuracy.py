"""The README's accuracy table, like with like: per corpus network (the onnx package's light
models with seeded weights, `tests/support/corpus.py`), on one held-out image against
onnxruntime's float run, each output measured per part (`xcompile.quant.parts`; the worst part
shown):

- our int8 only (`--min-cosine 0`: no automatic mixed precision);
- onnxruntime's own int8 (`quantize_static`, QDQ, per-channel weights) on the same four
  calibration images;
- our default compile (automatic mixed precision, `--min-cosine 0.99`, `--max-int16 10%`): its
  cosine, the int16 share of its MACs and the layers it raised.

The quantized stage runs on the HostBackend (the integer reference the chips match bit for
bit, tests/corpus). Slow (minutes): `python -m pytest benchmarks/bench_mixed_accuracy.py
--benchmark-only -s -m slow`; `XRT_ACCURACY_NETS=vgg19,resnet50` picks networks.
"""

import os

import numpy as np
import pytest
from helpers import load_average

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.slow


def _worst(net, reference: list[np.ndarray], got: list[np.ndarray]) -> tuple[str, float]:
    from xcompile.quant.mixed import part_cosines, worst_part

    return worst_part(part_cosines(net, [reference], [got]))


def _row(name: str, tmp) -> str:
    import onnx
    import onnxruntime as ort
    from corpus import images, light_model, load_stage

    from xcompile.pipeline import DEFAULTS, compile_model
    from xcompile.quant.calibrate import run_float
    from xcompile.quant.onnxruntime_int8 import quantize_static_int8

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
    x = images(shape, 1, seed=9)[0]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})
    qs = ort.InferenceSession(quantize_static_int8(str(path), [[a] for a in samples],
                                                   str(tmp / f"{name}_int8.onnx")),
                              providers=["CPUExecutionProvider"])
    theirs = qs.run(None, {qs.get_inputs()[0].name: x})

    def ours(**kw):
        opts = dict(DEFAULTS, model=str(path), calib=str(cal), name=name,
                    output=str(tmp / f"{name}_{len(kw)}"), **kw)
        q = load_stage(compile_model(opts)["quantized"])
        got = run_float(q, [[x]], lambda v, a: None)[0]
        return q, _worst(q, want, got)

    mixed, (part, mixed_cos) = ours()
    mp = mixed.tags["quantization"].get("mixed_precision", {})
    if mp.get("raised"):
        int8, (_, int8_cos) = ours(min_cosine=0.0)
        del int8
    else:
        int8_cos = mixed_cos
    _, theirs_cos = _worst(mixed, want, theirs)
    raised = mp.get("raised") or []
    what = (f"{len(raised)} layers int16: {', '.join(raised)}" if raised else
            "target missed within the cap, int8 kept" if mp.get("warning") else
            "int8 meets the target")
    return (f"| {name} | {part} | {int8_cos:.4f} | {theirs_cos:.4f} | {mixed_cos:.4f} | "
            f"{mp.get('int16_mac_share', 0.0):.1%} ({what}) |")


def test_accuracy_table(benchmark, tmp_path):
    from corpus import LIGHT

    picked = os.environ.get("XRT_ACCURACY_NETS")
    nets = [n for n in LIGHT if not picked or n in picked.split(",")]

    def table() -> list[str]:
        rows = []
        for n in nets:
            rows.append(_row(n, tmp_path))
            print(rows[-1], f"({load_average()})", flush=True)
        return rows

    rows = benchmark.pedantic(table, rounds=1, iterations=1)
    print(f"\naccuracy on a held-out image, worst output part ({load_average()})")
    print("| network | worst part | int8 only (ours) | onnxruntime int8 | mixed precision "
          "(default) | int16 share of MACs |")
    print("|---|---|---:|---:|---:|---|")
    print("\n".join(rows))
    assert len(rows) == len(nets)
