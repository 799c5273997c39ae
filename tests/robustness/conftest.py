"""Devices shared by the robustness fuzzers of one module: a simulated ZG330, a simulated Buyi
and the host."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def devices():
    from xrt import Device

    devs = {"zg330": Device.Open("sim://zg330"), "buyi": Device.Open("sim://buyi"),
            "host": Device.Open("host://")}
    yield devs
    for d in devs.values():
        d.close()
