"""The vendor-style network json: `_type_key`-typed objects, ops in execution order.

Reading checks in layers: bytes and syntax, then the header (type key, format version), then each
op's structure (inside a guard that turns any stray Python exception into a NetworkFormatError
naming the op), then the network's semantics with `Network.validate()`. See docs/xir-format.md.

The modules: `schema` (type keys, fields, limits), `encode` (network -> json object and text),
`write` (the json + raw pair on disk or in memory), `fields` (the reader's typed accessors),
`reader` (json objects -> types, values, ops), `decode` (version rules, guards, loading).
"""

from __future__ import annotations

from .decode import load_json, load_network, loads, network_from_dict
from .encode import dumps, network_to_dict
from .schema import (
    FREE_LIST_ATTRS,
    ID_MAX,
    NETWORK_KEY,
    PARAMS_KEY,
    PREFIX,
    QUANT_KEY,
    TENSOR_KEY,
    VALUE_KEY,
    VENDOR_MAJOR,
)
from .write import dump_pair, save_network

__all__ = [
    "FREE_LIST_ATTRS", "ID_MAX", "NETWORK_KEY", "PARAMS_KEY", "PREFIX", "QUANT_KEY", "TENSOR_KEY",
    "VALUE_KEY", "VENDOR_MAJOR", "dump_pair", "dumps", "load_json", "load_network", "loads",
    "network_from_dict", "network_to_dict", "save_network",
]
