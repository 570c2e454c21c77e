"""The checker's layers: the array engine (bus1py/check/arrays/) never imports pyspark.

Invariants checked, statically (ast, nothing executed): no module of the array engine
imports pyspark, at module level or inside a function, nor imports a checker module that
does; and what it imports at module level, followed through bus1py, never imports pyspark
at module level (so importing the engine loads no JVM bridge). Shared modules (load.py,
kinds.py) may import pyspark inside the functions only Spark's plans call.
"""
import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "bus1py" / "check"
ARRAYS = CHECK / "arrays"


def _module_path(name):
    rel = Path(*name.split("."))
    for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if p.exists():
            return p
    return None


def _imports(path, top_only):
    """(absolute module names, names of pyspark imports) imported by the file at `path`;
    top_only: module-level statements only."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if _module_path(sub) else base)
    return out


def _spark(name):
    return name == "pyspark" or name.startswith("pyspark.")


def test_no_array_module_imports_pyspark_or_a_spark_module():
    modules = sorted(ARRAYS.glob("*.py"))
    assert {p.name for p in modules} >= {"events.py", "properties.py", "walk.py", "whole.py"}
    for path in modules:
        for name in _imports(path, top_only=False):
            assert not _spark(name), f"{path.name} imports {name}"
            target = _module_path(name) if name.startswith("bus1py.") else None
            if target is not None and "arrays" not in target.parts:
                # a shared checker module the engine may use: none at module level
                assert not any(_spark(n) for n in _imports(target, top_only=True)), (
                    f"{path.name} imports {name}, which imports pyspark")


def test_module_level_imports_of_the_engine_never_reach_pyspark():
    seen, todo = set(), [f"bus1py.check.arrays.{p.stem}" for p in ARRAYS.glob("*.py")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_path(name)
        if path is None:
            continue
        for dep in _imports(path, top_only=True):
            assert not _spark(dep), f"{name} imports {dep} at module level"
            if dep.startswith("bus1py."):
                todo.append(dep)
    assert "bus1py.check.arrays.walk" in seen and "bus1py.check.load" in seen


def test_pyspark_is_known_to_the_checker_of_this_test():
    # the test above means something only if pyspark is a real module of this venv
    assert importlib.util.find_spec("pyspark") is not None
    assert any(_spark(n) for n in _imports(CHECK / "spark" / "malformed.py", top_only=True))
