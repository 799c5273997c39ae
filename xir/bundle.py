"""`Bundle`: several compiled networks that share one set of weights, in one file.

The members of a bundle are lowered networks (HardOps with instruction words and weight blocks)
that hold some weight blocks in common: the same graph lowered for several input shapes
(`xrt compile MODEL --bundle-shapes ...`), or graphs that share named weights. Each distinct
weight block is stored once, and every member that uses it holds the very same `Params` object,
so new data given to one (`Params.setData`, a refresh on the device) is every member's.

**One weight layout for all.** A HardOp's weight block (`op.params[0]`) lives at a logical ETM
address (`mtype.addr`) that its instruction words name. Lowered separately, the members lay
their blocks out differently (a block whose content depends on the shape, such as a global
average pool's, shifts every block after it), so the bundle lays out the union of the distinct
blocks once, from `weight_base`, above every logical address any member uses: each member's
HardOps get the shared block at its union address, and `device_info["weights_lowered_at"]`
keeps the address the instructions were lowered with. An NPU runtime moves the instruction
words' weight addresses from the one to the other when it deploys (npu_runtime's
`bundle_weights.py`), so every member's WEIGHT segment is a window of one image: one WEIGHT
chunk holds it for all of them (`userReuseSegment`).

The file (docs/xir-format.md, "Bundles"): a 40-byte header (magic, format version, manifest
length and md5), a json manifest, then 64-byte aligned sections -- each member's network json
and its private parameters (instruction words, host-op constants), and the shared weight
blocks -- each with its size and md5 in the manifest. Everything is checked on load before
any member is handed out: a damaged section is a `RawChecksumError` naming the member.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .errors import (
    FieldTypeError,
    NetworkFileNotFoundError,
    NetworkFormatError,
    NetworkWriteError,
    RawChecksumError,
    RawSizeError,
    RawTruncatedError,
    XirError,
)
from .network import Network
from .values import MemType, Params

__all__ = ["Bundle", "BundleMemberNotFoundError", "BUNDLE_MAGIC", "BUNDLE_FORMAT",
           "LOWERED_AT"]

BUNDLE_MAGIC = b"XIRBNDL\x00"
"""The first 8 bytes of a bundle file."""

BUNDLE_FORMAT = 1
"""The bundle container's format version (header field 2)."""

LOWERED_AT = "weights_lowered_at"
"""The HardOp `device_info` key holding the logical address its instructions name its weight
block at (where the lowering put it); `params[0].mtype.addr` is where the bundle put it."""

BUNDLE_TAG = "bundle"
"""The network tag of a member: {name, member, weight_base, weight_bytes}."""

_HEAD = struct.Struct("<8sIIQ16s")  # magic, version, reserved, manifest bytes, manifest md5
_ALIGN = 64
#: the union's logical base is a multiple of this, above every member's own addresses
_BASE_ALIGN = 1 << 20


class BundleMemberNotFoundError(XirError, LookupError):
    """A bundle holds no member of that name."""


def _align(n: int, unit: int = _ALIGN) -> int:
    return (int(n) + unit - 1) // unit * unit


def _md5(data: Any) -> str:
    try:
        h = hashlib.md5(usedforsecurity=False)
    except TypeError:  # pragma: no cover - Pythons without the keyword
        h = hashlib.md5()
    h.update(data)
    return h.hexdigest()


def _hardops(net: Network) -> list[Any]:
    return [op for op in net.ops if op.op_type == "HardOp"]


def _blob(p: Params) -> np.ndarray:
    """`p`'s data as little-endian bytes (what the file stores)."""
    want = p.dtype.numpy_dtype
    data = np.ascontiguousarray(p.data, dtype=want.newbyteorder("<"))
    return data.reshape(-1).view(np.uint8)


