"""The shared array between the stress parent and its processes: each process's counter
slots, its state, and the parent's control slots.

Invariants: process i (or churn slot i: a churned slot's processes share it) owns the
STRIDE slots from i * STRIDE; only it writes them (no locks: one writer per slot), and
the parent only reads them. The control slots are the parent's alone to write.
"""
from __future__ import annotations

# Shared counter slots per process (parent reads, child writes).
# WIRES_OUT/WIRES_IN: transport-level wires handed out / received (a transport run's
# quiescence test: the parent ends it once every process is SENT and they are equal).
SENT, DELIVERED, SIG_SENT, SIG_RECV, ERRORS, MAX_DEPTH, ACTIONS, STATE, PID, WIRES_OUT, WIRES_IN = range(11)
STRIDE = 11
# Process states.
ST_START, ST_RUN, ST_SENT, ST_DONE, ST_FAILED = range(5)
# Control slots (parent writes); CTL_LEAVE: mortal processes leave now (churn.py).
CTL_DRAIN, CTL_ABORT, CTL_LEAVE = range(3)
# Process states.
ST_START, ST_RUN, ST_SENT, ST_DONE, ST_FAILED = range(5)
# Control slots (parent writes); CTL_LEAVE: mortal processes leave now (churn.py).
CTL_DRAIN, CTL_ABORT, CTL_LEAVE = range(3)
