"""The words of the report, computed from the run: the targets' status and the summary.
Every claim about a result is made from the measured numbers it names; mechanisms are
stated only when the run shows their sign (e.g. the spinning receiver's effect only when the
spin_ns=0 row is slower)."""
from __future__ import annotations

import statistics

from .common import NCPU, SIZES, fmt_rate, fmt_ratio, fmt_size
from . import drain as drain_section
from .sections import best

PER_MESSAGE_PEERS = ("os.pipe", "posix_ipc MQ", "mp.Queue", "mp.Pipe", "socketpair", "faster_fifo")


def label(key):
    """'name (placement)' of a row key."""
    return f"{key[0]} ({key[1]})"


def spread(b, p):
    """bus1py/peer throughput ratio over the repetitions: worst..best pairing."""
    try:
        return f" (repetitions {min(b['rates']) / max(p['rates']):.2f}..{max(b['rates']) / min(p['rates']):.2f}x)"
    except (KeyError, ValueError, ZeroDivisionError):
        return ""


def noise(rows):
    """(median, max) over rows of max/min of one row's repetitions."""
    sp = [max(r["rates"]) / min(r["rates"]) for r in rows.values() if len(r.get("rates", ())) > 1]
    return (statistics.median(sp), max(sp)) if sp else None


def call_split(prof):
    """{"send": (api, bus, rest), "recv": (...)} in ns, or None when a row is missing.
    `Peer.send` and `Peer.recv` are C methods (csrc/py/peer.c) that call the bus directly,
    so the raw cffi call is no floor for them: it pays cffi's conversion of every argument,
    which the methods skip.  The bus's own work is the raw call minus an empty cffi call;
    `rest` is what the method adds to it (the call, its argument checks, the stamp tuple
    or the Message it builds)."""
    call = prof.get("timer: empty cffi call") or 0
    out = {}
    for side, api, raw in (("send", "send: Peer.send (API)", "send: lib.b1_send (raw cffi)"),
                           ("recv", "recv: Peer.recv() (API)", "recv: lib.b1_recv_wait (raw cffi)")):
        a, r = prof.get(api), prof.get(raw)
        if not a or not r:
            return None
        out[side] = (a, r - call, a - (r - call))
    return out


def _vs(target, measured_ratio, thr, b, p, bkey, pkey):
    return (target, f"{fmt_ratio(measured_ratio)}: {label(bkey)} {fmt_rate(b['rate'])}msg/s vs "
            f"{label(pkey)} {fmt_rate(p['rate'])}msg/s{spread(b, p)}", measured_ratio >= thr)


