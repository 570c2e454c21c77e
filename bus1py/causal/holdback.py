"""The hold-back buffer of the dependency-list protocols (prs, ks, jpcy).

A received message is a record whose first five slots are
    [wait senders, wait counters, next wait index, its own counter, its sender, ...]
(the protocol keeps what it needs after them). It may be delivered once every wait
(k, t) is met, `t <= known[k]`, where `known[k]` is the counter of the last message from k
delivered here; the protocol's `deliver` callback raises `known[sender]` to the record's own
counter and does the rest of its delivery.

Invariants:
  - A held record is indexed under exactly one sender: the one of its first unmet wait
    (`waiting[k]`); waits before its `next wait index` are known met, and `known` only grows,
    so they stay met. A delivery from k retries only the records waiting on k.
  - `ids` holds `sender << 32 | counter` of every held record, once: a copy received twice
    (already delivered, or already held) is refused before anything changes.
  - After `admit` returns, no held record is deliverable (the releases are transitive).

`HoldBackProtocol` is the receive side those protocols share: decode (every check, no state
change), then admit; subclasses provide `_decode(src, data) -> record` and
`_deliver(record, step)`, and create `self._hold` over their delivered-counter vector.
"""
from __future__ import annotations

from .base import Protocol, Step, WireError


class HoldBack:
    __slots__ = ("known", "waiting", "ids")

    def __init__(self, known: list):
        self.known = known
        self.waiting: dict = {}      # k -> [held record] blocked on a wait for k
        self.ids: set = set()

    def __len__(self) -> int:
        return len(self.ids)

    def admit(self, rec, deliver) -> None:
        """Deliver `rec` (through `deliver(rec)`) and everything it releases, or hold it."""
        src, own = rec[4], rec[3]
        key = src << 32 | own
        if own <= self.known[src] or key in self.ids:
            raise WireError(f"duplicate message {own} from {src}")
        if self._blocked(rec):
            self.ids.add(key)
            return
        stack = [rec]
        while stack:
            rec = stack.pop()
            deliver(rec)
            waiters = self.waiting.pop(rec[4], None)
            if waiters:
                for w in waiters:
                    if not self._blocked(w):
                        self.ids.discard(w[4] << 32 | w[3])
                        stack.append(w)

    def _blocked(self, rec) -> bool:
        """Resume at the first wait not yet known met; index rec under it if unmet."""
        ks, ts = rec[0], rec[1]
        known = self.known
        for x in range(rec[2], len(ks)):
            k = ks[x]
            if ts[x] > known[k]:
                rec[2] = x
                w = self.waiting.get(k)
                if w is None:
                    self.waiting[k] = [rec]
                else:
                    w.append(rec)
                return True
        return False


class HoldBackProtocol(Protocol):
    """A protocol whose receive is: decode the wire, then deliver or hold it in `_hold`."""

    _hold: HoldBack

    @property
    def held(self) -> int:
        return len(self._hold)

    def _receive(self, src, data):
        rec = self._decode(src, data)
        step = Step()
        self._hold.admit(rec, lambda r: self._deliver(r, step))
        return step

    def _decode(self, src, data):
        raise NotImplementedError

    def _deliver(self, rec, step):
        raise NotImplementedError
