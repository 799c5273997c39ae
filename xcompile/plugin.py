"""The compile pipeline as an xrt plugin (entry point `xcompile`): the `compile` and
`quant-report` commands, and what `xrt run` needs beyond json files -- zoo names (compiled for a
target through the cache) and .onnx files (the float network), with a zoo image as input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xrt.hookspecs import hookimpl


@hookimpl
def xrt_register_commands(register: Callable) -> None:
    from xcompile.cli import compile_cmd, quant_report_cmd

    for name, mod in (("compile", compile_cmd), ("quant-report", quant_report_cmd)):
        register(name, mod.configure, mod.run, mod.HELP)


@hookimpl
def xrt_load_model(model: str, target: str | None, input_size: int | None) -> Any:
    from xcompile import zoo
    from xrt.errors import XrtError

    if model.endswith(".onnx"):
        if target:
            raise XrtError(f"{model}: an ONNX model needs calibration data to compile: run "
                           f"'xrt compile {model} --target {target} --calib DIR -o out/', then "
                           f"'xrt run' on the generated json in out/")
        from xcompile.frontend import import_onnx

        return import_onnx(model)  # the float network, on whatever backends are asked for
    if model not in zoo.names():
        return None
    if target:
        from xcompile.cache import compiled_zoo

        return compiled_zoo(model, target, input_size)
    return zoo.build(model, input_size=input_size) if input_size else zoo.build(model)


@hookimpl
def xrt_sample_inputs(model: str, network: Any, input_size: int | None) -> Any:
    from xcompile import zoo

    if model not in zoo.names():
        return None
    kw = {"input_size": input_size} if input_size else {}
    return zoo.calibration_set(model, count=1, seed=1, **kw)[0]


@hookimpl
def xrt_refit_plan(network: Any, source: Any) -> Any:
    from xcompile.refit.plan import plan_refit

    return plan_refit(network, source)
