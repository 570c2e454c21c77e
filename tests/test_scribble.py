"""A segment scribbled over by another process: the C helper checks every
index and offset it reads from the segment, so using the damaged bus fails with a clear
error (EBADMSG) or works, and never crashes or hangs the interpreter.

Invariants checked:
  - A victim process that uses the bus after random words were written over its tables
    (peers' queue fields, nodes, handles, entries, the pool's records) exits normally:
    it runs in a subprocess, so a crash fails the test instead of killing pytest, and a
    timeout catches a hang.
  - Every call it makes either returns or raises OSError; over all trials some calls
    report EBADMSG (the damage was seen, not silently followed out of the tables).
  - The peers' mutexes are left alone: a scribbled lock word looks held by someone and
    is waited for like a live holder (docs/RELIABILITY.md), which no check can tell apart.
"""
from __future__ import annotations

import json
import mmap
import os
import platform
import random
import subprocess
import sys

import pytest

import bus1py
from bus1py._b1 import ffi, lib

pytestmark = pytest.mark.usefixtures("no_leaks")

MUTEX_BYTES = 40 if platform.machine() == "x86_64" else 48  # sizeof(pthread_mutex_t), glibc

VICTIM = r"""
import errno, json, sys
import bus1py
from bus1py.bus import _restore
name, peers = sys.argv[1], json.loads(sys.argv[2])
errors, ok = {}, 0
def call(f, *a, **k):
    global ok
    try:
        f(*a, **k)
        ok += 1
    except OSError as e:
        errors[errno.errorcode.get(e.errno, str(e.errno))] = errors.get(errno.errorcode.get(e.errno, str(e.errno)), 0) + 1
    except (TypeError, ValueError) as e:
        errors["python:" + type(e).__name__] = errors.get("python:" + type(e).__name__, 0) + 1
try:
    bus = bus1py.Bus.attach(name)
except OSError as e:
    print(json.dumps({"attach": e.errno})); sys.exit(0)
ps = [(_restore(name, slot, pid), hs) for slot, pid, hs in peers]
for round in range(3):
    for p, handles in ps:
        for _ in range(4):
            call(p.recv, timeout=0)
        for h in handles:
            call(p.send, h, b"after the damage")
            call(p.send, [h, handles[0]], b"multicast", [h])
        call(p.query)
        call(p.create_node)
        for h in handles:
            call(p.transfer, h, ps[0][0])
            call(p.release, h)
        call(p.destroy, *handles[:1])
    call(bus.info)
    call(bus.gc)
    call(bus.peers)
for p, _ in ps:
    call(p.disconnect)
call(bus.gc)
print(json.dumps({"ok": ok, "errors": errors}))
"""


def build_world(bus):
    """Four peers, each owning a node that every other one holds; messages queued at every
    peer, one carrying handles, and a transaction left half-sent (a block in a queue).
    Returns [(peer, handles it holds)]."""
    peers = [bus.peer() for _ in range(4)]
    nodes = [p.create_node() for p in peers]
    held = {p: [] for p in peers}
    for p, node in zip(peers, nodes):
        for q in peers:
            if q is not p:
                held[q].append(p.transfer(node, q))
    for p in peers:
        for k, h in enumerate(held[p]):
            p.send(h, b"m%d" % k, [held[p][0]] if k == 0 else ())
    bus1py.Transaction(peers[0], [held[peers[0]][0]], b"half-sent").stage(0)
    return [(p, held[p]) for p in peers]


def scribble(name, info, rng, words):
    """Write `words` random 32-bit words over the bus's tables, from this process through
    its own mapping of /dev/shm (the victim is another process)."""
    offs, sizes, limits = info
    counts = [limits["max_peers"], limits["max_nodes"], limits["max_handles"], limits["max_entries"]]
    with open("/dev/shm" + name, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        for _ in range(words):
            t = rng.randrange(5)
            if t == 4:  # the pool's first records
                off = offs[4] + rng.randrange(0, 64 * 64, 4)
            else:
                slot = rng.randrange(0, min(counts[t], 16) + 1)
                within = rng.randrange(0, sizes[t], 4)
                if t == 0 and within < MUTEX_BYTES:
                    within = MUTEX_BYTES + (within % (sizes[0] - MUTEX_BYTES)) // 4 * 4
                off = offs[t] + slot * sizes[t] + within
            value = rng.choice([rng.getrandbits(32), rng.randrange(0, 64), 0xFFFFFFFF,
                                rng.randrange(1 << 16, 1 << 24)])
            mm[off:off + 4] = value.to_bytes(4, "little")


TRIALS = 400 if os.environ.get("BUS1PY_LONG") == "1" else 24  # docs/RELIABILITY.md


@pytest.mark.timeout(60 + 5 * TRIALS)
def test_scribbled_tables_fail_cleanly_and_never_crash(make_bus):
    seen = {}
    for seed in range(TRIALS):
        rng = random.Random(seed)
        bus = make_bus(max_peers=8, max_nodes=64, max_handles=256, max_entries=1024,
                       pool_size=1 << 20, max_payload=4096, spin_ns=0)
        world = build_world(bus)
        c = ffi.new("struct b1_bus_info *")
        lib.b1_bus_info(bus.base(), c)
        info = (list(c.table_offsets), list(c.slot_sizes),
                {k: getattr(c.limits, k) for k in ("max_peers", "max_nodes", "max_handles", "max_entries")})
        scribble(bus.name, info, rng, words=rng.choice([1, 4, 16, 64]))
        run = subprocess.run([sys.executable, "-c", VICTIM, bus.name,
                              json.dumps([[p._slot, p.id, hs] for p, hs in world])],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"seed {seed}: victim died ({run.returncode}): {run.stderr[-2000:]}"
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert not any(k.startswith("python:") for k in out.get("errors", {})), (seed, out)
        for k, v in out.get("errors", {}).items():
            seen[k] = seen.get(k, 0) + v
    print(f"\nerrors over all trials: {seen}")
    assert seen.get("EBADMSG", 0) > 0, f"no call noticed the damage: {seen}"
