# Invariants: exact `causal` from the rows alone. VC(e)[q] = the highest seq of a q-event
# happened-before e; clocks are kept only at receive events (P columns, process index by
# a literal array), and an origin's clock is that of the last receive of its process before
# it plus its own position. Values only grow over the rounds, so an unchanged sum means an
# unchanged table (docs/CHECKER.md, "Exact causal"). A delivery of m1 (sender q, seq s) at p
# violates causal iff some message first-delivered at p before it has a send clock whose q
# entry is >= s.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from .. import kinds as K
from ..examples import inversion


def vc_columns(c, prefix="c"):
    return [f"{prefix}{i}" for i in range(c.P)]


def vector_clocks(c, full=False):
    """Vector clocks in rounds; returns (origins with last_recv, clocks). The clocks are
    those of the last receive of each run of receives between two origins (the only ones
    the rounds and the causal check read), or of every receive with full=True."""
    if c.rows is None:      # the screen decided; ShiViz export still needs the rows
        c.main_pass()
    code = F.col("kind_code")
    space = F.when(code.isin(*K.SIGNALS), F.lit("S")).otherwise(F.lit("M"))
    origins = c.persist(c.rows.where(code <= K.SIGNAL_SEND).select(
        space.alias("space"), "msg", F.col("process").alias("origin_process"),
        F.col("seq").alias("origin_seq"), "last_recv"))
    receives = c.rows.where(code.isin(*K.RECEIVES)).select(
        space.alias("space"), "msg", "process", "seq", "origins_before")
    # R is laid out once by origin process, sorted by (origin process, last_recv): each
    # round's join with the clocks (partitioned by process, sorted by seq) then needs no
    # shuffle of R, and with requireAllClusterKeysForCoPartition off none of the clocks.
    nparts = int(c.spark.conf.get("spark.sql.shuffle.partitions"))
    R = c.persist(receives.join(origins, ["space", "msg"]).select(
        "process", "seq", "origins_before", "origin_process",
        c.pidx(F.col("origin_process")).alias("origin_index"), "origin_seq", "last_recv")
        .repartition(nparts, "origin_process")
        .sortWithinPartitions("origin_process", "last_recv"))
    cols = vc_columns(c)
    upto = Window.partitionBy("process").orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)

    def sweep(clocks, fold_runs):
        if clocks is None:
            j = R.select("process", "seq", "origins_before", "origin_index", "origin_seq",
                         *[F.lit(None).cast("long").alias(f"k{i}") for i in range(c.P)])
        else:
            src = clocks.select(F.col("process").alias("origin_process"),
                                F.col("seq").alias("last_recv"),
                                *[F.col(col).alias(f"k{i}") for i, col in enumerate(cols)])
            j = R.join(src, ["origin_process", "last_recv"], "left")
        cand = [F.when(F.col("origin_index") == i, F.greatest(F.col(f"k{i}"), F.col("origin_seq")))
                .otherwise(F.col(f"k{i}")).alias(f"x{i}") for i in range(c.P)]
        j = j.select("process", "seq", "origins_before", *cand)
        if fold_runs:
            # Clocks are only ever read at an origin's last_recv, the last receive of a run
            # of receives between two origins (same origins_before): fold each run into
            # that row first (a hash aggregation), so the window covers the runs only.
            j = (j.repartition(nparts, "process").groupBy("process", "origins_before")
                 .agg(F.max("seq").alias("seq"),
                      *[F.max(f"x{i}").alias(f"x{i}") for i in range(c.P)]))
        return j.select("process", "seq", *[F.max(f"x{i}").over(upto).alias(col)
                                            for i, col in enumerate(cols)])

    clocks, rnd = c.fixpoint(lambda clocks: sweep(clocks, True), cols)
    if full:   # clocks at every receive (ShiViz): one more sweep from the settled clocks
        clocks = c.checkpoint(sweep(clocks, False))
    c.rounds["vector_clock_rounds"] = rnd
    return origins, clocks


def send_clocks(c, origins, clocks):
    """(msg, v0..vP-1): the vector clock of each message's send."""
    cols = vc_columns(c)
    src = clocks.select(F.col("process").alias("origin_process"),
                        F.col("seq").alias("last_recv"),
                        *[F.col(col).alias(f"k{i}") for i, col in enumerate(cols)])
    svc = (origins.where(F.col("space") == "M").join(src, ["origin_process", "last_recv"], "left")
           .withColumn("origin_index", c.pidx(F.col("origin_process"))))
    # own entry: the send itself, or more if a causality cycle (a malformed history) brings
    # later events of the sender before it
    return svc.select("msg", *[
        F.when(F.col("origin_index") == i, F.greatest(F.col(f"k{i}"), F.col("origin_seq")))
        .otherwise(F.col(f"k{i}")).alias(f"v{i}") for i in range(c.P)])


def causal_exact(c):
    origins, clocks = vector_clocks(c)
    d = (c.first_deliveries.select("process", "deliver_seq", "msg", "sender_process",
                                   "send_seq", "is_destroy")
         .withColumn("sender_index", c.pidx(F.col("sender_process")))
         .join(send_clocks(c, origins, clocks), "msg"))
    d = c.persist(d)
    before = (Window.partitionBy("process").orderBy("deliver_seq")
              .rowsBetween(Window.unboundedPreceding, -1))
    m = d.select("process", "deliver_seq", "msg", "sender_process", "send_seq",
                 "sender_index", "is_destroy",
                 *[F.max(f"v{i}").over(before).alias(f"m{i}") for i in range(c.P)])
    known = F.element_at(F.array(*[F.col(f"m{i}") for i in range(c.P)]),
                         F.col("sender_index") + 1)
    v = c.persist(m.where(known >= F.col("send_seq")).select(
        "process", "deliver_seq", "msg", "sender_process", "send_seq", "sender_index",
        "is_destroy"))
    n = v.count()
    examples = []
    for r in v.orderBy("process", "deliver_seq").limit(c.max_examples).collect():
        entry = F.element_at(F.array(*[F.col(f"v{i}") for i in range(c.P)]),
                             F.lit(int(r["sender_index"]) + 1))
        later = (d.where((F.col("process") == r["process"])
                         & (F.col("deliver_seq") < r["deliver_seq"])
                         & (entry >= r["send_seq"]))
                 .orderBy("deliver_seq").limit(1).collect())
        if later:
            examples.append(inversion(r, later[0], r["process"]))
    return v, n, examples
