"""Per-layer accuracy of a quantized network against its float network.

    rep = accuracy_report(float_net, quant_net, samples)
    rep.print()                 # rich table in the terminal
    rep.to_json()               # {"network", "bits", "method", "outputs": [...], "layers": [...]}

Both networks run with a `xcompile.runner.Runner` (the HostBackend by default) over the
same samples; every op output is captured by the
session's post-callback. A quantized value is matched to the float value named by its
`tags["float_v_id"]` (the quantizer records it; without the tag, the same v_id), dequantized
with its scale, and compared over all samples together:

- `cosine`: cosine similarity of the flattened tensors (1.0 when both are all zero);
- `max_abs_err`, `mean_abs_err`: absolute errors in real units;
- `rel_err`: `max_abs_err / max |float|`;
- `sat_rate`: fraction of codes at the dtype's limits (saturated) for integer values;
- `alone`: the cosine of the op run by itself: its inputs are the *float* network's values,
  quantized to the op's input types, so only this op's own rounding (inputs, weights,
  requantization) shows, not what the layers before it lost. Toolkits call the two figures the
  entire and the single error; a layer with a low `alone` is the one to raise with `op_bits`
  (docs/quantization.md section 10). None where the op cannot be run alone (a float input).
- `output_loss`: what the network's outputs lose (mean over samples of 1 - the worst output
  part) when only this op computes as in `alone`, everything else float
  (`xcompile.quant.sensitivity`): the op's cost where it counts. Measured when the partial
  forwards it needs stay within `sensitivity.MAX_MACS` (or `sensitivity=True`); `raisable`
  ranks by it when present, since a local `alone` misses an error the next layers amplify
  (PP-OCRv4's stem) and flags one the head hardly reads.

The network outputs are measured per *part* too (`xcompile.quant.parts`): a Concat output
per input branch (a detector's boxes and class scores), score parts with their top-5
agreement and the entries above 0.25 each side keeps. `Report.parts` holds them (json
"parts"), `Report.collapsed()` the parts that collapsed: a whole-output cosine of 0.999 over
box pixels says nothing about class scores that all rounded to 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from xcompile.quant.calibrate import load_calibration, run_float
from xcompile.quant.dw_equalize import channel_gain
from xcompile.quant.parts import (  # noqa: F401 - cosine is part of this module's API
    PartResult,
    compare_parts,
    compare_samples,
    cosine,
    output_parts,
)
from xcompile.quant.sensitivity import MAX_MACS, output_sensitivity, rerun_macs
from xcompile.runner import Runner, default_runner

__all__ = ["LayerRow", "Report", "accuracy_report", "cosine"]


@dataclass
class LayerRow:
    op_id: int
    op_type: str
    name: str
    v_id: int
    float_v_id: int
    dtype: str
    shape: list[int]
    cosine: float
    max_abs_err: float
    mean_abs_err: float
    rel_err: float
    sat_rate: float
    alone: float | None = None
    #: the bits the op computes at: its widest quantized feature input's (None: no such input)
    in_bits: int | None = None
    #: 1 - the worst output part with only this op quantized (as `alone`; None: not measured)
    output_loss: float | None = None


@dataclass
class Report:
    network: str
    bits: int | None
    method: str | None
    rows: list[LayerRow] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)
    #: the outputs per part, over every sample together (`xcompile.quant.parts`)
    parts: list[PartResult] = field(default_factory=list)
    #: per part name: the lowest cosine of any one sample (0.0 where that sample collapsed)
    part_worst_sample: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        parts = []
        for r in self.parts:
            d = r.as_dict()
            d["worst_sample"] = self.part_worst_sample.get(r.part.name)
            d.update(r.extra)
            parts.append(d)
        return {"network": self.network, "bits": self.bits, "method": self.method,
                "outputs": list(self.outputs), "parts": parts,
                "collapsed": [r.part.name for r in self.collapsed()],
                "layers": [asdict(r) for r in self.rows]}

    def collapsed(self) -> list[PartResult]:
        """The output parts that collapsed (over all samples, or in any one sample)."""
        return [r for r in self.parts
                if r.collapsed or self.part_worst_sample.get(r.part.name, 1.0) <= 0.0]

    def verdict(self, min_cosine: float = 0.99) -> tuple[bool, str]:
        """(accurate, why): no part collapsed and every part's worst-sample figure at least
        `min_cosine`; the reason names the deciding part."""
        bad = self.collapsed()
        if bad:
            r = bad[0]
            why = r.reason or "collapsed in one sample"
            return False, (f"output part '{r.part.label}' collapsed: {why}" +
                           (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
        if not self.parts:
            return True, "no output parts"
        name, low = min(self.part_worst_sample.items(), key=lambda kv: kv[1],
                        default=("", 1.0))
        if low < min_cosine:
            return False, f"output part '{name}': cosine {low:.6f} < {min_cosine}"
        return True, f"every output part at cosine >= {min_cosine} (lowest: '{name}' {low:.6f})"

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def worst(self, n: int = 5) -> list[LayerRow]:
        return sorted(self.rows, key=lambda r: r.cosine)[:n]

    def raisable(self, skip: Any = ()) -> list[LayerRow]:
        """The layers computing at 8 bits (op ids not in `skip`), the ones whose own rounding
        costs most first: by `output_loss` (highest first) where the report measured it,
        else by their `alone` cosine (lowest first). An op reading 8-bit codes computes at 8
        bits whatever it writes (a 16-bit reader widens its output), and raising it is what
        widens the 8-bit value it reads."""
        rows = [r for r in self.rows if r.alone is not None and r.op_type != "Cast"
                and (r.in_bits == 8 if r.in_bits is not None else r.dtype.endswith("(8)"))
                and r.op_id not in skip]
        if any(r.output_loss is not None for r in rows):
            return sorted(rows, key=lambda r: (r.output_loss is None, -(r.output_loss or 0.0),
                                               r.alone))
        return sorted(rows, key=lambda r: r.alone)

    def suggest_op_bits(self, n: int = 3) -> dict[str, int]:
        """`{op name: 16}` for the `n` 8-bit ops with the lowest `alone` cosine, ready for
        `quantize_network(op_bits=...)`; an op without a name goes by its op id (`"12"`),
        which `op_bits` and `--op-bits 12=16` accept as well."""
        return {r.name or str(r.op_id): 16 for r in self.raisable()[:max(n, 0)]}

    def print(self, console: Any = None) -> None:
        """A rich table: one row per quantized layer, then the outputs."""
        from rich.table import Table

        from xrt.console import report_console

        console = console or report_console()
        title = f"{self.network}: int{self.bits} ({self.method}) vs float" if self.bits \
            else f"{self.network} vs float"
        table = Table(title=title)
        for col in ("op", "type", "name", "dtype", "shape", "cosine", "alone", "output loss",
                    "max abs err", "mean abs err", "rel err", "sat"):
            table.add_column(col, justify="right" if col not in ("type", "name", "dtype")
                             else "left")
        for r in self.rows:
            style = "red" if r.cosine < 0.99 else ("yellow" if r.cosine < 0.999 else None)
            table.add_row(str(r.op_id), r.op_type, r.name, r.dtype,
                          "x".join(map(str, r.shape)), f"{r.cosine:.6f}",
                          "-" if r.alone is None else f"{r.alone:.6f}",
                          "-" if r.output_loss is None else f"{r.output_loss:.2e}",
                          f"{r.max_abs_err:.4g}",
                          f"{r.mean_abs_err:.4g}", f"{r.rel_err:.3%}", f"{r.sat_rate:.2%}",
                          style=style)
        console.print(table)
        out = Table(title="network outputs")
        ort_col = any("onnxruntime_int8" in o for o in self.outputs)
        for col in ("output", "v_id", "cosine", "max abs err") + \
                (("onnxruntime int8 cosine",) if ort_col else ()):
            out.add_column(col)
        for o in self.outputs:
            extra = (f"{o['onnxruntime_int8']:.6f}",) if ort_col else ()
            out.add_row(o["name"], str(o["v_id"]), f"{o['cosine']:.6f}",
                        f"{o['max_abs_err']:.4g}", *extra)
        console.print(out)
        if self.parts:
            pt = Table(title="output parts (per Concat branch; scores: top-5 and kept > 0.25)")
            ort_part = any("onnxruntime_int8" in r.extra for r in self.parts)
            for col in ("part", "kind", "range", "cosine", "worst sample", "max abs err",
                        "top-5", "kept (ref/got/both)", "collapsed") + \
                    (("onnxruntime int8",) if ort_part else ()):
                pt.add_column(col)
            for r in self.parts:
                rng = "all" if r.part.axis is None else \
                    f"axis {r.part.axis}: {r.part.start}:{r.part.stop}"
                low = self.part_worst_sample.get(r.part.name)
                kept = "-" if r.kept_ref is None else \
                    f"{r.kept_ref}/{r.kept_got}/{r.kept_both}"
                bad = r.collapsed or (low is not None and low <= 0.0)
                cos = f"{r.cosine:.6f}" + ("" if r.score_cosine is None else
                                             f" (> 1%: {r.score_cosine:.6f})")
                pt.add_row(r.part.name, r.part.kind, rng, cos,
                           "-" if low is None else f"{low:.6f}", f"{r.max_abs:.4g}",
                           "-" if r.topk is None else f"{r.topk:.3f}", kept,
                           (r.reason or "in one sample") if bad else "no",
                           *((_ort_cell(r),) if ort_part else ()),
                           style="red" if bad else None)
            console.print(pt)


def attach_onnxruntime(report: Report, model_path: str, calibration: list[list[np.ndarray]],
                       inputs: list[list[np.ndarray]]) -> None:
    """onnxruntime's own int8 (`xcompile.quant.onnxruntime_int8.quantize_static_int8` of the
    float ONNX model on `calibration`) beside ours: per output its cosine against onnxruntime's
    float run over `inputs` (key "onnxruntime_int8", as `onnxruntime_int8.attach`), and per
    output part the same part measured on onnxruntime's outputs (`PartResult.extra`
    "onnxruntime_int8": its figure, "onnxruntime_int8_collapsed"), so a part is compared like
    with like. A part whose range does not fit onnxruntime's output shape is left out."""
    import os
    import tempfile

    import onnxruntime as ort

    from xcompile.quant.onnxruntime_int8 import quantize_static_int8
    from xir.errors import QuantizationError

    def run(path: str) -> list[list[np.ndarray]]:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        return [sess.run(None, dict(zip(names, s))) for s in inputs]

    with tempfile.TemporaryDirectory() as tmp:
        qpath = quantize_static_int8(model_path, calibration, os.path.join(tmp, "int8.onnx"))
        ref, got = run(model_path), run(qpath)
    for k, o in enumerate(report.outputs):
        if k < len(ref[0]):
            o["onnxruntime_int8"] = cosine(np.concatenate([g[k].ravel() for g in got]),
                                           np.concatenate([r[k].ravel() for r in ref]))
    for r in report.parts:
        try:
            (theirs,) = compare_samples(ref, got, [r.part])
        except (QuantizationError, IndexError, ValueError):
            continue
        r.extra["onnxruntime_int8"] = float(theirs.figure)
        r.extra["onnxruntime_int8_collapsed"] = bool(theirs.collapsed)


