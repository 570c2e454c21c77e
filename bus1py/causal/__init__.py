"""Causal-order protocols of the literature as sans-I/O state machines (SPEC section 8).

    from bus1py import causal
    p = causal.create("jpcy", me=0, n=10)
    step = p.send([3, 7], b"payload")     # step.wires: [(dest, bytes)], step.costs: [WireCost]
    step = p.receive(src, data)           # step.delivered: [(sender, payload)] in order

One module per protocol, each owning its state and transitions; `base.py` holds the shared
interface and wire codec. Nothing here does I/O, reads a clock or draws a random number: the
simulator (`bus1py.sim`), the tests and the stress tool drive the same machines.
"""
from __future__ import annotations

import importlib

from .base import Protocol, Reader, Step, WireCost, WireError

#: every protocol, in the order tables and plots list them
PROTOCOLS = ("fifo", "bss", "ses", "rst", "prs", "ks", "jpcy", "buffer", "bus1")


def protocol_class(name: str) -> type[Protocol]:
    """The class of the protocol `name` (one of PROTOCOLS); ValueError for another name."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; choose from {', '.join(PROTOCOLS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.PROTOCOL


def create(name: str, me: int, n: int) -> Protocol:
    """A fresh state machine for process `me` of processes 0..n-1."""
    return protocol_class(name)(me, n)


__all__ = ["PROTOCOLS", "Protocol", "Reader", "Step", "WireCost", "WireError", "create",
           "protocol_class"]
