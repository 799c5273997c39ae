"""Helpers of the tests of what runs on the NPU chips: an ONNX model (written with onnx.helper as
exporters write it) compiled in memory for a chip, its HardOps run on the simulator, compared
bit for bit with the integer reference (the adapted network on the HostBackend), and the
placement read back (which ops became HardOps, which stayed on the host and why)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: target -> (backend class name, sim URL)
CHIPS = {"zg330": ("ZG330", "sim://zg330"), "buyi": ("Buyi", "sim://buyi")}


@dataclass
class Compiled:
    quantized: Any
    adapted: Any
    lowered: Any
    target: str

    @property
    def host_ops(self) -> dict[int, tuple[str, str]]:
        """op id -> (op type, reason) of every op the lowering left on the host."""
        reasons = self.lowered.tags[self.target]["host_ops"]
        return {int(k): (self.lowered.getOpById(int(k)).op_type, r) for k, r in reasons.items()}

    def host_types(self) -> set[str]:
        """Op types left on the host, besides the host/NPU edge (Cast, AlignAxis, PruneAxis)."""
        return {t for t, _ in self.host_ops.values()} - {"Cast", "AlignAxis", "PruneAxis"}

    def on_chip(self) -> list[str]:
        """Origin op types of every HardOp (fused ops included), in order."""
        q = {op.op_id: op.op_type for op in self.adapted.ops}
        return [q[i] for op in self.lowered.ops if op.op_type == "HardOp"
                for i in op.origin_ops_id]

    def hardop_of(self, op_type: str) -> list[Any]:
        """The HardOps holding an op of `op_type`."""
        q = {op.op_id: op.op_type for op in self.adapted.ops}
        return [op for op in self.lowered.ops if op.op_type == "HardOp"
                and any(q[i] == op_type for i in op.origin_ops_id)]


def compile_onnx(model: Any, shape: tuple[int, ...], target: str, bits: int = 8,
                 seed: int = 0, calib: int = 3, input_name: str = "x") -> Compiled:
    """Import (input `input_name` fixed to `shape`), optimize, quantize (minmax on `calib` random
    samples, nearest weight rounding), adapt and lower `model` for `target`."""
    from xcompile.frontend import import_onnx
    from xcompile.passes import optimize
    from xcompile.quant.quantize import quantize_network
    from xrt import plugins

    net = optimize(import_onnx(model, {input_name: list(shape)}, name="net"))
    rng = np.random.default_rng(seed)
    samples = [[rng.normal(0, 1, shape).astype(np.float32)] for _ in range(calib)]
    q = quantize_network(net, samples, bits=bits, method="minmax", weight_rounding="nearest")
    hook = plugins.target(target)
    adapted = hook.adapt(q)
    return Compiled(q, adapted, hook(adapted), target)


def forward(net: Any, backends: list, devices: list, xs: list[np.ndarray]
            ) -> tuple[list[np.ndarray], dict]:
    from xrt import Session, Tensor

    s = Session.Create(backends, net.view(0), devices)
    try:
        s.apply()
        out = [np.asarray(t).copy() for t in s.forward([Tensor(x) for x in xs])]
        return out, dict(s.backendBindings())
    finally:
        s.close()


def reference(c: Compiled, xs: list[np.ndarray]) -> list[np.ndarray]:
    """The integer reference: the adapted network on the HostBackend."""
    from host_backend import HostBackend
    from xrt import HostDevice

    return forward(c.adapted, [HostBackend], [HostDevice.Default()], xs)[0]


def run_chip(c: Compiled, xs: list[np.ndarray]) -> list[np.ndarray]:
    """The lowered network with its HardOps on the chip's simulator (asserted bound there)."""
    from host_backend import HostBackend
    from xrt import Device, HostDevice, plugins

    name, url = CHIPS[c.target]
    npu = plugins.backend_class(name)
    dev = Device.Open(url)
    try:
        out, bound = forward(c.lowered, [npu, HostBackend], [dev, HostDevice.Default()], xs)
    finally:
        dev.close()
    hard = [op.op_id for op in c.lowered.ops if op.op_type == "HardOp"]
    assert hard and all(isinstance(bound[i], npu) for i in hard)
    return out


def assert_bit_exact(c: Compiled, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Run on the chip and on the reference; every output identical, bit for bit."""
    got, want = run_chip(c, xs), reference(c, xs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes(), f"max |diff| {np.abs(g - w).max()}"
    return got


def check_quantized(net: Any, target: str, seed: int = 0) -> Any:
    """Lower a quantized network built directly (its inputs already integer) for `target`,
    run it on the chip and on the HostBackend with random codes, assert every output
    bit-identical; return the lowered network."""
    from host_backend import HostBackend
    from xrt import Device, HostDevice, plugins

    rng = np.random.default_rng(seed)
    xs = []
    for v in net.inputs():
        info = np.iinfo(v.dtype.numpy_dtype)
        xs.append(rng.integers(info.min, info.max + 1, size=v.shape).astype(v.dtype.numpy_dtype))
    want = forward(net, [HostBackend], [HostDevice.Default()], xs)[0]
    lowered = plugins.target(target)(net)
    name, url = CHIPS[target]
    npu = plugins.backend_class(name)
    dev = Device.Open(url)
    try:
        got, bound = forward(lowered, [npu, HostBackend], [dev, HostDevice.Default()], xs)
    finally:
        dev.close()
    assert all(isinstance(bound[op.op_id], npu) for op in lowered.ops if op.op_type == "HardOp")
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes(), f"max |diff| {np.abs(g.astype(int) - w).max()}"
    return lowered


def hard_kinds(lowered: Any, origin_type: str, source: Any) -> list[list[str]]:
    """The layer kinds of every HardOp of `lowered` holding an op of `origin_type` (op types
    read from `source`, the network that was lowered)."""
    types = {op.op_id: op.op_type for op in source.ops}
    return [op.device_info["kinds"] for op in lowered.ops if op.op_type == "HardOp"
            and any(types.get(i) == origin_type for i in op.origin_ops_id)]


def host_types(lowered: Any, target: str) -> set[str]:
    """Op types the lowering left on the host (Input / Output aside)."""
    return {lowered.getOpById(int(k)).op_type for k in lowered.tags[target]["host_ops"]}
