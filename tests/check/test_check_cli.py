# Invariants: the `bus1py check` command is driven exactly as a user runs it (bus1py.cli.main
# with argv), on real Parquet files, in the shared Spark session; exit codes 0/1/2, the JSON
# summary shape, the HTML report and the ShiViz export are all asserted on content.
import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bus1py.check.simulate import mutate, simulate
from bus1py.schema import schema
from bus1py.schema import write_rows as write_trace
from bus1py.cli import main

pytestmark = pytest.mark.timeout(300)


def _row(process, seq, kind, msg=None, dests=None, node=None, stamp=None):
    return {"process": process, "seq": seq, "kind": kind, "msg": msg, "dests": dests,
            "node": node, "wall_ns": 0, "stamp_ts": stamp[0] if stamp else None,
            "stamp_peer": stamp[1] if stamp else None, "stamp_tx": stamp[2] if stamp else None}


def three_way_cycle():
    # process 3 sends a, b, c; each of 0, 1, 2 receives two of them. Every pair of
    # processes agrees on the messages they share, but a<b, b<c, c<a: no global order.
    a, b, c = 10, 11, 12
    return [
        _row(3, 0, "send", a, [0, 2]), _row(3, 1, "send", b, [0, 1]),
        _row(3, 2, "send", c, [1, 2]),
        _row(0, 0, "deliver", a), _row(0, 1, "deliver", b),
        _row(1, 0, "deliver", b), _row(1, 1, "deliver", c),
        _row(2, 0, "deliver", c), _row(2, 1, "deliver", a),
    ]


def test_correct_trace_exits_0_with_json_and_shiviz(spark, tmp_path, capsys):
    rows = simulate(random.Random(7), nprocs=4, steps=80, p_signal=0.2, p_destroy=0.1)
    write_trace(rows, str(tmp_path / "t"))
    rc = main(["check", str(tmp_path / "t"), "--json", str(tmp_path / "s.json"),
               "--shiviz", str(tmp_path / "log.shiviz"), "--progress", "never"])
    assert rc == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["properties"]) == {"exactly_once", "fifo", "causal", "consistent",
                                          "node_rules"}
    for p in summary["properties"].values():
        assert p == {**p, "ok": True, "violations": 0, "examples": []}
    assert summary["events"] == len(rows)
    # ShiViz: description line, then `host {clock}`; own entry counts events (seq + 1), and
    # a delivery's clock dominates its send's clock.
    lines = (tmp_path / "log.shiviz").read_text().splitlines()
    assert len(lines) == 2 * len(rows)
    clocks = {}
    for desc, hc in zip(lines[::2], lines[1::2]):
        m = re.fullmatch(r"(p\d+) (\{.*\})", hc)
        assert m, hc
        clk = json.loads(m.group(2))
        kind, _, rest = desc.partition(" ")
        clocks.setdefault(m.group(1), []).append((kind, rest.split(" ")[0], clk))
    for host, evs in clocks.items():
        assert [c[host] for _, _, c in evs] == list(range(1, len(evs) + 1))
    sent = {(k, msg): (h, c) for h, evs in clocks.items() for k, msg, c in evs
            if k in ("send", "destroy")}
    n = 0
    for h, evs in clocks.items():
        for k, msg, c in evs:
            if k == "deliver":
                src = sent.get(("send", msg)) or sent.get(("destroy", msg))
                sh, sc = src
                assert all(c.get(x, 0) >= v for x, v in sc.items()), (msg, sc, c)
                n += 1
    assert n > 0


def test_three_way_cycle_is_inconsistent_with_cycle_counterexample(spark, tmp_path, capsys):
    write_trace(three_way_cycle(), str(tmp_path / "t"), files=1)
    rc = main(["check", str(tmp_path / "t"), "--json", str(tmp_path / "s.json"),
               "--report", str(tmp_path / "r.html"), "--progress", "never", "--spark"])
    assert rc == 1
    s = json.loads((tmp_path / "s.json").read_text())
    cons = s["properties"]["consistent"]
    assert cons["ok"] is False and cons["violations"] == 1
    assert sorted(cons["examples"][0]["cycle"]) == [10, 11, 12]
    # pairwise consistent, FIFO-respecting from the one sender? No: 3 sent a<b<c, and
    # process 2 delivers c before a -- FIFO (and so causal) must flag exactly that delivery.
    assert s["properties"]["fifo"]["violations"] == 1
    assert s["properties"]["exactly_once"]["ok"] is True
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "VIOLATED" in html and "cycle of messages" in html
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    out = capsys.readouterr().out
    assert "FAIL consistent" in out


def test_pairwise_cycle_from_three_senders(spark, tmp_path):
    # the same cycle but each message from its own sender: FIFO and causal hold, only the
    # global order fails
    rows = [_row(3, 0, "send", 10, [0, 2]), _row(4, 0, "send", 11, [0, 1]),
            _row(5, 0, "send", 12, [1, 2]),
            _row(0, 0, "deliver", 10), _row(0, 1, "deliver", 11),
            _row(1, 0, "deliver", 11), _row(1, 1, "deliver", 12),
            _row(2, 0, "deliver", 12), _row(2, 1, "deliver", 10)]
    write_trace(rows, str(tmp_path / "t"), files=2)
    rc = main(["check", str(tmp_path / "t"), "--json", str(tmp_path / "s.json"),
               "--progress", "never"])
    assert rc == 1
    p = json.loads((tmp_path / "s.json").read_text())["properties"]
    assert [k for k, v in p.items() if not v["ok"]] == ["consistent"]


