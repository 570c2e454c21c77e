"""The part of a peer every operation stands on: its name, its holders in this process,
its frame.

Invariants:
  - A peer object is only a name for (bus, slot, id) (PeerCore's slots, csrc/py/peer.c);
    the classes built on PeerBase add no slot, so Peer keeps PeerCore's layout.
  - A call that touches the segment first makes this process a holder of the peer
    (`_attach`, once per process: the creating one, every unpickling one, a fork child at
    its first call), so the peer outlives none of its holders and no holder outlives it.
  - A closed Peer object (`_attached is None`) or a closed bus raises ValueError before
    anything is touched.
"""
from __future__ import annotations

import os
from typing import Any

from . import _messages, fds as _fds, holders, watch
from ._lib import lib


class PeerBase(_messages.PeerCore):
    """A peer's name and its attachment to this process (bus1py.Peer is the API)."""

    __slots__ = ()

    @property
    def id(self) -> int:
        """The peer's id on its bus (never reused while the bus exists)."""
        return self._id

    @property
    def bus(self) -> Any:
        """The Bus this peer is on."""
        return self._bus

    def _attach(self):
        """Record this process as a holder of the peer (once per process)."""
        if self._attached is None:
            raise ValueError(f"peer {self._id} is closed in this process")
        r = lib.b1_peer_attach(self._bus.base(), self._slot, self._id, os.getpid())
        self._attached = True
        watch.ensure(self._bus)  # a fork child's own watcher (watch.py)
        try:
            _fds.ensure(self)  # its descriptor store (fds.py)
        except OSError:
            # not set up (out of descriptors...): tried again at this peer's next call here
            # and by the watcher; a receive that needs it raises why (_recv_slow)
            self._attached = not _fds.missing(self)
        if r == 0:
            holders.held[(self._bus.name, self._slot, self._id)] = self
            holders.register_exit_hook()

    def _frame(self):
        """This thread's frame of the bus (Bus.scratch), this process a holder of the peer:
        what each call that passes buffers to C starts with (send and recv inline it for
        their one-message forms)."""
        try:
            frame = self._bus._tls.frame
        except AttributeError:
            frame = self._bus.scratch()  # raises: closed
        if not self._attached:
            self._attach()
        return frame

    def _check_open(self) -> None:
        """ValueError when this Peer object or its bus is closed in this process."""
        if self._attached is None:
            raise ValueError(f"peer {self._id} is closed in this process")
        self._bus.base()  # raises: closed
