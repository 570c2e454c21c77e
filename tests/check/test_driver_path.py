# Invariants: the driver-only path (arrays/) agrees with the brute-force
# reference on every trace Hypothesis draws (correct ones, every planted fault kind,
# causality cycles), trace by trace; its JSON summary and HTML report are those of the
# Spark path by message, whole (every example, every path, the overview), on
# planted-violation and clean batches; it names malformed traces with the Spark path's
# words (test_check_cli.py runs both); it never imports pyspark, nor hands a trace to
# Spark; and `--master` runs the check by message on a real standalone cluster.
import json
import random
import subprocess
import sys

import pytest
from hypothesis import strategies as st

from bus1py.check.load import read_footers
from bus1py.check.arrays.whole import check_local
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, mutate, offset_rows, simulate
from bus1py.check.summary import PROPERTIES, judge
from bus1py.cli import main
from bus1py.schema import write_rows as write_trace
from drawn import gather, make_trace as _make, params
from test_paths import _acyclic, _causal_through_a_signal, assert_examples_explained

SPAN = 1000
PLANTED = dict(nprocs=4, steps=60, p_multicast=0.3, p_signal=0.15, p_destroy=0.05)  # + seed


def _clean(n):
    return [_make(p) for p in gather(n, params)]


def _faulty(n):
    got = gather(n, st.tuples(params.filter(lambda p: p["nprocs"] >= 3 and p["steps"] >= 20),
                              st.sampled_from(MUTATIONS)))
    # every mutation kind at least once, whatever Hypothesis drew
    got += [(dict(got[0][0], seed=got[0][0]["seed"] + i), m) for i, m in enumerate(MUTATIONS)]
    return [_make(p, m) for p, m in got]


def _covering(traces):
    """For each property that no acyclic one of `traces` violates, the first acyclic trace
    with a planted fault (fixed seeds) that the reference finds violating it: with them,
    a batch violates every property whatever was drawn."""
    found = {k for rows in traces if _acyclic(rows) for k, v in reference_check(rows).items() if v}
    missing, extra = set(reference_check([])) - found, []
    for seed in range(1000):
        if not missing:
            return extra
        for m in MUTATIONS:
            rows = _make(dict(PLANTED, seed=seed), m)
            hit = {k for k, v in reference_check(rows).items() if v} & missing
            if hit and _acyclic(rows):
                extra.append(rows)
                missing -= hit
    raise AssertionError(f"no planted fault violates {sorted(missing)}")


def _batch(traces, path):
    combined = []
    for k, rows in enumerate(traces):
        combined += offset_rows(rows, k, SPAN)
    write_trace(combined, str(path), files=3)
    return combined


@pytest.mark.timeout(300)
def test_driver_path_agrees_with_reference_trace_by_trace(tmp_path):
    faulty = _faulty(30)
    traces = _clean(25) + faulty + _covering(faulty) + [_causal_through_a_signal()]
    found = {name: 0 for name in ("exactly_once", "fifo", "causal", "consistent",
                                  "node_rules")}
    for k, rows in enumerate(traces):
        write_trace(rows, str(tmp_path / str(k)), files=2)
        summary, details = check_local(read_footers(str(tmp_path / str(k))),
                                       max_examples=50, keep_details=True)
        got = {name: len(v) if v is not None else 0 for name, v in details.items()}
        assert got == reference_check(rows), (k, rows)
        assert {n: p["violations"] for n, p in summary["properties"].items()} == got
        assert_examples_explained(summary, rows)
        for name, n in got.items():
            found[name] += n
    # the batch really held violations of every property, or the test proves little
    assert all(found.values()), found


def _cli(trace, out, *extra):
    rc = main(["check", str(trace), "--json", str(out) + ".json", "--report",
               str(out) + ".html", "--examples", "100", "--progress", "never", *extra])
    with open(str(out) + ".json") as f:
        summary = json.load(f)
    with open(str(out) + ".html") as f:
        page = f.read()
    return rc, summary, page


def _same_reports(spark_run, driver_run):
    (rc_s, s, page_s), (rc_d, d, page_d) = spark_run, driver_run
    assert rc_s == rc_d
    assert "session_ready" in s["timings"] and "session_ready" not in d["timings"]
    pages = []
    for summary, page in ((s, page_s), (d, page_d)):   # the seconds say how, not what
        pages.append(page.replace(f"checked in {summary.pop('seconds')} s", ""))
        summary.pop("timings")
    assert d == s
    assert pages[0] == pages[1]


@pytest.mark.timeout(400)
def test_reports_are_the_same_from_either_engine(spark, tmp_path):
    faulty = _faulty(12)
    faulty += _covering(faulty)
    for name, batch in (("faulty", faulty), ("clean", _clean(6))):
        trace = tmp_path / name
        _batch(batch, trace)
        spark_run = _cli(trace, tmp_path / f"{name}-spark", "--spark")
        driver_run = _cli(trace, tmp_path / f"{name}-driver")
        if name == "faulty":   # every property violated, or the comparison proves little
            assert spark_run[0] == 1 and all(
                p["violations"] for p in spark_run[1]["properties"].values())
        else:
            assert spark_run[0] == 0
        assert spark_run[1]["overview"]["window"]
        _same_reports(spark_run, driver_run)


