"""The trust boundary of a bus (docs/RELIABILITY.md, "Trust model").

Invariants checked:
  - Bus.open maps only a regular file of this user whose permission bits are within the
    mode asked for (0o600 unless told); another owner, a wider mode, a symbolic link or a
    FIFO is refused with a one-line error naming it, and nothing is mapped.  The explicit
    opt-ins (mode=, trust_other_owner=True) open it, and unpickled peers open their bus
    with the checks their bus was opened with.
  - `bus1py ls`, `gc` and `rm` never follow a symbolic link nor wait on a FIFO named like
    a bus: they finish at once and leave both alone; they take this user's buses of any
    mode.
  - Every limit is bounded: extremes are refused at create with a ValueError naming the
    limit and its bound, and a header claiming such limits, or tables that overlap or run
    past the segment, is refused at attach with EBADMSG.
  - A segment truncated before an open is refused (EBADMSG, "truncated"); truncated under a
    process that maps it, that process's next access to the cut part is SIGBUS.
  - A header rewritten after attach cannot make the others read out of bounds: the
    accessors of csrc/bus/layout.h read this process's validated copy (csrc/bus/view.c).
"""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import bus1py
from bus1py._b1 import ffi, lib

pytestmark = pytest.mark.usefixtures("no_leaks")

SHM = "/dev/shm/"
BUS1PY = [sys.executable, "-m", "bus1py.cli"]
SPAWN = mp.get_context("spawn")
# struct b1_header (csrc/bus/layout.h): magic, version, header_size, segment_size, limits, offsets
HEADER_SIZE_AT, SEGMENT_SIZE_AT, LIMITS_AT = 12, 16, 24
OFFSETS_AT = LIMITS_AT + ffi.sizeof("struct b1_limits")


def limit_at(name: str) -> int:
    return LIMITS_AT + ffi.offsetof("struct b1_limits", name)


