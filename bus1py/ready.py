"""The readiness pipe behind `Peer.fileno()`.

Invariants:
  - The pipe belongs to the process that made it and is readable exactly while the peer's
    front entry is committed, up to the moment a watcher thread needs to notice a change
    made by another process.
  - A receive in this process re-syncs the pipe at once (`sync`), so select never sees
    readiness this process itself has just consumed.
  - Once the peer is disconnected the write end is closed: poll reports POLLHUP (select
    and asyncio readable) for good, and recv raises ESHUTDOWN, as bus1's poll reports
    POLLHUP for a peer that was reset by disconnection.
  - A closed Peer object (Peer.close) stops its watcher, which closes the pipe as it goes.
"""
from __future__ import annotations

import os
import threading

from ._lib import ffi, lib


class ReadyPipe:
    """The pipe and its watcher thread, which sleeps on the queue's futex between changes.
    Another process taking the message can leave the pipe readable for the moment the
    watcher needs to wake: a reader then gets EAGAIN, as with any shared fd."""

    def __init__(self, peer):
        self.pid = os.getpid()
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._peer = peer
        self._lock = threading.Lock()
        self._full = False
        self._hup = False
        self._closed = False
        threading.Thread(target=self._watch, name=f"bus1py-ready-{peer.id}", daemon=True).start()

    def _set(self, ready: int) -> None:
        with self._lock:
            if self._hup:
                return
            if ready < 0:  # disconnected: hang up for good
                self._hup = True
                os.close(self._write_fd)
            elif ready and not self._full:
                os.write(self._write_fd, b"!")
                self._full = True
            elif not ready and self._full:
                try:
                    os.read(self.read_fd, 1)
                except BlockingIOError:
                    pass
                self._full = False

    def close(self) -> None:
        """The Peer object is closed (Peer.close): the watcher stops within its next wait
        and closes both ends of the pipe."""
        self._closed = True

    def sync(self) -> None:
        peer = self._peer
        self._set(lib.b1_peer_ready(peer._bus.base(), peer._slot, peer._id))

    def _watch(self):
        peer = self._peer
        bus, slot, pid = peer._bus, peer._slot, peer._id
        # our own export of the mapping: while it exists Bus.close() cannot unmap it
        try:
            base = ffi.from_buffer(bus._mmap)
        except ValueError:
            return
        try:
            ready = None
            while bus._base is not None and not self._closed:
                ready = lib.b1_peer_watch(base, slot, pid, -1000 if ready is None else ready, 500_000_000)
                # disconnected (< 0): hung up, so the reader's recv reports it
                self._set(ready)
                if ready < 0:
                    return
        finally:
            ffi.release(base)
            if self._closed:
                with self._lock:
                    if not self._hup:
                        self._hup = True
                        os.close(self._write_fd)
                    os.close(self.read_fd)
