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
