"""Hardware variants named in a device URL's query, for design-space sweeps and quick what-ifs.

    sim://zg330?mpe=2x4&ocm_kib=512&icore_mhz=800&ddr_mhz=1066&mode=cycles

- ``mpe=RxC``: MPE rows x columns enabled at power-on (register MPE_EN; at most the chip's
  physical array, 4x4 on the ZG330: packed weights follow the physical row count, so a compiled
  network runs on any enabled subset, never on a larger array).
- ``ocm_kib=N``: on-chip memory size in KiB, 0 up to the chip's (0: no OCM, the OCM planner
  keeps every feature map in ETM).
- ``icore_mhz=F``, ``ddr_mhz=F``: the clocks at power-on (registers ICORE_CLK_HZ, DDR_CLK_HZ).
- ``mode=cycles``: the core decodes, plans, moves tiles and counts every cycle and byte, but
  runs no compute kernel: outputs are left as they were (garbage), timings are exact. ``mode=full``
  (the default) computes.

The vendor board URL's ``npu=`` and ``dma=`` (``axi://zg330aiu?npu=0x40000000&dma=...``) are
accepted and kept in ``url_params``; any other key is refused, so a typo never silently runs the
default hardware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from xrt.errors import DeviceUrlError

#: every query key a simulated device URL takes
KNOWN = ("mpe", "ocm_kib", "icore_mhz", "ddr_mhz", "mode", "npu", "dma")
MODES = ("full", "cycles")


@dataclass(frozen=True)
class HardwareVariant:
    """What a URL's query changes: config fields, and the MPE subset enabled at power-on."""

    config_changes: dict[str, Any]
    rows_cols: tuple[int, int] | None = None


def _int(url: str, key: str, text: str, lo: int, hi: int) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise DeviceUrlError(f"{url!r}: {key}={text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise DeviceUrlError(f"{url!r}: {key}={value} is outside {lo}..{hi}")
    return value


def parse_variant(url: str, params: dict[str, str], config: Any) -> HardwareVariant:
    """The hardware variant `params` (a URL's query) asks of the chip `config`;
    DeviceUrlError names the key at fault."""
    unknown = sorted(set(params) - set(KNOWN))
    if unknown:
        raise DeviceUrlError(f"{url!r}: unknown parameter(s) {unknown}; a simulated device takes "
                             f"{list(KNOWN)}")
    changes: dict[str, Any] = {}
    rows_cols = None
    if "mpe" in params:
        m = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\d+)\s*", params["mpe"])
        if not m:
            raise DeviceUrlError(f"{url!r}: mpe={params['mpe']!r} is not ROWSxCOLS, e.g. mpe=2x4")
        rows, cols = int(m.group(1)), int(m.group(2))
        if not (1 <= rows <= config.mpe_rows and 1 <= cols <= config.mpe_cols):
            raise DeviceUrlError(f"{url!r}: mpe={rows}x{cols} does not fit the chip's "
                                 f"{config.mpe_rows}x{config.mpe_cols} MPE array")
        rows_cols = (rows, cols)
    if "ocm_kib" in params:
        kib = _int(url, "ocm_kib", params["ocm_kib"], 0, config.ocm_size // 1024)
        changes["ocm_size"] = kib * 1024
    for key, field in (("icore_mhz", "icore_clk_hz"), ("ddr_mhz", "ddr_clk_hz")):
        if key in params:
            changes[field] = _int(url, key, params[key], 1, 4294) * 1_000_000
    mode = params.get("mode", "full")
    if mode not in MODES:
        raise DeviceUrlError(f"{url!r}: mode={mode!r} is not one of {list(MODES)}")
    if mode == "cycles":
        changes["is_mock"] = True
    return HardwareVariant(changes, rows_cols)
