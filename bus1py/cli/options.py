"""What the command line accepts: bounded numbers, and output paths checked before any work.

Invariants:
  - A check only reads, except trace_dir(), which creates the directory it accepts (and,
    with force, removes an earlier trace's Parquet files from it): so a command that
    passed its checks can write everything it promised.
  - Each refusal is one sentence naming the option and what was wrong with it.
"""
from __future__ import annotations

import argparse
import glob
import os


def _bounded(kind, ok, bound):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {bound}, not {text}")
        return value
    parse.__name__ = kind.__name__   # argparse names the type in its messages
    return parse


def at_least(lo, kind=int):
    """An argparse type: a `kind` number >= lo."""
    return _bounded(kind, lambda v: v >= lo, f">= {lo}")


def above(lo, kind=float):
    """An argparse type: a `kind` number > lo."""
    return _bounded(kind, lambda v: v > lo, f"> {lo}")


def output_file(option: str, path: str | None) -> str | None:
    """Why `path` cannot be written as a new or replaced file, or None if it can ('-' and
    None always can: stdout, or not asked for)."""
    if path is None or path == "-":
        return None
    if os.path.isdir(path):
        return f"{option} {path}: is a directory, give a file name"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{option} {path}: directory {parent} does not exist"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{option} {path}: not writable"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {path}: cannot create files in {parent}"
    return None


def trace_dir(option: str, path: str, force: bool | None = None) -> str | None:
    """Make `path` ready for a new trace: a new or empty directory, or with `force` one
    whose earlier trace (*.parquet) is removed (None: the command has no --force). Returns
    why it cannot be, or None."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{option} {path}: exists and is not a directory"
    if os.path.isdir(path):
        entries = os.listdir(path)
        if entries and not force:
            return (f"{option} {path}: directory is not empty ({len(entries)} entries); "
                    f"give an empty or new one"
                    + (", or --force to write over its trace" if force is False else ""))
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{option} {path}: not writable"
        for f in glob.glob(os.path.join(path, "*.parquet")):
            os.unlink(f)
        return None
    try:
        os.makedirs(path)
    except OSError as e:
        return f"{option} {path}: cannot create it: {e.strerror}"
    return None
