"""The report's multicast, object and in-process sections (2 to 5)."""
from __future__ import annotations

from .bus_channels import FANOUT_QUOTAS
from .common import NCPU, fmt_rate, fmt_ratio
from .perfprof import PERF_TITLES, PROFILE_FLAGS, short, what
from .prose import call_split, multicast_cpu_bound


def mark(ok):
    return "n/a (not measured in this run)" if ok is None else "**met**" if ok else "**not met**"


def multicast_section(add, mc, prof):
    add("## 2. Multicast to k receivers (64 B)")
    add("")
    add("Per-receiver delivery rate: messages each receiver got per second, from the first send to the last "
        "receiver's last recv (median of repetitions). `bus1py multicast` sends one transaction to k nodes; "
        "`bus1py k x unicast` and `posix_ipc MQ k x unicast` send the message k times; `spin_ns=0` is a bus "
        "whose receivers sleep on the futex at once instead of spinning; `bus1py topic` is a topic's "
        "`topic.send` to k subscribers reading `sub.recv()`. Every bus1py row runs on a bus whose quotas "
        f"hold a whole run ({', '.join(f'{k}=2**{v.bit_length() - 1}' for k, v in FANOUT_QUOTAS.items())}), "
        "as pyzmq runs at high-water mark 0: "
        "no sender is held back by a receiver's quota, no subscriber misses a message. Nothing is pinned: "
        f"k+1 processes share the {NCPU} CPUs as the scheduler places them.")
    add("")
    ks = sorted({k for _, k in mc})
    add("| variant | " + " | ".join(f"k={k}" for k in ks) + " | aggregate at k=" + str(ks[-1]) + " |")
    add("|---|" + "---:|" * (len(ks) + 1))
    for name in dict.fromkeys(n for n, _ in mc):
        cells = [fmt_rate(mc[(name, k)]["rate"]) if (name, k) in mc else "-" for k in ks]
        agg = mc.get((name, ks[-1]), {}).get("aggregate", 0)
        add(f"| {name} | " + " | ".join(cells) + f" | {fmt_rate(agg)} |")
    add("")
    bm = [mc.get(("bus1py multicast", k)) for k in ks]
    mq = [mc.get(("posix_ipc MQ k x unicast", k)) for k in ks]
    if all(bm) and all(mq):
        add("bus1py multicast / posix_ipc MQ per receiver: "
            + ", ".join(f"k={k}: {fmt_ratio(b['rate'] / q['rate'])}" for k, b, q in zip(ks, bm, mq)))
        add("")
    if bm[0]:
        add("bus1py multicast per-receiver rate relative to k=1: "
            + ", ".join(f"k={k}: {b['rate'] / bm[0]['rate']:.2f}" for k, b in zip(ks, bm) if b))
        add("")
    bound = multicast_cpu_bound(prof, ks)
    if bound:
        add("CPU budget: with the in-process costs of section 5 (one `Peer.recv` per receiver per message, one "
            "`Peer.send` to k nodes per message, nothing wasted on spinning, switching or cache misses), "
            f"{NCPU} cores can deliver at most " + ", ".join(f"k={k}: {fmt_rate(v)}msg/s" for k, v in bound.items())
            + " per receiver; a per-receiver rate above this bound needs cheaper calls or more cores.")
        add("")
    bb = multicast_cpu_bound(prof, [1, 8], batch=True)
    if bb and len(bb) == 2:
        add("With the batch calls (`send_many` of 64 to k nodes, `recv_many` of 64; section 5's per-message "
            f"costs of each), the same budget is k=1: {fmt_rate(bb[1])}msg/s and k=8: {fmt_rate(bb[8])}msg/s "
            f"per receiver: at k=8 that is {bb[8] / bb[1]:.2f} of the k=1 bound.")
        add("")
    add("![multicast](multicast.png)")
    add("")