def _logical_end(net: Network) -> int:
    """The first logical ETM address above everything `net`'s HardOps use: weights,
    instructions, feature-map buffers (their placement tags) and scratch slots."""
    end = 0
    for op in _hardops(net):
        for p in op.hard_params():
            if p.mtype.kind == "etm":
                end = max(end, p.mtype.addr + p.storageBytes())
        lowered = op.device_info.get(LOWERED_AT)
        if isinstance(lowered, int) and op.params:
            end = max(end, lowered + op.params[0].storageBytes())
        for s in op.device_info.get("scratch", []) or []:
            if isinstance(s, dict) and isinstance(s.get("addr"), int):
                end = max(end, s["addr"] + int(s.get("bytes", 0)))
        for v in op.inputs + op.outputs:
            if v.mtype.kind == "etm":
                end = max(end, v.mtype.addr + v.storageBytes())
            for t in v.tags.values():
                if isinstance(t, dict) and isinstance(t.get("base"), int) \
                        and isinstance(t.get("bytes"), int):
                    end = max(end, t["base"] + t["bytes"])
    return end


class Bundle:
    """Named member networks sharing their weight blocks (one `Params` per distinct block)."""

    def __init__(self, name: str, members: dict[str, Network], blocks: list[Params],
                 weight_base: int, weight_bytes: int, source_file: str | None = None, *,
                 host_params: list[Params] | None = None) -> None:
        self.name = name
        self._members = dict(members)
        #: the distinct weight blocks, in union order (each member's HardOps hold these objects)
        self.blocks = list(blocks)
        #: constants of host ops held by several members (one object each, stored once)
        self.host_params = list(host_params or [])
        #: logical ETM address of the union of the blocks, and its size in bytes
        self.weight_base = int(weight_base)
        self.weight_bytes = int(weight_bytes)
        self.source_file = source_file

    # --- the vendor-style API ---------------------------------------------------------------
    def names(self) -> list[str]:
        """The members' names, in the order they were bundled."""
        return list(self._members)

    def network(self, name: str) -> Network:
        """Member `name` (the same object on every call: its weight blocks are the bundle's)."""
        net = self._members.get(name) if isinstance(name, str) else None
        if net is None:
            raise BundleMemberNotFoundError(
                f"bundle '{self.name}' has no member {name!r}; its members are "
                f"{', '.join(map(repr, self._members)) or 'none'}",
                file=self.source_file, field="name")
        return net

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Any:
        return iter(self._members.items())

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __repr__(self) -> str:
        return (f"Bundle({self.name!r}, members={self.names()}, {len(self.blocks)} weight "
                f"blocks, {self.weight_bytes} bytes)")

    @property
    def shared_bytes(self) -> int:
        """Bytes of the distinct weight blocks: what the bundle stores once."""
        return sum(p.storageBytes() for p in self.blocks)

    def separate_bytes(self) -> int:
        """Bytes of weight blocks the members would hold as separate networks."""
        return sum(op.params[0].storageBytes() for net in self._members.values()
                   for op in _hardops(net) if op.params)

    # --- building ---------------------------------------------------------------------------
    @classmethod
    def from_networks(cls, networks: Mapping[str, Network] | Iterable[tuple[str, Network]],
                      name: str = "bundle") -> Bundle:
        """Bundle lowered networks (their parameters loaded): the HardOps' weight blocks that
        are equal (same HardOp name, dtype, shape and bytes) become one shared `Params`, laid
        out once in a union above every member's addresses. The networks are changed in place
        and belong to the bundle afterwards."""
        items = list(networks.items()) if isinstance(networks, Mapping) else list(networks)
        if not items:
            raise NetworkFormatError(f"bundle '{name}' needs at least one member network")
        members: dict[str, Network] = {}
        for key, net in items:
            if not isinstance(key, str) or not key:
                raise FieldTypeError(f"bundle '{name}': a member name must be a non-empty "
                                     f"string, not {key!r}", field="name")
            if key in members:
                raise NetworkFormatError(f"bundle '{name}': two members are named {key!r}",
                                         field="name")
            if not isinstance(net, Network):
                raise FieldTypeError(f"bundle '{name}': member {key!r} is a "
                                     f"{type(net).__name__}, not an xir Network", field=key)
            if any(net is other for other in members.values()):
                raise NetworkFormatError(f"bundle '{name}': member {key!r} is the same network "
                                         f"object as another member", field=key)
            members[key] = net
        targets = {op.compile_target for net in members.values() for op in _hardops(net)}
        if len(targets) > 1:
            raise NetworkFormatError(f"bundle '{name}': the members' HardOps were compiled for "
                                     f"{sorted(targets)}; a bundle holds networks lowered for "
                                     f"one target (one bundle per chip)", field="compile_target")
        blocks, base, size = _relayout(name, members)
        host = _share_host_params(members)
        for key, net in members.items():
            net.tags[BUNDLE_TAG] = {"name": name, "member": key, "weight_base": base,
                                    "weight_bytes": size}
        return cls(name, members, blocks, base, size, host_params=host)

    # --- writing ----------------------------------------------------------------------------
    def dumpToBuffer(self) -> bytes:
        """The bundle file's contents."""
        sections: list[bytes | np.ndarray] = []
        at = 0

        def add(data: bytes | np.ndarray) -> dict[str, Any]:
            nonlocal at
            buf = data if isinstance(data, bytes) else data.tobytes()
            entry = {"offset": at, "bytes": len(buf), "md5": _md5(buf)}
            sections.append(buf)
            at = _align(at + len(buf))
            return entry

        shared = {p.v_id for p in self.blocks + self.host_params}
        blocks = []
        for p in self.blocks:
            blocks.append({"v_id": p.v_id, "name": p.name, "addr": p.mtype.addr,
                           **add(_blob(p))})
        for p in self.host_params:
            blocks.append({"v_id": p.v_id, "name": p.name, "addr": None, **add(_blob(p))})
        members = []
        for key, net in self._members.items():
            net.validate()
            obj = _network_dict(net)
            text = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
            entry = {"name": key, "json": add(text), "params": []}
            for p in net.params():
                if p.v_id in shared:
                    continue
                if not p.hasData():
                    raise FieldTypeError(f"bundle '{self.name}': member {key!r}: params "
                                         f"{p.v_id} ('{p.name}') has no data", field="data")
                entry["params"].append({"v_id": p.v_id, **add(_blob(p))})
            members.append(entry)
        manifest = json.dumps({"format": "xir-bundle", "version": BUNDLE_FORMAT,
                               "name": self.name, "weight_base": self.weight_base,
                               "weight_bytes": self.weight_bytes, "blocks": blocks,
                               "members": members, "data_bytes": at},
                              separators=(",", ":")).encode("utf-8")
        head = _HEAD.pack(BUNDLE_MAGIC, BUNDLE_FORMAT, 0, len(manifest),
                          bytes.fromhex(_md5(manifest)))
        start = _align(len(head) + len(manifest))
        out = bytearray(start + at)
        out[:len(head)] = head
        out[len(head):len(head) + len(manifest)] = manifest
        pos = start
        for buf in sections:
            out[pos:pos + len(buf)] = buf
            pos = start + _align(pos - start + len(buf))
        return bytes(out)

    def save(self, path: str | os.PathLike) -> None:
        """Write the bundle file (atomically: a temporary file renamed over `path`)."""
        path = os.fspath(path)
        data = self.dumpToBuffer()
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise NetworkWriteError(f"cannot write the bundle: {exc.strerror or exc}",
                                    file=path) from exc

    dumpToFile = save

    # --- reading ----------------------------------------------------------------------------
    @staticmethod
    def CreateFromFile(path: str | os.PathLike) -> Bundle:
        """Load a bundle file: every section checked (sizes, md5s, each member's json as
        `Network.CreateFromJsonStr` checks it, every parameter accounted for)."""
        path = os.fspath(path)
        try:
            buf = np.fromfile(path, dtype=np.uint8)
        except OSError as exc:
            raise NetworkFileNotFoundError(f"cannot read the bundle: {exc.strerror or exc}",
                                           file=path) from exc
        return _read(buf, path)

    @staticmethod
    def CreateFromBuffer(data: bytes | bytearray | memoryview | np.ndarray) -> Bundle:
        """Load a bundle from its bytes held in memory (any buffer); errors name
        "<buffer>". The weight arrays are views into the buffer where it allows (read-only
        for `bytes`), which they keep alive."""
        from .serialize.raw import BUFFER_LABEL, _byte_array

        if isinstance(data, str):
            raise NetworkFormatError(f"CreateFromBuffer takes the bundle's bytes, not a str "
                                     f"({data[:40]!r}...): for a file use CreateFromFile",
                                     file=BUFFER_LABEL, field="buffer")
        return _read(_byte_array(data, True), BUFFER_LABEL)

    from_file = CreateFromFile
    from_buffer = CreateFromBuffer


