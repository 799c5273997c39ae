"""MobileNetV2 (Sandler et al. 2018; torchvision layout and parameter names).

3x3/2 stem conv-bn-relu6 to 32 channels, seventeen inverted residual blocks (1x1 expansion by
t, 3x3 depthwise, linear 1x1 projection; identity shortcut when stride 1 and the channels
match), 1x1 conv-bn-relu6 to 1280, global average pool, fully connected 1000 (the dropout of
training is the identity at inference). 3,504,872 parameters, 0.30 GMACs at 224x224.
"""

from __future__ import annotations

from xcompile.zoo.blocks import IMAGENET_MEAN, IMAGENET_STD, ZooBuilder, probe_images
from xir.network import Network
from xir.values import Value

NAME = "mobilenet_v2"
DEFAULT_INPUT_SIZE = 224
MEAN, STD = IMAGENET_MEAN, IMAGENET_STD
NUM_CLASSES = 1000
PROBE_SIZE = 128  # BN statistics come from 8 probe images of 128x128
PROBE_COUNT = 8
# Trained-like weights (see `blocks.ZooBuilder.conv` and `noise_gain`): centre-heavy depthwise
# filters, and residual branches that end with a small BatchNorm gamma, as in the
# zero-init-residual training recipe. With zero-mean random depthwise filters and gamma 0.5
# the network was chaotic: a 0.06% input perturbation came out 87x larger in the logits
# (resnet18: 2.5x), and no int8 quantization could reach 0.99 output cosine (0.975).
DEPTHWISE_BLOB = 0.7
RESIDUAL_GAMMA = 0.2
# t (expansion), c (output channels), n (repeats), s (stride of the first repeat)
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def inverted_residual(z: ZooBuilder, x: Value, cout: int, stride: int, t: int,
                      name: str) -> Value:
    cin = x.shape[3]
    hidden = cin * t
    y = x
    k = 0
    if t != 1:
        y = z.conv_bn_act(y, hidden, 1, act="relu6", name=f"{name}.{k}",
                          conv_name=f"{name}.conv.{k}.0", bn_name=f"{name}.conv.{k}.1")
        k += 1
    y = z.conv_bn_act(y, hidden, 3, stride=stride, groups=hidden, act="relu6",
                      name=f"{name}.{k}", conv_name=f"{name}.conv.{k}.0",
                      bn_name=f"{name}.conv.{k}.1", blob=DEPTHWISE_BLOB)
    use_res = stride == 1 and cin == cout
    y = z.conv_bn_act(y, cout, 1, act=None, name=f"{name}.proj",
                      conv_name=f"{name}.conv.{k + 1}", bn_name=f"{name}.conv.{k + 2}",
                      gamma=RESIDUAL_GAMMA if use_res else 1.0)
    return z.add(x, y, name=f"{name}.add") if use_res else y


def build(seed: int = 0, input_size: int | None = None, batch: int = 1) -> Network:
    size = input_size or DEFAULT_INPUT_SIZE
    if size < 32:
        raise ValueError(f"mobilenet_v2 needs an input of at least 32x32, not {size}")
    z = ZooBuilder(NAME, seed)
    x = z.input([batch, size, size, 3])
    y = z.conv_bn_act(x, 32, 3, stride=2, act="relu6", name="features.0",
                      conv_name="features.0.0", bn_name="features.0.1", edge_filters=True)
    idx = 1
    for t, c, n, s in SETTINGS:
        for i in range(n):
            y = inverted_residual(z, y, c, s if i == 0 else 1, t, f"features.{idx}")
            idx += 1
    y = z.conv_bn_act(y, 1280, 1, act="relu6", name=f"features.{idx}",
                      conv_name=f"features.{idx}.0", bn_name=f"features.{idx}.1")
    y = z.flatten(z.global_avg_pool(y, name="avgpool"), name="flatten")
    logits = z.linear(y, NUM_CLASSES, name="classifier.1")
    probe = probe_images(seed, min(size, PROBE_SIZE), PROBE_COUNT, MEAN, STD)
    return z.finish([logits], probe, ["logits"])
