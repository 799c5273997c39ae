"""Building blocks shared by the zoo networks: seeded layers, BN calibration, synthetic images.

Weights are drawn in build order from one `numpy.random.Generator`, so a network is a pure
function of its seed. Every Conv2d + BatchNorm2d pair starts with placeholder running
statistics; `ZooBuilder.finish` then pushes a few synthetic images through the network and sets
each BatchNorm2d's running mean/var to the statistics its input actually has, in execution
order. With gamma near 1 and small beta, activations keep a sane scale through any depth, as in
a trained network, instead of exploding or vanishing as they would with random statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from xcompile.zoo import _reference
from xir.builder import NetworkBuilder
from xir.network import Network
from xir.ops.base import Operation
from xir.ops.nn import conv_macs
from xir.values import Params, Value

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

ACTIVATIONS = ("relu", "relu6", "leaky", "silu", "hardswish", "sigmoid", None)


class ZooBuilder:
    """A NetworkBuilder with seeded layer helpers (PyTorch-style parameter names)."""

    def __init__(self, name: str, seed: int, *, bn_eps: float = 1e-5) -> None:
        self.b = NetworkBuilder(name, framework_kind="xir-zoo")
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.bn_eps = bn_eps
        self._pending_bn: set[int] = set()

    # --- raw layers ---------------------------------------------------------------------
    def input(self, shape: Sequence[int], name: str = "input") -> Value:
        return self.b.input(list(shape), layout="NHWC", name=name)

    def params(self, array: np.ndarray, name: str, layout: str | None = None) -> Params:
        return self.b.params(np.ascontiguousarray(array, dtype=np.float32), name, layout)

    def conv(self, x: Value, cout: int, k: int | tuple[int, int], *, stride: int = 1,
             pad: int | None = None, groups: int = 1, bias: bool = False, name: str,
             w_gain: float = 2.0, edge_filters: bool = False, blob: float = 0.0) -> Value:
        """Conv2d with He-normal weights (std = sqrt(w_gain / fan_in)); pad defaults to k//2.
        `edge_filters` (for the stem): three quarters of the filters sum to zero spatially.
        `blob` in [0, 1) (for depthwise filters): each filter becomes
        `sqrt(1 - blob**2) * he + blob * g * m`, with `g` a centre-heavy Gaussian blob of the
        He filter's expected energy and `m ~ |N(1, 0.3)|` per filter. Trained depthwise kernels
        are dominated by such centre/blob patterns; zero-mean random 3x3 kernels are high-pass,
        so on smooth images the signal cancels, BatchNorm rescales what is left, and the
        network turns chaotic (see `noise_gain`)."""
        kh, kw = (k, k) if isinstance(k, int) else k
        cin = x.shape[3]
        fan_in = kh * kw * cin // groups
        w = self.rng.normal(0.0, math.sqrt(w_gain / fan_in), (kh, kw, cin // groups, cout))
        if edge_filters and kh * kw > 1:
            # like the Gabor-ish first layer of a trained net: most filters see edges and
            # texture, not the flat colour of the image, which would otherwise dominate
            # every deeper activation of a random network
            keep = self.rng.random(cout) < 0.25  # a quarter stay colour blobs
            dc = w.mean(axis=(0, 1), keepdims=True)
            w = np.where(keep, w, (w - dc) * math.sqrt(kh * kw / (kh * kw - 1)))
        if blob:
            r2 = (np.arange(kh) - kh // 2)[:, None] ** 2 + (np.arange(kw) - kw // 2)[None, :] ** 2
            g = np.exp(-0.5 * r2)
            g *= math.sqrt(w_gain * kh * kw / fan_in) / np.linalg.norm(g)
            m = np.abs(self.rng.normal(1.0, 0.3, cout))
            w = math.sqrt(1.0 - blob * blob) * w + blob * g[:, :, None, None] * m
        ins = [x, self.params(w, f"{name}.weight", "HWIO")]
        if bias:
            bound = 1.0 / math.sqrt(fan_in)
            ins.append(self.params(self.rng.uniform(-bound, bound, cout), f"{name}.bias"))
        ph = kh // 2 if pad is None else pad
        pw = kw // 2 if pad is None else pad
        return self.b.conv2d(*ins, stride_height=stride, stride_width=stride, pad_top=ph,
                             pad_bottom=ph, pad_left=pw, pad_right=pw, groups=groups, name=name)

    def bn(self, x: Value, *, name: str, gamma: float = 1.0) -> Value:
        """BatchNorm2d: gamma ~ gamma * U(0.8, 1.2), beta ~ N(0, 0.05); running stats are
        measured later (`finish`)."""
        c = x.shape[3]
        scale = gamma * self.rng.uniform(0.8, 1.2, c)
        shift = self.rng.normal(0.0, 0.05, c)
        out = self.b.batch_norm2d(
            x, self.params(scale, f"{name}.weight"), self.params(shift, f"{name}.bias"),
            self.params(np.zeros(c), f"{name}.running_mean"),
            self.params(np.ones(c), f"{name}.running_var"), epsilon=self.bn_eps, name=name)
        self._pending_bn.add(out.producer.op_id)
        return out

    def act(self, x: Value, kind: str | None, *, name: str = "") -> Value:
        if kind is None:
            return x
        if kind == "relu":
            return self.b.relu(x, name=name)
        if kind == "relu6":
            return self.b.relu(x, max_value=6.0, name=name)
        if kind == "leaky":
            return self.b.relu(x, alpha=0.1, name=name)
        if kind == "silu":
            return self.b.silu(x, name=name)
        if kind == "hardswish":
            return self.b.hardswish(x, name=name)
        if kind == "sigmoid":
            return self.b.sigmoid(x, name=name)
        raise ValueError(f"unknown activation {kind!r}; use one of {ACTIVATIONS}")

    def conv_bn_act(self, x: Value, cout: int, k: int, *, stride: int = 1,
                    pad: int | None = None, groups: int = 1, act: str | None = "relu",
                    name: str, conv_name: str | None = None, bn_name: str | None = None,
                    gamma: float = 1.0, edge_filters: bool = False, blob: float = 0.0) -> Value:
        """Conv2d (no bias) + BatchNorm2d + activation: the conv block of every zoo network."""
        y = self.conv(x, cout, k, stride=stride, pad=pad, groups=groups,
                      name=conv_name or f"{name}.conv", edge_filters=edge_filters, blob=blob)
        y = self.bn(y, name=bn_name or f"{name}.bn", gamma=gamma)
        return self.act(y, act, name=f"{name}.act")

    def max_pool(self, x: Value, k: int, stride: int, pad: int, *, name: str) -> Value:
        return self.b.max_pool2d(x, pool_height=k, pool_width=k, stride_height=stride,
                                 stride_width=stride, pad_top=pad, pad_bottom=pad,
                                 pad_left=pad, pad_right=pad, name=name)

    def global_avg_pool(self, x: Value, *, name: str) -> Value:
        return self.b.avg_pool2d(x, is_global=True, name=name)

    def flatten(self, x: Value, *, name: str) -> Value:
        """(N, 1, 1, C) -> (N, C); the batch entry 0 copies N, so any batch size runs."""
        return self.b.reshape(x, shape=[0, -1], name=name)

    def linear(self, x: Value, cout: int, *, name: str) -> Value:
        """Matmul + bias with PyTorch's default Linear init (U(+-1/sqrt(fan_in)))."""
        fan_in = x.shape[-1]
        bound = 1.0 / math.sqrt(fan_in)
        w = self.rng.uniform(-bound, bound, (fan_in, cout))
        b = self.rng.uniform(-bound, bound, cout)
        return self.b.matmul(x, self.params(w, f"{name}.weight"),
                             self.params(b, f"{name}.bias"), name=name)

    def add(self, a: Value, b: Value, *, name: str = "") -> Value:
        return self.b.add(a, b, name=name)

    def concat(self, *xs: Value, name: str = "") -> Value:
        return self.b.concat(*xs, axis=3, name=name)

    # --- finishing ------------------------------------------------------------------------
    def finish(self, outputs: Sequence[Value], probe: Sequence[np.ndarray],
               output_names: Sequence[str] = ()) -> Network:
        """Add the Output op, validate, and calibrate batch-norm statistics on `probe`."""
        for v, name in zip(outputs, output_names):
            v.name = name
        self.b.output(*outputs)
        net = self.b.build()
        calibrate_batchnorm(net, probe, self._pending_bn)
        self._pending_bn = set()
        return net


