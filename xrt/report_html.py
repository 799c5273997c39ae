"""A one-page HTML report of a session's last profiled forward (`xrt run --report`, `xrt bench
--report`), in the manner of Hailo's profiler report and Vela's per-network summary.

One self-contained file: the data as JSON in the page, inline CSS and a small script that draws
the page (tables, SVG timeline, SVG memory maps); nothing is fetched, so it opens offline.
Sections: the summary (and `xrt bench` results), a timeline of the simulated chip (each layer as
long as its simulated time), the per-layer table (simulated and host wall time, placement with
its reason, precision, MACs, cycles, utilisation, ETM/OCM bytes), and the memory map of each
chip backend's deployment (which value lives where in OCM / ETM, from which layer to which).

The data come from public sources only: `profiling.profile_rows`, the network's ops, values
and tags (the compile target's ``host_ops`` reasons, read here directly: xrt imports no
compiler), and a chip backend's `deployment_report()` where it offers one.
"""

from __future__ import annotations

import html
import json
from typing import Any

#: a host op's placement reason when the compile target recorded none
HOST_DEFAULT = "not compiled for a chip (runs on the backend that claims it)"


def host_reasons(network: Any) -> dict[int, str]:
    """op id -> why the compiled network keeps it on the host: the ``host_ops`` map each
    compile target writes into the network's tags (``tags[target]["host_ops"]``)."""
    out: dict[int, str] = {}
    for info in (getattr(network, "tags", None) or {}).values():
        if isinstance(info, dict) and isinstance(info.get("host_ops"), dict):
            for oid, why in info["host_ops"].items():
                try:
                    out[int(oid)] = str(why)
                except (TypeError, ValueError):
                    continue
    return out


def precision(value: Any) -> str:
    """A value's element type in a word: int8, int16 (quantized), float32..."""
    import numpy as np

    e = value.dtype.element_dtype
    name = np.dtype(e.numpy_dtype).name
    if getattr(e, "is_quantized", False):
        return name + ("" if getattr(e, "per_tensor", True) else " per-channel")
    return name


def _lifetimes(ops: list[Any]) -> tuple[dict[int, int], dict[int, int]]:
    """value id -> index of the op that makes it / the last op that reads it."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        for v in op.inputs:
            first.setdefault(v.v_id, 0)
            last[v.v_id] = i
        for v in op.outputs:
            first[v.v_id] = i
            last.setdefault(v.v_id, i)
    return first, last


def report_data(session: Any, rows: list[dict[str, Any]], title: str,
                bench: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain data (also what the tests read)."""
    view = session.network_view
    root = getattr(view, "network", view)
    ops = list(view.ops)
    index = {op.op_id: i for i, op in enumerate(ops)}
    reasons = host_reasons(root)
    bindings = session.backendBindings()
    by_id = {op.op_id: op for op in ops}
    layers = []
    for r in rows:
        op = by_id.get(r["op_id"])
        b = bindings.get(r["op_id"])
        entry = {k: r.get(k) for k in ("op_id", "op_type", "name", "backend", "macs", "wall_ms",
                                       "memcpy_ms", "hard_ms", "cycles", "utilisation",
                                       "etm_bytes", "ocm_bytes")}
        if op is None:  # a merged run's own row: its launch overhead
            entry.update(placement="chip", reason="launch of a merged run of HardOps",
                         precision="", step=None)
        else:
            chip = op.op_type == "HardOp"
            origin = list((op.attrs or {}).get("origin_ops_id") or []) if chip else []
            entry.update(
                step=index[op.op_id],
                placement="chip" if chip else "host",
                reason=(f"compiled for {op.compile_target}"
                        + (f" from op(s) {', '.join(map(str, origin))}" if origin else "")
                        if chip else reasons.get(op.op_id, HOST_DEFAULT)),
                precision=", ".join(dict.fromkeys(precision(v) for v in op.outputs)),
                bound_to=type(b).__name__ if b is not None else "")
        layers.append(entry)
    first, last = _lifetimes(ops)
    memory = []
    for b in session.backends:
        report = getattr(b, "deployment_report", None)
        if not callable(report) or not b.is_applied:
            continue
        rep = report()
        values = []
        for v in rep["values"]:
            if v.get("scratch") or not v.get("real", True):
                continue  # a fake value aliases its real one; scratch has no value
            vid = int(v["v_id"])
            values.append({"v_id": vid, "memory": v["memory"], "segment": v["segment"],
                           "offset": int(v["offset"]), "bytes": int(v["byte_size"]),
                           "from": first.get(vid, 0), "to": last.get(vid, len(ops) - 1),
                           "aliases": list(v.get("real_to") or [])})
        memory.append({"backend": type(b).__name__, "ocm": rep["ocm"], "etm": rep["etm"],
                       "segments": [{k: s[k] for k in ("segment", "logic_addr", "byte_size",
                                                       "phy_addr")} for s in rep["segments"]],
                       "values": values})
    hard = sum(r.get("hard_ms") or 0.0 for r in rows)
    return {"title": title, "network": root.name, "ops": len(ops),
            "steps": [f"{op.op_type} #{op.op_id}" for op in ops],
            "summary": {"wall_ms": sum(r["wall_ms"] for r in rows), "chip_ms": hard,
                        "macs": sum(int(r.get("macs") or 0) for r in rows),
                        "chip_ops": sum(1 for x in layers if x["placement"] == "chip"
                                        and x["step"] is not None),
                        "host_ops": sum(1 for x in layers if x["placement"] == "host"),
                        "etm_bytes": sum(int(r.get("etm_bytes") or 0) for r in rows),
                        "ocm_bytes": sum(int(r.get("ocm_bytes") or 0) for r in rows)},
            "layers": layers, "memory": memory, "bench": bench}


