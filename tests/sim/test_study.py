"""The study's analysis: intervals, the crossover, the send-clock reading, JPCY's CI figures,
one-factor-at-a-time plans and the sensitivity table, on real runs of the engine."""
from __future__ import annotations

import math
import random

import pytest

from bus1py import causal
from bus1py.sim import sensitivity
from bus1py.sim.ciwire import ci_stats
from bus1py.sim.engine import RunSpec, run
from bus1py.sim.report import aggregate, crossovers, label, markdown_per_copy
from bus1py.sim.stats import crossover, mean_ci, t975
from bus1py.sim.sweep import plan

TIMINGS = ("seconds", "receive_events_per_s")


def test_t_interval_uses_student_t():
    assert t975(4) == 2.776 and t975(1) == 12.706
    assert t975(100) == pytest.approx(1.984, abs=0.002)       # beyond the table
    m, h = mean_ci([1, 2, 3, 4, 5])
    assert m == 3 and h == pytest.approx(2.776 * math.sqrt(2.5 / 5))
    assert mean_ci([7.0]) == (7.0, 0.0) and mean_ci([2, 2, 2]) == (2.0, 0.0)
    with pytest.raises(ValueError):
        t975(0)


def test_crossover_is_interpolated_and_its_interval_comes_from_the_bounds():
    c = crossover([10, 20, 30], [1, 3, 5], [0.5] * 3, [2, 2, 2], [0, 0, 0])
    assert c == {"at": 15.0, "lo": 12.5, "hi": 17.5}
    assert crossover([10, 20], [5, 6], [0, 0], [1, 1], [0, 0])["at"] == -math.inf
    assert crossover([10, 20], [0, 0], [0, 0], [1, 1], [0, 0])["at"] is None
    # a dip back below moves the crossover to the last rise
    assert crossover([10, 20, 30, 40], [3, 1, 1, 3], [0] * 4, [2] * 4, [0] * 4)["at"] == 35.0


def test_system_clock_is_the_superposition_of_slower_process_clocks():
    n = 6
    a = run(RunSpec("jpcy", n, "multicast", seed=4, warmup=10, measure=60, clock="system"))
    b = run(RunSpec("jpcy", n, "multicast", seed=4, warmup=10, measure=60, send_mean=0.1 * n))
    c = run(RunSpec("jpcy", n, "multicast", seed=4, warmup=10, measure=60))
    drop = TIMINGS + ("send_mean", "clock")
    same = lambda r: {k: v for k, v in r.items() if k not in drop}   # noqa: E731
    assert same(a) == same(b) and same(a) != same(c)
    # n times fewer sends in flight: less concurrency, so less that cannot be pruned
    assert a["bytes_per_copy"] < c["bytes_per_copy"]
    with pytest.raises(ValueError, match="clock"):
        run(RunSpec("rst", 4, "unicast", clock="global"))


def test_ci_stats_read_what_the_receiver_decodes():
    rng = random.Random(3)
    n = 6
    procs = [causal.create("jpcy", i, n) for i in range(n)]
    flight, checked, most = [], 0, 0
    for _ in range(400):
        if flight and rng.random() < 0.55:
            src, dest, data = flight.pop(rng.randrange(len(flight)))
            nd, nci, empty, largest = ci_stats(data)
            rec = procs[dest]._decode(src, data)
            cim = rec[6]
            assert nd == bin(rec[5]).count("1")
            assert nci == sum(map(len, cim.values()))
            assert empty == sum(1 for row in cim.values() for D in row.values() if not D)
            assert largest == max(map(len, cim.values()), default=0) <= n - 1
            checked += 1
            most = max(most, largest)
            procs[dest].receive(src, data)
        else:
            p = rng.randrange(n)
            dests = sorted(rng.sample([q for q in range(n) if q != p], rng.randint(1, n - 1)))
            flight += [(p, d, w) for d, w in procs[p].send(dests, b"x").wires]
    assert checked > 150 and most >= 2          # components with several tuples were seen


