"""`lower`: an adapted quantized network -> a target's generated stage (`*_ZG` / `*_BY.json/raw`).

Steps (the contract is docs/zg330-lowering.md):

0. **commute** element-wise ops off the rank-5 steps of data-movement chains (`commute`: SVTR's
   attention scaling), so they and the chain both have chip forms;
1. **select** the ops the NPU runs: every op with a rule in `layers.RULES` whose integer form
   the device reproduces exactly, plus the data-movement ops (`layers.ALIAS_OPS`) next to them;
2. **fuse** a compute op with the lookup-table activation that is its only reader (Conv -> SiLU
   of yolov5s: one HardOp, two layers, the intermediate map in an internal FTMP slot);
3. **place** feature maps in *buffers*: an NHWC block of `h x w x pitch` elements. Concat inputs
   are written straight into their channel slice of the concat's buffer, Split / Reshape /
   AlignAxis / PruneAxis outputs are channel windows of their input's buffer (aliases, no
   instruction); where that is impossible the data-movement HardOp gets a COPY layer instead.
   Values crossing to or from host ops are dense (`pitch == c`, offset 0);
4. **lay out** logical ETM: 64 reserved bytes, the weight blobs of every HardOp, the feature-map
   buffers (one slot per buffer), the instruction streams; all 64-byte aligned;
5. **emit** each HardOp's layers with `npu_model.asm`, NOP-padded to 64 bytes (no END: the
   runtime may run consecutive HardOps as one stream).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npu_model import asm
from npu_model.isa import ISA_VERSION
from xir.errors import HardwareLimitError
from xir.network import Network
from xir.ops.base import OP_REGISTRY
from xir.quant.lut import LUT_OPS
from xir.types import UINT8, UINT64, TensorType
from xir.values import MemType, Params, Value

from .common import (
    ETM_ALIGN,
    ETM_RESERVED,
    TargetConfig,
    align,
    clone_network,
    items,
    map3,
    npu_dtype,
)
from .commute import commute
from .layers import ALIAS_OPS, EDGE_REASON, RULES, NotLowerable, OpLowering, alias_ok
from .moves import MOVE_RULES, find_chain, lower_chain
from .pointwise import RULES as POINTWISE_RULES
from .pointwise import TABLE_OPS
from .reduce import RULES as REDUCE_RULES

#: every compute op's rule (the data-movement ops are `MOVE_RULES`)
ALL_RULES = {**RULES, **POINTWISE_RULES, **REDUCE_RULES}
#: ops that are one LUT layer, fused after a compute op whose only reader they are
_TABLES = frozenset(LUT_OPS) | TABLE_OPS

log = logging.getLogger(__name__)


@dataclass
class Buffer:
    """One feature-map buffer in ETM: NHWC, `pitch` channels per pixel; `n` batch items of
    `h` rows each, one after the other (``n * h`` rows)."""

    bid: int
    h: int
    w: int
    dtype: str
    n: int = 1
    members: dict[int, tuple[int, int]] = field(default_factory=dict)  # v_id -> (c_off, c)
    #: members that see the same pixels in another geometry (n, h, w): a Reshape that keeps
    #: the channels ((N, 1, 1, C) -> (N, C), (N, H, W, C) -> (N, H * W, C)); rows are dense
    views: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    fixed: int | None = None  # pitch forced by a dense member (crosses to the host)
    host: bool = False  # written by the host (an INPUT of the NPU part)
    scratch: bool = False  # internal to one HardOp
    owner: int = -1
    pitch: int = 0
    addr: int = 0

    @property
    def esize(self) -> int:
        return 2 if self.dtype == "int16" else 1

    @property
    def nbytes(self) -> int:
        return self.n * self.h * self.w * self.pitch * self.esize

    @property
    def item_bytes(self) -> int:
        return self.h * self.w * self.pitch * self.esize

    def geom(self, v_id: int) -> tuple[int, int, int]:
        """(items, rows per item, w) of member `v_id`."""
        return self.views.get(v_id, (self.n, self.h, self.w))

    def fits(self, c_off: int, c: int, dense: bool) -> bool:
        if dense:
            if c_off != 0 or (self.fixed is not None and self.fixed != c):
                return False
            return all(o + n <= c for o, n in self.members.values())
        return self.fixed is None or c_off + c <= self.fixed


@dataclass
class _HardSpec:
    ops: list[Any]  # origin xir ops (in order)
    lows: list[OpLowering]
    inputs: list[Value]
    outputs: list[Value]
    copies: list[tuple[Value, Value]] = field(default_factory=list)  # (src value, dst value)
    scratch: list[int] = field(default_factory=list)  # buffer ids
    consts: list[np.ndarray] = field(default_factory=list)
    const_off: list[int] = field(default_factory=list)
    blob: np.ndarray | None = None
    blob_addr: int = 0
    words: np.ndarray | None = None
    instr_addr: int = 0
    layer_end: int = 0
    kinds: list[str] = field(default_factory=list)  # one per emitted layer

    @property
    def op_id(self) -> int:
        return self.ops[0].op_id


class _Resolver:
    """Addresses for an `OpLowering.make`: the maps of batch item `item` (None: every item's
    rows at once) and the HardOp's constants."""

    def __init__(self, lowering: _Lowering, spec: _HardSpec, base: int,
                 item: int | None = None) -> None:
        self.L, self.spec, self.base, self.item = lowering, spec, base, item

    def fmap(self, v: Value) -> asm.FMap:
        return self.L.fmap(v, self.item)

    def item_map(self, v: Value, h: int, w: int) -> asm.FMap:
        """The current item's pixels of `v` seen as an ``h x w`` map (every item: ``n * h``
        rows): a buffer's pixels lie in order, so an item of ``h * w`` pixels may be read or
        written in any geometry of that many pixels (a reduction writing a rank-2/3 output)."""
        f = self.L.fmap(v, None)
        esz = 2 if f.dtype == "int16" else 1
        if self.item is None:
            n = (f.h * f.w) // (h * w)
            return asm.FMap(f.addr, n * h, w, f.c, f.pitch, f.c_off, f.dtype)
        at = f.addr + self.item * h * w * f.pitch * esz
        return asm.FMap(at, h, w, f.c, f.pitch, f.c_off, f.dtype)

    def const(self, i: int) -> int:
        return self.spec.blob_addr + self.spec.const_off[self.base + i]


