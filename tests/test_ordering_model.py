"""The C queues against the pure model of bus1's ordering (bus1py.ordering), step by step.

A Hypothesis state machine drives the transaction steps of several concurrent senders
(prepare, stage, stamp, sync, commit, abort) and receives on any queue, in random
interleavings, through `bus1py.Transaction` -- the very C steps `Peer.send` runs in one
call -- whole batches (`Peer.send_many`, `Peer.recv_many` copying or zero-copy) and
zero-copy sends (`Peer.reserve`, committed or aborted any time later).  After
every step it checks that

  * every queue yields exactly the model's next message (or EAGAIN where the model's front
    is a block or the queue is empty), and every clock equals the model's clock;
  * consistency: any two peers that received the same two messages received them in the
    same relative order;
  * causality: a message is never received before one that happened before its send --
    through the sender's own earlier sends, what it had received, or a side channel
    (`signal`, which hands one peer's knowledge to another outside the bus).
"""
from __future__ import annotations

import errno
import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import bus1py
from bus1py import ordering
from bus1py._b1 import lib

N_PEERS = 4


class ModelTx(ordering.Transaction):
    """The model's transaction plus what the test tracks per destination."""

    def __init__(self, mid, who, sender_id, dests, seq, clock, c_tx):
        super().__init__(sender_id, seq, clock)  # keys carry the peer id
        self.mid, self.who, self.dests, self.c = mid, who, dests, c_tx
        self.state = ["prepared"] * len(dests)
        self.block = [None] * len(dests)

    def done(self):
        return all(s in ("committed", "dropped") for s in self.state)


