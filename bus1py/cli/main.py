"""The `bus1py` command: one entry point, one subcommand per capability.

Each subcommand lives beside the code it drives and registers itself here through a
`register(subparsers)` function, so this module only lists them.

Invariants:
  - Every failure ends as one line on stderr and an exit code, never a traceback:
    0 ok, 1 the command found a problem, 2 bad input or a missing extra, 130 Ctrl-C,
    141 stdout closed by its reader.
  - A subcommand whose module cannot be imported for want of an optional package is
    still listed; running it names the `pip install 'bus1py[EXTRA]'` that provides it.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading

from .. import __version__

# module that provides register(subparsers) -> the subcommands it registers
SUBCOMMAND_MODULES = {
    "bus1py.stress.demo": ("demo",),
    "bus1py.stress.cli": ("stress",),
    "bus1py.cli.admin": ("ls", "rm", "gc"),
    "bus1py.cli.fsck": ("fsck",),
    "bus1py.check.cli": ("check",),
    "bus1py.sim.cli": ("simulate",),
}

# what each command imports whatever its options: probed before it runs, so that a missing
# extra is named before any work starts (an option's own needs, such as stress --trace's
# pyarrow, are checked by the command)
NEEDS = {
    "demo": ("rich", "numpy", "pyarrow", "pandas"), "stress": ("rich", "numpy"),
    "ls": ("rich",), "rm": ("rich",), "gc": ("rich",),
    "check": ("numpy", "pyarrow", "pandas"), "simulate": ("rich", "numpy"),
}

# top-level package -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    "rich": "cli", "numpy": "cli",
    "pyspark": "check", "pyarrow": "check", "pandas": "check", "py4j": "check",
    "matplotlib": "sim",
    "faster_fifo": "bench",
}


def missing_extra(e: ModuleNotFoundError) -> str | None:
    """The extra that installs the module `e` names, or None if it is not an optional one."""
    return EXTRA_OF.get((e.name or "").split(".")[0])


def _missing_need(command) -> str | None:
    """The first package `command` needs that cannot be imported."""
    for name in NEEDS.get(command, ()):
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def install_hint(extra: str) -> str:
    return f"needs the [{extra}] extra: pip install 'bus1py[{extra}]'"


def _unavailable(commands, extra, sub):
    for name in commands:
        p = sub.add_parser(name, help=f"(not installed: pip install 'bus1py[{extra}]')",
                           add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=lambda a, name=name: _refuse(name, extra))


def _refuse(command, extra) -> int:
    print(f"bus1py {command}: {install_hint(extra)}", file=sys.stderr)
    return 2


class Parser(argparse.ArgumentParser):
    """argparse with its refusals on one line (argparse prints the usage first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bus1py",
        description="bus1 IPC semantics between real processes: run, stress and check it.")
    parser.add_argument("--version", action="version", version=f"bus1py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands in SUBCOMMAND_MODULES.items():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            extra = missing_extra(e)
            if extra is None:
                raise
            _unavailable(commands, extra, sub)
            continue
        module.register(sub)
    return parser


class _Interrupt:
    """SIGINT during a command: one line, then silence on stderr (worker threads, py4j and
    the interpreter's shutdown may still write there), and later SIGINTs are ignored so the
    cleanup the KeyboardInterrupt unwinds through can finish."""

    def __init__(self, command):
        self.command = command
        self.seen = False

    def __call__(self, signum, frame):
        if self.seen:
            return
        self.seen = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            sys.stderr.write(f"bus1py {self.command}: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        raise KeyboardInterrupt


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    missing = _missing_need(args.command)
    if missing:
        print(f"bus1py {args.command}: {install_hint(EXTRA_OF[missing])} "
              f"(no module {missing!r})", file=sys.stderr)
        return 2
    interrupt = _Interrupt(args.command)
    # only the main thread may set handlers (main() called from another thread keeps its own)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, interrupt) if main_thread else None
    try:
        return int(args.func(args) or 0)
    except BaseException as e:
        # after a Ctrl-C, whatever surfaces (KeyboardInterrupt, or the error of a call
        # the interrupt cut short, such as py4j's) ends the command the same way
        if interrupt.seen:
            return 130
        if isinstance(e, BrokenPipeError):   # the reader left (`| head`): stop, quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
        if isinstance(e, ModuleNotFoundError) and missing_extra(e):
            print(f"bus1py {args.command}: {install_hint(missing_extra(e))} "
                  f"(no module {e.name!r})", file=sys.stderr)
            return 2
        raise
    finally:
        if main_thread and not interrupt.seen:
            signal.signal(signal.SIGINT, previous)

