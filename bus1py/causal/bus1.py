"""bus1: the bus's own ordering (SPEC section 3) as message passing between the n processes.

Delivery condition: every process is one queue with a clock (`bus1py.ordering`); entries sort
by (timestamp, sender, transaction seq) and only the front entry is delivered, once it is
committed. A block (odd timestamp) at the front holds back everything behind it.
Source: seed 004 ("Message ordering", the bus1 design page) and SPEC section 3; the C queues
in csrc/bus/tx.c run the same steps under per-queue locks.

A send to Dests is one transaction, run by the sender one round at a time:
  1. stage:  STAGE (the payload) to every destination. The destination syncs its clock to the
             clock the wire carries, inserts a block at clock + 1 and replies with its clock.
  2. stamp:  when every destination has replied (and every earlier send is stamped), the
             sender syncs its own clock to the largest reply and ticks: the even result is
             the message's timestamp.
  3. sync:   SYNC(ts) to every destination, which syncs its clock to ts and acknowledges.
  4. commit: when every destination has acknowledged, COMMIT to every destination, which moves
             the block to ts and delivers every committed entry at the front of its queue.
A unicast folds 3 and 4 into one SYNC_COMMIT(ts), acknowledged after the commit, as the C
commit syncs a single destination under the same lock -- when it may commit at once, that
is, when no earlier send of the same process is still short of its sync round (below);
otherwise it takes the SYNC, ACK, COMMIT path of a multicast.

The running maximum of SPEC step 1: in C the stages run one after another and each
destination is synced to the maximum of the clocks staged before it. Here the stages run in
parallel, so every STAGE carries the sender's clock (the maximum it has seen so far) and the
maximum over the destinations is taken at the sender from their replies. The stamp is the
same as with sequential stages (the maximum of all those clocks, plus 2); blocks may sit
lower, which can only hold later entries back longer, never reorder them.

Why the sync round: causality must hold even through side channels the bus never sees. If p
delivers m and then tells r through a pipe, and r sends m' to q, another destination of m,
nothing on the bus carries m's timestamp to r. Only q's own clock can: the sync round has
raised it to ts(m) at every destination before m is committed anywhere, so m' is staged at q
above ts(m) and stamped above it. Without it q's clock may still be below ts(m); m' could
stamp at or below ts(m) (a tie broken by sender id) and be delivered at q before m.

Pipelined sends, in the order a blocking send would give: a send's STAGE wires leave at
once, however many earlier sends are still in flight, but its stamp waits for the earlier
sends' stamps (the sender's clock only grows, so the stamps rise in send order) and its
commit waits until every earlier send has passed its sync round. So a later send is stamped above an earlier one, staged at a shared destination only
where the earlier one's block or entry is already in place below it, and nothing it causes
can become visible before the earlier one's destinations are synced. `busy` is True while a
send has not passed its sync round (its ACKs are due): what the process signals outside the
protocol after that is ordered after its sends, as after bus1's send call returns; a signal
while `busy` may overtake the send in flight.

Wire (little-endian; the tag byte is framing on the data wire, control on the others):
  STAGE        u8 0 | sender u16 | tx u32 | clock u32 | payload   data: header 1, control 10
  REPLY        u8 1 | tx u32 | clock u32                          control, 9 bytes
  SYNC         u8 2 | tx u32 | ts u32                             control, 9 bytes
  ACK          u8 3 | tx u32                                      control, 5 bytes
  COMMIT       u8 4 | tx u32                                      control, 5 bytes
  SYNC_COMMIT  u8 5 | tx u32 | ts u32                             control, 9 bytes
The data wire's 10 control bytes are the stamp (sender, tx and the timestamp known so far) and
its one dependent; none of it grows with n. A multicast copy also costs 4 control wires
(28 bytes) and a unicast 3 (23 bytes; 4 and 28 when it had to wait for an earlier send);
delivery takes at least 5 one-way hops after the send for a multicast, 3 for a unicast.

Invariants:
  - `out[seq]` is each of my sends not yet past its sync round and commit. `staging` holds
    the unstamped ones in seq order (their REPLYs are in `waiting`), `syncing` the stamped
    ones in seq order (their ACKs are in `waiting`); every stamp in `syncing` is below every
    stamp to come. A send's COMMIT (or SYNC_COMMIT) leaves only when every send before it
    has left `syncing`, i.e. passed its sync round.
  - `open[src << 32 | seq]` is [block key, synced ts or 0] for each of src's transactions
    staged here and not yet committed; `last_tx[src]` is the highest seq of src committed
    here. Every earlier transaction of src for this queue was staged here before that commit
    (it passed its sync round first), so a STAGE at or below it is a replay.
  - A wire for an unknown transaction or in the wrong state raises WireError before any
    state changes.
"""
from __future__ import annotations

