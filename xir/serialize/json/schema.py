"""The json schema: the vendor's `_type_key` names, each object kind's fields, id and version
limits.

Shared by the writer (`encode`) and the reader (`reader`, `decode`); docs/xir-format.md describes
each object kind.
"""

from __future__ import annotations

import re

from ...ops.base import OP_REGISTRY

PREFIX = "icraft::xir::"
NETWORK_KEY = PREFIX + "Network"
VALUE_KEY = PREFIX + "Value"
PARAMS_KEY = PREFIX + "Params"
TENSOR_KEY = PREFIX + "TensorType"
QUANT_KEY = PREFIX + "QuantizedType"
NON_OP_KEYS = {NETWORK_KEY, VALUE_KEY, PARAMS_KEY, TENSOR_KEY, QUANT_KEY}

ID_MAX = 2**31 - 1
"""op_id and v_id are non-negative and fit an i32 (the raw header's v_id field)."""

OP_FIELDS = ("_type_key", "op_id", "name", "inputs", "outputs", "compile_target", "tags")
HARDOP_FIELDS = ("instr", "params")
NETWORK_FIELDS = ("_type_key", "name", "framework_kind", "framework_version", "icraft_version",
                   "icraft_xir_version", "params_bytes", "params_md5", "ops", "tags")
VALUE_FIELDS = ("_type_key", "v_id", "name", "dtype", "mtype", "tags")
TENSOR_FIELDS = ("_type_key", "element_dtype", "shape", "layout")
QUANT_FIELDS = ("_type_key", "storage", "scale", "zero_point", "axis")

FREE_LIST_ATTRS = frozenset({"sub_hard_ops"})
"""List attributes whose items are free json (or ops); every other list attribute holds ints
unless the op class declares `LIST_ITEMS = {"attr": float}` (item type per attribute)."""

OWN_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)")
VENDOR_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
VENDOR_MAJOR = 3
"""The vendor format major version this reader reads (the v3.3x toolchain writes 3.x.y[.z])."""
MD5_RE = re.compile(r"[0-9a-f]{32}")
MAX_SUB_DEPTH = 8


def is_known(key: str) -> bool:
    """Whether `key` is a `_type_key` this reader knows (an object kind or a registered op)."""
    return key in NON_OP_KEYS or (key.startswith(PREFIX) and key[len(PREFIX):] in OP_REGISTRY)
