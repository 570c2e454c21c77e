# Invariants: the screen is a sufficient test, never a verdict of its own. It answers "every
# property holds" only when the conditions below hold, each of which it checks from the rows
# (stamps are compared with each other and with process order, never trusted); on anything
# else it answers "not proved" and the checker runs its full main pass, which decides, counts
# and explains. It reads the trace twice and shuffles it twice -- once by (id, key) pair, once
# by process -- and keeps (persisted) only the signal rows and the first send after each
# signal_recv, which the signal part of the witness needs: about 4% of a typical trace.
#
# The conditions (names as in docs/CHECKER.md, "The screen"):
#   S1 (by pair)    every message id has exactly one origin row (send/destroy) and every
#                   signal id one signal_send row; every (message, destination) pair, over
#                   the origin's distinct dests, has exactly one deliver row, and every
#                   deliver row is such a pair; every row of a pair carries a full stamp and
#                   the origin's and the delivery's stamps are equal.
#   S2 (by process) no row breaks a per-row rule, seq runs 0, 1, 2, ... in every process,
#                   there is no destroy row, every send and deliver row is stamped;
#                   W1: each delivery is stamped above every earlier delivery of its process;
#                   W2: each send is stamped above every earlier send and delivery of its process.
#   S3 (signals)    tier 1 of the signal witness (witness.scalar_signal_witness).
# S1 is exactly_once with no exception to excuse (no destroys). S1 makes every delivery's own
# stamp the stamp of its message's send, so S2's W1 and W2 are the witness's W1 and W2 and S1
# gives W0; with S3 the witness proves fifo, causal and consistent (docs/CHECKER.md).
# node_rules holds vacuously: without destroys no NODE_DESTROY is ever delivered.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from ... import schema as S
from .. import kinds as K
from ..engine import NO_STAMPS
from ..load import row_problem_code
from .main_pass import pack_stamp
from .witness import scalar_signal_witness

# Keys of the pair shuffle are longs: a (message, process) pair uses the process id (an
# int32); these two values lie outside int32, so they never collide with a process.
ORIGIN_KEY = 1 << 33     # one row per origin of a message id (counts origins)
SIGNAL_KEY = 1 << 34     # every row of a signal id (counts signal_sends)


def pair_problems(ev, T):
    """S1: the number of (id, key) groups that break it (one shuffle, one aggregation)."""
    k = F.col("kind")
    origin = k.isin(S.SEND, S.DESTROY)
    key = (F.when(origin, F.concat(F.array(F.lit(ORIGIN_KEY)),
                                   F.array_distinct("dests").cast("array<bigint>")))
           .when(k.isin(S.SIGNAL_SEND, S.SIGNAL_RECV), F.array(F.lit(SIGNAL_KEY)))
           .when(k == S.DELIVER, F.array(F.col("process").cast("long"))))
    rows = ev.select("msg", F.explode(key).alias("key"),
                     (origin | (k == S.SIGNAL_SEND)).cast("int").alias("o"), T.alias("T"))
    g = rows.groupBy("msg", "key").agg(
        F.sum("o").alias("o"), F.count(F.lit(1)).alias("n"), F.count("T").alias("nt"),
        F.min("T").alias("tmin"), F.max("T").alias("tmax"))
    c = F.col
    pair = c("key") < F.lit(ORIGIN_KEY)
    bad = (c("msg").isNull() | c("key").isNull() | (c("o") != 1)
           | (pair & ((c("n") != 2) | (c("nt") != 2) | (c("tmin") != c("tmax")))))
    return g.agg(F.count(F.when(bad, 1)).alias("bad")).collect()[0]["bad"]


