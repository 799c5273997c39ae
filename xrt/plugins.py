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
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .errors import DeviceUrlError, PluginError

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
    commands: dict[str, tuple[Callable, Callable, str, str]] = field(default_factory=dict)


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_registry: Registry | None = None
_extra: list[tuple[str, ModuleType | object]] = []


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
        for name, module in _extra:
            if pm.get_plugin(name) is None:
                pm.register(module, name=name)
                reg.plugins.setdefault(name, PluginInfo(name, "(registered in process)"))
        pm.check_pending()
        _pm = pm
        _registry = reg
        _collect(pm, reg)
        return pm


def _collect(pm: pluggy.PluginManager, reg: Registry) -> None:
    """Run the registration hooks, validating what each plugin sends."""
    from .backend import Backend

    for name, plugin in pm.list_name_plugin():
        current = name

        def reg_backend(cls: type, _p: str = current) -> None:
            if not (isinstance(cls, type) and issubclass(cls, Backend)):
                raise PluginError(f"plugin '{_p}' registered {cls!r}, which is not an "
                                  f"xrt.Backend subclass")
            bname = getattr(cls, "name", "") or cls.__name__
            if bname in reg.backends and reg.backends[bname][0] is not cls:
                raise PluginError(f"plugin '{_p}' registered backend '{bname}', already "
                                  f"registered by '{reg.backends[bname][1]}'")
            reg.backends[bname] = (cls, _p)

        def reg_scheme(scheme: str, opener: Callable, description: str = "",
                       names: Any = None, _p: str = current) -> None:
            if not callable(opener):
                raise PluginError(f"plugin '{_p}' registered a non-callable opener for "
                                  f"'{scheme}://'")
            for name in ([n.lower() for n in names] if names else ["*"]):
                key = (scheme.lower(), name)
                if key in reg.schemes and reg.schemes[key][1] != _p:
                    raise PluginError(f"plugin '{_p}' claims '{_url(key)}', already claimed "
                                      f"by '{reg.schemes[key][1]}'")
                reg.schemes[key] = (opener, _p, description)

        def reg_target(tname: str, lower: Callable, description: str = "",
                       _p: str = current) -> None:
            if not callable(lower):
                raise PluginError(f"plugin '{_p}' registered a non-callable lowering for "
                                  f"target '{tname}'")
            reg.targets[tname] = (lower, _p, description)

        def reg_command(cname: str, configure: Callable, run: Callable, help: str = "",
                        _p: str = current) -> None:
            reg.commands[cname] = (configure, run, help, _p)

        hooks = [("xrt_register_backends", reg_backend),
                 ("xrt_register_device_schemes", reg_scheme),
                 ("xrt_register_targets", reg_target),
                 ("xrt_register_commands", reg_command)]
        for hook_name, callback in hooks:
            impl = getattr(plugin, hook_name, None)
            if impl is None:
                continue
            try:
                impl(register=callback)
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


def register_plugin(module: ModuleType | object, name: str | None = None) -> None:
    """Register a plugin object in this process (tests, notebooks, embedded use)."""
    with _lock:
        key = name or getattr(module, "__name__", repr(module))
        _extra.append((key, module))
        reset()


def unregister_plugin(name: str) -> None:
    with _lock:
        _extra[:] = [(n, m) for n, m in _extra if n != name]
        reset()


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


def device_name(rest: str) -> str:
    """The device name of a URL's remainder: up to the first of '?', '@', ':' or '/'."""
    for i, ch in enumerate(rest):
        if ch in "?@:/":
            return rest[:i].lower()
    return rest.lower()


def split_url(url: str) -> tuple[str, str]:
    if not isinstance(url, str) or "://" not in url:
        raise DeviceUrlError(f"device URL {url!r} has no scheme; expected e.g. "
                             f"'sim://zg330' or 'host://'")
    scheme, rest = url.split("://", 1)
    if not scheme:
        raise DeviceUrlError(f"device URL {url!r} has an empty scheme")
    return scheme.lower(), rest


def open_device(url: str) -> Any:
    """Open a device through the plugin that claims the URL's scheme and device name.

    A plugin claims a scheme for given device names (`sim://zg330`, `sim://buyi`) or for any
    name; the exact name wins.
    """
    scheme, rest = split_url(url)
    schemes = registry().schemes
    key = (scheme, device_name(rest))
    if key not in schemes:
        key = (scheme, "*")
    if key not in schemes:
        known = ", ".join(sorted(_url(k) for k in schemes)) or "none"
        raise DeviceUrlError(f"no installed plugin opens {url!r}; installed schemes: {known}")
    opener, plugin, _ = schemes[key]
    return opener(url)


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
