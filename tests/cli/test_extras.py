"""The core install needs only cffi, posix_ipc and psutil; each command needs one extra,
names it in one line when it is missing (exit 2, nothing done), and `--help` marks it."""
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from bus1py.cli.main import COMMAND_EXTRA, EXTRAS, OPTION_EXTRA
from tests.cli.conftest import HEAVY, bus1py, one_line_error
from tests.docs_examples import ROOT as DOCS_ROOT, blocks

ROOT = str(DOCS_ROOT)

HEAVY_LOADED = """
import sys
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY})
print("heavy:", heavy)
"""


@pytest.mark.timeout(60)
def test_bus_works_without_any_extra():
    """The README's peers.py in a core install: it runs, and loads no extra's package."""
    (example,) = [b for b in blocks(DOCS_ROOT / "README.md") if b.name == "peers.py"]
    code = example.code + HEAVY_LOADED.replace("{HEAVY}", repr(set(HEAVY.split(","))))
    cp = bus1py("-c", code, without=HEAVY)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0].startswith("b'hello from a child' True (") and lines[1:] == ["heavy: []"]


# commands with a package their extra installs left out: the one extra named (the --help
# test below holds every command's extra)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, without, extra", [
    (["stress", "--no-trace", "--messages", "1"], "rich", "cli"),
    (["stress", "--messages", "1", "-n", "2", "-q", "--trace", "T"], "pyarrow", "check"),
    (["demo"], "numpy", "check"),
    (["ls"], "rich", "cli"),
    (["check", "T"], HEAVY, "check"),          # a core install: [check], not [cli] first
    (["simulate", "--protocols", "fifo"], "pyspark", "sim"),
    (["simulate", "--protocols", "fifo"], "matplotlib", "sim"),
])
def test_missing_extra_is_one_line(tmp_path, args, without, extra):
    args = [str(tmp_path / "t") if a == "T" else a for a in args]
    if args[0] == "check":
        (tmp_path / "t").mkdir()
        (tmp_path / "t" / "x.parquet").write_bytes(b"PAR1")
    cp = bus1py(*args, without=without)
    one_line_error(cp, 2, f"needs the [{extra}] extra: pip install 'bus1py[{extra}]'")
    assert cp.stdout == ""
    assert not (tmp_path / "t").exists() or args[0] == "check"   # refused before any work


@pytest.mark.timeout(60)
def test_missing_extra_with_json_to_stdout_is_a_json_error():
    cp = bus1py("check", "/nonexistent", "--json", "-", without=HEAVY)
    one_line_error(cp, 2, "[check]")
    assert json.loads(cp.stdout) == {"ok": False, "command": "check", "exit": 2,
                                     "error": cp.stderr.strip().split(": ", 1)[1]}


@pytest.mark.timeout(60)
def test_help_marks_every_command_whose_extra_is_missing():
    """A core install: every command but fsck (the bus alone) is marked with its extra."""
    cp = bus1py("--help", without=HEAVY)
    assert cp.returncode == 0, cp.stderr
    marks = dict(re.findall(r"^    (\w+)\s+\(not installed: pip install 'bus1py\[(\w+)\]'\)",
                            cp.stdout, re.M))
    expect = {c: x for c, x in COMMAND_EXTRA.items() if x}
    assert marks == expect, cp.stdout
    assert re.search(r"^    fsck\s+check a bus", cp.stdout, re.M), cp.stdout
    full = bus1py("--help")          # everything installed: nothing marked
    assert "not installed" not in full.stdout and "simulate" in full.stdout


def _pyproject_extras():
    """{extra: the distributions it installs}, extras included in one another resolved."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["project"]["optional-dependencies"]

    def resolve(extra):
        out = set()
        for req in declared[extra]:
            m = re.match(r"^bus1py\[([\w,]+)\]$", req)
            if m:
                for inner in m.group(1).split(","):
                    out |= resolve(inner)
            else:
                out.add(re.match(r"^[A-Za-z0-9_.-]+", req).group(0).replace("-", "_"))
        return out
    return {x: resolve(x) for x in declared}


def test_each_commands_extra_brings_all_it_needs():
    """The extras the command line probes are pyproject.toml's, and each is whole: [check]
    brings what check needs, [sim] what simulate needs (Spark included)."""
    declared = _pyproject_extras()
    for extra, packages in EXTRAS.items():
        assert set(packages) == declared[extra], extra
    assert set(COMMAND_EXTRA.values()) - {None} <= set(EXTRAS)
    for (_, _), extra in OPTION_EXTRA.items():
        assert extra in EXTRAS


def test_version_and_python_m():
    from bus1py import __version__
    for cp in (bus1py("--version"),
               subprocess.run([sys.executable, "-m", "bus1py", "--version"], capture_output=True,
                              text=True, timeout=60)):
        assert cp.returncode == 0 and cp.stdout.strip() == f"bus1py {__version__}"
