"""LSTM, GRU and RNN: the input projection as a Matmul, the recurrence as an xir op.

``X @ W^T + Wb`` for every timestep and direction is one Matmul of X ``[T, B, I]`` (or
``[B, T, I]``) by the directions' stacked weights ``[I, D*G*H]`` (the chips run it); the bias
folds into it where it can (everything for LSTM and RNN; for GRU all but the recurrent bias of
gate h when `linear_before_reset` puts the reset gate around it). The recurrence reads that
projection: `LSTMRecurrence`, `GRURecurrence` or `RNNRecurrence` (xir/ops/recurrent.py), run on
the host. Omitted optional inputs become constants (zeros, or T for sequence_lens); outputs
keep ONNX's shapes, so an exporter's Transpose/Reshape after Y imports as written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from xcompile.frontend.onnx_import.registry import _handles, _Unsupported
from xcompile.frontend.onnx_import.tensor import _T

if TYPE_CHECKING:
    from xcompile.frontend.onnx_import.importer import _Importer

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_OPS = {"LSTM": "LSTMRecurrence", "GRU": "GRURecurrence", "RNN": "RNNRecurrence"}


def _names(value) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in value or []]


def _input(ins: list, k: int) -> _T | None:
    return ins[k] if k < len(ins) else None


def _projection(im: _Importer, x: _T, w: _T, moved_bias: np.ndarray | None) -> object:
    """The Matmul ``X @ W^T (+ bias)`` for every direction at once: [.., .., D*G*H]."""
    d, gh, i = w.shape
    if w.is_const:
        wt = np.ascontiguousarray(w.const.reshape(d * gh, i).T.astype(x.dtype, copy=False))
        inputs = [im.value(x), im.params(wt, name=f"{im.node.name}.W")]
        transpose_b = False
    else:  # weights fed at run time (the ONNX node tests do): [D*G*H, I], transposed
        inputs = [im.value(x), im.emit1("Reshape", [im.value(w)], None, shape=[d * gh, i])]
        transpose_b = True
    if moved_bias is not None:
        inputs.append(im.params(moved_bias.astype(x.dtype, copy=False),
                                name=f"{im.node.name}.Wb"))
    return im.emit1("Matmul", inputs, None, transpose_b=transpose_b)


@_handles("LSTM", "GRU", "RNN")
def _recurrent(im: _Importer, node, a, ins):
    kind = node.op_type
    g = _GATES[kind]
    x, w, r = ins[0], ins[1], ins[2]
    if x.rank != 3 or w.rank != 3 or r.rank != 3:
        raise _Unsupported(f"X, W and R must be rank 3 (got {x.rank}, {w.rank}, {r.rank})")
    if x.dtype.kind != "f":
        raise _Unsupported(f"X of element type {x.dtype} (float only)")
    if int(a.get("output_sequence", 1)) == 0 and im.reads(node, 0):
        raise _Unsupported("output_sequence = 0 with Y read")
    direction = a.get("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    d = 2 if direction == "bidirectional" else 1
    h = int(a.get("hidden_size", r.shape[-1]))
    layout = int(a.get("layout", 0))
    if w.shape[:2] != (d, g * h) or r.shape != (d, g * h, h):
        raise _Unsupported(f"W {list(w.shape)} / R {list(r.shape)} do not fit {d} "
                           f"direction(s), {g} gate(s), hidden_size {h}")
    t, b = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    dt = x.dtype
    lbr = bool(int(a.get("linear_before_reset", 0)))

    # the bias: what goes into the Matmul, what the recurrence adds itself
    bias = _input(ins, 3)
    moved = None
    if bias is None:
        rest: object = im.params(np.zeros((d, 2 * g * h), dt))
    elif bias.is_const:
        full = bias.const.astype(dt).reshape(d, 2 * g * h)
        wb, rb = full[:, :g * h], full[:, g * h:].copy()
        keep = np.zeros_like(rb)
        if kind == "GRU" and lbr:  # r * (h @ Rh^T + Rbh): Rbh stays inside the cell
            keep[:, 2 * h:] = rb[:, 2 * h:]
        moved = (wb + rb - keep).reshape(d * g * h)
        rest = im.params(np.concatenate([np.zeros_like(wb), keep], axis=1),
                         name=f"{node.name}.Rb")
    else:
        rest = im.value(bias)

    xw = _projection(im, x, w, moved)
    state = (d, b, h) if layout == 0 else (b, d, h)

    def opt(k: int, shape: tuple[int, ...], fill, what: str, dtype=dt):
        t_ = _input(ins, k)
        if t_ is None:
            return im.params(np.full(shape, fill, dtype), name=f"{node.name}.{what}")
        if tuple(t_.shape) != shape:
            raise _Unsupported(f"{what} has shape {list(t_.shape)}, expected {list(shape)}")
        return im.value(t_)

    lens = opt(4, (b,), t, "sequence_lens", np.int32)
    inputs = [xw, im.value(r), rest]
    inputs.append(opt(5, state, 0, "initial_h"))
    if kind == "LSTM":
        inputs.append(opt(6, state, 0, "initial_c"))
        inputs.append(opt(7, (d, 3 * h), 0, "P"))
    inputs.append(lens)
    attrs = dict(hidden_size=h, direction=direction, layout=layout,
                 activations=_names(a.get("activations")),
                 activation_alpha=[float(v) for v in a.get("activation_alpha", [])],
                 activation_beta=[float(v) for v in a.get("activation_beta", [])])
    if "clip" in a:
        attrs["clip"] = float(a["clip"])
    if kind == "LSTM":
        attrs["input_forget"] = bool(int(a.get("input_forget", 0)))
    if kind == "GRU":
        attrs["linear_before_reset"] = lbr
    outs = im.emit(_OPS[kind], inputs, None, **attrs)
    return [im.result(v) for v in outs]
