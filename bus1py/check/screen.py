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
#   S3 (signals)    tier 1 of the signal witness (Checker._scalar_signal_witness).
# S1 is exactly_once with no exception to excuse (no destroys). S1 makes every delivery's own
# stamp the stamp of its message's send, so S2's W1 and W2 are the witness's W1 and W2 and S1
# gives W0; with S3 the witness proves fifo, causal and consistent (docs/CHECKER.md).
# node_rules holds vacuously: without destroys no NODE_DESTROY is ever delivered.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

# Keys of the pair shuffle are longs: a (message, process) pair uses the process id (an
# int32); these two values lie outside int32, so they never collide with a process.
ORIGIN_KEY = 1 << 33     # one row per origin of a message id (counts origins)
SIGNAL_KEY = 1 << 34     # every row of a signal id (counts signal_sends)


def kind_code():
    """The kind as a byte, origins first: 0 send, 1 destroy, 2 signal_send, 3 deliver,
    4 signal_recv, 5 internal (or anything else). `kc <= 1` selects the messages' origins,
    `kc >= 3` the receives."""
    k = F.col("kind")
    return (F.when(k == "send", 0).when(k == "destroy", 1).when(k == "signal_send", 2)
            .when(k == "deliver", 3).when(k == "signal_recv", 4).otherwise(5).cast("byte"))


def kind_name(kc):
    """The kind's name back from its kind_code() byte `kc` (5 reads as internal)."""
    return (F.when(kc == 0, "send").when(kc == 1, "destroy").when(kc == 2, "signal_send")
            .when(kc == 3, "deliver").when(kc == 4, "signal_recv").otherwise("internal"))


def pair_problems(ev, T):
    """S1: the number of (id, key) groups that break it (one shuffle, one aggregation)."""
    k = F.col("kind")
    origin = k.isin("send", "destroy")
    key = (F.when(origin, F.concat(F.array(F.lit(ORIGIN_KEY)),
                                   F.array_distinct("dests").cast("array<bigint>")))
           .when(k.isin("signal_send", "signal_recv"), F.array(F.lit(SIGNAL_KEY)))
           .when(k == "deliver", F.array(F.col("process").cast("long"))))
    rows = ev.select("msg", F.explode(key).alias("key"),
                     (origin | (k == "signal_send")).cast("int").alias("o"), T.alias("T"))
    g = rows.groupBy("msg", "key").agg(
        F.sum("o").alias("o"), F.count(F.lit(1)).alias("n"), F.count("T").alias("nt"),
        F.min("T").alias("tmin"), F.max("T").alias("tmax"))
    c = F.col
    pair = c("key") < F.lit(ORIGIN_KEY)
    bad = (c("msg").isNull() | c("key").isNull() | (c("o") != 1)
           | (pair & ((c("n") != 2) | (c("nt") != 2) | (c("tmin") != c("tmax")))))
    return g.agg(F.count(F.when(bad, 1)).alias("bad")).collect()[0]["bad"]


