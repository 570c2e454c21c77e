# Invariants: the stamp witness is sufficient, never necessary: it answers "consistent and
# causal hold" only when W0-W3 (docs/CHECKER.md, "The stamp witness") hold on the rows, and
# otherwise hands the property to the exact formulations. Stamps are compared with each other
# and with the rows' happened-before edges only. W0-W2 and the wall-clock certificate are
# counts of the main pass; the signal part runs only when signals exist: tier 1 (one scalar
# per signal, rounds over the signal rows), then tier 2 (per-destination excess, rounds over
# the entries still alive) only if tier 1 fails.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from ... import schema as S
from ..engine import ABSENT, TOO_WIDE

MAX_ROUNDS_FACTOR = 4      # rounds cap = 4*P + 16; convergence comes far earlier (docs)


def witness(c):
    """(consistent_ok, causal_ok, message) as proved by stamps; unproven -> not ok."""
    if c.stamps_too_wide:
        return False, False, TOO_WIDE
    if not c.trace.has_stamps:
        return False, False, ABSENT
    if not c.stamps_packed:
        return False, False, TOO_WIDE
    st = c.stats
    if st["w1_fails"]:
        return False, False, "failed: a process delivers against stamp order"
    if st["w2_fails"]:
        return True, False, "partial: deliveries follow stamps, but a send's stamp is " \
                            "not above what its process had sent or delivered"
    if st["not_dest"]:
        return True, False, "partial: a message was delivered to a process not among " \
                            "its destinations"
    if not st["signals"]:
        return True, True, "holds"
    local = c.rows.where(F.col("kind") != S.INTERNAL)
    if not c.tier1_failed:   # the screen may have tried tier 1 already
        k = F.col("kind")
        ok = c.timed(
            "witness_tier1", scalar_signal_witness, c,
            local.where(k.isin(S.SIGNAL_SEND, S.SIGNAL_RECV))
            .select("process", "seq", "kind", "msg", "seen", "sends_before"),
            local.where(k.isin(S.SEND, S.DESTROY)).select("process", "sends_before", "stamp"))
        if ok:
            return True, True, "holds"
    ok, why = signal_witness(c, local, wall_ok=st["wall_fails"] == 0)
    return True, ok, why


def scalar_signal_witness(c, sig, sends):
    """Tier 1: V(e) = L(e) joined with V of every signal received up to e, carried over
    signal chains in rounds over the signal rows only; it holds when the first send after
    each signal_recv is stamped above the V that signal brought (later sends are above it
    too, by W2). Sufficient for causal (docs); cheap: the final check is a broadcast join of
    the signal arrivals with the sends on (process, send index).

    sig: the signal rows (process, seq, kind, msg, seen, sends_before); sends: (process,
    sends_before, stamp) of at least every send that is the first after a signal_recv."""
    k = F.col("kind")
    sig = c.persist(sig)
    sent = sig.where(k == S.SIGNAL_SEND).select("msg", F.col("seen").alias("V_sent"))
    upto = (Window.partitionBy("process").orderBy("seq")
            .rowsBetween(Window.unboundedPreceding, 0))
    rec = None
    for rnd in range(1, 9):
        rec = sig.join(sent.withColumnRenamed("V_sent", "brought"), "msg", "left").withColumn(
            "brought", F.when(k == S.SIGNAL_RECV, F.col("brought")))
        rec = rec.withColumn("V", F.greatest("seen", F.max("brought").over(upto)))
        rec = c.checkpoint(rec)
        sent_now = rec.where(k == S.SIGNAL_SEND).select("msg", F.col("V").alias("V_sent"))
        changed = (sent_now.join(sent.withColumnRenamed("V_sent", "old"), "msg")
                   .where(~F.col("V_sent").eqNullSafe(F.col("old"))).limit(1).count())
        sent = sent_now
        if not changed:
            break
    else:
        return False
    c.rounds["witness_tier1_rounds"] = rnd
    arrivals = rec.where((k == S.SIGNAL_RECV) & F.col("brought").isNotNull()).select(
        "process", "sends_before", "brought")
    bad = (sends.join(F.broadcast(arrivals), ["process", "sends_before"])
           .where(F.col("stamp") <= F.col("brought")).limit(1).count())
    return not bad


def _dest_of(c, index, process):
    """Process id of destination index `index`, for an entry held at `process`."""
    if c.span:
        return (c.group(process) * F.lit(c.span) + index).cast("int")
    return F.element_at(F.array(*[F.lit(p) for p in c.procs]), index + 1).cast("int")


