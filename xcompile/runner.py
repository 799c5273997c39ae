"""How the compile pipeline runs networks: calibration, GPTQ and the accuracy report need the
float (and quantized) network executed, and the report runs single ops alone. They receive a
`Runner` rather than importing a backend, so the pipeline stays above the runtime and any
backend that runs xir ops can stand in.

`HostRunner` (the default) runs on the `Host` backend found through the xrt plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

#: on_value(value, array): called with every op output of every sample
OnValue = Callable[[Any, np.ndarray], None]


class Runner(Protocol):
    """Executes xir networks and single ops on numpy arrays."""

    def run(self, net: Any, samples: Iterable[list[np.ndarray]], on_value: OnValue
            ) -> list[list[np.ndarray]]:
        """Run `net` once per sample, calling `on_value` for every op output; the network
        outputs per sample."""
        ...

    def run_op(self, op: Any, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
        """One op on its feature inputs; None when this runner has no kernel for it."""
        ...


class HostRunner:
    """A `Runner` on the xrt `Host` backend (the CPU reference) and the host device."""

    def __init__(self, backend: str = "Host") -> None:
        from xrt import plugins

        self._cls = plugins.backend_class(backend)
        self._single: Any = None
        #: op_id -> the op object the single-op backend planned under that id
        self._planned: dict[int, Any] = {}

    def run(self, net: Any, samples: Iterable[list[np.ndarray]], on_value: OnValue
            ) -> list[list[np.ndarray]]:
        from xrt import HostDevice, Session, Tensor

        sess = Session.Create([self._cls], net.view(0), [HostDevice.Default()])
        sess.apply()

        def post(_sess: Any, op: Any, _backend: Any, outs: list[Any]) -> None:
            for v, t in zip(op.outputs, outs):
                on_value(v, np.asarray(t))

        sess.setPostCallBack(post)
        results = []
        try:
            for sample in samples:
                outs = sess.forward([Tensor(np.ascontiguousarray(a)) for a in sample])
                results.append([np.array(t) for t in outs])
        finally:
            sess.close()
        return results

    def run_op(self, op: Any, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
        from xrt import Tensor

        if self._single is None or self._planned.get(op.op_id, op) is not op:
            # a backend plans an op once per op_id (the HostBackend's kernel and types): an
            # op of another network under the same id (the float op after its quantized twin,
            # as the report's per-op measures run them) needs a fresh one
            self._single = self._cls()
            self._planned = {}
        self._planned[op.op_id] = op
        if self._single.getForwardFunc(op) is None:
            return None
        res = self._single.forwardOp(op, [Tensor(np.ascontiguousarray(a)) for a in inputs])
        return [np.asarray(t) for t in res]


def default_runner() -> Runner:
    """The runner used when a caller gives none."""
    return HostRunner()