def test_a_causality_cycle_is_decided_on_the_driver(tmp_path):
    # p0 delivers m2 and then sends m1; p1 delivers m1 and then sends m2: each send
    # happened-before the other, which only a broken trace can say
    rows = [{"process": 0, "seq": 0, "kind": "deliver", "msg": 2},
            {"process": 0, "seq": 1, "kind": "send", "msg": 1, "dests": [1]},
            {"process": 1, "seq": 0, "kind": "deliver", "msg": 1},
            {"process": 1, "seq": 1, "kind": "send", "msg": 2, "dests": [0]}]
    write_trace(rows, str(tmp_path / "t"))
    rc = main(["check", str(tmp_path / "t"), "--json", str(tmp_path / "s.json"),
               "--progress", "never"])
    summary = json.loads((tmp_path / "s.json").read_text())
    # no Spark session was started, and the relaxation decided causal
    assert "session_ready" not in summary["timings"]
    assert "kernel_causal_rounds" in summary["timings"], summary["timings"]
    assert rc == 0 and summary["ok"]


def test_a_small_check_never_imports_pyspark(tmp_path):
    write_trace(simulate(random.Random(2), nprocs=3, steps=30), str(tmp_path / "t"))
    code = ("import sys; from bus1py.cli import main; "
            f"rc = main(['check', {str(tmp_path / 't')!r}, '--report', "
            f"{str(tmp_path / 'r.html')!r}]); "
            "print(rc, any(m.startswith('pyspark') for m in sys.modules))")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120)
    assert cp.stdout.strip().splitlines()[-1] == "0 False", cp.stdout + cp.stderr


@pytest.mark.timeout(600)
def test_check_on_a_standalone_cluster(spark, spark_cluster, tmp_path):
    # one process on the cluster (its session and executors start once) runs: the command
    # twice (--exact changes nothing), then the path by message (spark/by_message.py: the
    # link in tasks by id writing the linked events to files, each process's events
    # gathered into a file of its own, the streamed walk by three column blocks in three
    # tasks reading them, spark/walk_blocks.py; a cyclic history's walk by the layout) on
    # a batch of drawn traces, stamped, unstamped and cyclic, in more files than the
    # split has tasks (so a task splits several)
    from bus1py.check.spark.by_message import SPLIT_TASKS_A_CORE
    from test_by_message import SPAN, _batch, _summary_and_counts, _write
    rng = random.Random(4)
    rows = mutate(simulate(rng, nprocs=4, steps=50, p_signal=0.2), "swap", rng)
    write_trace(rows, str(tmp_path / "t"))
    batch = _batch(2, 5000)
    _write(batch, str(tmp_path / "u"), files=3 * SPLIT_TASKS_A_CORE * 2)   # 2 cores
    runs = [(), ("--exact",)]
    code = f"""
import json
from bus1py.cli import main
from bus1py.check.load import load_trace
from bus1py.check.spark.checker import check_trace
from bus1py.spark_session import get_session
rcs = [main(["check", {str(tmp_path / "t")!r}, "--master", {spark_cluster!r}, "--json",
             {str(tmp_path)!r} + f"/cluster{{i}}.json", "--progress", "never", *extra])
       for i, extra in enumerate({runs!r})]
spark = get_session({spark_cluster!r})
s, c = check_trace(spark, load_trace(spark, {str(tmp_path / "u")!r}), group_span={SPAN},
                   max_examples=50, keep_details=True, walk_blocks=3)
s["per"] = sorted((r["process"], n) for n, v in c.details.items() if v is not None
                  for r in v.collect())
print(json.dumps({{"rcs": rcs, "by_message": s}}))
"""
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=500)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-4000:]
    assert cp.stderr == "", cp.stderr          # nothing from Spark or the JVM
    got = json.loads(cp.stdout.strip().splitlines()[-1])
    assert got["rcs"] == [1, 1]
    summary, _ = check_local(read_footers(str(tmp_path / "t")), max_examples=3)
    judge(summary)  # as the command judges it (every property promised by default)
    summary.pop("seconds")
    summary.pop("timings")
    assert not summary["ok"]
    for i, _ in enumerate(runs):
        on_cluster = json.loads((tmp_path / f"cluster{i}.json").read_text())
        assert "walk" in on_cluster["timings"], on_cluster["timings"]
        on_cluster.pop("seconds")
        on_cluster.pop("timings")
        assert on_cluster == summary
    spread = got["by_message"]
    timings = spread.pop("timings")
    assert "by_message" in timings and "per_process" in timings, timings
    spread.pop("seconds")
    per = {}
    for p, name in spread.pop("per"):
        per[(p // SPAN, name)] = per.get((p // SPAN, name), 0) + 1
    whole, per_whole, _ = _summary_and_counts(None, str(tmp_path / "u"), max_examples=50)
    assert spread == whole and per == per_whole
    for k, trace in enumerate(batch):
        assert {n: per.get((k, n), 0) for n in PROPERTIES} == reference_check(trace), k
