"""`xrt compile MODEL --target T --bundle-shapes SHAPE ...` (issue 29, point 6;
xcompile/bundle.py): quantized once, one lowered network per shape in one `<name>_<SUFFIX>.bundle`
whose weight blocks are stored once; shapes the graph cannot take and malformed specs are
refused before anything is written."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xir
from xcompile import zoo
from xcompile.bundle import BundleShapeError, parse_bundle_shapes, reshape_network
from xcompile.pipeline import DEFAULTS, compile_model
from xcompile.quant.quantize import quantize_network
from xrt.cli import main
from xrt.errors import XrtError


@pytest.fixture(scope="module")
def quantized():
    net = zoo.build("tiny_cnn")
    return quantize_network(net, zoo.calibration_set("tiny_cnn", count=2), bits=8,
                            method="minmax", weight_rounding="nearest")


def _files(path) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_cli_writes_one_bundle_per_target(tmp_path, capsys):
    out = tmp_path / "out"
    for target, suffix in (("zg330", "ZG"), ("buyi", "BY")):
        assert main(["compile", "tiny_cnn", "--target", target, "--method", "minmax",
                     "-o", str(out), "--bundle-shapes", "input=1,32,32,3",
                     "input=1,48,48,3", "input=1,64,64,3"]) == 0
        text = capsys.readouterr().out
        assert f"tiny_cnn_{suffix}.bundle" in text and "weights stored once" in text
        bundle = xir.Bundle.CreateFromFile(out / f"tiny_cnn_{suffix}.bundle")
        assert bundle.names() == ["1x32x32x3", "1x48x48x3", "1x64x64x3"]
        for name, size in zip(bundle.names(), (32, 48, 64)):
            net = bundle.network(name)
            assert net.inputs()[0].shape == (1, size, size, 3)
            hard = [op for op in net.ops if op.op_type == "HardOp"]
            assert hard and all(op.compile_target == hard[0].compile_target for op in hard)
        assert bundle.shared_bytes < 0.5 * bundle.separate_bytes()
        # one file smaller than the three members' own json + raw pairs
        size = os.path.getsize(out / f"tiny_cnn_{suffix}.bundle")
        assert size < sum(len(bundle.network(k).dumpJsonToStr()) +
                          len(bundle.network(k).dumpParamsToBuffer()) for k in bundle.names())
    assert _files(out) == ["tiny_cnn_BY.bundle", "tiny_cnn_ZG.bundle",
                           "tiny_cnn_quantized.json", "tiny_cnn_quantized.raw"]


def test_bundle_shapes_from_a_toml_config(tmp_path):
    (tmp_path / "c.toml").write_text(
        '[compile]\nmodel = "tiny_cnn"\ntarget = "buyi"\nmethod = "minmax"\n'
        f'output = "{tmp_path / "o"}"\n'
        'bundle_shapes = ["input=1,16,16,3", "input=1,24,24,3"]\n')
    assert main(["compile", "--config", str(tmp_path / "c.toml")]) == 0
    bundle = xir.Bundle.CreateFromFile(tmp_path / "o" / "tiny_cnn_BY.bundle")
    assert bundle.names() == ["1x16x16x3", "1x24x24x3"]


def test_every_member_has_the_scales_of_the_one_quantization(quantized):
    small = reshape_network(quantized, {"input": (1, 16, 16, 3)})
    scales = {op.op_id: [str(v.dtype.element_dtype) for v in op.outputs] for op in quantized.ops}
    assert {op.op_id: [str(v.dtype.element_dtype) for v in op.outputs]
            for op in small.ops} == scales
    assert small.outputs()[0].shape == quantized.outputs()[0].shape == (1, 10)
    assert quantized.inputs()[0].shape == (1, 32, 32, 3)  # the original is left as it was
    for p, q in zip(small.params(), quantized.params()):
        np.testing.assert_array_equal(p.data, q.data)


def test_each_member_computes_its_shape_like_the_float_network(quantized):
    """The one quantization serves every shape: each reshaped member's integer reference
    against the float tiny_cnn at that size, cosine over 4 images. (The float network is the
    one calibrated, given the shape the same way: the zoo's own build at another size draws
    other BatchNorm statistics. The ONNX test in test_bundle_deploy.py checks the reshape
    itself against onnxruntime.)"""
    from host_backend import HostBackend
    from xrt import HostDevice, Session

    float_net = zoo.build("tiny_cnn")
    for n, least in ((32, 0.975), (48, 0.995), (64, 0.995)):  # measured 0.980, 0.9996, 0.9998
        member = reshape_network(quantized, {"input": (1, n, n, 3)})
        ref = reshape_network(float_net, {"input": (1, n, n, 3)})
        si, sf = (Session.Create([HostBackend], z.view(0), [HostDevice.Default()])
                  for z in (member, ref))
        si.apply()
        sf.apply()
        got, want = [], []
        for (img,) in zoo.calibration_set("tiny_cnn", count=4, seed=3, input_size=n):
            got.append(np.asarray(si.forward([img])[0], np.float64).ravel())
            want.append(np.asarray(sf.forward([img])[0], np.float64).ravel())
        g, w = np.concatenate(got), np.concatenate(want)
        assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) > least, n


@pytest.mark.parametrize("spec, match", [
    (["x"], "not NAME=D0,D1"), (["input=1,a,3"], "not NAME=D0,D1"),
    (["input=1,0,3,3"], "positive"), (["input=1,8,8,3", "input=1,8,8,3"], "twice"),
    (["input=1,8,8,3;input=1,4,4,3"], "input 'input' twice"), ([], "at least one"),
])
def test_malformed_specs_are_refused(spec, match):
    with pytest.raises(BundleShapeError, match=match):
        parse_bundle_shapes(spec)


def test_shapes_the_graph_cannot_take_are_refused(quantized):
    with pytest.raises(BundleShapeError, match=r"input 'input' of network 'tiny_cnn' has rank "
                                               r"4 \(\[1, 32, 32, 3\]\), not 2"):
        reshape_network(quantized, {"input": (1, 3)})
    with pytest.raises(BundleShapeError, match=r"names input 'x'.*inputs \['input'\]"):
        reshape_network(quantized, {"x": (1, 32, 32, 3)})
    # 30x30: the pooled branch comes back as 14x14 beside the 15x15 residual
    with pytest.raises(BundleShapeError, match=r"cannot take input shape input=\[1, 30, 30, "
                                               r"3\]: op \d+ \(Add 'fuse'\)"):
        reshape_network(quantized, {"input": (1, 30, 30, 3)})


def test_cli_refuses_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["compile", "tiny_cnn", "--target", "zg330", "--method", "minmax", "-o",
                 str(out), "--bundle-shapes", "input=1,32,32,3", "input=1,3"]) != 0
    assert "input 'input' of network 'tiny_cnn' has rank 4" in capsys.readouterr().err
    assert main(["compile", "tiny_cnn", "-o", str(out), "--bundle-shapes",
                 "input=1,32,32,3"]) != 0
    assert "needs --target" in capsys.readouterr().err
    with pytest.raises(XrtError, match="needs --target"):
        compile_model({**DEFAULTS, "model": "tiny_cnn", "output": str(out),
                       "bundle_shapes": ["input=1,32,32,3"]})
    assert not out.exists()


def _onnx(path, fixed_reshape: bool) -> None:
    """A dynamic-size ONNX model as exporters write it: Conv-Relu, then a global average pool
    and a Flatten (any size), or -- `fixed_reshape` -- a Reshape to the 8x8 map's element count
    (a size fixed at export)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"])]
    inits = [w, b]
    if fixed_reshape:
        inits.append(numpy_helper.from_array(np.array([1, 8 * 8 * 8], np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", ["r", "shape"], ["y"]))
    else:
        nodes += [helper.make_node("GlobalAveragePool", ["r"], ["g"]),
                  helper.make_node("Flatten", ["g"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, "H", "W"])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, "K"])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def _calib(tmp_path, size: int):
    calib = tmp_path / f"calib{size}"
    calib.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.save(calib / f"{i}.npy", rng.normal(size=(1, 3, size, size)).astype(np.float32))
    return calib


def test_an_onnx_model_with_a_size_fixed_at_export_is_refused(tmp_path, capsys):
    _onnx(tmp_path / "fixed.onnx", fixed_reshape=True)
    assert main(["compile", str(tmp_path / "fixed.onnx"), "--target", "zg330", "--calib",
                 str(_calib(tmp_path, 8)), "--method", "minmax", "-o", str(tmp_path / "o"),
                 "--bundle-shapes", "x=1,3,8,8", "x=1,3,16,16"]) != 0
    err = capsys.readouterr().err
    assert "cannot take input shape x=[1, 3, 16, 16]: op" in err and "Reshape" in err
    assert not (tmp_path / "o").exists()


def test_bundle_readme_block_runs(tmp_path, monkeypatch):
    """The README's bundle example, as written."""
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[3] / "README.md"
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme.read_text("utf-8"), re.S)
              if "xir.Bundle.CreateFromFile" in b]
    assert len(blocks) == 1
    sh = re.search(r"```sh\n(xrt compile tiny_cnn [^\n]*--bundle-shapes[^\n]*)\n```",
                   readme.read_text("utf-8"))
    assert sh is not None
    monkeypatch.chdir(tmp_path)
    assert main(sh.group(1).split()[1:]) == 0
    ns: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    assert ns["names"] == ["1x32x32x3", "1x48x48x3", "1x64x64x3"]
    w = [next(op.params[0] for op in m.ops if op.op_type == "HardOp" and op.params)
         for m in ns["members"]]
    assert w[0] is w[1] is w[2]