class _Lowering:
    def __init__(self, net: Network, options: dict, target: TargetConfig) -> None:
        self.net = net
        self.options = options
        self.target = target
        self.cfg = target.npu
        self.buf_of: dict[int, Buffer] = {}
        self.buffers: list[Buffer] = []
        self.npu_ops: dict[int, OpLowering | None] = {}  # op_id -> lowering (None: alias op)
        self.why_host: dict[int, str] = {}
        #: first op of a Reshape/Transpose chain (`moves.find_chain`) -> its ops
        self.chains: dict[int, list[Any]] = {}
        self.chained: set[int] = set()  # the chains' other ops (inside the first's HardOp)

    # --- 1. selection -------------------------------------------------------------------
    def select(self) -> None:
        moves: dict[int, OpLowering | None] = {}  # data movement: on the NPU next to NPU ops
        chains: dict[int, list[Any]] = {}
        for op in self.net.ops:
            chain = find_chain(op)
            if chain is not None:
                try:
                    moves[op.op_id] = lower_chain(chain, self.cfg)
                    chains[op.op_id] = chain
                except NotLowerable as exc:
                    for c in chain:
                        self.why_host[c.op_id] = str(exc)
        for op in self.net.ops:
            if not op.is_quantized() or op.op_id in moves:
                continue
            if op.op_type in ALIAS_OPS and alias_ok(op):
                moves[op.op_id] = None
                continue
            rule = ALL_RULES.get(op.op_type)
            move = MOVE_RULES.get(op.op_type)
            if rule is None and move is None:
                continue
            try:
                if rule is not None:
                    self.npu_ops[op.op_id] = rule(op, self.cfg)
                else:
                    moves[op.op_id] = move(op, self.cfg)
            except NotLowerable as exc:
                self.why_host[op.op_id] = str(exc)
        changed = True
        while changed:
            changed = False
            for op in self.net.ops:
                if op.op_id in self.npu_ops or op.op_id not in moves:
                    continue
                last = chains.get(op.op_id, [op])[-1]
                near = any(v.producer is not None and v.producer.op_id in self.npu_ops
                           for v in op.feature_inputs()) or \
                    any(c.op_id in self.npu_ops for v in last.outputs for c in v.consumers)
                if near:
                    self.npu_ops[op.op_id] = moves[op.op_id]
                    if op.op_id in chains:
                        self.chains[op.op_id] = chains[op.op_id]
                        for c in chains[op.op_id][1:]:
                            self.npu_ops[c.op_id] = None
                            self.chained.add(c.op_id)
                    changed = True

    def host_reason(self, op: Any) -> str:
        """Why `op` stays on the host (the network's ``tags[target]["host_ops"]``)."""
        if op.op_id in self.why_host:
            return self.why_host[op.op_id]
        if op.op_type in ("Cast", "AlignAxis", "PruneAxis"):
            return EDGE_REASON
        if not op.is_quantized():
            return ("float op: kept float by the quantizer (no integer form, or probabilities "
                    "leaving the network), computes in float32 on the host")
        if op.op_type in ALIAS_OPS or op.op_type in MOVE_RULES:
            return "moves codes between host ops (on the NPU only next to NPU ops)"
        return f"no {self.target.name} lowering for {op.op_type}"

    def on_npu(self, op) -> bool:
        return op is not None and op.op_id in self.npu_ops

    def crosses(self, v: Value) -> bool:
        """Read by a host op (or the Output op)."""
        return any(not self.on_npu(c) for c in v.consumers)

    # --- 2./3. HardOps and buffers ------------------------------------------------------
    def _new_buffer(self, v: Value, dense: bool, host: bool = False) -> Buffer:
        h, w, c = map3(v.shape)
        b = Buffer(len(self.buffers), h, w, npu_dtype(v), n=items(v.shape), host=host)
        b.members[v.v_id] = (0, c)
        if dense:
            b.fixed = c
        self.buffers.append(b)
        self.buf_of[v.v_id] = b
        return b

    def _join(self, v: Value, b: Buffer, c_off: int) -> bool:
        h, w, c = map3(v.shape)
        n = items(v.shape)
        dense = self.crosses(v)
        if n * h * w != b.n * b.h * b.w or not b.fits(c_off, c, dense):
            return False
        if dense:
            b.fixed = c
        b.members[v.v_id] = (c_off, c)
        if (n, h, w) != (b.n, b.h, b.w):
            b.views[v.v_id] = (n, h, w)
        self.buf_of[v.v_id] = b
        return True

    def _ensure_input(self, v: Value) -> None:
        if v.v_id not in self.buf_of:  # produced on the host
            self._new_buffer(v, dense=True, host=True)

    def plan(self) -> list[Any]:
        """The lowered op sequence: xir ops (host) and _HardSpec (NPU), in execution order."""
        seq: list[Any] = []
        fused_into: dict[int, _HardSpec] = {}
        for op in self.net.ops:
            if op.op_id not in self.npu_ops:
                seq.append(op)
                continue
            if op.op_id in fused_into or op.op_id in self.chained:
                continue
            for v in op.feature_inputs():
                self._ensure_input(v)
            low = self.npu_ops[op.op_id]
            if low is not None:
                # a dense input needs no dense scratch copy of it (`OpLowering.dense_input`)
                in_place = low.dense_input and self._make_dense(op.feature_inputs()[0])
                chain = self.chains.get(op.op_id, [op])
                spec = _HardSpec(list(chain), [low], list(op.feature_inputs()),
                                 list(chain[-1].outputs))
                for v in [] if in_place else low.scratch:  # fresh ids, their own buffers
                    v.v_id = self.net.newVId()
                    self._scratch(spec, v, dense=low.dense_scratch)
                y = op.outputs[0]
                nxt = None if op.op_id in self.chains else self._fusable_lut(op)
                if nxt is not None:
                    self._scratch(spec, y)
                    spec.ops.append(nxt)
                    spec.lows.append(self.npu_ops[nxt.op_id])
                    spec.outputs = list(nxt.outputs)
                    fused_into[nxt.op_id] = spec
                    y = nxt.outputs[0]
                for v in spec.outputs:
                    self._new_buffer(v, dense=self.crosses(v))
                seq.append(spec)
                continue
            seq.append(self._plan_alias(op))
        return self._join_aliases(seq)

    def _join_aliases(self, seq: list[Any]) -> list[Any]:
        """Each pure alias (a Reshape, Squeeze, Split... placed as a view of its input's
        buffer: no layer, no COPY) whose every input one computing HardOp writes joins that
        HardOp: its outputs become the HardOp's (the same bytes, already written), so it costs
        no HardOp of its own. A 1-D Conv's (N, L, C) <-> (N, 1, L, C) Reshapes ride with the
        COPY PERMUTE or CONV before them, and the 1-D network has its 2-D twin's HardOps."""
        made: dict[int, _HardSpec] = {}  # v_id -> the HardOp that outputs it
        out: list[Any] = []
        host = self.net.outputs()
        for item in seq:
            if not isinstance(item, _HardSpec):
                out.append(item)
                continue
            srcs = {id(made.get(v.v_id)): made.get(v.v_id) for v in item.inputs}
            if not item.lows and not item.copies and len(srcs) == 1 and \
                    (spec := next(iter(srcs.values()))) is not None and spec.lows:
                before = (list(spec.ops), list(spec.outputs), self._items(spec))
                spec.ops += item.ops
                inside = {op.op_id for op in spec.ops}
                spec.outputs = [v for v in spec.outputs if v in host or any(
                    c.op_id not in inside for c in v.consumers)] + \
                    [v for v in item.outputs if v not in spec.outputs]
                if self._items(spec) == before[2]:  # the HardOp's layers run as before
                    for v in item.outputs:
                        made[v.v_id] = spec
                    continue
                spec.ops, spec.outputs = before[0], before[1]
            for v in item.outputs:
                made[v.v_id] = item
            out.append(item)
        return out

    def _make_dense(self, v: Value) -> bool:
        """Fix `v`'s buffer to pitch = channels when `v` is its only member at offset 0 (a
        later member that needs another pitch gets its own buffer, as `fits` decides);
        whether `v` is dense now."""
        b = self.buf_of[v.v_id]
        if list(b.members) == [v.v_id] and b.fits(0, map3(v.shape)[2], True):
            b.fixed = map3(v.shape)[2]
            return True
        return False

    def _scratch(self, spec: _HardSpec, v: Value, dense: bool = False) -> None:
        """`v` lives only inside `spec`'s HardOp: an FTMP slot of its own."""
        sb = self._new_buffer(v, dense=dense)
        sb.scratch = True
        spec.scratch.append(sb.bid)

    def _fusable_lut(self, op) -> Any:
        if len(op.outputs) != 1 or op.op_type in _TABLES:
            return None
        y = op.outputs[0]
        if len(y.consumers) != 1:
            return None
        c = y.consumers[0]
        if c.op_type in _TABLES and self.npu_ops.get(c.op_id) is not None:
            return c
        return None

    def _plan_alias(self, op) -> _HardSpec:
        spec = _HardSpec([op], [], list(op.feature_inputs()), list(op.outputs))
        t = op.op_type
        if t == "Concat":
            y = op.outputs[0]
            out = self._new_buffer(y, dense=self.crosses(y))
            off = 0
            seen: set[int] = set()
            for x in op.inputs:
                c = map3(x.shape)[2]
                b = self.buf_of[x.v_id]
                movable = (len(b.members) == 1 and not b.host and not b.scratch
                           and x.v_id not in seen and not self.crosses(x)
                           and x.producer is not None and self.npu_ops.get(x.producer.op_id)
                           is not None)
                if movable and out.fits(off, c, False):
                    self.buffers[b.bid] = None  # type: ignore[call-overload]
                    out.members[x.v_id] = (off, c)
                    self.buf_of[x.v_id] = out
                else:
                    spec.copies.append((x, _Slice(y, off, c)))
                seen.add(x.v_id)
                off += c
            return spec
        x = op.inputs[0]
        xb = self.buf_of[x.v_id]
        x_off, _ = xb.members[x.v_id]
        if t == "Split":
            off = 0
            for y in op.outputs:
                c = map3(y.shape)[2]
                if not self._join(y, xb, x_off + off):
                    self._new_buffer(y, dense=self.crosses(y))
                    spec.copies.append((_Slice(x, off, c), y))
                off += c
            return spec
        y = op.outputs[0]
        if not self._join(y, xb, x_off):
            self._new_buffer(y, dense=self.crosses(y))
            c = min(map3(x.shape)[2], map3(y.shape)[2])
            # a Reshape's source read in the target's geometry (the same pixels in order)
            spec.copies.append((_Slice(x, 0, c, like=y), _Slice(y, 0, c)))
        return spec

    # --- 4. layout ------------------------------------------------------------------------
    def layout(self, seq: list[Any]) -> dict[str, list[int]]:
        specs = [s for s in seq if isinstance(s, _HardSpec)]
        addr = ETM_RESERVED
        w_lo = addr
        for s in specs:
            parts, offs, off = [], [], 0
            for low in s.lows:
                for c in low.consts:
                    offs.append(off)
                    parts.append((off, c))
                    off = align(off + c.nbytes, ETM_ALIGN)
            s.const_off = offs
            if parts:
                blob = np.zeros(off, np.uint8)
                for o, c in parts:
                    blob[o:o + c.nbytes] = c
                s.blob = blob
                s.blob_addr = addr
                addr = align(addr + blob.nbytes, ETM_ALIGN)
        w_hi = addr
        f_lo = addr
        visible = {v.v_id for s in specs for v in s.inputs + s.outputs}
        for b in self.buffers:
            if b is None:
                continue
            b.pitch = b.fixed if b.fixed is not None else \
                align(max(o + c for o, c in b.members.values()), self.cfg.channel_unit(b.dtype))
            # the owner is a value the runtime sees (a HardOp's input or output) where one is:
            # a value inside a HardOp (an alias joined to it, `_join_aliases`) is not
            seen = [v for v in b.members if v in visible] or list(b.members)
            b.owner = min(seen, key=lambda v: (b.members[v][0], -b.members[v][1], v))
            b.addr = addr
            addr = align(addr + b.nbytes, ETM_ALIGN)
        f_hi = addr
        # instructions: sizes first (independent of the address values)
        i_lo = addr
        layers_total = 0
        for s in specs:
            s.words = self._emit(s, dry=True)
            if s.words is not None:
                s.instr_addr = addr
                addr = align(addr + s.words.nbytes, ETM_ALIGN)
        i_hi = addr
        for s in specs:
            s.words = self._emit(s, dry=False)
            n = self._n_layers(s)
            layers_total += n
            s.layer_end = layers_total
        return {"weight": [w_lo, w_hi], "ftmp": [f_lo, f_hi], "instr": [i_lo, i_hi],
                "layers": layers_total}

    def fmap(self, v: Any, item: int | None = None) -> asm.FMap:
        """The map of `v`: batch item `item` of its buffer (the only one when the buffer holds
        one item), or with `item` None all the buffer's items as ``n * h`` rows."""
        if isinstance(v, _Slice):
            f = self.fmap(v.value, item)
            if v.like is not None:
                g = self.fmap(v.like, item)
                f = asm.FMap(f.addr, g.h, g.w, f.c, f.pitch, f.c_off, f.dtype)
            return asm.FMap(f.addr, f.h, f.w, v.c, f.pitch, f.c_off + v.off, f.dtype)
        b = self.buf_of[v.v_id]
        off, c = b.members[v.v_id]
        n, h, w = b.geom(v.v_id)
        if item is None:
            return asm.FMap(b.addr, n * h, w, c, b.pitch, off, b.dtype)
        at = b.addr + (item if n > 1 else 0) * h * w * b.pitch * b.esize
        return asm.FMap(at, h, w, c, b.pitch, off, b.dtype)

    def _items(self, s: _HardSpec) -> int:
        """The batch items `s` computes: the most any of its maps holds."""
        vals = [v for v in s.inputs + s.outputs if v.v_id in self.buf_of]
        return max([self.buf_of[v.v_id].geom(v.v_id)[0] for v in vals] +
                   [self.buffers[b].n for b in s.scratch] + [1])

    def _layers(self, s: _HardSpec) -> tuple[list[asm.Layer], list[str]]:
        """The layers of `s` and their kinds: each op's layers once over all batch items
        (`OpLowering.fold`) or once per item; COPY layers always over all items."""
        out: list[asm.Layer] = []
        kinds: list[str] = []
        base = 0
        n = self._items(s)
        for low in s.lows:
            for item in [None] if n == 1 or low.fold else range(n):
                made = low.make(_Resolver(self, s, base, item))
                out += made
                kinds += [_kind(L) for L in made]
            base += len(low.consts)
        for src, dst in s.copies:
            out.append(asm.Copy(self.fmap(src), self.fmap(dst), tag=s.op_id))
            kinds.append("copy")
        return out, kinds

    def _n_layers(self, s: _HardSpec) -> int:
        return len(s.kinds)

    def _emit(self, s: _HardSpec, dry: bool) -> np.ndarray | None:
        if not s.lows and not s.copies:
            return None
        layers, s.kinds = self._layers(s)
        for L in layers:
            L.tag = s.op_id
        return asm.emit_program(layers, self.cfg, end=False)

    # --- 5. network -------------------------------------------------------------------------
    def build(self, seq: list[Any], etm: dict) -> Network:
        net, tag = self.net, self.target.tag
        out = Network(net.name, framework_kind=net.framework_kind,
                      framework_version=net.framework_version, icraft_version=net.icraft_version,
                      icraft_xir_version=net.icraft_xir_version, tags=dict(net.tags))
        out.reserveIdsOf(net)
        for b in self.buffers:
            if b is None:
                continue
            for vid, (off, c) in b.members.items():
                v = self._value(vid)
                if v is None:
                    continue
                n, h, w = b.geom(vid)
                v.mtype = MemType("etm", b.addr + off * b.esize)
                v.tags = {**v.tags, tag: {"buffer": b.owner, "base": b.addr, "bytes": b.nbytes,
                                          "h": n * h, "w": w, "n": n,
                                          "pitch": b.pitch, "c_off": off,
                                          "c": c, "dtype": b.dtype, "real": vid == b.owner,
                                          "host": b.host}}
        n_hard = n_fused = 0
        host: dict[str, str] = {}
        for item in seq:
            if not isinstance(item, _HardSpec):
                out.ops.append(item)
                if item.op_type not in ("Input", "Output"):
                    host[str(item.op_id)] = self.host_reason(item)
                continue
            n_hard += 1
            n_fused += len(item.ops)
            out.ops.append(self._hardop(item, out))
        out.relink()
        out.tags[tag] = {**out.tags.get(tag, {}), "etm": {k: etm[k] for k in
                                                           ("weight", "ftmp", "instr")},
                         "layers": etm["layers"], "hardops": n_hard, "isa_version": ISA_VERSION,
                         "channel_unit": {"int8": self.cfg.channel_unit("int8"),
                                          "int16": self.cfg.channel_unit("int16")},
                         "npu_ops": n_fused + sum(1 for v in self.npu_ops.values() if v is None),
                         "host_ops": host}
        out.validate()
        return out

    def _value(self, vid: int) -> Value | None:
        try:
            return self.net.getValueById(vid)
        except Exception:
            return None

    def _hardop(self, s: _HardSpec, net: Network) -> Any:
        HardOp = OP_REGISTRY["HardOp"]
        instr = None
        if s.words is not None:
            instr = Params(net.newVId(), TensorType(UINT64, (s.words.size,)), s.words,
                           f"{s.ops[0].name}.instr", MemType("etm", s.instr_addr))
        params = []
        if s.blob is not None:
            params.append(Params(net.newVId(), TensorType(UINT8, (s.blob.size,)), s.blob,
                                 f"{s.ops[0].name}.weights", MemType("etm", s.blob_addr)))
        scratch = []
        for bid in s.scratch:
            b = self.buffers[bid]
            scratch.append({"v_id": b.owner, "addr": b.addr, "bytes": b.nbytes})
        kinds = list(s.kinds)
        info = {"target": self.target.name, "isa_version": ISA_VERSION, "layers": len(kinds),
                "kinds": kinds, "alias": not kinds, "scratch": scratch,
                "macs": int(sum(low.macs for low in s.lows)),
                "instr_bytes": 0 if s.words is None else int(s.words.nbytes),
                "weight_bytes": 0 if s.blob is None else int(s.blob.nbytes)}
        return HardOp(list(s.inputs), list(s.outputs), instr=instr, params=params,
                      op_id=s.op_id, name=s.ops[0].name or f"hardop{s.op_id}",
                      compile_target=self.target.compile_target,
                      origin_ops_id=[op.op_id for op in s.ops],
                      device_info=info, layer_count=s.layer_end, sub_hard_ops=[])