@pytest.mark.parametrize("mode", ["unicast", "multicast"])
def test_jpcy_readings_are_recounted_from_its_wires(mode):
    n = 8
    r = run(RunSpec("jpcy", n, mode, seed=2, warmup=20, measure=80))
    assert 1 <= r["ci_max"] <= n - 1
    assert 0 < r["ci_empty_fraction"] < 1
    assert r["bytes_per_copy_indexed"] == pytest.approx(r["bytes_per_copy"] - 2 * r["ci_per_copy"])
    assert r["dependents_per_copy_literal"] == pytest.approx(r["dependents_per_copy"] + 1)
    mean_dests = r["copy_dests"] / r["data_wires"]
    assert r["bytes_per_copy_literal"] == pytest.approx(r["bytes_per_copy"] + 6 + 2 * mean_dests)
    if mode == "unicast":
        assert mean_dests == 1
    other = run(RunSpec("prs", n, mode, seed=2, warmup=20, measure=80))
    assert other["ci_max"] is None and other["bytes_per_copy_literal"] is None


def test_vary_plans_one_factor_at_a_time_with_the_baselines_seeds():
    specs = plan(["rst", "jpcy"], [4, 6], ["unicast"], 2, warmup=3, measure=5,
                 vary=[("net_delay", [0.01, 0.05]), ("clock", ["system"])])
    levels = {(s.net_delay, s.clock) for s in specs}
    assert levels == {(0.05, "process"), (0.01, "process"), (0.05, "system")}
    assert len(specs) == 3 * 2 * 2 * 2
    seed = {(s.protocol, s.n, s.run, s.clock): s.seed for s in specs if s.net_delay == 0.05}
    assert all(seed[(p, n, r, "system")] == seed[(p, n, r, "process")]
               for (p, n, r, c) in seed if c == "process")
    with pytest.raises(ValueError, match="cannot vary 'rate'"):
        plan(["rst"], [4], ["unicast"], 1, vary=[("rate", [1.0])])


@pytest.fixture(scope="module")
def small_study():
    """rst, prs, jpcy at n = 6, 10, 14, both modes, 3 runs; and the system clock."""
    specs = plan(["rst", "prs", "jpcy"], [6, 10, 14], ["unicast", "multicast"], 3,
                 warmup=20, measure=60, vary=[("clock", ["system"])])
    return aggregate([run(s) for s in specs])


def test_per_copy_table_labels_the_reconstruction_and_gives_intervals(small_study):
    md = markdown_per_copy([a for a in small_study if a["clock"] == "process"])
    assert "| prs (reconstructed) |" in md and "| prs |" not in md
    assert "| rst | 36.0 / 144 | 100 / 400 | 196 / 784 |" in md      # exact: no interval
    assert " ± " in md                                                # the others vary by run
    assert label("jpcy") == "jpcy"


def test_crossover_of_the_reconstruction_lies_between_its_samples(small_study):
    uni = [c for c in crossovers(small_study) if c["mode"] == "unicast"][0]
    r = uni["ratio"]
    assert r[6] < 1 < r[14]                         # below RST at n=6, above at n=14
    assert 6 < uni["lo"] <= uni["at"] <= uni["hi"] < 14


def test_sensitivity_table_has_a_column_per_level_and_judges_each(small_study):
    ev = dict(sensitivity.evaluate(small_study))
    assert list(ev)[0].startswith("baseline") and "send clock: one per system" in ev
    assert {"JPCY sender-indexed CI", "JPCY literal S4/S5 order"} <= set(ev)
    base = dict((t, (ok, fig)) for t, ok, fig in ev[list(ev)[0]])
    assert base["JPCY carries the fewest dependents"][0] is True
    assert base["PRS dependents approach ⅔n² from below"][0] is False   # 0.7n² and up
    # dropping 2 bytes per CI tuple makes a JPCY dependent smaller than PRS's 6 bytes
    idx = dict((t, ok) for t, ok, _ in ev["JPCY sender-indexed CI"])
    assert base["one dependent: JPCY > PRS > RST bytes"][0] is True
    assert idx["one dependent: JPCY > PRS > RST bytes"] is False
    md = sensitivity.table(small_study)
    assert md.count("\n") == 2 + len(sensitivity.CONCLUSIONS)
    assert "PRS (reconstructed) > RST" in md
