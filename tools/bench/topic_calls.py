"""In-process cost of a topic's two hot calls beside the peer calls under them: `topic.send`
against `Peer.send` to the same k nodes, `sub.recv` against `Peer.recv(node=)` and
`Peer.recv`.  One process, no waiting (every queue is filled before it is drained), best of
`reps` rounds of `n` calls, each round interleaving the rows so a burst of load from
elsewhere hits all of them; thread CPU time, so being preempted does not count.

    python tools/bench/topic_calls.py [--ks 4,8] [--n 500] [--reps 40]

It writes no report: docs/BENCHMARKS.md ("Topics") quotes it.
"""
from __future__ import annotations

import argparse
import sys
import time

import bus1py

SEND_ROWS = ("topic.send", "Peer.send")
RECV_ROWS = ("sub.recv", "Peer.recv(node=)", "Peer.recv")


def measure(k: int, n: int = 500, reps: int = 40, size: int = 64) -> dict:
    """{row: best microseconds per call} for k subscribers (receivers)."""
    pc = time.thread_time_ns
    best: dict = {}
    payload = bytes(size)
    with bus1py.Bus.create(quota_messages=1 << 22, quota_bytes=1 << 40) as bus:
        topic = bus.peer().topic("bench")
        rx = [bus.peer() for _ in range(k)]
        subs = [p.subscribe("bench") for p in rx]
        if topic.subscribers != k:
            raise RuntimeError(f"{topic.subscribers} of {k} subscriptions taken in")
        tx = bus.peer()
        dests = [p.transfer(s.handle, tx) for p, s in zip(rx, subs)]  # the same nodes, from a plain peer

        def timed(row, fn, calls):
            t = pc()
            fn()
            us = (pc() - t) / 1e3 / calls
            best[row] = min(best.get(row, us), us)

        def send_topic():
            send = topic.send
            for _ in range(n):
                send(payload)

        def send_peer():
            send = tx.send
            for _ in range(n):
                send(dests, payload)

        def drain(how, count=n):
            def run():
                for p, s in zip(rx, subs):
                    recv, h = how(p, s)
                    for _ in range(count):
                        recv(h)
            return run

        forms = {"sub.recv": lambda p, s: (lambda h, r=s.recv: r(), None),
                 "Peer.recv(node=)": lambda p, s: (lambda h, r=p.recv: r(node=h), s.handle),
                 "Peer.recv": lambda p, s: (lambda h, r=p.recv: r(), None)}
        for _ in range(reps):
            for row in RECV_ROWS:
                timed("topic.send", send_topic, n)
                timed(row, drain(forms[row]), n * k)
            timed("Peer.send", send_peer, n)
            drain(forms["Peer.recv"])()
            if topic.send(payload) != k:  # every subscriber took every message of the round
                raise RuntimeError("a subscriber missed a message: the quotas did not hold a round")
            drain(forms["Peer.recv"], 1)()
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ks", default="4,8")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args(argv)
    for k in (int(x) for x in a.ks.split(",")):
        best = measure(k, a.n, a.reps)
        print(f"k={k}  " + "  ".join(f"{row} {best[row]:.3f} us" for row in SEND_ROWS + RECV_ROWS))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
