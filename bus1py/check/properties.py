# Invariants: every property is computed from the trace rows alone with built-in DataFrame
# functions (no Python UDFs, no extra JARs); happened-before is derived from process order,
# send->deliver and signal_send->signal_recv, never from stamps or wall clocks. Stamps are
# used only as a *witness*: if the witness holds, `consistent` and `causal` hold (proof in
# docs/CHECKER.md); if it fails or is absent, the exact formulations decide. Definitions
# (the reference checker in reference.py implements the same ones by brute force):
#   first delivery  = the lowest-seq deliver row of a message at a process; ordering
#                     properties look at first deliveries only, duplicates are exactly_once's.
#   exactly_once    = count of (message, process) pairs that are lost (a destination with no
#                     delivery, unless it delivered NODE_DESTROY for the message's node),
#                     duplicated (delivered more than once), or delivered to a non-destination.
#   fifo            = count of first deliveries of m at p preceded at p by a first delivery of
#                     a message the same sender sent later.
#   causal          = count of first deliveries of m1 at p preceded at p by a first delivery
#                     of some m2 with send(m1) happened-before send(m2).
#   consistent      = count of strongly connected components with more than one message in
#                     the graph whose edges join consecutive first deliveries of each process.
#   node_rules      = count of deliver rows of data messages for node n at p after p's first
#                     delivery of a NODE_DESTROY for n.
# Only a handful of counterexample rows ever reach the driver; everything else stays in Spark
# (persisted MEMORY_AND_DISK, so big traces spill instead of exhausting memory).
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager

from pyspark import StorageLevel
from pyspark.sql import Observation, Window
from pyspark.sql import functions as F

from .screen import kind_code, kind_name, screen

PROPERTIES = ("exactly_once", "fifo", "causal", "consistent", "node_rules")
MAX_ROUNDS_FACTOR = 4      # rounds cap = 4*P + 16; convergence comes far earlier (docs)


def _ev(process, seq, kind, msg, **extra):
    d = {"process": int(process), "seq": int(seq), "kind": kind,
         "msg": None if msg is None else int(msg)}
    d.update({k: v for k, v in extra.items() if v is not None})
    return d


def _inversion_example(why, first, second, process):
    """A delivery-order counterexample: `first` (sent first) and `second` are rows with the
    sender's process and seq (sp, ss), the delivering seq (ds), msg and destroy; `process`
    delivered `second` before `first`."""
    kind = lambda r: "destroy" if r["destroy"] else "send"  # noqa: E731
    return {"why": why,
            "events": [_ev(first["sp"], first["ss"], kind(first), first["msg"]),
                       _ev(second["sp"], second["ss"], kind(second), second["msg"]),
                       _ev(process, second["ds"], "deliver", second["msg"]),
                       _ev(process, first["ds"], "deliver", first["msg"])],
            "highlight": [int(first["msg"]), int(second["msg"])]}


