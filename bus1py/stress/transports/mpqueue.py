"""`mp-queue`: one `multiprocessing.Queue` per receiver, every sender puts into it.

Invariants: `put` never blocks (the queue's feeder thread writes the pipe behind it), so
there is never a backlog here; each item is (sender index, bytes), pickled by the queue.
Between one sender and one receiver the queue is FIFO (one feeder thread per sender
process); between senders nothing is promised.
"""
from __future__ import annotations

import multiprocessing as mp
import queue as _queue
from collections import deque

from . import Endpoint, Transport


class MpQueueTransport(Transport):
    kind = "mp-queue"

    def setup(self):
        ctx = mp.get_context("fork")
        self.queues = [ctx.Queue() for _ in range(self.n)]

    def endpoint(self, index):
        return MpQueueEndpoint(index, self.queues)

    def close(self):
        for q in self.queues:
            q.close()
            q.cancel_join_thread()


class MpQueueEndpoint(Endpoint):
    def __init__(self, index, queues):
        super().__init__()
        self.index = index
        self.queues = queues
        self.mine = queues[index]
        self.got = deque()

    def _try_send(self, dest, data):
        self.queues[dest].put((self.index, data))
        return True

    def poll(self, limit=512):
        out = []
        got = self.got
        while got and len(out) < limit:
            out.append(got.popleft())
        get = self.mine.get_nowait
        while len(out) < limit:
            try:
                out.append(get())
            except _queue.Empty:
                break
        return out

    def wait(self, timeout):
        if self.got:
            return
        try:
            self.got.append(self.mine.get(timeout=timeout))
        except _queue.Empty:
            pass

    def close(self):
        # every wire we put was received (the run ends at quiescence): nothing to flush
        for q in self.queues:
            q.cancel_join_thread()


TRANSPORT = MpQueueTransport
