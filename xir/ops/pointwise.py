"""Element-wise math, comparison and logic ops beyond the arithmetic of `elementwise`."""

from __future__ import annotations
