"""Reductions over axes: Reduce*, ArgMax/ArgMin, TopK, CumSum and the row-wise normalisers."""

from __future__ import annotations
