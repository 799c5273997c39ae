"""`Device` and `HostDevice`: named memory and register regions behind one URL.

A device model (the ZG330 simulator, a socket proxy, ...) subclasses `Device`, adds its regions
with `add_mem_region` / `add_reg_region`, and attaches register hooks. Memory is only touched
through each region's `Storage` and registers only through `RegRegion` methods, so a subclass can
forward both to a remote process without changing the rest of xrt.

`Device.Open(url)` dispatches on the URL scheme through the plugin system (`xrt.plugins`).
"""

from __future__ import annotations

import threading
from typing import Any

from xrt.args import int_arg, str_arg
from xrt.errors import DeviceError, InvalidArgumentError
from xrt.memory.chunk import MemChunk
from xrt.memory.region import HostMemRegion
from xrt.memory.region import MemRegion as _MemRegion
from xrt.regs import RegRegion

DEFAULT_WAIT_TIME_MS = 10_000


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("icraft-xrt-sim")
    except metadata.PackageNotFoundError:
        return "0.1.0"


def _split_reg_args(args: tuple[Any, ...], nfixed: int, what: str) -> tuple[str | None, tuple]:
    """Split `(region_name?, *fixed, relative?)` overload arguments."""
    name = None
    if args and isinstance(args[0], str):
        name, args = args[0], args[1:]
    if not nfixed <= len(args) <= nfixed + 1:
        raise InvalidArgumentError(
            f"{what}: expected ([region_name,] {'addr' if nfixed == 1 else 'addr, data'}"
            f"[, relative]), got {len(args)} positional arguments after the region name"
        )
    return name, args


