"""MatMul and Gemm: xir Matmul in ONNX order, with Gemm's alpha, beta and C folded in where
they are constants.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.handlers.elementwise import _binary
from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T
from xcompile.refit.provenance import SRC, leaf
from xir.errors import OnnxImportError

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer


@_handles("MatMul")
def _matmul(im: _Importer, node, a, ins):
    x, y = ins
    return [im.result(im.emit1("Matmul", [im.value(x), im.value(y)]))]


@_handles("Gemm")
def _gemm(im: _Importer, node, a, ins):
    A, B = ins[0], ins[1]
    C = ins[2] if len(ins) > 2 else None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    if A.rank != 2 or B.rank != 2:
        raise _Unsupported("Gemm operands must be matrices")
    n = B.shape[0] if tb else B.shape[1]
    m = A.shape[1] if ta else A.shape[0]
    if B.is_const:
        b = B.const.T if tb else B.const
        if alpha != 1.0:
            b = (b * np.asarray(alpha, b.dtype)).astype(b.dtype)
        bv = im.params(b)
        if B.src is not None:  # provenance for a refit (xcompile.refit.provenance)
            bv.tags[SRC] = leaf(B.src, (1, 0) if tb else None, alpha)
        tb, alpha = False, 1.0
    else:
        bv = im.value(B)
    inputs = [im.value(A), bv]
    add_c = None
    if C is not None and beta != 0.0:
        if C.is_const and alpha == 1.0 and math.prod(C.shape) == n and \
                (C.rank == 1 or (C.rank == 2 and C.shape[0] == 1)):
            c = C.const.reshape(n)
            inputs.append(im.params((c * np.asarray(beta, c.dtype)).astype(c.dtype)
                                    if beta != 1.0 else c))
            if C.src is not None:
                inputs[-1].tags[SRC] = leaf(C.src, mul=beta, flat=True)
        else:
            add_c = C
    y = im.result(im.emit1("Matmul", inputs, transpose_a=ta, transpose_b=tb))
    if y.shape != (m, n):
        raise OnnxImportError(f"node '{node.name}': Gemm output {list(y.shape)} != {[m, n]}")
    if alpha != 1.0:
        y = _binary(im, "Multiply", [y, _T.constant(np.asarray(alpha, A.dtype))])
    if add_c is not None:
        if beta != 1.0:
            add_c = _T.constant((add_c.const * beta).astype(add_c.const.dtype)) \
                if add_c.is_const else _binary(im, "Multiply",
                                               [add_c, _T.constant(np.asarray(beta, A.dtype))])
        y = _binary(im, "Add", [y, add_c])
    return [y]
