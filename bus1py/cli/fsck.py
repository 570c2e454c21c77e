"""`bus1py fsck NAME...`: check a bus's segment against every invariant of its layout.

Runs `Bus.check()` (csrc/bus/fsck.c) on each named bus and prints what is wrong in words.
Exit status (outcome.EXIT_CODES): 0 when every bus is clean, 1 when a problem was found, 2
when a bus does not exist or cannot be opened.  With --gc, dead processes' work is reaped first (as `bus1py gc` does), so what is
left is damage gc cannot repair; with --repair, for a bus no other process uses, the free
lists and counters are also rebuilt (`Bus.gc(sole=True)`), giving back what processes
killed between two stores leaked.
"""
from __future__ import annotations

import sys

from ..bus import Bus
from .outcome import BAD_INPUT, OK, PROBLEM


def fsck(name: str, gc: bool = False, repair: bool = False) -> list:
    """The problems found on bus `name` (after a gc, or a repair, when asked)."""
    # this user's buses whatever their mode, as ls and gc: the owner check alone applies
    bus = Bus.open(name, mode=0o777, watch=False)  # what is found is what a kill left
    try:
        if gc or repair:
            bus.gc(sole=repair)
        return bus.check()
    finally:
        bus.close()


def cmd_fsck(args) -> int:
    status = OK
    for name in args.names:
        try:
            problems = fsck(name, gc=args.gc, repair=args.repair)
        except (OSError, ValueError) as e:
            print(f"bus1py fsck: {name}: {e}", file=sys.stderr)
            status = max(status, BAD_INPUT)
            continue
        if problems:
            print(f"{name}: {len(problems)} problem{'s' if len(problems) > 1 else ''}")
            for line in problems:
                print(f"  {line}")
            status = max(status, PROBLEM)
        else:
            print(f"{name}: clean")
    return status


def register(sub):
    p = sub.add_parser("fsck", help="check a bus's segment against every invariant; exit 1 if damaged")
    p.add_argument("names", nargs="+", help="buses to check")
    p.add_argument("--gc", action="store_true", help="reap dead processes' work first")
    p.add_argument("--repair", action="store_true",
                   help="for a bus no other process uses: also rebuild its free lists and counters")
    p.set_defaults(func=cmd_fsck)
