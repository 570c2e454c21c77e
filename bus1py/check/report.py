# Invariants: the HTML report is one self-contained file (inline CSS and SVG, no scripts or
# external references), built only from the JSON summary, so it can be regenerated from a
# saved --json file and is small whatever the trace size. Every user-provided string is
# escaped. The ShiViz export streams rows (toLocalIterator): the trace is never held whole on
# the driver.
from __future__ import annotations

import html
import json

from .summary import PROPERTIES

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px}
th{background:#f4f4f4}.ok{color:#17692b;font-weight:bold}.bad{color:#b00020;font-weight:bold}
.ex{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:1em 0}
code{background:#f6f6f6;padding:1px 3px}svg{background:#fcfcfc;border:1px solid #eee}
.fig{max-width:100%;overflow-x:auto}.legend span{margin-right:1.5em}
.legend i{display:inline-block;width:2em;height:3px;vertical-align:middle;margin-right:.4em}
"""

# what the colours of the space-time diagrams mean
_LEGEND = ("<p class='legend'><span><i style='background:#555'></i>a message or signal, "
           "from its send to its delivery</span><span><i style='background:#c00'></i>"
           "a delivery of the counterexample's messages</span><span><i "
           "style='background:#1565c0;height:5px'></i>the happened-before chain</span></p>")


def _figure(svg: str) -> str:
    """A diagram that scrolls inside its own box, never the page."""
    return f"<div class='fig'>{svg}</div>" if svg else ""


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


_RECV = {"deliver": "send", "signal_recv": "signal_send"}
COLUMN_DX, ROW_DY, LEFT, TOP = 120, 56, 90, 30   # COLUMN_DX: the narrowest column
CHAR_PX = 7   # the most an 11px system-ui character takes: widths sized by it never clip
# the baseline of the label under a dot: its box starts ~11 px below the dot's centre, past
# the tip of any arrow, which stops at most 9 px short of the centre (_short_of), whatever
# the arrow's angle
LABEL_BELOW = 21


def _origin_key(e):
    signal = e["kind"] in ("signal_send", "signal_recv")
    return (signal, e["msg"])


def _layout(events):
    """One column per event, in an order that respects process order and send-before-
    receive (longest-path layers, then process, then seq): a label never shares its
    column, so labels cannot overlap. Returns (events, column of (process, seq), origins)."""
    evs = sorted({(e["process"], e["seq"]): e for e in events}.values(),
                 key=lambda e: (e["process"], e["seq"]))
    layer = {(e["process"], e["seq"]): 0 for e in evs}
    origin = {}
    for e in evs:
        if e["kind"] in ("send", "destroy", "signal_send"):
            origin[_origin_key(e)] = (e["process"], e["seq"])
    by_proc = {}
    for e in evs:
        by_proc.setdefault(e["process"], []).append((e["process"], e["seq"]))
    for _ in range(len(evs) + 1):
        changed = False
        for keys in by_proc.values():
            for ka, kb in zip(keys, keys[1:]):
                if layer[kb] < layer[ka] + 1:
                    layer[kb] = layer[ka] + 1
                    changed = True
        for e in evs:
            if e["kind"] in _RECV:
                o = origin.get(_origin_key(e))
                k = (e["process"], e["seq"])
                if o and layer[k] < layer[o] + 1:
                    layer[k] = layer[o] + 1
                    changed = True
        if not changed:
            break
    ranked = sorted(layer, key=lambda k: (layer[k], k))
    return evs, {k: i for i, k in enumerate(ranked)}, origin


def _label(e):
    if e["kind"] in ("signal_send", "signal_recv"):
        text = f"{e['kind'].replace('_', ' ')} {e['msg']}"
    else:
        text = f"{e['kind']} {e.get('message') or e['msg']}"
    return text


def spacetime_svg(events, highlight=(), paths=()) -> str:
    """Processes as horizontal lines (only those with an event here), events as dots,
    messages and signals as arrows. The deliveries of the `highlight` messages are red;
    each path in `paths` (lists of events, consecutive ones one happened-before edge) is
    drawn in blue over them: its events ringed, its same-process steps as a thick segment
    of the process line, its message and signal steps as thick arrows."""
    paths = [p for p in paths if p]
    events = list(events) + [e for p in paths for e in p]
    if not events:
        return ""
    evs, col, origin = _layout(events)
    hl = set(highlight or ())
    on_path = {(e["process"], e["seq"]) for p in paths for e in p}
    path_edges = {((a["process"], a["seq"]), (b["process"], b["seq"]))
                  for p in paths for a, b in zip(p, p[1:])}
    procs = sorted({e["process"] for e in evs})
    row = {p: i for i, p in enumerate(procs)}
    # every column as wide as the longest label: labels are whole and never meet
    dx = max(COLUMN_DX, CHAR_PX * max(len(_label(e)) for e in evs) + 10)
    width = LEFT + len(col) * dx + 40
    height = TOP + len(procs) * ROW_DY
    pos = {k: (LEFT + col[k] * dx + dx // 2, TOP + row[k[0]] * ROW_DY) for k in col}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-size="11">', "<defs>"]
    for mid, color in (("ah", "#555"), ("ahr", "#c00"), ("ahb", "#1565c0")):
        out.append(f'<marker id="{mid}" markerWidth="8" markerHeight="8" refX="7" refY="4" '
                   f'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="{color}"/></marker>')
    out.append("</defs>")
    for p in procs:
        y = TOP + row[p] * ROW_DY
        out.append(f'<text x="8" y="{y + 4}">process {_esc(p)}</text>'
                   f'<line x1="{LEFT - 10}" y1="{y}" x2="{width - 20}" y2="{y}" '
                   f'stroke="#999"/>')
    for a, b in sorted(path_edges):
        if a[0] == b[0]:          # a same-process step of the path
            (x1, y1), (x2, _) = pos[a], pos[b]
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y1}" stroke="#1565c0" '
                       f'stroke-width="4" opacity="0.6"/>')
    for e in evs:
        if e["kind"] not in _RECV:
            continue
        o = origin.get(_origin_key(e))
        k = (e["process"], e["seq"])
        if not o:
            continue
        (x1, y1), (x2, y2) = pos[o], pos[k]
        if (o, k) in path_edges:
            color, w, mid = "#1565c0", 3, "ahb"
        elif e["msg"] in hl and e["kind"] == "deliver":
            color, w, mid = "#c00", 2, "ahr"
        else:
            color, w, mid = "#555", 1, "ah"
        dash = ' stroke-dasharray="4,3"' if e["kind"] == "signal_recv" else ""
        x2, y2 = _short_of(x1, y1, x2, y2, 9 if k in on_path else 6)
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" '
                   f'stroke-width="{w}"{dash} marker-end="url(#{mid})"/>')
    for e in evs:
        k = (e["process"], e["seq"])
        cx, cy = pos[k]
        red = e["msg"] in hl and e["kind"] in ("send", "destroy", "deliver")
        fill = "#c00" if red else "#333"
        if k in on_path:
            out.append(f'<circle cx="{cx}" cy="{cy}" r="8" fill="none" stroke="#1565c0" '
                       f'stroke-width="2"/>')
        out.append(f'<circle cx="{cx}" cy="{cy}" r="5" fill="{fill}">'
                   f'<title>{_esc(json.dumps(e))}</title></circle>'
                   f'<text x="{cx}" y="{cy - 11}" text-anchor="middle" fill="{fill}"{_HALO}>'
                   f'{_esc(_label(e))}</text>'
                   f'<text x="{cx}" y="{cy + LABEL_BELOW}" text-anchor="middle" fill="#777"{_HALO}>'
                   f'p{_esc(e["process"])}:{_esc(e["seq"])}</text>')
    out.append("</svg>")
    return "".join(out)


# labels are drawn after the arrows, on a halo of the background: an arrow that passes
# under a label never hides it
_HALO = ' stroke="#fcfcfc" stroke-width="3" paint-order="stroke"'


def _short_of(x1, y1, x2, y2, gap):
    """The end of a line from (x1, y1) towards (x2, y2) that stops `gap` short of it, so
    that its arrowhead touches the event's dot instead of covering it."""
    dx, dy = x2 - x1, y2 - y1
    n = (dx * dx + dy * dy) ** 0.5
    if n <= gap:
        return x2, y2
    return round(x2 - dx * gap / n, 1), round(y2 - dy * gap / n, 1)


def _example_paths(ex):
    if ex.get("path"):
        return [ex["path"]]
    return [s["path"] for s in ex.get("edges", ()) if s.get("path")]


def _steps_html(ex):
    lines = list(ex.get("steps", ()))
    for s in ex.get("edges", ()):
        lines += s.get("steps", ())
    if not lines:
        return ""
    return ("<p>the chain, edge by edge (blue in the diagram):</p><ol>"
            + "".join(f"<li>{_esc(line)}</li>" for line in lines) + "</ol>")


def _bars_svg(items, unit):
    """A horizontal bar chart of (label, count) pairs, its margins as wide as its longest
    label and value."""
    if not items:
        return ""
    top = max(n for _, n in items) or 1
    w, h = 420, 18
    left = CHAR_PX * max(len(label) for label, _ in items) + 10
    right = CHAR_PX * max(len(f"{n:,} {unit}") for _, n in items) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + w + right}" '
           f'height="{len(items) * h + 10}" font-size="11">']
    for i, (label, n) in enumerate(items):
        y, bar = 5 + i * h, max(1, round(w * n / top))
        out.append(f'<text x="{left - 5}" y="{y + 12}" text-anchor="end">{_esc(label)}</text>'
                   f'<rect x="{left}" y="{y + 2}" width="{bar}" height="{h - 5}" '
                   f'fill="#5c85c4"/><text x="{left + bar + 5}" y="{y + 12}">{n:,} '
                   f'{_esc(unit)}</text>')
    out.append("</svg>")
    return _figure("".join(out))


