"""The layers the int16 cap of the mixed-precision search counts (`xcompile.quant.layers`,
docs/quantization.md section 10): on a PP-LCNet stage as paddle2onnx writes it (HardSwish
written out as Add / Clip / Mul / Div after each convolution, a pointwise convolution and
a 3x3 depthwise one), a convolution and the table it alone feeds are one layer, as they are one
HardOp on the chip, and a raise of the table and the depthwise convolution reading it costs
the layers of both passes holding 16-bit values."""

from __future__ import annotations

import numpy as np
import pytest
from conv_graph import ConvGraph

from xcompile.frontend.onnx_import import import_onnx
from xcompile.passes import optimize
from xcompile.quant.capability import integer_ops
from xcompile.quant.layers import layer_of, wide_layers
from xcompile.quant.mixed import planned_int16


def _model():
    g = ConvGraph(5)
    x = g.hardswish(g.conv("x", 3, 16, 3, "stem"), "hs0")
    gain = np.ones(16)
    gain[6] = 12.0  # one loud channel sets the map's scale
    x = g.hardswish(g.conv(x, 16, 16, 1, "pw", gain=gain), "hs1")
    x = g.hardswish(g.conv(x, 16, 16, 3, "dw", groups=16), "hs2")
    g.conv(x, 16, 8, 1, "y")
    return g.model("lcnet_stage", {"x": [1, 3, 16, 16]}, {"y": [1, 8, 16, 16]})


@pytest.fixture(scope="module")
def opt():
    return optimize(import_onnx(_model()))


def test_layers_fold_the_tables_into_their_writers(opt):
    ops = {op.name: op.op_id for op in opt.ops}
    int_ops = integer_ops(opt)
    layer = layer_of(opt, int_ops)
    # four convolutions, each with the hard-swish table it alone feeds (the last, with the
    # layout Transpose it writes through), and the input's layout Transpose
    assert len(int_ops) == 9 and len(set(layer.values())) == 5
    assert layer[ops["hs1"]] == layer[ops["pw"]] != layer[ops["dw"]]
    # raising the table and the depthwise reader: pw's pass writes 16 bits, dw's reads them
    at16 = planned_int16(opt, {ops["hs1"]: 16, ops["dw"]: 16})
    assert wide_layers(opt, layer, at16) - wide_layers(opt, layer, set()) == \
        {layer[ops["pw"]], layer[ops["dw"]]}
