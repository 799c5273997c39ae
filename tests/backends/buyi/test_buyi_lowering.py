"""The compile target "buyi": the shared lowering with the Buyi's TargetConfig, through the
compile hook (`xrt compile --target buyi` writes `*_BY.json/raw`), int8 and int16; yolov5s."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
from buyi_testlib import compiled, host_ref, rand_x, run_buyi

import xir
from buyibackend import BUYI_TARGET
from xrt.cli import main


@pytest.mark.parametrize("bits", [8, 16])
def test_compile_cli_writes_by_stage(tmp_path, bits):
    out = tmp_path / "o"
    assert main(["compile", "tiny_cnn", "--target", "buyi", "-o", str(out), "--method",
                 "minmax", "--bits", str(bits)]) == 0
    assert {"tiny_cnn_BY.json", "tiny_cnn_BY.raw"} <= set(os.listdir(out))
    net = xir.Network.CreateFromJsonFile(out / "tiny_cnn_BY.json")
    net.loadParamsFromFile(out / "tiny_cnn_BY.raw")
    hard = [op for op in net.ops if op.op_type == "HardOp"]
    assert hard and all(op.compile_target == "@buyi" for op in hard)
    assert all(op.device_info["target"] == "buyi" for op in hard)
    unit = BUYI_TARGET.npu.channel_unit("int8" if bits == 8 else "int16")
    assert net.tags["buyi"]["channel_unit"]["int8"] == 16
    dtypes = {v.tags["buyi"]["dtype"] for op in hard for v in op.outputs}
    assert dtypes == {f"int{bits}"}
    for op in hard:  # feature maps padded to the Buyi's channel unit
        for v in op.outputs:
            assert v.tags["buyi"]["pitch"] % unit == 0 or v.tags["buyi"]["pitch"] == \
                v.tags["buyi"]["c"]


def test_same_shared_code_for_both_targets():
    import npu_model.lowering as shared
    import zg330backend.lowering as zl
    from buyibackend import lowering as bl

    assert bl.BUYI_TARGET.npu.channel_unit("int8") != zl.ZG330_TARGET.npu.channel_unit("int8")
    assert (bl.target.suffix, zl.target.suffix) == ("BY", "ZG")
    # the ZG330 keeps only its target description: its compile hook is the shared one's
    assert zl.target.config is zl.ZG330_TARGET
    assert zl.lower.__module__ == "zg330backend.lowering" and len(inspect.getsource(zl)) < 2000
    assert shared.lower is not None and shared.relocate is not None


def test_yolov5s_160_bit_exact(bdev):  # ~6 s: in the default run (slow-mark only if > 20 s)
    q, z = compiled("yolov5s", input_size=160)
    x = rand_x(q)
    ref = host_ref(q, x)
    s, got = run_buyi(z, bdev, x)
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(a, b)
    s.close()
