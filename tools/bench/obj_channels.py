"""Channels that carry a numpy array from one sender to k receivers (the object rows): bus1py's
`send_obj` read with `obj()` in place, pyzmq's `send(copy=False)` of the array, and
multiprocessing.shared_memory with a queue of segment names.

Invariants (besides transports.py's interface):
  - The sender is handed the payload bytes of every other row and sends them as a uint8
    array viewing them (no copy); a receiver gets an array of the same bytes, reads its
    last line (as a consumer would touch it), drops it and returns its length, or -1 when
    that line is not the one sent.  The harness checks the length of the last one.
  - Nothing outlives a message: bus1py's is released, a shared memory segment is unlinked
    once every receiver has closed it; the sender has at most WINDOW segments out at once.
"""
from __future__ import annotations

import multiprocessing.util as mp_util
import os
import secrets
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from .bus_channels import BusChannel
from .common import CTX, payload_of
from .peer_libs import ZmqChannel

WINDOW = 16  # shared memory segments a sender has out before it waits for receivers


def _check(size):
    tail = np.frombuffer(payload_of(size)[-64:], np.uint8)

    def check(arr):
        ok = np.array_equal(arr[-64:], tail)
        return arr.nbytes if ok else -1
    return check


class BusObjChannel(BusChannel):
    """bus1py: `send_obj` to the k nodes in one transaction, `recv(copy=False).obj()`."""

    name = "bus1py send_obj + obj()"

    def __init__(self, size, k=1):
        room = size + (1 << 20)  # the record: the array, send_obj's header and the pickle
        super().__init__(size, k, multicast=True, max_payload=room, pool_size=max(64 << 20, 48 * room))

    def sender(self):
        send_obj, dests, retries = self.tx.send_obj, list(self.handles), [0]

        def s(p):
            send_obj(dests, np.frombuffer(p, np.uint8))
        s.retries = retries
        return s

    def receiver(self, i=0):
        recv, check = self.rx[i].recv, _check(self.size)

        def r():
            m = recv(copy=False)
            arr = m.obj()
            n = check(arr)
            del arr
            m.release()
            return n
        return r


class ZmqObjChannel(ZmqChannel):
    """pyzmq: the array sent with copy=False (PUSH/PULL to one, PUB/SUB to k), received as a
    frame and viewed as an array without a copy."""

    def __init__(self, size, k=1):
        super().__init__(size, k, "push" if k == 1 else "pub", copy=False)
        self.name = f"{self.name} send(copy=False)"

    def sender(self):
        send = super().sender()
        return lambda p: send(np.frombuffer(p, np.uint8))

    def receiver(self, i=0):
        recv, check = self._rx_socket().recv, _check(self.size)
        return lambda: check(np.frombuffer(recv(copy=False).buffer, np.uint8))


class ShmNamesChannel:
    """multiprocessing.shared_memory: a segment per message, written by the sender, its name
    put on each receiver's queue; a receiver attaches, reads, closes and says so on the
    sender's queue, and the sender unlinks a segment once all k have."""

    name = "shared_memory + queue of names"
    send_batch = recv_batch = 0

    def __init__(self, size, k=1):
        self.size, self.k = size, k
        self.names = [CTX.SimpleQueue() for _ in range(k)]
        self.done = CTX.SimpleQueue()
        self.prefix = f"b1o{os.getpid()}{secrets.token_hex(3)}"

    def sender(self):
        names, done, size, k = self.names, self.done, self.size, self.k
        out, seq = {}, [0]  # name -> [receivers still to close it, its SharedMemory]

        def reap():
            name = done.get()
            out[name][0] -= 1
            if out[name][0] == 0:
                out.pop(name)[1].unlink()

        def s(p):
            while len(out) >= WINDOW:
                reap()
            name = f"{self.prefix}-{seq[0]}"
            seq[0] += 1
            shm = shared_memory.SharedMemory(name, create=True, size=size)
            np.frombuffer(shm.buf, np.uint8)[:] = np.frombuffer(p, np.uint8)
            shm.close()
            out[name] = [k, shm]
            for q in names:
                q.put(name)

        def drain():  # at the process's exit: the last segments go once the receivers are done
            while out:
                reap()
        mp_util.Finalize(None, drain, exitpriority=10)
        return s

    def receiver(self, i=0):
        get, done, check = self.names[i].get, self.done, _check(self.size)

        def r():
            name = get()
            shm = shared_memory.SharedMemory(name)
            resource_tracker.unregister(shm._name, "shared_memory")  # attached, not ours to unlink
            arr = np.frombuffer(shm.buf, np.uint8)
            n = check(arr)
            del arr
            shm.close()
            done.put(name)
            return n
        return r

    def close(self):
        pass
