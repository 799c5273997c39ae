"""Plugin discovery: entry points, a third-party backend, broken plugins, URL schemes, CLI."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import types

import numpy as np
import pytest

import xrt
from host_backend import HostBackend
from xrt import Device, DeviceUrlError, HostDevice, PluginError, Session, Tensor, plugins
from xrt.hookspecs import hookimpl


def _third_party_module() -> types.ModuleType:
    """A plugin module as a third party would ship it: one backend running Sigmoid only."""
    mod = types.ModuleType("acme_npu_plugin")

    class AcmeBackend(xrt.Backend):
        name = "Acme"
        default_url = "host://"

        @staticmethod
        def _sigmoid(op, inputs, outputs, backend):
            x = np.asarray(inputs[0])
            type(backend).calls += 1
            return [Tensor((1.0 / (1.0 + np.exp(-x))).astype(np.float32))]

        FORWARDS = {"Sigmoid": _sigmoid}
        calls = 0

    @hookimpl
    def xrt_register_backends(register):
        register(AcmeBackend)

    @hookimpl
    def xrt_register_device_schemes(register):
        register("acme", lambda url: HostDevice.Default(), "Acme boards")

    mod.AcmeBackend = AcmeBackend
    mod.xrt_register_backends = xrt_register_backends
    mod.xrt_register_device_schemes = xrt_register_device_schemes
    return mod


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Add entry points (name -> module) next to the installed ones, as a fake distribution."""
    added: list[md.EntryPoint] = []
    real = plugins._entry_points

    def install(name: str, module: types.ModuleType | None, target: str | None = None):
        if module is not None:
            monkeypatch.setitem(sys.modules, module.__name__, module)
        added.append(md.EntryPoint(name, target or module.__name__, plugins.ENTRY_POINT_GROUP))
        plugins.reset()

    monkeypatch.setattr(plugins, "_entry_points", lambda: real() + added)
    yield install
    plugins.reset()


def test_host_plugin_is_discovered_through_its_entry_point():
    reg = plugins.registry()
    assert reg.backends["Host"][0] is HostBackend
    assert ("host", "*") in reg.schemes
    assert reg.plugins["host"].distribution == "icraft-xrt-sim-host"
    assert Device.Open("host://") is HostDevice.Default()


def test_third_party_backend_binds_its_op(fake_entry_points):
    mod = _third_party_module()
    fake_entry_points("acme", mod)
    Acme = plugins.backend_class("acme")
    assert Acme is mod.AcmeBackend
    import xir

    b = xir.NetworkBuilder("sig")
    x = b.input([2, 3])
    y = b.sigmoid(b.relu(x))
    b.output(y)
    net = b.build()
    dev = Device.Open("acme://board0")
    sess = Session.Create([Acme, HostBackend], net.view(0), [dev, HostDevice.Default()])
    bound = {net.getOpById(k).op_type: type(v).__name__
             for k, v in sess.backendBindings().items()}
    assert bound == {"Input": "HostBackend", "Relu": "HostBackend", "Sigmoid": "AcmeBackend",
                     "Output": "HostBackend"}
    sess.apply()
    data = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    out = np.asarray(sess.forward([data])[0])
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-np.maximum(data, 0))), rtol=1e-6)
    assert mod.AcmeBackend.calls == 1


def test_broken_plugin_is_skipped_unless_asked_for(fake_entry_points, monkeypatch, caplog):
    fake_entry_points("broken", None, target="no_such_module_xyz:plugin")
    reg = plugins.registry()  # loads fine: the broken one is logged and skipped
    assert "Host" in reg.backends
    assert "ModuleNotFoundError" in reg.plugins["broken"].error
    assert any("broken" in r.message for r in caplog.records)
    monkeypatch.setenv("XRT_PLUGINS", "broken,host")
    plugins.reset()
    with pytest.raises(PluginError, match="plugin 'broken'"):
        plugins.registry()


def test_plugin_registering_a_non_backend_is_blamed(fake_entry_points, monkeypatch):
    mod = types.ModuleType("bad_backend_plugin")

    @hookimpl
    def xrt_register_backends(register):
        register(object)

    mod.xrt_register_backends = xrt_register_backends
    fake_entry_points("badb", mod)
    assert "not an xrt.Backend subclass" in plugins.registry().plugins["badb"].error
    monkeypatch.setenv("XRT_PLUGINS", "badb")
    plugins.reset()
    with pytest.raises(PluginError, match="badb"):
        plugins.registry()


def test_misspelled_hook_fails_at_once(fake_entry_points, monkeypatch):
    mod = types.ModuleType("typo_plugin")

    @hookimpl
    def xrt_register_backend(register):  # missing 's'
        pass

    mod.xrt_register_backend = xrt_register_backend
    fake_entry_points("typo", mod)
    with pytest.raises(Exception, match="xrt_register_backend"):
        plugins.registry()


def test_unknown_scheme_lists_installed_ones():
    with pytest.raises(DeviceUrlError, match=r"installed schemes: .*host://"):
        Device.Open("nosuch://dev")
    with pytest.raises(DeviceUrlError, match="no scheme"):
        Device.Open("zg330")
    with pytest.raises(PluginError, match="installed backends: .*Host"):
        plugins.backend_class("NoSuchBackend")


def test_plugins_command_lists_backends_and_schemes():
    out = subprocess.run([sys.executable, "-m", "xrt", "plugins"], capture_output=True,
                         text=True, check=True).stdout
    assert "Host" in out and "host://" in out and "icraft-xrt-sim-host" in out


def test_two_plugins_share_a_scheme_by_device_name(fake_entry_points):
    opened = []

    def plugin(name: str) -> types.ModuleType:
        mod = types.ModuleType(f"{name}_sim_plugin")

        @hookimpl
        def xrt_register_device_schemes(register):
            register("simx", lambda url: opened.append((name, url)) or HostDevice.Default(),
                     f"{name} simulator", names=[name])

        mod.xrt_register_device_schemes = xrt_register_device_schemes
        return mod

    fake_entry_points("npu_a", plugin("npua"))
    fake_entry_points("npu_b", plugin("npub"))
    Device.Open("simx://npub?x=1")
    Device.Open("simx://npua")
    assert [n for n, _ in opened] == ["npub", "npua"]
    with pytest.raises(DeviceUrlError, match="simx://npua"):
        Device.Open("simx://other")
