"""The two libraries a Python program picks for fast IPC, as Channels (transports.py's
interface): pyzmq (ZeroMQ over ipc://) and iceoryx2 (zero-copy shared memory).

Invariants:
  - Nothing of either library exists before the fork: the parent only picks names, and
    each process makes its own context, node and sockets in `sender()` / `receiver(i)`.
  - Nothing is dropped, so every row counts exactly its messages: ZeroMQ's high-water
    marks are 0 (no limit) and a sender's process flushes its queue before it exits
    (multiprocessing's exit finalizers, as mp.Queue's feeder uses); iceoryx2's service
    has no safe overflow and its publisher retries until the sample is delivered.
  - Neither starts before its receivers are there: PUB/SUB's sender is an XPUB that
    waits for all k subscriptions, iceoryx2's sender and receivers meet at a barrier
    once every port exists and again once each subscriber has called receive() (samples
    sent before a subscriber's first receive() are lost).
  - A zero-copy receiver hands back only the length, its sample or frame released.
"""
from __future__ import annotations

import ctypes
import multiprocessing.util as mp_util
import os
import secrets
import tempfile

from .transports import Channel

try:
    import zmq
except ImportError:  # pragma: no cover - the [bench] extra
    zmq = None
try:
    import iceoryx2 as iox2
except ImportError:  # pragma: no cover - the [bench] extra
    iox2 = None

ICEORYX_BUFFER_BYTES = 16 << 20  # a subscriber queues at most 256 samples, and this many bytes


def _iceoryx_buffer(size):
    """Samples a subscriber queues before the publisher waits (the data segment holds as
    many samples of the largest size per subscriber)."""
    return max(4, min(256, ICEORYX_BUFFER_BYTES // max(size, 1)))


def _token():
    return f"b1bench-{os.getpid()}-{secrets.token_hex(4)}"


class ZmqChannel(Channel):
    """pyzmq over ipc://.  kind "push" (PUSH/PULL), "pair" (PAIR, for round trips) or
    "pub" (an XPUB sender multicasting to k SUB receivers); copy=False sends and receives
    frames without copying them in Python."""

    def __init__(self, size, k=1, kind="push", copy=True):
        self.size, self.k, self.kind, self.copy = size, k, kind, copy
        self.name = {"push": "pyzmq PUSH/PULL", "pair": "pyzmq PAIR", "pub": "pyzmq PUB/SUB"}[kind]
        self.path = os.path.join(tempfile.gettempdir(), _token())
        self.url = "ipc://" + self.path

    def _socket(self, kind, linger):
        """A socket of its own context, closed at the process's exit: a sender's waits
        there until its queue is sent (linger -1), a receiver's drops what it has queued
        for a sender that may be gone (a SUB's unsubscription: linger 0)."""
        ctx = zmq.Context()
        s = ctx.socket(kind)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)

        def flush():
            s.close(linger=linger)
            ctx.term()
        mp_util.Finalize(None, flush, exitpriority=10)
        return s

    def sender(self):
        kinds = {"push": zmq.PUSH, "pair": zmq.PAIR, "pub": zmq.XPUB}
        s = self._socket(kinds[self.kind], -1)
        if self.kind == "pub":
            s.setsockopt(zmq.XPUB_VERBOSE, 1)  # one subscription message per subscriber
        s.bind(self.url)
        if self.kind == "pub":
            for _ in range(self.k):  # the start barrier: every SUB has subscribed
                s.recv()
        if self.copy:
            return s.send
        send = s.send
        return lambda p: send(p, copy=False)

    def _rx_socket(self):
        s = self._socket({"push": zmq.PULL, "pair": zmq.PAIR, "pub": zmq.SUB}[self.kind], 0)
        if self.kind == "pub":
            s.setsockopt(zmq.SUBSCRIBE, b"")
        s.connect(self.url)
        return s

    def receiver(self, i=0):
        s = self._rx_socket()
        if self.copy:
            return s.recv
        recv = s.recv

        def r():
            return len(recv(copy=False).buffer)
        return r

    def reverse(self):
        return ZmqChannel(self.size, 1, self.kind, self.copy)

    def close(self):
        try:
            os.unlink(self.path)
        except OSError:
            pass


class IceoryxChannel(Channel):
    """iceoryx2 publish-subscribe of Slice[c_uint8] over ServiceType.Ipc, one publisher and
    k subscribers; in_place=True reads the sample where it lies (a memoryview of it) instead
    of copying it out.  Receivers poll `receive()`, which never blocks."""

    def __init__(self, size, k=1, in_place=False):
        from .common import CTX
        self.size, self.k, self.in_place = size, k, in_place
        self.name = "iceoryx2 read in place" if in_place else "iceoryx2"
        self.service = _token()
        self.meet = CTX.Barrier(k + 1, timeout=60)

    def _service(self):
        iox2.set_log_level(iox2.LogLevel.Error)
        node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
        svc = (node.service_builder(iox2.ServiceName.new(self.service))
               .publish_subscribe(iox2.Slice[ctypes.c_uint8])
               .max_subscribers(self.k).max_publishers(1).history_size(0)
               .subscriber_max_buffer_size(_iceoryx_buffer(self.size)).enable_safe_overflow(False)
               .open_or_create())
        return node, svc

    def sender(self):
        node, svc = self._service()
        pub = (svc.publisher_builder().initial_max_slice_len(max(self.size, 1))
               .backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create())
        self.meet.wait()  # every port exists
        pub.update_connections()
        self.meet.wait()  # every subscriber has called receive()
        loan, memmove, size = pub.loan_slice_uninit, ctypes.memmove, self.size
        keep = (node, svc, pub)

        def s(p):
            sample = loan(size)
            memmove(sample.payload_ptr, p, size)
            sample.assume_init().send()
        s.keep = keep
        return s

    def receiver(self, i=0):
        node, svc = self._service()
        sub = svc.subscriber_builder().buffer_size(_iceoryx_buffer(self.size)).create()
        self.meet.wait()
        sub.receive()
        self.meet.wait()
        receive = sub.receive
        string_at = ctypes.string_at

        def take():
            while True:
                sample = receive()
                if sample is not None:
                    return sample

        def copied():
            sample = take()
            p = sample.payload()
            data = string_at(p.data_ptr, p.number_of_elements)
            sample.delete()
            return data

        def in_place():
            sample = take()
            view = sample.payload().as_memory_view()
            n = len(view)
            view.release()
            sample.delete()
            return n
        r = in_place if self.in_place else copied
        r.keep = (node, svc, sub)
        return r

    def reverse(self):
        return IceoryxChannel(self.size, 1, self.in_place)
