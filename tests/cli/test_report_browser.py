"""The HTML report as a person sees it: rendered by headless Chromium (Debian's `chromium`),
measured from the DOM. The page never scrolls sideways (a wide diagram scrolls inside its
own box), no text box of a diagram overlaps another or sticks out of its diagram, and no
arrowhead lands on a label."""
import json
import os
import shutil
import subprocess

import pytest

from tests.cli.conftest import bus1py

MEASURE = """<script>
const out = {page_overflow: document.documentElement.scrollWidth
                            - document.documentElement.clientWidth,
             clipped: [], overlaps: [], figures: document.querySelectorAll('svg').length};
for (const svg of document.querySelectorAll('svg')) {
  const s = svg.getBoundingClientRect();
  const boxes = [...svg.querySelectorAll('text')]
    .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, b]) => b.width > 0);
  for (const [text, b] of boxes)
    if (b.left < s.left - 0.5 || b.right > s.right + 0.5 || b.top < s.top - 0.5
        || b.bottom > s.bottom + 0.5) out.clipped.push(text);
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++) {
      const [ta, a] = boxes[i], [tb, b] = boxes[j];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 1) out.overlaps.push([ta, tb]);
    }
}
// an arrowhead (the 8 px marker at a message line's end) never covers a label
out.covered = [];
out.arrows = document.querySelectorAll('line[marker-end]').length;
for (const line of document.querySelectorAll('line[marker-end]')) {
  const m = line.getScreenCTM(), svg = line.ownerSVGElement;
  const p = svg.createSVGPoint();
  p.x = +line.getAttribute('x2'); p.y = +line.getAttribute('y2');
  const tip = p.matrixTransform(m);
  for (const t of svg.querySelectorAll('text')) {
    const b = t.getBoundingClientRect();
    if (b.width > 0 && tip.x > b.left + 1 && tip.x < b.right - 1 && tip.y > b.top + 1
        && tip.y < b.bottom - 1) out.covered.push(t.textContent);
  }
}
const pre = document.createElement('pre');
pre.id = 'measured';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def chromium():
    exe = shutil.which("chromium")
    if exe is None and not os.environ.get("CI"):
        pytest.skip("no chromium (.ci/run installs Debian's)")
    assert exe, "chromium is not installed"
    return exe


def measure(html_path, tmp_path, width=1280):
    page = tmp_path / "measured.html"
    page.write_text(open(html_path).read().replace("</body>", MEASURE + "</body>"))
    cp = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--window-size={width},900", "--virtual-time-budget=3000", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    start = cp.stdout.index('<pre id="measured">') + len('<pre id="measured">')
    return json.loads(cp.stdout[start:cp.stdout.index("</pre>", start)]
                      .replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


@pytest.mark.timeout(300)
def test_report_of_a_run_with_violations_reads_cleanly(tmp_path):
    # pipes: causal and consistent violations, so every kind of diagram is drawn; the stress
    # summary beside the trace puts the run's table in the report
    trace = str(tmp_path / "t")
    cp = bus1py("stress", "-n", "8", "--messages", "300", "--seed", "2", "-q", "--trace", trace,
                "--transport", "pipe", "--json", str(tmp_path / "stress.json"))
    assert cp.returncode == 0, cp.stderr
    report = str(tmp_path / "r.html")
    cp = bus1py("check", trace, "--report", report, "--json", str(tmp_path / "s.json"),
                "--progress", "never")
    assert cp.returncode == 1, cp.stderr
    # a consistency counterexample names the senders of its messages, so they are drawn
    for ex in json.loads((tmp_path / "s.json").read_text())["properties"]["consistent"][
            "examples"]:
        sent = {e["msg"] for e in ex["events"] if e["kind"] == "send"}
        assert set(ex["cycle"]) <= sent, ex
    m = measure(report, tmp_path)
    assert m["figures"] >= 3, m
    assert m["page_overflow"] <= 0, m
    assert m["clipped"] == [], m["clipped"]
    assert m["overlaps"] == [], m["overlaps"][:20]
    assert m["arrows"] > 0 and m["covered"] == [], (m["arrows"], m["covered"][:20])


def test_report_tables_and_bins_read_as_written():
    from bus1py.check.report import _latency_label, render_html
    # latency bins: powers of two microseconds, each end in the unit that reads
    assert [_latency_label(b) for b in (0, 1, 11, 20)] == [
        "< 1 µs", "1 µs – 2 µs", "1.02 ms – 2.05 ms", "524 ms – 1.05 s"]
    # an example that names an event twice (on its path and as a delivery) lists it once
    send = {"process": 0, "seq": 1, "kind": "send", "msg": 7, "message": "p0:1"}
    deliver = {"process": 1, "seq": 2, "kind": "deliver", "msg": 7, "message": "p0:1"}
    props = {p: {"ok": True, "violations": 0, "examples": []} for p in
             ("exactly_once", "fifo", "consistent", "node_rules")}
    props["causal"] = {"ok": False, "violations": 1, "examples": [
        {"why": "w", "events": [send, deliver, send], "highlight": [7]}]}
    html = render_html({"ok": False, "trace": "t", "events": 2, "processes": 2,
                        "seconds": 0.1, "properties": props})
    assert html.count("<tr><td>0</td><td>1</td><td>send</td>") == 1


@pytest.mark.timeout(120)
def test_no_arrowhead_lands_on_a_label_whatever_the_angle(tmp_path):
    # a path's arrows from every row below and above into a column next to their sender:
    # the steepest arrows a diagram of 8 processes draws, stopped short of a ringed dot
    from bus1py.check.report import render_html
    examples = []
    for far in (1, 4, 7):
        for down in (False, True):
            src, dst = (0, far) if down else (far, 0)
            send = {"process": src, "seq": 1, "kind": "send", "msg": far, "message": f"m{far}"}
            deliver = {"process": dst, "seq": 2, "kind": "deliver", "msg": far,
                       "message": f"m{far}"}
            # the processes between them have events too, so their rows lie between
            others = [{"process": q, "seq": 1, "kind": "send", "msg": 100 + q,
                       "message": f"x{q}"} for q in range(1, far)]
            examples.append({"why": "w", "events": [send, deliver] + others, "highlight": [far],
                             "path": [send, deliver]})
    props = {p: {"ok": True, "violations": 0, "examples": []} for p in
             ("exactly_once", "fifo", "consistent", "node_rules")}
    props["causal"] = {"ok": False, "violations": len(examples), "examples": examples}
    report = tmp_path / "r.html"
    report.write_text(render_html({"ok": False, "trace": "t", "events": 12, "processes": 8,
                                   "seconds": 0.1, "properties": props}))
    m = measure(report, tmp_path)
    assert m["arrows"] >= len(examples), m
    assert m["covered"] == [], m["covered"]
    assert m["overlaps"] == [] and m["clipped"] == [], m
