"""The xrt backend contract, checked by the conformance kit: one test item per check
(`NumpyCpu:ops[Conv2d]`, `NumpyCpu:lifecycle`, ...); the ops this backend does not claim are
skipped with the reason."""

import pytest

from xrt.testing import run_conformance


@pytest.mark.xrt_conformance("NumpyCpu", trials=3)
def test_contract(xrt_check):
    xrt_check()


def test_contract_from_python():
    report = run_conformance("NumpyCpu", trials=1)
    claimed = {r.name for r in report.results if r.status == "passed"}
    assert report.failed == 0, report.summary()
    assert {"ops[Conv2d]", "ops[Relu]", "ops[Add]", "ops[MaxPool2d]"} <= claimed
