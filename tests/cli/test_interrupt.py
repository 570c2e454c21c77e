"""Ctrl-C, as a terminal sends it (SIGINT to the whole process group): every command stops
with exit 130, one line, no traceback from it or its workers, nothing left running or in
/dev/shm."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.cli.conftest import RUN


def interrupt_after(args, seconds, until=None, out=None):
    """Start `bus1py ARGS` in a process group of its own, send the group SIGINT after
    `seconds` (or once a line containing `until` is on stderr), return (rc, stderr, pid);
    stdout goes to the file `out` (default: nowhere)."""
    p = subprocess.Popen([sys.executable, RUN, "--", *args],
                         stdout=subprocess.DEVNULL if out is None else out,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    if until:
        for line in p.stderr:
            seen.append(line)
            if until in line:
                break
    time.sleep(seconds)
    assert p.poll() is None, "the command ended before the interrupt"
    os.killpg(p.pid, signal.SIGINT)
    rest = p.communicate(timeout=120)[1]
    return p.returncode, "".join(seen) + rest, p.pid


def assert_quiet_and_clean(rc, err, pid):
    assert rc == 130, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert err.strip().splitlines()[-1].endswith("interrupted"), err
    deadline = time.monotonic() + 30       # a JVM takes a moment to leave
    while time.monotonic() < deadline:
        left = [q for q in psutil.process_iter(["pid"]) if _group(q) == pid]
        if not left:
            break
        time.sleep(0.5)
    assert not left, [q.cmdline() for q in left]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"bus1py-{pid}-")]


def _group(q):
    try:
        return os.getpgid(q.pid)
    except OSError:
        return None


@pytest.mark.timeout(180)
def test_ctrl_c_during_stress(tmp_path):
    assert_quiet_and_clean(*interrupt_after(
        ["stress", "-n", "4", "--duration", "60", "--trace", str(tmp_path / "t")],
        2, until="run:"))


@pytest.mark.timeout(180)
def test_ctrl_c_with_json_to_stdout_still_writes_one_object(tmp_path):
    with open(tmp_path / "out.json", "w") as out:
        assert_quiet_and_clean(*interrupt_after(
            ["stress", "-n", "2", "--duration", "60", "--no-trace", "--json", "-"], 1, until="run:", out=out))
    assert json.loads((tmp_path / "out.json").read_text()) == {
        "ok": False, "command": "stress", "error": "interrupted", "exit": 130}


@pytest.mark.timeout(180)
def test_ctrl_c_during_demo(tmp_path):
    assert_quiet_and_clean(*interrupt_after(
        ["demo", "-n", "4", "--duration", "60", "--out", str(tmp_path / "d")], 2, until="run:"))


@pytest.fixture(scope="module")
def linking_trace(tmp_path_factory):
    """A correct trace whose linking by message lasts seconds, so an interrupt a moment
    after that phase starts meets it running on any machine (a small one's check is done
    within a second of its start)."""
    path = str(tmp_path_factory.mktemp("trace") / "t")
    gen = os.path.join(os.path.dirname(RUN), "..", "..", "tools", "gen_trace.py")
    cp = subprocess.run([sys.executable, gen, path, "--events", "3000000", "--procs", "16",
                         "--no-stamps"], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    return path


@pytest.mark.timeout(240)
def test_ctrl_c_during_a_spark_check(linking_trace):
    assert_quiet_and_clean(*interrupt_after(["check", "--spark", linking_trace], 0.2,
                                            until="by message: linking"))
