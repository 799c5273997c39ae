"""xcompile.placement: host ops grouped by reason, named by their label."""

from __future__ import annotations

import op_family_nets
import pytest

from xcompile.placement import placement

pytest.importorskip("onnx")


def test_onnx_graph_ops_are_named_by_what_they_carry():
    net = op_family_nets.onnx_graph_net()
    carried = next(op for op in net.ops if op.op_type == "OnnxGraph")
    net.tags["zg330"] = {"hardops": 0, "npu_ops": 0,
                         "host_ops": {str(carried.op_id): "no integer form"}}
    p = placement(net, "zg330")
    assert p.host_ops == 1
    assert p.lines()[1] == "  host: OnnxGraph(Einsum) x1 -- no integer form"