def test_planted_faults_produce_report_with_diagrams(spark, tmp_path):
    rng = random.Random(3)
    rows = mutate(simulate(rng, nprocs=4, steps=60), "swap", rng)
    rows = mutate(rows, "lose", rng)
    write_trace(rows, str(tmp_path / "t"))
    rc = main(["check", str(tmp_path / "t"), "--json", str(tmp_path / "s.json"),
               "--report", str(tmp_path / "r.html"), "--progress", "never"])
    assert rc == 1
    s = json.loads((tmp_path / "s.json").read_text())
    bad = [k for k, v in s["properties"].items() if not v["ok"]]
    assert "exactly_once" in bad
    html = (tmp_path / "r.html").read_text()
    for k in bad:
        assert f"id='{k}'" in html
        ex = s["properties"][k]["examples"][0]
        assert ex["events"] and all({"process", "seq", "kind", "msg"} <= set(e)
                                    for e in ex["events"])
    assert html.count("<svg") >= len(bad)


# ---------------------------------------------------------------- malformed traces: exit 2

def _write(path, table, name="part-0.parquet"):
    path.mkdir(exist_ok=True)
    pq.write_table(table, str(path / name))


def _good_rows():
    return [_row(0, 0, "send", 1, [1], 5), _row(1, 0, "deliver", 1, None, 5)]


def _table(rows, schema=schema()):
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)


def _expect_2(tmp_path, capsys, *needles, engine=()):
    rc = main(["check", str(tmp_path / "bad"), "--progress", "never", *engine])
    err = capsys.readouterr().err
    assert rc == 2, err
    for n in needles:
        assert n in err, err
    return err


def test_missing_column(spark, tmp_path, capsys):
    t = _table(_good_rows()).drop_columns(["kind"])
    _write(tmp_path / "bad", t, "x.parquet")
    _expect_2(tmp_path, capsys, "x.parquet", "missing column 'kind'")


def test_wrong_type(spark, tmp_path, capsys):
    t = _table(_good_rows())
    t = t.set_column(0, "process", pa.array([0, 1], pa.int64()))
    _write(tmp_path / "bad", t, "y.parquet")
    _expect_2(tmp_path, capsys, "y.parquet", "'process'", "int64", "int32")


@pytest.mark.parametrize("rows,needles", [
    ([_row(0, 0, "send", 1, [1]), _row(0, 2, "internal"), _row(1, 0, "deliver", 1)],
     ("'seq'", "process 0", "gap")),
    ([_row(0, 0, "send", 1, [1]), _row(0, 0, "internal"), _row(1, 0, "deliver", 1)],
     ("'seq'", "duplicate seq 0")),
    ([_row(0, 0, "send", 1, [1]), _row(1, 0, "deliver", 99)],
     ("'msg'", "unknown message 99")),
    ([_row(0, 0, "send", 1, [1]), _row(1, 0, "teleport", 1)],
     ("'kind'", "teleport")),
    ([_row(0, 0, "send", None, [1]), _row(1, 0, "internal")],
     ("'msg' is null",)),
    ([_row(0, 0, "send", 1, []), _row(1, 0, "internal")],
     ("'dests'",)),
    ([_row(0, 0, "send", 1, [1]), _row(0, 1, "send", 1, [1]), _row(1, 0, "deliver", 1)],
     ("'msg'", "message id 1")),
    ([_row(0, 0, "signal_recv", 4)], ("unknown signal 4",)),
])
@pytest.mark.parametrize("engine", [(), ("--spark",)], ids=["driver", "spark"])
def test_malformed_rows(spark, tmp_path, capsys, rows, needles, engine):
    _write(tmp_path / "bad", _table(rows), "z.parquet")
    err = _expect_2(tmp_path, capsys, "z.parquet", *needles, engine=engine)
    # both engines name the same row with the same words
    assert err.count("\n") == 1, err


def test_not_a_trace(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.parquet").write_bytes(b"not parquet at all")
    _expect_2(tmp_path, capsys, "a.parquet", "cannot read Parquet footer")
    rc = main(["check", str(tmp_path / "nowhere")])
    assert rc == 2


def test_clean_run_report_shows_the_run(spark, tmp_path):
    rows = simulate(random.Random(3), nprocs=3, steps=40, p_signal=0.2)
    trace = tmp_path / "run" / "trace"
    write_trace(rows, str(trace))
    stress = {"processes": 3, "sent": 40, "latency_us": {"p50": 12.5, "p99": 80.0},
              "errors": {}, "per_process": [{"ignored": 1}]}
    (tmp_path / "run" / "stress.json").write_text(json.dumps(stress))
    rc = main(["check", str(trace), "--json", str(tmp_path / "s.json"),
               "--report", str(tmp_path / "r.html"), "--progress", "never"])
    assert rc == 0
    ov = json.loads((tmp_path / "s.json").read_text())["overview"]
    per = {}
    for r in rows:
        per[str(r["process"])] = per.get(str(r["process"]), 0) + 1
    assert ov["events_per_process"] == per
    deliveries = sum(r["kind"] == "deliver" for r in rows)
    assert sum(ov["latency_log2_us"].values()) == deliveries
    assert ov["stress"]["latency_us"] == {"p50": 12.5, "p99": 80.0}
    assert "per_process" not in ov["stress"]
    assert ov["window"] and all(e["seq"] < 8 for e in ov["window"])
    html = (tmp_path / "r.html").read_text()
    assert "the stress tool" in html and "<td>latency p99</td><td style='text-align:right'>80 µs" in html
    assert "events per process" in html and "delivery latency" in html
    assert html.count("<svg") >= 3 and "<script" not in html
