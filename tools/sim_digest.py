"""A digest of everything the protocol machines emit over a fixed set of simulator runs.

    python tools/sim_digest.py [--protocols prs,ks,jpcy] [--root DIR]

For each protocol: SHA-256 over every `_send` and `_receive` result (wires, costs, deliveries,
held count) and every run's figures but its timings, for n = 5, 13, 30, both modes, on the
Python loop and machines (the reference). A change meant to make a protocol or the engine
faster must leave these digests as they were; `--root` points at another checkout (e.g.
`git archive HEAD~3 bus1py | tar -x -C /tmp/old`) to get the digests to compare with.
For a protocol with a C machine, a second line `<name> C <sha>` digests the same runs on
the C loop (csrc/sim/engine.c's FNV-1a event digest and the figures), to compare C builds.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys


RUNS = [(n, mode) for n in (5, 13, 30) for mode in ("unicast", "multicast")]


def _spec(engine, proto, n, mode):
    return engine.RunSpec(proto, n, mode, seed=11, warmup=20, measure=60 if n < 30 else 25)


def _figures(h, r):
    for k in ("seconds", "receive_events_per_s"):
        r.pop(k)
    h.update(repr(sorted(r.items())).encode())


def digest(proto: str) -> str:
    import inspect

    from bus1py import causal
    from bus1py.sim import engine
    # a checkout whose engine has a C loop: force the Python one, whose steps are hashed here
    python = {"fast": False} if "fast" in inspect.signature(engine.run).parameters else {}

    h = hashlib.sha256()
    create = causal.create

    def traced(name, me, n):
        p = create(name, me, n)
        send, receive = p._send, p._receive

        def _send(dests, payload):
            step = send(dests, payload)
            h.update(repr((step.wires, step.costs, step.delivered)).encode())
            return step

        def _receive(src, data):
            step = receive(src, data)
            h.update(repr((step.wires, step.costs, step.delivered, p.held)).encode())
            return step
        p._send, p._receive = _send, _receive
        return p

    engine.causal.create = traced
    try:
        for n, mode in RUNS:
            _figures(h, engine.run(_spec(engine, proto, n, mode), **python))
    finally:
        engine.causal.create = create
    return h.hexdigest()


def c_digest(proto: str) -> str | None:
    """The same runs on the C loop, or None without one for `proto`."""
    try:
        from bus1py.sim import cloop, engine
    except ImportError:
        return None
    if proto not in cloop.NAMES:
        return None
    h = hashlib.sha256()
    for n, mode in RUNS:
        spec = _spec(engine, proto, n, mode)
        h.update(cloop.run(spec, digest=True).digest.to_bytes(8, "little"))
        _figures(h, engine.run(spec))
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocols", default="all")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                    help="the checkout whose bus1py to import (default: this one)")
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(a.root))
    from bus1py import causal
    protos = causal.PROTOCOLS if a.protocols == "all" else a.protocols.split(",")
    for proto in protos:
        print(proto, digest(proto))
        c = c_digest(proto)
        if c:
            print(proto, "C", c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
