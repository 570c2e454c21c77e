"""Random concurrent use of every call by several processes, then a full clean-up: nothing
may leak (entries, pool bytes, handles) and every queue must still be a sound tree.

This is the test for the reference counting of nodes and handles across races between
sends carrying handles, releases, destructions and disconnects."""
from __future__ import annotations

import errno
import multiprocessing as mp
import random
import time

import pytest

import bus1py
from bus1py import HANDLE_INVALID
from bus1py._b1 import lib

FORK = mp.get_context("fork")
TOLERATED = {errno.ENXIO, errno.ESTALE, errno.EDQUOT, errno.EXFULL, errno.EHOSTUNREACH,
             errno.EBUSY, errno.ESHUTDOWN}


def _worker(index, peers, given, seconds, seed, out):
    rng = random.Random(seed * 1000 + index)
    me = peers[index]
    nodes = [me.create_node() for _ in range(2)]
    held = {n: 1 for n in nodes + given}  # handle id -> references this process holds
    counts = {"sent": 0, "recv": 0, "errors": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        action = rng.random()
        try:
            if action < 0.35 and held:
                dests = rng.sample(sorted(held), k=min(len(held), rng.randint(1, 3)))
                carry = rng.sample(sorted(held), k=min(len(held), rng.randint(0, 2)))
                me.send(dests, b"x" * rng.randint(0, 64), handles=carry)
                counts["sent"] += 1
            elif action < 0.65:
                msg = me.recv(timeout=0)
                counts["recv"] += 1
                for h in msg.handles:
                    if h != HANDLE_INVALID:
                        held[h] = held.get(h, 0) + 1
            elif action < 0.75 and held:
                h = rng.choice(sorted(held))
                other = rng.choice(peers)
                me.transfer(h, other)  # the other side never learns the id: its disconnect
                #                          at the end must release it
            elif action < 0.85 and held:
                h = rng.choice(sorted(held))
                me.release(h)
                held[h] -= 1
                if not held[h]:
                    del held[h]
            elif action < 0.9 and len(nodes) < 6:
                n = me.create_node()
                nodes.append(n)
                held[n] = 1
            elif action < 0.95 and nodes:
                n = nodes.pop(rng.randrange(len(nodes)))
                me.destroy(n)
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno not in TOLERATED:
                raise
            counts["errors"] += 1
    out.put((index, counts))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_concurrent_use_leaks_nothing(seed):
    n_proc = 5
    with bus1py.Bus.create(spin_ns=0, quota_messages=2000, max_entries=1 << 16) as bus:
        peers = [bus.peer() for _ in range(n_proc)]
        # every peer gets a handle to one node of every other peer up front
        given = [[] for _ in peers]
        for owner in peers:
            node = owner.create_node()
            for i, other in enumerate(peers):
                if other is not owner:
                    given[i].append(owner.transfer(node, other))
        out = FORK.Queue()
        procs = [FORK.Process(target=_worker, args=(i, peers, given[i], 2.0, seed, out)) for i in range(n_proc)]
        try:
            for p in procs:
                p.start()
            results = dict(out.get(timeout=60) for _ in procs)
            for p in procs:
                p.join(timeout=30)
                assert p.exitcode == 0
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
        assert sum(r["sent"] for r in results.values()) > 100
        assert sum(r["recv"] for r in results.values()) > 100
        for p in peers:  # sound trees
            assert lib.b1_queue_check(bus.base(), p._slot) >= 0
        # the parent created the peers and still holds them: disconnect them all, which
        # must release every handle and free every queued message
        for p in peers:
            p.disconnect()
        info = bus.info()
        assert (info["entries_in_use"], info["pool_used"]) == (0, 0), info
        assert all(row["held_handles"] == 0 for row in bus.peers()), bus.peers()