def _network_dict(net: Network) -> dict[str, Any]:
    from .serialize.json import network_to_dict

    obj = network_to_dict(net)
    obj["params_bytes"], obj["params_md5"] = 0, ""  # the parameters are the bundle's
    return obj


def _relayout(bundle: str, members: dict[str, Network]) -> tuple[list[Params], int, int]:
    """Share equal weight blocks and lay their union out above every member's addresses."""
    # key -> [(member, op)]: equal blocks of HardOps of the same name
    uses: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    order: list[tuple[str, str]] = []
    for key, net in members.items():
        hard = _hardops(net)
        names = Counter(op.name for op in hard)
        for op in hard:
            if not op.params:
                continue
            p = op.params[0]
            if not p.hasData():
                raise FieldTypeError(f"bundle '{bundle}': member {key!r}: HardOp {op.op_id} "
                                     f"'{op.name}' has no weight data (load its raw first)",
                                     op_id=op.op_id, field="params")
            if p.mtype.kind != "etm":
                raise NetworkFormatError(f"bundle '{bundle}': member {key!r}: the weight "
                                         f"block of HardOp {op.op_id} '{op.name}' has no ETM "
                                         f"address ({p.mtype!r})", op_id=op.op_id,
                                         field="params")
            label = op.name if names[op.name] == 1 else f"{op.name}#{op.op_id}"
            data = _blob(p)
            k = (label, f"{p.dtype.numpy_dtype.str}{list(p.dtype.shape)}:{_md5(data)}")
            if k not in uses:
                uses[k] = []
                order.append(k)
            uses[k].append((key, op))
    everyone = set(members)
    # the blocks every member uses first: each member's WEIGHT segment then starts at the base
    order.sort(key=lambda k: {m for m, _ in uses[k]} != everyone)
    base = _align(max(_logical_end(net) for net in members.values()) + 1, _BASE_ALIGN)
    v0 = max(max((net.next_v_id for net in members.values()), default=0),
             max((p.v_id for net in members.values() for p in net.params()), default=-1) + 1,
             max((v.v_id for net in members.values() for op in net.ops
                  for v in op.inputs + op.outputs), default=-1) + 1)
    blocks: list[Params] = []
    at = 0
    for i, k in enumerate(order):
        first = uses[k][0][1].params[0]
        shared = Params(v0 + i, first.dtype, np.array(first.data, copy=True), first.name,
                        MemType("etm", base + at))
        blocks.append(shared)
        for _member, op in uses[k]:
            lowered = op.device_info.get(LOWERED_AT, op.params[0].mtype.addr)
            op.attrs["device_info"] = {**op.device_info, LOWERED_AT: int(lowered)}
            op.params[0] = shared
        at = _align(at + shared.storageBytes())
    for net in members.values():
        net.reserveIds(v_id=v0 + len(order) - 1)
        net.params_md5, net.params_bytes = "", 0
    return blocks, base, at


