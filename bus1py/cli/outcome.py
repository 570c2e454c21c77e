"""How every `bus1py` command ends: one exit-code table, one meaning of `--json FILE|-`.

Invariants:
  - The exit code means the same in every command (EXIT_CODES, the README's table): a bus
    or trace that does not exist or cannot be opened is bad input (2) everywhere.
  - A command that cannot do its work raises CommandError; main() alone turns it into one
    line on stderr and, when the command was asked for `--json -`, one JSON object on
    stdout ({"ok": false, "command", "error", "exit"}), so a program reading stdout always
    gets an object, the error included.
  - `--json FILE|-` writes the command's result as one JSON object: to FILE, or with `-` to
    stdout, and then stdout carries that object alone (human output goes to stderr).  A
    command stopped by Ctrl-C before it wrote its object to stdout writes the error object
    ({"error": "interrupted", "exit": 130}) there instead.
"""
from __future__ import annotations

import json
import sys

OK, PROBLEM, BAD_INPUT, INTERRUPTED, BROKEN_PIPE = 0, 1, 2, 130, 141

EXIT_CODES = {
    OK: "ok",
    PROBLEM: "the command found a problem: a property violated (check), a damaged segment "
             "(fsck), a failed run (stress, demo, simulate), a bus in use left in place (rm)",
    BAD_INPUT: "bad input: an option, a bus or trace that does not exist or cannot be "
               "opened, or a missing extra",
    INTERRUPTED: "interrupted (Ctrl-C)",
    BROKEN_PIPE: "stdout closed by its reader (`| head`)",
}


class CommandError(Exception):
    """A command cannot do its work: `message` (one line, without the command's name) and
    the exit code. `where` names the speaker when it is not the command (argparse's prog)."""

    def __init__(self, message: str, code: int = BAD_INPUT, where: str | None = None):
        super().__init__(message)
        self.message, self.code, self.where = str(message), code, where


def add_json_option(parser, what: str) -> None:
    """The one `--json FILE|-` option of every command that has it."""
    parser.add_argument("--json", metavar="FILE|-", default=None,
                        help=f"write {what} as one JSON object to FILE ('-': to stdout, "
                             f"and the rest to stderr)")


_wrote_stdout = False  # has this process written its one JSON object to stdout?


def write_json(path: str, obj) -> None:
    """`--json FILE|-`: `obj` as one JSON document, to FILE or (`-`) stdout."""
    global _wrote_stdout
    text = json.dumps(obj, indent=1, default=str)
    if path == "-":
        _wrote_stdout = True
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        with open(path, "w") as f:
            f.write(text + "\n")


def json_to_stdout(argv) -> bool:
    """Did the command line ask for `--json -`? (Read from the words themselves, so that it
    is known even when the arguments are refused.)"""
    argv = list(argv)
    return "--json=-" in argv or any(a == "--json" and b == "-" for a, b in zip(argv, argv[1:]))


def report_interrupt(command: str, json_stdout: bool) -> int:
    """Ctrl-C ended the command (its one line is on stderr already): with `--json -`, the
    JSON object on stdout unless the command wrote its own before; the code."""
    if json_stdout and not _wrote_stdout:
        try:
            write_json("-", {"ok": False, "command": command, "error": "interrupted",
                             "exit": INTERRUPTED})
        except OSError:
            pass
    return INTERRUPTED


def report_error(command: str | None, e: CommandError, json_stdout: bool) -> int:
    """The one line on stderr and, with `--json -`, the JSON object on stdout; the code."""
    where = e.where or ("bus1py " + command if command else "bus1py")
    print(f"{where}: {e.message}", file=sys.stderr)
    if json_stdout:
        write_json("-", {"ok": False, "command": command, "error": e.message, "exit": e.code})
    return e.code