class BusOrdering(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.bus = bus1py.Bus.create(max_peers=8, max_nodes=16, max_handles=64, max_entries=4096,
                                     pool_size=1 << 20, max_payload=64, spin_ns=0)
        self.peers = [self.bus.peer() for _ in range(N_PEERS)]
        nodes = [p.create_node() for p in self.peers]
        # handles[s][d]: peer s's handle to peer d's node (its own node for s == d)
        self.handles = [[nodes[d] if s == d else self.peers[d].transfer(nodes[d], self.peers[s])
                         for d in range(N_PEERS)] for s in range(N_PEERS)]
        self.queues = [ordering.Queue() for _ in range(N_PEERS)]
        self.txs = []
        self.next_seq = [0] * N_PEERS
        self.ids = itertools.count(1)
        self.knows = [set() for _ in range(N_PEERS)]  # messages in each peer's causal past
        self.deps = {}  # message -> its causal past at the send
        self.dests_of = {}
        self.stamp_of = {}
        self.received = [[] for _ in range(N_PEERS)]
        self.reserved = []  # (mid, sender, dests, seq, sender's clock at the reserve, Reservation)

    def teardown(self):
        for *_, r in self.reserved:
            r.abort()
        for tx in self.txs:
            tx.c._open = False  # nothing to finish: the bus goes away
        self.bus.close()
        self.bus.unlink()

    # ---- the transaction steps ----

    @rule(sender=st.integers(0, N_PEERS - 1),
          dests=st.lists(st.integers(0, N_PEERS - 1), min_size=1, max_size=N_PEERS, unique=True))
    def prepare(self, sender, dests):
        mid = next(self.ids)
        c_tx = bus1py.Transaction(self.peers[sender], [self.handles[sender][d] for d in dests],
                                  mid.to_bytes(8, "little"))
        assert c_tx.seq == self.next_seq[sender]
        self.next_seq[sender] += 1
        tx = ModelTx(mid, sender, self.peers[sender].id, dests, c_tx.seq, self.queues[sender].clock, c_tx)
        assert c_tx.max_ts == tx.max_ts
        self.txs.append(tx)
        self.deps[mid] = set(self.knows[sender])
        self.dests_of[mid] = set(dests)

    def _pick(self, choice, ok):
        cands = [(tx, i) for tx in self.txs for i in range(len(tx.dests)) if ok(tx, i)]
        return cands[choice % len(cands)] if cands else (None, None)

    @rule(choice=st.integers(0, 1 << 16))
    def stage(self, choice):
        tx, i = self._pick(choice, lambda tx, i: tx.state[i] == "prepared")
        if tx is None:
            return
        tx.c.stage(i)
        tx.block[i] = tx.stage(self.queues[tx.dests[i]], i, tx.mid)
        tx.state[i] = "staged"
        assert tx.c.max_ts == tx.max_ts

    @rule(choice=st.integers(0, 1 << 16))
    def stamp(self, choice):
        ready = [tx for tx in self.txs if not tx.ts and "prepared" not in tx.state]
        if not ready:
            return
        tx = ready[choice % len(ready)]
        assert tx.c.stamp() == tx.stamp(self.queues[tx.who])
        # Lamport's clock condition where it matters: a message stamps above every cause
        # it shares a destination with (else some receiver could get the effect first)
        for cause in self.deps[tx.mid]:
            if self.dests_of[cause] & self.dests_of[tx.mid]:
                assert tx.ts > self.stamp_of[cause], f"{tx.mid} stamped at or below its cause {cause}"
        self.stamp_of[tx.mid] = tx.ts

    @rule(choice=st.integers(0, 1 << 16))
    def sync(self, choice):
        tx, i = self._pick(choice, lambda tx, i: tx.ts and tx.state[i] == "staged")
        if tx is None:
            return
        tx.c.sync(i)
        self.queues[tx.dests[i]].sync(tx.ts)
        tx.state[i] = "synced"

    @rule(choice=st.integers(0, 1 << 16))
    def commit(self, choice):
        # the sync round completes before anything of the transaction becomes visible;
        # a single destination is synced inside its commit
        tx, i = self._pick(choice, lambda tx, i: tx.ts and tx.state[i] in ("staged", "synced") and (
            len(tx.dests) == 1 or all(s != "staged" for s in tx.state)))
        if tx is None:
            return
        tx.c.commit(i)
        self.queues[tx.dests[i]].commit(tx.block[i], tx.ts)
        tx.state[i] = "committed"
        if tx.done():
            # the send call returns: the sender's later sends come after this one
            self.knows[tx.who] |= {tx.mid} | self.deps[tx.mid]
            self.txs.remove(tx)

    @rule(choice=st.integers(0, 1 << 16))
    def abort(self, choice):
        ready = [tx for tx in self.txs if not tx.ts]
        if not ready:
            return
        tx = ready[choice % len(ready)]
        tx.c.abort()
        for i, d in enumerate(tx.dests):
            if tx.state[i] == "staged":
                self.queues[d].remove(tx.block[i])
        self.txs.remove(tx)
        del self.deps[tx.mid], self.dests_of[tx.mid]

    # ---- receiving and side channels ----

    @rule(r=st.integers(0, N_PEERS - 1))
    def recv(self, r):
        got = self.queues[r].pop()
        if got is None:  # empty, or a block at the front
            with pytest.raises(BlockingIOError) as e:
                self.peers[r].recv(timeout=0)
            assert e.value.errno == errno.EAGAIN
            return
        self._check_received(r, got, self.peers[r].recv(timeout=0))

    @rule(r=st.integers(0, N_PEERS - 1), k=st.integers(1, 5), copy=st.booleans())
    def recv_batch(self, r, k, copy):
        """Peer.recv_many: the model's next k committed fronts (or fewer), in one call."""
        expected = []
        while len(expected) < k and (got := self.queues[r].pop()) is not None:
            expected.append(got)
        if not expected:
            with pytest.raises(BlockingIOError):
                self.peers[r].recv_many(k, timeout=0, copy=copy)
            return
        msgs = self.peers[r].recv_many(k, timeout=0, copy=copy)
        assert len(msgs) == len(expected)
        for got, msg in zip(expected, msgs):
            self._check_received(r, got, msg)
            msg.release()

    def _check_received(self, r, got, msg):
        key, mid = got
        assert int.from_bytes(msg.payload, "little") == mid
        assert msg.stamp == key[:3]
        assert msg.destination == self.handles[r][r]
        # causality: everything in the message's causal past addressed to r came first
        missing = {m for m in self.deps[mid] if r in self.dests_of[m]} - set(self.received[r])
        assert not missing, f"peer {r} received {mid} before its causes {missing}"
        self.received[r].append(mid)
        self.knows[r] |= {mid} | self.deps[mid]

    @rule(sender=st.integers(0, N_PEERS - 1), k=st.integers(1, 4),
          dests=st.lists(st.integers(0, N_PEERS - 1), min_size=1, max_size=N_PEERS, unique=True))
    def send_batch(self, sender, dests, k):
        """Peer.send_many: k whole transactions in one call, between two steps of the others;
        the model runs each as `ordering.transact` does (a unicast syncs in its commit)."""
        mids = [next(self.ids) for _ in range(k)]
        sent = self.peers[sender].send_many([self.handles[sender][d] for d in dests],
                                            [m.to_bytes(8, "little") for m in mids])
        assert sent == k
        for mid in mids:
            tx = ordering.Transaction(self.peers[sender].id, self.next_seq[sender], self.queues[sender].clock)
            self.next_seq[sender] += 1
            blocks = [tx.stage(self.queues[d], i, mid) for i, d in enumerate(dests)]
            ts = tx.stamp(self.queues[sender])
            for d in dests if len(dests) > 1 else ():
                self.queues[d].sync(ts)
            for d, block in zip(dests, blocks):
                self.queues[d].commit(block, ts)
            self.deps[mid], self.dests_of[mid], self.stamp_of[mid] = set(self.knows[sender]), set(dests), ts
            self.knows[sender] |= {mid} | self.deps[mid]

    @rule(sender=st.integers(0, N_PEERS - 1),
          dests=st.lists(st.integers(0, N_PEERS - 1), min_size=1, max_size=N_PEERS, unique=True))
    def reserve(self, sender, dests):
        """Peer.reserve: a send prepared with its payload unwritten; it takes its sequence
        number now and its place in the order only at the commit."""
        r = self.peers[sender].reserve([self.handles[sender][d] for d in dests], 8)
        self.reserved.append((next(self.ids), sender, dests, self.next_seq[sender],
                              self.queues[sender].clock, r))
        self.next_seq[sender] += 1

    @rule(choice=st.integers(0, 1 << 16), abort=st.booleans())
    def end_reserved(self, choice, abort):
        """Commit (the payload written in place) or abort a reservation: the model runs the
        commit as one whole transaction, prepared back at the reserve."""
        if not self.reserved:
            return
        mid, sender, dests, seq, clock, r = self.reserved.pop(choice % len(self.reserved))
        if abort:
            r.abort()
            return
        r.payload[:] = mid.to_bytes(8, "little")
        stamp = r.commit()
        tx = ordering.Transaction(self.peers[sender].id, seq, clock)
        blocks = [tx.stage(self.queues[d], i, mid) for i, d in enumerate(dests)]
        ts = tx.stamp(self.queues[sender])
        assert stamp == (ts, self.peers[sender].id, seq)
        for d in dests if len(dests) > 1 else ():
            self.queues[d].sync(ts)
        for d, block in zip(dests, blocks):
            self.queues[d].commit(block, ts)
        self.deps[mid], self.dests_of[mid], self.stamp_of[mid] = set(self.knows[sender]), set(dests), ts
        self.knows[sender] |= {mid} | self.deps[mid]

    @rule(a=st.integers(0, N_PEERS - 1), b=st.integers(0, N_PEERS - 1))
    def signal(self, a, b):
        """a tells b something outside the bus: b's later sends are caused by a's past."""
        self.knows[b] |= self.knows[a]

    # ---- checks after every step ----

    @invariant()
    def clocks_match(self):
        for p, q in zip(self.peers, self.queues):
            info = p.query()
            assert info.clock == q.clock
            assert info.queued_entries == len(q)

    @invariant()
    def trees_are_sound(self):
        # key order, heap order of the priorities, entry count, cached front and back
        for p, q in zip(self.peers, self.queues):
            assert lib.b1_queue_check(self.bus.base(), p._slot) == len(q)

    @invariant()
    def consistent(self):
        pos = [{m: i for i, m in enumerate(rx)} for rx in self.received]
        for a, b in itertools.combinations(range(N_PEERS), 2):
            common = [m for m in self.received[a] if m in pos[b]]
            assert [pos[b][m] for m in common] == sorted(pos[b][m] for m in common), \
                f"peers {a} and {b} disagree on the order of {common}"


BusOrdering.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_bus_ordering_matches_model = BusOrdering.TestCase


def test_two_multicasts_with_one_timestamp_are_seen_in_one_order():
    """bus1's own queue test: two multicasts to the same two queues that end on the same
    commit timestamp are received in the same order by both queues."""
    with bus1py.Bus.create(spin_ns=0) as bus:
        a, b, x, y = (bus.peer() for _ in range(4))
        na, nb = a.create_node(), b.create_node()
        tx1 = bus1py.Transaction(x, [a.transfer(na, x), b.transfer(nb, x)], b"tx1")
        tx2 = bus1py.Transaction(y, [b.transfer(nb, y), a.transfer(na, y)], b"tx2")
        # interleave the stages so that both see the same clocks everywhere
        tx1.stage(0), tx2.stage(0), tx1.stage(1), tx2.stage(1)
        assert tx1.stamp() == tx2.stamp()  # one commit timestamp for both
        for tx in (tx1, tx2):
            tx.sync(0), tx.sync(1)
        # commit in opposite orders at the two queues
        tx2.commit(1), tx1.commit(0), tx1.commit(1), tx2.commit(0)
        order_a = [a.recv(timeout=0).payload for _ in range(2)]
        order_b = [b.recv(timeout=0).payload for _ in range(2)]
        assert order_a == order_b
        # the tie is broken by sender id, the same at every queue
        assert order_a == ([b"tx1", b"tx2"] if x.id < y.id else [b"tx2", b"tx1"])


def test_side_channel_effect_is_stamped_above_its_cause():
    """The case the sync round exists for: X multicasts m1 to A and B; A receives it and
    tells D outside the bus; D sends m2 to B while m1 is still uncommitted at B.  B must
    receive m1 first.  Peer ids are chosen so that a tie on the timestamp would put m2
    first: only the sync round (B's clock raised to m1's stamp before A could see m1)
    keeps m2 above m1."""
    with bus1py.Bus.create(spin_ns=0) as bus:
        d, a, b, x = (bus.peer() for _ in range(4))  # ids ascending: d < x
        na, nb = a.create_node(), b.create_node()
        m1 = bus1py.Transaction(x, [a.transfer(na, x), b.transfer(nb, x)], b"m1")
        m1.stage(0), m1.stage(1)
        ts1 = m1.stamp()
        m1.sync(0), m1.sync(1)
        m1.commit(0)
        assert a.recv(timeout=0).payload == b"m1"
        # ... A signals D through a pipe; D reacts:
        m2_stamp = d.send([b.transfer(nb, d)], b"m2")
        assert m2_stamp[0] > ts1
        m1.commit(1)
        assert [b.recv(timeout=0).payload for _ in range(2)] == [b"m1", b"m2"]


def test_a_block_at_the_front_holds_back_later_messages():
    with bus1py.Bus.create(spin_ns=0) as bus:
        r, s1, s2 = bus.peer(), bus.peer(), bus.peer()
        node = r.create_node()
        h1, h2 = r.transfer(node, s1), r.transfer(node, s2)
        slow = bus1py.Transaction(s1, [h1], b"slow")
        slow.stage(0)
        s2.send([h2], b"fast")  # committed, but stamped above the block
        with pytest.raises(BlockingIOError):
            r.recv(timeout=0)
        slow.stamp()
        slow.commit(0)
        assert [r.recv(timeout=0).payload for _ in range(2)] == [b"slow", b"fast"]