def _ort_cell(r: PartResult) -> str:
    if "onnxruntime_int8" not in r.extra:
        return "-"
    c = f"{r.extra['onnxruntime_int8']:.6f}"
    return c + (" collapsed" if r.extra.get("onnxruntime_int8_collapsed") else "")


def _capture(net: Any, samples: list[list[np.ndarray]], runner: Runner) -> tuple[dict, list]:
    store: dict[int, list[np.ndarray]] = {}

    def keep(v, arr):
        store.setdefault(v.v_id, []).append(np.array(arr))

    outs = run_float(net, samples, keep, runner)
    return store, outs


def _in_network(a: np.ndarray, v: Any) -> np.ndarray:
    """The float network's value `a` as the quantized network's value `v` holds it: times its
    channel factor where the quantizer evened out its channels (`dw_equalize`)."""
    g = channel_gain(v)
    return a if g is None else np.asarray(a, np.float64) * g


class _Alone:
    """Runs single quantized ops of the report on the float network's inputs."""

    def __init__(self, fvals: dict[int, list[np.ndarray]], runner: Runner) -> None:
        self.fvals = fvals
        self.runner = runner
        self.cache: dict[int, list[list[np.ndarray]] | None] = {}

    def _run(self, op: Any) -> list[list[np.ndarray]] | None:
        """The op's outputs (codes, one array per output and sample), or None."""
        from xir.quant.fixed_point import quantize

        feeds = []
        for x in op.feature_inputs():
            el = x.dtype.element_dtype
            fid = int(x.tags.get("float_v_id", -1))
            if not getattr(el, "is_quantized", False) or el.scale.size != 1 or \
                    fid not in self.fvals or x.dtype.layout.is_tiled():
                return None
            feeds.append([quantize(_in_network(a, x), float(el.scale[0]),
                                   el.numpy_dtype).reshape(x.shape)
                          for a in self.fvals[fid]])
        if not feeds:
            return None
        outs = []
        for sample in zip(*feeds):
            res = self.runner.run_op(op, list(sample))
            if res is None:
                return None
            outs.append(res)
        return outs

    def runs(self, op: Any) -> list[list[np.ndarray]] | None:
        """The op's output codes run alone, per sample and output (None: it cannot be)."""
        if op.op_id not in self.cache:
            self.cache[op.op_id] = self._run(op)
        return self.cache[op.op_id]

    def cosine(self, op: Any, v: Any, f: np.ndarray) -> float | None:
        if op.op_type == "Cast":
            return None
        runs = self.runs(op)
        if runs is None:
            return None
        k = [o.v_id for o in op.outputs].index(v.v_id)
        codes = np.concatenate([r[k].ravel() for r in runs]).astype(np.float64)
        if codes.size != f.size:
            return None
        return cosine(codes * float(v.dtype.element_dtype.scale[0]), f)