def run_cli(*args, timeout=30):
    """`bus1py ARGS` in a fresh process; a hang is a TimeoutExpired (the test fails)."""
    return subprocess.run(BUS1PY + list(args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


# ---------------------------------------------------------------- owner and mode


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a segment to another uid needs root")
def test_a_bus_of_another_owner_is_refused_unless_trusted(shm_name):
    name = shm_name("squat")
    with bus1py.Bus.create(name) as bus:
        # another user who created the name first: the segment is theirs
        os.chown(SHM + name, 65534, 65534)
        with pytest.raises(PermissionError) as info:
            bus1py.Bus.open(name)
        e = info.value
        assert e.errno == errno.EPERM and "uid 65534" in str(e) and "trust_other_owner" in str(e)
        assert "\n" not in str(e)
        assert bus1py.Bus._attached.get("/" + name) is bus, "a refused open replaced the mapping"
        with pytest.raises(PermissionError):
            bus1py.Bus.open(name, mode=0o666)  # a mode is no opt-in for another owner
        trusted = bus1py.Bus.open(name, trust_other_owner=True)
        try:
            a = trusted.peer()
            n = a.create_node()
            a.send([n], b"shared on purpose")
            assert bytes(a.recv(timeout=5).payload) == b"shared on purpose"
            a.disconnect()
        finally:
            trusted.close()


def test_a_mode_wider_than_asked_is_refused(shm_name):
    name = shm_name("mode")
    with bus1py.Bus.create(name) as bus:
        assert stat.S_IMODE(os.stat(SHM + name).st_mode) & ~0o600 == 0
        bus1py.Bus.open(name).close()  # the default: 0600 or narrower is fine
        os.chmod(SHM + name, 0o666)
        with pytest.raises(PermissionError) as info:
            bus1py.Bus.open(name)
        assert info.value.errno == errno.EPERM
        assert "0o666" in str(info.value) and "0o600" in str(info.value) and "mode=" in str(info.value)
        with pytest.raises(PermissionError):
            bus1py.Bus.open(name, mode=0o640)  # still wider than that
        wide = bus1py.Bus.open(name, mode=0o666)
        assert wide.info()["segment_size"] == bus.info()["segment_size"]
        wide.close()
        for bad in (-1, 0o1000, "0600", 1.5, True):
            with pytest.raises(ValueError, match="mode"):
                bus1py.Bus.open(name, mode=bad)
        with pytest.raises(ValueError, match="mode"):
            bus1py.Bus.create(shm_name("badmode"), mode=0o7777)
        with pytest.raises(TypeError, match="trust_other_owner"):
            bus1py.Bus.open(name, trust_other_owner="yes")


@pytest.mark.timeout(120)
def test_admin_commands_take_this_users_bus_of_any_mode(shm_name):
    name = shm_name("adminmode")
    with bus1py.Bus.create(name, persistent=True) as bus:
        bus.peer()
        os.chmod(SHM + name, 0o666)
        ls = run_cli("ls", name)
        assert ls.returncode == 0 and name in ls.stdout, ls.stdout
        gc = run_cli("gc", name)
        assert gc.returncode == 0 and name in gc.stdout, gc.stdout
        assert os.path.exists(SHM + name), "gc removed a bus whose creator is alive"


def _send_from_child(peer, node, conn):
    try:
        peer.send([node], b"from a spawned child")
        conn.send("sent")
    except BaseException as e:  # reported to the parent, which asserts on it
        conn.send(f"{type(e).__name__}: {e}")


@pytest.mark.timeout(60)
def test_unpickled_peers_open_their_bus_with_its_mode(shm_name):
    """A bus created with mode 0o640: a spawned child that unpickles one of its peers maps
    it with that mode accepted, while a plain open still refuses it."""
    name = shm_name("spawned")
    with bus1py.Bus.create(name, mode=0o640) as bus:
        os.chmod(SHM + name, 0o640)  # whatever the umask took away
        with pytest.raises(PermissionError):
            bus1py.Bus.open(name)
        a = bus.peer()
        n = a.create_node()
        parent_end, child_end = SPAWN.Pipe()
        p = SPAWN.Process(target=_send_from_child, args=(a, n, child_end))
        p.start()
        try:
            assert parent_end.poll(45), "the spawned child did not answer"
            assert parent_end.recv() == "sent"
            assert bytes(a.recv(timeout=5).payload) == b"from a spawned child"
        finally:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join(5)
        assert p.exitcode == 0


# ---------------------------------------------------------------- symlinks and FIFOs


@pytest.fixture
def traps(shm_name):
    """A real bus, a symbolic link to it and a FIFO, all named like buses of this test run."""
    bus = bus1py.Bus.create(shm_name("real"))
    link, fifo = shm_name("link"), shm_name("fifo")
    os.symlink(SHM + bus.name.lstrip("/"), SHM + link)
    os.mkfifo(SHM + fifo, 0o600)
    yield bus, link, fifo
    for n in (link, fifo):
        if os.path.lexists(SHM + n):
            os.unlink(SHM + n)
    bus.__exit__(None, None, None)


def test_open_refuses_a_symlink_and_a_fifo_at_once(traps):
    bus, link, fifo = traps
    t0 = time.monotonic()
    with pytest.raises(OSError) as info:
        bus1py.Bus.open(link)
    assert info.value.errno == errno.ELOOP and "symbolic link" in str(info.value)
    with pytest.raises(OSError) as info:
        bus1py.Bus.open(fifo)
    assert info.value.errno == errno.EBADMSG and "not a regular file" in str(info.value)
    assert time.monotonic() - t0 < 5


@pytest.mark.timeout(60)
def test_list_names_skips_symlinks_fifos_and_other_owners(traps):
    bus, link, fifo = traps
    # in another process: a FIFO opened for reading would block it, not pytest
    out = subprocess.run([sys.executable, "-c", "import bus1py; print('\\n'.join(bus1py.Bus.list_names()))"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    names = out.stdout.split()
    assert bus.name in names
    assert "/" + link not in names and "/" + fifo not in names
    if os.geteuid() == 0:
        os.chown(SHM + bus.name.lstrip("/"), 65534, 65534)
        assert bus.name not in bus1py.Bus.list_names(), "another user's bus is listed"


@pytest.mark.timeout(120)
def test_admin_commands_skip_symlinks_and_fifos(traps):
    bus, link, fifo = traps
    target = os.stat(SHM + bus.name.lstrip("/"))
    # `ls` of every bus reads only; `gc` and `rm` are given the names, so that they act on
    # nothing of another test run
    ls = run_cli("ls")
    assert bus.name in ls.stdout and link not in ls.stdout and fifo not in ls.stdout, ls.stdout
    for trap in (link, fifo):
        for cmd in ("ls", "gc"):
            out = run_cli(cmd, trap)
            assert out.returncode == 2 and trap in out.stderr, (cmd, out.stdout, out.stderr)
        rm = run_cli("rm", trap)
        assert rm.returncode == 2 and "no bus1py bus" in rm.stderr, rm.stderr
        assert os.path.lexists(SHM + trap), f"rm removed {trap}"
    assert stat.S_ISLNK(os.lstat(SHM + link).st_mode) and stat.S_ISFIFO(os.lstat(SHM + fifo).st_mode)
    after = os.stat(SHM + bus.name.lstrip("/"))
    assert (after.st_ino, after.st_size) == (target.st_ino, target.st_size)
    assert bus.peer().query()  # the bus the link points to still works


# ---------------------------------------------------------------- limits


def _raw_info(bus):
    info = ffi.new("struct b1_bus_info *")
    lib.b1_bus_info(bus.base(), info)
    return info


LIMIT_WIDTH = {f: ffi.sizeof(t.type) for f, t in ffi.typeof("struct b1_limits").fields}
TABLES = ("max_peers", "max_nodes", "max_handles", "max_entries")

EXTREMES = [
    ("max_peers", (1 << 32) - 1, "65535"), ("max_peers", 1 << 16, "65535"),
    ("max_nodes", (1 << 32) - 1, "16777214"), ("max_entries", (1 << 32) - 1, "16777214"),
    ("max_handles", 1 << 24, "16777214"), ("max_msg_handles", (1 << 32) - 1, "65536"),
    ("max_dests", 65537, "65536"), ("max_payload", (1 << 32) - 1, str((1 << 27) - 32)),
    ("pool_size", 1 << 39, "2**38"), ("quota_messages", 1 << 32, "2**32"),
    ("quota_bytes", 1 << 64, "2**64"), ("spin_ns", 1 << 32, "2**32"),
]


@pytest.mark.parametrize("limit,value,bound", EXTREMES)
def test_extreme_limits_are_refused(limit, value, bound):
    kw = {limit: value}
    if limit == "max_dests":
        kw["max_entries"] = 1 << 20
    with pytest.raises(ValueError) as info:
        bus1py.Bus.create(**kw)
    text = str(info.value)
    assert limit in text and bound in text and "\n" not in text, text


def test_the_largest_table_limits_are_sized_in_64_bits(make_bus):
    """At the bound the segment's size is the sum of its tables and its pool, computed in
    64 bits (checked without mapping it, through the C helper's own computation)."""
    small = make_bus(max_peers=2)
    raw = _raw_info(small)
    top = dict(max_peers=(1 << 16) - 1, max_nodes=(1 << 24) - 2, max_handles=(1 << 24) - 2,
               max_entries=(1 << 24) - 2)
    lim = bus1py.Limits(**top, max_msg_handles=65536, pool_size=1 << 38)
    lim.check()
    offs = _layout(_read(small.name.lstrip("/"), HEADER_SIZE_AT, 4), top, list(raw.slot_sizes),
                   wrap32=False)
    assert offs[4] + lim.pool_size > 1 << 32  # past what 32 bits hold
    # after the pool, the name table: its head and names_slots slots (as many for both buses)
    names = ((offs[4] + lim.pool_size + 63) & ~63) + raw.names_head_size + raw.names_slots * raw.name_slot_size
    assert lib.b1_segment_size(lim.to_c()) == names


def _poke(name: str, at: int, value: int, width: int) -> None:
    fd = os.open(SHM + name, os.O_RDWR)
    try:
        os.pwrite(fd, value.to_bytes(width, "little"), at)
    finally:
        os.close(fd)


def _read(name: str, at: int, width: int) -> int:
    fd = os.open(SHM + name, os.O_RDONLY)
    try:
        return int.from_bytes(os.pread(fd, width, at), "little")
    finally:
        os.close(fd)


def _layout(header_size: int, limits: dict, slot_sizes, wrap32: bool) -> list:
    """The table offsets csrc/bus/bus.c layout_offsets gives `limits`; `wrap32`: as it did when
    max + 1 was computed in 32 bits (a table of 2**32-1 slots took no room at all)."""
    def align(x, a=64):
        return (x + a - 1) & ~(a - 1)
    o = align(header_size)
    offs = []
    for table, size in zip(TABLES, slot_sizes):
        offs.append(o)
        n = limits[table] + 1
        o = align(o + (n & 0xFFFFFFFF if wrap32 else n) * size)
    offs.append(align(o, 4096))
    return offs


# case -> (claims written into the header, how the table offsets are rewritten:
#          None (kept), "layout" (those of the claimed limits), "layout32" (those the 32-bit
#          computation gave the claimed limits), or a function of the current offsets)
HOSTILE = {
    # 2**32-1 peers with the offsets the 32-bit computation gave them: the peer table has
    # no room and the node table starts where it does, a layout that fits the segment, so
    # only the bound on the limit refuses it
    "peers wrap to an empty table": ({"max_peers": (1 << 32) - 1}, "layout32"),
    "entries wrap to an empty table": ({"max_entries": (1 << 32) - 1}, "layout32"),
    "peers past the bound": ({"max_peers": 1 << 16}, "layout"),
    "msg handles past the bound": ({"max_msg_handles": (1 << 32) - 1}, None),
    "dests past the entries": ({"max_dests": 17}, None),
    "overlapping tables": ({}, lambda offs: [offs[0]] * 4 + [offs[4]]),
    "pool past the segment": ({"pool_size": 1 << 38}, None),
    "segment larger than the file": ({"segment_size": 1 << 40}, None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_header_is_refused_at_attach(shm_name, case):
    name = shm_name("hostile")
    with bus1py.Bus.create(name, max_peers=4, max_nodes=8, max_handles=16, max_entries=16,
                           max_dests=4, pool_size=1 << 16) as bus:
        raw = _raw_info(bus)
        offs = list(raw.table_offsets)
        assert [_read(name, OFFSETS_AT + 8 * i, 8) for i in range(5)] == offs, \
            "this test's picture of struct b1_header is out of date"
        claims, rewrite = HOSTILE[case]
        for key, value in claims.items():
            if key == "segment_size":
                _poke(name, SEGMENT_SIZE_AT, value, 8)
            else:
                _poke(name, limit_at(key), value, LIMIT_WIDTH[key])
        if rewrite in ("layout", "layout32"):
            limits = {k: claims.get(k, getattr(raw.limits, k)) for k in TABLES}
            offs = _layout(_read(name, HEADER_SIZE_AT, 4), limits, list(raw.slot_sizes),
                           wrap32=rewrite == "layout32")
            if rewrite == "layout32":  # what made it dangerous: it fitted the segment
                assert offs[4] + raw.limits.pool_size <= raw.segment_size
        elif rewrite is not None:
            offs = rewrite(offs)
        for i, off in enumerate(offs):
            _poke(name, OFFSETS_AT + 8 * i, off, 8)
        with pytest.raises(OSError) as e:
            bus1py.Bus.open(name)
        assert e.value.errno == errno.EBADMSG and name in str(e.value), e.value


# ---------------------------------------------------------------- truncation


def test_a_truncated_segment_is_refused_at_open(shm_name):
    name = shm_name("cut")
    with bus1py.Bus.create(name, max_peers=4, pool_size=1 << 16) as bus:
        size = bus.info()["segment_size"]
        os.truncate(SHM + name, size // 2)
        with pytest.raises(OSError) as info:
            bus1py.Bus.open(name)
        assert info.value.errno == errno.EBADMSG and "truncated" in str(info.value)
        assert str(size // 2) in str(info.value) and str(size) in str(info.value)


# a process that maps the bus, uses a peer of it, says "mapped", and after a line on its
# stdin uses the peer again (every OSError's errno printed): `damage` comes in between
VICTIM = textwrap.dedent("""
    import sys, bus1py
    bus = bus1py.Bus.open(sys.argv[1])
    a = bus.peer()
    n = a.create_node()
    a.send([n], b"before the damage")
    a.recv(timeout=5)
    from bus1py import fdpaths
    print("mapped", fdpaths.path(a)[0], flush=True)  # and its store's inbox
    sys.stdin.readline()
    for call in (a.query, lambda: a.send([n], b"after the damage"), lambda: a.recv(timeout=0)):
        try:
            call()
        except OSError as e:
            print(e.errno, flush=True)
    print("survived", flush=True)
""")


def victim_after(name, damage) -> tuple:
    """(the victim's exit status, its output after "mapped") when `damage()` hits the bus
    while the victim has it mapped.  A victim that dies leaves its peer to a gc, which a
    cut bus cannot run: its store's directory is removed here."""
    p = subprocess.Popen([sys.executable, "-c", VICTIM, name], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    store = None
    try:
        word, store = p.stdout.readline().split()
        assert word == "mapped"
        damage()
        p.stdin.write("go\n")
        p.stdin.flush()
        return p.wait(30), p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
        if store is not None and p.returncode != 0:
            shutil.rmtree(os.path.dirname(store), ignore_errors=True)


@pytest.mark.timeout(60)
def test_a_segment_truncated_under_a_live_process_is_sigbus_there(shm_name, monkeypatch):
    """What docs/RELIABILITY.md promises: no error code, the process that touches the cut
    part of its mapping dies of SIGBUS (the kernel's answer to a mapping past the end of
    its file); nothing in user space can tell it apart from a bad pointer.  The test's own
    process runs no watcher of the bus: a rescan of the cut peer table would be its SIGBUS."""
    monkeypatch.setenv("BUS1PY_WATCH", "0")
    name = shm_name("cutlive")
    with bus1py.Bus.create(name, max_peers=4, pool_size=1 << 16):
        status, out = victim_after(name, lambda: os.truncate(SHM + name, 4096))  # the header only
        assert status == -signal.SIGBUS and "survived" not in out, (status, out)


# ---------------------------------------------------------------- the header after attach


@pytest.mark.timeout(60)
def test_a_header_rewritten_after_attach_does_not_crash_the_others(shm_name):
    name = shm_name("rehead")
    with bus1py.Bus.create(name, max_peers=4, pool_size=1 << 16):
        # off_peers, far past the mapping
        status, out = victim_after(name, lambda: _poke(name, OFFSETS_AT, 1 << 40, 8))
        assert status == 0 and "survived" in out, f"the victim died of signal {-status}"
