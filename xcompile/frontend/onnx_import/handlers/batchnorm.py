"""BatchNormalization: BatchNorm2d on NHWC maps, otherwise a constant Multiply and Add.

The clean-up pass later folds a BatchNorm2d into the Conv before it where it can.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.handlers.elementwise import _binary
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T, NHWC

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


@_handles("BatchNormalization")
def _batchnorm(im: _Importer, node, a, ins):
    if a.get("training_mode", 0) or any(im.reads(node, i) for i in range(1, 5)):
        raise _Unsupported("training mode (running statistics outputs)")
    x, scale, bias, mean, var = ins[:5]
    eps = float(a.get("epsilon", 1e-5))
    if x.rank == 4:
        inputs = [im.nhwc(x)] + [im.value(t) for t in (scale, bias, mean, var)]
        return [im.result(im.emit1("BatchNorm2d", inputs, "NHWC", epsilon=eps), NHWC)]
    if x.rank < 2 or not all(t.is_const for t in (scale, bias, mean, var)):
        raise _Unsupported(f"rank-{x.rank} batch norm with non-constant statistics")
    s = (scale.const / np.sqrt(var.const + np.float32(eps))).astype(x.dtype)
    sh = (s.size,) + (1,) * (x.rank - 2)
    s_t = _T.constant(s.reshape(sh))
    b_t = _T.constant((bias.const - mean.const * s).astype(x.dtype).reshape(sh))
    y = _binary(im, "Multiply", [x, s_t])
    return [_binary(im, "Add", [y, b_t])]
