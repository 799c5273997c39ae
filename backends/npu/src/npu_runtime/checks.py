"""Load-time checks of every field an NPU backend reads from a compiled network.

The lowering writes, per HardOp, `device_info` (layers, scratch slots) and, per feature-map
value, a placement under ``tags[chip.tag]`` (buffer, base, bytes, h, w, pitch, c_off, c, dtype)
(docs/zg330-lowering.md). The backend trusts them to size chunks, slice maps and program the
MMU, so a hand-edited or corrupted file must fail here, when the backend is initialised, with
an `xir.NetworkFormatError` naming the file, the op and the field, never later inside a
forward with a bare KeyError or TypeError.
"""

from __future__ import annotations

from typing import Any

from xir.errors import FieldTypeError, MissingFieldError, NetworkFormatError

#: value placement keys the runtime reads, all non-negative integers
_WINDOW_INTS = ("buffer", "base", "bytes", "h", "w", "pitch", "c_off", "c")
#: the largest address or size a field may state (the 40-bit physical space)
_LIMIT = 1 << 40


def _int(value: Any, what: str, *, file: str | None, op_id: int, field: str,
         positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldTypeError(f"{what} must be an integer, not {value!r}", file=file,
                             op_id=op_id, field=field)
    if value < (1 if positive else 0) or value >= _LIMIT:
        raise NetworkFormatError(f"{what} {value} is out of range", file=file, op_id=op_id,
                                 field=field)
    return value


def check_window(v: Any, op_id: int, tag: str, file: str | None) -> dict[str, Any]:
    """The placement of value `v` (an input or output of HardOp `op_id`), checked."""
    field = f"v_id {v.v_id} tags.{tag}"
    t = v.tags.get(tag) if isinstance(v.tags, dict) else None
    if t is None:
        raise MissingFieldError(f"value {v.v_id} has no ETM placement (tags['{tag}']); the "
                                f"network was not lowered for {tag}", file=file, op_id=op_id,
                                field=field)
    if not isinstance(t, dict):
        raise FieldTypeError(f"tags['{tag}'] must be an object, not {t!r}", file=file,
                             op_id=op_id, field=field)
    for key in _WINDOW_INTS:
        if key not in t:
            raise MissingFieldError(f"the placement of value {v.v_id} lacks '{key}'",
                                    file=file, op_id=op_id, field=f"{field}.{key}")
        _int(t[key], key, file=file, op_id=op_id, field=f"{field}.{key}")
    if t.get("dtype") not in ("int8", "int16"):
        raise FieldTypeError(f"dtype must be 'int8' or 'int16', not {t.get('dtype')!r}",
                             file=file, op_id=op_id, field=f"{field}.dtype")
    esize = 2 if t["dtype"] == "int16" else 1
    if t["c_off"] + t["c"] > t["pitch"]:
        raise NetworkFormatError(f"channels {t['c_off']}..{t['c_off'] + t['c']} exceed the "
                                 f"pitch {t['pitch']}", file=file, op_id=op_id, field=field)
    if t["buffer"] == v.v_id and t["h"] * t["w"] * t["pitch"] * esize > t["bytes"]:
        raise NetworkFormatError(f"a {t['h']}x{t['w']}x{t['pitch']} {t['dtype']} map does "
                                 f"not fit its {t['bytes']} bytes", file=file, op_id=op_id,
                                 field=f"{field}.bytes")
    return t


def check_device_info(op: Any, file: str | None) -> None:
    """A HardOp's `device_info`: layers and scratch slots."""
    info = op.device_info
    if not isinstance(info, dict):
        raise FieldTypeError(f"device_info must be an object, not {info!r}", file=file,
                             op_id=op.op_id, field="device_info")
    _int(info.get("layers", 0), "layers", file=file, op_id=op.op_id,
         field="device_info.layers")
    scratch = info.get("scratch", [])
    if not isinstance(scratch, list):
        raise FieldTypeError(f"scratch must be a list, not {scratch!r}", file=file,
                             op_id=op.op_id, field="device_info.scratch")
    for k, slot in enumerate(scratch):
        where = f"device_info.scratch[{k}]"
        if not isinstance(slot, dict):
            raise FieldTypeError(f"a scratch slot must be an object, not {slot!r}", file=file,
                                 op_id=op.op_id, field=where)
        for key in ("v_id", "addr", "bytes"):
            if key not in slot:
                raise MissingFieldError(f"a scratch slot lacks '{key}'", file=file,
                                        op_id=op.op_id, field=f"{where}.{key}")
            _int(slot[key], key, file=file, op_id=op.op_id, field=f"{where}.{key}",
                 positive=key == "bytes")


def check_hardops(hard: list[Any], tag: str, file: str | None,
                  boundary: set[int] = frozenset()) -> None:
    """Every field `build_layout` and the forwarder read from these HardOps; `boundary` holds
    the v_ids of the view's inputs and outputs."""
    members: dict[int, list[int]] = {}
    for op in hard:
        check_device_info(op, file)
        if not op.inputs and not op.outputs:
            raise NetworkFormatError("a HardOp must read or write a feature map", file=file,
                                     op_id=op.op_id, field="inputs")
        for p, what in ((op.instr, "instr"), *((q, "params") for q in op.params[:1])):
            if p is None:
                continue
            addr = getattr(p.mtype, "addr", None)
            if not isinstance(addr, int) or not 0 <= addr < _LIMIT:
                raise NetworkFormatError(f"{what} v_id {p.v_id} has no ETM address "
                                         f"({p.mtype!r})", file=file, op_id=op.op_id,
                                         field=what)
        for v in op.inputs + op.outputs:
            t = check_window(v, op.op_id, tag, file)
            members.setdefault(t["buffer"], []).append(v.v_id)
    # a buffer whose owner another view holds is only reachable through the view's edge
    for buf, vids in members.items():
        if buf not in vids and not boundary.intersection(vids):
            raise NetworkFormatError(f"buffer {buf} of values {sorted(set(vids))} is owned by "
                                     f"no value of the view's HardOps", file=file,
                                     field=f"v_id {vids[0]} tags.{tag}.buffer")


def check_network_tag(tags: Any, tag: str, file: str | None) -> dict[str, Any]:
    """The network-level annotations of the lowering (``tags[tag]``), an object or absent."""
    t = tags.get(tag, {}) if isinstance(tags, dict) else {}
    if not isinstance(t, dict):
        raise FieldTypeError(f"the network's tags['{tag}'] must be an object, not {t!r}",
                             file=file, field=f"tags.{tag}")
    return t