def calibrate_batchnorm(net: Network, probe: Sequence[np.ndarray],
                        op_ids: set[int] | None = None) -> None:
    """Set the running mean/var of BatchNorm2d ops (all, or those in `op_ids`) to the
    per-channel statistics of their inputs when `probe` (one array per network input) runs.

    Ops run in execution order, so each BN sees inputs already normalised by the BNs before it,
    as in training. The probe may use a smaller image size than the network declares: the
    statistics are per channel, and the zoo networks are fully convolutional up to the pool.
    """

    def before(op: Operation, ins: list[np.ndarray]) -> None:
        if op.op_type != "BatchNorm2d" or (op_ids is not None and op.op_id not in op_ids):
            return
        x = ins[0].astype(np.float64)
        mean = x.mean(axis=(0, 1, 2))
        var = x.var(axis=(0, 1, 2))
        op.inputs[3].setData(mean.astype(np.float32))
        op.inputs[4].setData(np.maximum(var, 1e-6).astype(np.float32))

    _reference.run(net, probe, before_op=before)


# --- figures -------------------------------------------------------------------------------

def noise_gain(net: Network, sample: Sequence[np.ndarray], rel: float = 1e-3,
               seed: int = 0) -> float:
    """How much a small random input perturbation grows through `net` (float): the relative
    L2 change of the outputs (worst output) divided by the relative change of the inputs,
    for Gaussian noise of `rel` times each input's standard deviation.

    Trained networks are noise-stable (Arora et al. 2018): such noise stays about the same
    size, where a random network with BatchNorm can amplify it by orders of magnitude. Every
    rounding step of a quantized network is such a perturbation, so this figure tells a
    realistic zoo network from one whose int8 accuracy says nothing about real ones."""
    rng = np.random.default_rng(seed)
    xs = [np.asarray(a, np.float32) for a in sample]
    noisy = [(a + rng.normal(0.0, rel * float(a.std()), a.shape)).astype(np.float32)
             for a in xs]
    d_in = max(float(np.linalg.norm(b - a) / np.linalg.norm(a)) for a, b in zip(xs, noisy))
    ref, out = _reference.run(net, xs), _reference.run(net, noisy)
    d_out = max(float(np.linalg.norm(np.float64(b) - np.float64(a))
                      / max(np.linalg.norm(np.float64(a)), 1e-30)) for a, b in zip(ref, out))
    return d_out / d_in


