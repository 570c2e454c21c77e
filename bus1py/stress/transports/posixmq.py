"""`posix-mq`: one POSIX message queue (`posix_ipc.MessageQueue`) per receiver; a message
carries the sender index in its first 2 bytes.

Invariants: every queue's message size fits the largest wire of the run (the payload
maximum plus, under a protocol, room for its control section); its depth is as large as the
per-user RLIMIT_MSGQUEUE allows for n queues (at most the system's msg_max).  A full
queue makes the non-blocking send fail (BusyError) and the message waits in the endpoint.
The parent creates every queue before fork and unlinks them all after the run.
"""
from __future__ import annotations

import os
import resource

from . import Endpoint, Transport, frame, unframe


def _sysctl(name, default):
    try:
        with open(f"/proc/sys/fs/mqueue/{name}") as f:
            return int(f.read())
    except (OSError, ValueError):
        return default


class PosixMqTransport(Transport):
    kind = "posix-mq"

    def setup(self):
        import posix_ipc
        n = self.n
        self.queues, self.names = [], []
        # payload, our prefix, and a protocol's control (RST's n x n matrix is the largest)
        control = 4 * n * n + 8 * n if self.cfg.protocol else 0
        self.msg_size = self.cfg.sizes.b + 64 + control
        size_max = _sysctl("msgsize_max", 8192)
        if self.msg_size > size_max:
            raise ValueError(f"--transport posix-mq: a wire may need {self.msg_size} bytes but "
                             f"/proc/sys/fs/mqueue/msgsize_max is {size_max}; use fewer "
                             f"processes or a smaller --payload maximum")
        budget = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0]
        if budget == resource.RLIM_INFINITY:
            budget = 1 << 30
        # the kernel charges each queue depth * (size + a pointer's worth); keep a margin
        # for queues other programs of this user hold
        depth = min(_sysctl("msg_max", 10), int(budget * 0.75) // (n * (self.msg_size + 64)))
        if depth < 1:
            raise ValueError(f"--transport posix-mq: {n} queues of {self.msg_size}-byte messages "
                             f"do not fit RLIMIT_MSGQUEUE ({budget} bytes); use fewer processes")
        self.depth = depth
        token = os.urandom(4).hex()
        self.names = [f"/bus1py-stress-{os.getpid()}-{token}-{i}" for i in range(n)]
        self.queues = []
        try:
            for name in self.names:
                self.queues.append(posix_ipc.MessageQueue(
                    name, posix_ipc.O_CREX, max_messages=depth, max_message_size=self.msg_size))
        except BaseException:
            self.close()
            raise

    def endpoint(self, index):
        return PosixMqEndpoint(index, self.queues, self.msg_size)

    def close(self):
        import posix_ipc
        for q in self.queues:
            try:
                q.close()
            except posix_ipc.Error:
                pass
        for name in self.names:
            try:
                posix_ipc.unlink_message_queue(name)
            except posix_ipc.ExistentialError:
                pass
        self.queues = []


class PosixMqEndpoint(Endpoint):
    def __init__(self, index, queues, msg_size):
        import posix_ipc
        super().__init__()
        self.index = index
        self.queues = queues
        self.mine = queues[index]
        self.msg_size = msg_size
        self.busy = posix_ipc.BusyError
        self.got = []

    def _try_send(self, dest, data):
        buf = frame(self.index, data)
        if len(buf) > self.msg_size:
            raise ValueError(f"posix-mq: a {len(buf)}-byte wire exceeds the queues' message "
                             f"size {self.msg_size}")
        try:
            self.queues[dest].send(buf, timeout=0)
        except self.busy:
            return False
        return True

    def poll(self, limit=512):
        out, self.got = self.got, []
        recv = self.mine.receive
        while len(out) < limit:
            try:
                out.append(unframe(recv(0)[0]))
            except self.busy:
                break
        return out

    def wait(self, timeout):
        if not self.got:
            try:
                self.got.append(unframe(self.mine.receive(timeout)[0]))
            except self.busy:
                pass


TRANSPORT = PosixMqTransport
