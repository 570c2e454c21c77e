"""Smoke test of the benchmark package (tools/bench): every section runs at toy sizes and
produces sane numbers, and the report's words come from the numbers.  No speed assertions:
this box is shared and noisy."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.bench import cli, peer_targets, prose, report, report_more, sections  # noqa: E402
from tools.bench.common import SIZES, Config, machine_info  # noqa: E402


def _positive(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def cfg():
    return Config.tiny_config()


def test_each_transport_in_each_placement(cfg):
    res = sections.bench_unicast(cfg)
    names = {t.name for t in res["transports"]}
    assert {"bus1py", "bus1py send_many/recv_many", "bus1py recv(copy=False)",
            "bus1py reserve/commit + recv(copy=False)", "mp.Queue", "mp.Pipe", "os.pipe", "socketpair", "posix_ipc MQ", "faster_fifo",
            "faster_fifo get_many", "faster_fifo put_many/get_many", "pyzmq PUSH/PULL", "pyzmq PAIR",
            "pyzmq PUSH/PULL copy=False", "iceoryx2", "iceoryx2 read in place"} <= names
    assert not res["failed"], res["failed"]
    for t in res["transports"]:
        assert t.placements == ("pinned",) or set(t.placements) == {"pinned", "unpinned"}
        for pl in t.placements:
            for size in SIZES:
                r = res["rows"][(t.name, pl, size)]
                assert _positive(r["rate"]) and _positive(r["send_rate"]), (t.name, pl, size, r)
                if t.rtt:
                    assert r["rtt_n"] == cfg.n_rtt * cfg.lat_reps
                    assert 0 < r["rtt_med"] <= r["rtt_p99"] <= r["rtt_p999"], (t.name, size, r)
                else:
                    assert "rtt_med" not in r
    # every bus1py row has its one-CPU floor, shown beside its two-process figure
    bus_rows = {t.name for t in res["transports"] if t.peer == "bus1py"}
    assert set(res["floor"]) == bus_rows
    assert all(_positive(f["send_ns"]) and _positive(f["recv_ns"]) for f in res["floor"].values())
    lines = []
    report_more.floor_section(lines.append, res)
    assert all(any(line.startswith(f"| {name} |") for line in lines) for name in bus_rows)


def test_sweep_reuses_section_1_and_reports_what_a_transport_cannot_carry(cfg):
    uni = {"rows": {("os.pipe", "pinned", 64): {"rate": 1.0, "peer": "os.pipe", "api": "per-message"}},
           "failed": {}}
    res = sections.bench_sweep(cfg, uni)
    assert res["sizes"] == sorted(cfg.sweep_sizes) and res["reused"] == [64]
    assert res["rows"][("os.pipe", "pinned", 64)]["rate"] == 1.0
    for size in (65536, 1 << 20):
        for name in ("bus1py", "os.pipe", "mp.Pipe", "faster_fifo get_many"):
            assert _positive(sections.best(res["rows"], size, name=name)[1]["rate"]), (name, size)
    assert all(why for why in res["failed"].values())


def test_multicast_every_receiver_gets_every_message(cfg):
    res = sections.bench_multicast(cfg)
    for name in sections.multicast_variants():
        for k in cfg.mc_ks:
            assert _positive(res[(name, k)]["rate"]), (name, k)


def test_objects_every_receiver_gets_every_array_and_the_report_says_so(cfg, tmp_path):
    out = cli.run_all(cfg, tmp_path, "tools/bench --tiny", sections=("objects",), strict=True)
    for name in sections.object_variants():
        for k in sections.OBJ_KS:
            assert _positive(out["objects"][(name, k)]["rate"]), (name, k)
    text = out["markdown"].read_text()
    assert "## 2b. Python objects" in text and "| bus1py send_obj + obj() |" in text


def test_drain_times_every_receive_call_at_every_size_and_judges_the_ready_cost(cfg, tmp_path):
    out = cli.run_all(cfg, tmp_path, "tools/bench --tiny", sections=("drain",), strict=True)
    drain = out["drain"]
    assert set(drain) == {(api, s) for api in ("recv(copy=False)", "recv_many(copy=False)", "recv()")
                          for s in cfg.sweep_sizes}
    assert all(_positive(v) for v in drain.values())
    assert "## 1c. Receive cost against payload size" in out["markdown"].read_text()
    # the target is judged on the drained costs, both zero-copy calls within 2x
    fake = {(c, s): 1000.0 for c in ("recv(copy=False)", "recv_many(copy=False)") for s in (64, 1 << 20)}
    name = "receive CPU per message within 2x from 64 B to 1 MiB (zero-copy)"
    judged = {n: ok for n, _, ok in prose.batch_targets(None, None, None, None, fake)}
    assert judged[name] is True
    fake[("recv_many(copy=False)", 1 << 20)] = 2500.0
    judged = {n: (v, ok) for n, v, ok in prose.batch_targets(None, None, None, None, fake)}
    assert judged[name][1] is False and "`recv_many(copy=False)` 2.50x" in judged[name][0]
    # over the whole range, not only its ends: a dip in the middle counts
    fake[("recv_many(copy=False)", 1 << 20)] = 1000.0
    fake[("recv_many(copy=False)", 4096)] = 400.0
    judged = {n: (v, ok) for n, v, ok in prose.batch_targets(None, None, None, None, fake)}
    assert judged[name][1] is False and "400 ns at 4 KiB to 1,000 ns" in judged[name][0]


def test_queue_cost_memory_profile_and_report(cfg, tmp_path):
    out = cli.run_all(cfg, tmp_path, "tools/bench --tiny", sections=("queue", "memory", "profile"), strict=True)
    assert not out["errors"]
    rows = out["queue"]["rows"]
    assert [r["m"] for r in rows] == list(cfg.qc_ms)
    assert all(r["raw_ns"] > 0 and r["api_ns"] > 0 for r in rows)
    assert 0 < out["memory"]["per_peer"] < 1 << 20
    assert all(v > 0 for v in out["profile"].values())
    assert {"batch send: Peer.send_many to k=8, per message (API)",
            "batch recv: Peer.recv_many, per message (API)"} <= set(out["profile"])
    bound = prose.multicast_cpu_bound(out["profile"], [1, 8], batch=True)
    assert bound[8] < bound[1]  # eight receives a message cost more than one
    md = out["markdown"].read_text()
    assert "nproc" in md and "Queue operation cost" in md and "load average" in md
    assert (tmp_path / "queue_cost.png").stat().st_size > 1000


def _row(rate, peer, api="per-message", **kw):
    return {"rate": rate, "rates": [rate], "peer": peer, "api": api, **kw}


def test_targets_judge_the_best_placement_of_each_peer():
    rows = {("bus1py", "pinned", 64): _row(900.0, "bus1py", rtt_med=3.0, rtt_p99=4.0),
            ("bus1py", "unpinned", 64): _row(1000.0, "bus1py", rtt_med=5.0, rtt_p99=9.0),
            ("os.pipe", "pinned", 64): _row(400.0, "os.pipe"),
            ("os.pipe", "unpinned", 64): _row(500.0, "os.pipe"),
            ("faster_fifo get_many", "unpinned", 64): _row(300.0, "faster_fifo", "batch")}
    uni = {"rows": rows, "failed": {}}
    t = {name: (val, ok) for name, val, ok in prose.batch_targets(uni, None, None, None)}
    val, ok = t["64 B one-way, per-message API >= raw os.pipe"]
    assert ok and val.startswith("2.00x: bus1py (unpinned)") and "os.pipe (unpinned)" in val
    val, ok = t["64 B one-way with send_many/recv_many >= 2x faster-fifo get_many"]
    assert ok is None and "no row" in val
    val, ok = t["round-trip median <= 10 us (64 B)"]
    assert ok and val.startswith("3.0 us (pinned)")


def test_peer_targets_take_each_side_at_its_best():
    rows = {("bus1py", "pinned", 64): _row(800.0, "bus1py", rtt_med=3.0),
            ("bus1py send_many/recv_many", "pinned", 64): _row(3000.0, "bus1py", "batch"),
            ("pyzmq PUSH/PULL", "unpinned", 64): _row(1200.0, "pyzmq"),
            ("pyzmq PUSH/PULL", "pinned", 64): _row(600.0, "pyzmq"),
            ("iceoryx2", "pinned", 64): _row(300.0, "iceoryx2", rtt_med=7.0)}
    mc = {("bus1py multicast", 4): {"rate": 200.0}, ("bus1py multicast send_many/recv_many", 4): {"rate": 1300.0},
          ("pyzmq PUB/SUB", 4): {"rate": 800.0}}
    t = {name: (val, ok) for name, val, ok in peer_targets.peer_targets({"rows": rows}, None, mc, None)}
    val, ok = t["64 B one-way, per-message API >= pyzmq's"]
    assert ok is False and val.startswith("0.67x") and "PUSH/PULL (unpinned)" in val
    assert t["64 B batch >= 2x pyzmq's best 64 B row"][1] is True
    assert t["64 B round-trip median <= 1/2 iceoryx2's"][1] is True
    val, ok = t["multicast to 4, each at its best API >= 1.5x pyzmq PUB/SUB"]
    assert ok is True and "send_many/recv_many" in val
    assert t["multicast to 4, per-message API >= 0.5x pyzmq PUB/SUB"][1] is False


def test_report_keeps_the_simulator_and_checker_sections(cfg, tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    kept = "## Simulator: receive events\n\nsim numbers\n\n## Checker\n\nchecker numbers"
    md.write_text("# old\n\nold numbers\n\n## 5. old section\n\nold profile\n\n" + kept + "\n")
    report.write_markdown(md, "cmd", machine_info(), cfg,
                          {"memory": {"segments": {256: 1, 1024: 769}, "per_peer": 1.0}}, 0.0)
    text = md.read_text()
    assert "old numbers" not in text and "old profile" not in text
    assert text.rstrip().endswith(kept)
    assert "Memory per idle peer" in text


@pytest.mark.parametrize("how", [["tools/bench"], ["-m", "tools.bench"]])
def test_entry_points(how):
    r = subprocess.run([sys.executable, *how, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--quick" in r.stdout, r.stderr


@pytest.mark.timeout(120)
def test_calls_section_times_all_three_rows(cfg):
    from tools.bench.calls import ROWS, bench_calls, section
    res = bench_calls(cfg)
    assert set(res["rows"]) == set(ROWS)
    for r in res["rows"].values():
        assert r["n"] == cfg.n_rtt * cfg.lat_reps and 0 < r["rtt_med"] <= r["rtt_p99"]
    lines = []
    section(lines.append, res)
    assert any(line.startswith("| bus1py call/reply |") for line in lines)
    assert f"{res['call_over_zmq']:.2f} of pyzmq" in "\n".join(lines)


@pytest.mark.timeout(60)
def test_topic_calls_times_every_row():
    from tools.bench.topic_calls import RECV_ROWS, SEND_ROWS, measure
    best = measure(2, n=20, reps=2)
    assert set(best) == set(SEND_ROWS + RECV_ROWS) and all(_positive(v) for v in best.values())