def _share_host_params(members: dict[str, Network]) -> list[Params]:
    """The Params that ops other than HardOps read (constants of ops left to the host), shared
    where members hold one of the same v_id, name, type and bytes: one object for all of them,
    so new data through one member (a refit of a host layer) is every member's."""
    uses: dict[tuple[int, str, str, str], list[tuple[str, Any, int]]] = {}
    for key, net in members.items():
        for op in net.ops:
            if op.op_type == "HardOp":
                continue
            for i, v in enumerate(op.inputs):
                if v.is_params and v.hasData():
                    k = (v.v_id, v.name, json.dumps(v.dtype.encode(), default=str),
                         _md5(_blob(v)))
                    uses.setdefault(k, []).append((key, op, i))
    shared = []
    for where in uses.values():
        if len({m for m, _, _ in where}) < 2:
            continue
        canon = where[0][1].inputs[where[0][2]]
        for _m, op, i in where:
            op.inputs[i] = canon
        shared.append(canon)
    for net in members.values():
        net.relink()
    return shared


def _fail(cls: type[XirError], file: str, message: str, field: str | None = None) -> XirError:
    return cls(message, file=file, field=field)


def _read(buf: np.ndarray, file: str) -> Bundle:
    size = int(buf.size)
    if size < _HEAD.size:
        raise _fail(RawTruncatedError, file, f"a bundle file has a {_HEAD.size}-byte header; "
                                             f"this one has {size} bytes")
    magic, version, _, mlen, mmd5 = _HEAD.unpack_from(buf, 0)
    if magic != BUNDLE_MAGIC:
        raise _fail(NetworkFormatError, file, f"starts with {magic!r}, not the bundle magic "
                                              f"{BUNDLE_MAGIC!r}: this is not an xir bundle")
    if version != BUNDLE_FORMAT:
        raise _fail(NetworkFormatError, file, f"bundle format {version}; this reader knows "
                                              f"format {BUNDLE_FORMAT}", "version")
    if _HEAD.size + mlen > size:
        raise _fail(RawTruncatedError, file, f"the manifest needs bytes {_HEAD.size}.."
                                             f"{_HEAD.size + mlen}, the file has {size}")
    text = buf[_HEAD.size:_HEAD.size + mlen].tobytes()
    if _md5(text) != mmd5.hex():
        raise _fail(RawChecksumError, file, "the bundle manifest's md5 does not match its "
                                            "header: the file is corrupt", "manifest")
    try:
        man = json.loads(text)
        start = _align(_HEAD.size + mlen)
        want = start + int(man["data_bytes"])
        name = str(man["name"])
        base, wbytes = int(man["weight_base"]), int(man["weight_bytes"])
        blocks_m, members_m = list(man["blocks"]), list(man["members"])
    except (ValueError, KeyError, TypeError) as exc:
        raise _fail(NetworkFormatError, file, f"the bundle manifest is malformed: {exc!r}",
                    "manifest") from exc
    if size != want:
        cls = RawTruncatedError if size < want else RawSizeError
        raise _fail(cls, file, f"the bundle has {size} bytes, its manifest says {want}")

    def section(entry: Any, who: str, what: str) -> np.ndarray:
        try:
            off, n, digest = int(entry["offset"]), int(entry["bytes"]), str(entry["md5"])
        except (KeyError, TypeError, ValueError) as exc:
            raise _fail(NetworkFormatError, file, f"{who}: the {what} section entry is "
                                                  f"malformed", what) from exc
        if off < 0 or n < 0 or start + off + n > size:
            raise _fail(RawTruncatedError, file, f"{who}: the {what} section runs past the "
                                                 f"end of the file", what)
        data = buf[start + off:start + off + n]
        if _md5(data) != digest:
            raise _fail(RawChecksumError, file, f"{who}: the md5 of its {what} does not match "
                                                f"the manifest: the bundle is corrupt", what)
        return data

    shared: dict[int, tuple[np.ndarray, dict[str, Any]]] = {}
    for b in blocks_m:
        v = b.get("v_id") if isinstance(b, dict) else None
        if not isinstance(v, int) or isinstance(v, bool):
            raise _fail(NetworkFormatError, file, f"bundle '{name}': malformed weight block "
                                                  f"entry {b!r}", "blocks")
        shared[v] = (section(b, f"bundle '{name}': weight block {b.get('name', '?')!r}",
                             "data"), b)
    objects: dict[int, Params] = {}
    members: dict[str, Network] = {}
    for m in members_m:
        key = str(m.get("name")) if isinstance(m, dict) else "?"
        who = f"member {key!r}"
        text = section(m.get("json") if isinstance(m, dict) else None, who, "network json")
        try:
            net = Network.CreateFromJsonStr(text.tobytes())
        except XirError as err:  # name the member, not "<buffer>"
            raise type(err)(f"{who}: {err.message}", file=file, op_id=err.op_id,
                            field=err.field) from err
        private = {}
        for e in m.get("params", []) if isinstance(m, dict) else []:
            v = e.get("v_id") if isinstance(e, dict) else None
            if not isinstance(v, int) or isinstance(v, bool):
                raise _fail(NetworkFormatError, file, f"{who}: malformed params entry {e!r}",
                            "params")
            private[v] = section(e, who, f"params v_id {v}")
        _fill(net, private, shared, objects, file, who)
        net.source_file = f"{file}:{key}"
        members[key] = net
    unused = sorted(set(shared) - set(objects))
    if unused:
        raise _fail(NetworkFormatError, file, f"shared params v_id {unused} are used by no "
                                              f"member", "blocks")
    blocks = [objects[v] for v, (_, e) in shared.items() if e.get("addr") is not None]
    host = [objects[v] for v, (_, e) in shared.items() if e.get("addr") is None]
    return Bundle(name, members, blocks, base, wbytes, source_file=file, host_params=host)


