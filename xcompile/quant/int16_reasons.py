"""Why each op of a quantized network computes, or stores a value, in 16 bits
(docs/quantization.md section 10, "Why int16").

The quantizer decides which values are 16-bit in `bits.value_bits`, which records, per value,
the rule that raised it (`bits.Why`). `op_record` turns that into each op's reason, from one
closed set (`REASONS`), when the quantizer builds the network (`tags["quantization"]["int16"]`):
the reasons are the quantizer's own decisions, not guessed afterwards. Each op names what it
took its bits from (`via`) and the rule the chain started from (`root`, `root_op`), so a
summary can say "8 raised by the search, 11 through them".

`explain` adds what only the compile knows (which `op_bits` the mixed-precision search chose,
with their measured sensitivity), `hardop_record` counts the HardOps of a lowered network that
hold a 16-bit value and gives each its reasons, `summary_lines` prints it all (with the rules
the compile measured, `xcompile.quant.widening`), `table_lines` one line per op.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from xcompile.quant.bits import SEED_KINDS, Why
from xcompile.quant.capability import shares_scale

__all__ = ["REASONS", "ROOTS", "cast_record", "explain", "hardop_record", "int16_record",
           "measured_lines", "op_record", "summary_lines", "table_lines"]

#: every reason an op computes or stores in 16 bits, and how the printout says it
REASONS = {
    "op_bits": "raised by the user's --op-bits",
    "search": "raised by the mixed-precision search (its measured sensitivity)",
    "logits": "16-bit logits rule (computes a softmax's input)",
    "stream": "residual-stream rule (writes or normalises a LayerNorm's 16-bit input)",
    "log_domain": "log-domain rule (a log-power spectrum's chain, section 8)",
    "input_bits": "--input-bits 16 (reads the network input)",
    "concat": "Concat of branches far apart stored in 16 bits (section 11)",
    "scale_group": "shares a scale group with a 16-bit value",
    "widest_input": "rescaling op computing at its widest input, a 16-bit value",
    "writes_16bit": "computes in int8, writes a 16-bit value a 16-bit reader needs",
    "converts_16bit": "Cast of a 16-bit value (network edge, or a far Concat branch "
                      "requantized into a 16-bit Concat)",
}
#: the rules a chain of reasons starts from, as a summary names them
ROOTS = {"op_bits": "raised by --op-bits", "search": "raised by the search",
         "logits": "16-bit logits rule", "stream": "residual-stream rule",
         "log_domain": "log-domain rule",
         "input_bits": "--input-bits 16", "concat": "Concats of far-apart branches"}


def _names(net: Any) -> tuple[dict[int, Any], dict[int, Any]]:
    ops = {op.op_id: op for op in net.ops}
    producer = {v.v_id: op for op in net.ops for v in op.outputs}
    return ops, producer


def _root(vid: int, why: dict[int, Why]) -> Why:
    """The seed a value's chain of reasons starts from."""
    w = why[vid]
    seen = {vid}
    while w.kind not in SEED_KINDS and w.value is not None and w.value in why \
            and w.value not in seen:
        seen.add(w.value)
        w = why[w.value]
    return w


