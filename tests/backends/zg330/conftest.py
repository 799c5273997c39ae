"""Fixtures for the ZG330 simulator tests (helpers live in npu_testlib)."""

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
