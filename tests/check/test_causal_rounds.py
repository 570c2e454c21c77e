# Invariants: the Spark vector-clock rounds (causal.py) judge `causal` as the reference
# checker does on fixed traces; the walk's job leaves causal undecided (as it does on a
# history with a causality cycle) and the driver's and the one task's paths are skipped
# (driver_max_cells=0, one_task_max_rows=0), so the rounds decide. An internal event between a receive and a later origin of the same process
# leaves that origin's clock starting from the receive's: the origin happened after it.
import pytest
from pyspark.sql import functions as F

from bus1py.check.spark import walk_task
from bus1py.check.spark.checker import PROPERTIES, check_trace
from bus1py.check.load import load_trace
from bus1py.check.reference import reference_check
from bus1py.check.simulate import offset_rows
from bus1py.schema import write_rows

SPAN = 1000
KEYS = ("process", "seq", "kind", "msg", "dests", "node", "wall_ns",
        "stamp_ts", "stamp_peer", "stamp_tx")

# Smallest form: 1 delivers m1, does an internal event, then sends m2; 2 delivers m2
# before m1, which happened before m2's send: one causal violation.
INTERNAL_BEFORE_SEND = [
    (0, 0, "send", 1, [1, 2], None, 100, 1, 0, 0),
    (1, 0, "deliver", 1, None, None, 110, 1, 0, 0),
    (1, 1, "internal", None, None, None, 120, None, None, None),
    (1, 2, "send", 2, [2], None, 130, 2, 1, 0),
    (2, 0, "deliver", 2, None, None, 140, 2, 1, 0),
    (2, 1, "deliver", 1, None, None, 150, 1, 0, 0),
]