def _duration(us: float) -> str:
    """Microseconds in the unit that reads best, three significant digits."""
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if us >= scale:
            return f"{us / scale:.3g} {unit}"
    return f"{us:.3g} µs"


def _latency_label(b):
    b = int(b)
    if b < 0:
        return "negative"
    if b == 0:
        return "< 1 µs"
    return f"{_duration(1 << (b - 1))} – {_duration(1 << b)}"


def _stress_rows(st):
    """The stress tool's summary as (what, value) rows in units a reader takes in."""
    mib = lambda n: f"{n / 2**20:,.1f} MiB"  # noqa: E731
    fmt = {"ok": lambda v: "yes" if v else "no", "wall": lambda v: f"{v:,.2f} s",
           "chaos_delay": lambda v: f"{v * 1e3:g} ms",
           "peaks.rss_total": mib, "peaks.rss_max": mib,
           "peaks.cpu_total_pct": lambda v: f"{v:,.0f} %",
           "peaks.send_rate": lambda v: f"{v:,.0f} /s",
           "peaks.deliver_rate": lambda v: f"{v:,.0f} /s"}
    rows = [(k, v) for k, v in st.items() if not isinstance(v, dict) and v is not None]
    for group in ("latency_us", "peaks", "errors"):
        rows += [(f"{group}.{k}", v) for k, v in (st.get(group) or {}).items()]
    if "errors" in st and not st["errors"]:
        rows.append(("errors", "none"))
    out = []
    for k, v in rows:
        if k in fmt:
            v = fmt[k](v)
        elif k.startswith("latency_us.") and isinstance(v, (int, float)):
            k, v = "latency " + k.split(".", 1)[1], _duration(v)
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        elif isinstance(v, int):
            v = f"{v:,}"
        elif isinstance(v, float):
            v = f"{v:,.3g}"
        out.append((k.replace("_", " ").replace(".", ": "), v))
    return out


