"""Fixtures for the stress-tool tests.

Invariants: every test leaves no child process and no /dev/shm/bus1py-<our pid>-* behind
(the stress runner kills and unlinks on every exit path; these fixtures check it, and clean
up anyway so that one failure does not cascade).  Other engineers' buses (other pids) on
the same machine are never touched.
"""
from __future__ import annotations

import os

import psutil
import pytest


def our_buses():
    prefix = f"bus1py-{os.getpid()}-"
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


@pytest.fixture(autouse=True)
def no_leftovers():
    before = set(our_buses())
    me = psutil.Process()
    # only processes this test started: others (a session's Spark JVM) are not ours to judge
    older = {k.pid for k in me.children(recursive=True)}
    yield
    kids = [k for k in me.children(recursive=True) if k.pid not in older]
    for k in kids:  # only our own descendants, by pid
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(kids, timeout=5)
    leaked = sorted(set(our_buses()) - before)
    for name in leaked:
        os.unlink(os.path.join("/dev/shm", name))
    assert not kids, f"child processes left running: {[k.pid for k in kids]}"
    assert not leaked, f"buses left in /dev/shm: {leaked}"


@pytest.fixture
def trace_dir(tmp_path):
    return str(tmp_path / "trace")

