"""What makes one FMSH NPU differ from another, as data: the runtime, the device, the plugin and
the lowering are shared (`npu_runtime`, `npu_model`) and read everything chip-specific from a
`Chip`. A chip package defines one and a few overridden steps (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from npu_model.config import NpuConfig
from npu_model.lowering import TargetConfig


@dataclass(frozen=True)
class Chip:
    """One NPU: names, hardware parameters, URLs and deployment defaults."""

    #: the vendor's name: backend name ("ZG330"), message prefix, ``xrt serve`` family
    name: str
    #: the lowering target (its ``name`` is the ``--target`` and tag key, e.g. "zg330")
    target: TargetConfig
    #: identification register value
    device_id: int
    #: device names each simulated scheme opens, e.g. {"sim": ("zg330",), "axi": (...)}
    url_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: device names of ``socket://NAME@host:port``
    socket_names: tuple[str, ...] = ()
    #: deployment defaults: consecutive HardOps merged into one run; FTMP reused by lifetime
    merge: bool = True
    etm_reuse: bool = True
    #: the device's MMU can be switched off (the Buyi's mmuModeSwitch): apply reads the mode
    #: and every run checks it has not changed since
    mmu_switch: bool = False

    @property
    def config(self) -> NpuConfig:
        return self.target.npu

    @property
    def tag(self) -> str:
        """Key of the lowering's annotations in value / op / network tags."""
        return self.target.tag

    @property
    def compile_target(self) -> str:
        """compile_target of the HardOps this chip runs, e.g. "@zhuget(330)"."""
        return self.target.compile_target

    @property
    def kind(self) -> str:
        """The lower-case name: ``--target``, ``xrt serve KIND``, ``sim://KIND``."""
        return self.target.name

    @property
    def default_url(self) -> str:
        return f"sim://{self.kind}"