def batch_targets(uni, sweep, mc, prof, drain=None):
    """[(target, measured, ok or None)] for the targets of batches, zero-copy receive and a fair benchmark, each judged against the best
    row (placement) of each peer."""
    t = []
    rows = (uni or {}).get("rows", {})
    srows = (sweep or {}).get("rows", rows)
    bb = best(rows, 64, name="bus1py")
    pp = best(rows, 64, peer="os.pipe")
    if bb and pp:
        t.append(_vs("64 B one-way, per-message API >= raw os.pipe", bb[1]["rate"] / pp[1]["rate"], 1,
                     bb[1], pp[1], bb[0], pp[0]))
    bm = best(rows, 64, peer="bus1py", api="batch")
    fm = best(rows, 64, peer="faster_fifo", api="batch")
    for thr, other, what in ((3, pp, "os.pipe"), (2, fm, "faster-fifo get_many")):
        name = f"64 B one-way with send_many/recv_many >= {thr}x {what}"
        if bm and other:
            t.append(_vs(name, bm[1]["rate"] / other[1]["rate"], thr, bm[1], other[1], bm[0], other[0]))
        else:
            t.append((name, "not measured: no row"
                      + (f"; {label(other[0])} ran {fmt_rate(other[1]['rate'])}msg/s" if other else ""), None))
    zc = best(srows, 65536, name="bus1py recv(copy=False)")
    p64k = best(srows, 65536, peer="os.pipe")
    name = "64 KiB one-way with zero-copy receive >= 3x os.pipe"
    if zc and p64k:
        t.append(_vs(name, zc[1]["rate"] / p64k[1]["rate"], 3, zc[1], p64k[1], zc[0], p64k[0]))
    else:
        cp = best(srows, 65536, name="bus1py")
        t.append((name, "not measured: no row"
                  + (f"; the copying recv: {fmt_ratio(cp[1]['rate'] / p64k[1]['rate'])} os.pipe"
                     if cp and p64k else ""), None))
    name = "receive CPU per message within 2x from 64 B to 1 MiB (zero-copy)"
    lo, hi = best(srows, 64, name="bus1py recv(copy=False)"), best(srows, 1 << 20, name="bus1py recv(copy=False)")
    calls = [c for c in ("recv(copy=False)", "recv_many(copy=False)")
             if drain and (c, 64) in drain and (c, 1 << 20) in drain]
    if calls:
        # within 2x over the whole range: the most a size costs over the least
        ends = {c: drain_section.spread(drain, c) for c in calls}
        xs = {c: most[0] / least[0] for c, (least, most) in ends.items()}
        t.append((name, "; ".join(f"`{c}` {xs[c]:.2f}x ({least[0]:,.0f} ns at {fmt_size(least[1])} to "
                                  f"{most[0]:,.0f} ns at {fmt_size(most[1])})" for c, (least, most) in ends.items())
                  + " with the message ready (section 1c)"
                  + (f"; a one-way run's receiver, its waiting for the sender's copy included: "
                     f"{lo[1]['rx_cpu_ns']:,.0f} -> {hi[1]['rx_cpu_ns']:,.0f} ns" if lo and hi else ""),
                  all(x <= 2 for x in xs.values())))
    elif lo and hi:
        x = hi[1]["rx_cpu_ns"] / lo[1]["rx_cpu_ns"]
        t.append((name, f"{x:.2f}x ({lo[1]['rx_cpu_ns']:.0f} -> {hi[1]['rx_cpu_ns']:.0f} ns)", x <= 2))
    else:
        clo, chi = best(srows, 64, name="bus1py"), best(srows, 1 << 20, name="bus1py")
        t.append((name, "not measured: no row"
                  + (f"; the copying recv: {clo[1]['rx_cpu_ns']:.0f} ns at 64 B, {chi[1]['rx_cpu_ns']:.0f} ns "
                     f"at 1 MiB ({chi[1]['rx_cpu_ns'] / clo[1]['rx_cpu_ns']:.1f}x)" if clo and chi else ""), None))
    br = best(rows, 64, name="bus1py", key="rtt_med")
    if br:
        t.append(("round-trip median <= 10 us (64 B)", f"{br[1]['rtt_med']:.1f} us ({br[0][1]})",
                  br[1]["rtt_med"] <= 10))
    if mc:
        r8, r1 = mc.get(("bus1py multicast", 8)), mc.get(("bus1py multicast", 1))
        b8, b1 = mc.get(("bus1py multicast send_many/recv_many", 8)), mc.get(("bus1py multicast send_many/recv_many", 1))
        bound = multicast_cpu_bound(prof, [8])
        bb = multicast_cpu_bound(prof, [8], batch=True)
        if b8 and b1:
            x = b8["rate"] / b1["rate"]
            above = bool(bb) and b1["rate"] / 2 > bb[8]
            t.append(("multicast to 8 with recv_many: per receiver >= 1/2 unicast",
                      f"{x:.2f} of unicast: {fmt_rate(b8['rate'])}msg/s per receiver at k=8 vs "
                      f"{fmt_rate(b1['rate'])}msg/s at k=1 (send_many/recv_many)"
                      + (f"; the batch calls' CPU bound at k=8 is {fmt_rate(bb[8])}msg/s per receiver "
                         f"({bb[8] / b1['rate']:.2f} of unicast, {b8['rate'] / bb[8]:.0%} of it reached)"
                         + (f": half the unicast rate is above what {NCPU} cores can deliver" if above else "")
                         if bb else "")
                      + (f"; the per-message calls' bound {fmt_rate(bound[8])}msg/s" if bound else ""),
                      x >= 0.5))
        elif r8 and r1:
            x = r8["rate"] / r1["rate"]
            t.append(("multicast to 8 with recv_many: per receiver >= 1/2 unicast",
                      "not measured with recv_many (no row); "
                      f"with Peer.recv {x:.2f} of unicast"
                      + (f", CPU bound {fmt_rate(bound[8])}msg/s vs half of k=1 {fmt_rate(r1['rate'] / 2)}msg/s"
                         if bound else ""), None))
    return t


