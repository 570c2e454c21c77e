"""Transports the stress workload can run over: one module per kind, one small interface.

Invariants (every transport keeps them; the generic worker relies on nothing else):
  - `make(kind, n, cfg)` builds a parent-side `Transport` before any fork; `setup()` makes
    every endpoint, full mesh (each process can send to every other: the protocols need
    replies and broadcasts beyond the workload's reach window); `endpoint(i)` is called in
    child i after fork and returns its `Endpoint`; `close()` in the parent after the
    children are reaped removes every name it made (sockets, queues, shared memory).
  - `Endpoint.send(dest, data)` never blocks and never drops: what the transport cannot
    take now is kept, in send order, and pushed by `flush()`; `backlog` says whether
    anything waits.  So a full receiver never deadlocks two senders that are each
    other's receivers: both keep receiving while their backlog waits.
  - `Endpoint.poll(limit)` returns up to `limit` received `(src, data)` without waiting;
    `wait(timeout)` waits at most `timeout` s for something to arrive (it may keep what
    arrived for the next `poll`).  Every wire is received exactly once, whole.
  - `native_multicast`: `send_many(dests, data)` is one call that reaches all dests (the
    bus); elsewhere a multicast is repeated sends, the everyday way.
"""
from __future__ import annotations

import importlib

#: every transport, in the order tables list them
TRANSPORTS = ("bus", "mp-queue", "pipe", "unix", "posix-mq")
_MODULES = {"bus": "bus", "mp-queue": "mpqueue", "pipe": "pipe", "unix": "unix",
            "posix-mq": "posixmq"}


class Transport:
    """Parent side: makes the endpoints before fork, removes them after."""

    kind = ""
    native_multicast = False

    def __init__(self, n: int, cfg):
        self.n = n
        self.cfg = cfg

    def setup(self) -> None:
        pass

    def endpoint(self, index: int) -> "Endpoint":
        raise NotImplementedError

    def inherited_fds(self, index: int) -> set:
        """File descriptors child `index` must keep open (the rest of ours are closed)."""
        return set()

    def all_fds(self) -> list:
        return []

    def close(self) -> None:
        pass


class Endpoint:
    """Child side: one process's sending and receiving ends."""

    def __init__(self):
        from collections import deque
        self.pending = deque()  # (dest or dests, data) not yet taken by the transport

    @property
    def backlog(self) -> bool:
        return bool(self.pending)

    def send(self, dest: int, data: bytes) -> None:
        if self.pending or not self._try_send(dest, data):
            self.pending.append((dest, data))

    def send_many(self, dests: list, data: bytes) -> None:
        raise NotImplementedError("this transport has no native multicast")

    def flush(self) -> None:
        p = self.pending
        while p:
            dest, data = p[0]
            if not self._try_send(dest, data):
                return
            p.popleft()

    def _try_send(self, dest, data) -> bool:
        """Hand one wire to the transport; False (nothing sent) when it would block."""
        raise NotImplementedError

    def poll(self, limit: int = 512) -> list:
        raise NotImplementedError

    def wait(self, timeout: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


def make(kind: str, n: int, cfg) -> Transport:
    if kind not in _MODULES:
        raise ValueError(f"unknown transport {kind!r}; choose from {', '.join(TRANSPORTS)}")
    module = importlib.import_module(f"{__name__}.{_MODULES[kind]}")
    return module.TRANSPORT(n, cfg)


SRC = 2  # bytes of the sender index prefixed to a frame where the transport does not say


def frame(src: int, data: bytes) -> bytes:
    return src.to_bytes(SRC, "little") + data


def unframe(buf: bytes):
    return int.from_bytes(buf[:SRC], "little"), buf[SRC:]
