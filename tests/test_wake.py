"""Waking a queue's sleepers (csrc/bus/queue.c b1_wake): one wake while one is pending since
the last sleeper's look, and a pending-wake mark left by a killed waker costs a sleeper at
most its bounded wait, never a message."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from segment import PEER_WAITERS, PEER_WAKE_SEQ, Segment

WOKEN = 0x80000000  # B1_WAITERS_WOKEN (csrc/bus/queue.h)


def _until(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


@pytest.mark.timeout(30)
def test_a_sleeper_woken_and_not_yet_run_costs_its_sender_one_wake(make_bus):
    """A receiver for one node asleep, then stopped (woken, it cannot run): ten messages to
    it bump its futex word once, not once per change; resumed, it takes all ten."""
    bus = make_bus(spin_ns=0)
    tx, rx = bus.peer(), bus.peer()
    node = rx.create_node()
    h = rx.transfer(node, tx)
    pid = os.fork()
    if pid == 0:  # the receiver: it never returns to pytest
        code = 1
        try:
            got = [bytes(rx.recv(timeout=20, node=node).payload) for _ in range(10)]
            code = 0 if got == [b"%d" % i for i in range(10)] else 2
        finally:
            os._exit(code)
    try:
        with Segment(bus) as seg:
            waiters = seg.peer(rx, PEER_WAITERS)
            _until(lambda: seg.u32(waiters) & ~WOKEN == 1, 10, "the receiver asleep")
            os.kill(pid, signal.SIGSTOP)
            before = seg.u32(seg.peer(rx, PEER_WAKE_SEQ))
            for i in range(10):
                tx.send([h], b"%d" % i)
            assert seg.u32(seg.peer(rx, PEER_WAKE_SEQ)) - before == 1
            os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        try:  # the receiver, if an assertion left it running
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass


@pytest.mark.timeout(30)
def test_a_mark_left_by_a_killed_waker_costs_a_bounded_wait_not_a_message(make_bus):
    """The mark set after a sleeper's look, its bump never made (a waker killed between
    them): the next send's wake is skipped, the sleeper still finds the message at its
    bounded wait (200 ms), and clears the mark, so the next message wakes it again."""
    bus = make_bus(spin_ns=0)
    tx, rx = bus.peer(), bus.peer()
    h = rx.transfer(rx.create_node(), tx)
    got: list = []
    times: list = []

    def receive():
        for _ in range(2):
            m = rx.recv(timeout=10)
            times.append(time.monotonic())
            got.append(bytes(m.payload))

    with Segment(bus) as seg:
        waiters = seg.peer(rx, PEER_WAITERS)
        t = threading.Thread(target=receive)
        t.start()
        _until(lambda: seg.u32(waiters) == 1, 10, "the receiver asleep")
        seg.u32(waiters, seg.u32(waiters) | WOKEN)  # what the killed waker left
        sent = time.monotonic()
        tx.send([h], b"first")
        _until(lambda: got, 5, "the first message, at the sleeper's bounded wait")
        assert times[0] - sent < 3
        _until(lambda: seg.u32(waiters) == 1, 10, "the receiver asleep again, the mark cleared")
        before = seg.u32(seg.peer(rx, PEER_WAKE_SEQ))
        tx.send([h], b"second")
        # at least one bump: a skipped wake leaves wake_seq as it was; the receiver thread
        # may run between the send and this read and add wakes of its own
        assert seg.u32(seg.peer(rx, PEER_WAKE_SEQ)) - before >= 1, "the next wake was skipped"
        t.join(10)
    assert got == [b"first", b"second"]
