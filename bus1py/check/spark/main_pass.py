# Invariants: the main pass reads the trace once and answers every count and every
# validation rule in one aggregation; what later phases need of it is the persisted table
# `checker.rows` (one row per event, columns below) and the views on it set here
# (`deliveries`, `first_deliveries`, `sends`). Stamps are only packed here, never trusted:
# the witness decides what they prove. Columns of `checker.rows`:
#   process, seq, kind_code, kind, msg, wall    the event (kind_code: kinds.py)
#   sender_process, send_seq, is_destroy        its message's origin (receives and origins)
#   stamp          packed stamp of the message's origin (origins and deliveries)
#   dests          distinct destinations (origins only)
#   node           the node a delivery is for (its own `node`, else the send's)
#   first_delivery a deliver or signal_recv row that is its process's first of that id
#   duplicated     first delivery of a message delivered again at that process
#   not_dest       first delivery at a process not among the message's destinations
#   lost_dests     on a send row: destinations that never delivered it
#   id_problem     1: one of several origins of an id; 2: a receive of an unknown id
#   row_problem    the first per-row rule the row breaks (load.row_problem_code), or null
#   seq_problem    the previous seq when this one does not follow it (-1: first is not 0)
#   w1_fails       a first delivery stamped at or below an earlier first delivery (W1)
#   wall_fails     the wall-clock certificate fails at this row
#   seen_before    largest stamp its process sent or delivered before it (Lprev)
#   seen           the same, up to and including this row (L)
#   sends_before   number of earlier origins of messages at its process
#   last_recv      seq of the last receive of its process before it
#   origins_before number of earlier origins (messages and signals) at its process
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from .. import kinds as K
from ..load import (TraceError, file_of, fmt_row, raise_row_problem, row_problem_code,
                   stamp_layout)


def pack_stamp(checker):
    """The send stamp (ts, peer, tx) packed into one order-preserving long, or None
    (load.stamp_layout: wider stamps leave the witness inconclusive, the exact path decides)."""
    layout = stamp_layout(checker.trace.stamp_ranges)
    if layout is None:
        return None
    expr = None
    for c, offset, shift in layout:
        part = (F.col(c) - F.lit(offset)).cast("long")
        part = F.shiftleft(part, shift) if shift else part
        expr = part if expr is None else expr + part
    return expr


def _by_message(base):
    """Shuffle by (signal or message, id), origin first: attach the origin's fields to every
    receive, mark first deliveries and duplicates, list lost destinations, count origins."""
    code = F.col("kind_code")
    is_recv = F.col("is_recv")
    m = base.where(code != K.INTERNAL).select(
        "process", "seq", "kind_code", "msg", "node", "wall", "stamp", "dests", "row_problem",
        code.isin(*K.SIGNALS).alias("is_signal"), (code >= K.DELIVER).alias("is_recv"))
    wm = Window.partitionBy("is_signal", "msg").orderBy("is_recv", "process", "seq")
    whole = wm.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    upto = wm.rowsBetween(Window.unboundedPreceding, 0)
    origin = F.first(F.when(~is_recv, F.struct(
        F.col("process").alias("process"), F.col("seq").alias("seq"),
        F.array_distinct("dests").alias("dests"), F.col("node").alias("node"),
        (code == K.DESTROY).alias("is_destroy"), F.col("stamp").alias("stamp"),
        F.col("wall").alias("wall"))), True).over(upto)
    prev_process = F.lag("process").over(wm)
    prev_is_recv = F.lag("is_recv").over(wm)
    next_process = F.lead("process").over(wm)
    m = m.select(
        "process", "seq", "kind_code", "msg", "node", "wall", "is_recv", "row_problem",
        origin.alias("o"),
        F.count(F.when(~is_recv, 1)).over(whole).alias("origins"),
        (is_recv & ~F.coalesce(prev_is_recv & (prev_process == F.col("process")), F.lit(False)))
        .alias("first_delivery"),
        F.coalesce(is_recv & (next_process == F.col("process")), F.lit(False)).alias("again"),
        F.collect_set(F.when(code == K.DELIVER, F.col("process"))).over(whole)
        .alias("receivers"))
    is_deliver = code == K.DELIVER
    is_message_origin = code <= K.DESTROY
    first = F.col("first_delivery")
    lost = F.array_except("o.dests", "receivers")
    return m.select(
        "process", "seq", "kind_code", "msg", "first_delivery", "wall", "row_problem",
        F.col("o.process").alias("sender_process"), F.col("o.seq").alias("send_seq"),
        F.col("o.is_destroy").alias("is_destroy"),
        F.when(is_message_origin | is_deliver, F.col("o.stamp")).alias("stamp"),
        F.when(is_message_origin, F.col("o.dests")).alias("dests"),
        F.when(is_deliver, F.coalesce(F.col("node"), F.col("o.node")))
        .otherwise(F.col("o.node")).alias("node"),
        (first & is_deliver & F.col("again")).alias("duplicated"),
        (first & is_deliver & ~F.coalesce(F.array_contains("o.dests", F.col("process")),
                                          F.lit(True))).alias("not_dest"),
        F.when(is_message_origin & (F.size(lost) > 0), lost).alias("lost_dests"),
        F.when((F.col("origins") > 1) & ~is_recv, F.lit(1))
        .when(F.col("origins") == 0, F.lit(2)).cast("byte").alias("id_problem"),
        (is_deliver & (F.col("wall") < F.col("o.wall"))).alias("wall_before_send"))


