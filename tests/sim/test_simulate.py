"""The simulator's figures follow the definitions, and `bus1py simulate` runs the study.

The engine is pure Python; the sweep and the CLI run real Spark jobs on a local session.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from bus1py import causal
from bus1py.sim.engine import RunSpec, run
from bus1py.sim.report import aggregate
from bus1py.sim.sweep import plan, read_csv, run_sweep

BUS1PY = [sys.executable, "-m", "bus1py.cli"]


@pytest.mark.parametrize("n", [3, 10, 20])
def test_rst_unicast_carries_its_n_by_n_matrix(n):
    r = run(RunSpec("rst", n, "unicast", seed=n, warmup=5, measure=20))
    assert r["bytes_per_msg"] == 4 * n * n and r["dependents_per_msg"] == n * n
    assert r["control_msgs_per_msg"] == 0 and r["undelivered"] == 0


def test_rst_multicast_cost_is_summed_over_destinations():
    r = run(RunSpec("rst", 8, "multicast", seed=3, warmup=5, measure=40))
    assert r["bytes_per_copy"] == 4 * 64
    assert r["bytes_per_msg"] == pytest.approx(4 * 64 * r["fanout"])
    assert 1 < r["fanout"] < 7


def test_bss_broadcasts_and_pays_for_the_copies_nobody_wanted():
    n = 6
    r = run(RunSpec("bss", n, "unicast", seed=2, warmup=5, measure=20))
    assert r["bytes_per_copy"] == 4 * n
    assert r["control_msgs_per_msg"] == n - 2          # n-1 copies, one of them wanted
    assert r["bytes_per_msg"] == 4 * n * (n - 1)


def test_bus1_stamp_does_not_grow_with_n_but_costs_control_messages():
    small = run(RunSpec("bus1", 3, "unicast", seed=1, warmup=5, measure=20))
    large = run(RunSpec("bus1", 30, "unicast", seed=1, warmup=5, measure=20))
    assert small["bytes_per_copy"] == large["bytes_per_copy"] > 0
    assert small["dependents_per_copy"] == large["dependents_per_copy"] == 1
    # REPLY and SYNC_COMMIT+ACK: 3 control wires a unicast, 4 when it waits behind an earlier send
    for r in (small, large):
        assert 3 <= r["control_msgs_per_msg"] <= 4


def test_jpcy_carries_less_than_rst_and_grows_slowly():
    j10 = run(RunSpec("jpcy", 10, "unicast", seed=5, warmup=30, measure=60))
    j30 = run(RunSpec("jpcy", 30, "unicast", seed=5, warmup=30, measure=60))
    assert j10["bytes_per_msg"] < 400 / 2 and j30["bytes_per_msg"] < 3600 / 4
    assert j30["dependents_per_msg"] < 9 * j10["dependents_per_msg"]   # far from n^2


def test_a_run_is_deterministic_and_seeds_matter():
    a = run(RunSpec("ks", 5, "multicast", seed=9, warmup=5, measure=30))
    b = run(RunSpec("ks", 5, "multicast", seed=9, warmup=5, measure=30))
    c = run(RunSpec("ks", 5, "multicast", seed=10, warmup=5, measure=30))
    drop = ("seconds", "receive_events_per_s")
    strip = lambda r: {k: v for k, v in r.items() if k not in drop}   # noqa: E731
    assert strip(a) == strip(b) and strip(a) != strip(c)


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="unknown protocol 'nope'"):
        run(RunSpec("nope", 5, "unicast"))
    with pytest.raises(ValueError, match="n must be at least 2"):
        run(RunSpec("rst", 1, "unicast"))
    with pytest.raises(ValueError, match="mode"):
        run(RunSpec("rst", 4, "broadcast"))


@pytest.mark.parametrize("args, word", [
    (["--protocols", "rst,nope"], "nope"),
    (["--n", "10,1"], "--n"),
    (["--rate", "-3"], "--rate"),
    (["--net-delay", "0"], "--net-delay"),
    (["--runs", "0"], "--runs"),
    (["--n", "4,100000"], "--n"),
    (["--runs", "1000000"], "--runs"),
    (["--measure", "1000000000"], "--measure"),
    (["--warmup", "1000000000"], "--warmup"),
    (["--net-delay", "1e9"], "--net-delay"),
    (["--vary", "net_delay=0.1,1e9"], "--vary"),
    (["--mode", "anycast"], "--mode"),
])
def test_bad_arguments_exit_2_naming_the_argument(args, word, tmp_path):
    p = subprocess.run(BUS1PY + ["simulate", "--out", str(tmp_path / "r.csv"), *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert word in p.stderr
    assert not (tmp_path / "r.csv").exists()


def test_sweep_is_one_task_per_run_and_resumes(spark, tmp_path):
    out = str(tmp_path / "r.csv")
    specs = plan(["fifo", "rst"], [4, 6], ["unicast", "multicast"], 2, "quick",
                 warmup=3, measure=10)
    assert len(specs) == 2 * 2 * 2 * 2
    seen = []
    rows = run_sweep(specs, spark, out, on_done=lambda r, k, t: seen.append((k, t)))
    assert [r["protocol"] for r in rows] == [s.protocol for s in specs]
    assert seen[-1] == (16, 16)
    assert len(read_csv(out)) == 16
    # the same cell gives every protocol the same seed
    assert {r["seed"] for r in rows if r["n"] == 4 and r["mode"] == "unicast"
            and r["run"] == 0} == {specs[0].seed}
    # a CSV written before a column existed: resuming keeps its rows and adds the column
    with open(out) as f:
        old_rows = list(csv.DictReader(f))
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, [k for k in old_rows[0] if k != "posted_fraction"],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(old_rows)
    # resuming runs nothing that is already in the CSV
    more = plan(["fifo", "rst", "jpcy"], [4, 6], ["unicast", "multicast"], 2, "quick",
                warmup=3, measure=10)
    seen.clear()
    rows2 = run_sweep(more, spark, out, resume=True,
                      on_done=lambda r, k, t: seen.append((r and r["protocol"], k)))
    assert seen[0] == (None, 16) and {p for p, _ in seen[1:]} == {"jpcy"}
    kept = read_csv(out)
    assert len(kept) == 24
    assert [r["posted_fraction"] == "" for r in kept].count(True) == 16
    old = {(r["protocol"], r["n"], r["mode"], r["run"]): r["sends"] for r in rows}
    assert all(old[(r["protocol"], r["n"], r["mode"], r["run"])] == r["sends"]
               for r in rows2 if r["protocol"] != "jpcy")
    agg = aggregate(rows2)
    assert len(agg) == 3 * 2 * 2 and all(a["runs"] == 2 for a in agg)


@pytest.mark.timeout(300)
def test_simulate_cli_quick_prints_table_writes_csv_plots_and_trace(spark, tmp_path, capsys):
    # in this process, on the tests' session (a JVM's start is most of a separate
    # command's time); the grid is the smallest with both modes, both delays and jpcy
    from bus1py.cli import main
    out = tmp_path / "study" / "r.csv"
    try:
        rc = main(["simulate", "--protocols", "jpcy,bus1", "--n", "5", "--warmup", "3",
                   "--measure", "12", "--out", str(out), "--net-delay", "0.02,0.1",
                   "--trace", str(tmp_path / "traces"), "--master", "local[2]",
                   "--progress", "never"])
    finally:   # the command's session settings must not outlive it in the shared session
        spark.conf.set("spark.sql.adaptive.enabled", "false")
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    assert "unicast" in stdout and "jpcy" in stdout and "n=5" in stdout
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 1 * 2 * 2
    need = {"dependents_per_msg", "bytes_per_msg", "control_msgs_per_msg", "delay_mean",
            "delay_p99", "buffered_max"}
    assert need <= set(rows[0])
    for name in ("per_copy", "dependents", "bytes", "delay", "control", "net_delay"):
        assert os.path.getsize(tmp_path / "study" / f"{name}.png") > 10_000
    md = (tmp_path / "study" / "r.md").read_text()
    assert "| jpcy |" in md and "**multicast**, network delay mean 0.1 s" in md
    traces = sorted(os.listdir(tmp_path / "traces"))
    assert len(traces) == 8 and "jpcy-n5-multicast-r0-d0.02" in traces
    assert set(causal.PROTOCOLS) >= {r["protocol"] for r in rows}


@pytest.mark.timeout(600)
def test_simulate_sensitivity_sweep_runs_on_a_standalone_cluster(spark_cluster, tmp_path):
    """The sensitivity study's sweep (`--vary`) through `--master` on a real cluster: every
    level's runs come back, and the Markdown judges the paper's conclusions at each level."""
    out = tmp_path / "r.csv"
    p = subprocess.run(
        BUS1PY + ["simulate", "--protocols", "rst,prs,jpcy", "--n", "4,10", "--warmup", "5",
                  "--measure", "20", "--runs", "2", "--out", str(out),
                  "--vary", "net_delay=0.2", "--vary", "clock=system", "--master", spark_cluster],
        capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = read_csv(str(out))
    levels = {(r["net_delay"], r["clock"]) for r in rows}
    assert levels == {(0.05, "process"), (0.2, "process"), (0.05, "system")}
    assert len(rows) == 3 * 3 * 2 * 2 * 2
    assert all(r["undelivered"] == 0 and r["sends"] > 0 for r in rows)
    assert all((r["ci_max"] != "") == (r["protocol"] == "jpcy") for r in rows)
    md = (tmp_path / "r.md").read_text()
    for level in ("network delay 0.2 s", "send clock: one per system", "JPCY literal S4/S5"):
        assert level in md
    assert "| prs (reconstructed) |" in md and os.path.getsize(tmp_path / "per_copy.png") > 10_000