import struct
from collections import deque
from typing import Any

from ..ordering import Queue, Transaction
from .base import U32_MAX, Protocol, Step, WireCost, WireError

STAGE, REPLY, SYNC, ACK, COMMIT, SYNC_COMMIT = range(6)

_STAGE = struct.Struct("<BHII")
_TX_T = struct.Struct("<BII")
_TX = struct.Struct("<BI")
_STAGE_LEN = _STAGE.size

STAGE_COST = WireCost(1, _STAGE_LEN - 1, 1, True)
REPLY_COST = SYNC_COST = SYNC_COMMIT_COST = WireCost(0, _TX_T.size, 0, False)
ACK_COST = COMMIT_COST = WireCost(0, _TX.size, 0, False)


class _Out:
    """One of my sends in flight: its transaction, destinations and the answers due."""

    __slots__ = ("tx", "dests", "waiting", "commit")

    def __init__(self, tx, dests):
        self.tx = tx
        self.dests = dests
        self.waiting = set(dests)
        self.commit = True      # COMMIT wires still due (False once a SYNC_COMMIT left)


class Bus1(Protocol):
    name = "bus1"
    weight = 3.0
    style = ("#ff7f0e", "h", "-")
    causal = True
    multicast = "native"
    rule = ("deliver the queue's front entry once committed; entries sort by "
            "(ts, sender, tx); stage, stamp, sync, commit")

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.queue = Queue()
        self.seq = 0
        self.out: dict[Any, Any] = {}
        self.staging: deque[Any] = deque()
        self.syncing: deque[Any] = deque()
        self.open: dict[Any, Any] = {}
        self.last_tx = [-1] * n

    @property
    def held(self) -> int:
        """Entries in my queue not yet delivered (blocks and what waits behind them)."""
        return len(self.queue.entries)

    @property
    def busy(self) -> bool:
        return bool(self.out)

    # ---- sending ----

    def _send(self, dests, payload):
        if self.seq > U32_MAX:
            raise ValueError(f"process {self.me} exhausted its 32-bit transaction numbers")
        tx = Transaction(self.me, self.seq, self.queue.clock)
        self.seq += 1
        rec = self.out[tx.seq] = _Out(tx, dests)
        self.staging.append(rec)
        wire = _STAGE.pack(STAGE, self.me, tx.seq, tx.max_ts) + payload
        step = Step()
        for d in dests:
            step.emit(d, wire, STAGE_COST)
        return step

    def _advance(self, step):
        """Stamp in send order whatever has all its REPLYs; then retire, in send order, what
        has all its ACKs, sending its COMMITs."""
        staging, syncing = self.staging, self.syncing
        while staging and not staging[0].waiting:
            rec = staging.popleft()
            ts = rec.tx.stamp(self.queue)
            rec.waiting.update(rec.dests)
            if len(rec.dests) == 1 and not syncing:     # free to commit: fold the sync in
                rec.commit = False
                step.emit(rec.dests[0], _TX_T.pack(SYNC_COMMIT, rec.tx.seq, ts),
                          SYNC_COMMIT_COST)
            else:
                wire = _TX_T.pack(SYNC, rec.tx.seq, ts)
                for d in rec.dests:
                    step.emit(d, wire, SYNC_COST)
            syncing.append(rec)
        while syncing and not syncing[0].waiting:
            rec = syncing.popleft()
            if rec.commit:
                wire = _TX.pack(COMMIT, rec.tx.seq)
                for d in rec.dests:
                    step.emit(d, wire, COMMIT_COST)
            del self.out[rec.tx.seq]
        return step

    # ---- receiving ----

    def _receive(self, src, data):
        if not data:
            raise WireError("empty wire")
        tag = data[0]
        if tag == STAGE:
            return self._stage(src, data)
        if tag == REPLY:
            return self._reply(src, data)
        if tag == SYNC:
            return self._sync(src, data)
        if tag == ACK:
            return self._ack(src, data)
        if tag == COMMIT:
            return self._commit(src, data)
        if tag == SYNC_COMMIT:
            return self._sync_commit(src, data)
        raise WireError(f"unknown wire type {tag}")

    def _stage(self, src, data):
        if len(data) < _STAGE_LEN:
            raise WireError(f"STAGE wire truncated: {len(data)} bytes")
        _, sender, seq, clock = _STAGE.unpack_from(data)
        if sender != src:
            raise WireError(f"STAGE from {src} names sender {sender}")
        key = src << 32 | seq
        if seq <= self.last_tx[src] or key in self.open:
            raise WireError(f"transaction {seq} of {src} was staged here before")
        if clock & 1:
            raise WireError(f"STAGE clock {clock} is odd")
        q = self.queue
        self.open[key] = [q.stage(clock, src, seq, 0, data[_STAGE_LEN:]), 0]
        step = Step()
        step.emit(src, _TX_T.pack(REPLY, seq, q.clock), REPLY_COST)
        return step

    def _reply(self, src, data):
        if len(data) != _TX_T.size:
            raise WireError(f"REPLY wire of {len(data)} bytes")
        _, seq, clock = _TX_T.unpack(data)
        rec = self.out.get(seq)
        if rec is None or rec.tx.ts or src not in rec.waiting:
            raise WireError(f"REPLY from {src} for transaction {seq}, which awaits none")
        if clock & 1:
            raise WireError(f"REPLY clock {clock} is odd")
        staging = self.staging
        if rec is staging[0] and len(rec.waiting) == 1:
            # the stamps this reply releases stay below max(clocks) + 2 per transaction
            top = max(clock, self.queue.clock, max(r.tx.max_ts for r in staging))
            if top + 2 * len(staging) > U32_MAX:
                raise WireError(f"REPLY clock {clock} leaves no 32-bit timestamps above it")
        rec.waiting.discard(src)
        rec.tx.seen(clock)
        step = Step()
        if rec is staging[0] and not rec.waiting:
            self._advance(step)
        return step

    def _ack(self, src, data):
        if len(data) != _TX.size:
            raise WireError(f"ACK wire of {len(data)} bytes")
        seq = _TX.unpack(data)[1]
        rec = self.out.get(seq)
        if rec is None or not rec.tx.ts or src not in rec.waiting:
            raise WireError(f"ACK from {src} for transaction {seq}, which awaits none")
        rec.waiting.discard(src)
        step = Step()
        if rec is self.syncing[0] and not rec.waiting:
            self._advance(step)
        return step

    def _sync(self, src, data):
        if len(data) != _TX_T.size:
            raise WireError(f"SYNC wire of {len(data)} bytes")
        _, seq, ts = _TX_T.unpack(data)
        entry = self.open.get(src << 32 | seq)
        if entry is None or entry[1]:
            raise WireError(f"SYNC from {src} for transaction {seq}, which is not staged here")
        if ts & 1 or ts <= entry[0][0]:
            raise WireError(f"SYNC timestamp {ts} is odd or not above its block")
        self.queue.sync(ts)
        entry[1] = ts
        step = Step()
        step.emit(src, _TX.pack(ACK, seq), ACK_COST)
        return step

    def _commit(self, src, data):
        if len(data) != _TX.size:
            raise WireError(f"COMMIT wire of {len(data)} bytes")
        seq = _TX.unpack(data)[1]
        key = src << 32 | seq
        entry = self.open.get(key)
        if entry is None or not entry[1]:
            raise WireError(f"COMMIT from {src} for transaction {seq}, which is not synced here")
        del self.open[key]
        if seq > self.last_tx[src]:
            self.last_tx[src] = seq
        self.queue.commit(entry[0], entry[1])
        return self._deliver(Step())

    def _sync_commit(self, src, data):
        if len(data) != _TX_T.size:
            raise WireError(f"SYNC_COMMIT wire of {len(data)} bytes")
        _, seq, ts = _TX_T.unpack(data)
        key = src << 32 | seq
        entry = self.open.get(key)
        if entry is None or entry[1]:
            raise WireError(f"SYNC_COMMIT from {src} for transaction {seq}, "
                            "which is not staged here")
        if ts & 1 or ts <= entry[0][0]:
            raise WireError(f"SYNC_COMMIT timestamp {ts} is odd or not above its block")
        del self.open[key]
        if seq > self.last_tx[src]:
            self.last_tx[src] = seq
        self.queue.commit(entry[0], ts)
        step = Step()
        step.emit(src, _TX.pack(ACK, seq), ACK_COST)
        return self._deliver(step)

    def _deliver(self, step):
        pop = self.queue.pop
        delivered = step.delivered
        got = pop()
        while got is not None:
            key, payload = got
            delivered.append((key[1], payload))
            got = pop()
        return step


PROTOCOL = Bus1