def message_targets(uni, mc, qc, mem):
    """The standing per-message targets, each judged against the best row of each peer."""
    t = []
    rows = (uni or {}).get("rows", {})
    b = best(rows, 64, name="bus1py")
    if b:
        for peer, thr, what in (("mp.Queue", 4, ">= 4x multiprocessing.Queue"),
                                ("posix_ipc MQ", 1, ">= posix_ipc.MessageQueue")):
            p = best(rows, 64, peer=peer, api="per-message")
            if p:
                t.append(_vs(f"64 B one-way {what}", b[1]["rate"] / p[1]["rate"], thr, b[1], p[1], b[0], p[0]))
        for size in SIZES:
            br = best(rows, size, name="bus1py", key="rtt_med")
            mq = best(rows, size, peer="posix_ipc MQ", key="rtt_p99")
            if br:
                t.append((f"round-trip median <= 10 us ({fmt_size(size)})", f"{br[1]['rtt_med']:.1f} us ({br[0][1]})",
                          br[1]["rtt_med"] <= 10))
            bp = best(rows, size, name="bus1py", key="rtt_p99")
            if bp and mq:
                t.append((f"round-trip p99 no worse than posix_ipc MQ ({fmt_size(size)})",
                          f"{bp[1]['rtt_p99']:.1f} ({bp[0][1]}) vs {mq[1]['rtt_p99']:.1f} us ({mq[0][1]})",
                          bp[1]["rtt_p99"] <= mq[1]["rtt_p99"]))
    if mc:
        r4 = mc.get(("bus1py multicast", 4))
        if r4:
            t.append(("multicast to 4: >= 150k msg/s per receiver",
                      f"{fmt_rate(r4['rate'])}msg/s (repetitions {fmt_rate(min(r4['rates']))}.."
                      f"{fmt_rate(max(r4['rates']))})", r4["rate"] >= 150e3))
        r8, r1 = mc.get(("bus1py multicast", 8)), mc.get(("bus1py multicast", 1))
        if r8 and r1:
            x = r8["rate"] / r1["rate"]
            t.append(("multicast to 8: per-receiver rate >= 1/2 unicast (k=1)", f"{x:.2f} of unicast", x >= 0.5))
    if qc:
        rows_q = qc["rows"]
        lo, hi = rows_q[0]["m"], rows_q[-1]["m"]
        x = qc["ratio_raw_ns"]
        t.append((f"queue op at m=1M <= 3x at m=10 (measured m={hi:,} vs {lo})",
                  f"{x:.2f}x (C-side only {qc['ratio_c_ns']:.2f}x)", (x <= 3) if hi >= 1_000_000 else None))
    if mem:
        t.append(("segment bytes per idle peer < 64 KiB", f"{mem['per_peer']:,.0f} B", mem["per_peer"] < 64 * 1024))
    return t


def multicast_cpu_bound(prof, ks, batch=False):
    """{k: best possible per-receiver msg/s on NCPU cores from the in-process call costs}:
    each message costs its send plus k receives, and NCPU cores have NCPU s of CPU a second.
    batch: the costs per message of send_many/recv_many instead of send/recv."""
    if not prof:
        return None
    out = {}
    for k in ks:
        if batch:
            recv = prof.get("batch recv: Peer.recv_many, per message (API)")
            send = prof.get(f"batch send: Peer.send_many to k={k}, per message (API)")
        else:
            recv = prof.get("recv: Peer.recv() (API)")
            send = prof.get("send: Peer.send (API)") if k == 1 else prof.get(f"multicast send: Peer.send to k={k} (API)")
        if recv and send:
            out[k] = NCPU / ((k * recv + send) * 1e-9)
    return out or None


def placement_lines(rows):
    """Which placement served each transport better, per size, from the medians."""
    L = []
    for size in SIZES:
        better = {"pinned": [], "unpinned": []}
        for name in dict.fromkeys(k[0] for k in rows if k[2] == size):
            p, u = rows.get((name, "pinned", size)), rows.get((name, "unpinned", size))
            if p and u:
                w, x = ("unpinned", u["rate"] / p["rate"]) if u["rate"] > p["rate"] else ("pinned", p["rate"] / u["rate"])
                better[w].append(f"{name} {fmt_ratio(x)}")
        parts = [f"{w} for {', '.join(v)}" for w, v in better.items() if v]
        if parts:
            L.append(f"{fmt_size(size)}: faster " + "; ".join(parts))
    return L