def _by_process(u):
    """Sort each process's rows by seq: numbering, running stamps, certificate, counters."""
    code = F.col("kind_code")
    wp = Window.partitionBy("process").orderBy("seq")
    before = wp.rowsBetween(Window.unboundedPreceding, -1)
    first_del = F.col("first_delivery") & (code == K.DELIVER)
    prev_seq = F.lag("seq").over(wp)
    seen_before = F.max("stamp").over(before)
    prev_wall = F.lag("wall").over(wp)
    return u.select(
        "process", "seq", "kind_code", "msg", "first_delivery", "wall", "sender_process",
        "send_seq", "is_destroy", "stamp", "dests", "node", "duplicated", "not_dest",
        "lost_dests", "id_problem", "row_problem",
        F.when(F.when(prev_seq.isNull(), F.col("seq") != 0)
               .otherwise(F.col("seq") != prev_seq + 1),
               F.coalesce(prev_seq, F.lit(-1))).alias("seq_problem"),
        (first_del & (F.max(F.when(first_del, F.col("stamp"))).over(before) >= F.col("stamp")))
        .alias("w1_fails"),
        (F.col("wall").isNull() | (F.col("wall") < prev_wall)
         | F.coalesce("wall_before_send", F.lit(False))).alias("wall_fails"),
        seen_before.alias("seen_before"),
        F.greatest(seen_before, F.col("stamp")).alias("seen"),
        # a signal received here is next covered by the send numbered sends_before (tier 1
        # of the signal witness joins on it)
        F.count(F.when(code <= K.DESTROY, 1)).over(before).alias("sends_before"),
        # the exact vector clocks start an origin from the last receive before it; a run of
        # receives between two origins shares origins_before. Internal events (coded above
        # the receives) are no receives: the rounds keep clocks only at receives, so a
        # last_recv naming an internal event would start its origin from no clock at all
        F.max(F.when(code.isin(*K.RECEIVES), F.col("seq"))).over(before)
        .alias("last_recv"),
        F.count(F.when(code <= K.SIGNAL_SEND, 1)).over(before).alias("origins_before"))