def _fill(net: Network, private: dict[int, np.ndarray],
          shared: dict[int, tuple[np.ndarray, dict[str, Any]]], objects: dict[int, Params],
          file: str, who: str) -> None:
    """Give `net`'s Params their data: private ones from `private`, weight blocks from
    `shared` as the one Params object every member holds; all or nothing."""
    todo: list[tuple[Params, np.ndarray]] = []
    seen: set[int] = set()
    for p in net.params():
        seen.add(p.v_id)
        if p.v_id in shared:
            continue
        raw = private.get(p.v_id)
        if raw is None:
            raise _fail(NetworkFormatError, file, f"{who}: no data for params v_id {p.v_id} "
                                                  f"('{p.name}')", "params")
        todo.append((p, _typed(p, raw, file, who)))
    extra = sorted(set(private) - seen)
    if extra:
        raise _fail(NetworkFormatError, file, f"{who}: data for params v_id {extra}, which "
                                              f"are no Params of the network", "params")
    swaps: list[tuple[Any, str, int, Params]] = []
    pending: dict[int, Params] = {}
    for op in net.ops:
        if op.op_type == "HardOp":
            slots = [("params", 0, op.params[0])] if op.params else []
        else:
            slots = [("inputs", i, v) for i, v in enumerate(op.inputs) if v.is_params]
        for where, i, p in slots:
            if p.v_id not in shared:
                continue
            raw, entry = shared[p.v_id]
            addr = entry.get("addr")
            block = where == "params"
            if block != (isinstance(addr, int) and not isinstance(addr, bool)):
                here = "a weight block" if block else "an op input"
                raise _fail(NetworkFormatError, file, f"{who}: shared params v_id {p.v_id} is "
                                                      f"{here} here, {'not ' if block else ''}a "
                                                      f"weight block in the manifest", "blocks")
            canon = objects.get(p.v_id) or pending.get(p.v_id)
            if canon is None:
                if block and addr != p.mtype.addr:
                    raise _fail(NetworkFormatError, file, f"{who}: weight block v_id {p.v_id} "
                                                          f"is at {p.mtype.addr}, the manifest "
                                                          f"says {addr}", "blocks")
                canon = Params(p.v_id, p.dtype, None, p.name, p.mtype, p.tags)
                todo.append((canon, _typed(p, raw, file, who)))
                pending[p.v_id] = canon
            elif canon.dtype.encode() != p.dtype.encode() or canon.mtype.addr != p.mtype.addr:
                raise _fail(NetworkFormatError, file, f"{who}: shared params v_id {p.v_id} "
                                                      f"differs in type or address from "
                                                      f"another member's", "blocks")
            swaps.append((op, where, i, canon))
    for p, arr in todo:
        p.setData(arr)
    for op, where, i, canon in swaps:
        objects[canon.v_id] = canon
        if where == "params":
            op.params[i] = canon
        else:
            op.inputs[i] = canon
    net.relink()


def _typed(p: Params, raw: np.ndarray, file: str, who: str) -> np.ndarray:
    need = p.storageBytes()
    if raw.size != need:
        raise _fail(RawSizeError, file, f"{who}: params v_id {p.v_id} ('{p.name}') has "
                                        f"{raw.size} bytes, its type needs {need}", "params")
    dt = p.dtype.numpy_dtype
    arr = raw.view(dt.newbyteorder("<")).reshape(p.dtype.shape)
    return arr.astype(dt) if arr.dtype != dt else arr
