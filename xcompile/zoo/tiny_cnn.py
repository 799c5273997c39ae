"""tiny_cnn: a small CNN for fast tests that touches many op types.

1x32x32x3 -> conv-bn-relu -> conv/2-bn-relu6 -> depthwise-bn-relu -> pointwise-bn -> residual Add
-> maxpool/2 -> [1x1 conv-bn-silu | 3x3 conv-bn-leaky] -> concat -> squeeze-excite (global
avgpool, 1x1 convs, sigmoid, broadcast multiply) -> upsample x2 -> Add -> hardswish -> global
avgpool -> reshape -> matmul + bias -> 10 logits. About 12k parameters; runs in milliseconds.
"""

from __future__ import annotations

from xcompile.zoo.blocks import IMAGENET_MEAN, IMAGENET_STD, ZooBuilder, probe_images
from xir.network import Network

NAME = "tiny_cnn"
DEFAULT_INPUT_SIZE = 32
MEAN, STD = IMAGENET_MEAN, IMAGENET_STD
NUM_CLASSES = 10


def build(seed: int = 0, input_size: int | None = None, batch: int = 1) -> Network:
    size = input_size or DEFAULT_INPUT_SIZE
    if size % 4:
        raise ValueError(f"tiny_cnn needs an input size divisible by 4, not {size}")
    z = ZooBuilder(NAME, seed)
    x = z.input([batch, size, size, 3])
    s1 = z.conv_bn_act(x, 16, 3, act="relu", name="stem", edge_filters=True)
    s2 = z.conv_bn_act(s1, 32, 3, stride=2, act="relu6", name="down")
    d = z.conv_bn_act(s2, 32, 3, groups=32, act="relu", name="dw")
    p = z.conv_bn_act(d, 32, 1, act=None, name="pw", gamma=0.5)
    r = z.add(s2, p, name="res")
    m = z.max_pool(r, 2, 2, 0, name="pool")
    b1 = z.conv_bn_act(m, 16, 1, act="silu", name="branch1")
    b2 = z.conv_bn_act(m, 16, 3, act="leaky", name="branch2")
    c = z.concat(b1, b2, name="cat")
    se = z.global_avg_pool(c, name="se.pool")
    se = z.act(z.conv(se, 8, 1, bias=True, name="se.fc1", w_gain=1.0), "relu", name="se.relu")
    se = z.act(z.conv(se, 32, 1, bias=True, name="se.fc2", w_gain=1.0), "sigmoid",
               name="se.gate")
    c = z.b.multiply(c, se, name="se.scale")
    u = z.b.upsample(c, scale_height=2, scale_width=2, mode="nearest", name="up")
    h = z.act(z.add(u, r, name="fuse"), "hardswish", name="fuse.act")
    g = z.flatten(z.global_avg_pool(h, name="gap"), name="flatten")
    logits = z.linear(g, NUM_CLASSES, name="fc")
    probe = probe_images(seed, size, 8, MEAN, STD)
    return z.finish([logits], probe, ["logits"])
