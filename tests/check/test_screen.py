# Invariants: the screen (bus1py/check/spark/screen.py) may only answer "passed" for a trace on
# which every property holds, and it must answer "passed" for the common case it exists for:
# a correct bus's trace with stamps and no destroys. Soundness is checked trace by trace
# against the brute-force reference (a batch would hide one faulty member behind another's
# failure); completeness on batches of simulated correct traces.
import random

import pytest
from hypothesis import strategies as st

from bus1py.check.load import load_trace
from bus1py.check.spark.checker import Checker, check_trace
from bus1py.check.reference import reference_check
from bus1py.check.spark.screen import screen
from bus1py.check.simulate import MUTATIONS, mutate, offset_rows, simulate
from bus1py.schema import write_rows as write_trace
from drawn import gather

pytestmark = pytest.mark.timeout(400)

params = st.fixed_dictionaries({
    "seed": st.integers(0, 2 ** 32 - 1),
    "nprocs": st.integers(2, 5),
    "steps": st.integers(10, 60),
    "p_multicast": st.sampled_from([0.0, 0.3, 0.7]),
    "p_signal": st.sampled_from([0.0, 0.15]),
})


def _rows(p, mutation=None):
    rng = random.Random(p["seed"])
    rows = simulate(rng, nprocs=p["nprocs"], steps=p["steps"], p_multicast=p["p_multicast"],
                    p_signal=p["p_signal"], p_destroy=0.0)
    return mutate(rows, mutation, rng) if mutation else rows


def _screen(spark, path, rows):
    write_trace(rows, str(path), files=2)
    checker = Checker(spark, load_trace(spark, str(path)))
    try:
        return screen(checker)
    finally:
        checker.unpersist()


def test_correct_traces_are_decided_by_the_screen(spark, tmp_path):
    traces = [_rows(p) for p in gather(20, params)]
    combined = []
    for k, rows in enumerate(traces):
        assert not any(reference_check(rows).values())
        combined += offset_rows(rows, k, 1000)
    write_trace(combined, str(tmp_path / "ok"), files=3)
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / "ok")),
                                   screen_min_rows=0)
    checker.unpersist()
    assert summary["screen"] == "passed", summary["screen"]
    assert summary["ok"] and summary["witness"] == "holds"
    assert summary["processes"] == len({r["process"] for r in combined})
    assert all(p["violations"] == 0 for p in summary["properties"].values())


def test_screen_never_passes_a_faulty_trace(spark, tmp_path):
    got = gather(12, st.tuples(params, st.sampled_from(MUTATIONS)))
    got += [(dict(got[0][0], seed=got[0][0]["seed"] + i), m) for i, m in enumerate(MUTATIONS)]
    faulty = 0
    for i, (p, m) in enumerate(got):
        rows = _rows(p, m)
        bad = any(reference_check(rows).values())
        passed, why = _screen(spark, tmp_path / f"t{i}", rows)
        if bad:
            faulty += 1
            assert not passed, (m, p)
    assert faulty >= len(MUTATIONS) // 2   # the planted faults really were faults


def _row(process, seq, kind, msg, dests=None, stamp=(1, 0, 0)):
    return {"process": process, "seq": seq, "kind": kind, "msg": msg, "dests": dests,
            "node": None, "wall_ns": seq, "stamp_ts": stamp[0], "stamp_peer": stamp[1],
            "stamp_tx": stamp[2]}


def test_two_origins_with_disjoint_destinations_are_not_passed(spark, tmp_path):
    # every (message, destination) pair looks fine on its own: one origin, one delivery,
    # equal stamps; only counting the origins of the id finds the second send
    rows = [_row(0, 0, "send", 7, [1], (1, 0, 0)), _row(2, 0, "send", 7, [3], (1, 0, 0)),
            _row(1, 0, "deliver", 7, stamp=(1, 0, 0)), _row(3, 0, "deliver", 7, stamp=(1, 0, 0))]
    passed, why = _screen(spark, tmp_path / "t", rows)
    assert not passed and "exactly once" in why


def test_delivery_with_another_stamp_than_its_send_is_not_passed(spark, tmp_path):
    # the screen orders deliveries by their own rows' stamps, so those must be the send's
    rows = [_row(0, 0, "send", 1, [2], (5, 0, 0)), _row(1, 0, "send", 2, [2], (6, 1, 0)),
            _row(2, 0, "deliver", 2, stamp=(6, 1, 0)), _row(2, 1, "deliver", 1, stamp=(7, 0, 0))]
    passed, why = _screen(spark, tmp_path / "t", rows)
    assert not passed and "send's stamp" in why
