"""Dataset evaluation and design-space sweeps as an xrt plugin (entry point `xeval`): the `eval`
and `sweep` commands."""

from __future__ import annotations

from collections.abc import Callable

from xrt.hookspecs import hookimpl


@hookimpl
def xrt_register_commands(register: Callable) -> None:
    from xeval import cli

    register("eval", cli.configure_eval, cli.run_eval, cli.EVAL_HELP)
    register("sweep", cli.configure_sweep, cli.run_sweep, cli.SWEEP_HELP)