def _kind(layer: asm.Layer) -> str:
    """The name of a layer's kind in ``device_info["kinds"]``."""
    if isinstance(layer, asm.Pool):
        return "maxpool" if layer.mode == "max" else "avgpool"
    return {asm.Softmax: "norm", asm.LayerNorm: "norm"}.get(type(layer),
                                                           type(layer).__name__.lower())


@dataclass
class _Slice:
    """A channel window of a value's map (the source or target of a COPY layer)."""

    value: Value
    off: int
    c: int
    like: Value | None = None  # read in this value's geometry (a Reshape's COPY)


def _check_fits(L: _Lowering, seq: list[Any], etm: dict, target: TargetConfig) -> None:
    """Refuse, at compile time, a network the device's ETM cannot hold under any deployment:
    weights and instructions stay resident, and at least the maps one HardOp reads and writes
    must be live at once (ETM reuse can shrink FTMP to about that, never below)."""
    weights = etm["weight"][1] - etm["weight"][0]
    instr = etm["instr"][1] - etm["instr"][0]
    live = 0
    for s in seq:
        if isinstance(s, _HardSpec):
            bufs = {L.buf_of[v.v_id].bid: L.buf_of[v.v_id].nbytes for v in s.inputs + s.outputs}
            bufs.update({b: L.buffers[b].nbytes for b in s.scratch})
            live = max(live, sum(bufs.values()))
    need = weights + instr + live
    cap = L.cfg.etm_size
    if need > cap:
        mib = 1 << 20
        raise HardwareLimitError(
            f"{target.name}: the network needs at least {need / mib:.1f} MiB of ETM (weights "
            f"{weights / mib:.1f} MiB, instructions {instr / mib:.1f} MiB, the largest HardOp's "
            f"feature maps {live / mib:.1f} MiB), the device has {cap / mib:.1f} MiB: reduce "
            f"the input size, or compile the network in parts")


def lower(adapted: Network, target: TargetConfig, options: dict | None = None) -> Network:
    """`target`'s generated stage of an adapted network (a new network; the input is kept)."""
    net, _ = clone_network(adapted)
    commute(net)
    L = _Lowering(net, dict(options or {}), target)
    L.select()
    seq = L.plan()
    etm = L.layout(seq)
    _check_fits(L, seq, etm, target)
    out = L.build(seq, etm)
    n_hard = sum(1 for op in out.ops if op.op_type == "HardOp")
    log.info("lowered %s for %s: %d HardOps (%d layers), %d host ops; ETM weights %d B, "
             "feature maps %d B, instructions %d B", net.name, target.name, n_hard, etm["layers"],
             len(out.ops) - n_hard, etm["weight"][1] - etm["weight"][0],
             etm["ftmp"][1] - etm["ftmp"][0], etm["instr"][1] - etm["instr"][0])
    return out
