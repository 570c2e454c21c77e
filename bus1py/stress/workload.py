"""What each stress process does: a seeded plan of actions, independent of timing.

Invariants:
  - A process's plan is a pure function of (seed, process index, config): its RNG is
    seeded from those alone and nothing observed at run time (what arrived, when, errors)
    is ever fed back into it.  So two runs with one seed perform the same action sequence
    per process; only what each process *receives*, and when, differs.
  - Actions whose target depends on run-time state (which node to destroy, which held
    handle to pass) carry a raw random number `pick`, resolved at execution time against
    the current state (`pick % len(candidates)`); the plan itself stays fixed.
  - Destinations are process indices from the sender's reach set; a multicast never names
    two nodes of one process, so every (message, receiving process) pair is delivered at
    most once and message ids stay unique per receiver in the trace.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

# Every action kind, in the order the mix string lists them.
#   unicast      one message to one node of a reachable process
#   multicast    one message to the primary nodes of `fanout` reachable processes
#   signal       one side-channel signal (a pipe write) to a signal target, right away
#   recv_signal  wait briefly for a bus message, then signal: the signal is caused by a
#                receive, which is what exposes ordering bugs (causality via a side channel)
#   node_create  a new node owned by this process (target of later sends / handle passing)
#   node_destroy destroy one of this process's extra nodes
#   pass_handle  send a message carrying a handle to one of our nodes
#   release      drop a handle received from someone else
ACTION_KINDS = ("unicast", "multicast", "signal", "recv_signal", "node_create",
                "node_destroy", "pass_handle", "release")

DEFAULT_MIX = {"unicast": 30, "multicast": 30, "signal": 8, "recv_signal": 12,
               "node_create": 2, "node_destroy": 2, "pass_handle": 5, "release": 2}


def parse_mix(text: str | None) -> dict:
    """'unicast=5,multicast=3' -> weights; kinds not named keep 0.  None -> DEFAULT_MIX."""
    if not text:
        return dict(DEFAULT_MIX)
    mix = {k: 0 for k in ACTION_KINDS}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        name = name.strip().replace("-", "_")
        if name not in mix:
            raise ValueError(f"unknown action kind {name!r} in mix; known: {', '.join(ACTION_KINDS)}")
        try:
            mix[name] = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"bad weight {weight!r} for {name} in mix") from None
        if mix[name] < 0:
            raise ValueError(f"negative weight for {name} in mix")
    return mix


def bus_mix(mix: dict) -> dict:
    """The mix on the bus, every kind weighted (0 for those not named)."""
    out = {k: float(mix.get(k, 0)) for k in ACTION_KINDS}
    if not any(out[k] for k in ("unicast", "multicast", "pass_handle")):
        raise ValueError("the action mix sends no messages (give unicast or multicast a weight)")
    return out


# kinds a process on a transport (worker.TransportWorker: any transport, any protocol) performs
MESSAGE_KINDS = ("unicast", "multicast", "signal", "recv_signal")


def transport_mix(mix: dict, protocol: str | None) -> tuple[dict, dict]:
    """The mix over a transport: only MESSAGE_KINDS (nodes and handles are the bus's), and no
    signals under a protocol other than bus1 (it cannot order what it never sees).
    Returns (mix, {skipped kind: why})."""
    out = {k: float(mix.get(k, 0)) if k in MESSAGE_KINDS else 0.0 for k in ACTION_KINDS}
    why = {k: "nodes and handles are the bus's own" for k in ACTION_KINDS
           if k not in MESSAGE_KINDS and mix.get(k)}
    if protocol and protocol != "bus1":
        for k in ("signal", "recv_signal"):
            if out[k]:
                why[k] = f"{protocol} cannot see side channels"
            out[k] = 0.0
    if not any(out[k] for k in ("unicast", "multicast")):
        raise ValueError("the action mix sends no messages (give unicast or multicast a weight)")
    return out, why


@dataclass(frozen=True)
class PayloadSizes:
    """Payload size distribution: 'fixed:N', 'uniform:LO:HI' or 'lognormal:MEDIAN:MAX'.

    Sizes include the 8-byte header that carries the message id, so never go below 8."""

    kind: str = "lognormal"
    a: int = 64
    b: int = 4096

    @classmethod
    def parse(cls, text: str) -> "PayloadSizes":
        parts = text.split(":")
        try:
            nums = [int(x) for x in parts[1:]]
        except ValueError:
            raise ValueError(f"bad payload size spec {text!r}") from None
        if parts[0] == "fixed" and len(nums) == 1:
            return cls("fixed", nums[0], nums[0])
        if parts[0] in ("uniform", "lognormal") and len(nums) == 2 and nums[0] <= nums[1]:
            return cls(parts[0], nums[0], nums[1])
        raise ValueError(f"bad payload size spec {text!r}: use fixed:N, uniform:LO:HI or lognormal:MEDIAN:MAX")

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            n = self.a
        elif self.kind == "uniform":
            n = rng.randint(self.a, self.b)
        else:  # heavy-ish tail, like real IPC: mostly small, sometimes large
            n = min(self.b, int(rng.lognormvariate(0.0, 1.0) * self.a))
        return max(8, n)

    def __str__(self):
        return f"fixed:{self.a}" if self.kind == "fixed" else f"{self.kind}:{self.a}:{self.b}"


@dataclass(frozen=True)
class Action:
    kind: str
    targets: tuple = ()   # process indices (destinations, or the signal target)
    size: int = 0         # payload bytes, header included
    pick: int = 0         # raw random number for choices resolved at run time

    def describe(self) -> str:
        return f"{self.kind}:{','.join(map(str, self.targets))}:{self.size}:{self.pick}"


@dataclass
class Topology:
    """Who can reach whom.  reach[i]: processes whose primary node process i holds a
    handle to.  A ring window (i+1 .. i+k) makes neighbours' reach sets overlap in k-1
    processes, so multicasts of neighbours share destinations and a signal to a
    neighbour is followed by sends to destinations the signaller also reaches: the
    pattern that exposes ordering faults."""

    n: int
    k: int
    reach: list = field(default_factory=list)

    @classmethod
    def ring(cls, n: int, k: int) -> "Topology":
        if n == 1:  # a lone process talks to itself
            return cls(1, 1, [(0,)])
        k = max(1, min(k, n - 1))
        return cls(n, k, [tuple((i + d) % n for d in range(1, k + 1)) for i in range(n)])


class Planner:
    """The infinite, deterministic action sequence of one process."""

    def __init__(self, seed: int, index: int, topology: Topology, mix: dict,
                 sizes: PayloadSizes, fanout: int, reach: tuple | None = None):
        # str seeding hashes with sha512: stable across runs and PYTHONHASHSEED
        self.rng = random.Random(f"bus1py-stress:{seed}:{index}")
        self.index = index
        self.reach = topology.reach[index] if reach is None else reach
        self.kinds = [k for k in ACTION_KINDS if mix.get(k, 0) > 0]
        self.weights = [mix[k] for k in self.kinds]
        self.sizes = sizes
        self.fanout = max(1, min(fanout, len(self.reach)))

    def __iter__(self):
        return self

    def __next__(self) -> Action:
        rng = self.rng
        kind = rng.choices(self.kinds, self.weights)[0]
        if kind == "unicast":
            return Action(kind, (rng.choice(self.reach),), self.sizes.draw(rng), rng.getrandbits(32))
        if kind == "multicast":
            k = rng.randint(min(2, self.fanout), self.fanout)  # 1 only if just one is reachable
            return Action(kind, tuple(sorted(rng.sample(self.reach, k))), self.sizes.draw(rng))
        if kind in ("signal", "recv_signal"):
            return Action(kind, (rng.choice(self.reach),))
        if kind == "pass_handle":
            return Action(kind, (rng.choice(self.reach),), self.sizes.draw(rng), rng.getrandbits(32))
        return Action(kind, (), 0, rng.getrandbits(32))


def is_message(action: Action) -> bool:
    return action.kind in ("unicast", "multicast", "pass_handle")
