"""A stress process's life around its worker: started by fork, it keeps only its own pipe
ends, runs a TransportWorker when the spec names a transport (else a BusWorker), and
leaves its result for the parent.

Invariants: the result file appears atomically (written aside, then renamed) before the
state slot says DONE or FAILED, and the process then exits at once (no atexit handlers, no
flushing of buffers inherited from the parent).
"""
from __future__ import annotations

import json
import os
import traceback

from .bus_worker import BusWorker
from .slots import ST_DONE, ST_FAILED, STATE, STRIDE
from .transport_worker import TransportWorker


def child_main(spec):
    """Entry point of a stress process (started by fork): a TransportWorker when the spec
    names a transport, else a BusWorker."""
    transport = getattr(spec, "transport", None)
    # keep only our pipe ends: our read end, write ends to our signal targets
    keep, fds = {spec.signal_read_fd, *spec.signal_write_fds.values()}, spec.all_pipe_fds
    if transport is not None:
        keep |= set(transport.inherited_fds(spec.index))
        fds = fds + transport.all_fds()
    close_others(keep, fds)
    try:
        result = (BusWorker if transport is None else TransportWorker)(spec).run()
        status = 0
    except BaseException as e:  # report it to the parent, then fail
        result = {"index": spec.index, "pid": os.getpid(), "failed": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
        status = 1
    finish(spec, result, status)


def close_others(keep, fds):
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def finish(spec, result, status):
    """Leave the result for the parent (atomically), mark the state, exit at once."""
    tmp = os.path.join(spec.result_dir, f".{spec.index}.json")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(spec.result_dir, f"{spec.index}.json"))
    spec.counters[getattr(spec, "slot", spec.index) * STRIDE + STATE] = ST_DONE if status == 0 else ST_FAILED
    os._exit(status)  # no atexit handlers, no flushing of inherited parent buffers
