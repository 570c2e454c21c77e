"""Crash exploration: a workload SIGKILLed at every basic block of the C helper it runs.

Run under the instrumented build bus1py._b1x (bus1py/_build_explore.py), which counts the
basic blocks the bus core enters once armed.  For one workload (tests/explore_workloads.py):

  1. a counting trial runs it unarmed to the end: N blocks, and its checks must pass;
  2. for each chosen k in 1..N a trial kills the victim at the k-th block.

A trial, in a process of its own (so a hang or a crash of the checks is a finding, not the
end of the run): a fresh bus; the workload's setup (survivor peers held by the trial, the
victim's peers let go); a forked victim, armed, running the workload and logging each
operation before and after it to a pipe; then, once it is dead, in the trial:
  - `bus.gc()`, and the segment's invariants (Bus.check() where it exists, else every
    queue's b1_queue_check); what only the gc of a bus held alone repairs (the trial is the
    bus's only user by then: `Bus.gc(sole=True)`) is counted, and the invariants must
    hold after it;
  - every survivor drains its queue: each payload byte-identical to what was sent, a
    message whose send returned received exactly once by each destination, one in flight
    at the kill by all of them or by none, one whose send failed or was aborted by none,
    and the workload's own rules (notices owed exactly once, receives not duplicated);
  - no queue is stuck: a probe sent to each survivor is received;
  - every peer leaves, and after a gc the bus holds zero peers, nodes, handles, entries,
    pool bytes -- or gets what is left back from a gc of the bus held alone (the trial is
    its only user by then; such a trial is counted as leaking, not failed) -- and
    its invariants hold.
Each finding is a line of words; a trial's findings go back to the explorer with the
address of the killing block, resolved to function and line by addr2line.

`python tests/explore.py [--all | --points N] [WORKLOAD ...]` (with BUS1PY_LIB set to the
instrumented module; tests/test_explore.py does both) prints one JSON line per workload.
"""
from __future__ import annotations

import ast
import inspect
import json
import mmap
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback

# the instrumented build counts the basic blocks of every thread of the process: a death
# watcher's thread (bus1py/watch.py) would move the k-th one; the trials collect themselves
os.environ["BUS1PY_WATCH"] = "0"

import bus1py  # noqa: E402
from bus1py._lib import ffi, lib  # noqa: E402

import explore_rules as rules  # noqa: E402
from explore_workloads import WORKLOADS  # noqa: E402

TRIAL_SECONDS = 20
USAGE = ("peers", "nodes", "handles", "entries_in_use", "pool_used")
SOLE_GC = "sole" in inspect.signature(bus1py.Bus.gc).parameters  # Bus.gc(sole=True): a repairing gc
assert hasattr(lib, "b1x_arm"), "tests/explore.py runs under BUS1PY_LIB=<bus1py._b1x> (test_explore.py)"


def structure(bus) -> list:
    """The segment's invariants: Bus.check()'s problems, or each queue's own check."""
    if hasattr(bus, "check"):
        return [f"check: {p}" for p in bus.check()]
    out, info = [], ffi.new("struct b1_peer_info *")
    slot = 1
    while lib.b1_peer_at(bus.base(), slot, info) != -2:  # -ENOENT: past the last slot
        r = lib.b1_queue_check(bus.base(), slot)
        if r < 0:
            out.append(f"queue of slot {slot}: b1_queue_check -> {os.strerror(-r)}")
        slot += 1
    return out


def usage(bus) -> dict:
    info = bus.info()
    return {k: info[k] for k in USAGE}


def _victim(work, w, k, report, log_fd):
    log = rules.Log(log_fd)
    try:
        work.prepare(w)
        lib.b1x_arm(k, report)
        work.run(w, log)
        log(count=lib.b1x_disarm())
    except BaseException as e:  # an error of the workload itself: a finding
        lib.b1x_disarm()
        log(error=f"{type(e).__name__}: {e}")
    os._exit(0)


