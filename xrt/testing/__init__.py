"""The conformance kit for backend plugins: the contract every xrt backend meets, as checks a
plugin author runs against their own backend (as the onnx package's `BackendTest` runs its node
tests against any backend).

Three ways to run it:

- the command line: ``xrt conformance MyBackend [--device URL]`` prints a table and
  ``N passed, M failed``; the exit status is 1 when a check failed;
- pytest: ``pytest_plugins = ["xrt.testing.pytest_plugin"]`` in the root conftest.py and a test
  marked ``@pytest.mark.xrt_conformance("MyBackend")`` taking the ``xrt_check`` fixture: one
  test item per check;
- Python: ``xrt.testing.run_conformance("MyBackend").summary()``.

What is checked is listed in `checks.checks`; docs/plugin-guide.md explains each check.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .checks import Check, Subject, checks, reference
from .result import CheckResult, ConformanceError, Report, SkipCheck

__all__ = ["Check", "CheckResult", "ConformanceError", "Report", "SkipCheck", "Subject",
           "checks", "reference", "run_check", "run_conformance", "subject"]


def subject(backend: str | type, device: str = "", *, seed: int = 0, trials: int = 2,
            models: tuple[str, ...] = ("tiny_cnn",)) -> Subject:
    """The backend under test: a registered name ("ZG330") or a Backend class, on `device`
    (default: the class's `default_url`)."""
    from .. import plugins

    cls = plugins.backend_class(backend) if isinstance(backend, str) else backend
    return Subject(cls, device, seed=seed, trials=trials, models=tuple(models))


def run_check(check: Check) -> CheckResult:
    """Run one check: passed, failed (the contract was broken, or the backend raised
    something unexpected) or skipped (it does not apply)."""
    t0 = time.perf_counter()
    try:
        check.run()
    except SkipCheck as why:
        return CheckResult(check.name, "skipped", str(why), time.perf_counter() - t0)
    except ConformanceError as err:
        return CheckResult(check.name, "failed", str(err), time.perf_counter() - t0)
    except Exception as err:  # a backend crash is a failure of the check, with its type
        return CheckResult(check.name, "failed", f"{type(err).__name__}: {err}",
                           time.perf_counter() - t0)
    return CheckResult(check.name, "passed", "", time.perf_counter() - t0)


def run_conformance(backend: str | type, device: str = "", *, seed: int = 0, trials: int = 2,
                    models: tuple[str, ...] = ("tiny_cnn",), only: str = "",
                    progress: Callable[[CheckResult], None] | None = None) -> Report:
    """Run every check (those whose name contains `only`, if given) on `backend`."""
    s = subject(backend, device, seed=seed, trials=trials, models=models)
    report = Report(s.name, s.device_url)
    for check in checks(s):
        if only and only not in check.name:
            continue
        result = run_check(check)
        report.results.append(result)
        if progress is not None:
            progress(result)
    return report
