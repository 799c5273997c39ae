"""`xcompile.cycles.forward_cycles` counts every chip run of a network whose host ops compute
NaN on a cycles-only chip's placeholder outputs (the PP-OCRv4 recognizer's float LayerNorm
division: 0 / 0): the NaNs become zeros before the next host op reads them, so the quantizing
Cast after the division no longer refuses them and the chip ops after it are counted."""

from __future__ import annotations

import pytest

from xir.builder import NetworkBuilder
from xir.types import FP32, INT8, QuantizedType, TensorType

CHIPS = ["zg330", "buyi"]
SHAPE = [1, 4, 6, 16]


def _net(host_op: str):
    """x -> Sigmoid (chip) -> Cast to float -> `host_op`(f, f) (host) -> Cast to int8 ->
    Tanh (chip): Div gives 0 / 0 = NaN on placeholder zeros, Multiply gives 0."""
    b = NetworkBuilder("cycles")
    q8 = QuantizedType(INT8, 1 / 250)
    x = b.input(SHAPE, QuantizedType(INT8, 0.05), "NHWC", "x")
    s = b.op("Sigmoid", [x], out_types=[TensorType(q8, SHAPE, "NHWC")])
    f = b.op("Cast", [s], out_types=[TensorType(FP32, SHAPE, "NHWC")])
    d = b.op(host_op, [f, f], out_types=[TensorType(FP32, SHAPE, "NHWC")])
    q = b.op("Cast", [d], out_types=[TensorType(q8, SHAPE, "NHWC")])
    b.output(b.op("Tanh", [q], out_types=[TensorType(QuantizedType(INT8, 1 / 120), SHAPE,
                                                     "NHWC")]))
    return b.build()


@pytest.mark.parametrize("target", CHIPS)
def test_host_nans_after_a_cycles_only_chip_leave_every_chip_run_counted(target):
    from xcompile.cycles import forward_cycles
    from xrt import plugins

    lowered = {op: plugins.target(target)(_net(op)) for op in ("Div", "Multiply")}
    for z in lowered.values():
        hard = [op for op in z.ops if op.op_type == "HardOp"]
        assert len([h for h in hard if h.device_info["layers"]]) == 2  # Sigmoid, Tanh
        assert {"Div", "Multiply"} & {op.op_type for op in z.ops}  # on the host
    nan_path = forward_cycles(lowered["Div"], target)
    plain = forward_cycles(lowered["Multiply"], target)
    # the host ops cost no chip cycles: both count the same two LUT runs
    assert nan_path == plain > 0