def trial(work, k, name) -> dict:
    """One trial (module docstring); returns what the explorer records of it."""
    found, result = [], {"k": k}

    def step(what, fn, *a):
        try:
            return fn(*a)
        except Exception as e:
            found.append(f"{what} raised {type(e).__name__}: {e}")
            return None

    page = mmap.mmap(-1, 8 * lib.B1X_REPORT_WORDS)
    report = ffi.from_buffer("uint64_t[]", page)
    with bus1py.Bus.create(name, **rules.LIMITS) as bus:
        w = work.setup(bus)
        r_fd, w_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r_fd)
            _victim(work, w, k, report, w_fd)
        os.close(w_fd)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(r_fd) as f:
            events = [json.loads(line) for line in f]
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if not killed and status != 0:
            found.append(f"victim ended with status {status:#x}")
        if killed and report[0] == k:
            stack = [lib.b1x_offset(report[2 + i]) for i in range(min(report[1], lib.B1X_FRAMES))]
            result["stack"] = stack[:stack.index(0)] if 0 in stack else stack
        result["count"] = next((e["count"] for e in events if "count" in e), None)
        found += [f"victim: {e['error']}" for e in events if "error" in e]
        op = rules.in_flight(events)
        result["op"] = op and op.get("op")
        step("gc after the kill", bus.gc)
        plain = step("check after the kill", structure, bus) or []
        if plain and SOLE_GC:
            # the trial is the bus's only user now: what the kill left between two stores
            # (a slot popped, a reference exchanged) is given back by the gc such a user
            # runs; counted, and only what that does not repair is a finding
            result["repaired_alone"] = len(plain)
            step("gc of the bus held alone after the kill", lambda: bus.gc(sole=True))
            plain = step("check after the kill", structure, bus) or []
        found += plain
        found += step("the workload's checks", work.check, bus, w, events) or []
        found += step("leaving", rules.leave, bus, w) or []
        step("gc after leaving", bus.gc)
        use = step("usage", usage, bus)
        if use and any(use.values()) and SOLE_GC:
            # what a kill between two stores leaked (at most one object each) comes back
            # from a gc of the bus held alone; only what does not is a finding
            result["leaked"] = {k: v for k, v in use.items() if v}
            step("gc of the bus held alone", lambda: bus.gc(sole=True))
            use = step("usage", usage, bus)
        found += step("check after leaving", structure, bus) or []
        if use and any(use.values()):
            found.append(f"usage after every peer left and gc: {use}")
    result["found"] = found
    return result


