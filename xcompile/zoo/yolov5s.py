"""YOLOv5s, release v6.0 architecture (Ultralytics yolov5s.yaml; depth 0.33, width 0.50).

Conv = Conv2d (no bias) + BatchNorm2d (eps 1e-3) + SiLU. Backbone: the 6x6/2 pad-2 stem conv
(v6.0 replaced the Focus space-to-depth layer by this equivalent conv), Conv 3x3/2 stages of
64/128/256/512 channels each followed by C3 blocks repeated 1/2/3/1 times (with shortcut), and
SPPF (1x1 conv, three chained 5x5/1 maxpools, concat, 1x1 conv). PAN neck: 1x1 conv, nearest
upsample x2, concat with the backbone, C3 without shortcut (top-down twice), then 3x3/2 conv,
concat, C3 (bottom-up twice). Detect: one 1x1 conv with bias per level to 3 * (5 + 80) = 255
channels at strides 8/16/32. The outputs are these three raw maps (NHWC), without the
sigmoid/grid decode. Parameter names follow the Ultralytics state dict (model.N...).
7,235,389 parameters, 8.2 GMACs (16.5 GFLOPs) at 640x640.
"""

from __future__ import annotations

import math

import numpy as np

from xcompile.zoo.blocks import ZooBuilder, probe_images
from xir.network import Network
from xir.values import Value

NAME = "yolov5s"
DEFAULT_INPUT_SIZE = 640
MEAN, STD = None, None  # YOLOv5 feeds pixels / 255, no mean/std
NUM_CLASSES = 80
NUM_ANCHORS = 3
STRIDES = (8, 16, 32)
PROBE_SIZE = 224  # BN statistics come from 6 probe images of 224x224
PROBE_COUNT = 6
BN_EPS = 1e-3
# The residual branches of the C3 bottlenecks end with a small BatchNorm gamma, as trained
# networks' do: with gamma 1 the random network amplified a small input perturbation 14x
# (`blocks.noise_gain`; 5x with this), and its int8 outputs on held-out images fell to 0.967.
RESIDUAL_GAMMA = 0.3


def conv(z: ZooBuilder, x: Value, cout: int, k: int, s: int = 1, name: str = "",
         pad: int | None = None, edge_filters: bool = False, gamma: float = 1.0) -> Value:
    return z.conv_bn_act(x, cout, k, stride=s, pad=pad, act="silu", name=name,
                         conv_name=f"{name}.conv", bn_name=f"{name}.bn",
                         edge_filters=edge_filters, gamma=gamma)


def c3(z: ZooBuilder, x: Value, cout: int, n: int, shortcut: bool, name: str) -> Value:
    hidden = cout // 2
    a = conv(z, x, hidden, 1, name=f"{name}.cv1")
    for i in range(n):
        y = conv(z, a, hidden, 1, name=f"{name}.m.{i}.cv1")
        y = conv(z, y, hidden, 3, name=f"{name}.m.{i}.cv2",
                 gamma=RESIDUAL_GAMMA if shortcut else 1.0)
        a = z.add(a, y, name=f"{name}.m.{i}.add") if shortcut else y
    b = conv(z, x, hidden, 1, name=f"{name}.cv2")
    return conv(z, z.concat(a, b, name=f"{name}.cat"), cout, 1, name=f"{name}.cv3")


def sppf(z: ZooBuilder, x: Value, cout: int, name: str) -> Value:
    hidden = x.shape[3] // 2
    y0 = conv(z, x, hidden, 1, name=f"{name}.cv1")
    y1 = z.max_pool(y0, 5, 1, 2, name=f"{name}.m.0")
    y2 = z.max_pool(y1, 5, 1, 2, name=f"{name}.m.1")
    y3 = z.max_pool(y2, 5, 1, 2, name=f"{name}.m.2")
    return conv(z, z.concat(y0, y1, y2, y3, name=f"{name}.cat"), cout, 1, name=f"{name}.cv2")


def upsample(z: ZooBuilder, x: Value, name: str) -> Value:
    return z.b.upsample(x, scale_height=2, scale_width=2, mode="nearest", name=name)


def detect(z: ZooBuilder, x: Value, stride: int, i: int) -> Value:
    """1x1 conv with bias; weights as Ultralytics initialises them (objectness prior for about
    8 objects per 640 image, class prior 0.6 / nc), so the raw maps look like a fresh model."""
    name = f"model.24.m.{i}"
    no = 5 + NUM_CLASSES
    y = z.conv(x, NUM_ANCHORS * no, 1, pad=0, bias=True, name=name, w_gain=1.0)
    b = z.b.net.ops[-1].inputs[2]
    bias = b.data.reshape(NUM_ANCHORS, no).copy()
    bias[:, 4] += math.log(8 / (640 / stride) ** 2)
    bias[:, 5:] += math.log(0.6 / (NUM_CLASSES - 0.99))
    b.setData(bias.reshape(-1).astype(np.float32))
    return y


def build(seed: int = 0, input_size: int | None = None, batch: int = 1) -> Network:
    size = input_size or DEFAULT_INPUT_SIZE
    if size % 32:
        raise ValueError(f"yolov5s needs an input size that is a multiple of 32, not {size}")
    z = ZooBuilder(NAME, seed, bn_eps=BN_EPS)
    x = z.input([batch, size, size, 3], name="images")
    # backbone
    # P1/2: the v6.0 stem, a 6x6/2 conv that replaced the Focus space-to-depth layer
    y = conv(z, x, 32, 6, 2, pad=2, name="model.0", edge_filters=True)
    y = conv(z, y, 64, 3, 2, name="model.1")  # P2/4
    y = c3(z, y, 64, 1, True, "model.2")
    y = conv(z, y, 128, 3, 2, name="model.3")  # P3/8
    p3 = c3(z, y, 128, 2, True, "model.4")
    y = conv(z, p3, 256, 3, 2, name="model.5")  # P4/16
    p4 = c3(z, y, 256, 3, True, "model.6")
    y = conv(z, p4, 512, 3, 2, name="model.7")  # P5/32
    y = c3(z, y, 512, 1, True, "model.8")
    y = sppf(z, y, 512, "model.9")
    # neck (PAN)
    h10 = conv(z, y, 256, 1, name="model.10")
    y = z.concat(upsample(z, h10, "model.11"), p4, name="model.12")
    y = c3(z, y, 256, 1, False, "model.13")
    h14 = conv(z, y, 128, 1, name="model.14")
    y = z.concat(upsample(z, h14, "model.15"), p3, name="model.16")
    out3 = c3(z, y, 128, 1, False, "model.17")  # P3/8 small
    y = z.concat(conv(z, out3, 128, 3, 2, name="model.18"), h14, name="model.19")
    out4 = c3(z, y, 256, 1, False, "model.20")  # P4/16 medium
    y = z.concat(conv(z, out4, 256, 3, 2, name="model.21"), h10, name="model.22")
    out5 = c3(z, y, 512, 1, False, "model.23")  # P5/32 large
    heads = [detect(z, o, s, i) for i, (o, s) in enumerate(zip((out3, out4, out5),
                                                                      STRIDES))]
    probe = probe_images(seed, min(size, PROBE_SIZE), PROBE_COUNT, MEAN, STD)
    return z.finish(heads, probe, ["p3", "p4", "p5"])
