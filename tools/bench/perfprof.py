"""`perf` profiles of bus1py (section 5b) and its futex syscalls (5c).  Each profile runs a
child `python tools/bench --profile-*` under `perf record`; both return None when perf is
missing or not permitted, and the report leaves the section out."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

from .common import PKG
from .inproc import _oneway_n

# the child command that perf records, as the report shows it
PROFILE_FLAGS = {"loop": "--profile-loop", "raw": "--profile-raw", "oneway": "--profile-oneway"}


def profile_cmd(flag, seconds):
    return [sys.executable, str(PKG), flag, str(seconds)]


def bench_futex(seconds=1.0):
    """Section 5c: every futex syscall of the two-process bus1py one-way run (perf's
    syscalls:sys_enter_futex tracepoint), per process and kind, per message.

    Kinds: a robust mutex's FUTEX_WAIT carries the owner's tid with FUTEX_WAITERS (bit 31)
    set and its unlock wakes 1; the queue's reader wake-up (b1_wake) wakes INT_MAX and
    its sleeper waits on a small sequence number.  Returns {comm: {kind: per message}} or
    None when perf or the tracepoint is unavailable."""
    perf = shutil.which("perf")
    if not perf:
        return None
    n, warm = _oneway_n(seconds)
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "futex.data")
        try:
            subprocess.run([perf, "record", "-q", "-e", "syscalls:sys_enter_futex", "-o", data, "--",
                            *profile_cmd("--profile-oneway", seconds)],
                           check=True, capture_output=True, timeout=seconds * 30 + 120)
            out = subprocess.run([perf, "script", "-i", data, "-F", "comm,trace"], check=True,
                                 capture_output=True, text=True, timeout=300).stdout
        except (subprocess.SubprocessError, OSError):
            return None
    counts = {}
    for line in out.splitlines():
        mt = re.search(r"(b1b-\w+)\s+uaddr: 0x[0-9a-f]+, op: (0x[0-9a-f]+), val: (0x[0-9a-f]+)", line)
        if not mt:
            continue
        comm, op, val = mt.group(1), int(mt.group(2), 16) & 0x7F, int(mt.group(3), 16)
        if op in (0, 9):  # FUTEX_WAIT, FUTEX_WAIT_BITSET
            kind = "mutex wait (lock contended)" if val & 0x80000000 else "reader sleep (queue empty)"
        elif op in (1, 10):  # FUTEX_WAKE, FUTEX_WAKE_BITSET
            kind = "mutex unlock wake" if val == 1 else "reader wake-up (b1_wake)" if val >= 0x7FFFFFFF else "other wake"
        else:
            kind = f"other (op {op})"
        counts.setdefault(comm, {}).setdefault(kind, 0)
        counts[comm][kind] += 1
    if not counts:
        return None
    total = n + warm
    return {c: {k: v / total for k, v in sorted(ks.items())} for c, ks in sorted(counts.items(), reverse=True)}


def _perf_parse(text):
    out = []
    for line in text.splitlines():
        mt = re.match(r"\s*([\d.]+)%\s+(.*?)\s+\[[.kHgu]\]\s+(.*)$", line)
        if mt:
            sym = re.sub(r"(\s+-)+\s*$", "", mt.group(3)).strip()
            out.append((float(mt.group(1)), tuple(mt.group(2).split()), sym))
            continue
        mt = re.match(r"\s*([\d.]+)%\s+(\S.*?)\s*$", line)
        if mt and not line.lstrip().startswith("#"):
            out.append((float(mt.group(1)), tuple(mt.group(2).split()), None))
    return out


def bench_perf(kind="loop", seconds=4.0):
    """Section 5b: `perf record -e cpu-clock` (the VM has no cycle counter) of
      kind="loop":   the in-process Peer.send + Peer.recv loop, sorted by dso, symbol;
      kind="oneway": the two-process bus1py one-way run, sorted by process, dso, symbol.
    Returns {"symbols": [(pct, keys, symbol)], "groups": [(pct, keys, None)]}, or None when
    perf is missing or not permitted.  Interpreter start-up is skipped (-D)."""
    perf = shutil.which("perf")
    if not perf:
        return None
    keys = "comm,dso" if kind == "oneway" else "dso"
    flag = PROFILE_FLAGS[kind]
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        cmd = [perf, "record", "-q", "-e", "cpu-clock", "-F", "2999", "-D", "1200", "-o", data, "--",
               *profile_cmd(flag, seconds)]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=seconds * 20 + 120)
            rep = [subprocess.run([perf, "report", "-i", data, "--stdio", "--no-children",
                                   "--sort", sort, "--percent-limit", lim],
                                  check=True, capture_output=True, text=True, timeout=120).stdout
                   for sort, lim in ((keys + ",symbol", "0.7"), (keys, "0.5"))]
        except (subprocess.SubprocessError, OSError):
            return None
    syms = [r for r in _perf_parse(rep[0]) if r[2] is not None]
    groups = [r for r in _perf_parse(rep[1]) if r[2] is None]
    return {"symbols": syms, "groups": groups, "kind": kind} if syms else None



PERF_TITLES = {"loop": "in-process `Peer.send` + `Peer.recv` loop",
               "raw": "in-process raw C `b1_send` + `b1_recv_wait` loop (no Python layer)",
               "oneway": "two-process bus1py one-way run (64 B)"}
_WHAT = {"libpython": "the Python interpreter (bytecode, objects, argument parsing)",
         "_cffi_backend": "cffi: converting arguments and results, making the call",
         "_b1": "bus1py's C helper (queue operations)", "libc": "libc (pthread mutexes, memcpy)",
         "kernel": "the kernel (futex, scheduling, interrupts)", "ld-linux": "dynamic linker"}


def what(dso):
    return next((v for k, v in _WHAT.items() if k in dso), "")


def short(dso):
    return re.sub(r"\.cpython-\d+-[^.]+\.so$", ".so", dso)

