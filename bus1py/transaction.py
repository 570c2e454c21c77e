"""A send transaction taken one step at a time, for tests and for teaching.

`Peer.send` runs the whole transaction in one C call; this class runs the very same C steps
(bus1py/csrc/bus/tx.c) one by one, so a test or a student can interleave the steps of several
concurrent senders and watch the queues in between:

    tx = Transaction(peer, [h1, h2], b"x")
    tx.stage(0); tx.stage(1)      # blocks at clock + 1 in each destination queue
    tx.stamp()                    # the commit timestamp, from the sender's clock
    tx.sync(0); tx.sync(1)        # destination clocks catch up before anything is visible
    tx.commit(0); tx.commit(1)    # blocks become the message

Invariant: a step out of order raises EINVAL and changes nothing.  A transaction dropped
unfinished is aborted (before its stamp) or completed (after it), so no block outlives it.
"""
from __future__ import annotations

import errno
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._lib import ffi, lib
from .errors import bus_error
from .args import as_bytes
from .peer import Peer

if TYPE_CHECKING:
    from typing_extensions import Buffer

STATES = ("prepared", "staged", "synced", "committed", "dropped")


class Transaction:
    """One send from `peer` to `destinations` (handle ids), carrying `payload` and `handles`,
    prepared but not yet staged: the steps below run it.

    Raises TypeError for a non-Peer or ids that are not ints, and prepare's errors (ENXIO an
    unknown handle, EMSGSIZE, ESHUTDOWN a disconnected peer).  A step out of order raises
    OSError EINVAL and changes nothing.

    >>> import bus1py
    >>> with bus1py.Bus.create() as bus:
    ...     a, b = bus.peer(), bus.peer()
    ...     h = b.transfer(b.create_node(), a)
    ...     tx = bus1py.Transaction(a, [h], b"x")
    ...     tx.stage(0); ts = tx.stamp(); tx.sync(0); tx.commit(0)
    ...     print(tx.states, b.recv(0).payload)
    ('committed',) b'x'
    """

    def __init__(self, peer: Peer, destinations: Iterable[int], payload: Buffer = b"",
                 handles: Iterable[int] = ()):
        if not isinstance(peer, Peer):
            raise TypeError(f"a transaction is sent by a Peer, not {peer!r}")
        destinations, handles = _ids(destinations, "destinations"), _ids(handles, "handles")
        payload = payload if type(payload) is bytes else as_bytes(payload)
        self._bus = peer.bus
        self._bus.base()  # raises: closed
        self._dests = ffi.new("struct b1_dest[]", max(len(destinations), 1))
        self._tx = ffi.new("struct b1_tx *")
        self._tx.dests = self._dests
        arr = ffi.new("uint64_t[]", destinations or [0])
        carried = ffi.new("uint64_t[]", handles or [0])
        r = lib.b1_tx_prepare(self._bus.base(), self._tx, peer._slot, peer.id, arr,
                              len(destinations), payload, len(payload), carried, len(handles), 0)
        if r:
            raise bus_error(r, f"preparing a send from peer {peer.id} to {destinations!r}")
        self._open = True

    def _step(self, r: int, what: str) -> None:
        if r:
            raise bus_error(r, what)

    def _index(self, i: int, what: str) -> int:
        if type(i) is not int:
            raise TypeError(f"{what} takes a destination index (an int), not {i!r}")
        if not 0 <= i < self._tx.n:
            raise bus_error(errno.EINVAL, f"{what} {i}: no such destination (0..{self._tx.n - 1})")
        return i

    def stage(self, i: int) -> None:
        """Stage a block at destination `i` (0..n-1) at its clock + 1."""
        self._step(lib.b1_tx_stage(self._bus.base(), self._tx, self._index(i, "stage")), f"stage {i}")

    def stamp(self) -> int:
        """Take the commit timestamp, once every destination is staged; returns it."""
        self._step(lib.b1_tx_stamp(self._bus.base(), self._tx), "stamp")
        return self._tx.ts

    def sync(self, i: int) -> None:
        """Raise destination `i`'s clock to the timestamp, once stamped."""
        self._step(lib.b1_tx_sync(self._bus.base(), self._tx, self._index(i, "sync")), f"sync {i}")

    def commit(self, i: int) -> None:
        """Turn destination `i`'s block into the message, once every destination is synced."""
        self._step(lib.b1_tx_commit(self._bus.base(), self._tx, self._index(i, "commit")), f"commit {i}")
        if all(s in ("committed", "dropped") for s in self.states):
            self._open = False

    def abort(self) -> None:
        """Withdraw every staged block; EINVAL once stamped (then it can only complete)."""
        if self._tx.ts:
            raise bus_error(errno.EINVAL, "a stamped transaction cannot be aborted, only completed")
        lib.b1_tx_abort(self._bus.base(), self._tx)
        self._open = False

    @property
    def n(self) -> int:
        """The number of destinations."""
        return self._tx.n

    @property
    def seq(self) -> int:
        """The sender's sequence number of this transaction (the stamp's third field)."""
        return self._tx.seq

    @property
    def timestamp(self) -> int:
        """The commit timestamp (0 until stamped)."""
        return self._tx.ts

    @property
    def max_ts(self) -> int:
        """The running maximum of destination clocks seen while staging."""
        return self._tx.max_ts

    @property
    def states(self) -> tuple[str, ...]:
        """Each destination's state: prepared, staged, synced, committed or dropped."""
        return tuple(STATES[self._dests[i].state] for i in range(self._tx.n))

    def __del__(self) -> None:
        try:
            if not self._open or self._bus._base is None:
                return
            if self._tx.ts == 0:
                lib.b1_tx_abort(self._bus.base(), self._tx)
            else:
                for i in range(self._tx.n):
                    lib.b1_tx_sync(self._bus.base(), self._tx, i)
                for i in range(self._tx.n):
                    lib.b1_tx_commit(self._bus.base(), self._tx, i)
        except Exception:
            pass


def _ids(values: Iterable[int], what: str) -> list[int]:
    """Handle ids as a list, refusing anything cffi would reject with an unclear error."""
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of handle ids, not {values!r}") from None
    for v in values:
        if type(v) is not int or not 0 <= v < 1 << 64:
            raise TypeError(f"{what} must be handle ids (ints from 0 to 2**64-1), not {v!r}")
    return values
