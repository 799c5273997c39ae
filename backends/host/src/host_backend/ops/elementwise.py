"""Add (with a folded activation), Sub, Multiply, float32, with numpy broadcasting."""

from __future__ import annotations

import numpy as np

from ._common import f32, fold_act, out32


def add(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """a + b, then the folded activation (act, act_alpha, act_max)."""
    return [fold_act(out32(np.add(f32(inputs[0]), f32(inputs[1]))), attrs, "Add")]


def sub(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.subtract(f32(inputs[0]), f32(inputs[1])))]


def multiply(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    return [out32(np.multiply(f32(inputs[0]), f32(inputs[1])))]
