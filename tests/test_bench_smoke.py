"""Smoke test of the benchmark harness (tools/bench.py): every section runs at toy sizes and
produces sane numbers.  No speed assertions: this box is shared and noisy."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bus1py_bench", ROOT / "tools" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _positive(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_each_transport_one_way_and_round_trip(bench):
    cfg = bench.Config.tiny_config()
    res = bench.bench_unicast(cfg)
    names = set(bench.unicast_channels())
    assert {"bus1py", "mp.Queue", "mp.Pipe", "os.pipe", "socketpair", "posix_ipc MQ", "faster_fifo"} <= names
    for size in bench.SIZES:
        for name in names:
            r = res[(name, size)]
            assert _positive(r["rate"]) and _positive(r["send_rate"]), (name, size, r)
            assert r["rtt_n"] == cfg.n_rtt * cfg.lat_reps
            assert 0 < r["rtt_med"] <= r["rtt_p99"] <= r["rtt_p999"], (name, size, r)


def test_multicast_every_receiver_gets_every_message(bench):
    cfg = bench.Config.tiny_config()
    res = bench.bench_multicast(cfg)
    for name in bench.multicast_variants():
        for k in cfg.mc_ks:
            assert _positive(res[(name, k)]["rate"]), (name, k)


def test_queue_cost_memory_profile_and_report(bench, tmp_path):
    cfg = bench.Config.tiny_config()
    out = bench.run_all(cfg, tmp_path, "tools/bench.py --tiny", sections=("queue", "memory", "profile"),
                        strict=True)
    assert not out["errors"]
    rows = out["queue"]["rows"]
    assert [r["m"] for r in rows] == list(cfg.qc_ms)
    assert all(r["raw_ns"] > 0 and r["api_ns"] > 0 for r in rows)
    assert 0 < out["memory"]["per_peer"] < 1 << 20
    assert all(v > 0 for v in out["profile"].values())
    md = out["markdown"].read_text()
    assert "nproc" in md and "Queue operation cost" in md
    assert (tmp_path / "queue_cost.png").stat().st_size > 1000


def test_report_keeps_checker_section(bench, tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# old\n\nold numbers\n\n## Checker\n\nchecker numbers\n")
    bench.write_markdown(md, "cmd", bench.machine_info(), bench.Config.tiny_config(),
                         None, None, None, {"segments": {256: 1, 1024: 769}, "per_peer": 1.0},
                         None, None, [], [], 0.0)
    text = md.read_text()
    assert "old numbers" not in text
    assert text.rstrip().endswith("## Checker\n\nchecker numbers")
    assert "Memory per idle peer" in text
