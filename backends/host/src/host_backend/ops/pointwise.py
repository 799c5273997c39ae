"""Host kernels of xir.ops.pointwise (float and integer side by side)."""

from __future__ import annotations

FLOAT_KERNELS: dict = {}
INT_KERNELS: dict = {}
