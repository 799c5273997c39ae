"""Fixtures of the shared NPU runtime's tests: `chip`, parametrised over the ZG330 and the Buyi
(helpers in runtime_cases.py)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from runtime_cases import _CHIPS, CHIPS, ChipCase  # noqa: E402

from xrt import Device, plugins  # noqa: E402


@pytest.fixture(scope="module")
def _devices():
    opened: dict[str, ChipCase] = {}
    yield opened
    for case in opened.values():
        for d in (case.dev, case._mock):
            if d is not None:
                d.close()


@pytest.fixture(params=CHIPS)
def chip(request, _devices) -> ChipCase:
    """The chip under test (both, by parametrisation), its simulator opened once per module."""
    kind = request.param
    if kind not in _devices:
        package, name, options = _CHIPS[kind]
        _devices[kind] = ChipCase(kind, package, plugins.backend_class(name), options,
                                  Device.Open(f"sim://{kind}"))
    return _devices[kind]
