"""Small networks written the way exporters write them (torch.onnx, paddle2onnx, Caffe2's
converter), reproduced with onnx.helper and seeded weights: the decomposed activations, constant
scale layers, dynamic dimensions and layouts the importer and the passes must recognise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: name -> (builder, input shape to compile with)
NETS: dict[str, tuple[Callable[[np.random.Generator], object], tuple[int, ...]]] = {}


def _net(name: str, shape: tuple[int, ...]):
    def deco(fn):
        NETS[name] = (fn, shape)
        return fn
    return deco


class _G:
    """A tiny graph builder over onnx.helper."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr: np.ndarray) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def op(self, op_type: str, ins: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, ins, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, group: int = 1, stride: int = 1
             ) -> str:
        w = self.rng.normal(0, np.sqrt(2.0 / (cin // group * k * k)), (cout, cin // group, k, k))
        b = self.rng.normal(0, 0.05, cout)
        p = k // 2
        return self.op("Conv", [x, self.const(w), self.const(b)], pads=[p, p, p, p],
                       group=group, strides=[stride, stride])

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        return self.op("BatchNormalization", [x, self.const(r.uniform(0.8, 1.2, c)),
                                              self.const(r.normal(0, 0.1, c)),
                                              self.const(r.normal(0, 0.1, c)),
                                              self.const(r.uniform(0.5, 1.5, c))])

    def hardswish(self, x: str) -> str:  # torch.onnx below opset 14
        a = self.op("Add", [x, self.const(np.array(3.0))])
        c = self.op("Clip", [a, self.const(np.array(0.0)), self.const(np.array(6.0))])
        m = self.op("Mul", [x, c])
        return self.op("Div", [m, self.const(np.array(6.0))])

    def model(self, x_shape: list, y: str, opset: int = 13):
        from onnx import TensorProto, helper

        graph = helper.make_graph(self.nodes, "net",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 x_shape)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                                  self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


@_net("torch_resnet_block", (1, 8, 16, 16))
def resnet_block(rng):
    g = _G(rng)
    y = g.op("Relu", [g.bn(g.conv("x", 8, 8), 8)])
    y = g.bn(g.conv(y, 8, 8), 8)
    return g.model([1, 8, 16, 16], g.op("Relu", [g.op("Add", [y, "x"])]))


@_net("torch_mobilenetv3_block", (1, 8, 16, 16))
def mobilenetv3_block(rng):
    g = _G(rng)
    y = g.hardswish(g.conv("x", 8, 16, k=1))
    y = g.hardswish(g.conv(y, 16, 16, k=3, group=16))
    s = g.op("GlobalAveragePool", [y])
    s = g.op("Relu", [g.conv(s, 16, 4, k=1)])
    s = g.op("HardSigmoid", [g.conv(s, 4, 16, k=1)], alpha=1 / 6, beta=0.5)
    return g.model([1, 8, 16, 16], g.conv(g.op("Mul", [y, s]), 16, 8, k=1))


@_net("paddle_dynamic_hardtanh", (1, 3, 16, 24))
def paddle_dynamic(rng):
    g = _G(rng)
    y = g.op("Clip", [g.conv("x", 3, 8), g.const(np.array(-1.0)), g.const(np.array(1.0))])
    y = g.op("Mul", [g.conv(y, 8, 8), g.const(rng.uniform(0.5, 1.5, (1, 8, 1, 1)))])
    return g.model([-1, 3, "h", "w"], g.op("Add", [y, g.const(rng.normal(0, 0.1, (1, 8, 1, 1)))]))


@_net("caffe2_dense_block", (1, 8, 12, 12))
def dense_block(rng):
    g = _G(rng)
    c = g.op("Concat", [g.conv("x", 8, 8), "x"], axis=1)
    y = g.op("Mul", [g.bn(c, 16), g.const(rng.uniform(0.8, 1.2, (1, 16, 1, 1)))])
    y = g.op("Relu", [g.op("Add", [y, g.const(rng.normal(0, 0.1, (1, 16, 1, 1)))])])
    return g.model([1, 8, 12, 12], g.conv(y, 16, 8, k=1))


@_net("torch_fpn_upsample", (1, 8, 8, 8))
def fpn(rng):
    g = _G(rng)
    lo = g.conv("x", 8, 8, stride=2)
    up = g.op("Resize", [lo, "", g.const(np.array([1, 1, 2, 2]))], mode="nearest")
    return g.model([1, 8, 8, 8], g.conv(g.op("Concat", [up, "x"], axis=1), 16, 8))


@_net("torch_seg_head_bilinear", (1, 3, 20, 20))
def seg_head(rng):
    """F.interpolate(mode="bilinear") as torch.onnx writes it (Resize linear, pytorch_half_pixel,
    scales), a non-integer resize back to the input size (sizes input, half_pixel), and the
    pooled context branch of a PSP-style head."""
    g = _G(rng)
    f = g.op("Relu", [g.conv("x", 3, 8, stride=2)])
    ctx = g.op("AveragePool", [f], kernel_shape=[2, 2], strides=[2, 2])
    up = g.op("Resize", [ctx, "", g.const(np.array([1, 1, 2, 2]))], mode="linear",
              coordinate_transformation_mode="pytorch_half_pixel")
    y = g.conv(g.op("Concat", [f, up], axis=1), 16, 4, k=1)
    sizes = _int_const(g, [1, 4, 20, 20])
    return g.model([1, 3, 20, 20], g.op("Resize", [y, "", "", sizes], mode="linear"))


@_net("torch_classifier_head", (1, 8, 8, 8))
def classifier(rng):
    g = _G(rng)
    y = g.op("GlobalAveragePool", [g.op("Relu", [g.conv("x", 8, 16)])])
    y = g.op("Flatten", [y], axis=1)
    y = g.op("Gemm", [y, g.const(rng.normal(0, 0.3, (10, 16))), g.const(rng.normal(0, 0.1, 10))],
             transB=1)
    return g.model([1, 8, 8, 8], g.op("Softmax", [y], axis=1))


@_net("torch_gelu_mlp", (1, 16, 32))
def gelu_mlp(rng):
    g = _G(rng)
    h = g.op("Add", [g.op("MatMul", ["x", g.const(rng.normal(0, 0.2, (32, 64)))]),
                     g.const(rng.normal(0, 0.1, 64))])
    d = g.op("Div", [h, g.const(np.array(2 ** 0.5))])
    e = g.op("Add", [g.op("Erf", [d]), g.const(np.array(1.0))])
    y = g.op("Mul", [g.op("Mul", [h, e]), g.const(np.array(0.5))])
    return g.model([1, 16, 32], g.op("MatMul", [y, g.const(rng.normal(0, 0.2, (64, 32)))]))


@_net("torch_gelu_tanh_mlp", (1, 16, 32))
def gelu_tanh_mlp(rng):
    """nn.GELU(approximate="tanh") as torch.onnx writes it below opset 20 (x**3 as Pow 3)."""
    g = _G(rng)
    h = g.op("Add", [g.op("MatMul", ["x", g.const(rng.normal(0, 0.2, (32, 64)))]),
                     g.const(rng.normal(0, 0.1, 64))])
    inner = g.op("Add", [h, g.op("Mul", [g.op("Pow", [h, g.const(np.array(3.0))]),
                                         g.const(np.array(0.044715))])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.const(np.array((2 / np.pi) ** 0.5))])])
    y = g.op("Mul", [g.op("Mul", [h, g.const(np.array(0.5))]),
                     g.op("Add", [t, g.const(np.array(1.0))])])
    return g.model([1, 16, 32], g.op("MatMul", [y, g.const(rng.normal(0, 0.2, (64, 32)))]))


@_net("torch_layernorm_decomposed", (1, 16, 32))
def layernorm(rng):
    g = _G(rng)
    m = g.op("ReduceMean", ["x"], axes=[-1])
    d = g.op("Sub", ["x", m])
    v = g.op("ReduceMean", [g.op("Pow", [d, g.const(np.array(2.0))])], axes=[-1])
    s = g.op("Sqrt", [g.op("Add", [v, g.const(np.array(1e-5))])])
    n = g.op("Div", [d, s])
    y = g.op("Add", [g.op("Mul", [n, g.const(rng.uniform(0.5, 1.5, 32))]),
                     g.const(rng.normal(0, 0.1, 32))])
    return g.model([1, 16, 32], g.op("MatMul", [y, g.const(rng.normal(0, 0.2, (32, 32)))]))


@_net("torch_convtranspose_decoder", (1, 8, 8, 8))
def decoder(rng):
    g = _G(rng)
    y = g.op("Relu", [g.conv("x", 8, 8)])
    w = rng.normal(0, 0.3, (8, 4, 3, 3))
    y = g.op("ConvTranspose", [y, g.const(w), g.const(rng.normal(0, 0.1, 4))], strides=[2, 2],
             pads=[1, 1, 1, 1], output_padding=[1, 1])
    return g.model([1, 8, 8, 8], g.conv(g.op("Relu", [y]), 4, 4))


@_net("torch_silu_yolo", (1, 4, 16, 16))
def silu(rng):
    g = _G(rng)
    c = g.conv("x", 4, 8, stride=2)
    y = g.op("Mul", [c, g.op("Sigmoid", [c])])
    return g.model([1, 4, 16, 16], g.conv(y, 8, 8, k=1))


@_net("caffe_lrn_pow", (1, 3, 16, 16))
def lrn_pow(rng):
    """AlexNet's local response normalization (a strong one: alpha 0.5, so it matters), then a
    Pow with a constant fractional exponent on a rectified map."""
    g = _G(rng)
    y = g.op("Relu", [g.conv("x", 3, 12)])
    y = g.op("LRN", [y], size=5, alpha=0.5, beta=0.75, bias=1.0)
    y = g.op("Pow", [g.op("Relu", [g.conv(y, 12, 8)]), g.const(np.array(0.5))])
    return g.model([1, 3, 16, 16], g.conv(y, 8, 8, k=1))


@_net("torch_channel_shuffle", (1, 8, 8, 8))
def shuffle(rng):
    g = _G(rng)
    y = g.conv("x", 8, 8, k=1)
    y = g.op("Reshape", [y, _int_const(g, [1, 2, 4, 8, 8])])
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    y = g.op("Reshape", [y, _int_const(g, [1, 8, 8, 8])])
    return g.model([1, 8, 8, 8], g.conv(y, 8, 8, k=3, group=8))


@_net("torch_attention", (1, 16, 32))
def attention(rng):
    g = _G(rng)
    q = g.op("MatMul", ["x", g.const(rng.normal(0, 0.2, (32, 32)))])
    k = g.op("MatMul", ["x", g.const(rng.normal(0, 0.2, (32, 32)))])
    v = g.op("MatMul", ["x", g.const(rng.normal(0, 0.2, (32, 32)))])
    s = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]),
                     g.const(np.array(32 ** 0.5))])
    p = g.op("Softmax", [s], axis=-1)
    return g.model([1, 16, 32], g.op("MatMul", [g.op("MatMul", [p, v]),
                                                g.const(rng.normal(0, 0.2, (32, 32)))]))


def _int_const(g: _G, values: list[int]) -> str:
    from onnx import numpy_helper

    n = g.name("shape")
    g.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), n))
    return n