def param_count(net: Network, *, trainable: bool = True) -> int:
    """Number of parameter scalars; `trainable` leaves out BN running statistics (the figure
    papers and torchvision quote)."""
    skip: set[int] = set()
    if trainable:
        for op in net.ops:
            if op.op_type == "BatchNorm2d":
                skip.update(v.v_id for v in op.inputs[3:5])
    return sum(p.dtype.numel() for p in net.params() if p.v_id not in skip)


def mac_count(net: Network) -> int:
    """Multiply-accumulates of the convolutions and matmuls, for one forward pass."""
    return sum(conv_macs(op) for op in net.ops)


# --- synthetic images ----------------------------------------------------------------------

def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) matrix that linearly interpolates n_in samples onto n_out points."""
    pos = np.linspace(0.0, n_in - 1, n_out)
    i0 = np.minimum(np.floor(pos).astype(int), n_in - 2)
    frac = pos - i0
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), i0] = 1.0 - frac
    m[np.arange(n_out), i0 + 1] = frac
    return m


def _one_image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """An (h, w, 3) image in [0, 1]: colour gradient, low-frequency noise, a few soft shapes,
    a little sensor noise. Smooth like a photograph, not white noise."""
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    theta = rng.uniform(0, 2 * np.pi)
    ramp = xx * np.cos(theta) + yy * np.sin(theta)
    img = rng.uniform(0.2, 0.7, 3) + rng.normal(0, 0.25, 3) * ramp[..., None]
    for cells, amp in ((3, 0.25), (7, 0.12), (17, 0.06)):
        # mostly luminance (shared by the channels), some colour
        grid = rng.normal(0, amp, (cells + 1, cells + 1, 1)) \
            + rng.normal(0, 0.4 * amp, (cells + 1, cells + 1, 3))
        mh, mw = _interp_matrix(h, cells + 1), _interp_matrix(w, cells + 1)
        img += np.einsum("hi,ijc,wj->hwc", mh, grid, mw)
    for _ in range(rng.integers(2, 6)):
        cy, cx = rng.uniform(0, 1, 2)
        ry, rx = rng.uniform(0.05, 0.3, 2)
        colour = rng.uniform(0, 1, 3)
        if rng.random() < 0.5:
            d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2  # ellipse
        else:
            d = np.maximum(np.abs(yy - cy) / ry, np.abs(xx - cx) / rx) ** 2  # rectangle
        edge = 0.02 + 0.1 * rng.random()
        alpha = rng.uniform(0.6, 1.0) / (1.0 + np.exp(np.minimum((d - 1.0) / edge, 50.0)))
        img = img * (1 - alpha[..., None]) + colour * alpha[..., None]
    img += rng.normal(0, 0.01, img.shape)
    return np.clip(img, 0.0, 1.0)


def synthetic_images(count: int, height: int, width: int, *, seed: int = 0, batch: int = 1,
                     mean: Sequence[float] | None = IMAGENET_MEAN,
                     std: Sequence[float] | None = IMAGENET_STD) -> list[np.ndarray]:
    """`count` float32 NHWC arrays of shape (batch, height, width, 3), normalised as
    `(img - mean) / std` (mean/std None: plain [0, 1] pixels, as YOLO preprocesses)."""
    rng = np.random.default_rng([seed, height, width, 0x5EED])
    m = np.zeros(3) if mean is None else np.asarray(mean, np.float64)
    s = np.ones(3) if std is None else np.asarray(std, np.float64)
    out = []
    for _ in range(count):
        imgs = [(_one_image(rng, height, width) - m) / s for _ in range(batch)]
        out.append(np.stack(imgs).astype(np.float32))
    return out


def probe_images(seed: int, size: int, count: int, mean, std) -> list[np.ndarray]:
    """The batch a network calibrates its BN statistics on (one input, `count` images)."""
    imgs = synthetic_images(1, size, size, seed=seed + 7919, batch=count, mean=mean, std=std)
    return imgs
