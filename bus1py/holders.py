"""The processes holding peers: which Peer objects this process has, which peers it is
recorded as a holder of, and leaving as a holder at exit.

Invariants:
  - `held` lists exactly the peers this process recorded itself as a holder of in the
    segment (Peer._attach); at exit each is detached, and the last holder disconnects it.
  - A forked child holds nothing until it uses a peer: the fork hook forgets `held` and
    every Peer's per-process state (attachment, readiness pipe).
"""
from __future__ import annotations

import atexit
import os
import weakref

from ._lib import lib

peers: "weakref.WeakSet" = weakref.WeakSet()  # every Peer object of this process
held: dict = {}  # (bus name, slot, id) -> Peer this process recorded itself as holding
_exit_pid = [None]


def _after_fork_in_child():
    # the child holds nothing yet: it becomes a holder of a peer when it uses it
    for peer in list(peers):
        if peer._attached is not None:  # None: closed in the parent, and so here
            peer._attached = False
        peer._ready = None
    held.clear()


def _release_held_at_exit():
    """The last process holding a peer disconnects it as it exits."""
    pid = os.getpid()
    if _exit_pid[0] == pid:
        return
    _exit_pid[0] = pid
    for (name, slot, peer_id), peer in list(held.items()):
        base = peer._bus._base
        if base is None:
            continue
        if lib.b1_peer_detach(base, slot, peer_id, pid) == 0:
            lib.b1_peer_disconnect(base, slot, peer_id)
    held.clear()


def register_exit_hook():
    """Once per process: leave as a holder at exit.  Lazily, at the first attach, because a
    multiprocessing child clears the finalizers it inherited before running its target,
    and leaves through os._exit after running its own (so atexit alone would not do)."""
    pid = os.getpid()
    if _exit_hook_pid[0] == pid:
        return
    _exit_hook_pid[0] = pid
    atexit.register(_release_held_at_exit)
    try:
        from multiprocessing import util as mp_util
    except ImportError:  # pragma: no cover
        return
    mp_util.Finalize(None, _release_held_at_exit, exitpriority=100)


_exit_hook_pid = [None]
os.register_at_fork(after_in_child=_after_fork_in_child)