# Found by Hypothesis (test_check_agreement's planted violations): process 2 delivers
# message 14 (not addressed to it), does an internal event, then sends 11 and 12; 1 and 3
# deliver those before 14: two causal violations.
FOUND_BY_HYPOTHESIS = [
    (0, 0, 'signal_send', 1, None, None, 1007, None, None, None),
    (0, 1, 'signal_recv', 1, None, None, 1028, None, None, None),
    (0, 2, 'deliver', 5, None, 104, 1077, 2, 1, 0),
    (0, 3, 'deliver', 9, None, 100, 1091, 4, 3, 1),
    (0, 4, 'send', 13, [0, 1], None, 1133, 10, 0, 0),
    (0, 5, 'deliver', 10, None, 100, 1147, 6, 1, 1),
    (0, 6, 'deliver', 13, None, 100, 1196, 10, 0, 0),
    (0, 7, 'send', 20, [0, 1, 2, 3], None, 1224, 24, 0, 1),
    (0, 8, 'signal_recv', 3, None, None, 1287, None, None, None),
    (0, 9, 'signal_recv', 6, None, None, 1322, None, None, None),
    (0, 10, 'deliver', 14, None, 100, 1343, 12, 1, 2),
    (0, 11, 'deliver', 15, None, 100, 1357, 14, 3, 2),
    (0, 12, 'deliver', 16, None, 104, 1364, 16, 1, 3),
    (0, 13, 'deliver', 17, None, 100, 1371, 18, 2, 2),
    (0, 14, 'deliver', 20, None, 100, 1385, 24, 0, 1),
    (1, 0, 'signal_send', 2, None, None, 1014, None, None, None),
    (1, 1, 'signal_send', 4, None, None, 1035, None, None, None),
    (1, 2, 'send', 5, [0], 104, 1042, 2, 1, 0),
    (1, 3, 'signal_send', 6, None, None, 1049, None, None, None),
    (1, 4, 'send', 10, [0, 1, 3], None, 1105, 6, 1, 1),
    (1, 5, 'send', 14, [0, 1, 3], None, 1154, 12, 1, 2),
    (1, 6, 'deliver', 10, None, 101, 1168, 6, 1, 1),
    (1, 7, 'send', 16, [0], 104, 1175, 16, 1, 3),
    (1, 8, 'deliver', 11, None, 101, 1245, 8, 2, 0),
    (1, 9, 'deliver', 13, None, 101, 1259, 10, 0, 0),
    (1, 10, 'deliver', 14, None, 101, 1266, 12, 1, 2),
    (1, 11, 'deliver', 17, None, 101, 1301, 18, 2, 2),
    (1, 12, 'deliver', 18, None, 105, 1329, 20, 3, 3),
    (1, 13, 'deliver', 19, None, 101, 1350, 22, 3, 4),
    (1, 14, 'deliver', 20, None, 101, 1378, 24, 0, 1),
    (2, 0, 'internal', None, None, None, 1000, None, None, None),
    (2, 1, 'deliver', 14, None, None, 0, 12, 1, 2),
    (2, 2, 'internal', None, None, None, 1084, None, None, None),
    (2, 3, 'send', 11, [1], 101, 1112, 8, 2, 0),
    (2, 4, 'send', 12, [3], 103, 1119, 10, 2, 1),
    (2, 5, 'deliver', 8, None, 102, 1126, 2, 3, 0),
    (2, 6, 'send', 17, [0, 1, 2], None, 1182, 18, 2, 2),
    (2, 7, 'deliver', 15, None, 102, 1203, 14, 3, 2),
    (2, 8, 'deliver', 17, None, 102, 1238, 18, 2, 2),
    (2, 9, 'deliver', 20, None, 102, 1294, 24, 0, 1),
    (2, 10, 'signal_recv', 2, None, None, 1315, None, None, None),
    (2, 11, 'signal_recv', 4, None, None, 1336, None, None, None),
    (3, 0, 'signal_send', 3, None, None, 1021, None, None, None),
    (3, 1, 'signal_send', 7, None, None, 1056, None, None, None),
    (3, 2, 'send', 8, [2, 3], None, 1063, 2, 3, 0),
    (3, 3, 'send', 9, [0], 100, 1070, 4, 3, 1),
    (3, 4, 'deliver', 8, None, 103, 1098, 2, 3, 0),
    (3, 5, 'deliver', 10, None, 103, 1140, 6, 1, 1),
    (3, 6, 'send', 15, [0, 2, 3], None, 1161, 14, 3, 2),
    (3, 7, 'deliver', 12, None, 103, 1189, 10, 2, 1),
    (3, 8, 'send', 18, [1], 105, 1210, 20, 3, 3),
    (3, 9, 'send', 19, [1, 3], None, 1217, 22, 3, 4),
    (3, 10, 'deliver', 14, None, 103, 1231, 12, 1, 2),
    (3, 11, 'deliver', 15, None, 103, 1252, 14, 3, 2),
    (3, 12, 'signal_recv', 7, None, None, 1273, None, None, None),
    (3, 13, 'deliver', 19, None, 103, 1280, 22, 3, 4),
    (3, 14, 'deliver', 20, None, 103, 1308, 24, 0, 1),
]


@pytest.mark.timeout(300)
def test_rounds_agree_with_reference(spark, tmp_path, monkeypatch):
    # both traces in one Spark run, their ids shifted apart; per-trace counts come back
    # from the violation rows (process // SPAN)
    traces = [[dict(zip(KEYS, t)) for t in trace]
              for trace in (INTERNAL_BEFORE_SEND, FOUND_BY_HYPOTHESIS)]
    want = [reference_check(rows) for rows in traces]
    assert [w["causal"] for w in want] == [1, 2]   # what the rounds must not miss
    write_rows([r for k, rows in enumerate(traces) for r in offset_rows(rows, k, SPAN)],
               str(tmp_path / "t"), files=3)
    walked = walk_task.exact

    def causal_undecided(c, want):
        out = walked(c, want)
        if "causal" in out:
            out["causal"] = (None, None, None, out["causal"][3])
        return out
    monkeypatch.setattr(walk_task, "exact", causal_undecided)
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / "t")),
                                   exact=True, keep_details=True, group_span=SPAN,
                                   driver_max_cells=0, one_task_max_rows=0)
    try:
        assert summary["rounds"].get("vector_clock_rounds"), summary["rounds"]
        assert summary["properties"]["causal"]["method"] == "exact"
        got = [dict.fromkeys(PROPERTIES, 0) for _ in traces]
        for name, df in checker.details.items():
            if df is None:
                continue
            trace_of = (F.col("process") / SPAN).cast("int").alias("k")
            for r in df.groupBy(trace_of).count().collect():
                got[r["k"]][name] = r["count"]
    finally:
        checker.unpersist()
    assert got == want
