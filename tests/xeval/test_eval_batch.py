"""`xrt eval` on networks compiled for batch N: N consecutive samples stacked along axis 0 per
forward (the last group padded with its last sample, whose results are dropped), outputs split
back into one row per sample. The rows of the batch-2 and batch-4 networks equal the batch-1
network's, sample for sample, when the three share their scales (minmax calibration over the
same samples), since every item runs on its own (docs/eval-sweep.md)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xeval import evaluate
from xrt.errors import XrtError

COUNT = 7  # samples: batch 4 runs 4 + 3 (one padded), batch 2 runs 2 + 2 + 2 + 1 (one padded)


def _onnx_model() -> onnx.ModelProto:
    """A small CNN as torch.onnx writes it with a dynamic batch "N": conv, BN folded in the
    weights, ReLU, max pool, a 1x1 conv, global pool, flatten, Gemm."""
    rng = np.random.default_rng(3)

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), name)

    inits = [init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))), init("b1", rng.normal(0, 0.1, 8)),
             init("w2", rng.normal(0, 0.3, (8, 8, 1, 1))), init("b2", rng.normal(0, 0.1, 8)),
             init("wf", rng.normal(0, 0.3, (5, 8))), init("bf", rng.normal(0, 0.1, 5))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "batchnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _compile(model, samples, n, root, name):
    """Import at batch `n`, quantize (minmax over `samples` stacked `n` at a time, so every
    batch sees the same values), lower for the ZG330, save json + raw."""
    from xcompile.frontend import import_onnx
    from xcompile.passes import optimize
    from xcompile.quant.quantize import quantize_network
    from xrt import plugins

    net = optimize(import_onnx(model, {"x": [n, 3, 16, 16]}, name="net"))
    calib = [[np.concatenate([samples[min(k + j, len(samples) - 1)] for j in range(n)])]
             for k in range(0, len(samples), n)]
    q = quantize_network(net, calib, bits=8, method="minmax", weight_rounding="nearest")
    hook = plugins.target("zg330")
    hook(hook.adapt(q)).save(root / f"{name}.json", root / f"{name}.raw")
    net.save(root / f"{name}_float.json", root / f"{name}_float.raw")
    return str(root / f"{name}.json")


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    model = _onnx_model()
    onnx.save(model, root / "net.onnx")
    rng = np.random.default_rng(11)
    samples = [rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(COUNT)]
    data = root / "data"
    data.mkdir()
    for k, s in enumerate(samples):
        np.save(data / f"s{k:02d}.npy", s)
    (data / "s03_bad.npy").write_bytes(b"not an npy file")
    nets = {n: _compile(model, samples, n, root, f"b{n}") for n in (1, 2, 4)}
    return {"root": root, "data": str(data), "onnx": str(root / "net.onnx"), "nets": nets,
            "samples": samples}


def _rows(batched, n, reference, batch=16):
    return evaluate(batched["nets"][n], batched["data"], reference=reference, workers=0,
                    progress=False, batch=batch)


def _same(rows):
    return [{k: v for k, v in r.items() if k not in ("wall_ms", "cycles", "chip_ms",
                                                     "batch_items")} for r in rows]


@pytest.mark.parametrize("n", [2, 4])
def test_batch_rows_equal_the_batch_1_rows(batched, n):
    one = _rows(batched, 1, batched["onnx"])
    rows = _rows(batched, n, batched["onnx"], batch=3)  # rounded up to whole groups of n
    assert [r["sample"] for r in rows] == [r["sample"] for r in one]
    bad = [r for r in rows if "error" in r]
    assert [r["sample"] for r in bad] == ["s03_bad.npy"] and "CalibrationError" in \
        bad[0]["error"]
    ok = [r for r in rows if "error" not in r]
    assert len(ok) == COUNT
    for r in ok:
        assert r["batch_items"] == n and r["outputs"] == [[1, 5]]
        assert r["cosine"] > 0.98 and r["cycles"] > 0 and r["chip_ms"] > 0
    assert all("batch_items" not in r for r in one)
    # per-item network, shared scales: each sample's figures are the batch-1 network's
    assert _same(rows) == _same(one)
    # one forward's cycles split over its n items: a group's rows carry the same share
    assert ok[0]["cycles"] == ok[1]["cycles"]
    from xeval.report import eval_summary

    assert eval_summary(rows)["batch_items"] == n and "batch_items" not in eval_summary(one)


def test_batch_outputs_are_the_samples_own(batched, tmp_path):
    """The outputs of the batch-4 network's rows are each sample's (checked through the
    integer outputs of the chip run against the batch-1 network run one sample at a time), and
    a float reference of batch 4 is run stacked."""
    from xeval.evaluate import prepare_model
    from xeval.worker import _eval_group, _run, _stack, release, snapshot_session

    names = [f"s{k}" for k in range(COUNT)]
    per = {}
    for n in (1, 4):
        shipped, _, pairs = prepare_model(batched["nets"][n], None)
        sess = snapshot_session(shipped[0], shipped[1], pairs)
        outs = []
        group = list(zip(names, [[s] for s in batched["samples"]]))
        for k in range(0, COUNT, n):
            got = _run(sess, _stack([s for _, s in group[k:k + n]], n))[0]
            outs.extend(got[: len(group[k:k + n])])
        per[n] = np.stack(outs)
        assert len(_eval_group(sess, n, None, group[4:])) == COUNT - 4  # padded, dropped
    release()
    assert np.array_equal(per[1], per[4])
    stacked = _rows(batched, 4, str(batched["root"] / "b4_float.json"))
    single = _rows(batched, 4, batched["onnx"])
    assert _same(stacked) == _same(single)


def test_batch_network_output_without_batch_axis_is_refused(batched):
    from xeval.worker import batch_items

    class V:
        def __init__(self, shape, name="v"):
            self.shape, self.name, self.v_id = shape, name, 1

    class Net:
        def __init__(self, ins, outs):
            self._i, self._o = ins, outs

        def inputs(self):
            return self._i

        def outputs(self):
            return self._o

    assert batch_items(Net([V((4, 3))], [V((4, 2))])) == 4
    assert batch_items(Net([V((4, 3)), V((1, 3))], [V((1, 2))])) == 1
    with pytest.raises(XrtError, match="no axis 0 of 4 rows"):
        batch_items(Net([V((4, 3))], [V((1, 8))]))