PROMISES = (
    "### What each peer promises, and what it does not",
    "",
    "- **bus1py**: one order for every receiver of every message, multicast included, and a message caused by "
    "another (even through a pipe or a file) is received after it; `send` is committed when it returns (the "
    "message is in every destination's queue) or raises with nothing sent; nothing is dropped except messages "
    "to a destroyed node; `send` never blocks: a full receiver fails it (EDQUOT/EXFULL), and the rows retry.",
    "- **pyzmq** (ZeroMQ over `ipc://`): FIFO per connection only, no order across receivers or across "
    "senders; `send` returns once the message is queued for the context's I/O thread, not when it is "
    "delivered, so a process that exits without lingering loses what is queued (the rows close their sockets "
    "with linger -1 at exit); PUB/SUB drops what a subscriber gets over its high-water mark and everything "
    "sent before its subscription arrived (the rows: HWM 0, unbounded memory, and an XPUB sender waits for "
    "all k subscriptions); PUSH/PULL deals messages out to the pullers, it is not multicast.",
    "- **iceoryx2** (zero-copy shared memory, Python bindings): FIFO per publisher and subscriber, no order "
    "across publishers; `send` returns once the sample is in each connected subscriber's buffer; a subscriber "
    "gets nothing sent before its first `receive()` (the rows meet at a barrier after it), and by default a "
    "full subscriber buffer overwrites its oldest sample (the rows turn safe overflow off and the publisher "
    "retries until delivered); `receive()` never blocks, so the rows' receivers poll.",
    "- **shared_memory + queue of names**: nothing beyond the queue's FIFO; each segment's lifetime is the "
    "program's to manage (the row unlinks a segment once every receiver has closed it).",
    "",
)


