"""A random run of a dependency-list protocol, with its per-wire and end-of-run checks.

Shared by the prs, ks and jpcy transcripts: random sends (unicast or multicast) and random
deliveries of in-flight wires until all are delivered. Every wire's measured cost must add up
to its length and match the protocol's own decoding of it (`parse_cost`), `check(machine)`
runs after every step, and at the end nothing is held and every copy was delivered once.
"""
from __future__ import annotations

import random


def random_run(procs, parse_cost, check, n, sends, seed, multicast):
    rng = random.Random(seed)
    ps = procs(n)
    flight, expected, got = [], {}, {}
    done = 0
    while done < sends or flight:
        if done < sends and (not flight or rng.random() < 0.4):
            s = rng.randrange(n)
            others = [x for x in range(n) if x != s]
            dests = rng.sample(others, rng.randint(1, n - 1) if multicast else 1)
            payload = f"{s}:{done}".encode()
            step = ps[s].send(dests, payload)
            for (d, data), c in zip(step.wires, step.costs):
                assert c.header + c.control + len(payload) == len(data)
                assert (c.header, c.control, c.dependents) == parse_cost(data)
                flight.append((s, d, data))
                expected.setdefault(d, []).append(payload)
            done += 1
            check(ps[s])
        else:
            s, d, data = flight.pop(rng.randrange(len(flight)))
            for _, payload in ps[d].receive(s, data).delivered:
                got.setdefault(d, []).append(payload)
            check(ps[d])
    assert all(p.held == 0 for p in ps)
    assert {d: sorted(v) for d, v in got.items()} == {d: sorted(v) for d, v in expected.items()}
    return ps
