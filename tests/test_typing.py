"""Types that work for a user: `mypy` passes over the package (its configuration in
pyproject.toml), `mypy --strict` passes over every Python example of the README, and flags
every line of tests/typing/mistakes.py marked as a mistake and no other.

Both runs share one mypy cache under build/ (mypy's cache is keyed by the sources' hashes,
so a stale entry is never used): after the first run each takes a second or two."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISTAKES = os.path.join(ROOT, "tests", "typing", "mistakes.py")
CACHE = os.path.join(ROOT, "build", "mypy-cache")
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<text>.*)$", re.M)


def mypy(*args, cwd=ROOT):
    # the checkout on MYPYPATH: the package is read from its sources (an editable install is
    # an import hook mypy does not follow); --follow-imports=silent checks the user's files
    # alone against the package's types
    env = {**os.environ, "MYPYPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", CACHE, *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=280)


def readme_examples() -> str:
    """The README's Python blocks as one program, read top to bottom as a user reads them."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return "\n".join(re.findall(r"^```python\n(.*?)^```", f.read(), re.M | re.S))


@pytest.mark.timeout(300)
def test_package_passes_mypy():
    cp = mypy()  # pyproject's [tool.mypy]: packages = ["bus1py"]
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-2000:]


@pytest.mark.timeout(300)
def test_strict_passes_readme_and_flags_every_mistake(tmp_path):
    readme = tmp_path / "readme_examples.py"
    readme.write_text(readme_examples())
    cp = mypy("--strict", "--follow-imports=silent", "--no-error-summary", str(readme), MISTAKES, cwd=tmp_path)
    errors = [(m["file"], int(m["line"]), m["text"]) for m in ERROR.finditer(cp.stdout)]
    assert not [e for e in errors if e[0].endswith("readme_examples.py")], cp.stdout
    with open(MISTAKES) as f:
        marked = {i for i, line in enumerate(f, 1) if re.match(r"\s*[^#\s].*# mistake:", line)}
    flagged = {line for path, line, _ in errors if os.path.samefile(path, MISTAKES)}
    assert flagged == marked, (f"marked but not flagged: {sorted(marked - flagged)}; flagged but not "
                               f"marked: {sorted(flagged - marked)}\n{cp.stdout}")
    assert cp.stderr == "", cp.stderr
