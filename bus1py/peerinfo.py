"""What `Peer.query()` reports about a peer, copied once out of the C helper's struct.

Invariants:
  - A PeerInfo is a frozen copy, read once from struct b1_peer_info: it never points into
    the segment, so it stays valid and unchanged after the peer or the bus is gone.
  - It knows nothing of peers or buses: peer.py and bus.py (`Bus.peers`) both build it
    with `from_c`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PeerInfo:
    """What `Peer.query()` reports: the peer's Lamport clock, its queue (entries,
    committed messages and their bytes), the handles it holds, its quotas, the timestamp
    at the queue's front, messages sent and received, robust-lock recoveries, the pids of
    its holder processes and the descriptors in flight to it against `quota_fds`."""

    id: int
    clock: int
    queued_entries: int
    queued_messages: int
    queued_bytes: int
    held_handles: int
    quota_messages: int
    quota_bytes: int
    quota_handles: int
    front_ts: int
    sent: int
    received: int
    lock_recoveries: int
    pids: tuple = ()
    n_fds: int = 0       # descriptors in flight to it, not yet received
    quota_fds: int = 0
    chargers: int = 0    # shares of its quotas held by senders (fair shares, SPEC.md)
    shares: dict = field(default_factory=dict)  # share -> (messages, bytes, fds, handles), held ones

    def share_of(self, sender_id: int) -> tuple:
        """(messages, bytes, fds, handles) of this peer's quotas that the share of the
        sender with id `sender_id` holds (senders whose ids agree mod 16 hold one share)."""
        return self.shares.get(sender_id % 16, (0, 0, 0, 0))

    @classmethod
    def from_c(cls, out: Any) -> PeerInfo:
        return cls(id=out.id, clock=out.clock, queued_entries=out.n_entries,
                   queued_messages=out.n_messages, queued_bytes=out.n_bytes,
                   held_handles=out.n_handles, quota_messages=out.quota_messages,
                   quota_bytes=out.quota_bytes, quota_handles=out.quota_handles,
                   front_ts=out.front_ts, sent=out.sent, received=out.received,
                   lock_recoveries=out.lock_recoveries, pids=tuple(p for p in out.pids if p),
                   n_fds=out.n_fds, quota_fds=out.quota_fds, chargers=out.n_chargers,
                   shares={i: (out.share_messages[i], out.share_bytes[i], out.share_fds[i],
                               out.share_handles[i])
                           for i in range(16) if out.share_messages[i] or out.share_handles[i]})
