"""The buffer protocol's restriction (seed 000 section 4; docs/PROTOCOL_RULES.md section 8, T-A..T-C).

With selective receive ("receive from P_k"), the Mattern-Fuenfrocken protocol can only take
the head of its FIFO input buffer, which carries no dependency knowledge. So it produces a
strict subset of the causally ordered computations: programs that RST (matrix knowledge)
completes block forever under MF. Each program below is explored over *every* network
schedule (every order in which in-flight wires, ACKs included, can arrive); processes run
greedily, as far as their next selective receive allows.
"""
from __future__ import annotations

from bus1py.causal.buffer import Buffer
from bus1py.causal.rst import RST


def explore(cls, n, programs):
    """Run `programs` ({process: [("send", dest, label) | ("recv", src, label)]}) over every
    schedule. Returns {(finished, received): number of schedules ending so}, where
    `received` is ((process, labels in receive order), ...) for processes that received.
    A schedule is the sequence of choices of which in-flight wire arrives next; a state is
    rebuilt by replaying its choices (the machines are deterministic), and states reached
    by several schedules are explored once (the counts add up).
    """
    return _dfs(cls, n, programs, [], {})


def _replay(cls, n, programs, choices):
    machines = [cls(i, n, selective=True) for i in range(n)]
    pcs = [0] * n
    got = [[] for _ in range(n)]
    flight = []
    for p in range(n):
        _run(p, machines, programs, pcs, got, flight)
    for i in choices:
        src, dst, wire = flight.pop(i)
        step = machines[dst].receive(src, wire)
        assert step.delivered == []
        flight.extend((dst, d, w) for d, w in step.wires)
        _run(dst, machines, programs, pcs, got, flight)
    return machines, pcs, got, flight


def _machine_key(m):
    if isinstance(m, Buffer):
        return tuple(m.ob), m.outstanding, tuple(m.ib)
    return (m.sent.tobytes(), tuple(m.deliv),
            tuple(sorted((j, s) for j, h in m.pending.items() for s in h)))


def _run(p, machines, programs, pcs, got, flight):
    prog = programs.get(p, [])
    while pcs[p] < len(prog):
        op, other, label = prog[pcs[p]]
        if op == "send":
            step = machines[p].send([other], label.encode())
            assert step.delivered == []
            flight.extend((p, d, w) for d, w in step.wires)
        else:
            payload = machines[p].deliver_from(other)
            if payload is None:
                return
            assert payload == label.encode(), (p, payload, label)
            got[p].append(label)
        pcs[p] += 1


def _dfs(cls, n, programs, choices, memo):
    machines, pcs, got, flight = _replay(cls, n, programs, choices)
    key = (tuple(pcs), tuple(map(tuple, got)), tuple(sorted(flight)),
           tuple(map(_machine_key, machines)))
    if key in memo:
        return memo[key]
    if not flight:
        done = all(pcs[p] == len(programs.get(p, [])) for p in range(n))
        received = tuple((p, tuple(g)) for p, g in enumerate(got) if g)
        result = {(done, received): 1}
    else:
        result = {}
        for i in range(len(flight)):
            for outcome, count in _dfs(cls, n, programs, choices + [i], memo).items():
                result[outcome] = result.get(outcome, 0) + count
    memo[key] = result
    return result


def finished(results):
    return sum(c for (done, _), c in results.items() if done)


def schedules(results):
    return sum(results.values())


# P1, P2, P3 of the paper are processes 0, 1, 2.

T_A = {
    0: [("send", 1, "x")],
    2: [("send", 1, "y")],
    1: [("recv", 0, "x"), ("recv", 2, "y")],
}


def test_t_a_headline_y_first_mf_blocks_forever_rst_delivers():
    # y reaches IB_2 before x. MF's IB head is y, from the wrong sender: P2 blocks forever.
    mf = [Buffer(i, 3, selective=True) for i in range(3)]
    x = mf[0].send([1], b"x").wires[0][1]
    y = mf[2].send([1], b"y").wires[0][1]
    mf[1].receive(2, y)
    mf[1].receive(0, x)
    assert mf[1].deliver_from(0) is None
    assert mf[1].held == 2                      # both arrived, neither can be taken
    # RST: x and y are concurrent, so x is deliverable although y arrived first.
    rst = [RST(i, 3, selective=True) for i in range(3)]
    x = rst[0].send([1], b"x").wires[0][1]
    y = rst[2].send([1], b"y").wires[0][1]
    rst[1].receive(2, y)
    rst[1].receive(0, x)
    assert rst[1].deliver_from(0) == b"x"
    assert rst[1].deliver_from(2) == b"y"


