"""A digest of everything the protocol machines emit over a fixed set of simulator runs.

    python tools/sim_digest.py [--protocols prs,ks,jpcy] [--root DIR]

For each protocol: SHA-256 over every `_send` and `_receive` result (wires, costs, deliveries,
held count) and every run's figures but its timings, for n = 5, 13, 30, both modes. A change
meant to make a protocol or the engine faster must leave these digests as they were; `--root`
points at another checkout (e.g. `git archive HEAD~3 bus1py | tar -x -C /tmp/old`) to get the
digests to compare with.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys


def digest(proto: str) -> str:
    from bus1py import causal
    from bus1py.sim import engine

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
        for n in (5, 13, 30):
            for mode in engine.MODES:
                r = engine.run(engine.RunSpec(proto, n, mode, seed=11, warmup=20,
                                              measure=60 if n < 30 else 25))
                for k in ("seconds", "receive_events_per_s"):
                    r.pop(k)
                h.update(repr(sorted(r.items())).encode())
    finally:
        engine.causal.create = create
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
