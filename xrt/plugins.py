"""Plugin discovery and the registries the hooks fill (backends, URL schemes, targets, commands).

Plugins come from the entry-point group `xrt.plugins`. A plugin that fails to load is logged
and skipped, unless the environment variable `XRT_PLUGINS` (a comma list such as
"zg330,host") names it: then its failure is an error. The core never imports a backend by name.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from . import hookspecs
from .errors import DeviceUrlError, PluginError
from .url import DeviceUrl

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "xrt.plugins"


@dataclass
class PluginInfo:
    """Where a plugin came from (for `xrt plugins` and for blame in error messages)."""

    name: str
    distribution: str = ""
    version: str = ""
    error: str = ""


@dataclass
class Registry:
    """What the loaded plugins registered."""

    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    backends: dict[str, tuple[type, str]] = field(default_factory=dict)
    # (scheme, device name or "*") -> (opener, plugin, description)
    schemes: dict[tuple[str, str], tuple[Callable, str, str]] = field(default_factory=dict)
    targets: dict[str, tuple[Callable, str, str]] = field(default_factory=dict)
    #: target name -> the compile_target its HardOps carry (e.g. "zg330" -> "@zhuget(330)")
    compile_targets: dict[str, str] = field(default_factory=dict)
    commands: dict[str, tuple[Callable, Callable, str, str]] = field(default_factory=dict)


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_registry: Registry | None = None


def _allow_list() -> set[str]:
    raw = os.environ.get("XRT_PLUGINS", "")
    return {p.strip() for p in raw.split(",") if p.strip()}


def _entry_points() -> list[md.EntryPoint]:
    return list(md.entry_points(group=ENTRY_POINT_GROUP))


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, loading entry points on first use."""
    global _pm, _registry
    with _lock:
        if _pm is not None:
            return _pm
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        reg = Registry()
        loud = _allow_list()
        for ep in _entry_points():
            dist = getattr(ep, "dist", None)
            info = PluginInfo(ep.name, dist.name if dist else "", dist.version if dist else "")
            reg.plugins[ep.name] = info
            try:
                module = ep.load()
                pm.register(module, name=ep.name)
            except Exception as exc:  # a broken plugin must not stop the others
                info.error = f"{type(exc).__name__}: {exc}"
                if ep.name in loud:
                    raise PluginError(f"plugin '{ep.name}' ({info.distribution}) failed to "
                                      f"load: {info.error}") from exc
                log.warning("skipping xrt plugin %r: %s", ep.name, info.error)
        pm.check_pending()
        _pm = pm
        _registry = reg
        _collect(pm, reg)
        return pm


#: the registration hooks, in the order they run
REGISTRATION_HOOKS = ("xrt_register_backends", "xrt_register_device_schemes",
                      "xrt_register_targets", "xrt_register_commands")


