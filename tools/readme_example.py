"""Run the README's first self-contained Python program, from wherever bus1py is installed.

What a release checks in each wheel's own environment (pyproject's [tool.cibuildwheel]
test-command) and what tests/test_dist.py runs in a fresh venv without a compiler: the first
program a user copies must work from the wheel alone.  `first_example()` is the block's text.
"""
import os
import re
import subprocess
import sys
import tempfile

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def first_example(path: str = README) -> str:
    """The first ```python block of the README that runs alone: not a service, a program
    run beside one, or a listing (the marks tests/docs_examples.py reads)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
        before = text[:match.start()].rstrip("\n").rpartition("\n")[2]
        if not re.search(r"<!--\s*(listing|service\b|program:[^>]*\bwith\b)", before):
            return match.group(1)
    raise SystemExit(f"{path}: no ```python block that runs alone")


if __name__ == "__main__":
    code = first_example(sys.argv[1] if len(sys.argv) > 1 else README)
    # as its own script, as a user runs it: a child started by spawn or forkserver (3.14's
    # default) imports the functions it runs from that file
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "readme_example.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        sys.exit(subprocess.run([sys.executable, path], cwd=tmp).returncode)