def sweep_lines(sweep):
    """Plain words on the sweep: bus1py against the best per-message peer at each end, and
    where bus1py's receive cost grows."""
    L = []
    rows, sizes = sweep["rows"], sweep["sizes"]
    ends = [s for s in (sizes[0], 65536, sizes[-1]) if s in sizes]
    parts = []
    for s in dict.fromkeys(ends):
        b = best(rows, s, name="bus1py")
        others = [best(rows, s, peer=p) for p in PER_MESSAGE_PEERS]
        others = [o for o in others if o]
        if b and others:
            top = max(others, key=lambda o: o[1]["rate"])
            parts.append(f"at {fmt_size(s)} bus1py {fmt_rate(b[1]['rate'])}msg/s "
                         f"({b[1]['rate'] * s / 1e6:,.0f} MB/s) is {fmt_ratio(b[1]['rate'] / top[1]['rate'])} "
                         f"the fastest peer, {label(top[0])}")
    if parts:
        L.append("- **Payload sweep**: " + "; ".join(parts) + ".")
    lo, hi = best(rows, sizes[0], name="bus1py"), best(rows, sizes[-1], name="bus1py")
    if lo and hi:
        L.append(f"- **Receive cost against payload size**: bus1py's receiver used {lo[1]['rx_cpu_ns']:,.0f} ns of "
                 f"CPU per message at {fmt_size(sizes[0])} and {hi[1]['rx_cpu_ns']:,.0f} ns at "
                 f"{fmt_size(sizes[-1])} ({hi[1]['rx_cpu_ns'] / lo[1]['rx_cpu_ns']:.0f}x; "
                 f"{hi[1]['rx_cpu_ns'] / sizes[-1]:.2f} ns per byte at the top), the sender "
                 f"{lo[1]['tx_cpu_ns']:,.0f} and {hi[1]['tx_cpu_ns']:,.0f} ns: every byte is copied into the "
                 "pool by the sender and out of it by the receiver.")
    return L


