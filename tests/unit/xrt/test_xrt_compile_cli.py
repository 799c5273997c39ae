"""`xrt compile`: every stage written, TOML options, clear errors, nothing half-written."""

from __future__ import annotations

import os

import numpy as np
import pytest

import xir
from xcompile import zoo
from xcompile.frontend.onnx_export import export_onnx
from xrt.cli import main


def _files(path) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_compile_zoo_network_writes_every_stage(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", "tiny_cnn", "-o", str(out), "--method", "minmax"]) == 0
    stages = ["parsed", "optimized", "quantized", "adapted"]
    assert _files(out) == sorted(f"tiny_cnn_{s}.{ext}" for s in stages
                                 for ext in ("json", "raw"))
    q = xir.Network.CreateFromJsonFile(out / "tiny_cnn_quantized.json")
    q.loadParamsFromFile(out / "tiny_cnn_quantized.raw")
    assert any(v.dtype.is_quantized() for op in q.ops for v in op.outputs)


def test_compile_onnx_with_toml_and_calibration_folder(tmp_path):
    net = zoo.build("tiny_cnn")
    export_onnx(net, str(tmp_path / "tiny.onnx"))
    calib = tmp_path / "calib"
    calib.mkdir()
    for i, sample in enumerate(zoo.calibration_set("tiny_cnn", count=3)):
        np.save(calib / f"{i}.npy", sample[0].transpose(0, 3, 1, 2))  # ONNX: NCHW
    (tmp_path / "c.toml").write_text(
        f'[compile]\nmodel = "{tmp_path / "tiny.onnx"}"\ncalib = "{calib}"\n'
        f'output = "{tmp_path / "o"}"\nbits = 16\nmethod = "minmax"\nname = "tinyx"\n')
    assert main(["compile", "--config", str(tmp_path / "c.toml")]) == 0
    assert "tinyx_quantized.json" in _files(tmp_path / "o")
    q = xir.Network.CreateFromJsonFile(tmp_path / "o" / "tinyx_quantized.json")
    bits = {v.dtype.element_dtype.bits for op in q.ops for v in op.outputs
            if v.dtype.is_quantized()}
    assert bits == {16}


def test_compile_mixed_precision_flags_and_toml(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["compile", "tiny_cnn", "-o", str(out), "--method", "minmax", "--input-bits",
                 "16", "--op-bits", "branch1.conv=16"]) == 0
    q = xir.Network.CreateFromJsonFile(out / "tiny_cnn_quantized.json")
    ops = {op.name: op for op in q.ops}
    assert ops["stem.conv"].inputs[0].dtype.element_dtype.bits == 16
    assert ops["branch1.conv"].inputs[0].dtype.element_dtype.bits == 16
    assert ops["down.conv"].inputs[0].dtype.element_dtype.bits == 8
    (tmp_path / "c.toml").write_text('[compile]\nmodel = "tiny_cnn"\nmethod = "minmax"\n'
                                     f'output = "{tmp_path / "t"}"\n'
                                     '[compile.op_bits]\n"nosuch.conv" = 16\n')
    assert main(["compile", "--config", str(tmp_path / "c.toml")]) == 2
    assert "nosuch.conv" in capsys.readouterr().err and _files(tmp_path / "t") == []
    assert main(["compile", "tiny_cnn", "-o", str(tmp_path / "u"), "--op-bits", "x"]) == 2
    assert "NAME=BITS" in capsys.readouterr().err


def test_unknown_target_lists_installed_ones(tmp_path, capsys):
    assert main(["compile", "tiny_cnn", "--target", "nosuch", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no compile target 'nosuch'" in err and "installed targets" in err
    assert _files(tmp_path / "o") == []


def test_corrupt_onnx_leaves_nothing(tmp_path, capsys):
    net = zoo.build("tiny_cnn")
    data = export_onnx(net).SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "0.npy", zoo.calibration_set("tiny_cnn", count=1)[0][0])
    out = tmp_path / "o"
    assert main(["compile", str(tmp_path / "cut.onnx"), "--calib", str(calib),
                 "-o", str(out)]) == 2
    assert "cut.onnx" in capsys.readouterr().err
    assert _files(out) == [] and not [p for p in os.listdir(tmp_path) if p.startswith(".xrt")]


@pytest.mark.parametrize("bad", ["shape", "dtype", "empty"])
def test_bad_calibration_folder(tmp_path, capsys, bad):
    calib = tmp_path / "calib"
    calib.mkdir()
    good = zoo.calibration_set("tiny_cnn", count=1)[0][0]
    if bad == "shape":
        np.save(calib / "0.npy", good[:, :16])
    elif bad == "dtype":
        np.save(calib / "0.npy", good.astype(np.float64))
    net = zoo.build("tiny_cnn")
    export_onnx(net, str(tmp_path / "tiny.onnx"))
    out = tmp_path / "o"
    assert main(["compile", str(tmp_path / "tiny.onnx"), "--calib", str(calib),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("0.npy" in err) if bad != "empty" else ("empty" in err or "no " in err)
    assert _files(out) == []


def test_quant_report_command(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", "tiny_cnn", "-o", str(out), "--method", "minmax"]) == 0
    capsys.readouterr()
    report = tmp_path / "report.json"
    assert main(["quant-report", str(out / "tiny_cnn_optimized.json"),
                 str(out / "tiny_cnn_quantized.json"), "--json", str(report),
                 "--suggest", "2"]) == 0
    text = capsys.readouterr().out
    assert "cos" in text.lower()
    flags = text.split("raise these to 16 bits:")[1].split()
    assert flags.count("--op-bits") == 2 and all(f.endswith("=16") for f in flags[1::2])
    import json

    data = json.loads(report.read_text())
    assert data  # per-layer rows with cosine and max abs error
    flat = json.dumps(data)
    assert "cos" in flat and "max" in flat


def test_quant_report_never_guesses_samples_by_name_and_refuses_swapped_files(tmp_path,
                                                                             capsys):
    """A network merely called tiny_cnn (an imported model) gets no zoo samples; the two
    files given the wrong way round are named as such; unnamed ops are suggested by op id,
    which the compile accepts back."""
    out = tmp_path / "out"
    assert main(["compile", "tiny_cnn", "-o", str(out), "--method", "minmax"]) == 0
    capsys.readouterr()
    fl, qu = str(out / "tiny_cnn_optimized.json"), str(out / "tiny_cnn_quantized.json")
    assert main(["quant-report", qu, fl]) == 2
    assert "give the float network first" in capsys.readouterr().err
    import xir

    net = xir.Network.CreateFromJsonFile(fl)
    net.loadParamsFromFile(fl[:-5] + ".raw")
    del net.tags["zoo"]  # what an imported model called tiny_cnn looks like
    net.save(tmp_path / "imported.json")
    assert main(["quant-report", str(tmp_path / "imported.json"), qu]) == 2
    assert "not a zoo network" in capsys.readouterr().err
    from xcompile.quant.report import LayerRow, Report

    rep = Report("n", 8, "minmax")
    rep.rows.append(LayerRow(12, "Conv2d", "", 3, 3, "@sint(8)", [1], 0.9, 0.1, 0.1, 0.1, 0.0,
                             0.5))
    assert rep.suggest_op_bits(1) == {"12": 16}
    from xcompile.quant.bits import resolve_op_bits

    opt = xir.Network.CreateFromJsonFile(fl)
    conv = next(op for op in opt.ops if op.op_type == "Conv2d")
    conv.name = ""
    assert resolve_op_bits(opt, {str(conv.op_id): 16}, 8, {conv.op_id}) == {conv.op_id: 16}


def test_compile_takes_a_float_xir_network_and_refuses_a_compiled_one(tmp_path, capsys):
    """`xrt compile tiny.json` (a float network saved from Python) compiles like an ONNX model;
    an already compiled one is refused naming what compile takes."""
    net = zoo.build("tiny_cnn")
    net.save(str(tmp_path / "tiny.json"))
    cal = tmp_path / "cal"
    cal.mkdir()
    for k, sample in enumerate(zoo.calibration_set("tiny_cnn", count=2)):
        np.save(cal / f"{k}.npy", sample[0])  # an xir network is NHWC
    out = tmp_path / "out"
    assert main(["compile", str(tmp_path / "tiny.json"), "--target", "zg330", "--calib",
                 str(cal), "-o", str(out), "--min-cosine", "0"]) == 0
    zg = out / "tiny_cnn_ZG.json"
    assert zg.exists()
    capsys.readouterr()
    assert main(["compile", str(zg), "--target", "zg330", "--calib", str(cal), "-o",
                 str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err
    assert "already quantized or compiled" in err and "float xir network" in err
    assert err.count("xrt compile:") == 1