def floor_section(add, uni):
    """Each 64 B bus1py row beside what its calls cost on one CPU (floor.py)."""
    rows, floor = uni["rows"], uni.get("floor") or {}
    got = [(name, f, max((r for (n, _, s), r in rows.items() if n == name and s == 64), key=lambda r: r["rate"],
                         default=None)) for name, f in floor.items()]
    got = [(name, f, r) for name, f, r in got if r]
    if not got:
        return
    add("### 64 B: each bus1py row against its one-CPU floor")
    add("")
    add("The same calls the row makes (its channel's sender and receiver), made in one thread: sends and "
        "receives timed apart in stretches of 256 messages, thread CPU ns per message, the minimum over rounds. "
        "`two CPUs could reach` is one message per the dearer side's cost, a pipeline with nothing crossing "
        "cores; the two-process row (best placement) shows each side's CPU ns per message beside it, and the "
        "difference is what crossing cores costs: cache lines that move, spinning, sleeping and waking.")
    add("")
    add("| row | one CPU: send ns | recv ns | two CPUs could reach | two processes | of the floor "
        "| sender CPU ns | receiver CPU ns |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, f, r in got:
        add(f"| {name} | {f['send_ns']:,.0f} | {f['recv_ns']:,.0f} | {fmt_rate(f['reach'])}msg/s | "
            f"{fmt_rate(r['rate'])}msg/s | {r['rate'] / f['reach']:.2f} | {r['tx_cpu_ns']:,.0f} "
            f"({r['tx_cpu_ns'] - f['send_ns']:+,.0f}) | {r['rx_cpu_ns']:,.0f} ({r['rx_cpu_ns'] - f['recv_ns']:+,.0f}) |")
    add("")


def objects_section(add, ob):
    add("## 2b. Python objects: a 1 MiB numpy array to k receivers")
    add("")
    add("Per-receiver rate of a 1 MiB uint8 array, sent as an object and received as an array each receiver "
        "reads (its last 64 bytes are compared), median of repetitions, nothing pinned. `bus1py send_obj + obj()` "
        "pickles with protocol 5 and writes the array straight into one pool record for all k (`Peer.send_obj`), "
        "each receiver views it in place (`recv(copy=False).obj()`) and releases it; `pyzmq send(copy=False)` "
        "sends the array without a Python copy (PUSH/PULL to one, PUB/SUB to k; the kernel and the receiver's "
        "frame copy it); `shared_memory + queue of names` writes each array into a new segment and puts its name "
        "on each receiver's queue, the sender unlinking it once every receiver has closed it.")
    add("")
    ks = sorted({k for _, k in ob})
    add("| variant | " + " | ".join(f"k={k} msg/s | sender CPU us/msg | receiver CPU us/msg" for k in ks) + " |")
    add("|---|" + "---:|---:|---:|" * len(ks))
    for name in dict.fromkeys(n for n, _ in ob):
        cells = []
        for k in ks:
            r = ob.get((name, k))
            cells += [fmt_rate(r["rate"]), f"{r['tx_cpu_ns'] / 1e3:.1f}", f"{r['rx_cpu_ns'] / 1e3:.1f}"] if r else ["-"] * 3
        add(f"| {name} | " + " | ".join(cells) + " |")
    add("")


def inproc_sections(add, cfg, res):
    qc, mem, prof = res.get("queue"), res.get("memory"), res.get("profile")
    perf_rows, futex, uni = res.get("perf"), res.get("futex"), res.get("unicast")
    if qc:
        rows = qc["rows"]
        add("## 3. Queue operation cost vs queue length")
        add("")
        add("In one process, one receiver peer per m, all in one segment: each queue is first filled "
            f"with m committed entries, then {cfg.qc_pairs:,} steady-state pairs (one send from another "
            f"peer, one recv) are timed on each queue in turn, {cfg.qc_reps} rounds (interleaved, so "
            "load from elsewhere hits every m alike), median reported; each queue stays at its m. "
            "`raw cffi` calls "
            "`lib.b1_send` + `lib.b1_recv` directly; `C side` is the minimum over the "
            "repetitions minus the minimum cost of two empty cffi calls; `API` is `Peer.send` + `Peer.recv(0)`. `treap depth` is the length of the "
            "front's path (what a dequeue walks). Bus limits: "
            + ", ".join(f"{k}={v:,}" for k, v in qc["limits"].items()) + ".")
        add("")
        add("| m | raw cffi ns/pair (median) | raw cffi ns/pair (min) | C side ns/pair | API ns/pair | treap depth | fill time s |")
        add("|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            add(f"| {r['m']:,} | {r['raw_ns']:.0f} | {r['raw_min_ns']:.0f} | {r['c_ns']:.0f} | {r['api_ns']:.0f} | {r['depth']} | {r['fill_s']:.2f} |")
        add("")
        a0, b0 = qc["fit"]
        add(f"cost(m={rows[-1]['m']:,}) / cost(m={rows[0]['m']}): raw **{qc['ratio_raw_ns']:.2f}x**, "
            f"(of the minima {qc['ratio_raw_min_ns']:.2f}x), C side {qc['ratio_c_ns']:.2f}x, API {qc['ratio_api_ns']:.2f}x. Least-squares fit of the "
            f"C side: {a0:.0f} {'+' if b0 >= 0 else '-'} {abs(b0):.1f} x log2(m) ns.")
        add("")
        add("![queue cost](queue_cost.png)")
        add("")
    if mem:
        add("## 4. Memory per idle peer")
        add("")
        segs = mem["segments"]
        add(f"`bus.info()['segment_size']` with default limits and max_peers = 256: {segs[256]:,} B; "
            f"with max_peers = 1024: {segs[1024]:,} B. Difference / 768 = **{mem['per_peer']:,.0f} B per "
            f"peer slot** (target < 64 KiB: {mark(mem['per_peer'] < 65536)}). Nodes, handles, "
            "queue entries and the payload pool are bus-wide tables, not per peer.")
        add("")
    if prof:
        add("## 5. Where bus1py's time goes")
        add("")
        add("### Per call, in-process (queue depth 0 or 1, no other process, no wakeups)")
        add("")
        add(f"In-process, {cfg.prof_n:,} iterations per row. Every loop alternates one send and one "
            "recv, so the queue holds 0 or 1 message as in a ping-pong. `send:`/`recv:`/`step` rows "
            "time each call alone with `perf_counter_ns` around it and give the **median** call "
            "minus one timer read (a preemption by another job hits one sample, not the median; "
            "the harness's own wrapper call is included). `pair`, `peer pair` and "
            "empty-call rows time whole loops in this thread's CPU time (preemption does not "
            "count), minimum of 5 loops. `raw cffi` rows call the C helper directly with prepared "
            "arguments; `API` rows go through `Peer.send`/`Peer.recv`.")
        add("")
        add("| what | ns |")
        add("|---|---:|")
        for k, v in prof.items():
            add(f"| {k} | {v:.0f} |")
        add("")
        sp = call_split(prof)
        call = prof.get("timer: empty cffi call", 0)
        steps = [prof.get(f"send step: b1_tx_{x} (raw cffi)") for x in ("prepare", "stage", "stamp", "commit")]
        if sp:
            (api_s, bus_s, rest_s), (api_r, bus_r, rest_r) = sp["send"], sp["recv"]
            add(f"- **per send**: {api_s:.0f} ns through `Peer.send`, a C method (csrc/py/peer.c) calling "
                f"`b1_frame_send`: the bus's work is ~{bus_s:.0f} ns (the raw cffi `b1_send` call "
                f"{bus_s + call:.0f} ns minus an empty cffi call, {call:.0f} ns, which the method does not "
                f"pay) and {rest_s:.0f} ns is the method's own (the call, the per-thread frame lookup, the "
                "type checks of destinations and payload, building the returned stamp tuple)."
                + (" Run step by step the same send costs prepare {:.0f} + stage {:.0f} + stamp {:.0f} + "
                   "commit {:.0f} ns (each with its own cffi call): resolving the handle and allocating "
                   "the entry and pool record, then one lock/unlock per queue operation "
                   "(destination, sender, destination).".format(*steps) if all(steps) else ""))
            add(f"- **per recv**: {api_r:.0f} ns through `Peer.recv`, a C method calling `b1_frame_recv`: "
                f"the bus's work is ~{bus_r:.0f} ns (the raw cffi `b1_recv_wait` call {bus_r + call:.0f} ns "
                "minus an empty cffi call: one lock/unlock, the tree removal, the payload copy, freeing "
                f"the entry and record) and {rest_r:.0f} ns is the method's own (timeout handling, the "
                "payload's bytes, building the `Message` and its stamp).")
            pair_api = prof.get("pair: Peer.send + Peer.recv (API), depth 0/1")
            bp = uni and uni["rows"].get(("bus1py", "pinned", 64))
            b = bp if bp and "rtt_med" in bp else None
            if b and pair_api:
                half = b["rtt_med"] * 1e3 / 2
                extra = half - pair_api
                add(f"- **across processes** (64 B ping-pong) half a round trip is {half:.0f} ns, against "
                    f"{pair_api:.0f} ns for an in-process send+recv pair: "
                    + (f"crossing to the other CPU adds ~{extra:.0f} ns per hop (the commit's cache lines "
                       "reaching the spinning receiver, and the receiver's lock/tree lines going back)."
                       if extra > 0.1 * pair_api else
                       f"the difference ({extra:+.0f} ns) is within 10 % of the in-process pair."))
            add("")
    for pr in perf_rows or ():
        kind = pr["kind"]
        add(f"### perf: {PERF_TITLES[kind]}")
        add("")
        flag = f"{PROFILE_FLAGS[kind]} {pr.get('seconds', '')}".strip()
        add(f"`perf record -e cpu-clock -F 2999 -D 1200 -- .venv/bin/python tools/bench {flag}` "
            "(a software clock: the VM exposes no cycle counter; `-D` skips interpreter start-up). "
            + ("Processes: `b1b-sender` runs `Peer.send` in a loop, `b1b-receiver` `Peer.recv`, "
               "pinned to CPU 0 and CPU 1; percentages are of all samples of both." if kind == "oneway" else
               "One process, `Peer.send` then `Peer.recv` on the same queue, in a loop." if kind == "loop" else
               "One process, the C calls bound with functools.partial (cffi still converts the "
               "arguments), send then recv on the same queue: what the C helper itself costs."))
        add("")
        add("Samples by " + ("process and " if kind == "oneway" else "") + "object:")
        add("")
        add("| % | " + ("process | " if kind == "oneway" else "") + "object | what it is |")
        add("|---:|" + ("---|" if kind == "oneway" else "") + "---|---|")
        for p, keys, _ in pr["groups"]:
            dso = keys[-1]
            add(f"| {p:.1f} | " + ("".join(f"{k} | " for k in keys[:-1])) + f"{dso} | {what(dso)} |")
        add("")
        add("Hottest symbols (>= 0.7 % of samples):")
        add("")
        add("| % | " + ("process | " if kind == "oneway" else "") + "object | symbol |")
        add("|---:|" + ("---|" if kind == "oneway" else "") + "---|---|")
        for p, keys, sym in pr["symbols"][:25]:
            add(f"| {p:.1f} | " + ("".join(f"{k} | " for k in keys[:-1])) + f"{short(keys[-1])} | `{sym}` |")
        add("")
    if futex:
        add("### Futex syscalls in the two-process one-way run")
        add("")
        add("`perf record -e syscalls:sys_enter_futex -- .venv/bin/python tools/bench --profile-oneway 1` "
            "(64 B, pinned), every futex call of the two processes, per message. A "
            "robust mutex's FUTEX_WAIT carries the owner's tid with FUTEX_WAITERS set and its unlock "
            "wakes 1; the queue's reader wake-up (`b1_wake`) wakes all, its sleeper waits on the "
            "queue's wake sequence number.")
        add("")
        kinds = sorted({k for v in futex.values() for k in v})
        add("| process | " + " | ".join(kinds) + " | all |")
        add("|---|" + "---:|" * (len(kinds) + 1))
        for comm, v in futex.items():
            add(f"| {comm} | " + " | ".join(f"{v.get(k, 0):.4f}" for k in kinds) + f" | {sum(v.values()):.3f} |")
        add("")
