"""bus1py's modules import one another without a circle.

Invariant checked: the graph whose nodes are the modules under bus1py/ and whose edges are
their imports of one another -- every import statement, at module level or inside a
function (a deferred import still ties the two modules together) -- has no cycle.  The
imports are read from the source with ast, nothing is executed.  `from P import name`
is an edge to P.name when that is a module of the package (a source file, or a compiled
extension a build script names), else to P.
"""
import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bus1py"


def _modules():
    """{dotted name: path} of every module under bus1py/ (a package by its __init__)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    # compiled extensions (cffi and CPython API): no source of their own, no imports
    for build in PACKAGE.rglob("_build*.py"):
        for name in re.findall(r'"(bus1py\.[\w.]+)"', build.read_text()):
            out.setdefault(name, None)
    return out


def _imports(name, path, modules):
    """The modules of `modules` that module `name` imports."""
    if path is None:
        return set()
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


@functools.lru_cache(maxsize=1)
def _graph():
    """(modules, {module: the modules it imports}), read once for all the tests here."""
    modules = _modules()
    return modules, {n: _imports(n, p, modules) for n, p in modules.items()}


def _cycles(graph):
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve_to_modules():
    _, graph = _graph()
    # a module that certainly imports a sibling, and one that imports a parent's module
    assert "bus1py.check.load" in graph["bus1py.check.cli"]
    assert "bus1py.schema" in graph["bus1py.check.load"]


def test_no_import_cycle_in_bus1py():
    _, graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles among bus1py modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def _reachable(graph, root):
    seen, todo = set(), [root]
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def test_the_bus_knows_nothing_of_the_tools_above_it():
    """`import bus1py` (the bus) reaches no module of the command line (bus1py.cli), the
    checker, the stress tool, the simulator or the Spark session: they sit above it."""
    _, graph = _graph()
    above = ("bus1py.cli", "bus1py.check", "bus1py.stress", "bus1py.sim", "bus1py.spark_session")
    reached = _reachable(graph, "bus1py")
    assert reached, "the package imports nothing: the graph was not read"
    assert "bus1py.bus" in reached
    wrong = sorted(m for m in reached if m.startswith(above))
    assert not wrong, f"the bus imports the tools above it: {wrong}"


def test_the_simulator_and_the_checker_share_only_the_spark_session():
    """Both start Spark through bus1py.spark_session; the simulator imports nothing of the
    checker."""
    modules, graph = _graph()
    sim = {n for n in modules if n.startswith("bus1py.sim")}
    reached = set().union(*(_reachable(graph, n) for n in sim))
    assert "bus1py.spark_session" in reached
    assert not sorted(m for m in reached if m.startswith("bus1py.check")), \
        "the simulator imports the checker"
    assert "bus1py.spark_session" in _reachable(graph, "bus1py.check.cli")


def test_the_parts_of_bus_and_peer_know_nothing_above_them():
    """Peer is gathered from peerbase, nodes, sending and receiving, and Bus stands on limits
    and segment: none of those parts reaches peer.py or bus.py (each file says so)."""
    _, graph = _graph()
    for part in ("peerbase", "peerinfo", "nodes", "sending", "receiving", "limits", "segment"):
        reached = _reachable(graph, f"bus1py.{part}")
        assert not reached & {"bus1py.peer", "bus1py.bus"}, f"bus1py.{part} imports {sorted(reached)}"
    assert {"bus1py.nodes", "bus1py.sending", "bus1py.receiving"} <= graph["bus1py.peer"]
    assert {"bus1py.limits", "bus1py.segment"} <= graph["bus1py.bus"]