def summary_lines(uni, sweep, mc, qc, prof, perf_rows, futex=None):
    """Plain-words reading of the numbers: where bus1py stands and what is in the way."""
    L = []
    rows, prof = (uni or {}).get("rows", {}), prof or {}
    bk = best(rows, 64, name="bus1py")
    b = bk[1] if bk else None
    S, R = prof.get("send: Peer.send (API)"), prof.get("recv: Peer.recv() (API)")
    if b:
        peers = [best(rows, 64, peer=n, api="per-message") for n in PER_MESSAGE_PEERS]
        line = (f"- **64 B one-way**, each at its better placement: bus1py {fmt_rate(b['rate'])}msg/s ({bk[0][1]}); "
                "that is " + ", ".join(f"{fmt_ratio(b['rate'] / p[1]['rate'])} {label(p[0])}" for p in peers if p) + ".")
        fm = best(rows, 64, peer="faster_fifo", api="batch")
        if fm:
            line += (f" faster-fifo's batch calls move {fmt_rate(fm[1]['rate'])}msg/s ({label(fm[0])}, "
                     f"{fmt_ratio(fm[1]['rate'] / b['rate'])} bus1py's per-message rate).")
        L.append(line)
        br = best(rows, 64, name="bus1py", key="rtt_med")
        mq = best(rows, 64, peer="posix_ipc MQ", key="rtt_med")
        pl, s0 = rows.get(("bus1py", "pinned", 64)), rows.get(("bus1py spin_ns=0", "pinned", 64))
        line = (f"- **Round trip, 64 B**: bus1py median {br[1]['rtt_med']:.1f} us, p99 {br[1]['rtt_p99']:.1f} us "
                f"({br[0][1]})" + (f"; posix_ipc MQ {mq[1]['rtt_med']:.1f} / {mq[1]['rtt_p99']:.1f} us" if mq else ""))
        if pl and s0 and "rtt_med" in s0:
            if s0["rtt_med"] > 2 * pl["rtt_med"]:
                line += (f". With spin_ns=0 (the receiver sleeps on the futex at once, as every peer here does) "
                         f"bus1py's median is {s0['rtt_med']:.1f} us against {pl['rtt_med']:.1f} us pinned with "
                         "the default spin: the short round trip is the receiver polling the queue's front in "
                         "shared memory, not a cheaper wake-up.")
            else:
                line += (f". With spin_ns=0 the median is {s0['rtt_med']:.1f} us (default spin: "
                         f"{pl['rtt_med']:.1f} us), p99 {s0['rtt_p99']:.1f} us: here the reply mostly arrives "
                         "before the receiver would have slept.")
        L.append(line + ("" if line.endswith(".") else "."))
    sp = call_split(prof)
    if sp:
        pipe = prof.get("peer pair: os.write + os.read (os.pipe)")
        mqp = prof.get("peer pair: MessageQueue.send + receive (posix_ipc)")
        slow, slow_ns = ("receiver", R) if R >= S else ("sender", S)
        L.append(f"- **Per message CPU** (in-process, section 5): `Peer.send` {S:.0f} ns (the bus's work "
                 f"{sp['send'][1]:.0f} ns, the C method's call, checks and stamp tuple {sp['send'][2]:.0f} ns) "
                 f"and `Peer.recv` {R:.0f} ns (the bus's work {sp['recv'][1]:.0f} ns, the method and its "
                 f"`Message` {sp['recv'][2]:.0f} ns): {S + R:.0f} ns per message"
                 + (f", against {pipe:.0f} ns for an os.pipe write+read" if pipe else "")
                 + (f" and {mqp:.0f} ns for a posix_ipc MQ send+receive" if mqp else "") + ". "
                 f"The {slow} is the slower side: even with perfect overlap the per-message API cannot pass "
                 f"~{fmt_rate(1e9 / slow_ns)}msg/s one-way"
                 + (f" (os.pipe's best row in this run: {fmt_rate(pp[1]['rate'])}msg/s)"
                    if (pp := best(rows, 64, peer="os.pipe")) else "") + ".")
        if b and b.get("wall_ns"):
            extra_rx, extra_tx = b["rx_cpu_ns"] - R, b["tx_cpu_ns"] - S
            L.append(f"- **Across processes** (64 B one-way, {bk[0][1]}) a message took {b['wall_ns']:.0f} ns of wall "
                     f"time; the sender used {b['tx_cpu_ns']:.0f} ns of CPU per message ({S:.0f} in-process) and the "
                     f"receiver {b['rx_cpu_ns']:.0f} ns ({R:.0f} in-process), busy {b['rx_cpu_ns'] / b['wall_ns']:.0%} "
                     "of the time. "
                     + (f"The extra CPU per message ({extra_tx:+.0f} ns sender, {extra_rx:+.0f} ns receiver) is the "
                        "cost of sharing one queue between two CPUs (its lock, tree and free lists change caches at "
                        "every operation) and of the receiver spinning when it has caught up. "
                        if max(extra_rx, extra_tx) > 0.2 * min(S, R) else "")
                     + (f"The remaining {b['wall_ns'] - max(b['rx_cpu_ns'], b['tx_cpu_ns']):.0f} ns per message of wall "
                        f"time neither process was on a CPU: preempted ({b['tx_invol']:.0f} times the sender, "
                        f"{b['rx_invol']:.0f} the receiver, per repetition) or asleep ({b['tx_vol']:.0f} / "
                        f"{b['rx_vol']:.0f} sleeps)."
                        if b["wall_ns"] > 1.25 * max(b["rx_cpu_ns"], b["tx_cpu_ns"]) else
                        f"Preemptions by other jobs per repetition: sender {b['tx_invol']:.0f}, "
                        f"receiver {b['rx_invol']:.0f}."))
    L += _perf_lines(perf_rows, futex)
    if sweep:
        L += sweep_lines(sweep)
    bound = multicast_cpu_bound(prof, sorted({k for _, k in mc})) if mc else None
    if mc and bound:
        r4 = mc.get(("bus1py multicast", 4))
        r8, r1 = mc.get(("bus1py multicast", 8)), mc.get(("bus1py multicast", 1))
        if r4 and 4 in bound:
            s = (f"- **Multicast**: k=4 gives {fmt_rate(r4['rate'])}msg/s per receiver ({r4['rate'] / bound[4]:.0%} "
                 f"of the {fmt_rate(bound[4])}msg/s that {NCPU} cores could deliver at the in-process per-call "
                 "costs, nothing lost to spinning, switching or cache traffic)")
            if r8 and r1 and 8 in bound:
                half = r1["rate"] / 2
                s += (f". At k=8: {fmt_rate(r8['rate'])}msg/s per receiver against half the k=1 rate "
                      f"({fmt_rate(half)}msg/s) and a CPU bound of {fmt_rate(bound[8])}msg/s"
                      + ("; half the unicast rate is above the bound: 8 receivers each paying a full "
                         f"`Peer.recv` cannot keep up on {NCPU} cores" if half > bound[8] else ""))
            L.append(s + ".")
    if qc:
        a0, b0 = qc["fit"]
        q = qc["rows"]
        L.append(f"- **Queue length**: a send+recv pair costs {q[0]['raw_ns']:.0f} ns at m={q[0]['m']} and "
                 f"{q[-1]['raw_ns']:.0f} ns at m={q[-1]['m']:,} ({qc['ratio_raw_ns']:.2f}x); the C side fits "
                 f"{a0:.0f} {'+' if b0 >= 0 else '-'} {abs(b0):.1f} x log2(m) ns: the log m term adds "
                 f"{b0 * 20:.0f} ns at m=1M, {b0 * 20 / a0:.0%} of the fixed cost.")
    return L


