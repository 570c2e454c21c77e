# Invariants: the HTML report is one self-contained file (inline CSS and SVG, no scripts or
# external references), built only from the JSON summary, so it can be regenerated from a
# saved --json file and is small whatever the trace size. Every user-provided string is
# escaped. The ShiViz export streams rows (toLocalIterator): the trace is never held whole on
# the driver.
from __future__ import annotations

import html
import json

from .checker import PROPERTIES

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px}
th{background:#f4f4f4}.ok{color:#17692b;font-weight:bold}.bad{color:#b00020;font-weight:bold}
.ex{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:1em 0}
code{background:#f6f6f6;padding:1px 3px}svg{background:#fcfcfc;border:1px solid #eee}
"""


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _layout(events):
    """x positions: process order and send-before-deliver, as ShiViz lays out a trace."""
    evs = sorted({(e["process"], e["seq"]): e for e in events}.values(),
                 key=lambda e: (e["process"], e["seq"]))
    x = {(e["process"], e["seq"]): 0 for e in evs}
    origin = {}
    for e in evs:
        if e["kind"] in ("send", "destroy", "signal_send"):
            origin[(e["kind"] == "signal_send", e["msg"])] = (e["process"], e["seq"])
    for _ in range(len(evs) + 1):
        changed = False
        by_proc = {}
        for e in evs:
            by_proc.setdefault(e["process"], []).append(e)
        for lst in by_proc.values():
            for a, b in zip(lst, lst[1:]):
                ka, kb = (a["process"], a["seq"]), (b["process"], b["seq"])
                if x[kb] < x[ka] + 1:
                    x[kb] = x[ka] + 1
                    changed = True
        for e in evs:
            if e["kind"] in ("deliver", "signal_recv"):
                o = origin.get((e["kind"] == "signal_recv", e["msg"]))
                k = (e["process"], e["seq"])
                if o and x[k] < x[o] + 1:
                    x[k] = x[o] + 1
                    changed = True
        if not changed:
            break
    return evs, x, origin


def spacetime_svg(events, highlight=()) -> str:
    """Processes as horizontal lines, events as dots, messages as arrows (offending in red)."""
    if not events:
        return ""
    evs, x, origin = _layout(events)
    hl = set(highlight or ())
    procs = sorted({e["process"] for e in evs})
    row = {p: i for i, p in enumerate(procs)}
    dx, dy, left, top = 110, 56, 90, 30
    width = left + (max(x.values()) + 1) * dx + 40
    height = top + len(procs) * dy
    pos = {k: (left + x[k] * dx, top + row[k[0]] * dy) for k in x}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-size="11">',
           '<defs><marker id="ah" markerWidth="8" markerHeight="8" refX="7" refY="4" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker>'
           '<marker id="ahr" markerWidth="8" markerHeight="8" refX="7" refY="4" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#c00"/></marker></defs>']
    for p in procs:
        y = top + row[p] * dy
        out.append(f'<text x="8" y="{y + 4}">process {_esc(p)}</text>'
                   f'<line x1="{left - 20}" y1="{y}" x2="{width - 20}" y2="{y}" '
                   f'stroke="#999"/>')
    for e in evs:
        if e["kind"] in ("deliver", "signal_recv"):
            o = origin.get((e["kind"] == "signal_recv", e["msg"]))
            if o:
                (x1, y1), (x2, y2) = pos[o], pos[(e["process"], e["seq"])]
                red = e["msg"] in hl and e["kind"] == "deliver"
                dash = ' stroke-dasharray="4,3"' if e["kind"] == "signal_recv" else ""
                out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" '
                           f'stroke="{"#c00" if red else "#555"}" stroke-width="'
                           f'{2 if red else 1}"{dash} marker-end="url(#{"ahr" if red else "ah"})"/>')
    for e in evs:
        cx, cy = pos[(e["process"], e["seq"])]
        red = e["msg"] in hl
        label = f'{e["kind"]} {e["msg"] if e["msg"] is not None else ""} @{e["seq"]}'
        out.append(f'<circle cx="{cx}" cy="{cy}" r="5" fill="{"#c00" if red else "#333"}">'
                   f'<title>{_esc(json.dumps(e))}</title></circle>'
                   f'<text x="{cx - 30}" y="{cy - 9}" fill="{"#c00" if red else "#333"}">'
                   f'{_esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def render_html(summary) -> str:
    ok = summary.get("ok")
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>bus1py check: {_esc(summary.get('trace'))}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>bus1py check — <span class='{'ok' if ok else 'bad'}'>"
             f"{'all properties hold' if ok else 'violations found'}</span></h1>",
             f"<p>Trace <code>{_esc(summary.get('trace'))}</code>: "
             f"{_esc(summary.get('events'))} events, {_esc(summary.get('processes'))} processes, "
             f"checked in {_esc(summary.get('seconds'))} s. Stamp witness: "
             f"{_esc(summary.get('witness'))}.</p>",
             "<table><tr><th>property</th><th>verdict</th><th>violations</th>"
             "<th>method</th></tr>"]
    props = summary.get("properties", {})
    for name in PROPERTIES:
        p = props.get(name, {})
        good = p.get("ok")
        parts.append(f"<tr><td><a href='#{name}'>{name}</a></td>"
                     f"<td class='{'ok' if good else 'bad'}'>{'holds' if good else 'VIOLATED'}"
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
            if ex.get("cycle"):
                parts.append("<p>cycle of messages: <code>"
                             + " → ".join(_esc(m) for m in ex["cycle"] + ex["cycle"][:1])
                             + "</code></p>")
            parts.append(spacetime_svg(ex.get("events", []), ex.get("highlight")))
            parts.append("<table><tr><th>process</th><th>seq</th><th>kind</th><th>msg</th>"
                         "</tr>")
            for e in ex.get("events", []):
                parts.append(f"<tr><td>{_esc(e['process'])}</td><td>{_esc(e['seq'])}</td>"
                             f"<td>{_esc(e['kind'])}</td><td>{_esc(e['msg'])}</td></tr>")
            parts.append("</table></div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(summary, path):
    with open(path, "w") as f:
        f.write(render_html(summary))


SHIVIZ_REGEX = r"(?<event>.*)\n(?<host>\S*) (?<clock>{.*})"


def write_shiviz(checker, path, limit=None):
    """ShiViz log: for each event a description line, then `host {vector clock}`.

    Clocks are ShiViz-style event counts (own entry = seq + 1) from the checker's exact
    vector clocks. Paste into ShiViz with the default regex (SHIVIZ_REGEX).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from .causal import vector_clocks
    _, vcr = vector_clocks(checker, full=True)
    P = checker.P
    procs = checker.procs
    ev = checker.trace.df.select("process", "seq", "kind", "msg", "dests")
    recv = vcr.select("process", "seq", *[F.col(f"c{i}") for i in range(P)])
    j = ev.join(recv, ["process", "seq"], "left")
    w = Window.partitionBy("process").orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)
    j = j.select("process", "seq", "kind", "msg", "dests",
                 *[F.last(f"c{i}", True).over(w).alias(f"c{i}") for i in range(P)])
    j = j.orderBy("process", "seq")
    if limit:
        j = j.limit(limit)
    n = 0
    with open(path, "w") as f:
        for r in j.toLocalIterator():
            clock = {f"p{procs[i]}": int(r[f"c{i}"]) + 1 for i in range(P)
                     if r[f"c{i}"] is not None and procs[i] != r["process"]}
            clock[f"p{r['process']}"] = int(r["seq"]) + 1
            desc = f"{r['kind']} {r['msg'] if r['msg'] is not None else ''}".strip()
            if r["dests"]:
                desc += " to " + ",".join(f"p{d}" for d in r["dests"])
            f.write(f"{desc}\np{r['process']} {json.dumps(clock, sort_keys=True)}\n")
            n += 1
    return n
