"""The C helper's layering: calls and #includes in csrc/ run one way, downwards.

Invariant checked: every csrc/bus/*.c file belongs to one layer of LAYERS, and a file calls
functions (and includes headers) only of its own file or of lower layers, so there is no
call cycle between files.  A function defined in a header (a static inline) belongs to
the file of the same name (x.h to x.c), or to the base when there is none (layout.h).
A lower layer that needs work done above it returns the work (handle.h's notices) instead
of calling up.  And the lock rule the *_locked convention states: a function called with a
peer's lock held never takes a peer's or the name table's lock, directly or through what
it calls (no two at once); the one lock taken under them, a descriptor store's mover lock
(fdio.c), is a leaf: whoever takes it takes no other lock, directly or through what it calls.
"""
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "csrc" / "bus"

# lowest first; a file may use only files of the layers before its own
LAYERS = [
    ["proc", "kill"],        # the process: pid, clock, liveness; test-only kill points
    ["view"],                # this process's validated copy of a bus's layout
    ["alloc"],               # lock-free slots, entries and pool records
    ["queue"],               # one peer's queue and its lock
    ["fdio"],                # a descriptor store's datagrams, its mover lock and move
    ["fds"],                 # descriptors in messages: the store, posting and taking
    ["slot"],                # a peer slot named by (slot, id)
    ["handle"],              # handles and the node owner's lock; notices handed up
    ["message"],             # the handles a message carries
    ["tx"],                  # the transaction steps
    ["node"],                # nodes, destruction, sending the notices
    ["names"],               # well-known names for nodes, under their own lock
    ["peer", "reset"],       # a peer's life, disconnection; bus1's PEER_RESET
    ["reap"],                # recovery from dead processes
    ["bus", "send", "recv", "fsck", "rebuild"],  # the calls Python makes
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
BASE = -1  # layout.h, bus1.h, guard.h: declarations every layer may use

DEFINITION = re.compile(
    r"^[A-Za-z_][\w \t*]*?\b(b1_\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*\{", re.M)
CALL = re.compile(r"\b(b1_\w+)\s*\(")
INCLUDE = re.compile(r'^#include "([\w./]+)\.h"', re.M)


def _code(path: Path) -> str:
    """The file without its comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def _rank(stem: str) -> int:
    return RANK.get(stem, BASE) if (CSRC / f"{stem}.c").exists() else BASE


def _graph():
    owner = {}
    for path in sorted(CSRC.glob("*.[ch]")):
        for name in DEFINITION.findall(_code(path)):
            owner.setdefault(name, path.stem)
    calls = set()
    for path in sorted(CSRC.glob("*.c")):
        own = set(DEFINITION.findall(_code(path)))
        for name in set(CALL.findall(_code(path))) - own:
            if name in owner and owner[name] != path.stem:
                calls.add((path.stem, owner[name], name))
    return calls


ANY_DEFINITION = re.compile(
    r"^[A-Za-z_][\w \t*]*?\b(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*\{", re.M)


def _bodies() -> dict:
    """Each function's body text (functions of the same name in several files: joined)."""
    bodies = {}
    for path in sorted(CSRC.glob("*.[ch]")):
        code = _code(path)
        for m in ANY_DEFINITION.finditer(code):
            depth, i = 1, m.end()
            while depth and i < len(code):
                depth += {"{": 1, "}": -1}.get(code[i], 0)
                i += 1
            bodies[m.group(1)] = bodies.get(m.group(1), "") + code[m.end():i]
    return bodies


def _calls() -> dict:
    bodies = _bodies()
    return {f: set(re.findall(r"\b(\w+)\s*\(", body)) & set(bodies) for f, body in bodies.items()}


def _reaching(calls: dict, targets: set) -> set:
    """The targets and every function that calls one of them, directly or not."""
    out = set(targets)
    while True:
        more = {f for f, callees in calls.items() if callees & out} - out
        if not more:
            return out
        out |= more


def test_locked_functions_take_no_lock():
    calls = _calls()
    locking = _reaching(calls, {"b1_lock", "b1_names_lock"})
    assert {"b1_lock_live", "b1_tx_stage_nt", "b1_notices_send_all"} <= locking
    bad = sorted(f"{f} -> {sorted(calls[f] & locking)}" for f in calls
                 if f.endswith("_locked") and calls[f] & locking)
    assert not bad, "\n".join(bad)


def test_the_mover_lock_is_a_leaf():
    calls = _calls()
    takers = {f for f, callees in calls.items() if "b1_fds_mover_lock" in callees}
    assert {"b1_fds_take_locked", "b1_fds_sweep_locked", "b1_fds_wakeup"} <= takers
    under = set()  # what the takers call, directly or not
    todo = set().union(*(calls[f] for f in takers))
    while todo:
        f = todo.pop()
        if f not in under:
            under.add(f)
            todo |= calls.get(f, set())
    locking = _reaching(calls, {"b1_lock", "b1_names_lock"})
    assert not (under | takers) & locking, sorted((under | takers) & locking)


def test_every_file_has_a_layer():
    files = {p.stem for p in CSRC.glob("*.c")}
    assert files == set(RANK), f"place these in LAYERS: {sorted(files ^ set(RANK))}"


def test_calls_go_down():
    calls = _graph()
    # the parser sees the graph (a broken one would pass everything)
    assert ("tx", "queue", "b1_lock") in calls and ("send", "tx", "b1_tx_stage_nt") in calls
    upward = sorted(f"{src}.c calls {name} of {dst}.c" for src, dst, name in calls
                    if _rank(dst) >= RANK[src])
    assert not upward, "\n".join(upward)


def test_includes_go_down():
    upward = []
    for path in sorted(CSRC.glob("*.[ch]")):
        mine = _rank(path.stem)
        for stem in INCLUDE.findall(path.read_text()):
            if stem != path.stem and _rank(stem) != BASE and _rank(stem) >= max(mine, 0):
                upward.append(f"{path.name} includes {stem}.h")
    assert not upward, "\n".join(upward)
