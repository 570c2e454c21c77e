# Invariants: exact `consistent`: the strongly connected components (more than one message)
# of the graph whose edges join consecutive first deliveries of each process. A(m)[x] = the
# highest position in chain x of an ancestor of m (or m), computed in rounds until the sum
# stops changing; m lies on a cycle iff an ancestor sits after it on a chain holding it, and
# two such messages share a component iff their ancestor vectors are equal
# (docs/CHECKER.md, "Exact consistent"). Only a bounded sample of one component's rows ever
# reaches the driver, for its shortest cycle.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from ..examples import MAX_MEMBERS, MAX_ROWS, cycle_example, shortest_cycle  # noqa: F401
from .causal import vc_columns


def consistent_exact(c):
    cols = vc_columns(c, "a")
    # A message delivered at one process only sits inside one chain: every cycle switches
    # chains, so contracting those messages (keeping each chain's order of the shared
    # ones) preserves every cycle and every component, and shrinks the graph to the
    # messages delivered at two or more processes.
    shared = (c.first_deliveries.groupBy("msg").agg(F.count(F.lit(1)).alias("k"))
              .where("k > 1").select("msg"))
    nparts = int(c.spark.conf.get("spark.sql.shuffle.partitions"))
    fd = c.persist(c.first_deliveries
                    .select("process", "deliver_seq", "msg", "sender_process", "send_seq")
                    .join(shared, "msg", "left_semi")
                    .withColumn("chain", c.pidx(F.col("process")))
                    .repartition(nparts, "msg"))
    upto = (Window.partitionBy("process").orderBy("deliver_seq")
            .rowsBetween(Window.unboundedPreceding, 0))

    def step(ancestors):
        if ancestors is None:
            j = fd.select("process", "deliver_seq", "msg", "chain",
                          *[F.lit(None).cast("long").alias(col) for col in cols])
        else:
            j = fd.join(ancestors, "msg", "left")
        # a row's ancestor vector: its own chain position, plus the running max along the
        # chain of the ancestor vectors of everything delivered there before it.
        own = [F.when(F.col("chain") == i, F.greatest(F.col(col), F.col("deliver_seq")))
               .otherwise(F.col(col)).alias(col) for i, col in enumerate(cols)]
        j = j.select("process", "deliver_seq", "msg", *own)
        j = j.select("msg", *[F.max(col).over(upto).alias(col) for col in cols])
        return j.groupBy("msg").agg(*[F.max(col).alias(col) for col in cols])

    ancestors, rnd = c.fixpoint(step, cols)
    c.rounds["consistency_rounds"] = rnd
    own = F.element_at(F.array(*[F.col(col) for col in cols]), F.col("chain") + 1)
    on_cycle = (fd.join(ancestors, "msg").where(own > F.col("deliver_seq"))
                .select("msg", F.array(*[F.col(col) for col in cols]).alias("anc"), "process",
                        c.group(F.col("process")).alias("grp")).distinct())
    # Equal ancestor sets <=> same strongly connected component (for nodes on cycles).
    sccs = on_cycle.groupBy("grp", "anc").agg(
        F.count_distinct("msg").alias("size"), F.min("process").alias("process"),
        F.min("msg").alias("min_msg"), F.first(F.xxhash64("anc")).alias("h"))
    v = c.persist(sccs)
    n = v.count()
    examples = []
    for r in v.orderBy("size", "min_msg").limit(c.max_examples).collect():
        members = (on_cycle.where((F.xxhash64("anc") == F.lit(r["h"]))
                                  & (F.col("grp") == F.lit(r["grp"])))
                   .select("msg").distinct().limit(MAX_MEMBERS))
        rows = (fd.join(F.broadcast(members), "msg")
                .select("process", "deliver_seq", "msg", "sender_process", "send_seq")
                .limit(MAX_ROWS).collect())
        cycle = shortest_cycle(rows)
        if cycle:
            origin = {r["msg"]: (r["sender_process"], r["send_seq"]) for r in rows}
            examples.append(cycle_example(cycle, r["size"], origin))
    return v, n, examples