def _perf_lines(perf_rows, futex):
    L = []
    for pr in perf_rows or ():
        g = {}
        for p, k, _ in pr["groups"]:
            g[k[-1]] = g.get(k[-1], 0) + p
        share = {w: sum(p for d, p in g.items() if w in d) for w in ("_b1", "libpython", "_cffi_backend", "libc", "kernel")}
        if pr["kind"] == "loop":
            py_cf = share["libpython"] + share["_cffi_backend"]
            L.append(f"- **perf, in-process send+recv**: the Python interpreter {share['libpython']:.0f} %, cffi "
                     f"{share['_cffi_backend']:.0f} %, bus1py's C helper {share['_b1']:.0f} %, libc {share['libc']:.0f} % "
                     f"of the samples: the Python and cffi layers take {py_cf / max(share['_b1'] + share['libc'], 1e-9):.1f}x "
                     "the samples of the queue work (C helper and libc).")
        elif pr["kind"] == "raw":
            mutex = sum(p for p, k, sym in pr["symbols"] if "pthread_mutex" in sym)
            full = any("mutex_lock_full" in sym or "mutex_unlock_full" in sym for _, _, sym in pr["symbols"])
            top = [(p, sym) for p, k, sym in pr["symbols"] if "_b1" in k[-1]][:5]
            L.append(f"- **perf, raw C calls without the Python layer**: cffi's argument conversion "
                     f"{share['_cffi_backend']:.0f} %, bus1py's C helper {share['_b1']:.0f} %, pthread mutex calls "
                     f"{mutex:.0f} %" + (" (glibc's generic `_full` path of robust mutexes)" if full else "")
                     + f", the loop itself {share['libpython']:.0f} %. Hottest helper functions: "
                     + ", ".join(f"`{sym}` {p:.1f} %" for p, sym in top) + ".")
        elif pr["kind"] == "oneway":
            parts, hot = [], []
            for comm in ("b1b-sender", "b1b-receiver"):
                d = {k[1]: p for p, k, _ in pr["groups"] if len(k) == 2 and k[0] == comm}
                if d:
                    f = {w: sum(v for x, v in d.items() if w in x) for w in ("libpython", "_cffi_backend", "_b1", "kernel")}
                    parts.append(f"{comm[4:]}: {sum(d.values()):.0f} % of all samples (interpreter {f['libpython']:.0f}, "
                                 f"cffi {f['_cffi_backend']:.0f}, C helper {f['_b1']:.0f}, kernel {f['kernel']:.0f})")
                top = [(p, sym) for p, k, sym in pr["symbols"] if k[0] == comm and "_b1" in k[-1]][:3]
                if top:
                    hot.append(f"{comm[4:]} " + ", ".join(f"`{sym}` {p:.1f} %" for p, sym in top))
            if parts:
                L.append("- **perf, two-process one-way** (samples of both CPUs): " + "; ".join(parts) + ". "
                         + ("Hottest C-helper functions: " + "; ".join(hot) + "." if hot else ""))
    if futex:
        tot = {c: sum(v.values()) for c, v in futex.items()}
        mw = {c: v.get("mutex wait (lock contended)", 0) for c, v in futex.items()}
        waits = sum(mw.values())
        L.append(("- **Lock contention goes through the kernel**" if waits >= 0.01 else
                  "- **Lock contention rarely reaches the kernel**")
                 + ": in the two-process one-way run the processes make "
                 + " and ".join(f"{1000 * tot[c]:.1f} ({c[4:]})" for c in tot)
                 + " futex syscalls per 1,000 messages, of which contended-lock waits: "
                 + " and ".join(f"{1000 * mw[c]:.1f} ({c[4:]})" for c in mw) + ".")
    return L
