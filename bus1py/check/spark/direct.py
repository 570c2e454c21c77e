# Invariants: the properties decided directly from the main pass's table, without vector
# clocks: exactly_once (counts of the main pass, plus a small join to excuse losses at a
# destroyed node), fifo (one window per receiver and sender, unless the stamp witness's W1
# and W2 already prove it) and node_rules (one window per receiver and node, only when the
# trace has destroys). Each returns (violations DataFrame or None, count, examples); the
# examples are data (examples.py), their words come from explain.py.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from .. import kinds as K
from ..examples import DUPLICATED, LOST, NOT_A_DESTINATION, event, inversion, origin_kind


def exactly_once(c):
    st = c.stats
    r = c.rows
    lost = (r.where(F.col("lost_dests").isNotNull())
            .select("msg", "sender_process", "send_seq", "is_destroy", "node",
                    F.explode("lost_dests").alias("process")))
    if c.trace.has_destroy:
        # the bus drops data for a node its receiver saw destroyed: not a loss
        destroyed = (c.deliveries.where("is_destroy").select("process", "node")
                     .distinct().withColumn("excused", F.lit(True)))
        lost = (lost.join(destroyed, ["process", "node"], "left")
                .where(F.col("excused").isNull() | F.col("is_destroy")))
    lost = lost.select("msg", "process", "sender_process", "send_seq", "is_destroy",
                       F.lit(LOST).alias("problem"))
    delivered = r.where((F.col("kind_code") == K.DELIVER) & F.col("first_delivery")).select(
        "msg", "process", "sender_process", "send_seq", "is_destroy",
        F.when(F.col("not_dest"), F.lit(NOT_A_DESTINATION))
        .when(F.col("duplicated"), F.lit(DUPLICATED)).alias("problem"))
    v = lost.unionByName(delivered.where(F.col("problem").isNotNull()))
    n_lost = int(st["lost"] or 0)
    if n_lost and c.trace.has_destroy:
        n_lost = lost.count()
    n = n_lost + int(st["not_dest"]) + int(st["duplicated"])
    examples = []
    if n:
        for e in v.orderBy("msg", "process").limit(c.max_examples).collect():
            origin = (e["sender_process"], e["send_seq"])
            seqs = []
            if e["problem"] != LOST:
                seqs = [x["deliver_seq"] for x in c.deliveries.where(
                    (F.col("msg") == e["msg"]) & (F.col("process") == e["process"]))
                    .select("deliver_seq").orderBy("deliver_seq").collect()]
            evs = [event(*origin, origin_kind(e["is_destroy"]), e["msg"])]
            evs += [event(e["process"], s, "deliver", e["msg"], origin=origin) for s in seqs[:3]]
            examples.append({"problem": e["problem"], "process": int(e["process"]),
                             "deliveries": len(seqs), "message": evs[0], "events": evs,
                             "highlight": [int(e["msg"])]})
    return v, n, examples


def fifo(c):
    """Exact: a window per (receiver, sender) over first deliveries, carrying the largest
    (send seq, msg) delivered so far. When W1 and W2 hold (main pass) it is skipped: a
    sender's sends then have increasing stamps and every receiver delivers in stamp order,
    so no delivery can overtake an earlier send of its sender."""
    st = c.stats
    if c.stamps_packed and not st["w1_fails"] and not st["w2_fails"]:
        c.fifo_method = "stamp witness"
        return None, 0, []
    c.fifo_method = "exact"
    before = (Window.partitionBy("process", "sender_process").orderBy("deliver_seq")
              .rowsBetween(Window.unboundedPreceding, -1))
    d = c.first_deliveries.select("process", "deliver_seq", "msg", "sender_process",
                                  "send_seq", "is_destroy")
    d = d.withColumn("prev", F.max(F.struct("send_seq", "msg", "deliver_seq", "is_destroy"))
                     .over(before))
    v = c.persist(d.where(F.col("prev.send_seq") > F.col("send_seq")))
    n = v.count()
    examples = []
    if n:
        for r in v.orderBy("process", "deliver_seq").limit(c.max_examples).collect():
            later = dict(r["prev"].asDict(), sender_process=r["sender_process"])
            examples.append(inversion(r, later, r["process"]))
    return v, n, examples


def node_rules(c):
    """A window per (receiver, node) over deliveries: the first NODE_DESTROY delivered so
    far, and data delivered after it. Nothing to do in a trace without destroys."""
    if not c.trace.has_destroy:
        return None, 0, []
    before = (Window.partitionBy("process", "node").orderBy("deliver_seq")
              .rowsBetween(Window.unboundedPreceding, -1))
    d = c.deliveries.where(F.col("node").isNotNull()).select(
        "process", "deliver_seq", "msg", "sender_process", "send_seq", "node", "is_destroy")
    d = d.withColumn("destroyed", F.min(F.when(F.col("is_destroy"), F.struct(
        "deliver_seq", "msg", "sender_process", "send_seq"))).over(before))
    v = c.persist(d.where(~F.col("is_destroy") & F.col("destroyed").isNotNull()))
    n = v.count()
    examples = []
    if n:
        for r in v.orderBy("process", "deliver_seq").limit(c.max_examples).collect():
            x = r["destroyed"]
            node = int(r["node"])
            x_origin = (x["sender_process"], x["send_seq"])
            m_origin = (r["sender_process"], r["send_seq"])
            evs = [event(*x_origin, "destroy", x["msg"], node=node),
                   event(r["process"], x["deliver_seq"], "deliver", x["msg"], origin=x_origin,
                         node=node),
                   event(*m_origin, "send", r["msg"]),
                   event(r["process"], r["deliver_seq"], "deliver", r["msg"], origin=m_origin,
                         node=node)]
            examples.append({"process": int(r["process"]), "node": node, "destroy": evs[0],
                             "data": evs[2], "events": evs, "highlight": [int(r["msg"])]})
    return v, n, examples
