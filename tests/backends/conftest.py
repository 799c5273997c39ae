"""Fixtures of the NPU tests (hardware model and chips): a simulated ZG330 to run instruction
streams on, and a harness over it (helpers live in tests/support/npu_testlib.py)."""

from __future__ import annotations

import pytest
from npu_testlib import Harness


@pytest.fixture
def dev():
    from xrt import Device

    d = Device.Open("sim://zg330")
    yield d
    d.close()


@pytest.fixture
def hw(dev):
    return Harness(dev)


@pytest.fixture
def decodes(monkeypatch):
    """How many runs the icore interpreted word by word (the others replayed a decoded
    program, `npu_model.program`; a dry decode listing a run's kernels beforehand,
    `npu_model.prefetch`, is not a run)."""
    from npu_model.core import Icore

    count = [0]
    interpret = Icore._interpret

    def counted(self, *a, **k):
        if not getattr(self, "dry_decode", False):
            count[0] += 1
        return interpret(self, *a, **k)

    monkeypatch.setattr(Icore, "_interpret", counted)
    return count
