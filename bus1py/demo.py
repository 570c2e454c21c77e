"""`bus1py demo`: several processes multicast at once; every receiver sees one order.

Invariant: the demo checks what it shows -- it exits 1 if any two receivers disagree on
the relative order of two messages, or a sender's messages arrive out of order.
"""
from __future__ import annotations

import multiprocessing as mp
import time

from rich.console import Console
from rich.table import Table

from .bus import Bus


def _sender(peer, handles, count, index):
    for i in range(count):
        peer.send(handles, f"{index}:{i}".encode())


def _receiver(peer, expected, out):
    got = [peer.recv(timeout=30).payload.decode() for _ in range(expected)]
    out.put((peer.id, got))


def run_demo(senders=4, receivers=4, count=2000, console=None) -> bool:
    console = console or Console()
    ctx = mp.get_context("fork")
    with Bus.create() as bus:
        rx = [bus.peer() for _ in range(receivers)]
        nodes = [p.create_node() for p in rx]
        tx = [bus.peer() for _ in range(senders)]
        out = ctx.Queue()
        procs = [ctx.Process(target=_receiver, args=(p, senders * count, out)) for p in rx]
        procs += [ctx.Process(target=_sender,
                              args=(p, [r.transfer(n, p) for r, n in zip(rx, nodes)], count, i))
                  for i, p in enumerate(tx)]
        start = time.perf_counter()
        with console.status(f"{senders} processes multicasting {count} messages each "
                            f"to {receivers} receivers"):
            for p in procs:
                p.start()
            results = dict(out.get(timeout=60) for _ in rx)
            for p in procs:
                p.join(timeout=30)
        elapsed = time.perf_counter() - start
    orders = list(results.values())
    agree = all(o == orders[0] for o in orders)
    fifo = all([int(m.split(":")[1]) for m in o if m.startswith(f"{s}:")] == list(range(count))
               for o in orders for s in range(senders))
    table = Table(title="bus1py demo: multicast between real processes")
    table.add_column("check")
    table.add_column("result")
    table.add_row("deliveries", f"{sum(map(len, orders)):,} in {elapsed:.2f} s")
    table.add_row("every receiver saw one order", "yes" if agree else "[red]NO[/red]")
    table.add_row("per-sender FIFO", "yes" if fifo else "[red]NO[/red]")
    console.print(table)
    return agree and fifo


def register(sub):
    p = sub.add_parser("demo", help="multicast between real processes and show the order holds")
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--receivers", type=int, default=4)
    p.add_argument("--count", type=int, default=2000, help="messages per sender")
    p.set_defaults(func=lambda a: 0 if run_demo(a.senders, a.receivers, a.count) else 1)
