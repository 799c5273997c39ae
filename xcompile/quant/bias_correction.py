"""Bias correction (Nagel et al., "Data-Free Quantization", 2019, section 4.2, with the
input means measured on the calibration samples instead of derived from BatchNorm).

Rounding the weights shifts a layer's expected output: ``E[(W_q - W) x] = (W_q - W) E[x]``
per output channel, a bias the next layers inherit and ReLUs turn into a loss. Subtracting
it from the layer's bias removes it for inputs with the calibration set's mean. GPTQ rounding
already minimises ``|X (W - W_q)|`` on the same inputs, the mean included, so the quantizer
corrects only the layers whose weights were rounded to nearest (docs/quantization.md).
"""

from __future__ import annotations

import numpy as np

__all__ = ["weight_error_shift"]


def weight_error_shift(op_type: str, attrs: dict, dw: np.ndarray, mean_x: np.ndarray
                       ) -> np.ndarray | None:
    """``(W_q - W) E[x]`` per output channel: `dw` the dequantized weights minus the float
    ones (Conv2d HWIO, Matmul (K, N) or (N, K) with `transpose_b`), `mean_x` the input's mean
    per channel (its last axis). Zero padding at the borders is not counted. None for a layout
    it does not cover."""
    mx = np.asarray(mean_x, np.float64).reshape(-1)
    dw = np.asarray(dw, np.float64)
    if op_type == "Conv2d" and dw.ndim == 4:
        cin_g, cout = dw.shape[2], dw.shape[3]
        g = int(attrs.get("groups", 1))
        if mx.size != cin_g * g or cout % g:
            return None
        per = dw.sum(axis=(0, 1)).reshape(cin_g, g, cout // g)
        return np.einsum("igo,gi->go", per, mx.reshape(g, cin_g)).reshape(cout)
    if op_type == "Matmul" and dw.ndim == 2 and not attrs.get("transpose_a", False):
        if attrs.get("transpose_b", False):
            return dw @ mx if dw.shape[1] == mx.size else None
        return mx @ dw if dw.shape[0] == mx.size else None
    return None
