"""The pure model of bus1's ordering (bus1py.ordering): clock, key, block and front rules,
the queue against a naive reference, and why the sync round is needed."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py.ordering import Queue, Transaction, transact


def test_tick_adds_two_and_sync_takes_the_maximum():
    q = Queue()
    assert (q.tick(), q.tick()) == (2, 4)
    assert q.sync(10) == 10 and q.clock == 10
    assert q.sync(6) == 10 and q.clock == 10        # a clock never goes back
    assert q.tick() == 12


def test_a_block_goes_after_every_committed_entry_and_leaves_the_clock():
    q = Queue()
    committed = q.commit(q.stage(0, 7, 0, 0, "a"), 2)
    assert committed == (2, 7, 0, 0) and q.clock == 2
    block = q.stage(0, 1, 0, 0, "b")                # synced to 0: the clock (2) stays
    assert block == (3, 1, 0, 0) and q.clock == 2
    assert [k for k, _ in q.entries] == [committed, block]
    assert q.stage(8, 1, 1, 0, "c") == (9, 1, 1, 0) and q.clock == 8


def test_keys_tie_break_on_sender_then_seq_then_index():
    q = Queue()
    blocks = [q.stage(0, *k, k) for k in [(2, 0, 0), (1, 5, 1), (1, 5, 0), (1, 4, 9)]]
    for block in blocks:
        q.commit(block, 2)
    assert [v for _, v in q.entries] == [(1, 4, 9), (1, 5, 0), (1, 5, 1), (2, 0, 0)]


def test_only_a_committed_front_is_popped():
    q = Queue()
    assert q.pop() is None and q.front() is None
    slow = q.stage(0, 1, 0, 0, "slow")
    fast = q.commit(q.stage(0, 2, 0, 0, "fast"), 4)
    assert q.front() == slow and q.pop() is None    # the block holds the committed entry
    assert len(q) == 2
    q.commit(slow, 2)
    assert q.pop() == ((2, 1, 0, 0), "slow")
    assert q.pop() == (fast, "fast")
    assert q.pop() is None and len(q) == 0


def test_bad_steps_raise_and_change_nothing():
    q = Queue()
    block = q.stage(4, 1, 0, 0, "x")
    before = (q.clock, list(q.entries))
    with pytest.raises(ValueError):
        q.stage(0, 1, 0, 0, "again")                # same (sender, seq, idx)
    for ts in (block[0], block[0] - 1, block[0] + 2):   # not above the block, or odd
        with pytest.raises(ValueError):
            q.commit(block, ts)
    with pytest.raises(ValueError):
        q.commit((5, 2, 0, 0), 8)                   # no such block
    with pytest.raises(ValueError):
        q.remove((6, 1, 0, 0))
    assert (q.clock, list(q.entries)) == before
    assert q.remove(block) == "x" and len(q) == 0


def test_transaction_carries_the_running_maximum_and_stamps_above_every_block():
    sender, a, b = Queue(4), Queue(10), Queue(6)
    tx = Transaction(9, 0, sender.clock)
    blocks = [tx.stage(a, 0, "m"), tx.stage(b, 1, "m")]
    # a is synced to 4 (stays 10); b to the running maximum 10, not just the sender's 4
    assert blocks == [(11, 9, 0, 0), (11, 9, 0, 1)] and b.clock == 10
    assert tx.max_ts == 10
    assert tx.stamp(sender) == 12 and sender.clock == 12
    tx.seen(30)                                     # a later, parallel reply
    assert tx.max_ts == 30


def test_transact_runs_every_step_and_may_include_the_sender():
    qs = [Queue(), Queue(20), Queue()]
    ts = transact(qs, 0, 3, [1, 0, 2], "d")         # e.g. NODE_DESTROY to the owner too
    assert ts == 22
    assert [q.clock for q in qs] == [22, 22, 22]
    assert [q.pop() for q in qs] == [((22, 0, 3, 1), "d"), ((22, 0, 3, 0), "d"),
                                     ((22, 0, 3, 2), "d")]


def test_without_the_sync_round_a_side_channel_effect_goes_first():
    """X multicasts m to A and B and commits at A; A delivers m and tells D through a pipe;
    D sends m2 to B. B's clock alone can carry m's stamp to D's transaction."""
    def run(sync_round):
        d, a, b, x = (Queue() for _ in range(4))
        x.sync(6)                                   # X has seen more than A and B
        tx = Transaction(3, 0, x.clock)
        blocks = [tx.stage(a, 0, "m"), tx.stage(b, 1, "m")]
        ts = tx.stamp(x)
        if sync_round:
            a.sync(ts), b.sync(ts)
        a.commit(blocks[0], ts)
        assert a.pop()[1] == "m"
        transact([d, None, b], 0, 0, [2], "m2")     # D (id 0 < X's 3) sends to B
        b.commit(blocks[1], ts)
        return [b.pop()[1], b.pop()[1]]

    assert run(sync_round=True) == ["m", "m2"]
    assert run(sync_round=False) == ["m2", "m"]     # a tie at ts 8, broken by sender id


# ---- the queue against a naive reference: a dict of entries, the minimum found by a scan ----

class Naive:
    def __init__(self):
        self.clock = 0
        self.entries = {}

    def stage(self, t, sender, seq, value):
        self.clock = max(self.clock, t)
        key = (self.clock + 1, sender, seq, 0)
        self.entries[key] = value
        return key

    def commit(self, block, ts):
        self.clock = max(self.clock, ts)
        self.entries[(ts,) + block[1:]] = self.entries.pop(block)

    def pop(self):
        if not self.entries:
            return None
        key = min(self.entries)
        return (key, self.entries.pop(key)) if key[0] % 2 == 0 else None


ops = st.lists(st.tuples(st.sampled_from(["stage", "commit", "pop", "tick", "sync"]),
                         st.integers(0, 40), st.integers(0, 3)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_queue_matches_a_naive_reference(steps):
    q, ref = Queue(), Naive()
    blocks = []
    seq = 0
    popped = []
    for op, t, who in steps:
        if op == "stage":
            key = q.stage(2 * t, who, seq, 0, "v%d" % seq)
            assert key == ref.stage(2 * t, who, seq, "v%d" % seq)
            blocks.append(key)
            seq += 1
        elif op == "commit" and blocks:
            block = blocks.pop(t % len(blocks))
            ts = block[0] + 1 + 2 * who             # any even timestamp above the block
            q.commit(block, ts)
            ref.commit(block, ts)
        elif op == "pop":
            got = q.pop()
            assert got == ref.pop()
            if got is not None:
                popped.append(got[0])
        elif op == "tick":
            ref.clock += 2
            assert q.tick() == ref.clock
        elif op == "sync":
            ref.clock = max(ref.clock, 2 * t)
            assert q.sync(2 * t) == ref.clock
        assert q.clock == ref.clock and q.clock % 2 == 0
        assert q.entries == sorted(ref.entries.items())
    # what a queue hands out is final: it never pops a key below one it already popped
    assert popped == sorted(popped)
