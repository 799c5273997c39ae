"""ResNet-18 (He et al. 2015; torchvision layout and parameter names).

7x7/2 stem conv-bn-relu, 3x3/2 maxpool, four stages of two BasicBlocks (64, 128, 256, 512
channels; the first block of stages 2-4 strides by 2 and projects its shortcut with a 1x1/2
conv + BN), global average pool, fully connected 1000. 11,689,512 parameters, 1.82 GMACs at
224x224.
"""

from __future__ import annotations

from xcompile.zoo.blocks import IMAGENET_MEAN, IMAGENET_STD, ZooBuilder, probe_images
from xir.network import Network
from xir.values import Value

NAME = "resnet18"
DEFAULT_INPUT_SIZE = 224
MEAN, STD = IMAGENET_MEAN, IMAGENET_STD
NUM_CLASSES = 1000
PROBE_SIZE = 128  # BN statistics come from 8 probe images of 128x128
PROBE_COUNT = 8


def basic_block(z: ZooBuilder, x: Value, cout: int, stride: int, name: str) -> Value:
    y = z.conv_bn_act(x, cout, 3, stride=stride, act="relu", name=name,
                      conv_name=f"{name}.conv1", bn_name=f"{name}.bn1")
    # the residual branch ends with a smaller gamma, as trained ResNets do, so that the sum
    # does not grow with depth
    y = z.conv_bn_act(y, cout, 3, act=None, name=name, conv_name=f"{name}.conv2",
                      bn_name=f"{name}.bn2", gamma=0.5)
    if stride != 1 or x.shape[3] != cout:
        x = z.conv_bn_act(x, cout, 1, stride=stride, pad=0, act=None, name=name,
                          conv_name=f"{name}.downsample.0", bn_name=f"{name}.downsample.1")
    return z.act(z.add(y, x, name=f"{name}.add"), "relu", name=f"{name}.relu")


def build(seed: int = 0, input_size: int | None = None, batch: int = 1) -> Network:
    size = input_size or DEFAULT_INPUT_SIZE
    if size < 32:
        raise ValueError(f"resnet18 needs an input of at least 32x32, not {size}")
    z = ZooBuilder(NAME, seed)
    x = z.input([batch, size, size, 3])
    y = z.conv_bn_act(x, 64, 7, stride=2, pad=3, act="relu", name="stem", conv_name="conv1",
                      bn_name="bn1", edge_filters=True)
    y = z.max_pool(y, 3, 2, 1, name="maxpool")
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            stride = 2 if stage > 1 and i == 0 else 1
            y = basic_block(z, y, cout, stride, f"layer{stage}.{i}")
    y = z.flatten(z.global_avg_pool(y, name="avgpool"), name="flatten")
    logits = z.linear(y, NUM_CLASSES, name="fc")
    probe = probe_images(seed, min(size, PROBE_SIZE), PROBE_COUNT, MEAN, STD)
    return z.finish([logits], probe, ["logits"])
