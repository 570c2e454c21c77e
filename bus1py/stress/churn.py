"""Churn (`bus1py stress --churn`): processes that come and go while the others run.

Invariants:
  - The first `processes - churn_slots` processes are stable: they run the whole plan on the
    ring topology as in any run.  The last `churn_slots` slots hold *mortal* processes, one
    generation after another; every generation is a fresh OS process with a fresh peer and a
    new trace process index (the slot's own index first, then processes, processes+1, ...),
    so a replaced peer is a new process of the trace (SPEC section 7: each process's seq
    order starts at 0) and nothing of a gone process is ever attributed to its successor.
  - A mortal creates its own peer, so no other process holds it: when it is SIGKILLed,
    nothing alive holds the peer and `Bus.gc()` (the bus's reaping) disconnects it.  The
    coordinator transfers it handles to the primary nodes of its stable reach window; the
    mortal passes a handle to its own primary node to each of them in a message (a traced
    pass_handle), and stable processes then address some of their unicasts to it.
  - Every node a mortal owns is destroyable (holders never drop their last reference) and
    nobody passes a mortal a handle, so it knows exactly who holds each of its nodes, and
    no one's destroy ever names a process that is gone.
  - Leaving: after its life (message-sending actions, drawn from a RNG seeded by the run's
    seed and its index) a mortal destroys every node it owns, each a traced destroy with its
    exact recipients, and receives until it has delivered its own NODE_DESTROY of each.
    Every message sent to it was then delivered, or was for a node it saw destroyed, which
    the checker's exactly_once excuses (SPEC section 4: dropped by the node rule).  It
    flushes its trace and writes its result, then either disconnects and exits, or keeps
    calling recv until the coordinator SIGKILLs it (mid-call, perhaps holding its queue
    lock) and reaps its peer (queue, handles and pool bytes it still had).  Receiving a
    message in that state fails the run (exit 3): all its nodes are gone.
  - The coordinator never kills a stable process, and it raises DRAIN only after every
    mortal has left, so the stable processes' drain sees every message committed.
"""
from __future__ import annotations

import errno
import json
import os
import random
import signal
import time
import traceback
from types import SimpleNamespace

from ..message import MessageType
from .ids import node_id
from .bus_worker import BusWorker
from .child import close_others, finish
from .slots import CTL_ABORT, CTL_LEAVE, PID, ST_DONE, ST_FAILED, STATE, STRIDE
from .workload import Action, Planner

REAP_WAIT = 60  # seconds a killed mortal's peer may stay connected (its exit, a busy lock)
ST_DYING = 5  # a mortal that left and waits for its SIGKILL (worker states go to ST_FAILED=4)
_DESTROY = MessageType.NODE_DESTROY