def process_pass(ev, T, problem_code):
    """S2 in one sort of each process's rows. Returns the rows worth keeping: any row that
    breaks S2, the signal rows (with L and nsb for tier 1), each process's seq-0 row (the
    process list) and the first send after each signal_recv (fa)."""
    code = kind_code()
    kc = F.col("kc")
    stamped_kind = kc.isin(0, 1, 3)
    b = ev.select("process", "seq", code.alias("kc"),
                  F.when(code.isin(2, 4), F.col("msg")).alias("msg"),
                  F.when(code.isin(0, 1, 3), T).alias("T"), problem_code.alias("pb"))
    wp = Window.partitionBy("process").orderBy("seq")
    before = wp.rowsBetween(Window.unboundedPreceding, -1)
    prevseq = F.lag("seq").over(wp)
    x = b.select(
        "process", "seq", "kc", "msg", "T", "pb",
        F.when(prevseq.isNull(), F.col("seq") != 0)
        .otherwise(F.col("seq") != prevseq + 1).alias("seqbad"),
        ((kc == 3) & (F.max(F.when(kc == 3, F.col("T"))).over(before) >= F.col("T")))
        .alias("w1bad"),
        F.max(F.when(stamped_kind, F.col("T"))).over(before).alias("Lprev"),
        F.count(F.when(kc <= 1, 1)).over(before).alias("nsb"),
        F.max(F.when(kc == 4, F.col("seq"))).over(before).alias("lsr"),
        F.max(F.when(kc <= 1, F.col("seq"))).over(before).alias("ls"))
    x = x.select(
        "process", "seq", "kc", "msg", "T", "pb", "seqbad", "w1bad", "nsb",
        ((kc <= 1) & (F.col("Lprev") >= F.col("T"))).alias("w2bad"),
        (stamped_kind & F.col("T").isNull()).alias("unstamped"),
        # L at a signal row: the largest stamp its process sent or delivered up to it
        F.when(kc.isin(2, 4), F.col("Lprev")).alias("L"),
        ((kc <= 1) & F.col("lsr").isNotNull()
         & (F.col("ls").isNull() | (F.col("lsr") > F.col("ls")))).alias("fa"))
    bad = (F.col("pb").isNotNull() | F.col("seqbad") | F.col("w1bad") | F.col("w2bad")
           | F.col("unstamped") | (kc == 1))
    return x.where(bad | kc.isin(2, 4) | F.col("fa") | (F.col("seq") == 0))


def screen(checker):
    """Run S1-S3 for `checker`; returns (passed, reason). On success the checker's process
    list is set from the trace; on failure nothing about the trace is assumed.

    S1 runs in one thread while S2 and S3 run in another: both are CPU-bound, but
    each job has stretches where fewer tasks than cores run (planning, code generation, a
    stage's last tasks, the small signal rounds), which the other job fills.
    """
    T = checker._stamp()
    if T is None:
        return False, "no stamps to screen with"
    ev = checker.trace.df
    # Nearly every (id, key) group meets its rows only after the shuffle (an origin and its
    # deliveries are in different files), so a pre-shuffle partial aggregation would only
    # add a pass: about 10 s instead of 12-16 at 10M events here. (A session-wide setting,
    # so it is set for the whole screen rather than for S1's thread alone.)
    with checker._conf(execution__bypassPartialAggregation="true"):
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
    checker._set_procs(procs)
    return True, "passed"


def _by_process(checker, ev, T):
    """S2, then S3 on the rows S2 kept: (ok, reason, process list)."""
    from .load import row_problem_code
    kept = checker._persist(process_pass(ev, T, row_problem_code()))
    one = F.lit(1)
    st = kept.agg(
        F.count(F.when(F.col("pb").isNotNull() | F.col("seqbad") | F.col("unstamped"), one))
        .alias("rows"),
        F.count(F.when(F.col("kc") == 1, one)).alias("destroys"),
        F.count(F.when(F.col("w1bad"), one)).alias("w1"),
        F.count(F.when(F.col("w2bad"), one)).alias("w2"),
        F.count(F.when(F.col("kc").isin(2, 4), one)).alias("signals"),
        F.sort_array(F.collect_set(F.when(F.col("seq") == 0, F.col("process")))).alias("procs"),
    ).collect()[0]
    for name, why in (("rows", "malformed or unstamped rows"),
                      ("destroys", "destroy rows (node_rules needs the full pass)"),
                      ("w1", "a process delivers against stamp order"),
                      ("w2", "a send is not stamped above what its process knew")):
        if st[name]:
            return False, f"{st[name]} rows: {why}", None
    if st["signals"]:
        sig = kept.where(F.col("kc").isin(2, 4)).select(
            "process", "seq", kind_name(F.col("kc")).alias("kind"), "msg", "L", "nsb")
        sends = kept.where(F.col("fa")).select("process", "nsb", "T")
        if not checker._timed("screen_signals", checker._scalar_signal_witness, sig, sends):
            checker.tier1_failed = True
            return False, "tier 1 of the signal witness does not prove causal", None
    return True, "passed", list(st["procs"])