class Checker:
    """One check of one trace. `phase` callbacks feed the CLI's progress display."""

    def __init__(self, spark, trace, exact=False, max_examples=3, on_phase=None,
                 keep_details=False, group_span=None):
        self.spark = spark
        self.trace = trace
        self.force_exact = exact
        self.max_examples = max_examples
        self.on_phase = on_phase or (lambda name: None)
        self.keep_details = keep_details
        self.details = {}          # property -> violations DataFrame (tests group these)
        self.timings = {}
        self.rounds = {}
        self._persisted = []
        # group_span: the trace is a union of independent sub-traces whose process ids are
        # k*span + i (no event of one names a message or signal of another). Vector columns
        # can then be shared by index i across sub-traces, so a batch of many small traces
        # costs as many columns as its widest member instead of the sum (tests batch this way).
        self.span = group_span
        self.tier1_failed = False
        self.rows = None           # the main pass's table (_base), built only when needed
        self.screen = "not run"
        self._set_procs(trace.processes)

    def _set_procs(self, procs):
        self.procs = list(procs)
        self.P = len(self.procs)
        if self.span:
            self.P = max(p % self.span for p in self.procs) + 1 if self.procs else 0

    # ------------------------------------------------------------------ helpers
    def _phase(self, name):
        self.on_phase(name)
        self.spark.sparkContext.setJobDescription(name)

    def _persist(self, df):
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def _checkpoint(self, df):
        # localCheckpoint cuts the lineage of iterative rounds (otherwise each round's plan
        # contains all previous ones and planning time grows quadratically).
        return df.localCheckpoint(eager=True)

    def _fixpoint(self, step, cols):
        """Rounds state = step(state), from state None, until the sum of the columns `cols`
        stops changing; returns (state, rounds). Every round only grows values, so an
        unchanged sum means an unchanged table. Each round is local-checkpointed, and its
        sum is observed while the checkpoint is written (no second job per round)."""
        total = sum(F.sum(F.coalesce(F.col(c), F.lit(-1)).cast("long")) for c in cols)
        state, prev = None, None
        for rnd in range(1, MAX_ROUNDS_FACTOR * self.P + 17):
            seen = Observation()
            state = self._checkpoint(step(state).observe(seen, total.alias("t")))
            total_now = seen.get["t"]
            if total_now == prev:
                break
            prev = total_now
        return state, rnd

    @contextmanager
    def _conf(self, **kv):
        """Runtime SQL settings for one phase (dots written as __), restored afterwards."""
        old = {}
        for k, v in kv.items():
            key = "spark.sql." + k.replace("__", ".")
            old[key] = self.spark.conf.get(key, None)
            self.spark.conf.set(key, v)
        try:
            yield
        finally:
            for key, v in old.items():
                if v is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, v)

    def _pidx(self, col):
        # dense process index 0..P-1, without a join: P is small (one per process)
        if self.span:
            return (col % F.lit(self.span)).cast("int")
        return (F.array_position(F.array(*[F.lit(p) for p in self.procs]), col) - 1).cast("int")

    def _group(self, col):
        return (F.floor(col / F.lit(self.span)) if self.span else F.lit(0)).cast("long")

    def unpersist(self):
        for df in self._persisted:
            try:
                df.unpersist()
            except Exception:
                pass
        self._persisted = []

    # ------------------------------------------------------------------ base tables
    def _stamp(self):
        """The send stamp (ts, peer, tx) packed into one order-preserving long, or None.

        Each component is offset by its minimum over the trace (footer statistics) and given
        the bits its range needs; the packing is injective and monotone for the lexicographic order, so
        comparisons of packed stamps are comparisons of stamps. Wider stamps (more than 62
        bits in all) leave the witness inconclusive and the exact path decides.
        """
        r = self.trace.stamp_ranges
        if not r:
            return None
        names = ("stamp_tx", "stamp_peer", "stamp_ts")          # least significant first
        bits = [max(1, (r[c][1] - r[c][0]).bit_length()) for c in names]
        if sum(bits) > 62:
            return None
        expr, shift = None, 0
        for c, b in zip(names, bits):
            part = (F.col(c) - F.lit(r[c][0])).cast("long")
            part = F.shiftleft(part, shift) if shift else part
            expr = part if expr is None else expr + part
            shift += b
        return expr

    def _base(self):
        """The main pass: one shuffle by message id, one by process, one aggregation.

        By message id (space, msg), one window sorted origin-first attaches the origin's
        fields to every receive, marks first deliveries and duplicates, lists the lost
        destinations on the origin row and counts origins (validation of ids). By process,
        one window sorted by seq checks the seq numbering and computes the witness's running
        stamps (L, DV), the wall-clock certificate and each row's number of earlier sends.
        Rows travel narrow (kind as a byte, flags instead of the columns they come from).
        The result is persisted (MEMORY_AND_DISK) and one aggregation answers every count;
        everything later (fifo and node_rules windows when needed, examples, the signal part
        of the witness, the exact paths) reads it.
        """
        ev = self.trace.df
        k = F.col("kind")
        packed = self._stamp()
        self.stamps_packed = packed is not None
        self.stamps_too_wide = bool(self.trace.stamp_ranges) and packed is None
        T = (F.when(k.isin("send", "destroy"), packed) if packed is not None
             else F.lit(None).cast("long"))
        self.ev = ev.select("process", "seq", "kind", "msg", "dests", "node", T.alias("T"),
                            F.col("wall_ns").alias("wall"))
        kc = F.col("kc")
        code = kind_code()
        from .load import row_problem_code
        base = ev.select("process", "seq", code.alias("kc"), "msg",
                         row_problem_code().alias("pb"),
                         F.when(k.isin("send", "destroy"), F.col("dests")).alias("dests"),
                         "node", T.alias("T"), F.col("wall_ns").alias("wall"))
        isrecv = kc >= 3
        m = base.where(kc != 5).select(
            "process", "seq", "kc", "msg", "node", "wall", "T", "dests", "pb",
            (kc.isin(2, 4)).alias("sig"), isrecv.alias("isrecv"))
        wm = Window.partitionBy("sig", "msg").orderBy("isrecv", "process", "seq")
        whole = wm.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        upto = wm.rowsBetween(Window.unboundedPreceding, 0)
        o = F.first(F.when(~F.col("isrecv"), F.struct(
            F.col("process").alias("sp"), F.col("seq").alias("ss"),
            F.array_distinct("dests").alias("dests"), F.col("node").alias("snode"),
            (kc == 1).alias("destroy"), F.col("T").alias("T"),
            F.col("wall").alias("sw"))), True).over(upto)
        prevp = F.lag("process").over(wm)
        prevr = F.lag("isrecv").over(wm)
        nextp = F.lead("process").over(wm)
        m = m.select(
            "process", "seq", "kc", "msg", "node", "wall", "isrecv", "pb", o.alias("o"),
            F.count(F.when(~F.col("isrecv"), 1)).over(whole).alias("norig"),
            (F.col("isrecv") & ~F.coalesce(prevr & (prevp == F.col("process")), F.lit(False)))
            .alias("first"),
            F.coalesce(F.col("isrecv") & (nextp == F.col("process")), F.lit(False)).alias("again"),
            F.collect_set(F.when(kc == 3, F.col("process"))).over(whole).alias("got"))
        isdel = kc == 3
        issend = kc <= 1
        lost = F.array_except("o.dests", "got")
        m = m.select(
            "process", "seq", "kc", "msg", "first", "wall", "pb",
            F.col("o.sp").alias("sp"), F.col("o.ss").alias("ss"),
            F.col("o.destroy").alias("destroy"),
            F.when(issend | isdel, F.col("o.T")).alias("T"),
            F.when(issend, F.col("o.dests")).alias("dests"),
            F.when(isdel, F.coalesce(F.col("node"), F.col("o.snode")))
            .otherwise(F.col("o.snode")).alias("nnode"),
            (F.col("first") & isdel & F.col("again")).alias("dup"),
            (F.col("first") & isdel & ~F.coalesce(F.array_contains("o.dests", F.col("process")),
                                                  F.lit(True))).alias("nd"),
            F.when(issend & (F.size(lost) > 0), lost).alias("lost"),
            F.when((F.col("norig") > 1) & ~F.col("isrecv"), F.lit(1))
            .when(F.col("norig") == 0, F.lit(2)).cast("byte").alias("idbad"),
            (isdel & (F.col("wall") < F.col("o.sw"))).alias("walb"))
        internal = base.where(kc == 5).select("process", "seq", "kc", "wall", "pb")
        u = m.unionByName(internal, allowMissingColumns=True)
        wp = Window.partitionBy("process").orderBy("seq")
        before = wp.rowsBetween(Window.unboundedPreceding, -1)
        fdel = F.col("first") & (kc == 3)
        prevseq = F.lag("seq").over(wp)
        Lprev = F.max("T").over(before)
        wprev = F.lag("wall").over(wp)
        u = u.select(
            "process", "seq", "kc", "msg", "first", "wall", "sp", "ss", "destroy", "T",
            "dests", "nnode", "dup", "nd", "lost", "idbad", "pb",
            F.when(F.when(prevseq.isNull(), F.col("seq") != 0)
                   .otherwise(F.col("seq") != prevseq + 1),
                   F.coalesce(prevseq, F.lit(-1))).alias("seqbad"),
            (fdel & (F.max(F.when(fdel, F.col("T"))).over(before) >= F.col("T")))
            .alias("orderbad"),
            (F.col("wall").isNull() | (F.col("wall") < wprev) | F.coalesce("walb", F.lit(False)))
            .alias("wallbad"),
            Lprev.alias("Lprev"),
            F.greatest(Lprev, F.col("T")).alias("L"),
            # sends before this row: a signal received here is next covered by the send
            # numbered nsb (tier 1 of the signal witness joins on it)
            F.count(F.when(kc <= 1, 1)).over(before).alias("nsb"),
            # the last receive before this row (the exact vector clocks start from it), and
            # the origins before it (a run of receives between two origins shares it)
            F.max(F.when(kc >= 3, F.col("seq"))).over(before).alias("lr"),
            F.count(F.when(kc <= 2, 1)).over(before).alias("nob"))
        cached = self._persist(u)
        self.rows = r = cached.withColumn("kind", kind_name(kc))
        one = F.lit(1)
        stamped = F.col("T").isNotNull()
        self.stats = cached.agg(
            F.count(F.when(F.col("pb").isNotNull(), one)).alias("pbad"),
            F.sort_array(F.collect_set("process")).alias("procs"),
            F.count(F.when((kc <= 1) & ~stamped, one)).alias("unstamped"),
            F.count(F.when(kc <= 1, one)).alias("msgs"),
            F.count(F.when(kc == 1, one)).alias("destroys"),
            F.min(F.when(F.col("seqbad").isNotNull(), F.struct("process", "seq", "seqbad")))
            .alias("seqbad"),
            F.min(F.when(F.col("idbad") == 1, F.struct(kc.isin(2, 4).alias("sig"), "msg",
                                                      "process", "seq"))).alias("multi"),
            F.min(F.when(F.col("idbad") == 2, F.struct(kc.isin(2, 4).alias("sig"), "msg",
                                                      "process", "seq", "kc")))
            .alias("dangling"),
            F.count(F.when(F.col("nd"), one)).alias("notdest"),
            F.count(F.when(F.col("dup") & ~F.col("nd"), one)).alias("dup"),
            F.sum(F.size("lost")).alias("lost"),
            F.count(F.when(F.col("orderbad"), one)).alias("order"),
            F.count(F.when((kc <= 1) & (F.col("Lprev") >= F.col("T")), one)).alias("send"),
            F.count(F.when(kc.isin(2, 4), one)).alias("sig"),
            F.count(F.when(F.col("wallbad"), one)).alias("wall"),
        ).collect()[0]
        st = self.stats
        if st["pbad"]:
            from .load import raise_row_problem
            raise_row_problem(self.trace.df)
        self._deferred_validation()
        tr = self.trace
        tr.processes = list(st["procs"])
        tr.has_stamps = bool(st["msgs"]) and int(st["unstamped"]) == 0
        tr.has_destroy = int(st["destroys"]) > 0
        self.stamps_packed = self.stamps_packed and tr.has_stamps
        self._set_procs(tr.processes)
        dl = r.where(kc == 3)
        self.dj = dl.select("msg", F.col("process").alias("p"), F.col("seq").alias("ds"),
                            "sp", "ss", "destroy", "nnode", "first", "T")
        self.fd = self.dj.where("first")
        self.sends = r.where(kc <= 1).select(
            "msg", "sp", "ss", "dests", F.col("nnode").alias("snode"), "destroy", "T",
            F.col("wall").alias("sw"))

    def _deferred_validation(self):
        """Raise TraceError for the row rules the main pass checks (seq numbering, ids)."""
        from .load import TraceError, _file_of, _fmt_row
        st, df = self.stats, self.trace.df
        fname = F.col("_metadata.file_name")
        if st["seqbad"] is not None:
            b = st["seqbad"]
            f = _file_of(df, fname, b["process"], b["seq"])
            if b["seqbad"] < 0:
                what = f"first seq is {b['seq']}, expected 0"
            elif b["seq"] == b["seqbad"]:
                what = f"duplicate seq {b['seq']}"
            else:
                what = f"gap in seq: {b['seqbad']} is followed by {b['seq']}"
            raise TraceError(f"{f}: column 'seq' of process {b['process']}: {what}")
        if st["multi"] is not None:
            b = st["multi"]
            sp = "signal" if b["sig"] else "message"
            n = (self.rows.where((F.col("msg") == b["msg"]) & (F.col("kc").isin(2) if b["sig"]
                                                             else F.col("kc") <= 1)).count())
            raise TraceError(f"{_file_of(df, fname, b['process'], b['seq'])}: column 'msg': "
                             f"{sp} id {b['msg']} is sent by {n} rows "
                             f"(ids must be unique in the trace)")
        if st["dangling"] is not None:
            b = st["dangling"]
            kinds = {3: "deliver", 4: "signal_recv"}
            r = {"process": b["process"], "seq": b["seq"], "kind": kinds.get(b["kc"], "?"),
                 "msg": b["msg"]}
            f = _file_of(df, fname, r["process"], r["seq"])
            msg = not b["sig"]
            what = "delivers unknown message" if msg else "receives unknown signal"
            src = "no send or destroy row" if msg else "no signal_send row"
            raise TraceError(f"{f}: column 'msg': row {_fmt_row(r)} {what} {b['msg']} "
                             f"({src} has that id)")

    # ------------------------------------------------------------------ exactly_once
    def exactly_once(self):
        st = self.stats
        k = F.col("kind")
        r = self.rows
        lostp = (r.where(F.col("lost").isNotNull() & (F.size("lost") > 0))
                 .select("msg", "sp", "ss", "destroy", F.col("nnode").alias("snode"),
                         F.explode("lost").alias("process")))
        if self.trace.has_destroy:
            # the bus drops data for a node its receiver saw destroyed: not a loss
            destroyed = (self.dj.where("destroy")
                         .select(F.col("p").alias("process"), F.col("nnode").alias("snode"))
                         .distinct().withColumn("excused", F.lit(True)))
            lostp = (lostp.join(destroyed, ["process", "snode"], "left")
                     .where(F.col("excused").isNull() | F.col("destroy")))
        lostp = lostp.select("msg", "process", "sp", "ss", "destroy",
                             F.lit("lost").alias("problem"))
        dl = r.where((k == "deliver") & F.col("first")).select(
            "msg", "process", "sp", "ss", "destroy",
            F.when(F.col("nd"), F.lit("not a destination"))
            .when(F.col("dup"), F.lit("duplicated")).alias("problem"))
        v = lostp.unionByName(dl.where(F.col("problem").isNotNull()))
        n_lost = int(st["lost"] or 0)
        if n_lost and self.trace.has_destroy:
            n_lost = lostp.count()
        n = n_lost + int(st["notdest"]) + int(st["dup"])
        examples = []
        if n:
            for e in v.orderBy("msg", "process").limit(self.max_examples).collect():
                kind = "destroy" if e["destroy"] else "send"
                evs = [_ev(e["sp"], e["ss"], kind, e["msg"])]
                dss = []
                if e["problem"] != "lost":
                    dss = [x["ds"] for x in self.dj.where(
                        (F.col("msg") == e["msg"]) & (F.col("p") == e["process"]))
                        .select("ds").orderBy("ds").collect()]
                evs += [_ev(e["process"], d, "deliver", e["msg"]) for d in dss[:3]]
                why = {"lost": f"message {e['msg']} was never delivered at destination "
                               f"process {e['process']}",
                       "duplicated": f"message {e['msg']} was delivered {len(dss)} times at "
                                     f"process {e['process']}",
                       "not a destination": f"message {e['msg']} was delivered at process "
                                            f"{e['process']}, which is not among its "
                                            f"destinations"}[e["problem"]]
                examples.append({"problem": e["problem"], "why": why, "events": evs,
                                 "highlight": [int(e["msg"])]})
        return v, n, examples

    # ------------------------------------------------------------------ fifo
    def fifo(self):
        """Exact: a window per (receiver, sender) over first deliveries, carrying the largest
        (send seq, msg) delivered so far. When W1 and W2 hold (main pass) it is skipped:
        a sender's sends then have increasing stamps and every receiver delivers in stamp
        order, so no delivery can overtake an earlier send of its sender."""
        st = self.stats
        if self.stamps_packed and not st["order"] and not st["send"]:
            self.fifo_method = "stamp witness"
            return None, 0, []
        self.fifo_method = "exact"
        k = F.col("kind")
        fdel = F.col("first") & (k == "deliver")
        wf = (Window.partitionBy("process", "sp").orderBy("seq")
              .rowsBetween(Window.unboundedPreceding, -1))
        d = self.rows.where(fdel).select("process", "seq", "msg", "sp", "ss", "destroy")
        d = d.withColumn("prev", F.max(F.struct("ss", "msg", F.col("seq").alias("ds"),
                                                "destroy")).over(wf))
        v = self._persist(d.where(F.col("prev.ss") > F.col("ss")).select(
            "process", F.col("seq").alias("ds"), "msg", "sp", "ss", "destroy", "prev"))
        n = v.count()
        examples = []
        if n:
            for r in v.orderBy("process", "ds").limit(self.max_examples).collect():
                pr = r["prev"].asDict()
                pr["sp"] = r["sp"]
                examples.append(_inversion_example(
                    f"process {r['sp']} sent {r['msg']} before {pr['msg']}, but "
                    f"process {r['process']} delivered {pr['msg']} first", r, pr, r["process"]))
        return v, n, examples

    # ------------------------------------------------------------------ node_rules
    def node_rules(self):
        """A window per (receiver, node) over deliveries: the first NODE_DESTROY delivered
        so far, and data delivered after it. Nothing to do in a trace without destroys."""
        if not self.trace.has_destroy:
            return None, 0, []
        k = F.col("kind")
        wn = (Window.partitionBy("process", "nnode").orderBy("seq")
              .rowsBetween(Window.unboundedPreceding, -1))
        d = self.rows.where((k == "deliver") & F.col("nnode").isNotNull()).select(
            "process", "seq", "msg", "sp", "ss", "nnode", "destroy")
        d = d.withColumn("x", F.min(F.when(F.col("destroy"), F.struct(
            F.col("seq").alias("ds"), "msg", "sp", "ss"))).over(wn))
        v = self._persist(d.where(~F.col("destroy") & F.col("x").isNotNull()).select(
            "process", F.col("seq").alias("ds"), "msg", "sp", "ss", "nnode", "x"))
        n = v.count()
        examples = []
        if n:
            for r in v.orderBy("process", "ds").limit(self.max_examples).collect():
                x = r["x"]
                examples.append({
                    "why": f"process {r['process']} delivered NODE_DESTROY {x['msg']} for node "
                           f"{r['nnode']} and afterwards data message {r['msg']} for that node",
                    "events": [_ev(x["sp"], x["ss"], "destroy", x["msg"], node=r["nnode"]),
                               _ev(r["process"], x["ds"], "deliver", x["msg"], node=r["nnode"]),
                               _ev(r["sp"], r["ss"], "send", r["msg"]),
                               _ev(r["process"], r["ds"], "deliver", r["msg"],
                                   node=r["nnode"])],
                    "highlight": [int(r["msg"])]})
        return v, n, examples

    # ------------------------------------------------------------------ witness
    def witness(self):
        """(consistent_ok, causal_ok, message) as proved by stamps; unproven -> not ok.

        W1, W2 and the delivery-to-destination check are one sort of each process's events;
        W3 (per-destination signal knowledge) runs only when signals exist. Proof of
        soundness in docs/CHECKER.md ("The stamp witness").
        """
        if self.stamps_too_wide:
            return False, False, "inconclusive: stamps too wide to pack into 62 bits"
        if not self.trace.has_stamps:
            return False, False, "absent: some send/destroy row has no stamp"
        if not self.stamps_packed:
            return False, False, "inconclusive: stamps too wide to pack into 62 bits"
        st = self.stats
        if st["order"]:
            return False, False, "failed: a process delivers against stamp order"
        if st["send"]:
            return True, False, "partial: deliveries follow stamps, but a send's stamp is " \
                                "not above what its process had sent or delivered"
        if st["notdest"]:
            return True, False, "partial: a message was delivered to a process not among " \
                                "its destinations"
        if not st["sig"]:
            return True, True, "holds"
        local = self.rows.where(F.col("kind") != "internal")
        if not self.tier1_failed:   # the screen may have tried tier 1 already
            k = F.col("kind")
            ok = self._timed(
                "witness_tier1", self._scalar_signal_witness,
                local.where(k.isin("signal_send", "signal_recv"))
                .select("process", "seq", "kind", "msg", "L", "nsb"),
                local.where(k.isin("send", "destroy")).select("process", "nsb", "T"))
            if ok:
                return True, True, "holds"
        ok, why = self._signal_witness(local, wall_ok=st["wall"] == 0)
        return True, ok, why

    def _scalar_signal_witness(self, sig, sends):
        """Tier 1: V(e) = L(e) joined with V of every signal received up to e, carried over
        signal chains in rounds over the signal rows only; it holds when the first send
        after each signal_recv is stamped above the V that signal brought (later sends are
        above it too, by W2). Sufficient for causal (docs); cheap: the final check is a
        broadcast join of the signal arrivals with the sends on (process, send index).

        sig: the signal rows (process, seq, kind, msg, L, nsb); sends: (process, nsb, T) of
        at least every send that is the first after a signal_recv."""
        k = F.col("kind")
        sig = self._persist(sig)
        sv = sig.where(k == "signal_send").select("msg", F.col("L").alias("SV"))
        wsig = (Window.partitionBy("process").orderBy("seq")
                .rowsBetween(Window.unboundedPreceding, 0))
        rec = None
        for rnd in range(1, 9):
            rec = sig.join(sv.withColumnRenamed("SV", "inc"), "msg", "left").withColumn(
                "inc", F.when(k == "signal_recv", F.col("inc")))
            rec = rec.withColumn("V", F.greatest("L", F.max("inc").over(wsig)))
            rec = self._checkpoint(rec)
            sv_new = rec.where(k == "signal_send").select("msg", F.col("V").alias("SV"))
            changed = (sv_new.join(sv.withColumnRenamed("SV", "old"), "msg")
                       .where(~F.col("SV").eqNullSafe(F.col("old"))).limit(1).count())
            sv = sv_new
            if not changed:
                break
        else:
            return False
        self.rounds["witness_tier1_rounds"] = rnd
        arr = rec.where((k == "signal_recv") & F.col("inc").isNotNull()).select(
            "process", "nsb", "inc")
        bad = (sends.join(F.broadcast(arr), ["process", "nsb"])
               .where(F.col("T") <= F.col("inc")).limit(1).count())
        return not bad

    def _dest_of(self, i_col, p_col):
        """Process id of destination index i, for an entry held at process p."""
        if self.span:
            return (self._group(p_col) * F.lit(self.span) + i_col).cast("int")
        return F.element_at(F.array(*[F.lit(p) for p in self.procs]), i_col + 1).cast("int")

    def _signal_witness(self, local, wall_ok):
        """W3: per-destination knowledge carried across side channels (docs/CHECKER.md)."""
        k = F.col("kind")
        P = self.P
        ss = local.where(k == "signal_send").select(
            "msg", F.col("process").alias("xp"), F.col("seq").alias("xs"),
            F.col("L").alias("Lx"), F.col("wall").alias("xw"))
        sr = local.where(k == "signal_recv").select(
            "msg", F.col("process").alias("yp"), F.col("seq").alias("ys"),
            F.col("L").alias("Ly"), F.col("wall").alias("yw"))
        sj = self._persist(ss.join(sr, "msg"))
        live = sj.where(F.col("Lx").isNotNull()
                        & (F.col("Ly").isNull() | (F.col("Lx") > F.col("Ly"))))
        st = sj.agg(F.count(F.when(F.col("yw") < F.col("xw"), 1)).alias("wallbad"),
                    F.count(F.when(F.col("Lx").isNotNull() & (F.col("Ly").isNull()
                                                             | (F.col("Lx") > F.col("Ly"))),
                                   1)).alias("live"),
                    F.max(F.when(F.col("Lx") > F.coalesce(F.col("Ly"), F.lit(-1)), F.col("Lx")))
                    .alias("hi"),
                    F.min(F.when(F.col("Lx") > F.coalesce(F.col("Ly"), F.lit(-1)),
                                 F.coalesce(F.col("Ly"), F.lit(-1)))).alias("lo")).collect()[0]
        if not st["live"]:
            self.rounds["witness_signal_rounds"] = 0
            return True, "holds"
        by_wall = wall_ok and st["wallbad"] == 0
        # Seeds: for each live signal and destination d, an upper bound of the stamps of
        # messages to d that the signal_send x knows. With the wall-clock certificate (wall
        # never decreases along any edge, so send(m) -> x implies wall(send m) <= wall(x)):
        # min(L(x), the largest stamp of a message to d sent at wall time <= wall(x)).
        # Without it: the largest stamp <= L(x) of a message to d. One as-of sort per
        # destination over the message-destination pairs (stamps <= min L(y) cannot matter).
        lo = F.col("T") > F.lit(st["lo"]) if st["lo"] is not None else F.lit(True)
        src = self.sends.where(lo) if by_wall else \
            self.sends.where((F.col("T") <= F.lit(st["hi"])) & lo)
        key_m = F.col("sw") if by_wall else F.col("T")
        key_q = F.col("xw") if by_wall else F.col("Lx")
        md = (src.select(F.explode("dests").alias("d"), key_m.alias("key"), "T")
              .select("d", "key", F.lit(0).alias("isq"), "T",
                      F.lit(None).cast("int").alias("yp"), F.lit(None).cast("long").alias("ys"),
                      F.lit(None).cast("long").alias("Ly"), F.lit(None).cast("long").alias("Lx")))
        q = (live.select(F.explode(F.sequence(F.lit(0), F.lit(P - 1))).alias("i"),
                         "Lx", "xw", "yp", "ys", "Ly")
             .select(self._dest_of(F.col("i"), F.col("yp")).alias("d"), key_q.alias("key"),
                     F.lit(1).alias("isq"), F.lit(None).cast("long").alias("T"),
                     "yp", "ys", "Ly", "Lx"))
        w = (Window.partitionBy("d").orderBy("key", "isq")
             .rowsBetween(Window.unboundedPreceding, 0))
        u = md.unionByName(q).withColumn("best", F.max("T").over(w))
        g = F.when(F.col("best").isNotNull(), F.least(F.col("best"), F.col("Lx")))
        seeds = (u.where(F.col("isq") == 1)
                 .select(F.col("yp").alias("p"), F.col("ys").alias("s"), "d", g.alias("st"))
                 .where(F.col("st").isNotNull()
                        & (F.col("Ly").isNull() | (F.col("st") > F.col("Ly")))))
        seeds = self._checkpoint(seeds.groupBy("p", "s", "d").agg(F.max("st").alias("st")))
        # Rounds: entries arrive at receive events, every process sweeps them forward
        # (running max per destination column, pruned at each read by L), sends and
        # signal_sends forward what is still alive to their receivers.
        reads = local.where(k.isin("send", "destroy", "signal_send")).select(
            F.col("process").alias("p"), F.col("seq").alias("s"), "kind", "msg", "T", "dests",
            F.when(k == "signal_send", F.col("L")).otherwise(F.col("Lprev")).alias("thr"))
        dl = local.where(k == "deliver").select("msg", F.col("process").alias("p"),
                                                F.col("seq").alias("s"), "L")
        srj = sj.select("msg", "yp", "ys", "Ly")
        cols = [f"c{i}" for i in range(P)]
        A = seeds
        s0 = A.agg(F.count(F.lit(1)).alias("n"), F.sum("st").alias("t")).collect()[0]
        prev = (s0["n"], s0["t"])
        if not prev[0]:
            self.rounds["witness_signal_rounds"] = 0
            return True, "holds"
        cap = MAX_ROUNDS_FACTOR * P + 16
        wsw = (Window.partitionBy("p").orderBy("s")
               .rowsBetween(Window.unboundedPreceding, 0))
        for rnd in range(1, cap + 1):
            agg = A.groupBy("p").agg(F.min("s").alias("amin"), F.max("st").alias("amax"))
            rd = (reads.join(F.broadcast(agg), "p")
                  .where((F.col("s") > F.col("amin"))
                         & (F.col("thr").isNull() | (F.col("thr") < F.col("amax"))))
                  .select("p", "s", "kind", "msg", "T", "dests", "thr",
                          *[F.lit(None).cast("long").alias(c) for c in cols]))
            wide = (A.groupBy("p", "s")
                    .agg(*[F.max(F.when(self._pidx(F.col("d")) == i, F.col("st"))).alias(c)
                           for i, c in enumerate(cols)])
                    .select("p", "s", F.lit(None).cast("string").alias("kind"),
                            F.lit(None).cast("long").alias("msg"),
                            F.lit(None).cast("long").alias("T"),
                            F.lit(None).cast("array<int>").alias("dests"),
                            F.lit(None).cast("long").alias("thr"), *cols))
            x = wide.unionByName(rd).select(
                "p", "s", "kind", "msg", "T", "dests", "thr",
                *[F.max(c).over(wsw).alias(c) for c in cols])
            x = x.where(F.col("kind").isNotNull()).select(
                "p", "s", "kind", "msg", "T", "dests",
                F.array(*[F.when(F.col("thr").isNull() | (F.col(c) > F.col("thr")), F.col(c))
                          for c in cols]).alias("X"))
            x = self._checkpoint(x)
            ent = x.select("p", "kind", "msg", "T", F.posexplode("X").alias("i", "st")).where(
                F.col("st").isNotNull()
                & ((F.col("kind") == "signal_send") | (F.col("st") > F.col("T"))))
            ent = ent.select("kind", "msg", self._dest_of(F.col("i"), F.col("p")).alias("d"),
                             "st")
            via_msg = (ent.where(F.col("kind") != "signal_send").join(dl, "msg")
                       .where(F.col("st") > F.col("L")).select("p", "s", "d", "st"))
            via_sig = (ent.where(F.col("kind") == "signal_send").join(srj, "msg")
                       .where(F.col("Ly").isNull() | (F.col("st") > F.col("Ly")))
                       .select(F.col("yp").alias("p"), F.col("ys").alias("s"), "d", "st"))
            newA = self._checkpoint(seeds.unionByName(via_msg).unionByName(via_sig)
                                    .groupBy("p", "s", "d").agg(F.max("st").alias("st")))
            sig = newA.agg(F.count(F.lit(1)).alias("n"), F.sum("st").alias("t")).collect()[0]
            sig = (sig["n"], sig["t"])
            A = newA
            if sig == prev:
                break
            prev = sig
        else:
            self.rounds["witness_signal_rounds"] = rnd
            return False, "inconclusive: signal knowledge did not settle"
        self.rounds["witness_signal_rounds"] = rnd
        self._w3x = x  # the settled sweep (kept for diagnostics)
        # W3 on the settled sweep: a send to d must be stamped above what is known for d.
        bad = x.where(F.col("kind").isin("send", "destroy")).where(F.exists(
            "dests", lambda d: F.when(self._pidx(d) >= 0,
                                      F.element_at("X", self._pidx(d) + 1) >= F.col("T"))
            .otherwise(F.lit(False)))).limit(1).count()
        if bad:
            return False, "partial: a send's stamp is not above what a side channel told " \
                          "its process about one of its destinations"
        return True, "holds"

    # ------------------------------------------------------------------ exact causal
    def _vc_cols(self, prefix="c"):
        return [f"{prefix}{i}" for i in range(self.P)]

    def vector_clocks(self, full=False):
        """Vector clocks in rounds; returns (origins with lr, VCR). VCR holds the clock of the
        last receive of each run of receives between two origins (the only ones the rounds
        and the causal check read), or of every receive with full=True."""
        if self.rows is None:      # the screen decided; ShiViz export still needs the rows
            self._base()
        kc = F.col("kc")
        sig = kc.isin(2, 4)
        space = F.when(sig, F.lit("S")).otherwise(F.lit("M"))
        # lr = the last receive of the origin's process before the origin (main pass): the VC
        # of an origin is that receive's VC plus its own position.
        olr = self._persist(self.rows.where(kc <= 2).select(
            space.alias("space"), "msg", F.col("process").alias("op"),
            F.col("seq").alias("os"), "lr"))
        recvs = self.rows.where(kc.isin(3, 4)).select(
            space.alias("space"), "msg", F.col("process").alias("p"), F.col("seq").alias("s"),
            "nob")
        # R is laid out once by origin process, sorted by (op, lr): each round's join with
        # the clocks (partitioned by process, sorted by seq) then needs no shuffle of R, and
        # with requireAllClusterKeysForCoPartition off none of the clocks either.
        nparts = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
        R = self._persist(recvs.join(olr, ["space", "msg"]).select(
            "p", "s", "nob", "op", self._pidx(F.col("op")).alias("opi"), "os", "lr")
            .repartition(nparts, "op").sortWithinPartitions("op", "lr"))
        cols = self._vc_cols()
        wp = Window.partitionBy("p").orderBy("s").rowsBetween(Window.unboundedPreceding, 0)

        def sweep(vcr, segments):
            if vcr is None:
                j = R.select("p", "s", "nob", "opi", "os",
                             *[F.lit(None).cast("long").alias(f"k{i}") for i in range(self.P)])
            else:
                src = vcr.select(F.col("p").alias("op"), F.col("s").alias("lr"),
                                 *[F.col(c).alias(f"k{i}") for i, c in enumerate(cols)])
                j = R.join(src, ["op", "lr"], "left")
            cand = [F.when(F.col("opi") == i, F.greatest(F.col(f"k{i}"), F.col("os")))
                    .otherwise(F.col(f"k{i}")).alias(f"x{i}") for i in range(self.P)]
            j = j.select("p", "s", "nob", *cand)
            if segments:
                # Clocks are only ever read at an origin's lr, the last receive of a run of
                # receives between two origins (same nob): fold each run into that row first
                # (a hash aggregation), so the window and the stored clocks cover the runs.
                j = (j.repartition(nparts, "p").groupBy("p", "nob")
                     .agg(F.max("s").alias("s"), *[F.max(f"x{i}").alias(f"x{i}")
                                                   for i in range(self.P)]))
            return j.select("p", "s", *[F.max(f"x{i}").over(wp).alias(c)
                                        for i, c in enumerate(cols)])

        vcr, rnd = self._fixpoint(lambda vcr: sweep(vcr, True), cols)
        if full:   # clocks at every receive (ShiViz): one more sweep from the settled clocks
            vcr = self._checkpoint(sweep(vcr, False))
        self.rounds["vector_clock_rounds"] = rnd
        return olr, vcr

    def causal_exact(self):
        olr, vcr = self.vector_clocks()
        cols = self._vc_cols()
        src = vcr.select(F.col("p").alias("op"), F.col("s").alias("lr"),
                         *[F.col(c).alias(f"k{i}") for i, c in enumerate(cols)])
        svc = (olr.where(F.col("space") == "M").join(src, ["op", "lr"], "left")
               .withColumn("opi", self._pidx(F.col("op"))))
        # own entry: the send itself, or more if a causality cycle (a malformed history)
        # brings later events of the sender before it
        svc = svc.select("msg", *[F.when(F.col("opi") == i, F.greatest(F.col(f"k{i}"), F.col("os")))
                                  .otherwise(F.col(f"k{i}")).alias(f"v{i}")
                                  for i in range(self.P)])
        d = (self.fd.select("p", "ds", "msg", "sp", "ss", "destroy")
             .withColumn("spi", self._pidx(F.col("sp"))).join(svc, "msg"))
        d = self._persist(d)
        wprev = Window.partitionBy("p").orderBy("ds").rowsBetween(Window.unboundedPreceding, -1)
        m = d.select("p", "ds", "msg", "sp", "ss", "spi", "destroy",
                     *[F.max(f"v{i}").over(wprev).alias(f"m{i}") for i in range(self.P)])
        known = F.element_at(F.array(*[F.col(f"m{i}") for i in range(self.P)]),
                             F.col("spi") + 1)
        v = self._persist(m.where(known >= F.col("ss")).select(
            F.col("p").alias("process"), "ds", "msg", "sp", "ss", "spi", "destroy"))
        n = v.count()
        examples = []
        for r in v.orderBy("process", "ds").limit(self.max_examples).collect():
            vcol = F.element_at(F.array(*[F.col(f"v{i}") for i in range(self.P)]),
                                F.lit(int(r["spi"]) + 1))
            w2 = (d.where((F.col("p") == r["process"]) & (F.col("ds") < r["ds"])
                          & (vcol >= r["ss"]))
                  .orderBy("ds").limit(1).collect())
            if not w2:
                continue
            r2 = w2[0]
            examples.append(_inversion_example(
                f"send of {r['msg']} happened-before send of {r2['msg']}, but process "
                f"{r['process']} delivered {r2['msg']} first", r, r2, r["process"]))
        return v, n, examples

    # ------------------------------------------------------------------ exact consistent
    def consistent_exact(self):
        cols = self._vc_cols("a")
        # A message delivered at one process only sits inside one chain: every cycle switches
        # chains, so contracting those messages (keeping each chain's order of the shared
        # ones) preserves every cycle and every component, and shrinks the graph to the
        # messages delivered at two or more processes.
        shared = (self.fd.groupBy("msg").agg(F.count(F.lit(1)).alias("k"))
                  .where("k > 1").select("msg"))
        nparts = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
        fd = self._persist(self.fd.select("p", "ds", "msg").join(shared, "msg", "left_semi")
                           .withColumn("pi", self._pidx(F.col("p")))
                           .repartition(nparts, "msg"))
        wp = Window.partitionBy("p").orderBy("ds").rowsBetween(Window.unboundedPreceding, 0)

        def step(ma):
            if ma is None:
                j = fd.select("p", "ds", "msg", "pi",
                              *[F.lit(None).cast("long").alias(c) for c in cols])
            else:
                j = fd.join(ma, "msg", "left")
            # a row's ancestor vector: its own chain position, plus the running max along the
            # chain of the ancestor vectors of everything delivered there before it.
            row = [F.when(F.col("pi") == i, F.greatest(F.col(c), F.col("ds")))
                   .otherwise(F.col(c)).alias(c) for i, c in enumerate(cols)]
            j = j.select("p", "ds", "msg", *row)
            j = j.select("msg", *[F.max(c).over(wp).alias(c) for c in cols])
            return j.groupBy("msg").agg(*[F.max(c).alias(c) for c in cols])

        ma, rnd = self._fixpoint(step, cols)
        self.rounds["consistency_rounds"] = rnd
        # m lies on a cycle iff one of its ancestors sits later than m on a chain holding m.
        own = F.element_at(F.array(*[F.col(c) for c in cols]), F.col("pi") + 1)
        cyc = (fd.join(ma, "msg").where(own > F.col("ds"))
               .select("msg", F.array(*[F.col(c) for c in cols]).alias("anc"), "p",
                       self._group(F.col("p")).alias("grp")).distinct())
        # Equal ancestor sets <=> same strongly connected component (for nodes on cycles).
        sccs = cyc.groupBy("grp", "anc").agg(F.count_distinct("msg").alias("size"),
                                      F.min("p").alias("process"),
                                      F.min("msg").alias("minmsg"),
                                      F.first(F.xxhash64("anc")).alias("h"))
        v = self._persist(sccs)
        n = v.count()
        examples = []
        for r in v.orderBy("size", "minmsg").limit(self.max_examples).collect():
            members = (cyc.where((F.xxhash64("anc") == F.lit(r["h"]))
                                 & (F.col("grp") == F.lit(r["grp"])))
                       .select("msg").distinct().limit(20000))
            rows = (fd.join(F.broadcast(members), "msg").select("p", "ds", "msg")
                    .limit(200000).collect())
            cycle = shortest_cycle(rows)
            if cycle:
                examples.append(_cycle_example(cycle, r["size"]))
        return v, n, examples

    # ------------------------------------------------------------------ driver
    def run(self):
        t0 = time.perf_counter()
        if self.trace.rows == 0:  # an empty trace: every property holds vacuously
            return self._summary(t0, _all_hold(()), "empty trace")
        if not self.force_exact:
            self._phase("screen: by message and destination, by process")
            passed, self.screen = self._timed("screen", screen, self)
            if passed:
                return self._summary(t0, _all_hold(("fifo", "causal", "consistent")), "holds")
        self._phase("main pass: by message, by process, one aggregation")
        self._timed("main_pass", self._base)
        props = {}
        for name, fn in (("exactly_once", self.exactly_once), ("fifo", self.fifo),
                         ("node_rules", self.node_rules)):
            self._phase(f"checking {name}")
            v, n, ex = self._timed(name, fn)
            props[name] = {"ok": n == 0, "violations": int(n), "examples": ex}
            if name == "fifo":
                props[name]["method"] = self.fifo_method
            if self.keep_details:
                self.details[name] = v
        if self.force_exact:
            cons_ok, caus_ok, wmsg = False, False, "skipped (--exact)"
        else:
            self._phase("checking the stamp witness")
            cons_ok, caus_ok, wmsg = self._timed("witness", self.witness)
        exact = {}
        for name, ok, fn in (("causal", caus_ok, self.causal_exact),
                             ("consistent", cons_ok, self.consistent_exact)):
            if ok:
                props[name] = {"ok": True, "violations": 0, "examples": [],
                               "method": "stamp witness"}
                if self.keep_details:
                    self.details[name] = None
            else:
                exact[name] = fn
        if exact:
            self._phase(f"checking {' and '.join(exact)} (exact)")
            # Rounds join tables laid out once by key with tables partitioned by process:
            # co-partitioning on a subset of the join keys avoids a shuffle per round, and
            # without adaptive execution both sides keep the same partition count.
            # The two formulations share nothing but the main pass's table, so they run
            # side by side: each round has stretches (planning, a stage's last tasks, the
            # driver between rounds) where the other one's tasks fill the idle core.
            with self._conf(requireAllClusterKeysForCoPartition="false",
                            adaptive__enabled="false"):
                found = self.side_by_side({name: (fn,) for name, fn in exact.items()})
            for name, (v, n, ex) in found.items():
                props[name] = {"ok": n == 0, "violations": int(n), "examples": ex,
                               "method": "exact"}
                if self.keep_details:
                    self.details[name] = v
        return self._summary(t0, props, wmsg)

    def _timed(self, name, fn, *args):
        """fn(*args), its wall time recorded under timings[name] (also from a thread)."""
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.timings[name] = time.perf_counter() - t

    def side_by_side(self, calls):
        """Run {name: (fn, *args)} in one thread each, timed; returns {name: result}.

        If any call fails, or Ctrl-C interrupts the wait, every Spark job is cancelled again
        and again until all threads have stopped: cancelling only stops running jobs, and a
        thread between two jobs (planning its next round) would otherwise go on alone."""
        pool = ThreadPoolExecutor(len(calls))
        runs = {name: pool.submit(self._timed, name, *call) for name, call in calls.items()}
        try:
            # the first failure is raised at once, not after the calls submitted before it
            wait(list(runs.values()), return_when=FIRST_EXCEPTION)
            for run in runs.values():
                if run.done() and run.exception() is not None:
                    raise run.exception()
            return {name: run.result() for name, run in runs.items()}
        except BaseException:
            while not all(run.done() for run in runs.values()):
                self.spark.sparkContext.cancelAllJobs()
                wait(list(runs.values()), timeout=0.2)
            raise
        finally:
            pool.shutdown(wait=False)

    def _summary(self, t0, props, wmsg):
        ordered = {k: props[k] for k in PROPERTIES}
        if self.keep_details:
            for k in PROPERTIES:
                self.details.setdefault(k, None)
        self.elapsed = time.perf_counter() - t0
        return {"trace": self.trace.path, "events": self.trace.rows,
                "processes": len(self.procs), "screen": self.screen, "witness": wmsg,
                "ok": all(p["ok"] for p in ordered.values()),
                "properties": ordered, "rounds": self.rounds,
                "seconds": round(self.elapsed, 3)}


