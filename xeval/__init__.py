"""Dataset-scale evaluation and hardware design-space sweeps on the simulated chips, in one
process, on an embedded Dask LocalCluster or on a running Dask scheduler (docs/eval-sweep.md).

    from xeval import evaluate, sweep
    rows = evaluate("out/net_ZG.json", "data/", reference="net.onnx", workers=2)
    points = sweep("out/net_ZG.json", {"mpe": ["4x4", "2x2"], "ocm_kib": [0, 2048]})
"""

from __future__ import annotations

from .evaluate import Rows, evaluate
from .sweep import sweep

__all__ = ["Rows", "evaluate", "sweep"]
