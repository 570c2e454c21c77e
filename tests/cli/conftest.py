"""Helpers for the command-line tests: the `bus1py` command run as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

RUN = os.path.join(os.path.dirname(__file__), "run.py")
HEAVY = "rich,numpy,pyspark,pyarrow,pandas,matplotlib,faster_fifo,py4j"


def bus1py(*args, without=None, timeout=120, **kw):
    """`bus1py ARGS` (without the listed packages): CompletedProcess with text output."""
    cmd = [sys.executable, RUN, *(["--without", without] if without else []), "--", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def one_line_error(cp, code=2, *words):
    """The command refused with exit `code` and one stderr line naming `words`."""
    assert cp.returncode == code, (cp.returncode, cp.stdout, cp.stderr)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert "Traceback" not in cp.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    """A small correct trace (a 3-process stress run), written once per test module."""
    path = str(tmp_path_factory.mktemp("trace") / "t")
    cp = bus1py("stress", "-n", "3", "--messages", "200", "--seed", "1", "-q", "--trace", path)
    assert cp.returncode == 0, cp.stderr
    return path