def _all_hold(by_witness):
    """Every property holding, those named in by_witness decided by the stamp witness."""
    return {name: dict({"ok": True, "violations": 0, "examples": []},
                       **({"method": "stamp witness"} if name in by_witness else {}))
            for name in PROPERTIES}


def shortest_cycle(rows):
    """Shortest cycle in the delivery-chain graph of one SCC (rows: p, ds, msg)."""
    chains = {}
    for r in rows:
        chains.setdefault(r["p"], []).append((r["ds"], r["msg"]))
    succ = {}
    for p, lst in chains.items():
        lst.sort()
        for (d1, a), (d2, b) in zip(lst, lst[1:]):
            succ.setdefault(a, []).append((b, p, d1, d2))
    best = None
    starts = sorted(succ)[:50]
    for s in starts:
        parent = {s: None}
        dq = deque([s])
        found = None
        while dq and found is None:
            a = dq.popleft()
            for b, p, d1, d2 in succ.get(a, ()):
                if b == s:
                    found = (a, (b, p, d1, d2))
                    break
                if b not in parent:
                    parent[b] = (a, p, d1, d2)
                    dq.append(b)
        if found is None:
            continue
        a, (b, p, d1, d2) = found
        edges = [(a, b, p, d1, d2)]
        while parent[a] is not None:
            pa, pp, pd1, pd2 = parent[a]
            edges.append((pa, a, pp, pd1, pd2))
            a = pa
        edges.reverse()
        if best is None or len(edges) < len(best):
            best = edges
    return best


def _cycle_example(edges, size):
    cyc = [int(e[0]) for e in edges]
    evs = []
    for a, b, p, d1, d2 in edges:
        evs.append(_ev(p, d1, "deliver", a))
        evs.append(_ev(p, d2, "deliver", b))
    why = ("no global order: " + " -> ".join(
        f"{a} before {b} at process {p}" for a, b, p, _, _ in edges)
        + f" (component of {size} messages)")
    return {"why": why, "cycle": cyc, "events": evs, "highlight": cyc}


def check_trace(spark, trace, exact=False, max_examples=3, on_phase=None, keep_details=False,
                group_span=None):
    c = Checker(spark, trace, exact=exact, max_examples=max_examples, on_phase=on_phase,
                keep_details=keep_details, group_span=group_span)
    try:
        summary = c.run()
    except BaseException:
        c.unpersist()   # a malformed trace (TraceError) must not leave tables cached
        raise
    return summary, c