def op_record(net: Any, int_ops: set[int], vbits: dict[int, int], why: dict[int, Why],
              bits: int) -> dict[str, Any]:
    """`{"ops": [...], "values": {...}}` for `tags["quantization"]["int16"]`: every integer op
    of `net` (the optimized float network the quantizer rebuilt) that computes at 16 bits (its
    first feature input is 16-bit, as the quantizer decides an op's precision) or writes a
    16-bit value while computing at `bits`, with its reason (`REASONS`), `via` (the op or
    value it took its bits from), `root` / `root_op` (the rule and the op the chain started
    from) and its MACs; and per 16-bit value (by v_id) its root, for the Casts and HardOps
    that hold it. Empty lists where nothing is 16-bit."""
    from xir.ops.nn import conv_macs

    ops, producer = _names(net)

    def label(oid: int | None) -> str | None:
        if oid is None or oid not in ops:
            return None
        return ops[oid].name or str(oid)

    def value_label(vid: int) -> str:
        p = producer.get(vid)
        if p is not None and p.op_type != "Input":
            return label(p.op_id) or str(vid)
        return f"input {vid}"

    def root_of(vid: int) -> tuple[str, str | None]:
        r = _root(vid, why)
        return r.kind, label(r.op) if r.op is not None else value_label(vid)

    rows = []
    for op in net.ops:
        if op.op_id not in int_ops:
            continue
        feats = op.feature_inputs()
        wide_in = [v for v in feats if vbits.get(v.v_id, bits) > bits]
        wide_out = [v for v in op.outputs if vbits.get(v.v_id, bits) > bits]
        computes = bool(feats) and vbits.get(feats[0].v_id, bits) > bits
        if not computes and not wide_out:
            continue
        concat = [v for v in wide_out if why[v.v_id].kind == "concat"
                  and why[v.v_id].op == op.op_id]
        if concat:  # a far-branch Concat: its far branches arrive requantized to 16 bits
            computes = True
            reason, via = "concat", None
            rkind, rop = root_of(concat[0].v_id)
        elif computes:
            v = feats[0]
            w = why[v.v_id]
            if w.kind in SEED_KINDS and w.op == op.op_id:
                reason, via = w.kind, None
            elif w.kind == "input_bits":
                reason, via = "input_bits", None
            elif shares_scale(op):
                src = w.value if w.kind == "group" and w.value is not None else v.v_id
                # a value of the op's own: the op that needed it at 16 bits
                own = producer.get(src) is op and why[src].op not in (None, op.op_id)
                reason = "scale_group"
                via = label(why[src].op) if own else value_label(src)
            else:
                reason, via = "widest_input", value_label(v.v_id)
            rkind, rop = root_of(v.v_id)
        else:
            v = wide_out[0]
            w = why[v.v_id]
            reason = "writes_16bit"
            via = label(w.op) if w.kind != "group" else value_label(w.value)
            rkind, rop = root_of(v.v_id)
        rows.append({"op_id": int(op.op_id), "name": op.name or str(op.op_id),
                     "type": op.op_type, "computes": 16 if computes else bits,
                     "macs": int(conv_macs(op)), "reason": reason, "via": via,
                     "root": rkind, "root_op": rop,
                     "values": [int(x.v_id) for x in wide_in + wide_out]})
    values = {}
    for vid, b in vbits.items():
        if b > bits and vid in why:
            rkind, rop = root_of(vid)
            values[str(vid)] = {"root": rkind, "root_op": rop}
    return {"ops": rows, "values": values,
            "macs": int(sum(conv_macs(op) for op in net.ops if op.op_id in int_ops)),
            "integer_ops": len(int_ops)}


def cast_record(qnet: Any, record: dict[str, Any], bits: int) -> list[dict[str, Any]]:
    """Rows for the Casts of the quantized network `qnet` that hold a 16-bit value (reason
    "converts_16bit"): a network input or output of a 16-bit value (its root: the value's), or
    a far Concat branch requantized into a 16-bit Concat (root: that Concat's)."""
    by_op = {r["op_id"]: r for r in record.get("ops", [])}
    values = record.get("values", {})
    rows = []
    for op in qnet.ops:
        if op.op_type != "Cast":
            continue
        wide = [v for v in op.inputs + op.outputs
                if getattr(v.dtype.element_dtype, "is_quantized", False)
                and v.dtype.numpy_dtype.itemsize * 8 > bits]
        if not wide:
            continue
        root: tuple[str, str | None] | None = None
        for v in wide:
            fid = str(v.tags.get("float_v_id", v.v_id))
            if fid in values:
                root = (values[fid]["root"], values[fid]["root_op"])
                break
        if root is None:  # a far branch requantized into the Concat reading it
            for c in op.outputs[0].consumers:
                if c.op_id in by_op:
                    root = (by_op[c.op_id]["root"], by_op[c.op_id]["root_op"])
                    break
        rkind, rop = root if root is not None else ("unexplained", None)
        rows.append({"op_id": int(op.op_id), "name": op.name or str(op.op_id), "type": "Cast",
                     "computes": bits, "macs": 0, "reason": "converts_16bit",
                     "via": wide[0].name, "root": rkind, "root_op": rop,
                     "values": [int(v.v_id) for v in wide]})
    return rows


def int16_record(net: Any) -> dict[str, Any]:
    """The int16 record of a quantized (or lowered) network: the compile's
    (`tags["quantization"]["mixed_precision"]["int16"]`, with the search told apart) where it
    made one, else the quantizer's (`tags["quantization"]["int16"]`); {} for a network
    quantized before reasons were recorded."""
    q = net.tags.get("quantization", {}) if hasattr(net, "tags") else net
    mp = q.get("mixed_precision") or {}
    return mp.get("int16") or q.get("int16") or {}


