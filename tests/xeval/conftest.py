"""A small real deployment for the evaluation and sweep tests: tiny_cnn quantized and lowered
for the ZG330, saved as json + raw beside its float original, and a folder of samples with one
unreadable file among them."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    from xcompile import zoo
    from xcompile.quant.quantize import quantize_network
    from zg330backend.lowering import adapt, lower

    root = tmp_path_factory.mktemp("xeval")
    net = zoo.build("tiny_cnn")
    q = quantize_network(net, zoo.calibration_set("tiny_cnn", count=2), bits=8, method="minmax",
                         weight_rounding="nearest")
    lower(adapt(q)).save(root / "tiny_ZG.json", root / "tiny_ZG.raw")
    net.save(root / "tiny_float.json", root / "tiny_float.raw")
    data = root / "data"
    data.mkdir()
    for k, s in enumerate(zoo.calibration_set("tiny_cnn", count=10, seed=7)):
        np.save(data / f"s{k:02d}.npy", s[0])
    (data / "s05_bad.npy").write_bytes(b"not an npy file")
    return {"model": str(root / "tiny_ZG.json"), "float": str(root / "tiny_float.json"),
            "data": str(data), "root": root}

