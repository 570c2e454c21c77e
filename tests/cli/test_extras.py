"""The core install needs only cffi, posix_ipc and psutil; each command names the extra it
lacks in one line and exits 2."""
import pytest

from tests.cli.conftest import HEAVY, bus1py, one_line_error

README_EXAMPLE = """
import multiprocessing as mp, sys
import bus1py

def child(peer, handle):
    peer.send([handle], b"hello from a child")

with bus1py.Bus.create() as bus:
    parent, kid = bus.peer(), bus.peer()
    node = parent.create_node()
    handle = parent.transfer(node, kid)
    p = mp.Process(target=child, args=(kid, handle))
    p.start(); p.join()
    msg = parent.recv(timeout=5)
    print(msg.payload, msg.destination == node)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY})
print("heavy:", heavy)
"""


@pytest.mark.timeout(60)
def test_bus_works_without_any_extra():
    code = README_EXAMPLE.replace("{HEAVY}", repr(set(HEAVY.split(","))))
    cp = bus1py("-c", code, without=HEAVY)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["b'hello from a child' True", "heavy: []"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, without, extra", [
    (["stress", "--no-trace", "--messages", "1"], "rich", "cli"),
    (["demo"], "numpy", "cli"),
    (["ls"], "rich", "cli"),
    (["stress", "--messages", "1", "-n", "2", "-q", "--trace", "T"], "pyarrow", "check"),
    (["check", "T"], "pyarrow", "check"),
    (["simulate", "--protocol", "fifo"], "numpy", "cli"),
])
def test_missing_extra_is_one_line(tmp_path, args, without, extra):
    args = [str(tmp_path / "t") if a == "T" else a for a in args]
    if args[0] == "check":
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "x.parquet").write_bytes(b"PAR1")
    cp = bus1py(*args, without=without)
    one_line_error(cp, 2, f"pip install 'bus1py[{extra}]'")


def test_version():
    from bus1py import __version__
    cp = bus1py("--version")
    assert cp.returncode == 0 and cp.stdout.strip() == f"bus1py {__version__}"