def run_trial(work, k) -> dict:
    """`trial` in a forked process, killed (with its victim) when it hangs."""
    name = f"bus1py-{os.getpid()}-x{k}"
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.close(r_fd)
        try:
            out = trial(work, k, name)
        except BaseException as e:
            out = {"k": k, "found": [f"trial failed: {type(e).__name__}: {e}",
                                     traceback.format_exc(limit=-3)]}
        os.write(w_fd, json.dumps(out).encode())
        os._exit(0)
    os.close(w_fd)
    chunks, deadline = [], time.monotonic() + TRIAL_SECONDS
    while True:
        ready, _, _ = select.select([r_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        data = os.read(r_fd, 1 << 16)
        if not data:
            break
        chunks.append(data)
    os.close(r_fd)
    hung = time.monotonic() >= deadline
    if hung:
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    try:
        os.unlink(f"/dev/shm/{name}")  # a trial that died in the middle leaves its bus
    except FileNotFoundError:
        pass
    if chunks:
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            pass
    what = f"trial hung for {TRIAL_SECONDS} s (killed)" if hung else f"trial died with status {status:#x}"
    return {"k": k, "found": [what]}


def choose(n, points) -> list:
    """k in 1..n: all of them, or at least `points` of them at a fixed stride, the last
    included."""
    if points is None or points >= n:
        return list(range(1, n + 1))
    stride = max(1, n // points)
    return sorted(set(range(1, n + 1, stride)) | {n})


def locate(path, offsets) -> dict:
    """offset in the module -> 'function file:line' (inlined frames: the innermost first)."""
    offsets = sorted({o for o in offsets if o})
    if not offsets:
        return {}
    out = subprocess.run(["addr2line", "-f", "-i", "-s", "-a", "-e", path, *(hex(o - 1) for o in offsets)],
                         capture_output=True, text=True).stdout.splitlines()
    where, cur = {}, None
    it = iter(out)
    for line in it:
        if line.startswith("0x"):
            cur = int(line, 16) + 1
            where[cur] = []
        else:
            where[cur].append(f"{line} {next(it, '?').split(' (')[0]}")
    return {o: " < ".join(frames) for o, frames in where.items()}


def backtrace(stack, where) -> str:
    """The kill's C stack in words, from the killing block out to the cffi entry point."""
    frames = []
    for o in stack:
        w = where.get(o, "?")
        if w.startswith(("_cffi_f_", "_cffi_d_")):
            frames.append("(" + w.split()[0][len("_cffi_f_"):] + ")")  # the entry point
            break
        frames.append(w)
    return " < ".join(frames) or "?"


def explore(name, points=None, emit=print) -> dict:
    """Every chosen crash point of one workload; returns (and emits) its summary."""
    work = WORKLOADS[name]
    t0 = time.monotonic()
    # k = 0: counts only, never kills.  Twice: a count may differ by a few blocks between
    # trials (gc parses /proc/PID/stat, whose numbers differ in length), so k names the
    # same step only up to that; every k up to the larger count is explored.
    base = [run_trial(work, 0) for _ in range(2)]
    counts = [b.get("count") or 0 for b in base]
    n = max(counts)
    failures = [{"k": 0, "found": b["found"]} for b in base[:1] if b["found"]]
    ks, leaked = choose(n, points), 0
    for k in ks:
        r = run_trial(work, k)
        leaked += bool(r.get("leaked"))
        if r["found"]:
            failures.append(r)
    where = locate(os.environ["BUS1PY_LIB"], [o for f in failures for o in f.get("stack", ())])
    for f in failures:
        f["where"] = backtrace(f.get("stack", ()), where)
    out = {"workload": name, "blocks": n, "counts": counts, "explored": len(ks), "failures": failures, "leaked": leaked,
           "seconds": round(time.monotonic() - t0, 1)}
    emit(json.dumps(out), flush=True)
    return out


def describe(summary) -> str:
    """A summary in words: one line per failing trial."""
    lines = [f"{summary['workload']}: {summary['explored']} of {summary['blocks']} crash points, "
             f"{len(summary['failures'])} failing, {summary.get('leaked', 0)} leaking until a gc "
             f"of the bus held alone, {summary['seconds']} s"]
    for f in summary["failures"]:
        lines.append(f"  k={f['k']} in {f.get('op') or '-'} at {f.get('where', '?')}:")
        lines += [f"      {p}" for p in f["found"]]
    return "\n".join(lines)


def cause(finding) -> str:
    """A finding with its numbers taken out, so that findings of one cause group together;
    usage names the counters left over (a counter below zero: something freed twice)."""
    if finding.startswith("usage after"):
        use = ast.literal_eval(finding.split(": ", 1)[1])
        return "left over: " + ", ".join(k + (" (below zero)" if v >= 1 << 31 else "")
                                          for k, v in use.items() if v)
    return re.sub(r"\b\d+\b", "N", re.sub(r"\{.*\}|\[.*\]", "...", finding))


def group(summaries) -> str:
    """The failures of every workload, grouped by cause: per cause, the workloads and k
    where it was seen, and the outermost C functions the kills were in."""
    by = {}
    for s in summaries:
        for f in s["failures"]:
            for c in sorted({cause(x) for x in f["found"]}):
                by.setdefault(c, []).append((s["workload"], f["k"], f.get("where", "?")))
    lines = []
    for c, seen in sorted(by.items(), key=lambda kv: -len(kv[1])):
        per = {}
        for w, k, where in seen:
            per.setdefault(w, []).append(k)
        funcs = {}
        for _, _, where in seen:
            fn = " < ".join(where.split(" < ")[:2])
            funcs[fn] = funcs.get(fn, 0) + 1
        lines.append(f"{len(seen):5d}  {c}")
        lines.append("       in: " + "; ".join(f"{w} k={','.join(map(str, ks[:6]))}{'...' if len(ks) > 6 else ''} ({len(ks)})"
                                              for w, ks in per.items()))
        lines.append("       at: " + "; ".join(f"{fn} ({n})" for fn, n in sorted(funcs.items(), key=lambda x: -x[1])[:6]))
    return "\n".join(lines)


def main(argv) -> int:
    if argv and argv[0] == "--group":  # the summaries a run printed (its stdout), grouped
        with open(argv[1]) as f:
            print(group([json.loads(line) for line in f if line.startswith("{")]))
        return 0
    points = None
    if argv and argv[0] == "--points":
        points, argv = int(argv[1]), argv[2:]
    elif argv and argv[0] == "--all":
        argv = argv[1:]
    bad = 0
    for name in argv or list(WORKLOADS):
        s = explore(name, points, emit=lambda *_a, **_k: None)
        print(json.dumps(s), flush=True)
        print(describe(s), file=sys.stderr, flush=True)
        bad += len(s["failures"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