def run(checker):
    """The main pass: one shuffle by message id, one by process, one aggregation.

    Rows travel narrow (kind as a byte, flags instead of the columns they come from). The
    result is persisted (MEMORY_AND_DISK) and one aggregation answers every count;
    everything later (fifo and node_rules windows when needed, examples, the signal part of
    the witness, the exact paths) reads it.
    """
    c = checker
    ev = c.trace.df
    packed = pack_stamp(c)
    c.stamps_packed = packed is not None
    c.stamps_too_wide = bool(c.trace.stamp_ranges) and packed is None
    code = K.kind_code()
    is_message_origin = code <= K.DESTROY
    stamp = (F.when(is_message_origin, packed) if packed is not None
             else F.lit(None).cast("long"))
    base = ev.select("process", "seq", code.alias("kind_code"), "msg",
                     row_problem_code().alias("row_problem"),
                     F.when(is_message_origin, F.col("dests")).alias("dests"),
                     "node", stamp.alias("stamp"), F.col("wall_ns").alias("wall"))
    internal = base.where(F.col("kind_code") == K.INTERNAL).select(
        "process", "seq", "kind_code", "wall", "row_problem")
    u = _by_message(base).unionByName(internal, allowMissingColumns=True)
    cached = c.persist(_by_process(u))
    code = F.col("kind_code")
    c.rows = rows = cached.withColumn("kind", K.kind_name(code))
    one = F.lit(1)
    stamped = F.col("stamp").isNotNull()
    c.stats = st = cached.agg(
        F.count(F.when(F.col("row_problem").isNotNull(), one)).alias("row_problems"),
        F.sort_array(F.collect_set("process")).alias("processes"),
        F.count(F.when((code <= K.DESTROY) & ~stamped, one)).alias("unstamped"),
        F.count(F.when(code <= K.DESTROY, one)).alias("messages"),
        F.count(F.when(code == K.DESTROY, one)).alias("destroys"),
        F.min(F.when(F.col("seq_problem").isNotNull(),
                     F.struct("process", "seq", "seq_problem"))).alias("seq_problem"),
        F.min(F.when(F.col("id_problem") == 1, F.struct(
            code.isin(*K.SIGNALS).alias("is_signal"), "msg", "process", "seq")))
        .alias("multi_origin"),
        F.min(F.when(F.col("id_problem") == 2, F.struct(
            code.isin(*K.SIGNALS).alias("is_signal"), "msg", "process", "seq", "kind_code")))
        .alias("dangling"),
        F.count(F.when(F.col("not_dest"), one)).alias("not_dest"),
        F.count(F.when(F.col("duplicated") & ~F.col("not_dest"), one)).alias("duplicated"),
        F.sum(F.size("lost_dests")).alias("lost"),
        F.count(F.when(F.col("w1_fails"), one)).alias("w1_fails"),
        F.count(F.when((code <= K.DESTROY) & (F.col("seen_before") >= F.col("stamp")), one))
        .alias("w2_fails"),
        F.count(F.when(code.isin(*K.SIGNALS), one)).alias("signals"),
        F.count(F.when(F.col("wall_fails"), one)).alias("wall_fails"),
    ).collect()[0]
    if st["row_problems"]:
        raise_row_problem(c.trace.df)
    _raise_numbering_and_ids(c)
    tr = c.trace
    tr.processes = list(st["processes"])
    tr.has_stamps = bool(st["messages"]) and int(st["unstamped"]) == 0
    tr.has_destroy = int(st["destroys"]) > 0
    c.stamps_packed = c.stamps_packed and tr.has_stamps
    c.set_procs(tr.processes)
    c.deliveries = rows.where(code == K.DELIVER).select(
        "msg", "process", F.col("seq").alias("deliver_seq"), "sender_process", "send_seq",
        "is_destroy", "node", "first_delivery", "stamp")
    c.first_deliveries = c.deliveries.where("first_delivery")
    c.sends = rows.where(code <= K.DESTROY).select(
        "msg", "sender_process", "send_seq", "dests", "node", "is_destroy", "stamp",
        F.col("wall").alias("send_wall"))


def _raise_numbering_and_ids(c):
    """Raise TraceError for the row rules the main pass checks (seq numbering, ids)."""
    st, df = c.stats, c.trace.df
    fname = F.col("_metadata.file_name")
    if st["seq_problem"] is not None:
        b = st["seq_problem"]
        f = file_of(df, fname, b["process"], b["seq"])
        if b["seq_problem"] < 0:
            what = f"first seq is {b['seq']}, expected 0"
        elif b["seq"] == b["seq_problem"]:
            what = f"duplicate seq {b['seq']}"
        else:
            what = f"gap in seq: {b['seq_problem']} is followed by {b['seq']}"
        raise TraceError(f"{f}: column 'seq' of process {b['process']}: {what}")
    code = F.col("kind_code")
    if st["multi_origin"] is not None:
        b = st["multi_origin"]
        space = "signal" if b["is_signal"] else "message"
        origin = code == K.SIGNAL_SEND if b["is_signal"] else code <= K.DESTROY
        n = c.rows.where((F.col("msg") == b["msg"]) & origin).count()
        raise TraceError(f"{file_of(df, fname, b['process'], b['seq'])}: column 'msg': "
                         f"{space} id {b['msg']} is sent by {n} rows "
                         f"(ids must be unique in the trace)")
    if st["dangling"] is not None:
        b = st["dangling"]
        r = {"process": b["process"], "seq": b["seq"],
             "kind": K.NAMES.get(b["kind_code"], "?"), "msg": b["msg"]}
        f = file_of(df, fname, r["process"], r["seq"])
        is_message = not b["is_signal"]
        what = "delivers unknown message" if is_message else "receives unknown signal"
        src = "no send or destroy row" if is_message else "no signal_send row"
        raise TraceError(f"{f}: column 'msg': row {fmt_row(r)} {what} {b['msg']} "
                         f"({src} has that id)")
