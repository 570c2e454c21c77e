"""Every protocol against the reference checker's judgement, on Hypothesis-chosen schedules.

Two drivers feed the same protocol machines:
  - the adversary (`bus1py.sim.adversary.play`): explicit programs where the network hands
    over any in-flight wire at any moment, then drains newest-first, oldest-first or in a
    random order; this reaches the reorderings a random network rarely produces;
  - the simulator (`bus1py.sim.engine.run`): Poisson senders and exponential delays, seeded.
Each trace is judged by `bus1py.check.reference.reference_check` (plain graph reachability).
A causal protocol must deliver every copy exactly once (liveness included: the drain ends
with nothing in flight and nothing held) and in causal order; bus1 also in one consistent
order, and causally even through side channels; fifo must be caught violating causal.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus1py import causal
from bus1py.check.reference import reference_check
from bus1py.sim.adversary import play
from bus1py.sim.engine import RunSpec, run

CAUSAL = [p for p in causal.PROTOCOLS if causal.protocol_class(p).causal]
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def programs(draw, n, signals=False):
    ops = []
    for _ in range(draw(st.integers(0, 36))):
        kind = draw(st.sampled_from(["send", "send", "deliver", "deliver", "deliver"]
                                    + (["signal"] if signals else [])))
        if kind == "send":
            p = draw(st.integers(0, n - 1))
            others = [q for q in range(n) if q != p]
            ops.append(("send", p, draw(st.lists(st.sampled_from(others), min_size=1,
                                                 max_size=len(others), unique=True))))
        elif kind == "deliver":
            ops.append(("deliver", draw(st.integers(0, 1 << 16))))
        else:
            ops.append(("signal", draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))))
    return ops


drains = st.sampled_from(["lifo", "fifo"]) | st.integers(0, 1 << 30)


def _judge(name, rows, undelivered, consistent=False):
    v = reference_check(rows)
    assert undelivered == 0, f"{name}: {undelivered} copies never delivered"
    assert v["exactly_once"] == 0, (name, v)
    assert v["fifo"] == 0, (name, v)
    assert v["causal"] == 0, (name, v)
    if consistent:
        assert v["consistent"] == 0, (name, v)
    return v


@pytest.mark.parametrize("name", CAUSAL)
@SETTINGS
@given(data=st.data())
def test_adversarial_schedules_keep_causal_order(name, data):
    n = data.draw(st.integers(2, 5), label="n")
    out = play(name, n, data.draw(programs(n), label="ops"), data.draw(drains, label="drain"))
    _judge(name, out.rows, out.undelivered, consistent=(name == "bus1"))


@pytest.mark.parametrize("name", CAUSAL)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 6),
       mode=st.sampled_from(["unicast", "multicast"]),
       net_delay=st.sampled_from([0.005, 0.05, 0.5]))
def test_random_networks_keep_causal_order(name, seed, n, mode, net_delay):
    rows = []
    r = run(RunSpec(name, n, mode, seed=seed, warmup=2, measure=6, net_delay=net_delay),
            trace=rows)
    _judge(name, rows, r["undelivered"], consistent=(name == "bus1"))


@SETTINGS
@given(data=st.data())
def test_bus1_is_causal_through_side_channels(data):
    """A process that signals another outside the protocol (once its own send has passed the
    sync round: `busy` is False) hands over everything it knew; bus1 still orders the cause
    first. The adversary skips a signal while its sender is busy."""
    n = data.draw(st.integers(2, 5), label="n")
    ops = data.draw(programs(n, signals=True), label="ops")
    out = play("bus1", n, ops, data.draw(drains, label="drain"))
    _judge("bus1", out.rows, out.undelivered, consistent=True)


@pytest.mark.parametrize("name", [p for p in CAUSAL if p != "bus1"])
def test_piggybacking_protocols_cannot_see_side_channels(name):
    """P0 sends m1 to P2, then tells P1 outside the protocol; P1 sends m2 to P2. m1 happened
    before m2, but nothing on m2's wire says so: m2 arriving first (the newest wire in
    flight) is delivered first."""
    ops = [("send", 0, [2]), ("signal", 0, 1), ("send", 1, [2]), ("deliver", -1)]
    out = play(name, 3, ops, drain="fifo")
    v = reference_check(out.rows)
    assert v["causal"] == 1 and v["exactly_once"] == 0


def test_fifo_is_caught_violating_causal_order():
    """Seed 000 Fig. 4: P0 sends x to P2, then y to P1; P1 delivers y and sends z to P2;
    z reaches P2 first. FIFO channels are respected; causality is not."""
    ops = [("send", 0, [2]), ("send", 0, [1]), ("deliver", 1), ("send", 1, [2]),
           ("deliver", 1)]
    out = play("fifo", 3, ops, drain="fifo")
    v = reference_check(out.rows)
    assert v == {"exactly_once": 0, "fifo": 0, "causal": 1, "consistent": 0, "node_rules": 0}
    deliveries = [(r["process"], r["msg"]) for r in out.rows if r["kind"] == "deliver"]
    assert deliveries == [(1, 2), (2, 3), (2, 1)]   # z (3) before x (1) at P2


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_fifo_keeps_each_channel_in_order(seed):
    rows = []
    r = run(RunSpec("fifo", 4, "multicast", seed=seed, warmup=0, measure=10), trace=rows)
    v = reference_check(rows)
    assert r["undelivered"] == 0 and v["exactly_once"] == 0 and v["fifo"] == 0


def test_fifo_violates_causal_order_on_a_random_network():
    rows = []
    run(RunSpec("fifo", 5, "unicast", seed=1, warmup=0, measure=60), trace=rows)
    v = reference_check(rows)
    assert v["causal"] > 0 and v["fifo"] == 0 and v["exactly_once"] == 0
