"""Generated networks at real sizes for the speed spectrum (benchmarks/bench_spectrum.py),
written the way torch.onnx writes them (the `_G` builder of exporter_nets): the kinds of
network the zoo and the onnx light models lack."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from exporter_nets import _G

SPECTRUM: dict[str, tuple[Callable[[np.random.Generator], object], tuple[int, ...]]] = {}


def _net(name: str, shape: tuple[int, ...]):
    def deco(fn):
        SPECTRUM[name] = (fn, shape)
        return fn
    return deco


def _se(g: _G, y: str, c: int) -> str:
    s = g.op("GlobalAveragePool", [y])
    s = g.op("Relu", [g.conv(s, c, max(c // 4, 8), k=1)])
    s = g.op("HardSigmoid", [g.conv(s, max(c // 4, 8), c, k=1)], alpha=1 / 6, beta=0.5)
    return g.op("Mul", [y, s])


@_net("mobilenetv3_small_224", (1, 3, 224, 224))
def mobilenetv3(rng):
    """MobileNetV3-Small's layer plan: inverted residuals with depthwise convs, squeeze-excite
    gates and hardswish written as x * clip(x + 3, 0, 6) / 6."""
    g = _G(rng)
    y = g.hardswish(g.conv("x", 3, 16, stride=2))
    cin = 16
    # (kernel, expand, out, SE, hardswish, stride)
    for k, e, c, se, hs, s in [(3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2),
                               (3, 88, 24, False, False, 1), (5, 96, 40, True, True, 2),
                               (5, 240, 40, True, True, 1), (5, 120, 48, True, True, 1),
                               (5, 288, 96, True, True, 2), (5, 576, 96, True, True, 1)]:
        act = g.hardswish if hs else (lambda t: g.op("Relu", [t]))
        h = act(g.conv(y, cin, e, k=1)) if e != cin else y
        h = act(g.conv(h, e, e, k=k, group=e, stride=s))
        if se:
            h = _se(g, h, e)
        h = g.conv(h, e, c, k=1)
        y = g.op("Add", [y, h]) if s == 1 and c == cin else h
        cin = c
    y = g.hardswish(g.conv(y, cin, 576, k=1))
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])], axis=1)
    y = g.op("Gemm", [y, g.const(rng.normal(0, 0.05, (1000, 576))),
                      g.const(rng.normal(0, 0.01, 1000))], transB=1)
    return g.model([1, 3, 224, 224], g.op("Softmax", [y], axis=1))


def _layernorm(g: _G, x: str, d: int) -> str:
    m = g.op("ReduceMean", [x], axes=[-1])
    c = g.op("Sub", [x, m])
    v = g.op("ReduceMean", [g.op("Pow", [c, g.const(np.array(2.0))])], axes=[-1])
    n = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.const(np.array(1e-5))])])])
    return g.op("Add", [g.op("Mul", [n, g.const(g.rng.uniform(0.8, 1.2, d))]),
                        g.const(g.rng.normal(0, 0.05, d))])


def _linear(g: _G, x: str, din: int, dout: int) -> str:
    w = g.const(g.rng.normal(0, 1 / np.sqrt(din), (din, dout)))
    return g.op("Add", [g.op("MatMul", [x, w]), g.const(g.rng.normal(0, 0.02, dout))])


@_net("transformer_block_64x128", (1, 64, 128))
def transformer(rng):
    """A pre-norm encoder block: LayerNorm, single-head attention (Q.K^T, softmax, P.V),
    projection, residual; LayerNorm, GELU MLP (erf form), residual."""
    g = _G(rng)
    d = 128
    h = _layernorm(g, "x", d)
    q, k, v = (_linear(g, h, d, d) for _ in range(3))
    s = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]),
                     g.const(np.array(d ** 0.5))])
    a = _linear(g, g.op("MatMul", [g.op("Softmax", [s], axis=-1), v]), d, d)
    x1 = g.op("Add", ["x", a])
    m = _linear(g, _layernorm(g, x1, d), d, 4 * d)
    e = g.op("Add", [g.op("Erf", [g.op("Div", [m, g.const(np.array(2 ** 0.5))])]),
                     g.const(np.array(1.0))])
    m = g.op("Mul", [g.op("Mul", [m, e]), g.const(np.array(0.5))])
    return g.model([1, 64, 128], g.op("Add", [x1, _linear(g, m, 4 * d, d)]))


@_net("seg_resize_gate_256", (1, 3, 256, 256))
def seg_resize(rng):
    """An encoder of strided convs, sigmoid gating (x * sigmoid(x)) and a bilinear decoder that
    resizes back to the input, with a skip connection (a light segmentation network)."""
    g = _G(rng)
    f1 = g.conv("x", 3, 16, stride=2)
    f1 = g.op("Mul", [f1, g.op("Sigmoid", [f1])])
    f2 = g.conv(f1, 16, 32, stride=2)
    f2 = g.op("Mul", [f2, g.op("Sigmoid", [f2])])
    f3 = g.conv(f2, 32, 64, stride=2)
    f3 = g.op("Mul", [f3, g.op("Sigmoid", [f3])])
    up = g.op("Resize", [f3, "", g.const(np.array([1, 1, 2, 2]))], mode="linear",
              coordinate_transformation_mode="pytorch_half_pixel")
    y = g.conv(g.op("Concat", [up, f2], axis=1), 96, 32)
    y = g.op("Relu", [y])
    y = g.op("Resize", [y, "", g.const(np.array([1, 1, 4, 4]))], mode="linear",
             coordinate_transformation_mode="pytorch_half_pixel")
    return g.model([1, 3, 256, 256], g.conv(y, 32, 8, k=1))
