"""The NPU backend state of a snapshot, checked field by field before `snapshot.restore` uses it.

A snapshot's sha256 only proves the file is what its writer wrote; a file written (or re-sealed)
by anything else must still fail with a `SnapshotError` naming the field, never with a KeyError
or TypeError from deep inside the restore. The checks mirror `snapshot.dump`: every field's
JSON type and range, then the cross-references -- values and buffers that exist in the view,
segments that follow from the view's inputs and outputs, HardOps in the view's order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xrt.errors import SnapshotError

from . import deploy
from .structs import OcmOpt, SegmentType

_SEGMENTS = {int(s) for s in SegmentType}
_LIMIT = 1 << 48


class _Fields:
    """Typed reads of the state, each failure a SnapshotError naming the field's path."""

    def __init__(self, name: str) -> None:
        self.name = name

    def bad(self, path: str, why: str) -> SnapshotError:
        return SnapshotError(f"{self.name} snapshot: state field '{path}' {why}; the file was "
                             f"not written by this xrt (dump it again)")

    def key(self, obj: Any, key: str, path: str) -> Any:
        if not isinstance(obj, dict):
            raise self.bad(path, f"must be an object, not {type(obj).__name__}")
        if key not in obj:
            raise self.bad(f"{path}.{key}", "is missing")
        return obj[key]

    def int(self, x: Any, path: str, lo: int = 0) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or not lo <= x < _LIMIT:
            raise self.bad(path, f"must be an integer >= {lo}, not {x!r}")
        return x

    def bool(self, x: Any, path: str) -> bool:
        if not isinstance(x, bool):
            raise self.bad(path, f"must be true or false, not {x!r}")
        return x

    def list(self, x: Any, path: str, n: int | None = None) -> list[Any]:
        if not isinstance(x, list) or (n is not None and len(x) != n):
            raise self.bad(path, f"must be a list{f' of {n}' if n is not None else ''}, "
                                 f"not {x!r}"[:200])
        return x

    def ints(self, x: Any, path: str) -> list[int]:
        return [self.int(v, f"{path}[{k}]") for k, v in enumerate(self.list(x, path))]

    def segment(self, x: Any, path: str) -> SegmentType:
        if self.int(x, path) not in _SEGMENTS:
            raise self.bad(path, f"is no segment type ({x})")
        return SegmentType(x)


def _check_plan(f: _Fields, plan: Any) -> None:
    if not isinstance(plan, dict):
        raise f.bad("plan", "must be an object")
    for fld in dataclasses.fields(deploy.DeployPlan):
        path = f"plan.{fld.name}"
        if fld.name not in plan:
            if fld.default is dataclasses.MISSING and \
                    fld.default_factory is dataclasses.MISSING:
                raise f.bad(path, "is missing")
            continue
        x = plan[fld.name]
        if fld.name in ("ocm_requested", "ocm_used"):
            if not isinstance(x, (str, int)) or isinstance(x, bool) or \
                    not (x in OcmOpt.__members__ or x in [o.value for o in OcmOpt]):
                raise f.bad(path, f"is no OCM option ({x!r})")
        elif fld.name == "etm_reuse":
            f.bool(x, path)
        elif fld.name == "ocm_score":
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise f.bad(path, f"must be a number, not {x!r}")
        elif fld.name == "ocm_per_option":
            if not isinstance(x, dict):
                raise f.bad(path, "must be an object")
        elif fld.name == "strategy":
            if not isinstance(x, str):
                raise f.bad(path, "must be a string")
        else:
            f.int(x, path)
    extra = set(plan) - {fld.name for fld in dataclasses.fields(deploy.DeployPlan)}
    if extra:
        raise f.bad("plan", f"has unknown fields {sorted(extra)}")


def _check_slots(f: _Fields, slots: Any) -> None:
    names = {fld.name for fld in dataclasses.fields(deploy.Slot)}
    for k, s in enumerate(f.list(slots, "slots")):
        path = f"slots[{k}]"
        if not isinstance(s, dict) or set(s) - names or \
                not {"key", "old", "size", "start", "end"} <= set(s):
            raise f.bad(path, "must be an object with the fields of a slot")
        for key, x in s.items():
            if key == "members":
                f.ints(x, f"{path}.members")
            elif key in ("scratch", "ocm"):
                f.bool(x, f"{path}.{key}")
            else:
                f.int(x, f"{path}.{key}", lo=-1 if key == "end" else 0)


