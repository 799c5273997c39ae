"""Network (ops in execution order plus their values) and NetworkView (a slice of one)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .errors import (
    CycleError,
    DanglingReferenceError,
    DuplicateIdError,
    GraphEditError,
    NetworkFormatError,
    OpNotFoundError,
    ValueNotFoundError,
    XirError,
)
from .ops.base import Operation
from .types import TensorType
from .values import Params, Value

FORMAT_VERSION = "1.1"
"""This project's revision of the json/raw format, `MAJOR.MINOR` (docs/xir-format.md, Versions).
Written in the network's tags under `FORMAT_TAG`; files of revision 1.0 carried it in
`icraft_xir_version` instead."""

VENDOR_XIR_VERSION = "3.6.2"
"""What the writer puts in `icraft_xir_version`: a version in the vendor's own form (three
dotted fields, major 3, as the vendor's v3.3x toolchain writes), which the vendor's tools accept."""

FORMAT_TAG = "xir_format"
"""The network tag that holds `FORMAT_VERSION` in the files this project writes (reserved: the
reader takes it out of `Network.tags`, the writer puts it back)."""


class _ReadAPI:
    """The read API shared by Network and NetworkView."""

    ops: list[Operation]

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.ops)

    def opIds(self) -> list[int]:
        return [op.op_id for op in self.ops]

    def getOpById(self, op_id: int) -> Operation:
        op = self._op_index().get(op_id)
        if op is None:
            raise OpNotFoundError(f"no op with op_id {op_id} in {self._label()}", op_id=op_id)
        return op

    def hasOp(self, op_id: int) -> bool:
        return op_id in self._op_index()

    def getValueById(self, v_id: int) -> Value:
        for op in self.ops:
            for v in op.outputs:
                if v.v_id == v_id:
                    return v
            for v in op.inputs:
                if v.v_id == v_id:
                    return v
            if op.op_type == "HardOp":
                for v in op.hard_params():
                    if v.v_id == v_id:
                        return v
        raise ValueNotFoundError(f"no value with v_id {v_id} in {self._label()}", field="v_id")

    def index(self, op_id: int) -> int:
        """Position of an op in this network or view."""
        for i, op in enumerate(self.ops):
            if op.op_id == op_id:
                return i
        raise OpNotFoundError(f"no op with op_id {op_id} in {self._label()}", op_id=op_id)

    def producer(self, value: Value | int) -> Operation | None:
        v = self.getValueById(value) if isinstance(value, int) else value
        return v.producer

    def consumers(self, value: Value | int) -> list[Operation]:
        v = self.getValueById(value) if isinstance(value, int) else value
        mine = set(self.opIds())
        return [op for op in v.consumers if op.op_id in mine]

    def params(self) -> list[Params]:
        """Every Params the ops use, each once, in op order (HardOp instr/params included)."""
        seen: dict[int, Params] = {}
        for op in self.ops:
            extra = op.hard_params() if op.op_type == "HardOp" else []
            for v in list(op.inputs) + extra:
                if v.is_params and v.v_id not in seen:
                    seen[v.v_id] = v
        return list(seen.values())

    def _op_index(self) -> dict[int, Operation]:
        return {op.op_id: op for op in self.ops}

    def _label(self) -> str:
        return "network"

    # --- views ----------------------------------------------------------------------------
    def view(self, start: int | Sequence[int] | None = None, end: int | None = None, *,
             exclude: Iterable[int] = ()) -> NetworkView:
        """A view by position (`view(start)`, `view(start, end)`, negative allowed, end
        exclusive) or from a list of op ids; `exclude` drops op ids from either."""
        n = len(self.ops)
        if start is None:
            chosen = list(self.ops)
        elif isinstance(start, (list, tuple, set, frozenset)):
            wanted = set(start)
            index = self._op_index()
            missing = sorted(wanted - set(index))
            if missing:
                raise OpNotFoundError(f"view asks for op ids {missing} not in {self._label()}",
                                      op_id=missing[0])
            chosen = [op for op in self.ops if op.op_id in wanted]
        else:
            if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                       for i in (start, n if end is None else end)):
                raise OpNotFoundError(f"view({start!r}, {end!r}): the bounds must be op "
                                      f"indices (integers)")
            s = int(start)
            e = n if end is None else int(end)
            if not -n <= s <= n or not -n <= e <= n:
                raise OpNotFoundError(f"view({start}, {end}) out of range for {n} ops")
            chosen = self.ops[slice(s % n if s < 0 else s, e % n if e < 0 else e)]
        drop = set(exclude)
        if drop:
            chosen = [op for op in chosen if op.op_id not in drop]
        return NetworkView(self._root(), chosen)

    def viewExcluding(self, op_ids: Iterable[int]) -> NetworkView:
        return self.view(exclude=op_ids)

    def viewByIdRange(self, first_op_id: int, last_op_id: int) -> NetworkView:
        """The ops from `first_op_id` to `last_op_id` inclusive, in execution order."""
        i, j = self.index(first_op_id), self.index(last_op_id)
        if j < i:
            raise OpNotFoundError(f"op {last_op_id} comes before op {first_op_id}",
                                  op_id=last_op_id)
        return NetworkView(self._root(), self.ops[i:j + 1])

    def _root(self) -> Network:
        return self.network  # type: ignore[attr-defined]


class Network(_ReadAPI):
    """An xir network: its ops in execution order, the values between them and metadata."""

    def __init__(
        self,
        name: str = "network",
        *,
        framework_kind: str = "xir",
        framework_version: str = "",
        icraft_version: str = "",
        icraft_xir_version: str = VENDOR_XIR_VERSION,
        tags: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.framework_kind = framework_kind
        self.framework_version = framework_version
        self.icraft_version = icraft_version
        self.icraft_xir_version = icraft_xir_version
        self.tags: dict[str, Any] = dict(tags or {})
        self.ops: list[Operation] = []
        self.params_bytes = 0
        self.params_md5 = ""
        self.source_file: str | None = None
        self._next_op_id = 0
        self._next_v_id = 0

    def _root(self) -> Network:
        return self

    def _label(self) -> str:
        return f"network '{self.name}'"

    def inputs(self) -> list[Value]:
        """The outputs of the Input ops, in op order."""
        return [v for op in self.ops if op.op_type == "Input" for v in op.outputs]

    def outputs(self) -> list[Value]:
        """The inputs of the Output op(s), in order."""
        return [v for op in self.ops if op.op_type == "Output" for v in op.inputs]

    # --- ids ------------------------------------------------------------------------------
    def newOpId(self) -> int:
        self._next_op_id = max(self._next_op_id, max(self.opIds(), default=-1) + 1)
        self._next_op_id += 1
        return self._next_op_id - 1

    def newVId(self) -> int:
        self._next_v_id += 1
        return self._next_v_id - 1

    def reserveIds(self, op_id: int = -1, v_id: int = -1) -> None:
        """Make sure fresh ids come after these (used by loaders)."""
        self._next_op_id = max(self._next_op_id, op_id + 1)
        self._next_v_id = max(self._next_v_id, v_id + 1)

    def reserveIdsOf(self, other: Network) -> None:
        """Make sure fresh ids come after every id `other` handed out (a network rebuilt from
        `other`: its new ops and values never collide with the original's)."""
        self.reserveIds(other.next_op_id - 1, other.next_v_id - 1)

    @property
    def next_op_id(self) -> int:
        """The op id counter: `newOpId` hands out this or more (never an id in use)."""
        return self._next_op_id

    @property
    def next_v_id(self) -> int:
        """The value id `newVId` hands out next."""
        return self._next_v_id

    def newValue(self, dtype: TensorType, name: str = "") -> Value:
        return Value(self.newVId(), dtype, name)

    def newParams(self, data: np.ndarray, name: str = "", layout: Any = None,
                  element: Any = None) -> Params:
        return Params.from_array(self.newVId(), data, name, layout, element)

    # --- graph edits ----------------------------------------------------------------------
    def addOp(self, op: Operation) -> Operation:
        """Append `op` (execution order = list order)."""
        return self.insertOp(op, len(self.ops))

    def insertOp(self, op: Operation, index: int) -> Operation:
        """Insert `op` at position `index` (negative counts from the end)."""
        if not isinstance(op, Operation):
            raise GraphEditError(f"can only insert Operations, not {type(op).__name__}")
        if op.op_id < 0:
            op.op_id = self.newOpId()
        if op.op_id in self._op_index():
            raise DuplicateIdError(f"op_id {op.op_id} is already in {self._label()}",
                                   op_id=op.op_id, field="op_id")
        n = len(self.ops)
        pos = index + n + 1 if index < 0 else index
        if not 0 <= pos <= n:
            raise GraphEditError(f"insert position {index} out of range 0..{n}", op_id=op.op_id)
        self.ops.insert(pos, op)
        for v in op.inputs + op.outputs:
            self.reserveIds(v_id=v.v_id)
        self.relink()
        return op

    def insertOpBefore(self, op_id: int, op: Operation) -> Operation:
        return self.insertOp(op, self.index(op_id))

    def insertOpAfter(self, op_id: int, op: Operation) -> Operation:
        return self.insertOp(op, self.index(op_id) + 1)

    def removeOpById(self, op_id: int) -> Operation:
        """Remove an op; its outputs must no longer be read by any other op."""
        op = self.getOpById(op_id)
        readers = sorted({c.op_id for v in op.outputs for c in v.consumers if c is not op})
        if readers:
            raise GraphEditError(
                f"cannot remove op {op_id}: its outputs are read by ops {readers}; rewire them "
                f"first (replaceOpById or op.inputs)", op_id=op_id)
        self.ops.remove(op)
        self.relink()
        return op

    def replaceOpById(self, op_id: int, new_op: Operation) -> Operation:
        """Put `new_op` where op `op_id` was; it keeps the old id when it has none."""
        old = self.getOpById(op_id)
        if new_op.op_id < 0:
            new_op.op_id = op_id
        if new_op.op_id != op_id and new_op.op_id in self._op_index():
            raise DuplicateIdError(f"op_id {new_op.op_id} is already in {self._label()}",
                                   op_id=new_op.op_id, field="op_id")
        self.ops[self.ops.index(old)] = new_op
        for v in new_op.inputs + new_op.outputs:
            self.reserveIds(v_id=v.v_id)
        self.relink()
        return new_op

    def replaceValue(self, old: Value, new: Value) -> None:
        """Make every reader of `old` read `new` instead."""
        for op in self.ops:
            op.inputs = [new if v is old else v for v in op.inputs]
        self.relink()

    def relink(self) -> None:
        """Recompute producers and consumers of every value from the op lists."""
        for op in self.ops:
            for v in op.inputs + op.outputs:
                v.producer = None
                v.consumers = []
        for op in self.ops:
            for v in op.outputs:
                v.producer = op
            for v in op.inputs:
                if op not in v.consumers:
                    v.consumers.append(op)

    # --- checks ---------------------------------------------------------------------------
    def validate(self, check_shapes: bool = True) -> None:
        """Check ids, references, execution order and (optionally) every op's shapes."""
        file = self.source_file
        seen_ops: set[int] = set()
        produced: dict[int, Value] = {}
        position: dict[int, int] = {}
        for i, op in enumerate(self.ops):
            for v in op.outputs:
                position.setdefault(v.v_id, i)
        for op in self.ops:
            if op.op_id in seen_ops:
                raise DuplicateIdError(f"op_id {op.op_id} appears twice", file=file,
                                       op_id=op.op_id, field="op_id")
            seen_ops.add(op.op_id)
            for k, v in enumerate(op.inputs):
                if v.is_params:
                    continue
                if v.v_id in produced:
                    if produced[v.v_id] is not v:
                        raise DuplicateIdError(f"two different values share v_id {v.v_id}",
                                               file=file, op_id=op.op_id, field=f"inputs[{k}]")
                    continue
                if v.v_id in position:
                    raise CycleError(
                        f"input v_id {v.v_id} is produced later, by the op at position "
                        f"{position[v.v_id]}: ops are not in execution order (or form a cycle)",
                        file=file, op_id=op.op_id, field=f"inputs[{k}]")
                raise DanglingReferenceError(f"input v_id {v.v_id} is produced by no op",
                                             file=file, op_id=op.op_id, field=f"inputs[{k}]")
            for v in op.outputs:
                if v.is_params:
                    raise DanglingReferenceError(f"output v_id {v.v_id} is a Params", file=file,
                                                 op_id=op.op_id, field="outputs")
                if v.v_id in produced:
                    raise DuplicateIdError(f"v_id {v.v_id} is produced twice", file=file,
                                           op_id=op.op_id, field="outputs")
                produced[v.v_id] = v
            if check_shapes:
                try:
                    op.check_types()
                except XirError as err:
                    raise err.located(file=file, op_id=op.op_id) from err.__cause__

    # --- io ---------------------------------------------------------------------------
    @staticmethod
    def CreateFromJsonFile(path: str | os.PathLike) -> Network:
        """Load a network from its vendor-style json (params stay empty until loaded)."""
        from .serialize.json import load_json

        return load_json(path)

    @staticmethod
    def CreateFromJsonStr(text: str | bytes | bytearray | memoryview) -> Network:
        """Load a network from json text held in memory (str, or UTF-8 bytes): the vendor's
        name. Same checks as `CreateFromJsonFile`; errors name "<buffer>" where they would name
        the file. Params stay empty until `loadParamsFromBuffer` (or `loadParamsFromFile`)."""
        from .serialize.json import loads
        from .serialize.raw import BUFFER_LABEL

        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            raise NetworkFormatError(f"CreateFromJsonStr takes the json text as str or bytes, "
                                     f"not {type(text).__name__}", file=BUFFER_LABEL)
        if isinstance(text, str) and text.strip().endswith(".json") and "{" not in text:
            raise NetworkFormatError(f"CreateFromJsonStr takes the json text; {text!r} "
                                     f"looks like a file name: use CreateFromJsonFile",
                                     file=BUFFER_LABEL)
        return loads(text, file=BUFFER_LABEL)

    from_json = CreateFromJsonStr
    """Pythonic alias of the vendor's `CreateFromJsonStr`."""

    def loadParamsFromFile(self, path: str | os.PathLike) -> Network:
        """Fill every Params from the .raw file, checking magic, size and md5."""
        from .serialize.raw import read_raw

        read_raw(self, path)
        return self

    def loadParamsFromBuffer(self, buffer: bytes | bytearray | memoryview | np.ndarray
                             ) -> Network:
        """Fill every Params from the .raw file's contents held in memory (vendor-style name).

        `buffer` is bytes, bytearray, memoryview, a numpy uint8 array or any other buffer; the
        checks are those of `loadParamsFromFile` (size, magic, md5 against the json's
        params_md5, header), errors naming "<buffer>". No copy is made where the buffer allows
        (C-contiguous, 16-byte aligned): each Params is a numpy view into it, read-only when the
        buffer is read-only (bytes), and it keeps the buffer alive as long as the Params use it.
        Nothing changes in the network unless every check passes."""
        from .serialize.raw import BUFFER_LABEL, read_raw_bytes

        read_raw_bytes(self, buffer, file=BUFFER_LABEL, zero_copy=True)
        return self

    load_params_from_buffer = loadParamsFromBuffer
    """Pythonic alias of `loadParamsFromBuffer`."""

    def dumpJsonToStr(self) -> str:
        """The json text `save` would write, with params_bytes/params_md5 of the raw that
        `dumpParamsToBuffer` returns (the pair loads back with CreateFromJsonStr +
        loadParamsFromBuffer). Validates the network first, as `save` does."""
        from .serialize.json import dump_pair

        return dump_pair(self)[0]

    def dumpParamsToBuffer(self) -> bytes:
        """The .raw file's contents as bytes (what `save` writes beside the json)."""
        from .serialize.json import dump_pair

        return dump_pair(self, json_too=False)[1]

    def save(self, json_path: str | os.PathLike, raw_path: str | os.PathLike | None = None
             ) -> None:
        """Write json + raw (raw next to json with the same stem unless given)."""
        from .serialize.json import save_network

        save_network(self, json_path, raw_path)

    dumpJsonToFile = save

    def __repr__(self) -> str:
        return f"Network({self.name!r}, {len(self.ops)} ops)"


class NetworkView(_ReadAPI):
    """A subset of a network's ops, in the network's execution order, with the same read API."""

    def __init__(self, network: Network, ops: Sequence[Operation]) -> None:
        self.network = network
        self.ops = list(ops)

    def _root(self) -> Network:
        return self.network

    def _label(self) -> str:
        return f"view of network '{self.network.name}'"

    def inputs(self) -> list[Value]:
        return _view_inputs(self.ops)

    def outputs(self) -> list[Value]:
        return _view_outputs(self.ops)

    def positions(self) -> list[int]:
        """Positions of the view's ops in the parent network."""
        where = {op.op_id: i for i, op in enumerate(self.network.ops)}
        return [where[op.op_id] for op in self.ops]

    def __repr__(self) -> str:
        return f"NetworkView({self.network.name!r}, {len(self.ops)} ops)"


def _view_inputs(ops: Sequence[Operation]) -> list[Value]:
    """Values the ops read but do not produce (Input ops' outputs count as inputs)."""
    produced = {v.v_id for op in ops if op.op_type != "Input" for v in op.outputs}
    out: dict[int, Value] = {}
    for op in ops:
        if op.op_type == "Input":
            for v in op.outputs:
                out.setdefault(v.v_id, v)
        for v in op.inputs:
            if not v.is_params and v.v_id not in produced:
                out.setdefault(v.v_id, v)
    return list(out.values())


def _view_outputs(ops: Sequence[Operation]) -> list[Value]:
    """Values the ops produce that the Output op returns or ops outside the set read."""
    ids = {op.op_id for op in ops}
    produced = {v.v_id for op in ops for v in op.outputs}
    out: dict[int, Value] = {}
    for op in ops:
        if op.op_type == "Output":
            for v in op.inputs:
                out.setdefault(v.v_id, v)
    for op in ops:
        for v in op.outputs:
            if any(c.op_id not in ids for c in v.consumers) and v.v_id in produced:
                out.setdefault(v.v_id, v)
    return list(out.values())

