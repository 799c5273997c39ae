"""xir: the Icraft network IR — networks, ops, values, tensor types, views; json + raw files."""

from . import ops
from .builder import NetworkBuilder
from .bundle import Bundle, BundleMemberNotFoundError
from .errors import *  # noqa: F401,F403 - the hierarchy is part of the public API
from .errors import XirError
from .network import FORMAT_VERSION, Network, NetworkView
from .ops import *  # noqa: F401,F403
from .ops import OP_REGISTRY, Operation
from .types import (
    BF16,
    FP16,
    FP32,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT8,
    UINT16,
    UINT64,
    Layout,
    QuantizedType,
    ScalarType,
    TensorType,
)
from .values import HOSTM, MemType, Params, Value

__version__ = "0.1.0"
