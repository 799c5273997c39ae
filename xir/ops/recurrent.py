"""Recurrent ops: the recurrence of an ONNX LSTM, GRU or RNN over a whole sequence.

An ONNX LSTM/GRU/RNN is two kinds of work. The input projection ``X @ W^T + Wb`` of every
timestep and direction has no dependency between steps: the importer writes it as one ordinary
`Matmul` (which the chips run). What is left is the recurrence — per step the matmul by R and
the gate/cell update — which these ops hold and the HostBackend runs with a vectorised kernel.

Every recurrence op reads the projection ``xw``: rank 3, ``[T, B, D*G*H]`` (layout 0) or
``[B, T, D*G*H]`` (layout 1), with D directions (2 when bidirectional), G gates (LSTM 4 in the
order i, o, f, c; GRU 3 in the order z, r, h; RNN 1) and H = hidden_size; direction d's gates
are columns ``[d*G*H, (d+1)*G*H)``. Then R ``[D, G*H, H]`` and B ``[D, 2*G*H]`` (ONNX's W and R
biases: the op adds ``B[:, :G*H]`` to xw and ``B[:, G*H:]`` to ``h @ R^T``; the importer moves
into the Matmul whatever part of B can go there and leaves zeros), the initial states and the
sequence lengths ``[B]`` (int). The states (initial_h, initial_c in, Y_h, Y_c out) are
``[D, B, H]`` (layout 0) or ``[B, D, H]`` (layout 1); Y is ``[T, D, B, H]`` or ``[B, T, D, H]``.
Every input is present: the importer writes zeros (or T for the lengths) where ONNX omits one.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import FieldTypeError
from .base import REQUIRED, Operation, fail, register_op

#: activation name -> (uses alpha, uses beta, default alpha, default beta): onnxruntime's
#: table (rnn_helpers), which consumes activation_alpha / activation_beta in order, one value
#: per activation that takes one
ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "sigmoid": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "relu": (False, False, 0.0, 0.0), "affine": (True, True, 0.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0), "thresholdedrelu": (True, False, 0.0, 0.0),
    "scaledtanh": (True, True, 0.0, 0.0), "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}

DIRECTIONS = ("forward", "reverse", "bidirectional")


def resolve_activations(names: list[str], alphas: list[float],
                        betas: list[float]) -> list[tuple[str, float, float]]:
    """(lower-case name, alpha, beta) for each activation: ONNX's activation_alpha/beta lists
    consumed in order by the activations that take them, defaults after they run out."""
    out = []
    ia = ib = 0
    for name in names:
        key = str(name).lower()
        if key not in ACTIVATIONS:
            raise FieldTypeError(f"unknown activation {name!r} (known: "
                                 f"{', '.join(ACTIVATIONS)})", field="activations")
        use_a, use_b, alpha, beta = ACTIVATIONS[key]
        if use_a and ia < len(alphas):
            alpha, ia = float(alphas[ia]), ia + 1
        if use_b and ib < len(betas):
            beta, ib = float(betas[ib]), ib + 1
        out.append((key, alpha, beta))
    return out


class _Recurrence(Operation):
    """Shared declaration: attributes, input checks and output shapes of the three cells."""

    #: gates per direction, activations per direction and their defaults
    GATES: ClassVar[int] = 1
    DEFAULT_ACTS: ClassVar[tuple[str, ...]] = ("Tanh",)
    #: input slots after xw, r, b: ("initial_h", ...) in order, then sequence_lens last
    STATE_INPUTS: ClassVar[tuple[str, ...]] = ("initial_h",)
    KEEPS_LAYOUT = False
    LIST_ITEMS: ClassVar[dict[str, type]] = {"activations": str, "activation_alpha": float,
                                             "activation_beta": float}
    BASE_ATTRS: ClassVar[dict] = {
        "hidden_size": (int, REQUIRED), "direction": (str, "forward"),
        "activations": (list, []), "activation_alpha": (list, []),
        "activation_beta": (list, []), "clip": (float, float("inf")), "layout": (int, 0),
    }
    CHOICES = {**Operation.CHOICES, "direction": DIRECTIONS, "layout": (0, 1)}

    @property
    def num_directions(self) -> int:
        return 2 if self.attrs["direction"] == "bidirectional" else 1

    def check_attr_values(self) -> None:
        super().check_attr_values()
        a = self.attrs
        if a["hidden_size"] < 1:
            raise fail(self, f"hidden_size must be >= 1, not {a['hidden_size']}",
                       "hidden_size")
        if not a["clip"] > 0:
            raise fail(self, f"clip must be > 0 (inf: no clip), not {a['clip']}", "clip")
        names = a["activations"]
        want = len(self.DEFAULT_ACTS) * (2 if a["direction"] == "bidirectional" else 1)
        if names and len(names) != want:
            raise fail(self, f"activations needs {want} names ({len(self.DEFAULT_ACTS)} per "
                             f"direction), got {len(names)}: {names}", "activations")
        try:
            resolve_activations(names, a["activation_alpha"], a["activation_beta"])
        except FieldTypeError as err:
            raise FieldTypeError(f"{self.op_type}: {err.message}", op_id=self.op_id,
                                 field="activations") from None

    def activation_table(self) -> list[list[tuple[str, float, float]]]:
        """Per direction, its activations as (name, alpha, beta)."""
        a = self.attrs
        names = a["activations"] or list(self.DEFAULT_ACTS) * self.num_directions
        acts = resolve_activations(names, a["activation_alpha"], a["activation_beta"])
        k = len(self.DEFAULT_ACTS)
        return [acts[d * k:(d + 1) * k] for d in range(self.num_directions)]

    def n_outputs(self) -> int:
        return 1 + len(self.STATE_INPUTS)

    def _check_input(self, shapes, index: int, want: tuple[int, ...], what: str) -> None:
        if tuple(shapes[index]) != want:
            raise fail(self, f"{what} must have shape {list(want)}, got {list(shapes[index])}",
                       "inputs")

    def extra_checks(self, shapes, d: int, h: int) -> None:
        """Cell-specific inputs (peepholes)."""

    def infer_shapes(self, shapes):
        if len(shapes) != self.MAX_INPUTS:
            raise fail(self, f"takes {self.MAX_INPUTS} inputs (xw, r, b, "
                             f"{', '.join(self.STATE_INPUTS)}"
                             f"{', p' if self.op_type == 'LSTMRecurrence' else ''}, "
                             f"sequence_lens), got {len(shapes)}", "inputs")
        h = self.attrs["hidden_size"]
        d, g = self.num_directions, self.GATES
        xw = tuple(shapes[0])
        if len(xw) != 3 or xw[2] != d * g * h:
            raise fail(self, f"xw must be [T, B, {d * g * h}] (layout 0) or [B, T, "
                             f"{d * g * h}] (layout 1): {d} direction(s) x {g} gate(s) x "
                             f"hidden_size {h}; got {list(xw)}", "inputs")
        t, b = (xw[0], xw[1]) if self.attrs["layout"] == 0 else (xw[1], xw[0])
        self._check_input(shapes, 1, (d, g * h, h), "r")
        self._check_input(shapes, 2, (d, 2 * g * h), "b")
        state = (d, b, h) if self.attrs["layout"] == 0 else (b, d, h)
        for i, name in enumerate(self.STATE_INPUTS, 3):
            self._check_input(shapes, i, state, name)
        self.extra_checks(shapes, d, h)
        self._check_input(shapes, self.MAX_INPUTS - 1, (b,), "sequence_lens")
        if self.attrs["layout"] == 0:
            y, yh = (t, d, b, h), (d, b, h)
        else:
            y, yh = (b, t, d, h), (b, d, h)
        return [y] + [yh] * len(self.STATE_INPUTS)


@register_op
class LSTMRecurrence(_Recurrence):
    """The recurrence of an ONNX LSTM. Inputs: xw, r, b, initial_h, initial_c, p
    ``[D, 3*H]`` (peepholes i, o, f; zeros for none), sequence_lens ``[B]`` (int). Outputs:
    Y, Y_h, Y_c. ``input_forget`` couples the gates (f = 1 - i)."""

    op_type = "LSTMRecurrence"
    GATES = 4
    DEFAULT_ACTS = ("Sigmoid", "Tanh", "Tanh")
    STATE_INPUTS = ("initial_h", "initial_c")
    MIN_INPUTS = MAX_INPUTS = 7
    N_OUTPUTS = 3
    ATTRS = {**_Recurrence.BASE_ATTRS, "input_forget": (bool, False)}

    def extra_checks(self, shapes, d: int, h: int) -> None:
        self._check_input(shapes, 5, (d, 3 * h), "p")


@register_op
class GRURecurrence(_Recurrence):
    """The recurrence of an ONNX GRU. Inputs: xw, r, b, initial_h, sequence_lens. Outputs:
    Y, Y_h. ``linear_before_reset`` applies the reset gate after the R matmul of gate h."""

    op_type = "GRURecurrence"
    GATES = 3
    DEFAULT_ACTS = ("Sigmoid", "Tanh")
    MIN_INPUTS = MAX_INPUTS = 5
    N_OUTPUTS = 2
    ATTRS = {**_Recurrence.BASE_ATTRS, "linear_before_reset": (bool, False)}


@register_op
class RNNRecurrence(_Recurrence):
    """The recurrence of an ONNX RNN: ``H = f(xw + H @ R^T + Rb)``. Inputs: xw, r, b,
    initial_h, sequence_lens. Outputs: Y, Y_h."""

    op_type = "RNNRecurrence"
    GATES = 1
    DEFAULT_ACTS = ("Tanh",)
    MIN_INPUTS = MAX_INPUTS = 5
    N_OUTPUTS = 2
    ATTRS = dict(_Recurrence.BASE_ATTRS)


RECURRENCE_OPS = ("LSTMRecurrence", "GRURecurrence", "RNNRecurrence")
