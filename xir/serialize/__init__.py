"""Vendor-style network files: the json graph (`json/`) and the .raw parameter file (`raw.py`).

The format is described in docs/xir-format.md. Every malformed input raises an `xir.XirError`
subclass that names the file, the op id and the field at fault.
"""

from __future__ import annotations

from .json import load_json, load_network, loads, network_from_dict, network_to_dict, save_network
from .raw import RAW_ALIGN, RAW_MAGIC, read_raw, read_raw_bytes, write_raw

__all__ = [
    "load_json", "load_network", "loads", "network_from_dict", "network_to_dict", "save_network",
    "RAW_ALIGN", "RAW_MAGIC", "read_raw", "read_raw_bytes", "write_raw",
]