def _overview_html(ov):
    parts = ["<h2 id='run'>the run</h2>"]
    st = ov.get("stress")
    if st:
        parts.append("<p>the stress tool's summary:</p><table><tr><th>what</th>"
                     "<th>value</th></tr>" + "".join(
                         f"<tr><td>{_esc(k)}</td><td style='text-align:right'>{_esc(v)}"
                         f"</td></tr>" for k, v in _stress_rows(st)) + "</table>")
    counts = ov.get("events_per_process", {})
    parts.append("<p>events per process:</p>"
                 + _bars_svg([(f"process {p}", n) for p, n in counts.items()], "events"))
    hist = ov.get("latency_log2_us", {})
    if hist:
        parts.append("<p>delivery latency (wall time of the delivery minus that of its "
                     "send):</p>"
                     + _bars_svg([(_latency_label(b), n) for b, n in hist.items()],
                                 "deliveries"))
    if ov.get("window"):
        parts.append("<p>the first events of a few processes (messages whose other end is "
                     "outside this window have no arrow):</p>"
                     + _figure(spacetime_svg(ov["window"])))
    return "\n".join(parts)


def render_html(summary) -> str:
    ok = summary.get("ok")
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>bus1py check: {_esc(summary.get('trace'))}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>bus1py check — <span class='{'ok' if ok else 'bad'}'>"
             f"{'all properties hold' if ok else 'violations found'}</span></h1>",
             f"<p>Trace <code>{_esc(summary.get('trace'))}</code>: "
             f"{_esc(summary.get('events'))} events, {_esc(summary.get('processes'))} processes, "
             f"checked in {_esc(summary.get('seconds'))} s.</p>",
             "<table><tr><th>property</th><th>verdict</th><th>violations</th>"
             "<th>method</th></tr>"]
    props = summary.get("properties", {})
    for name in PROPERTIES:
        p = props.get(name, {})
        good, judged = p.get("ok"), p.get("judged", True)
        verdict = "holds" if good else "VIOLATED" if judged else "violated (not promised)"
        parts.append(f"<tr><td><a href='#{name}'>{name}</a></td>"
                     f"<td class='{'ok' if good or not judged else 'bad'}'>{verdict}"
                     f"</td><td>{_esc(p.get('violations'))}</td>"
                     f"<td>{_esc(p.get('method', 'direct'))}</td></tr>")
    parts.append("</table>")
    for name in PROPERTIES:
        p = props.get(name, {})
        if not p.get("examples"):
            continue
        parts.append(f"<h2 id='{name}'>{name}: {p['violations']} violation(s)</h2>")
        for i, ex in enumerate(p["examples"], 1):
            parts.append(f"<div class='ex'><p><b>counterexample {i}</b>: {_esc(ex.get('why'))}"
                         "</p>")
            if ex.get("edges"):
                names = [s["before"].get("message") or s["before"]["msg"] for s in ex["edges"]]
                parts.append("<p>cycle of messages: <code>"
                             + " → ".join(_esc(m) for m in names + names[:1])
                             + "</code></p>")
            parts.append(_steps_html(ex))
            parts.append(_LEGEND + _figure(spacetime_svg(
                ex.get("events", []), ex.get("highlight"), _example_paths(ex))))
            parts.append("<table><tr><th>process</th><th>seq</th><th>kind</th>"
                         "<th>message</th><th>msg id</th></tr>")
            # one row per event, however often the example names it
            for e in {(e["process"], e["seq"]): e for e in ex.get("events", [])}.values():
                parts.append(f"<tr><td>{_esc(e['process'])}</td><td>{_esc(e['seq'])}</td>"
                             f"<td>{_esc(e['kind'])}</td><td>{_esc(e.get('message', ''))}</td>"
                             f"<td>{_esc(e['msg'])}</td></tr>")
            parts.append("</table></div>")
    if summary.get("overview"):
        parts.append(_overview_html(summary["overview"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(summary, path):
    with open(path, "w") as f:
        f.write(render_html(summary))


SHIVIZ_REGEX = r"(?<event>.*)\n(?<host>\S*) (?<clock>{.*})"


def write_shiviz(trace, path):
    """ShiViz log of a trace (load.read_footers): for each event a description line, then
    `host {vector clock}`, processes in id order, each one's events in seq order.

    Clocks are ShiViz-style event counts (own entry = seq + 1), every event's exact
    vector clock by the array engine (arrays/relax.py's every_clock: the walk, or
    relaxation on a history with a causality cycle). The trace is read here, whole (ShiViz
    shows a few thousand events; the CLI refuses one past engine.DRIVER_MAX_ROWS). Paste
    into ShiViz with the default regex (SHIVIZ_REGEX)."""
    import pyarrow as pa

    from . import kinds as K
    from .arrays.events import Events
    from .arrays.layout import Layout
    from .arrays.relax import every_clock
    ev = Events(trace)
    clocks = every_clock(Layout.of_events(ev))
    procs = [f"p{int(p)}" for p in ev.procs]
    read_at = pa.array(range(ev.n) if ev.order is None else ev.order)
    dests = ev._dest_lists.take(read_at).to_pylist()
    with open(path, "w") as f:
        for k in range(ev.n):
            host, seq = f"p{int(ev.process[k])}", int(ev.seq[k])
            clock = {procs[i]: int(c) for i, c in enumerate(clocks[k]) if c}
            clock[host] = seq + 1
            msg = int(ev.msg[k]) if ev.has_msg[k] else ""
            desc = f"{K.NAMES[int(ev.code[k])]} {msg}".strip()
            if dests[k]:
                desc += " to " + ",".join(f"p{d}" for d in dests[k])
            f.write(f"{desc}\n{host} {json.dumps(clock, sort_keys=True)}\n")
    return ev.n
