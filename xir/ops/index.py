"""Index and shape ops: gathers, scatters, broadcasting copies, ranges and masks."""

from __future__ import annotations
