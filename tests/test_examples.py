"""Every Python block of README.md and docs/*.md runs as written (tests/docs_examples.py says
how each kind of block is run), so that no example can rot.

A document's services are stopped with SIGTERM and started again before their programs run
a second time: the README's service must take any number of clients and come back at once
after a kill, without `bus1py gc`. The README's other statements a user relies on are held
to the code: its table of limits (each default, and the errno past it).
"""
import ast
import errno
import os
import re
import signal
import time

import pytest

import bus1py
from tests.docs_examples import DOCUMENTS, ROOT, blocks, private_names, run, start

ALL = {doc: blocks(doc) for doc in DOCUMENTS}
RUN = [doc for doc, bs in ALL.items() if any(b.kind != "listing" for b in bs)]


def test_the_documents_have_blocks_and_every_mark_is_understood():
    assert ALL[ROOT / "README.md"], "README.md has no python block"
    for doc, bs in ALL.items():
        services = {b.name for b in bs if b.kind == "service"}
        for b in bs:
            assert b.kind != "service" or b.name, f"{b}: a service needs a name"
            assert b.service is None or b.service in services, \
                f"{b}: runs with {b.service!r}, which is no service of {doc.name}"


@pytest.mark.parametrize("block", [b for bs in ALL.values() for b in bs if b.kind == "listing"],
                         ids=str)
def test_a_listing_is_python(block):
    # a listing may show `await` and `async for` as a coroutine's body would use them
    compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _ok(block, cp):
    assert cp.returncode == 0, f"{block} exited {cp.returncode}:\n{cp.stderr[-3000:]}"
    assert "Traceback" not in cp.stderr, f"{block}:\n{cp.stderr[-3000:]}"


def _serving(services, running):
    for name, p in running.items():
        assert p.poll() is None, \
            f"{services[name]} stopped while serving:\n{p.communicate()[1][-3000:]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc", RUN, ids=lambda d: d.name)
def test_the_programs_of(doc, tmp_path):
    bs = ALL[doc]
    names = private_names(bs)
    services = {b.name: b for b in bs if b.kind == "service"}
    running = {}
    try:
        for b in bs:
            if b.kind == "program" and b.service is None:
                _ok(b, run(b, names, tmp_path))
        clients = [b for b in bs if b.service]
        for life in range(2):        # the second after each service was killed and restarted
            for name, b in services.items():
                running[name] = start(b, names, tmp_path)
            for b in clients:
                for _ in range(2 - life):   # first one client after another
                    cp = run(b, names, tmp_path, until=time.monotonic() + 20)
                    _serving(services, running)
                    _ok(b, cp)
            _serving(services, running)
            for p in running.values():
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)
            running.clear()
    finally:
        for p in running.values():
            p.kill()
            p.communicate()
        for name in names.values():     # what the killed services left, as a user would
            try:
                with bus1py.Bus.open(name) as left:
                    left.unlink()           # (its mover directory with it)
            except FileNotFoundError:
                pass


def test_the_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().splitlines()[:12]
    assert any(line.startswith("make run ") for line in head), head
    assert any(line.startswith("make test ") for line in head), head


def _pair(bus, **quota):
    """A sender, a receiver (with `quota`) and the sender's handle to the receiver's node."""
    a, b = bus.peer(), bus.peer(**quota)
    return a, b, b.transfer(b.create_node(), a)


def _payload(bus):
    a, _, h = _pair(bus)
    a.send([h], b"x" * 65)


def _msg_handles(bus):
    a, _, h = _pair(bus)
    a.send([h], b"", handles=[a.create_node(), a.create_node()])


def _dests(bus):
    a, _, h = _pair(bus)
    c = bus.peer()
    a.send([h, c.transfer(c.create_node(), a)], b"")


def _sends(n, size=0, **quota):
    def past(bus):
        a, _, h = _pair(bus, **quota)
        for _ in range(n):
            a.send([h], b"x" * size)
    return past


def _nodes(n, **quota):
    def past(bus):
        _, b, _ = _pair(bus, **quota)
        for _ in range(n):
            b.create_node()
    return past


def _peers(bus):
    bus.peer()
    bus.peer()


def _names(bus):
    a = bus.peer()
    for i in range(5):
        a.publish(f"n{i}", a.create_node())


# limit -> (the smaller limits of a bus to try it on, what goes past it)
PAST = {
    "max_payload": ({"max_payload": 64}, _payload),
    "max_msg_handles": ({"max_msg_handles": 1}, _msg_handles),
    "max_dests": ({"max_dests": 1}, _dests),
    "quota_messages": ({}, _sends(2, quota_messages=1)),
    "quota_bytes": ({}, _sends(2, 64, quota_bytes=100)),
    "quota_handles": ({}, _nodes(3, quota_handles=2)),
    "pool_size": ({"pool_size": 8192}, _sends(20, 1000)),
    "max_peers": ({"max_peers": 1}, _peers),
    "max_nodes": ({"max_nodes": 4}, _nodes(5)),
    "max_handles": ({"max_handles": 4}, _nodes(5)),
    "max_entries": ({"max_entries": 8, "max_dests": 4}, _sends(9)),
    "max_names": ({"max_names": 1}, _names),
}


def _number(text):
    value, _, unit = text.replace(",", "").partition(" ")
    return int(value) << {"": 0, "KiB": 10, "MiB": 20, "GiB": 30}[unit]


@pytest.mark.timeout(60)
def test_the_readme_limits_are_the_bus_s():
    """The README's table of limits: each default is the bus's, and going past it raises
    the errno the table says."""
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| [^|]*\(`(\w+)`\) \| ([\d,]+(?: [KMG]iB)?) \| `(E[A-Z]+)` \|$", readme, re.M)
    assert {field for field, _, _ in rows} == set(PAST) | {"quota_fds"}, rows
    defaults = bus1py.Limits()
    for field, default, code in rows:
        assert _number(default) == getattr(defaults, field), field
        if field not in PAST:
            continue
        limits, past = PAST[field]
        with bus1py.Bus.create(**limits) as bus:
            with pytest.raises(OSError) as e:
                past(bus)
        assert errno.errorcode[e.value.errno] == code, field
