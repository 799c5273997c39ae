"""Helpers of the shared NPU runtime's tests (npu_runtime): every test runs on both chips.

The `chip` fixture (conftest.py) is a `ChipCase`: the chip's backend, its simulator and mock
devices (one each per module), its zoo networks compiled for it (cached per process) and its
deployment options under neutral names (merge, FTMP reuse, OCM), so one test states the
runtime's behaviour for the ZG330 and the Buyi alike. Tests with a heavy network parametrise
`chip` themselves with `HEAVY`: the second chip's case is slow (left out of the default run)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from host_backend import HostBackend
from xrt import Device, HostDevice, Session

#: chip -> (package, backend name, the vendor's option names: merge on/off, FTMP reuse on/off)
_CHIPS = {
    "zg330": ("zg330backend", "ZG330", {"merge": (None, "disableMergeHardOp"),
                                        "reuse": (None, "disableEtmOptimize")}),
    "buyi": ("buyibackend", "Buyi", {"merge": ("speedMode", None),
                                     "reuse": ("compressFtmp", None)}),
}
CHIPS = list(_CHIPS)
#: the chips of a test with a heavy network: the Buyi's case runs with -m slow
HEAVY = ["zg330", pytest.param("buyi", marks=pytest.mark.slow)]

_COMPILED: dict = {}
_REFS: dict = {}


@dataclass
class ChipCase:
    kind: str
    package: str
    backend: type
    options: dict[str, tuple[str | None, str | None]]
    dev: Any = None
    _mock: Any = field(default=None, repr=False)

    # --- devices -------------------------------------------------------------------------------
    def mock(self) -> Any:
        """The chip's mock device (applies and dumps snapshots; cannot forward)."""
        if self._mock is None:
            self._mock = Device.Open(f"mock://{self.kind}")
        return self._mock

    def device_class(self) -> type:
        return self.backend.device_class

    def config(self) -> Any:
        return self.backend.chip.config

    # --- networks ------------------------------------------------------------------------------
    def compiled(self, name: str, **kw: Any) -> tuple[Any, Any]:
        """(quantized, lowered for this chip) zoo network: minmax on 2 images, nearest weight
        rounding, cached per process."""
        key = (self.kind, name, tuple(sorted(kw.items())))
        if key not in _COMPILED:
            from xcompile import zoo
            from xcompile.quant.quantize import quantize_network

            lowering = importlib.import_module(f"{self.package}.lowering")
            net = zoo.build(name, **kw)
            q = quantize_network(net, zoo.calibration_set(name, count=2, **kw), bits=8,
                                 method="minmax", weight_rounding="nearest")
            _COMPILED[key] = (q, lowering.lower(lowering.adapt(q)))
        return _COMPILED[key]

    def tag(self, v: Any) -> dict[str, Any]:
        """The lowering's placement tag of value `v` (buffer, c_off, pitch, c)."""
        return v.tags[self.backend.chip.tag]

    # --- deployment options --------------------------------------------------------------------
    def configure(self, b: Any, *, merge: bool | None = None, reuse: bool | None = None,
                  no_ocm: bool = False) -> None:
        """Set merge / FTMP reuse through the chip's vendor methods (None: the chip's
        default); `no_ocm`: every map in ETM (the ZG330's ocmOptimize(NONE); a Buyi network
        compiled without OCM already is)."""
        for what, want in (("merge", merge), ("reuse", reuse)):
            if want is None:
                continue
            name = self.options[what][0 if want else 1]
            if name is not None:
                getattr(b, name)()
            assert (b.is_mergeHardop if what == "merge" else b.is_etmOptimize) == want
        if no_ocm:
            if self.kind == "zg330":
                b.ocmOptimize(0)
            assert int(b.ocmopt) == 0

    def option_calls(self, b: Any) -> list[Any]:
        """Every vendor deployment option of the chip, as calls (the call-order tests)."""
        names = [n for pair in self.options.values() for n in pair if n is not None]
        calls = [getattr(b, n) for n in names]
        if self.kind == "zg330":
            calls.append(lambda: b.ocmOptimize(0))
        return calls

    def session(self, z: Any, dev: Any = None, *, profile: bool = True, **options: Any
                ) -> tuple[Any, Any]:
        """An applied session (this chip's backend, then the host) and its NPU backend."""
        s = Session.Create([self.backend, HostBackend], z.view(0),
                           [dev or self.dev, HostDevice.Default()])
        b = s.backends[0]
        self.configure(b, **options)
        s.enableTimeProfile(profile)
        s.apply()
        return s, b

    def load(self, path: Any, dev: Any = None) -> Any:
        return Session.CreateWithSnapshot(path, [self.backend, HostBackend],
                                          [dev or self.dev, HostDevice.Default()])


def x_of(q: Any, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=q.inputs()[0].shape).astype(np.float32)


def host_ref(q: Any, x: np.ndarray) -> list[np.ndarray]:
    """The integer reference: the quantized network on the HostBackend (cached)."""
    key = (id(q), x.tobytes())
    if key not in _REFS:
        s = Session.Create([HostBackend], q.view(0), [HostDevice.Default()])
        s.apply()
        _REFS[key] = [np.asarray(t).copy() for t in s.forward([x])]
        s.close()
    return _REFS[key]


def run(s: Any, x: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(t).copy() for t in s.forward([x])]
