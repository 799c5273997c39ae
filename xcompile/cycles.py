"""Chip cycles of a lowered network, counted on the target's cycles-only simulator
(`sim://<target>?mode=cycles`, docs/eval-sweep.md): the core decodes, plans and moves tiles and
counts every cycle exactly as a full run does, without computing outputs. The compile uses it
to say what an int16 raise costs (`xcompile.pipeline`): one forward of the all-int8 network and
one of the mixed one.

xcompile imports no backend: the chip's backend class is the one registered by the plugin
that registered the target, found through `xrt.plugins`; ops the chip leaves to the host run
on the `Host` backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xrt.errors import XrtError

__all__ = ["CyclesUnavailable", "cycles_device_url", "forward_cycles"]


class CyclesUnavailable(XrtError):
    """The target has no cycles-only device (no `sim://<target>?mode=cycles`, or no backend
    registered beside its lowering): the cost of a raise cannot be counted."""


def cycles_device_url(target: str) -> str:
    """The cycles-only simulator URL of a compile target."""
    return f"sim://{target}?mode=cycles"


def _chip_backend(target: str) -> type:
    """The backend class registered by the plugin that registered `target`'s lowering."""
    from xrt import plugins

    reg = plugins.registry()
    if target not in reg.targets:
        raise CyclesUnavailable(f"no compile target '{target}' is installed")
    plugin = reg.targets[target][1]
    found = [cls for cls, p in reg.backends.values() if p == plugin]
    if len(found) != 1:
        raise CyclesUnavailable(f"target '{target}': plugin '{plugin}' registers "
                                f"{len(found)} backends, not one")
    return found[0]


def _finite(ins: list) -> None:
    """Replace, in the list a host op is about to read, every float tensor holding NaN or
    infinity by a copy with those set to 0 (placeholder numbers of a cycles-only forward)."""
    from xrt import Tensor

    for i, t in enumerate(ins):
        a = np.asarray(t)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            ins[i] = Tensor(np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0))


def forward_cycles(net: Any, target: str) -> int:
    """Chip cycles of one forward of `net` (a network lowered for `target`, in memory) on
    `sim://<target>?mode=cycles`: the sum of the chip backend's profiler cycles over its
    HardOps. Inputs are a fixed random draw (cycles do not depend on the values). Raises
    `CyclesUnavailable` when the target has no such device."""
    from xrt import Device, Session, Tensor, plugins

    chip_cls = _chip_backend(target)
    try:
        dev = Device.Open(cycles_device_url(target))
    except XrtError as exc:
        raise CyclesUnavailable(f"{cycles_device_url(target)}: {exc}") from None
    devices = [dev, Device.Open("host://")]
    sess = None
    try:
        sess = Session.Create([chip_cls, plugins.backend_class("Host")], net.view(0), devices)
        sess.apply()
        rng = np.random.default_rng(0)
        # a cycles-only chip writes no values: the host ops after it compute on placeholder
        # zeros (a 0 / 0 in a LayerNorm's division), numbers nobody reads; their NaNs become
        # zeros before the next host op reads them (a quantizing Cast refuses NaN), so the
        # chip runs after them are counted too; a host op that still cannot compute leaves
        # the cycles uncounted, said so
        sess.setPreCallBack(lambda s, op, backend, ins: None if isinstance(backend, chip_cls)
                            else _finite(ins))
        try:
            with np.errstate(all="ignore"):
                sess.forward([Tensor(rng.standard_normal(v.shape).astype(v.dtype.numpy_dtype))
                              for v in net.inputs()])
        except (ValueError, ArithmeticError) as exc:
            raise CyclesUnavailable(f"a host op between the chip runs cannot compute on the "
                                    f"cycles-only chip's placeholder outputs ({exc})") from None
        return sum(int(r["cycles"]) for r in sess.backends[0].profileInfo().values())
    finally:
        if sess is not None:
            sess.close()
        for d in devices:
            d.close()
