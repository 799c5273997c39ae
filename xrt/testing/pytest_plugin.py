"""The conformance kit as a pytest plugin: each check becomes one test item of the author's
suite.

Enable it in the suite's root conftest.py (or with ``-p xrt.testing.pytest_plugin``)::

    pytest_plugins = ["xrt.testing.pytest_plugin"]

and write one test that takes the `xrt_check` argument, marked with the backend to check::

    import pytest

    @pytest.mark.xrt_conformance("MyCpu", device="host://")
    def test_contract(xrt_check):
        xrt_check()

It is parametrised with every check of the kit (ids such as ``MyCpu:ops[Conv2d]``); a check
that does not apply is skipped with its reason, a broken contract fails with the kit's message.
`--xrt-backend NAME` (repeatable) and `--xrt-device URL` choose the backends for tests without
the marker.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import checks, subject
from .result import ConformanceError, SkipCheck

MARKER = "xrt_conformance"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("xrt", "xrt backend conformance kit")
    group.addoption("--xrt-backend", action="append", default=[], metavar="NAME",
                    help="backend(s) the xrt_check tests check when they carry no marker")
    group.addoption("--xrt-device", default="", metavar="URL",
                    help="device URL for --xrt-backend (default: the backend's default_url)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{MARKER}(backend, device='', seed=0, trials=2): run "
                                       f"the xrt conformance kit on backend (test takes "
                                       f"xrt_check)")


class PytestCheck:
    """One check of the kit, run inside a test: SkipCheck -> pytest.skip, a broken contract
    -> pytest.fail with the kit's message (no traceback into the kit)."""

    def __init__(self, check: Any) -> None:
        self.check = check

    def __call__(self) -> None:
        skip = fail = None
        try:
            self.check.run()
        except SkipCheck as why:
            skip = str(why)
        except ConformanceError as err:
            fail = f"{self.check.name}: {err}"
        if skip is not None:
            pytest.skip(skip)
        if fail is not None:
            pytest.fail(fail, pytrace=False)

    def __repr__(self) -> str:
        return f"<xrt check {self.check.name}>"


def pytest_generate_tests(metafunc: Any) -> None:
    if "xrt_check" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is not None:
        if not marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER}() needs the backend's name")
        targets = [(marker.args[0], marker.kwargs.get("device", ""),
                    {k: marker.kwargs[k] for k in ("seed", "trials", "models")
                     if k in marker.kwargs})]
    else:
        names = metafunc.config.getoption("--xrt-backend")
        if not names:
            raise pytest.UsageError(f"{metafunc.definition.nodeid} takes xrt_check: mark it "
                                    f"@pytest.mark.{MARKER}('Backend') or pass --xrt-backend")
        device = metafunc.config.getoption("--xrt-device")
        targets = [(n, device, {}) for n in names]
    params = []
    for backend, device, options in targets:
        s = subject(backend, device, **options)
        params += [pytest.param(PytestCheck(c), id=f"{s.name}:{c.name}") for c in checks(s)]
    metafunc.parametrize("xrt_check", params)