def _seeds(c, pairs, wall_ok):
    """For each live signal and destination d, an upper bound of the stamps of messages to d
    that the signal_send x knows (G'); None when no signal is live (tier 2 holds at once).

    With the wall-clock certificate (wall never decreases along any edge, so send(m) -> x
    implies wall(send m) <= wall(x)): min(L(x), the largest stamp of a message to d sent at
    wall time <= wall(x)). Without it: the largest stamp <= L(x) of a message to d. One
    as-of sort per destination over the message-destination pairs (stamps <= min L(y)
    cannot matter)."""
    xs, ys = F.col("x_seen"), F.col("y_seen")
    live = pairs.where(xs.isNotNull() & (ys.isNull() | (xs > ys)))
    st = pairs.agg(
        F.count(F.when(F.col("y_wall") < F.col("x_wall"), 1)).alias("wall_fails"),
        F.count(F.when(xs.isNotNull() & (ys.isNull() | (xs > ys)), 1)).alias("live"),
        F.max(F.when(xs > F.coalesce(ys, F.lit(-1)), xs)).alias("hi"),
        F.min(F.when(xs > F.coalesce(ys, F.lit(-1)), F.coalesce(ys, F.lit(-1)))).alias("lo"),
    ).collect()[0]
    if not st["live"]:
        return None
    by_wall = wall_ok and st["wall_fails"] == 0
    stamp = F.col("stamp")
    lo = stamp > F.lit(st["lo"]) if st["lo"] is not None else F.lit(True)
    src = c.sends.where(lo) if by_wall else c.sends.where((stamp <= F.lit(st["hi"])) & lo)
    key_message = F.col("send_wall") if by_wall else stamp
    key_query = F.col("x_wall") if by_wall else xs
    none = lambda t: F.lit(None).cast(t)  # noqa: E731
    messages = (src.select(F.explode("dests").alias("d"), key_message.alias("key"), "stamp")
                .select("d", "key", F.lit(0).alias("is_query"), "stamp",
                        none("int").alias("y_process"), none("long").alias("y_seq"),
                        none("long").alias("y_seen"), none("long").alias("x_seen")))
    queries = (live.select(F.explode(F.sequence(F.lit(0), F.lit(c.P - 1))).alias("i"),
                           "x_seen", "x_wall", "y_process", "y_seq", "y_seen")
               .select(_dest_of(c, F.col("i"), F.col("y_process")).alias("d"),
                       key_query.alias("key"), F.lit(1).alias("is_query"),
                       none("long").alias("stamp"), "y_process", "y_seq", "y_seen", "x_seen"))
    upto = (Window.partitionBy("d").orderBy("key", "is_query")
            .rowsBetween(Window.unboundedPreceding, 0))
    u = messages.unionByName(queries).withColumn("best", F.max("stamp").over(upto))
    bound = F.when(F.col("best").isNotNull(), F.least(F.col("best"), xs))
    seeds = (u.where(F.col("is_query") == 1)
             .select(F.col("y_process").alias("p"), F.col("y_seq").alias("s"), "d",
                     bound.alias("excess"))
             .where(F.col("excess").isNotNull() & (ys.isNull() | (F.col("excess") > ys))))
    return c.checkpoint(seeds.groupBy("p", "s", "d").agg(F.max("excess").alias("excess")))


def fingerprint(entries) -> tuple:
    """(count, exact sum of excess) of a round's entries: the rounds have settled when it
    repeats. The sum is taken as a decimal: packed stamps near 2^62 overflow a long's sum
    after a handful of entries, and Spark's ANSI mode raises on that."""
    row = entries.agg(F.count(F.lit(1)).alias("n"),
                      F.sum(F.col("excess").cast("decimal(38,0)")).alias("t")).collect()[0]
    return row["n"], row["t"]


