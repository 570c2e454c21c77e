"""bus1's ordering (SPEC section 3) as one pure model: queues with clocks, and a send's steps.

The C queues (`csrc/bus/tx.c`), the sans-I/O protocol (`bus1py.causal.bus1`), the Hypothesis
model test and the checker's trace simulator all follow the rules written down here once:

    q = Queue()
    tx = Transaction(sender, seq, queues[sender].clock)
    blocks = [tx.stage(queues[d], i, value) for i, d in enumerate(dests)]   # 1. stage
    ts = tx.stamp(queues[sender])                                            # 2. stamp
    for d in dests: queues[d].sync(ts)                                       # 3. sync round
    for d, b in zip(dests, blocks): queues[d].commit(b, ts)                  # 4. commit round
    q.pop()   # the front entry, if it is committed

(`transact` runs exactly that.) Nothing here does I/O or keeps time; a step is one queue
operation, as one lock hold is in C.

Invariants:
  - A clock only grows: `sync(t)` sets it to max(clock, t); `tick()` adds 2. Every value a
    clock is synced to is a clock value or a commit timestamp, so clocks stay even.
  - An entry's key is (timestamp, sender id, sender's transaction seq, entry index), the same
    tie-break at every queue; keys in one queue are unique and kept sorted.
  - A block (odd timestamp) is inserted at clock + 1 after the sync, so it sorts after every
    committed entry already in the queue (their timestamps are <= clock).
  - A commit moves a block to an even timestamp strictly above it (the stamp is a tick above
    every clock the stage saw), so an entry never moves in front of its own block.
  - Hence, if the front entry is committed, no entry can ever be inserted or committed in front
    of it: it is the only one `pop` hands out, and a block at the front holds back the rest.
"""
from __future__ import annotations

from bisect import bisect_left, insort

__all__ = ["Queue", "Transaction", "transact"]


class Queue:
    """One queue and its clock. `entries` is the sorted list of (key, value) pairs."""

    __slots__ = ("clock", "entries")

    def __init__(self, clock: int = 0):
        self.clock = clock
        self.entries: list = []

    def __len__(self) -> int:
        return len(self.entries)

    def tick(self) -> int:
        self.clock += 2
        return self.clock

    def sync(self, t: int) -> int:
        if t > self.clock:
            self.clock = t
        return self.clock

    def stage(self, t: int, sender: int, seq: int, idx: int, value) -> tuple:
        """Sync to `t`, insert a block at clock + 1 holding `value`; returns the block's key.
        The caller keeps (sender, seq, idx) unique in this queue (ValueError otherwise)."""
        clock = self.clock if self.clock >= t else t
        key = (clock + 1, sender, seq, idx)
        entries = self.entries
        i = bisect_left(entries, (key,))
        if i < len(entries) and entries[i][0] == key:
            raise ValueError(f"entry {key} is already in the queue")
        self.clock = clock
        entries.insert(i, (key, value))
        return key

    def commit(self, block: tuple, ts: int) -> tuple:
        """Sync to `ts` and move `block` to it; returns the committed key. A single
        destination's sync round is this sync, done under the same lock as the commit."""
        if ts & 1 or ts <= block[0]:
            raise ValueError(f"commit timestamp {ts} must be even and above block {block}")
        entries = self.entries
        i = bisect_left(entries, (block,))
        if i == len(entries) or entries[i][0] != block:
            raise ValueError(f"no block {block} in the queue")
        if ts > self.clock:
            self.clock = ts
        value = entries.pop(i)[1]
        key = (ts,) + block[1:]
        insort(entries, (key, value))
        return key

    def remove(self, key: tuple):
        """Take out the entry `key` (an aborted block); returns its value."""
        entries = self.entries
        i = bisect_left(entries, (key,))
        if i == len(entries) or entries[i][0] != key:
            raise ValueError(f"no entry {key} in the queue")
        return entries.pop(i)[1]

    def front(self):
        """The first key, block or not; None when the queue is empty."""
        return self.entries[0][0] if self.entries else None

    def pop(self):
        """Dequeue the front (key, value) if it is committed; None if empty or blocked."""
        entries = self.entries
        if entries and not entries[0][0][0] & 1:
            return entries.pop(0)
        return None


class Transaction:
    """The sender's side of one send: the running maximum of the clocks seen, then the stamp.

    `max_ts` starts at the sender's clock (the best first estimate of the stamp, which keeps
    the blocks close to it) and rises with every clock a stage sees; `ts` is 0 until `stamp`.
    """

    __slots__ = ("sender", "seq", "max_ts", "ts")

    def __init__(self, sender: int, seq: int, clock: int):
        self.sender = sender
        self.seq = seq
        self.max_ts = clock
        self.ts = 0

    def seen(self, clock: int) -> None:
        """Carry a destination's clock (after its stage) into the running maximum."""
        if clock > self.max_ts:
            self.max_ts = clock

    def stage(self, queue: Queue, idx: int, value) -> tuple:
        """Stage entry `idx` at `queue`, synced to the running maximum; returns its block."""
        block = queue.stage(self.max_ts, self.sender, self.seq, idx, value)
        self.seen(queue.clock)
        return block

    def stamp(self, queue: Queue) -> int:
        """At the sender's own queue: sync to the maximum and tick. The even result is above
        every clock any stage saw, hence above every block of this transaction."""
        queue.sync(self.max_ts)
        self.ts = queue.tick()
        return self.ts


def transact(queues, sender: int, seq: int, dests, value) -> int:
    """One whole send with no other step in between: stage, stamp, sync round, commit round.
    `queues[sender]` is the sender's queue and `sender` its id in the keys; entry `i` goes to
    `queues[dests[i]]` (the sender may be one of them). Returns the commit timestamp."""
    tx = Transaction(sender, seq, queues[sender].clock)
    blocks = [tx.stage(queues[d], i, value) for i, d in enumerate(dests)]
    ts = tx.stamp(queues[sender])
    for d in dests:
        queues[d].sync(ts)
    for d, block in zip(dests, blocks):
        queues[d].commit(block, ts)
    return ts