def accuracy_report(float_net: Any, quant_net: Any, samples: Any,
                    runner: Runner | None = None, channel_groups: int | None = 0,
                    sensitivity: bool | None = None) -> Report:
    """Compare every quantized value of `quant_net` with its float counterpart in `float_net`
    over `samples` (anything `load_calibration` accepts), both run with `runner`
    (`xcompile.runner`; default: the HostBackend). `channel_groups`: how outputs without a
    Concat are cut into parts (`xcompile.quant.parts.output_parts`; None: automatic).
    `sensitivity`: measure each 8-bit op's `output_loss` (None: where its partial forwards
    stay within `sensitivity.MAX_MACS`)."""
    runner = runner or default_runner()
    data = load_calibration(samples, float_net)
    fvals, fouts = _capture(float_net, data, runner)
    qvals, qouts = _capture(quant_net, data, runner)
    qinfo = quant_net.tags.get("quantization", {})
    rep = Report(quant_net.name, qinfo.get("bits"), qinfo.get("method"))
    alone = _Alone(fvals, runner)
    for op in quant_net.ops:
        if op.op_type in ("Input", "Output"):
            continue
        in_bits = max((8 * v.dtype.numpy_dtype.itemsize for v in op.feature_inputs()
                       if getattr(v.dtype.element_dtype, "is_quantized", False)), default=None)
        for v in op.outputs:
            el = v.dtype.element_dtype
            if not getattr(el, "is_quantized", False) or v.v_id not in qvals:
                continue
            fid = int(v.tags.get("float_v_id", v.v_id))
            if fid not in fvals:
                continue
            f = np.concatenate([_in_network(a, v).ravel() for a in fvals[fid]]
                               ).astype(np.float64)
            qcodes = np.concatenate([a.ravel() for a in qvals[v.v_id]])
            if f.size != qcodes.size:
                continue
            real = qcodes.astype(np.float64) * float(el.scale[0]) if el.scale.size == 1 \
                else None
            if real is None:
                continue
            err = np.abs(real - f)
            fmax = float(np.abs(f).max(initial=0.0))
            sat = float(np.mean((qcodes <= el.qmin) | (qcodes >= el.qmax))) if qcodes.size \
                else 0.0
            rep.rows.append(LayerRow(
                op.op_id, op.op_type, op.name, v.v_id, fid, el.storage.encode(),
                list(v.shape), cosine(real, f), float(err.max(initial=0.0)),
                float(err.mean()) if err.size else 0.0,
                float(err.max(initial=0.0) / fmax) if fmax > 0 else 0.0, sat,
                alone.cosine(op, v, f), in_bits))
    names = [v.name for v in quant_net.outputs()]
    for k, name in enumerate(names):
        f = np.concatenate([o[k].ravel() for o in fouts]).astype(np.float64)
        qo = np.concatenate([o[k].ravel() for o in qouts]).astype(np.float64)
        rep.outputs.append({"name": name, "v_id": int(quant_net.outputs()[k].v_id),
                            "cosine": cosine(qo, f),
                            "max_abs_err": float(np.abs(qo - f).max(initial=0.0))})
    _measure_parts(rep, quant_net, fouts, qouts, channel_groups)
    if sensitivity or (sensitivity is None and
                       rerun_macs(float_net, quant_net, len(data)) <= MAX_MACS):
        loss = output_sensitivity(float_net, quant_net, fvals, fouts, runner, alone.runs)
        for r in rep.rows:
            r.output_loss = (loss or {}).get(r.op_id)
    return rep


def _measure_parts(rep: Report, quant_net: Any, fouts: list[list[np.ndarray]],
                   qouts: list[list[np.ndarray]], channel_groups: int | None = 0) -> None:
    """`rep.parts` (every sample together), `rep.part_worst_sample` (the lowest figure of any
    one sample) and, per output, its lowest part."""
    if not fouts:
        return
    parts = output_parts(quant_net, reference=fouts[0], channel_groups=channel_groups)
    rep.parts = compare_samples(fouts, qouts, parts)
    for f, q in zip(fouts, qouts):
        for r in compare_parts(f, q, parts):
            low = rep.part_worst_sample.get(r.part.name, 1.0)
            rep.part_worst_sample[r.part.name] = min(low, float(r.figure))
    for k, o in enumerate(rep.outputs):
        mine = [r for r in rep.parts if r.part.output == k]
        if mine:
            w = min(mine, key=lambda r: rep.part_worst_sample.get(r.part.name, r.figure))
            o["parts"] = [r.part.name for r in mine]
            o["worst_part"] = w.part.name
            o["worst_part_cosine"] = rep.part_worst_sample.get(w.part.name, w.figure)