class Device:
    """A device: named memory regions and register regions, opened by URL.

    The base class is usable on its own (a device with whatever regions are added); device models
    subclass it and override `reset`, `check`, `version` or `_on_close` as needed.
    """

    def __init__(self, url: str = "", wait_time_ms: int = DEFAULT_WAIT_TIME_MS) -> None:
        self._url = url
        self._mem: dict[str, _MemRegion] = {}
        self._regs: dict[str, RegRegion] = {}
        self._default_mem: str | None = None
        self._default_reg: str | None = None
        self._wait_time_ms = int(wait_time_ms)
        self._open = True

    # --- opening and closing ------------------------------------------------------------------

    @staticmethod
    def Open(url: str) -> Device:
        """Open the device named by `url`; the plugin that claims its scheme builds it."""
        from xrt.plugins import open_device

        return open_device(url)

    @staticmethod
    def Close(device: Device) -> None:
        """Close `device` (same as `device.close()`)."""
        device.close()

    def close(self) -> None:
        """Release all device memory and mark the device closed. Idempotent.

        Chunks still held by the user then raise UseAfterFreeError.
        """
        if not self._open:
            return
        self._open = False
        try:
            self._on_close()
        finally:
            for region in self._mem.values():
                region.memManager().release_all("device closed", close=True)
                region.storage.release()  # at once, not when the cyclic GC finds the device

    def _on_close(self) -> None:
        """Hook for subclasses: stop simulators, drop connections (runs once, before memory)."""

    @property
    def is_open(self) -> bool:
        """False once `close()` has run."""
        return self._open

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if not self._open:
            raise DeviceError(
                f"device {self._url or type(self).__name__!r} is closed; open it again with "
                "Device.Open(url)"
            )

    # --- regions ------------------------------------------------------------------------------

    def add_mem_region(self, region: _MemRegion, default: bool = False) -> _MemRegion:
        """Register a memory region (the first one becomes the default); return it."""
        if region.name in self._mem:
            raise DeviceError(f"{self!r} already has a memory region named {region.name!r}")
        region.attach(self)
        self._mem[region.name] = region
        if default or self._default_mem is None:
            self._default_mem = region.name
        return region

    def add_reg_region(self, region: RegRegion, default: bool = False) -> RegRegion:
        """Register a register region (the first one becomes the default); return it."""
        if region.name in self._regs:
            raise DeviceError(f"{self!r} already has a register region named {region.name!r}")
        region.attach(self)
        self._regs[region.name] = region
        if default or self._default_reg is None:
            self._default_reg = region.name
        return region

    @property
    def mem_regions(self) -> dict[str, _MemRegion]:
        """Memory regions by name (a copy)."""
        return dict(self._mem)

    @property
    def reg_regions(self) -> dict[str, RegRegion]:
        """Register regions by name (a copy)."""
        return dict(self._regs)

    def getMemRegion(self, name: str) -> _MemRegion:
        """The memory region called `name`."""
        region = self._mem.get(str_arg(name, "getMemRegion name"))
        if region is None:
            raise DeviceError(
                f"{self!r} has no memory region {name!r}; available: {sorted(self._mem) or 'none'}"
            )
        return region

    def getRegRegion(self, name: str) -> RegRegion:
        """The register region called `name`."""
        region = self._regs.get(name)
        if region is None:
            raise DeviceError(
                f"{self!r} has no register region {name!r}; "
                f"available: {sorted(self._regs) or 'none'}"
            )
        return region

    def defaultMemRegion(self) -> _MemRegion:
        """The memory region `malloc(byte_size)` uses."""
        if self._default_mem is None:
            raise DeviceError(f"{self!r} has no memory regions")
        return self._mem[self._default_mem]

    def defaultRegRegion(self) -> RegRegion:
        """The register region `readReg(addr)` / `writeReg(addr, data)` use."""
        if self._default_reg is None:
            raise DeviceError(f"{self!r} has no register regions")
        return self._regs[self._default_reg]

    def setDefaultMemRegion(self, region_name: str) -> Device:
        """Make `region_name` the default memory region; return self."""
        self.getMemRegion(region_name)
        self._default_mem = region_name
        return self

    def setDefaultRegRegion(self, region_name: str) -> Device:
        """Make `region_name` the default register region; return self."""
        self.getRegRegion(region_name)
        self._default_reg = region_name
        return self

    # --- memory and registers -----------------------------------------------------------------

    def malloc(self, *args: Any, auto_free: bool = True, alignment: int = 1) -> MemChunk:
        """Allocate memory: `malloc(byte_size)` on the default region, or
        `malloc(mem_region: str, byte_size)` on a named one."""
        self._check_open()
        if len(args) == 2 and isinstance(args[0], str):
            region, byte_size = self.getMemRegion(args[0]), args[1]
        elif len(args) == 1 and not isinstance(args[0], str):
            region, byte_size = self.defaultMemRegion(), args[0]
        else:
            raise InvalidArgumentError(
                f"{self!r}.malloc: expected (byte_size) or (mem_region: str, byte_size), "
                f"got {args!r}"
            )
        return region.malloc(byte_size, auto_free=auto_free, alignment=alignment)

    def readReg(self, *args: Any, relative: bool = False) -> int:
        """Read a register: `readReg(addr, relative=False)` on the default register region, or
        `readReg(region_name, addr, relative=False)`."""
        self._check_open()
        name, rest = _split_reg_args(args, 1, "readReg")
        region = self.getRegRegion(name) if name is not None else self.defaultRegRegion()
        rel = bool(rest[1]) if len(rest) == 2 else relative
        return region.read(rest[0], rel)

    def writeReg(self, *args: Any, relative: bool = False) -> None:
        """Write a register: `writeReg(addr, data, relative=False)` on the default register
        region, or `writeReg(region_name, addr, data, relative=False)`."""
        self._check_open()
        name, rest = _split_reg_args(args, 2, "writeReg")
        region = self.getRegRegion(name) if name is not None else self.defaultRegRegion()
        rel = bool(rest[2]) if len(rest) == 3 else relative
        region.write(rest[0], rest[1], rel)

    # --- control and status -------------------------------------------------------------------

    def reset(self, level: int = 0) -> None:
        """Reset the device. Base behaviour at every level: all registers read 0 again (hooks
        stay). Memory is kept, as DDR keeps its contents; device models add their own levels."""
        self._check_open()
        for region in self._regs.values():
            region.reset()

    def check(self, level: int = 0) -> bool:
        """True when the device is open and every region's memory book-keeping is consistent."""
        return self._open and all(r.memManager().check() for r in self._mem.values())

    def status(self, level: int = 0) -> str:
        """Status text: regions and bytes used; `level >= 1` also lists every live chunk."""
        lines = [f"{type(self).__name__} {self._url!r} ({'open' if self._open else 'closed'})"]
        for name, region in self._mem.items():
            info = region.memManager().getMemRegionInfo()
            mark = "*" if name == self._default_mem else " "
            lines.append(
                f" {mark}mem {name!r}: [{region.base:#x}, {region.base + region.size:#x}) "
                f"used {info['used_bytes']} / {region.size} bytes in {info['chunk_count']} chunks, "
                f"largest free block {info['largest_free_block']}"
            )
            if level >= 1:
                lines.extend(f"      {c!r}" for c in region.memManager().getAllMemChunk())
        for name, reg in self._regs.items():
            mark = "*" if name == self._default_reg else " "
            lines.append(
                f" {mark}reg {name!r}: [{reg.base:#x}, {reg.base + reg.size:#x}) "
                f"{reg.word_bytes}-byte words"
            )
        return "\n".join(lines)

    def showStatus(self, level: int = 0) -> None:
        """Print `status(level)`."""
        print(self.status(level))

    def version(self) -> dict[str, str]:
        """Version strings: the xrt package and the device model."""
        return {"xrt": _package_version(), "device": type(self).__name__}

    def setWaitTime(self, wait_time: int) -> None:
        """Longest time (ms) to wait for the device when synchronising tensors."""
        wait_time = int_arg(wait_time, "setWaitTime wait_time", hi=2**31 - 1)
        if wait_time < 0:
            raise InvalidArgumentError(f"{self!r}: wait time {wait_time} ms is negative")
        self._wait_time_ms = wait_time

    @property
    def wait_time(self) -> int:
        """The wait time set by `setWaitTime`, in ms."""
        return self._wait_time_ms

    @property
    def url(self) -> str:
        """The URL the device was opened with."""
        return self._url

    def clone(self, depth: int = 1) -> Device:
        """The same device: it stands for one piece of hardware, which is not copied."""
        return self

    # --- serving (xrt serve) ------------------------------------------------------------------

    @property
    def serve_guard(self) -> Any:
        """What each client of a device server may make this device do beyond its own memory
        (an object with `call`, `reg_read`, `reg_write`, `reg_reset`; see
        `xrt.remote.server`); None: plain memory and register access."""
        return None

    def serve_description(self) -> dict[str, Any]:
        """What a device server's HELLO reply says about this device beyond its regions (a
        device model adds its hardware variant); JSON-able values only."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r})"


class HostDevice(Device):
    """The host (CPU) as a device: one HostMemRegion named "host", no registers.

    `HostDevice.Default()` is the process-wide instance (url "host://"); closing it is a no-op,
    since host memory lives as long as the process. Other instances close normally.
    """

    _default: HostDevice | None = None
    _default_lock = threading.Lock()

    def __init__(self, url: str = "host://") -> None:
        super().__init__(url)
        self.add_mem_region(HostMemRegion("host", self))

    @staticmethod
    def Default() -> HostDevice:
        """The process-wide host device."""
        dev = HostDevice._default  # made once and never replaced: no lock once it exists
        if dev is not None:
            return dev
        with HostDevice._default_lock:
            if HostDevice._default is None:
                HostDevice._default = HostDevice()
            return HostDevice._default

    @staticmethod
    def MemRegion() -> HostMemRegion:
        """The memory region of the process-wide host device (asked for on every crossing
        between host and device memory: its own dictionary read, not `getMemRegion`'s
        argument check)."""
        dev = HostDevice._default or HostDevice.Default()
        region = dev._mem.get("host")
        return region if region is not None else dev.getMemRegion("host")  # type: ignore

    def close(self) -> None:
        """Close this host device; a no-op for `HostDevice.Default()`."""
        if self is HostDevice._default:
            return
        super().close()
