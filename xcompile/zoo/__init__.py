"""The model zoo: real architectures with seeded, realistic weights, built as xir networks.

    net = xcompile.zoo.build("resnet18", seed=0)            # (1, 224, 224, 3) NHWC -> (1, 1000)
    images = xcompile.zoo.calibration_set("resnet18", 8)   # [[array (1, 224, 224, 3)], ...]

Networks: tiny_cnn (fast tests), resnet18, mobilenet_v2, yolov5s (v6.0, raw head maps).
Weights are deterministic per seed: He-normal convolutions, BatchNorm2d with gamma near 1,
small beta and running statistics measured on synthetic images (see `blocks`), so activations
keep a realistic scale through the depth; where a random architecture would be chaotic
(MobileNetV2's depthwise filters), the weights take the structure trained ones have, so that
small perturbations stay small (`noise_gain`), as they do in trained networks. The images are
synthetic too: smooth colour fields, gradients and shapes, normalised as each network's real
preprocessing does.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from xcompile.zoo.blocks import mac_count, noise_gain, param_count, synthetic_images
from xir.errors import XirError
from xir.network import Network

__all__ = ["build", "names", "calibration_set", "param_count", "mac_count", "noise_gain",
           "UnknownNetworkError"]

_MODULES = ("tiny_cnn", "resnet18", "mobilenet_v2", "yolov5s")


class UnknownNetworkError(XirError, LookupError):
    """No zoo network of that name."""


def names() -> list[str]:
    """The zoo's network names."""
    return list(_MODULES)


def _module(name: str) -> ModuleType:
    if name not in _MODULES:
        raise UnknownNetworkError(
            f"no zoo network named {name!r}; choose one of: {', '.join(_MODULES)}", field="name")
    return importlib.import_module(f"{__name__}.{name}")


def build(name: str, *, seed: int = 0, input_size: int | None = None,
          batch: int = 1) -> Network:
    """Build zoo network `name` with weights drawn from `seed`; input (batch, S, S, 3) NHWC
    float32 with S = input_size or the network's default (32, 224, 224, 640)."""
    mod = _module(name)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, not {batch}")
    net = mod.build(seed=seed, input_size=input_size, batch=batch)
    # kept by every compile stage: tools (quant-report) find the zoo samples from it, never
    # from the network's name (an imported model may be called tiny_cnn too)
    net.tags["zoo"] = {"name": name, "seed": seed, "input_size": input_size}
    return net


def calibration_set(name: str, count: int = 8, seed: int = 0, *,
                    input_size: int | None = None, batch: int = 1) -> list[list[np.ndarray]]:
    """`count` input sets for network `name`, each a list with one float32 NHWC array
    (batch, S, S, 3): synthetic images preprocessed as the network expects (ImageNet mean/std
    for the classifiers, [0, 1] pixels for YOLOv5)."""
    mod = _module(name)
    size = input_size or mod.DEFAULT_INPUT_SIZE
    images = synthetic_images(count, size, size, seed=seed, batch=batch, mean=mod.MEAN,
                              std=mod.STD)
    return [[img] for img in images]
