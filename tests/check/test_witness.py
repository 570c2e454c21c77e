# Invariants: the stamp witness is a fast path, never a verdict of its own. These tests pin
# down *which path decided*: correct-bus traces with side channels (where a process may send,
# after a signal, a message stamped below what the signaller knew -- legal in bus1 when the
# two messages share no destination) must be decided by the witness; a planted causal
# violation that is only visible through knowledge carried by deliveries and then a signal
# must make the witness fail, and the exact path must count it. The wall-clock acyclicity
# certificate must be checked before the witness uses it.
import random

from bus1py.check.load import load_trace
from bus1py.check.spark.checker import check_trace
from bus1py.check.reference import reference_check
from bus1py.check.simulate import offset_rows, simulate
from bus1py.schema import write_rows as write_trace


def _row(process, seq, kind, msg=None, dests=None, stamp=None, wall=0):
    return {"process": process, "seq": seq, "kind": kind, "msg": msg, "dests": dests,
            "node": None, "wall_ns": wall, "stamp_ts": stamp[0] if stamp else None,
            "stamp_peer": stamp[1] if stamp else None, "stamp_tx": stamp[2] if stamp else None}


def _check(spark, tmp_path, rows, name="t", **kw):
    # these traces are about the witness and the Spark formulations: keep them off the
    # driver's exact walk, which would decide such small traces first
    write_trace(rows, str(tmp_path / name), files=2)
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / name)),
                                   driver_max_cells=0, **kw)
    checker.unpersist()
    return summary


def _methods(summary):
    return {k: summary["properties"][k].get("method") for k in ("causal", "consistent")}


def chain(m2_dest, m2_stamp, d_order, signal_walls=(140, 150)):
    # 0 sends m1 to {4, 1}; 1 delivers it and sends m' to 2; 2 delivers m' and signals 3;
    # 3 then sends m2. Process 2 knows (through two deliveries) that a message to 4 carries
    # stamp 10 -- if m2 goes to 4 with a lower stamp, 4 delivers m2 first: a causal
    # violation no single delivery or signal shows.
    xw, yw = signal_walls
    rows = [_row(0, 0, "send", 1, [1, 4], (10, 0, 0), 100),
            _row(1, 0, "deliver", 1, stamp=(10, 0, 0), wall=110),
            _row(1, 1, "send", 2, [2], (20, 1, 0), 120),
            _row(2, 0, "deliver", 2, stamp=(20, 1, 0), wall=130),
            _row(2, 1, "signal_send", 100, wall=xw),
            _row(3, 0, "signal_recv", 100, wall=yw),
            _row(3, 1, "send", 3, [m2_dest], (m2_stamp, 3, 0), 160)]
    for i, m in enumerate(d_order):
        rows.append(_row(4 if m2_dest == 4 or m == 1 else m2_dest, 0, "deliver", m,
                         stamp={1: (10, 0, 0), 3: (m2_stamp, 3, 0)}[m], wall=170 + 10 * i))
    by = {}
    for r in rows:                         # renumber seq per process in list order
        r["seq"] = by.setdefault(r["process"], 0)
        by[r["process"]] += 1
    return rows


def test_low_stamp_after_signal_to_other_destination_takes_fast_path(spark, tmp_path):
    # legal bus1: m2 (stamp 5) goes to 0, which shares no destination with m1 or m'
    rows = chain(m2_dest=0, m2_stamp=5, d_order=(1, 3))
    assert reference_check(rows)["causal"] == 0
    s = _check(spark, tmp_path, rows)
    assert s["ok"] and s["witness"] == "holds", s["witness"]
    assert _methods(s) == {"causal": "stamp witness", "consistent": "stamp witness"}


def test_knowledge_through_deliveries_then_signal_fails_witness(spark, tmp_path):
    rows = chain(m2_dest=4, m2_stamp=5, d_order=(3, 1))
    assert reference_check(rows)["causal"] == 1
    s = _check(spark, tmp_path, rows)
    assert s["witness"].startswith("partial"), s["witness"]
    assert _methods(s) == {"causal": "exact", "consistent": "stamp witness"}
    assert s["properties"]["causal"]["violations"] == 1
    assert [k for k, p in s["properties"].items() if not p["ok"]] == ["causal"]


def test_witness_checks_wall_certificate_before_excluding_receivers_sends(spark, tmp_path):
    # A causality cycle through a signal: 3 receives the signal, sends m2 (stamp 5) to 4,
    # then m1 (stamp 20) to {4, 2}; 2 delivers m1 and only then sends the signal. So
    # send(m1) -> send(m2) through the cycle, and 4 delivers m2 first. Excluding the
    # receiver's own messages from the signal's knowledge is sound only for acyclic
    # histories, which the wall clocks cannot certify here (the signal arrives "before" it
    # is sent): the witness must not hold.
    rows = [_row(3, 0, "signal_recv", 100, wall=100),
            _row(3, 1, "send", 3, [4], (5, 3, 0), 110),
            _row(3, 2, "send", 1, [2, 4], (20, 3, 1), 120),
            _row(2, 0, "deliver", 1, stamp=(20, 3, 1), wall=130),
            _row(2, 1, "signal_send", 100, wall=140),
            _row(4, 0, "deliver", 3, stamp=(5, 3, 0), wall=150),
            _row(4, 1, "deliver", 1, stamp=(20, 3, 1), wall=160)]
    assert reference_check(rows)["causal"] == 1
    s = _check(spark, tmp_path, rows)
    assert s["properties"]["causal"]["method"] == "exact", s["witness"]
    assert s["properties"]["causal"]["violations"] == 1


def test_simulated_correct_bus_with_side_channels_takes_fast_path(spark, tmp_path):
    # many signals, multicast and node destruction: the per-destination witness decides
    traces = []
    for k in range(20):
        rng = random.Random(500 + k)
        traces.append(simulate(rng, nprocs=rng.randint(2, 5), steps=rng.randint(30, 90),
                               p_multicast=0.3, p_signal=0.3, p_destroy=0.05))
    comb = [r for k, rows in enumerate(traces) for r in offset_rows(rows, k, 1000)]
    assert sum(r["kind"] == "signal_recv" for r in comb) > 50
    s = _check(spark, tmp_path, comb, group_span=1000)
    assert s["witness"] == "holds", s["witness"]
    assert _methods(s) == {"causal": "stamp witness", "consistent": "stamp witness"}
    assert s["ok"]


def test_signal_rounds_fingerprint_is_exact_for_stamps_near_the_top(spark):
    # a long's sum of two packed stamps near 2^62 overflows; the fingerprint must not
    from bus1py.check.spark.witness import fingerprint
    big = (1 << 62) + 7
    df = spark.createDataFrame([(0, 1, 2, big), (1, 1, 2, big), (2, 1, 3, 5)],
                               "p int, s long, d int, excess long")
    assert fingerprint(df) == (3, 2 * big + 5)
    assert fingerprint(df.where("excess < 0")) == (0, None)
