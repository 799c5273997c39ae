from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def bdev():
    from xrt import Device

    d = Device.Open("sim://buyi")
    yield d
    Device.Close(d)


@pytest.fixture(scope="module")
def buyi_dev():
    """One Buyi simulator for a whole module (hypothesis tests reuse it)."""
    from xrt import Device

    d = Device.Open("sim://buyi")
    yield d
    Device.Close(d)
