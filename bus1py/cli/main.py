"""The `bus1py` command: one entry point, one subcommand per capability.

Each subcommand lives beside the code it drives and registers itself here through a
`register(subparsers)` function, so this module only lists them.

Invariants:
  - Every failure ends as one line on stderr and an exit code of outcome.EXIT_CODES, never a
    traceback; with `--json -` also as a JSON object on stdout (outcome.py).
  - One rule for extras: each command needs one extra of pyproject.toml (COMMAND_EXTRA;
    an option may need a larger one, OPTION_EXTRA), and that extra brings everything it
    needs. A command whose extra is not wholly installed is still listed, marked so in
    `--help`, and running it names that one extra, before any work starts.
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
from .outcome import (BAD_INPUT, BROKEN_PIPE, INTERRUPTED, CommandError, json_to_stdout,
                      report_error, report_interrupt)

# module that provides register(subparsers) -> the subcommands it registers
SUBCOMMAND_MODULES = {
    "bus1py.stress.demo": ("demo",),
    "bus1py.stress.cli": ("stress",),
    "bus1py.cli.admin": ("ls", "rm", "gc"),
    "bus1py.cli.fsck": ("fsck",),
    "bus1py.check.cli": ("check",),
    "bus1py.sim.cli": ("simulate",),
}

# each extra of pyproject.toml a command can need -> every top-level package it installs
# (extras it includes too; tests/cli/test_extras.py holds this to pyproject.toml)
EXTRAS = {
    "cli": ("rich", "numpy"),
    "check": ("rich", "numpy", "pyspark", "pyarrow", "pandas"),
    "sim": ("rich", "numpy", "pyspark", "pyarrow", "pandas", "matplotlib"),
}

# the extra each command needs whatever its options (None: the bus alone); the demo runs
# the checker, the simulator is a Spark job
COMMAND_EXTRA = {"demo": "check", "stress": "cli", "ls": "cli", "rm": "cli", "gc": "cli",
                 "fsck": None, "check": "check", "simulate": "sim"}

# (command, option) -> the larger extra the option needs: stress --trace writes Parquet
OPTION_EXTRA = {("stress", "--trace"): "check"}


def _missing(extra: str | None) -> str | None:
    """The first package of `extra` that cannot be imported (found without importing it)."""
    for name in EXTRAS.get(extra, ()) if extra else ():
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def _extra_for(command: str, argv) -> str | None:
    """The one extra that makes `command` with these words work."""
    extra = COMMAND_EXTRA.get(command)
    for (cmd, option), bigger in OPTION_EXTRA.items():
        if cmd == command and any(a == option or a.startswith(option + "=") for a in argv):
            extra = bigger
    return extra


def install_hint(extra: str, missing: str | None = None) -> str:
    return (f"needs the [{extra}] extra: pip install 'bus1py[{extra}]'"
            + (f" (no module {missing!r})" if missing else ""))


def _unavailable(name, extra, sub):
    """A command listed in --help though its extra is missing (main refuses to run it)."""
    sub.add_parser(name, help=f"(not installed: pip install 'bus1py[{extra}]')",
                   add_help=False)


class Parser(argparse.ArgumentParser):
    """argparse whose refusals are CommandErrors: one line, as every other failure
    (argparse itself prints the usage first)."""

    def error(self, message):
        raise CommandError(f"error: {message} (see {self.prog} --help)", BAD_INPUT,
                           where=self.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bus1py",
        description="bus1 IPC semantics between real processes: run, stress and check it.",
        epilog="Exit codes, the same for every command: 0 ok, 1 a problem found, 2 bad "
               "input (a bus or trace that does not exist included) or a missing extra, "
               "130 Ctrl-C, 141 stdout closed.")
    parser.add_argument("--version", action="version", version=f"bus1py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands in SUBCOMMAND_MODULES.items():
        extra = COMMAND_EXTRA[commands[0]]     # the commands of one module share one extra
        if _missing(extra):
            for c in commands:
                _unavailable(c, extra, sub)
        else:
            importlib.import_module(name).register(sub)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    json_stdout = json_to_stdout(argv)
    # the command is the first word that is not an option (the top level takes no values):
    # a missing extra is named before its options are parsed, which it may not know
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMAND_EXTRA:
        extra = _extra_for(command, argv)
        missing = _missing(extra)
        if missing:
            return report_error(command, CommandError(install_hint(extra, missing)),
                                json_stdout)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except CommandError as e:   # argparse's refusal: it names its parser itself
        return report_error(command if command in COMMAND_EXTRA else None, e, json_stdout)
    if not args.command:
        parser.print_help()
        return BAD_INPUT
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
            return report_interrupt(args.command, json_stdout)
        if isinstance(e, BrokenPipeError):   # the reader left (`| head`): stop, quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return BROKEN_PIPE
        if isinstance(e, CommandError):
            return report_error(args.command, e, json_stdout)
        if isinstance(e, ModuleNotFoundError) and e.name:
            # a package the command's extra does not list: the extra of the package's own
            # (the smallest extra that installs it), else a defect, raised as it is
            top = e.name.split(".")[0]
            owner = next((x for x in EXTRAS if top in EXTRAS[x]), None)
            if owner:
                return report_error(args.command, CommandError(install_hint(owner, top)),
                                    json_stdout)
        raise
    finally:
        if main_thread and not interrupt.seen:
            signal.signal(signal.SIGINT, previous)