def _collect(pm: pluggy.PluginManager, reg: Registry) -> None:
    """Call the registration hooks through pluggy, one plugin at a time (a hook caller for that
    plugin alone: `subset_hook_caller`), so each `register` callback knows which plugin is
    speaking and a plugin that fails is blamed, logged and skipped without stopping the rest."""
    from .backend import Backend

    plugins = pm.list_name_plugin()
    for name, _ in plugins:
        others = [p for n, p in plugins if n != name]

        def reg_backend(cls: type, _p: str = name) -> None:
            if not (isinstance(cls, type) and issubclass(cls, Backend)):
                raise PluginError(f"plugin '{_p}' registered {cls!r}, which is not an "
                                  f"xrt.Backend subclass")
            bname = getattr(cls, "name", "") or cls.__name__
            if bname in reg.backends and reg.backends[bname][0] is not cls:
                raise PluginError(f"plugin '{_p}' registered backend '{bname}', already "
                                  f"registered by '{reg.backends[bname][1]}'")
            reg.backends[bname] = (cls, _p)

        def reg_scheme(scheme: str, opener: Callable, description: str = "",
                       names: Any = None, _p: str = name) -> None:
            if not callable(opener):
                raise PluginError(f"plugin '{_p}' registered a non-callable opener for "
                                  f"'{scheme}://'")
            for dev in ([n.lower() for n in names] if names else ["*"]):
                key = (scheme.lower(), dev)
                if key in reg.schemes and reg.schemes[key][1] != _p:
                    raise PluginError(f"plugin '{_p}' claims '{_url(key)}', already claimed "
                                      f"by '{reg.schemes[key][1]}'")
                reg.schemes[key] = (opener, _p, description)

        def reg_target(tname: str, lower: Callable, description: str = "",
                       compile_target: str = "", _p: str = name) -> None:
            if not callable(lower):
                raise PluginError(f"plugin '{_p}' registered a non-callable lowering for "
                                  f"target '{tname}'")
            if compile_target:
                from xir.ops.base import check_target

                try:
                    check_target(compile_target)
                except Exception as exc:
                    raise PluginError(f"plugin '{_p}' registered target '{tname}' with "
                                      f"compile_target {compile_target!r}: {exc}") from None
            reg.targets[tname] = (lower, _p, description)
            reg.compile_targets[tname] = compile_target

        def reg_command(cname: str, configure: Callable, run: Callable, help: str = "",
                        _p: str = name) -> None:
            reg.commands[cname] = (configure, run, help, _p)

        callbacks = dict(zip(REGISTRATION_HOOKS, (reg_backend, reg_scheme, reg_target,
                                                  reg_command)))
        for hook_name, callback in callbacks.items():
            try:
                pm.subset_hook_caller(hook_name, remove_plugins=others)(register=callback)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                reg.plugins.setdefault(name, PluginInfo(name)).error = msg
                if name in _allow_list():
                    raise PluginError(f"plugin '{name}' failed in {hook_name}: {msg}") from exc
                log.warning("xrt plugin %r failed in %s: %s", name, hook_name, msg)


def registry() -> Registry:
    with _lock:
        plugin_manager()
        return _registry  # type: ignore[return-value]  # set by plugin_manager()


def reset() -> None:
    """Forget loaded plugins; the next query loads them again."""
    global _pm, _registry
    with _lock:
        _pm = None
        _registry = None


# --- queries used by the core ---------------------------------------------------------------

def backend_classes() -> dict[str, type]:
    return {name: cls for name, (cls, _) in registry().backends.items()}


def backend_class(name: str) -> type:
    """A registered backend class by its name (case-insensitive)."""
    classes = backend_classes()
    for key, cls in classes.items():
        if key.lower() == name.lower():
            return cls
    raise PluginError(f"no backend named '{name}'; installed backends: "
                      f"{', '.join(sorted(classes)) or 'none'}")


def _url(key: tuple[str, str]) -> str:
    scheme, name = key
    return f"{scheme}://" if name == "*" else f"{scheme}://{name}"


def open_device(url: str) -> Any:
    """Open a device through the plugin that claims the URL's scheme and device name.

    The URL is parsed once (`xrt.url.DeviceUrl`) and the opener receives the parsed value. A
    plugin claims a scheme for given device names (`sim://zg330`, `sim://buyi`) or for any
    name; the exact name wins.
    """
    parsed = DeviceUrl.parse(url)
    schemes = registry().schemes
    key = (parsed.scheme, parsed.name)
    if key not in schemes:
        key = (parsed.scheme, "*")
    if key not in schemes:
        known = ", ".join(sorted(_url(k) for k in schemes)) or "none"
        raise DeviceUrlError(f"no installed plugin opens {url!r}; installed schemes: {known}")
    opener, _plugin, _ = schemes[key]
    return opener(parsed)


def targets() -> dict[str, Callable]:
    return {name: lower for name, (lower, _, _) in registry().targets.items()}


def target(name: str) -> Callable:
    found = targets()
    if name not in found:
        from .errors import XrtError

        raise XrtError(f"no compile target '{name}' is installed; installed targets: "
                       f"{', '.join(sorted(found)) or 'none'} (install the backend package "
                       f"that provides it, e.g. icraft-xrt-sim-{name})")
    return found[name]