def validate(cfg) -> None:
    """Refuse churn options that cannot run (ValueError names the option)."""
    if not cfg.direct_bus:
        raise ValueError("--churn needs the bus itself: --transport bus, no --protocol, no --chaos-delay")
    if cfg.inject:
        raise ValueError("--churn with --inject is not supported")
    if cfg.churn_slots is None:
        cfg.churn_slots = max(1, cfg.processes // 4)
    if type(cfg.churn_slots) is not int or not 1 <= cfg.churn_slots <= cfg.processes - 2:
        raise ValueError(f"--churn-slots must be from 1 to processes-2 ({cfg.processes - 2}): "
                         f"two processes stay, not {cfg.churn_slots!r}")
    if type(cfg.churn_life) is not int or cfg.churn_life < 1:
        raise ValueError(f"--churn-life must be a positive number of messages, not {cfg.churn_life!r}")
    if not 0.0 <= cfg.churn_kill <= 1.0:
        raise ValueError(f"--churn-kill must be a fraction from 0 to 1, not {cfg.churn_kill!r}")


def mortal_reach(cfg, index: int) -> tuple:
    """The stable processes a mortal sends and signals to: a window of the stable ring."""
    s = cfg.processes - cfg.churn_slots
    return tuple((index + d) % s for d in range(min(cfg.reach, s)))


class Mortal(BusWorker):
    """One generation of a churned slot: says hello, runs its plan for its life, leaves."""

    def __init__(self, spec):
        super().__init__(spec)
        cfg = self.cfg
        self.all_destroyable = True
        self.own[spec.own_handle] = node_id(self.index, 1)  # destroyable: holders keep it
        rng = random.Random(f"bus1py-churn:{cfg.seed}:{self.index}")
        self.life = rng.randint(max(1, cfg.churn_life // 2), max(1, cfg.churn_life * 3 // 2))
        self.kill = rng.random() < cfg.churn_kill
        self.awaiting = set()  # own handles whose NODE_DESTROY has not come back yet

    def planner(self):
        spec, cfg = self.spec, self.cfg
        return Planner(cfg.seed, self.index, spec.topology, spec.mix, cfg.sizes, cfg.fanout,
                       reach=spec.reach)

    def limits(self, start):
        return None, self.life

    def stopping(self) -> bool:
        return super().stopping() or bool(self.spec.control[CTL_LEAVE])

    def on_message(self, msg):
        if msg.type is _DESTROY:
            self.awaiting.discard(msg.destination)
        super().on_message(msg)

    def hello(self):
        """Pass a handle to our primary node to every stable process we reach."""
        own = self.spec.own_handle
        for t in self.spec.reach:
            hs = self.out_handles.get(t)
            if hs and self.send(Action("pass_handle", (t,), 64), [hs[0]], [t], [node_id(t, 0)],
                                carry=(own,)):
                self.passed.setdefault(own, set()).add(t)

    def leave(self, deadline: float):
        for h in list(self.extra) + [self.spec.own_handle]:
            while not self.destroy_node(h):  # EXFULL/EDQUOT pass as others receive
                if time.monotonic() > deadline:
                    raise RuntimeError(f"could not destroy node {h} to leave: {self.errors}")
                self.drain()
                time.sleep(0.005)
            if h in self.destroyable:
                self.destroyable.remove(h)
            self.awaiting.add(h)
        while self.awaiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"NODE_DESTROY of {sorted(self.awaiting)} never came back")
            self.wait(0.05)

    def run(self):
        self.ppid = os.getppid()
        self.hello()
        start = self.act()
        left_at = time.monotonic()
        self.publish()
        self.leave(left_at + 120)
        self.publish()
        self.trace.flush()
        return self.result(start, sent_at=left_at, slot=self.spec.slot, life=self.life,
                           departure="kill" if self.kill else "exit")


def _waiting_out_enospc(call, deadline):
    """call(), retried while it fails with ENOSPC (a full table) until `deadline`."""
    while True:
        try:
            return call()
        except OSError as e:
            if e.errno != errno.ENOSPC or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def mortal_main(spec):
    """Entry point of a mortal process (forked by the coordinator)."""
    close_others(set(spec.signal_write_fds.values()), spec.all_pipe_fds)
    try:
        deadline = time.monotonic() + REAP_WAIT
        # a killed predecessor's peer slot is free once reaped and unnamed; a full node
        # table (a backlog pinning destroyed nodes) drains
        peer = _waiting_out_enospc(spec.bus.peer, deadline)
        own = _waiting_out_enospc(peer.create_node, deadline)
        spec.conn.send((peer._slot, peer.id))
        spec.handles = spec.conn.recv()  # stable process -> our handle to its primary node
        spec.conn.close()
        spec.peer, spec.own_handle = peer, own
        m = Mortal(spec)
        result = m.run()
    except BaseException as e:
        finish(spec, {"index": spec.index, "pid": os.getpid(), "failed": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()}, 1)
    if not m.kill:
        peer.disconnect()
        finish(spec, result, 0)
    path = os.path.join(spec.result_dir, f"{spec.index}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
    spec.counters[spec.slot * STRIDE + STATE] = ST_DYING
    ppid = os.getppid()
    while True:  # the SIGKILL may land inside any of these calls
        try:
            peer.recv(0.002)
            os._exit(3)  # a message for a peer whose nodes are all destroyed
        except TimeoutError:
            pass
        peer.query()
        if spec.control[CTL_ABORT] or os.getppid() != ppid:
            os._exit(0)


class Churn:
    """The coordinator's side: spawns mortals, hands them their handles, kills and reaps
    the ones drawn to die, replaces every one that left until told to stop."""

    def __init__(self, run):
        cfg = self.cfg = run.cfg
        self.run = run
        self.next_index = cfg.processes
        self.live = {}      # slot -> SimpleNamespace(proc, index, conn, peer_id)
        self.leaving = False
        self.stats = {"spawned": 0, "exited": 0, "killed": 0, "reaped": 0, "reap_retries": 0}
        self.dying = []     # SIGKILLed mortals whose peers are not reaped yet
        self.failures = []
        self.indices = []   # every mortal's trace index

    def start(self):
        for slot in range(self.cfg.processes - self.cfg.churn_slots, self.cfg.processes):
            self.spawn(slot, slot)

    def spawn(self, slot, index):
        run, cfg = self.run, self.cfg
        parent, child = run.ctx.Pipe()
        reach = mortal_reach(cfg, index)
        for k in range(STRIDE):
            run.counters[slot * STRIDE + k] = 0
        spec = SimpleNamespace(
            index=index, slot=slot, bus=run.bus, conn=child, reach=reach, signal_read_fd=None,
            signal_write_fds={t: run.pipes[t][1] for t in reach}, all_pipe_fds=[], config=cfg,
            topology=run.topology, mix=run.mix, counters=run.counters, control=run.control,
            go=run.go, trace_dir=cfg.trace_dir, result_dir=run.result_dir)
        p = run.ctx.Process(target=mortal_main, args=(spec,), name=f"bus1py-mortal-{index}")
        p.start()
        child.close()
        self.live[slot] = SimpleNamespace(proc=p, index=index, conn=parent, peer_id=None, killed_at=None)
        self.indices.append(index)
        self.stats["spawned"] += 1

    def handshake(self, m):
        """Give the mortal its handles to its reach window's primary nodes.  A full handle
        table (ENOSPC) is waited out over later ticks: handles are freed as others leave."""
        from ..peer import Peer
        run = self.run
        if m.peer_id is None:
            try:
                slot, m.peer_id = m.conn.recv()
            except EOFError:  # it died first: its exit code says so
                m.conn = None
                return
            m.peer, m.handles, m.since = Peer(run.bus, slot, m.peer_id), {}, time.monotonic()
        for t in mortal_reach(self.cfg, m.index):
            if t not in m.handles:
                try:
                    m.handles[t] = run.peers[t].transfer(run.own[t], m.peer)
                except OSError as e:
                    if e.errno != errno.ENOSPC or time.monotonic() - m.since > 60:
                        raise
                    return
        m.conn.send(m.handles)
        m.conn.close()
        m.conn = None

    def tick(self):
        run = self.run
        self.reap()
        for slot, m in list(self.live.items()):
            if m.conn is not None and (m.peer_id is not None or m.conn.poll()):
                self.handshake(m)
            state = run.counters[slot * STRIDE + STATE]
            if state == ST_DYING and m.proc.exitcode is None:
                os.kill(m.proc.pid, signal.SIGKILL)
                self.stats["killed"] += 1
                m.killed_at = time.monotonic()
                self.dying.append(m)
                self.replace(slot)
            elif m.proc.exitcode is not None:
                if m.proc.exitcode == 0 and state == ST_DONE:
                    self.stats["exited"] += 1
                    self.replace(slot)
                else:
                    why = "failed" if state == ST_FAILED else f"exit code {m.proc.exitcode}"
                    self.failures.append(f"mortal process {m.index} (slot {slot}): {why}")
                    del self.live[slot]

    def reap(self):
        """Reap killed mortals' peers through the bus once their processes are gone (the
        death watcher of any attached process, or a stable process on EDQUOT, may have
        reaped one first: `reaped` counts the killed mortals whose peer is gone, by
        whoever).  A peer still connected is tried again on later ticks; one still
        connected REAP_WAIT s after its SIGKILL fails the run."""
        gone = [m for m in self.dying if m.proc.exitcode is not None]
        if not gone:
            return
        self.run.bus.gc()
        connected = {p["id"] for p in self.run.bus.peers() if p["state"] == "connected"}
        for m in gone:
            if m.peer_id not in connected:
                self.stats["reaped"] += 1
                m.proc.join()
                self.dying.remove(m)
            elif time.monotonic() - m.killed_at > REAP_WAIT:
                self.failures.append(f"mortal process {m.index}: its peer {m.peer_id} still "
                                     f"connected {REAP_WAIT} s after its SIGKILL (not reaped)")
                self.dying.remove(m)
            else:
                self.stats["reap_retries"] += 1

    def replace(self, slot):
        del self.live[slot]
        if not self.leaving:
            self.spawn(slot, self.next_index)
            self.next_index += 1

    def leave(self):
        """No more generations: every live mortal leaves now."""
        self.leaving = True
        self.run.control[CTL_LEAVE] = 1

    def kill_all(self):
        for m in self.dying:
            m.proc.join(5)
        for m in self.live.values():
            if m.proc.exitcode is None:
                m.proc.kill()
        for m in self.live.values():
            m.proc.join(5)
            if m.conn is not None:
                m.conn.close()
        self.live.clear()

    def pids(self):
        """(trace index, pid) of every live mortal, for the resource sampler."""
        c = self.run.counters
        return [(m.index, c[slot * STRIDE + PID] or m.proc.pid) for slot, m in self.live.items()]
