"""LayerNormalization: LayerNorm over the trailing axes, in ONNX axis order.

The normalized axes are the trailing ones of the ONNX tensor, so the op reads the ONNX-order
view (a transpose back from NHWC only where the input has no such view yet). The optional Mean
and InvStdDev outputs become the op's `stats` outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


@_handles("LayerNormalization")
def _layernorm(im: _Importer, node, a, ins):
    if int(a.get("stash_type", 1)) != 1:
        raise _Unsupported("stash_type other than float32")
    x = ins[0]
    if x.is_const:
        raise _Unsupported("constant input")
    axis = int(a.get("axis", -1)) % max(x.rank, 1)
    stats = im.reads(node, 1) or im.reads(node, 2)
    inputs = [im.value(x)] + [im.value(t) for t in ins[1:3] if t is not None]
    outs = im.emit("LayerNorm", inputs, axis=axis, epsilon=float(a.get("epsilon", 1e-5)),
                   stats=stats)
    return [im.result(v) for v in outs]
