"""The Python blocks of README.md and docs/*.md, read and run as a reader would run them.

Invariants:
  - Every ```python block is one of: a program (the default: written to a file and run by
    its own interpreter, under the forkserver start method, so that an example without an
    `if __name__ == "__main__":` guard fails here as it fails for a user of Python 3.14); a
    service (`<!-- service: NAME -->` on the line before it: a program that serves until
    stopped, started before the programs that name it and stopped after them); a program
    run while a service runs (`<!-- program: NAME, with SERVICE -->`); or a listing of
    names and signatures (`<!-- listing -->`), which is compiled but not run.
  - A bus named in a document (`Bus.create("x"...)`, `Bus.open("x"...)`) gets a name of
    this run's own in every block of that document, so that runs on one machine never meet;
    whoever runs the blocks removes those buses after them (a killed service leaves its
    bus, as it would for a user).
  - Nothing here imports bus1py: the programs do, in their own processes.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(listing|program|service)(?::\s*([\w.-]+))?(?:,\s*with\s+([\w.-]+))?\s*-->\s*$")
BUS_NAME = re.compile(r"""Bus\.(?:create|open)\(\s*(?:name\s*=\s*)?["']([^"']+)["']""")

# Runs a block's file as `python FILE` would, but under the forkserver start method.
LAUNCH = ("import multiprocessing as mp, runpy, sys; mp.set_start_method('forkserver'); "
          "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


@dataclass
class Block:
    path: Path
    line: int                 # of the opening fence, 1-based
    code: str
    kind: str                 # "program", "service" or "listing"
    name: str | None = None
    service: str | None = None

    def __str__(self):
        return f"{self.path.relative_to(ROOT)}:{self.line}" + (f" ({self.name})" if self.name else "")


def blocks(path: Path) -> list[Block]:
    """The ```python blocks of one document, with what the line before each says of it."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        kind, name, service = mark.groups() if mark else ("program", None, None)
        out.append(Block(path, line, m.group(2), kind, name, service))
    return out


def private_names(doc_blocks: list[Block]) -> dict[str, str]:
    """{bus name a document uses: a name of this run's own}, in the form the test session's
    leak check covers (bus1py-<pid>-..., tests/conftest.py)."""
    tag = uuid.uuid4().hex[:8]
    names = {n for b in doc_blocks for n in BUS_NAME.findall(b.code)}
    return {n: f"bus1py-{os.getpid()}-{n}-{tag}" for n in sorted(names)}


def source(block: Block, names: dict[str, str]) -> str:
    code = block.code
    for old, new in names.items():
        code = code.replace(f'"{old}"', f'"{new}"').replace(f"'{old}'", f"'{new}'")
    return code


def start(block: Block, names: dict[str, str], workdir: Path, **kw) -> subprocess.Popen:
    """Write the block to a file of `workdir` and start it as a program."""
    file = workdir / (block.name or f"block_{block.line}.py")
    file.write_text(source(block, names))
    return subprocess.Popen([sys.executable, "-c", LAUNCH, str(file)], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run(block: Block, names: dict[str, str], workdir: Path, timeout: float = 60,
        until: float | None = None) -> subprocess.CompletedProcess:
    """Run a program to its end; with `until` (a deadline), again while it fails and the
    deadline has not passed (a service it talks to may still be starting)."""
    while True:
        p = start(block, names, workdir)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"{block}: still running after {timeout} s\n{err[-2000:]}")
        if p.returncode == 0 or until is None or time.monotonic() > until:
            return subprocess.CompletedProcess(p.args, p.returncode, out, err)
        time.sleep(0.1)