def explain(record: dict[str, Any], search: dict[int, Any] | None = None,
            sensitivity: dict[str, dict] | None = None) -> dict[str, Any]:
    """`record` (`op_record`'s) with the ops `search` raised (op ids the mixed-precision
    search chose, beyond the user's op_bits) as reason / root "search", their measured
    sensitivity (`sensitivity`: {op_id: {"output_loss", "alone"}}, where the search recorded
    it) beside them, and the summary counts (`counts`: ops per root, `mac_share`)."""
    search = {int(k) for k in (search or {})}
    sens = {int(k): v for k, v in (sensitivity or {}).items()}
    by_name = {r["name"]: r["op_id"] for r in record.get("ops", [])}
    out = dict(record)
    rows = []
    for r in record.get("ops", []):
        r = dict(r)
        if r["reason"] == "op_bits" and r["op_id"] in search:
            r["reason"] = "search"
            if r["op_id"] in sens:
                r["sensitivity"] = sens[r["op_id"]]
        if r["root"] == "op_bits" and by_name.get(r["root_op"]) in search:
            r["root"] = "search"
        rows.append(r)
    out["ops"] = rows
    out["values"] = {vid: (dict(v, root="search") if v["root"] == "op_bits"
                           and by_name.get(v["root_op"]) in search else v)
                     for vid, v in record.get("values", {}).items()}
    at16 = [r for r in rows if r["computes"] > 8]
    total = record.get("macs", 0)
    out["int16_ops"] = len(at16)
    out["writes_only"] = len(rows) - len(at16)
    out["mac_share"] = round(sum(r["macs"] for r in at16) / total, 6) if total else 0.0
    out["counts"] = dict(Counter(r["root"] for r in rows))
    return out


def hardop_record(generated: Any, record: dict[str, Any], bits: int = 8) -> dict[str, Any]:
    """The HardOps of a lowered network that hold a 16-bit value (read, write: as
    bench_spectrum counts them), each with the reasons of the ops it was made from
    (`origin_ops_id`) or, for ops the lowering added, of its 16-bit values (their
    `float_v_id`); `{"hardops", "int16", "share", "counts": {root: HardOps}, "list": [...]}`.
    A HardOp whose 16-bit value no record names gets root "unexplained": a test asserts none
    does."""
    by_op = {r["op_id"]: r for r in record.get("ops", [])}
    values = record.get("values", {})
    hard = [op for op in generated.ops if op.op_type == "HardOp"]
    rows = []
    for h in hard:
        wide = [v for v in h.inputs + h.outputs if not v.is_params
                and getattr(v.dtype.element_dtype, "is_quantized", False)
                and v.dtype.numpy_dtype.itemsize * 8 > bits]
        if not wide:
            continue
        origin = [int(o) for o in h.attrs.get("origin_ops_id", []) or []]
        reasons = [by_op[o] for o in origin if o in by_op]
        roots = [(r["root"], r["root_op"]) for r in reasons]
        for v in wide:
            fid = str(v.tags.get("float_v_id", v.v_id))
            if fid in values:
                roots.append((values[fid]["root"], values[fid]["root_op"]))
        roots = list(dict.fromkeys(roots)) or [("unexplained", None)]
        rows.append({"name": h.name, "origin": origin,
                     "reasons": sorted({r["reason"] for r in reasons}),
                     "root": roots[0][0], "root_op": roots[0][1],
                     "roots": [list(x) for x in roots]})
    return {"hardops": len(hard), "int16": len(rows),
            "share": round(len(rows) / len(hard), 6) if hard else 0.0,
            "counts": dict(Counter(r["root"] for r in rows)), "list": rows}


#: above this share of HardOps in int16 the summary lists the reasons one by one
HARDOP_SHARE_NOTE = 0.10