def process_pass(ev, stamp, problem_code):
    """S2 in one sort of each process's rows. Returns the rows worth keeping: any row that
    breaks S2, the signal rows (with seen and sends_before for tier 1), each process's seq-0
    row (the process list) and the first send after each signal_recv (first_after_signal)."""
    code = K.kind_code()
    kc = F.col("kind_code")
    stamped_kind = kc.isin(K.SEND, K.DESTROY, K.DELIVER)
    b = ev.select("process", "seq", code.alias("kind_code"),
                  F.when(code.isin(*K.SIGNALS), F.col("msg")).alias("msg"),
                  F.when(code.isin(K.SEND, K.DESTROY, K.DELIVER), stamp).alias("stamp"),
                  problem_code.alias("row_problem"))
    wp = Window.partitionBy("process").orderBy("seq")
    before = wp.rowsBetween(Window.unboundedPreceding, -1)
    prev_seq = F.lag("seq").over(wp)
    is_origin = kc <= K.DESTROY
    x = b.select(
        "process", "seq", "kind_code", "msg", "stamp", "row_problem",
        F.when(prev_seq.isNull(), F.col("seq") != 0)
        .otherwise(F.col("seq") != prev_seq + 1).alias("seq_problem"),
        ((kc == K.DELIVER)
         & (F.max(F.when(kc == K.DELIVER, F.col("stamp"))).over(before) >= F.col("stamp")))
        .alias("w1_fails"),
        F.max(F.when(stamped_kind, F.col("stamp"))).over(before).alias("seen_before"),
        F.count(F.when(is_origin, 1)).over(before).alias("sends_before"),
        F.max(F.when(kc == K.SIGNAL_RECV, F.col("seq"))).over(before).alias("last_signal"),
        F.max(F.when(is_origin, F.col("seq"))).over(before).alias("last_send"))
    x = x.select(
        "process", "seq", "kind_code", "msg", "stamp", "row_problem", "seq_problem",
        "w1_fails", "sends_before",
        (is_origin & (F.col("seen_before") >= F.col("stamp"))).alias("w2_fails"),
        (stamped_kind & F.col("stamp").isNull()).alias("unstamped"),
        # at a signal row: the largest stamp its process sent or delivered up to it
        F.when(kc.isin(*K.SIGNALS), F.col("seen_before")).alias("seen"),
        (is_origin & F.col("last_signal").isNotNull()
         & (F.col("last_send").isNull() | (F.col("last_signal") > F.col("last_send"))))
        .alias("first_after_signal"))
    bad = (F.col("row_problem").isNotNull() | F.col("seq_problem") | F.col("w1_fails")
           | F.col("w2_fails") | F.col("unstamped") | (kc == K.DESTROY))
    return x.where(bad | kc.isin(*K.SIGNALS) | F.col("first_after_signal")
                   | (F.col("seq") == 0))


def screen(checker):
    """Run S1-S3 for `checker`; returns (passed, reason). On success the checker's process
    list is set from the trace; on failure nothing about the trace is assumed.

    S1 runs in one thread while S2 and S3 run in another: both are CPU-bound, but
    each job has stretches where fewer tasks than cores run (planning, code generation, a
    stage's last tasks, the small signal rounds), which the other job fills.
    """
    T = pack_stamp(checker)
    if T is None:
        return False, NO_STAMPS
    ev = checker.trace.df
    # Nearly every (id, key) group meets its rows only after the shuffle (an origin and its
    # deliveries are in different files), so a pre-shuffle partial aggregation would only
    # add a pass: about 10 s instead of 12-16 at 10M events here. (A session-wide setting,
    # so it is set for the whole screen rather than for S1's thread alone.)
    with checker.conf(execution__bypassPartialAggregation="true"):
        found = checker.side_by_side({"screen_pairs": (pair_problems, ev, T),
                                      "screen_processes": (_by_process, checker, ev, T)})
    n = found["screen_pairs"]
    ok, why, procs = found["screen_processes"]
    if n:
        return False, f"{n} message or signal ids are not delivered exactly once " \
                      f"with their send's stamp"
    if not ok:
        return False, why
    checker.trace.processes = procs
    checker.trace.has_stamps = True
    checker.set_procs(procs)
    return True, "passed"


def _by_process(checker, ev, stamp):
    """S2, then S3 on the rows S2 kept: (ok, reason, process list)."""
    kept = checker.persist(process_pass(ev, stamp, row_problem_code()))
    one = F.lit(1)
    kc = F.col("kind_code")
    st = kept.agg(
        F.count(F.when(F.col("row_problem").isNotNull() | F.col("seq_problem")
                       | F.col("unstamped"), one)).alias("rows"),
        F.count(F.when(kc == K.DESTROY, one)).alias("destroys"),
        F.count(F.when(F.col("w1_fails"), one)).alias("w1"),
        F.count(F.when(F.col("w2_fails"), one)).alias("w2"),
        F.count(F.when(kc.isin(*K.SIGNALS), one)).alias("signals"),
        F.sort_array(F.collect_set(F.when(F.col("seq") == 0, F.col("process"))))
        .alias("processes"),
    ).collect()[0]
    for name, why in (("rows", "malformed or unstamped rows"),
                      ("destroys", "destroy rows (node_rules needs the full pass)"),
                      ("w1", "a process delivers against stamp order"),
                      ("w2", "a send is not stamped above what its process knew")):
        if st[name]:
            return False, f"{st[name]} rows: {why}", None
    if st["signals"]:
        sig = kept.where(kc.isin(*K.SIGNALS)).select(
            "process", "seq", K.kind_name(kc).alias("kind"), "msg", "seen", "sends_before")
        sends = kept.where(F.col("first_after_signal")).select("process", "sends_before",
                                                               "stamp")
        if not checker.timed("screen_signals", scalar_signal_witness, checker, sig, sends):
            checker.tier1_failed = True
            return False, "tier 1 of the signal witness does not prove causal", None
    return True, "passed", list(st["processes"])