def render(data: dict[str, Any]) -> str:
    """The page: the data as JSON in a script element, drawn by the inline script."""
    blob = json.dumps(data, default=float).replace("</", "<\\/")
    return (_PAGE.replace("@TITLE@", html.escape(data["title"]))
            .replace("@CSS@", _CSS).replace("@JS@", _JS).replace("@DATA@", blob))


def write_report(path: str, session: Any, rows: list[dict[str, Any]], title: str,
                 bench: dict[str, Any] | None = None) -> None:
    """Write the report of `session`'s last profiled forward (`rows`) to `path`."""
    from .errors import XrtError

    text = render(report_data(session, rows, title, bench))
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise XrtError(f"--report {path}: cannot write ({exc.strerror})") from None


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style></head>
<body>
<header><h1>@TITLE@</h1><p id="sub"></p></header>
<noscript><p>This report draws itself with an inline script: allow scripts for this file.</p>
</noscript>
<main>
<section id="summary"></section>
<section id="bench-section" hidden><h2>xrt bench</h2><div id="bench"></div></section>
<section><h2>Simulated chip timeline</h2><p class="note">Each layer as long as its simulated
time (cycles at the chip's clock); colour: MAC utilisation. Hover for figures.</p>
<div id="timeline" class="scroll"></div></section>
<section><h2>Layers</h2><p class="note">Execution order. <b>sim</b>: simulated chip time;
<b>wall</b>: host time of the forward call (simulation included). Click a header to sort.</p>
<div class="scroll"><table id="layers"></table></div></section>
<section><h2>Placement</h2><div id="placement"></div></section>
<section><h2>Memory map</h2><p class="note">Where each feature map lives (vertical: offset in
the memory) while it is alive (horizontal: from the layer that writes it to the last that
reads it).</p><div id="memory"></div></section>
</main>
<script type="application/json" id="report-data">@DATA@</script>
<script>@JS@</script>
</body></html>
"""

_CSS = """
:root{--fg:#1d2430;--mute:#5b6675;--line:#dfe3e8;--bg:#f6f7f9;--chip:#e8720c;--host:#3b73b9}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2430;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b9c2cf}main{padding:8px 28px 40px;max-width:1500px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;margin:16px 0;
padding:14px 18px}h2{font-size:16px;margin:0 0 8px}.note{color:var(--mute);margin:0 0 10px;
font-size:13px}.cards{display:flex;flex-wrap:wrap;gap:12px}.card{border:1px solid var(--line);
border-radius:6px;padding:8px 14px;min-width:150px}.card b{display:block;font-size:20px}
.card span{color:var(--mute);font-size:12px}.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:12.5px}th,td{padding:3px 6px;
border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{position:sticky;top:0;background:#eef1f5;cursor:pointer;user-select:none}
td.l,th.l{text-align:left}td.why{white-space:normal;min-width:190px;max-width:260px;color:var(--mute)}
tr:hover td{background:#fff7ee}.tag{display:inline-block;border-radius:3px;padding:0 6px;
color:#fff;font-size:11px}.tag.chip{background:var(--chip)}.tag.host{background:var(--host)}
.bar{display:inline-block;height:9px;background:var(--chip);vertical-align:middle;
margin-right:6px;border-radius:2px}.bar.w{background:var(--host)}
svg text{font:11px system-ui,sans-serif;fill:var(--mute)}.legend{font-size:12px;
color:var(--mute)}.legend i{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;
vertical-align:middle}
"""

_JS = r"""
(function () {
const D = JSON.parse(document.getElementById('report-data').textContent);
const NS = 'http://www.w3.org/2000/svg';
const none = x => x === null || x === undefined || x === '';
const f = (x, d) => none(x) ? '' : Number(x).toFixed(d);
const kib = x => none(x) ? '' : (x / 1024).toFixed(1);
const bytes = x => x >= 1048576 ? (x / 1048576).toFixed(2) + ' MiB'
  : x >= 1024 ? (x / 1024).toFixed(1) + ' KiB' : x + ' B';
const hw = r => !none(r.cycles);

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function sv(tag, attrs, title) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (title) {
    const t = document.createElementNS(NS, 'title');
    t.textContent = title;
    e.appendChild(t);
  }
  return e;
}
function text(x, y, content, attrs) {
  const t = sv('text', Object.assign({x: x, y: y}, attrs || {}));
  t.textContent = content;
  return t;
}
function heat(u) {
  u = Math.max(0, Math.min(1, u || 0));
  return 'hsl(' + (210 - 190 * Math.sqrt(u)).toFixed(0) + ',70%,52%)';
}
function row(cells, tag, leftCols) {
  const tr = el('tr');
  cells.forEach((c, i) => {
    const td = el(tag || 'td', {class: (leftCols || [0]).includes(i) ? 'l' : ''});
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  });
  return tr;
}

// --- summary -------------------------------------------------------------------------------
const S = D.summary;
document.getElementById('sub').textContent = D.network + ' \u2014 ' + D.ops + ' ops, ' +
  S.chip_ops + ' on the chip, ' + S.host_ops + ' on the host';
const cards = el('div', {class: 'cards'});
for (const [k, v] of [['host wall time', f(S.wall_ms, 3) + ' ms'],
                      ['simulated chip time', S.chip_ms ? f(S.chip_ms, 4) + ' ms' : '\u2014'],
                      ['MACs', (S.macs / 1e6).toFixed(2) + ' M'],
                      ['ETM traffic', bytes(S.etm_bytes)], ['OCM traffic', bytes(S.ocm_bytes)]]) {
  const c = el('div', {class: 'card'});
  c.appendChild(el('b', {}, v));
  c.appendChild(el('span', {}, k));
  cards.appendChild(c);
}
document.getElementById('summary').appendChild(cards);

// --- xrt bench results ---------------------------------------------------------------------
if (D.bench) {
  document.getElementById('bench-section').hidden = false;
  const t = el('table', {id: 'bench-table'});
  t.appendChild(row(['variant', 'min ms', 'mean ms', 'median ms', 'p90 ms', 'p99 ms',
                     'host fps', 'chip ms', 'chip fps', 'MAC util', 'ETM KiB', 'OCM KiB'], 'th'));
  for (const r of D.bench.results) {
    const h = r.host, c = r.chip || {};
    t.appendChild(row([r.variant, f(h.min_ms, 3), f(h.mean_ms, 3), f(h.median_ms, 3),
                       f(h.p90_ms, 3), f(h.p99_ms, 3), f(h.throughput_fps, 1),
                       f(c.latency_ms, 4), f(c.throughput_fps, 0),
                       none(c.utilisation) ? '' : (100 * c.utilisation).toFixed(1) + '%',
                       kib(c.etm_bytes), kib(c.ocm_bytes)]));
  }
  document.getElementById('bench').appendChild(t);
}

// --- timeline of the simulated chip ---------------------------------------------------------
(function () {
  const L = D.layers.filter(r => r.hard_ms > 0);
  const box = document.getElementById('timeline');
  if (!L.length) {
    box.appendChild(el('p', {class: 'note'}, 'No simulated chip in this session.'));
    return;
  }
  const W = Math.max(1240, L.length * 14), H = 74;
  const total = L.reduce((a, r) => a + r.hard_ms, 0);
  const s = sv('svg', {width: W + 20, height: H + 30, id: 'timeline-svg',
                       viewBox: '0 0 ' + (W + 20) + ' ' + (H + 30)});
  let x = 10;
  for (const r of L) {
    const w = Math.max(1, r.hard_ms / total * W);
    let tip = r.op_type + ' #' + r.op_id + (r.name ? ' ' + r.name : '') +
      '\nsim ' + f(r.hard_ms, 5) + ' ms';
    if (hw(r)) {
      tip += '\n' + r.cycles + ' cycles, MAC utilisation ' + f(100 * (r.utilisation || 0), 1) +
        '%\nETM ' + bytes(r.etm_bytes) + ', OCM ' + bytes(r.ocm_bytes);
    }
    s.appendChild(sv('rect', {x: x.toFixed(2), y: 8, width: (w - 0.5).toFixed(2),
                              height: H - 20, fill: hw(r) ? heat(r.utilisation) : '#9aa5b1',
                              class: 'layer', 'data-op': r.op_id}, tip));
    if (w > 56) {
      const label = r.name || (r.step === null ? 'launch' : r.op_type);
      s.appendChild(text(x + 3, 8 + (H - 20) / 2 + 4, label.slice(0, Math.floor(w / 6.5)),
                         {style: 'fill:#fff;pointer-events:none'}));
    }
    x += w;
  }
  for (let i = 0; i <= 4; i++) {
    const tx = 10 + W * i / 4;
    s.appendChild(sv('line', {x1: tx, x2: tx, y1: H - 10, y2: H - 5, stroke: '#889'}));
    s.appendChild(text(tx, H + 6, f(total * i / 4, 4) + ' ms',
                       {'text-anchor': i == 0 ? 'start' : i == 4 ? 'end' : 'middle'}));
  }
  box.appendChild(s);
  const lg = el('div', {class: 'legend'});
  lg.appendChild(document.createTextNode('MAC utilisation'));
  for (const [c, n] of [[heat(0), '0%'], [heat(0.25), '25%'], [heat(1), '100%'],
                        ['#9aa5b1', 'launch overhead']]) {
    lg.appendChild(el('i', {style: 'background:' + c}));
    lg.appendChild(document.createTextNode(n));
  }
  box.appendChild(lg);
})();

// --- the per-layer table ----------------------------------------------------------------------
(function () {
  const t = document.getElementById('layers');
  const maxS = Math.max(1e-12, ...D.layers.map(r => r.hard_ms || 0));
  const maxW = Math.max(1e-12, ...D.layers.map(r => r.wall_ms || 0));
  const cols = [['step', 'step', 0], ['op', 'op_id', 0], ['type', 'op_type', 1],
                ['name', 'name', 1], ['where', 'placement', 1], ['backend', 'backend', 1],
                ['precision', 'precision', 1], ['MMACs', 'macs', 0], ['kcycles', 'cycles', 0],
                ['util', 'utilisation', 0], ['ETM KiB', 'etm_bytes', 0],
                ['OCM KiB', 'ocm_bytes', 0], ['sim ms', 'hard_ms', 0], ['wall ms', 'wall_ms', 0],
                ['placement reason', 'reason', 1]];
  const head = el('tr');
  for (const [n, k, l] of cols) head.appendChild(el('th', {class: l ? 'l' : '', 'data-key': k}, n));
  const thead = el('thead');
  thead.appendChild(head);
  t.appendChild(thead);
  const body = el('tbody');
  t.appendChild(body);
  function bar(v, max, cls, digits) {
    const s = el('span');
    if (v > 0) s.appendChild(el('span', {class: cls, style: 'width:' +
                                         (60 * v / max).toFixed(1) + 'px'}));
    s.appendChild(document.createTextNode(v > 0 ? f(v, digits) : ''));
    return s;
  }
  function cell(r, k) {
    switch (k) {
      case 'placement': return el('span', {class: 'tag ' + r.placement}, r.placement);
      case 'macs': return r.macs ? (r.macs / 1e6).toFixed(2) : '';
      case 'cycles': return hw(r) ? (r.cycles / 1e3).toFixed(1) : '';
      case 'utilisation': return hw(r) ? (100 * (r.utilisation || 0)).toFixed(1) + '%' : '';
      case 'etm_bytes': case 'ocm_bytes': return hw(r) ? kib(r[k]) : '';
      case 'hard_ms': return bar(r.hard_ms, maxS, 'bar', 5);
      case 'wall_ms': return bar(r.wall_ms, maxW, 'bar w', 3);
      default: return none(r[k]) ? '' : String(r[k]);
    }
  }
  function fill(rows) {
    body.textContent = '';
    for (const r of rows) {
      const tr = el('tr', {class: 'layer-row', 'data-op': r.op_id});
      for (const [, k, l] of cols) {
        const td = el('td', {class: k === 'reason' ? 'l why' : l ? 'l' : ''});
        const c = cell(r, k);
        if (typeof c === 'string') td.textContent = c; else td.appendChild(c);
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }
  fill(D.layers);
  let sortKey = null, dir = 1;
  head.querySelectorAll('th').forEach(th => th.addEventListener('click', () => {
    const k = th.dataset.key;
    dir = sortKey === k ? -dir : (typeof D.layers[0][k] === 'number' ? -1 : 1);
    sortKey = k;
    fill([...D.layers].sort((a, b) => {
      const x = a[k], y = b[k];
      if (x === y) return 0;
      if (none(x)) return 1;
      if (none(y)) return -1;
      return (x < y ? -1 : 1) * dir;
    }));
  }));
})();

// --- placement ---------------------------------------------------------------------------------
(function () {
  const by = {};
  for (const r of D.layers) {
    if (r.step === null) continue;  // a merged run's launch row
    const why = r.placement === 'chip' ? 'compiled for the chip' : r.reason;
    const key = r.placement + '|' + r.backend + '|' + why;
    const g = by[key] = by[key] || {n: 0, types: {}};
    g.n += 1;
    g.types[r.op_type] = (g.types[r.op_type] || 0) + 1;
  }
  const t = el('table', {id: 'placement-table'});
  t.appendChild(row(['where', 'backend', 'ops', 'op types', 'reason'], 'th', [0, 1, 3, 4]));
  for (const key of Object.keys(by).sort()) {
    const [w, b, why] = key.split('|');
    const types = Object.entries(by[key].types).map(([k, v]) => k + ' \u00d7' + v).join(', ');
    const tr = row([el('span', {class: 'tag ' + w}, w), b, String(by[key].n), types, why],
                   'td', [0, 1, 3, 4]);
    tr.lastChild.className = 'l why';
    t.appendChild(tr);
  }
  document.getElementById('placement').appendChild(t);
})();

// --- memory maps ---------------------------------------------------------------------------------
(function () {
  const box = document.getElementById('memory');
  if (!D.memory.length) {
    box.appendChild(el('p', {class: 'note'}, 'No chip deployment in this session.'));
    return;
  }
  const rank = g => g.startsWith('OCM') ? 0 : g.endsWith('FTMP') ? 1 : 2;
  for (const m of D.memory) {
    const o = m.ocm, e = m.etm;
    box.appendChild(el('p', {class: 'note'}, m.backend + ': OCM option ' + o.option +
      ' (asked ' + o.requested + '), OCM footprint ' + bytes(o.footprint) + ' of ' +
      bytes(o.capacity) + '; ETM feature-map segment ' + bytes(e.ftmp_bytes) +
      ' (without reuse ' + bytes(e.no_reuse_bytes) + (e.strategy ? ', ' + e.strategy : '') + ').'));
    const groups = {};
    for (const v of m.values) {
      const g = v.memory + ' ' + v.segment;
      (groups[g] = groups[g] || []).push(v);
    }
    const order = Object.keys(groups).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));
    for (const g of order) {
      const vs = groups[g], n = D.ops;
      const size = Math.max(1, ...vs.map(v => v.offset + v.bytes));
      const W = Math.max(1100, n * 16), H = rank(g) < 2 ? 190 : 56, L = 78, T = 22;
      const s = sv('svg', {width: W + L + 10, height: H + T + 34, class: 'memmap',
                           'data-memory': g, viewBox: '0 0 ' + (W + L + 10) + ' ' + (H + T + 34)});
      s.appendChild(text(L, 13, g + ' \u2014 ' + vs.length + ' value' +
                         (vs.length == 1 ? '' : 's') + ', ' + bytes(size) + ' used',
                         {style: 'font-weight:600;fill:#1d2430'}));
      s.appendChild(sv('rect', {x: L, y: T, width: W, height: H, fill: '#f3f5f8',
                                stroke: '#dfe3e8'}));
      const yt = rank(g) < 2 ? 4 : 1;
      for (let i = 0; i <= yt; i++) {
        const y = T + H * i / yt;
        s.appendChild(sv('line', {x1: L, x2: L + W, y1: y, y2: y, stroke: '#e4e8ee'}));
        s.appendChild(text(L - 5, y + 4, '+' + bytes(Math.round(size * i / yt)),
                           {'text-anchor': 'end'}));
      }
      const every = Math.max(1, Math.ceil(n / 24));
      for (let i = 0; i < n; i += every) {
        const x = L + W * (i + 0.5) / n;
        s.appendChild(sv('line', {x1: x, x2: x, y1: T + H, y2: T + H + 4, stroke: '#889'}));
        s.appendChild(text(x, T + H + 15, String(i), {'text-anchor': 'middle'}));
      }
      vs.forEach((v, k) => {
        const x = L + W * v.from / n, w = Math.max(2, W * (v.to - v.from + 1) / n);
        const y = T + H * v.offset / size, h = Math.max(1.5, H * v.bytes / size);
        const tip = 'v' + v.v_id + ': ' + bytes(v.bytes) + ' at ' + g + ' +0x' +
          v.offset.toString(16) + '\nfrom ' + (D.steps[v.from] || v.from) + ' to ' +
          (D.steps[v.to] || v.to) +
          (v.aliases.length ? '\nalso seen as v' + v.aliases.join(', v') : '');
        s.appendChild(sv('rect', {x: x.toFixed(1), y: y.toFixed(1), width: w.toFixed(1),
                                  height: h.toFixed(1), fill: 'hsl(' + ((k * 47) % 360) +
                                  ',60%,60%)', stroke: '#fff', 'stroke-width': 0.5,
                                  class: 'value', 'data-v': v.v_id}, tip));
        if (w > 34 && h > 12) {
          s.appendChild(text(x + 4, y + Math.min(h / 2 + 4, 13), 'v' + v.v_id,
                             {style: 'fill:#1d2430'}));
        }
      });
      s.appendChild(text(L + W, T + H + 30, 'layer step (execution order) \u2192',
                         {'text-anchor': 'end'}));
      const d = el('div', {class: 'scroll'});
      d.appendChild(s);
      box.appendChild(d);
    }
  }
})();
document.body.setAttribute('data-rendered', 'yes');
})();
"""