def signal_witness(c, local, wall_ok):
    """W3 (tier 2): per-destination knowledge carried across side channels (docs). Entries
    (p, s, d, excess) sit at receive events of process p; the rounds sweep them forward
    along each process (running max per destination, pruned at each read by L), and sends
    and signal_sends forward what is still alive to their receivers."""
    k = F.col("kind")
    P = c.P
    sent = local.where(k == S.SIGNAL_SEND).select(
        "msg", F.col("process").alias("x_process"), F.col("seq").alias("x_seq"),
        F.col("seen").alias("x_seen"), F.col("wall").alias("x_wall"))
    received = local.where(k == S.SIGNAL_RECV).select(
        "msg", F.col("process").alias("y_process"), F.col("seq").alias("y_seq"),
        F.col("seen").alias("y_seen"), F.col("wall").alias("y_wall"))
    pairs = c.persist(sent.join(received, "msg"))
    seeds = _seeds(c, pairs, wall_ok)
    if seeds is None:
        c.rounds["witness_signal_rounds"] = 0
        return True, "holds"
    reads = local.where(k.isin(S.SEND, S.DESTROY, S.SIGNAL_SEND)).select(
        F.col("process").alias("p"), F.col("seq").alias("s"), "kind", "msg", "stamp", "dests",
        F.when(k == S.SIGNAL_SEND, F.col("seen")).otherwise(F.col("seen_before"))
        .alias("threshold"))
    deliveries = local.where(k == S.DELIVER).select(
        "msg", F.col("process").alias("p"), F.col("seq").alias("s"), "seen")
    arrivals = pairs.select("msg", "y_process", "y_seq", "y_seen")
    cols = [f"c{i}" for i in range(P)]
    A = seeds
    prev = fingerprint(A)
    if not prev[0]:
        c.rounds["witness_signal_rounds"] = 0
        return True, "holds"
    cap = MAX_ROUNDS_FACTOR * P + 16
    upto = Window.partitionBy("p").orderBy("s").rowsBetween(Window.unboundedPreceding, 0)
    none = lambda t: F.lit(None).cast(t)  # noqa: E731
    thr = F.col("threshold")
    for rnd in range(1, cap + 1):
        held = A.groupBy("p").agg(F.min("s").alias("first"), F.max("excess").alias("most"))
        rd = (reads.join(F.broadcast(held), "p")
              .where((F.col("s") > F.col("first")) & (thr.isNull() | (thr < F.col("most"))))
              .select("p", "s", "kind", "msg", "stamp", "dests", "threshold",
                      *[none("long").alias(col) for col in cols]))
        wide = (A.groupBy("p", "s")
                .agg(*[F.max(F.when(c.pidx(F.col("d")) == i, F.col("excess"))).alias(col)
                       for i, col in enumerate(cols)])
                .select("p", "s", none("string").alias("kind"), none("long").alias("msg"),
                        none("long").alias("stamp"), none("array<int>").alias("dests"),
                        none("long").alias("threshold"), *cols))
        x = wide.unionByName(rd).select(
            "p", "s", "kind", "msg", "stamp", "dests", "threshold",
            *[F.max(col).over(upto).alias(col) for col in cols])
        x = x.where(k.isNotNull()).select(
            "p", "s", "kind", "msg", "stamp", "dests",
            F.array(*[F.when(thr.isNull() | (F.col(col) > thr), F.col(col))
                      for col in cols]).alias("X"))
        x = c.checkpoint(x)
        ent = x.select("p", "kind", "msg", "stamp", F.posexplode("X").alias("i", "excess")).where(
            F.col("excess").isNotNull()
            & ((k == S.SIGNAL_SEND) | (F.col("excess") > F.col("stamp"))))
        ent = ent.select("kind", "msg", _dest_of(c, F.col("i"), F.col("p")).alias("d"),
                         "excess")
        via_message = (ent.where(k != S.SIGNAL_SEND).join(deliveries, "msg")
                       .where(F.col("excess") > F.col("seen")).select("p", "s", "d", "excess"))
        via_signal = (ent.where(k == S.SIGNAL_SEND).join(arrivals, "msg")
                      .where(F.col("y_seen").isNull() | (F.col("excess") > F.col("y_seen")))
                      .select(F.col("y_process").alias("p"), F.col("y_seq").alias("s"), "d",
                              "excess"))
        new = c.checkpoint(seeds.unionByName(via_message).unionByName(via_signal)
                            .groupBy("p", "s", "d").agg(F.max("excess").alias("excess")))
        now = fingerprint(new)
        A = new
        if now == prev:
            break
        prev = now
    else:
        c.rounds["witness_signal_rounds"] = rnd
        return False, "inconclusive: signal knowledge did not settle"
    c.rounds["witness_signal_rounds"] = rnd
    # W3 on the settled sweep: a send to d must be stamped above what is known for d.
    bad = x.where(k.isin(S.SEND, S.DESTROY)).where(F.exists(
        "dests", lambda d: F.when(c.pidx(d) >= 0,
                                  F.element_at("X", c.pidx(d) + 1) >= F.col("stamp"))
        .otherwise(F.lit(False)))).limit(1).count()
    if bad:
        return False, "partial: a send's stamp is not above what a side channel told " \
                      "its process about one of its destinations"
    return True, "holds"
