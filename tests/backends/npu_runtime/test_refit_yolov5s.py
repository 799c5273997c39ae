"""Refit of a yolov5s-class network compiled by the full pipeline (slow: a compile each chip):
yolov5s-160 exported to ONNX, `compile_model` with GPTQ rounding and a 16-bit first layer
(`input_bits=16`: int16 and int8 layers, 60 fused Conv -> SiLU HardOps), deployed, refitted from
another seed's export. The chip's outputs equal the integer reference -- the compile's own
`_quantized.json` refitted on the HostBackend -- bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import xir
from host_backend import HostBackend
from xcompile import zoo
from xcompile.frontend.onnx_export import export_onnx
from xcompile.pipeline import DEFAULTS, compile_model
from xrt import HostDevice, Session

pytestmark = pytest.mark.slow


def _load(path: str):
    net = xir.Network.CreateFromJsonFile(path)
    net.loadParamsFromFile(path[:-5] + ".raw")
    return net


def test_yolov5s_refit_through_the_pipeline_is_bit_exact(chip, tmp_path):
    paths = []
    for seed in (0, 1):
        p = str(tmp_path / f"y{seed}.onnx")
        export_onnx(zoo.build("yolov5s", seed=seed, input_size=160), p)
        paths.append(p)
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, s in enumerate(zoo.calibration_set("yolov5s", count=2, input_size=160)):
        np.save(cal / f"{k}.npy", s[0].transpose(0, 3, 1, 2))
    out = compile_model({**DEFAULTS, "model": paths[0], "target": chip.kind, "calib": str(cal),
                         "output": str(tmp_path / "out"), "name": "y", "input_bits": 16,
                         "min_cosine": 0})
    z = _load(out[chip.backend.chip.target.suffix])
    q = _load(out["quantized"])
    s = Session.Create([chip.backend, HostBackend], z.view(0), [chip.dev, HostDevice.Default()])
    s.apply()
    x = np.random.default_rng(0).normal(size=z.inputs()[0].shape).astype(np.float32)
    old = [np.asarray(t).copy() for t in s.forward([x])]
    rep = s.refitWeights(paths[1])
    assert len(rep.rows) == 60 and len(rep.hardops) == 60 and rep.host_ops == []
    assert {r.bits for r in rep.rows} == {8, 16}
    got = [np.asarray(t).copy() for t in s.forward([x])]
    h = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
    h.apply()
    h.refitWeights(paths[1])
    for u, v in zip([np.asarray(t) for t in h.forward([x])], got):
        np.testing.assert_array_equal(u, v)
    assert any(not np.array_equal(u, v) for u, v in zip(old, got))
    h.close()
    s.close()