def check_state(state: Any, view: Any, hard: list[Any], tag: str, name: str) -> None:
    """Check every field `snapshot.restore` reads from `state` against the view it restores
    (whose HardOps `checks.check_hardops` passed)."""
    f = _Fields(name)
    if not isinstance(state, dict):
        raise f.bad("state", "must be an object")
    s = f.key(state, "settings", "state")
    f.bool(f.key(s, "merge", "settings"), "settings.merge")
    f.bool(f.key(s, "etm_optimize", "settings"), "settings.etm_optimize")
    if not isinstance(f.key(s, "ocmopt", "settings"), str) or \
            s["ocmopt"] not in OcmOpt.__members__:
        raise f.bad("settings.ocmopt", f"is no OCM option ({s['ocmopt']!r})")
    _check_plan(f, f.key(state, "plan", "state"))
    f.int(f.key(state, "logic_base", "state"), "logic_base")
    f.int(f.key(state, "n_layers", "state"), "n_layers")
    segs = f.key(state, "segments", "state")
    for st in SegmentType:
        pair = f.list(f.key(segs, st.name, "segments"), f"segments.{st.name}", 2)
        f.int(pair[0], f"segments.{st.name}[0]")
        f.int(pair[1], f"segments.{st.name}[1]")
    _check_slots(f, f.key(state, "slots", "state"))
    packed = state.get("packed_io", False)
    f.bool(packed, "packed_io")

    values = {v.v_id: v for op in hard for v in op.inputs + op.outputs}
    in_ids = {v.v_id for v in view.inputs()}
    out_ids = {v.v_id for v in view.outputs()}
    buffers: dict[int, SegmentType] = {}
    for k, b in enumerate(f.list(f.key(state, "buffers", "state"), "buffers")):
        path = f"buffers[{k}]"
        owner, _, _, mem, sg = f.list(b, path, 5)
        for j in range(3):
            f.int(b[j], f"{path}[{j}]")
        mem = f.ints(mem, f"{path}[3]")
        seg = f.segment(sg, f"{path}[4]")
        if owner in buffers or not mem or any(m not in values for m in mem):
            raise f.bad(path, f"names buffer {owner} twice or members {mem} the view does not "
                              f"hold")
        want = SegmentType.INPUT if any(m in in_ids for m in mem) else \
            SegmentType.OUTPUT if any(m in out_ids for m in mem) else None
        if (want is not None and seg != want) or \
                (want is None and seg in (SegmentType.INPUT, SegmentType.OUTPUT)):
            raise f.bad(f"{path}[4]", f"is {seg.name}, which the view's inputs and outputs "
                                      f"do not make buffer {owner}")
        if owner not in values and want is None:
            raise f.bad(f"{path}[0]", f"names buffer {owner}, owned by no value of the view")
        if any(values[m].tags[tag]["buffer"] != owner for m in mem):
            raise f.bad(f"{path}[3]", f"lists values that are not in buffer {owner}")
        buffers[owner] = seg
    for v in values.values():
        if v.tags[tag]["buffer"] not in buffers:
            raise f.bad("buffers", f"lack buffer {v.tags[tag]['buffer']} of value {v.v_id}")

    seen: set[int] = set()
    for k, row in enumerate(f.list(f.key(state, "values", "state"), "values")):
        path = f"values[{k}]"
        v_id, real, is_ocm, is_host, fake, real_to, la, n, sg = f.list(row, path, 9)
        if f.int(v_id, f"{path}[0]") not in values or v_id in seen:
            raise f.bad(f"{path}[0]", f"names value {v_id!r}, not one of the view's (or twice)")
        seen.add(v_id)
        for j, x in ((1, real), (2, is_ocm), (3, is_host)):
            f.bool(x, f"{path}[{j}]")
        if fake is not None and f.int(fake, f"{path}[4]") not in values:
            raise f.bad(f"{path}[4]", f"names value {fake!r}, not one of the view's")
        if any(r not in values for r in f.ints(real_to, f"{path}[5]")):
            raise f.bad(f"{path}[5]", "names values the view does not hold")
        f.int(la, f"{path}[6]")
        f.int(n, f"{path}[7]")
        if f.segment(sg, f"{path}[8]") != buffers[values[v_id].tags[tag]["buffer"]]:
            raise f.bad(f"{path}[8]", f"is not the segment of value {v_id}'s buffer")
    if seen != set(values):
        raise f.bad("values", f"cover values {sorted(seen)}, the view's HardOps use "
                              f"{sorted(values)}")

    ops = {op.op_id: op for op in hard}
    span = {st: state["segments"][st.name] for st in (SegmentType.WEIGHT, SegmentType.INSTR)}
    for k, row in enumerate(f.list(f.key(state, "hardops", "state"), "hardops")):
        path = f"hardops[{k}]"
        oid, wla, wsz, ila, isz = (f.int(x, f"{path}[{j}]")
                                   for j, x in enumerate(f.list(row, path, 5)))
        op = ops.get(oid)
        if op is None:
            raise f.bad(f"{path}[0]", f"names op {oid}, not a HardOp of the view")
        for st, addr, size, p in ((SegmentType.WEIGHT, wla, wsz, op.params[:1]),
                                  (SegmentType.INSTR, ila, isz, [op.instr] if op.instr else [])):
            want = p[0].storageBytes() if p else 0
            lo, n = span[st]
            if size != want or (size and not lo <= addr <= addr + size <= lo + n):
                raise f.bad(path, f"places {size} {st.name} bytes at {addr}, HardOp {oid} has "
                                  f"{want} and its segment spans {lo}..{lo + n}")
    for k, pair in enumerate(f.list(f.key(state, "mmu", "state"), "mmu")):
        for j, x in enumerate(f.list(pair, f"mmu[{k}]", 2)):
            f.int(x, f"mmu[{k}][{j}]")
    for k, run in enumerate(f.list(f.key(state, "runs", "state"), "runs")):
        ids, sid = f.list(run, f"runs[{k}]", 2)
        f.ints(ids, f"runs[{k}][0]")
        f.int(sid, f"runs[{k}][1]")
