"""The `bus1py` command: one entry point, one subcommand per capability.

Each subcommand lives beside the code it drives and registers itself here through a
`register(subparsers)` function, so this module only lists them.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# module that provides register(subparsers) -> one or more subcommands
SUBCOMMAND_MODULES = (
    "bus1py.stress.demo",
    "bus1py.stress.cli",
    "bus1py.admin",
    "bus1py.fsck",
    "bus1py.check.cli",
    "bus1py.sim.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bus1py",
        description="bus1 IPC semantics between real processes: run, stress and check it.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue  # a capability not built yet
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