def test_t_a_over_all_schedules():
    mf = explore(Buffer, 3, T_A)
    rst = explore(RST, 3, T_A)
    # two data wires and two ACKs: 6 schedules; x first completes, y first blocks P2
    assert mf == {(True, ((1, ("x", "y")),)): 3, (False, ()): 3}
    assert rst == {(True, ((1, ("x", "y")),)): 2}


T_B = {   # seed 000 Fig. 8, nested crowns, each receive made selective
    0: [("send", 1, "e"), ("send", 2, "d"), ("recv", 1, "b"), ("recv", 2, "a")],
    1: [("send", 2, "c"), ("send", 0, "b"), ("recv", 2, "f"), ("recv", 0, "e")],
    2: [("send", 0, "a"), ("send", 1, "f"), ("recv", 0, "d"), ("recv", 1, "c")],
}


def test_t_b_nested_crowns_mf_deadlocks_on_every_schedule():
    # IB FIFO needs g_b<g_a, g_d<g_c, g_f<g_e; the OBs force g_e<g_d, g_c<g_b, g_a<g_f:
    # a cycle, so no schedule completes.
    mf = explore(Buffer, 3, T_B)
    assert schedules(mf) > 1000 and finished(mf) == 0
    # each process alone can complete on some schedule, never all three: the cycle, not one
    # impossible receive, is what blocks
    complete = [{p for p, labels in got if len(labels) == 2} for _, got in mf]
    assert set().union(*complete) == {0, 1, 2}
    assert max(map(len, complete)) == 2


def test_t_b_nested_crowns_rst_succeeds_on_every_schedule():
    rst = explore(RST, 3, T_B)
    want = (True, ((0, ("b", "a")), (1, ("f", "e")), (2, ("d", "c"))))
    assert rst == {want: 720}                  # every arrival order of the six wires


def test_fig7_overlapping_crowns_is_producible_by_mf():
    # The control case of T-B: Fig. 7's order (P1: a, b; P2: e, f; P3: c, d) is reachable.
    fig7 = {
        0: [("send", 1, "e"), ("send", 2, "d"), ("recv", 2, "a"), ("recv", 1, "b")],
        1: [("send", 2, "c"), ("send", 0, "b"), ("recv", 0, "e"), ("recv", 2, "f")],
        2: [("send", 0, "a"), ("send", 1, "f"), ("recv", 1, "c"), ("recv", 0, "d")],
    }
    assert finished(explore(Buffer, 3, fig7)) > 0


T_C = {   # a selective receive that contradicts causality: x -> y -> z, P3 wants z first
    0: [("send", 2, "x"), ("send", 1, "y")],
    1: [("recv", 0, "y"), ("send", 2, "z")],
    2: [("recv", 1, "z"), ("recv", 0, "x")],
}


def test_t_c_both_block_on_every_schedule():
    for cls in (Buffer, RST):
        runs = explore(cls, 3, T_C)
        # every schedule: P2 got y and sent z; P3 received nothing
        assert set(runs) == {(False, ((1, ("y",)),))}, cls.name


def test_t_c_rst_holds_z_although_it_arrived_first():
    rst = [RST(i, 3, selective=True) for i in range(3)]
    x = rst[0].send([2], b"x").wires[0][1]
    y = rst[0].send([1], b"y").wires[0][1]
    rst[1].receive(0, y)
    assert rst[1].deliver_from(0) == b"y"
    z = rst[1].send([2], b"z").wires[0][1]
    rst[2].receive(1, z)
    assert rst[2].deliver_from(1) is None       # z waits for x, which has not arrived
    rst[2].receive(0, x)
    assert rst[2].deliver_from(1) is None       # still: the program never takes x first
    assert rst[2].held == 2
