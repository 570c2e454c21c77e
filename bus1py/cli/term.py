"""Where the commands' human output goes, and how wide it may be.

Invariant: a table is never cut or wrapped to fit a width that does not exist: on a
terminal it fits the terminal, elsewhere (a pipe, a file) it takes the width it needs.
"""
from __future__ import annotations

import sys
import time

from rich.console import Console

# wider than any table the commands print; rich does not pad tables to the width
UNBOUNDED = 10_000


def console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=UNBOUNDED, soft_wrap=True)
    return c


def rule(c: Console, title: str) -> None:
    """A section rule: the terminal's width, or 100 columns in a pipe or a file (a rule
    has no width of its own to take)."""
    if c.width >= UNBOUNDED:
        c = Console(file=c.file, width=100, no_color=c.no_color)
    c.rule(title)


class PhaseLines:
    """Progress for a log rather than a terminal: one plain timestamped line on stderr at
    each new phase, and at least every `every` seconds while a phase lasts."""

    def __init__(self, command: str, every: float = 10.0):
        self.command = command
        self.every = every
        self.phase = None
        self.last = 0.0

    def __call__(self, phase: str, detail: str = "") -> None:
        now = time.monotonic()
        if phase == self.phase and now - self.last < self.every:
            return
        self.phase, self.last = phase, now
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"{stamp}Z {self.command}: {phase}" + (f": {detail}" if detail else ""),
              file=sys.stderr, flush=True)