def summary_lines(record: dict[str, Any]) -> list[str]:
    """The compile's printout of `record` (`explain`'s, with `hardops` where the network was
    lowered): one head line, then per root the ops it put in 16 bits and how, then, where more
    than `HARDOP_SHARE_NOTE` of the HardOps hold a 16-bit value, that share and its roots."""
    if "counts" not in record:  # the quantizer's record, as a compile without search keeps it
        record = explain(record)
    rows = record.get("ops", [])
    if not rows:
        return ["int16: none (every integer op computes and stores in int8)"] + \
            measured_lines(record)
    at16 = [r for r in rows if r["computes"] > 8]
    hard = record.get("hardops")
    head = "int16: "
    if hard:
        head += f"{hard['int16']} of {hard['hardops']} HardOps hold a 16-bit value, "
    head += (f"{len(at16)} of {record.get('integer_ops', '?')} integer ops compute in int16 "
             f"({record.get('mac_share', 0.0):.1%} of MACs)")
    writes = len(rows) - len(at16)
    if writes:
        head += f"; {writes} more ops write or convert a 16-bit value"
    lines = [head + ":"]
    order = sorted(Counter(r["root"] for r in rows).items(), key=lambda kv: -kv[1])
    for root, _ in order:
        mine = [r for r in rows if r["root"] == root]
        own = [r for r in mine if r["reason"] == root]
        how = Counter(r["reason"] for r in mine if r["reason"] != root)
        starts = sorted({r["root_op"] for r in mine if r["root_op"]})
        line = f"  {ROOTS.get(root, root)}: "
        if own:
            line += f"{len(own)} op{'s' if len(own) != 1 else ''} ("
            line += ", ".join(_own(r) for r in own[:6]) + (", ..." if len(own) > 6 else "")
            line += ")"
        else:
            line += "from " + ", ".join(starts[:4]) + (", ..." if len(starts) > 4 else "")
        if how:
            line += "; through them " + ", ".join(f"{n} {_HOW.get(k, k)}"
                                                  for k, n in how.items())
        if hard:
            line += f"; {hard['counts'].get(root, 0)} HardOps"
        lines.append(line)
    lines += measured_lines(record)
    if hard and hard.get("share", 0.0) > HARDOP_SHARE_NOTE:
        why = ", ".join(f"{ROOTS.get(k, k)} {n}" for k, n in
                        sorted(hard["counts"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  {hard['share']:.0%} of the HardOps hold 16-bit values "
                     f"(above {HARDOP_SHARE_NOTE:.0%}): {why}")
    return lines


def measured_lines(record: dict[str, Any]) -> list[str]:
    """One line per 16-bit rule the compile measured (`widening.measure_without`: far-branch
    Concats, the residual stream): its ops, the worst output part with and without it, and
    whether it was kept."""
    out = []
    for rule, m in (record.get("measured_rules") or {}).items():
        ops = ", ".join(m["ops"][:4]) + (", ..." if len(m["ops"]) > 4 else "")
        out.append(f"  {ROOTS.get(rule, rule)} measured ({len(m['ops'])}: {ops}): worst part "
                   f"{m['worst_with'][1]:.4f} with it, {m['worst_without'][1]:.4f} without: "
                   f"{'kept' if m['kept'] else 'dropped, int8'}")
    return out


_HOW = {"scale_group": "sharing a scale group", "widest_input": "reading a 16-bit input",
        "writes_16bit": "writing a 16-bit input of a 16-bit op",
        "converts_16bit": "Casts", "concat": "far-branch Concats",
        "op_bits": "raised by --op-bits", "search": "raised by the search",
        "logits": "computing logits", "stream": "in the residual stream",
        "log_domain": "in a log-power chain",
        "input_bits": "reading the input"}


def _own(r: dict[str, Any]) -> str:
    s = r.get("sensitivity") or {}
    if s.get("output_loss"):  # measured and above 0 (a block's ranking leaves it 0)
        return f"{r['name']} output loss {s['output_loss']:.2g}"
    if s.get("block_share"):
        return f"{r['name']} block share {s['block_share']:.2g}"
    if s.get("alone") is not None:
        return f"{r['name']} alone {s['alone']:.4f}"
    return r["name"]


def table_lines(record: dict[str, Any]) -> list[str]:
    """One line per op of `record` computing or storing in 16 bits: name, type, whether it
    computes in 16 bits, its reason (and what it names), the rule it started from, its MACs
    (`xrt quant-report`)."""
    out = []
    for r in record.get("ops", []):
        via = f" ({r['via']})" if r.get("via") else ""
        sens = _own(r)[len(r["name"]):]
        bits = "int16" if r["computes"] > 8 else "int8 "
        out.append(f"  {r['name']:<24} {r['type']:<10} {bits}"
                   f"  {r['reason']}{via}{sens}; from {r['root']} {r['root_op'] or ''}"
                   f"  {r['macs']} MACs")
    return out
