"""Section 1d: a call's round trip -- bus1py's `call`/`reply` beside a raw send/recv ping-pong
on the same bus and pyzmq REQ/REP over ipc://, two processes each, in the same run.

Invariants: the three rows run interleaved, repetition by repetition, under the same
placement (pinned to two CPUs when the run pins), so a load that comes and goes falls on
all of them alike; every sample is one round trip timed at the caller with
time.perf_counter_ns; the result is the median and p99 over all samples of a row.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from array import array

from .common import CTX, NCPU, pin, set_comm

ROWS = ("bus1py call/reply", "bus1py send/recv ping-pong", "pyzmq REQ/REP")
SIZE = 64


def _server(row, name_or_url, ready, n, cpu):
    pin(cpu)
    set_comm("b1b-call-srv")
    if row == "pyzmq REQ/REP":
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.REP)
        s.bind(name_or_url)
        ready.send(None)
        for _ in range(n):
            s.send(s.recv())
        s.close(linger=-1)
        ctx.term()
        return
    import bus1py
    bus = bus1py.Bus.open(name_or_url)
    peer = bus.peer()
    node = peer.create_node()
    peer.publish("svc", node)
    ready.send(None)
    if row == "bus1py call/reply":
        for _ in range(n):
            m = peer.recv(node=node)
            m.reply(m.payload)
    else:
        back = peer.recv().handles[0]  # the caller's node, sent with its first message
        peer.send(back, b"")
        for _ in range(n):
            peer.send(back, peer.recv().payload)


def _client(row, name_or_url, n, warm, cpu, out):
    pin(cpu)
    set_comm("b1b-call-cli")
    payload = bytes(SIZE)
    if row == "pyzmq REQ/REP":
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.REQ)
        s.connect(name_or_url)

        def rt():
            s.send(payload)
            s.recv()
    else:
        import bus1py
        peer = bus1py.Bus.open(name_or_url).peer()
        h = peer.lookup("svc")
        if row == "bus1py call/reply":
            def rt():
                peer.call(h, payload)
        else:
            mine = peer.create_node()
            peer.send(h, b"", [mine])
            peer.recv()
            send, recv = peer.send, peer.recv

            def rt():
                send(h, payload)
                recv()
    for _ in range(warm):
        rt()
    lat = array("q", bytes(8 * n))
    pc = time.perf_counter_ns
    for i in range(n):
        t = pc()
        rt()
        lat[i] = pc() - t
    out.send_bytes(lat.tobytes())


def run_row(row, n, warm, cpus, timeout=120.0):
    """One repetition of a row: the round-trip times in ns."""
    import bus1py
    bus = url = None
    if row == "pyzmq REQ/REP":
        path = os.path.join(tempfile.gettempdir(), f"b1bench-call-{os.getpid()}-{os.urandom(4).hex()}")
        url = "ipc://" + path
    else:
        bus = bus1py.Bus.create(max_peers=8)
        url = bus.name
    ready_r, ready_w = CTX.Pipe(duplex=False)
    out_r, out_w = CTX.Pipe(duplex=False)
    srv = CTX.Process(target=_server, args=(row, url, ready_w, n + warm, cpus[1]), daemon=True)
    srv.start()
    try:
        if not ready_r.poll(timeout):
            raise RuntimeError(f"{row}: the server did not start")
        ready_r.recv()
        cli = CTX.Process(target=_client, args=(row, url, n, warm, cpus[0], out_w), daemon=True)
        cli.start()
        if not out_r.poll(timeout):
            raise RuntimeError(f"{row}: the round trips timed out")
        lat = array("q")
        lat.frombytes(out_r.recv_bytes())
        cli.join(timeout)
        srv.join(timeout)
        return list(lat)
    finally:
        for p in (srv,):
            if p.is_alive():
                p.kill()
                p.join()
        if bus is not None:
            bus.close()
            bus.unlink()
        if row == "pyzmq REQ/REP":
            try:
                os.unlink(url[len("ipc://"):])
            except OSError:
                pass


def bench_calls(cfg, progress=None, task=None):
    """{row: {"rtt_med", "rtt_p99" (us), "n"}} and the ratio of the call to pyzmq's."""
    cpus = (0, 1) if cfg.pin and NCPU >= 2 else (None, None)
    samples = {r: [] for r in ROWS}
    rep_meds = {r: [] for r in ROWS}
    for _ in range(cfg.lat_reps):
        for row in ROWS:
            lat = run_row(row, cfg.n_rtt, max(200, cfg.n_rtt // 10), cpus)
            rep_meds[row].append(statistics.median(lat) / 1e3)
            samples[row] += lat
            if progress is not None:
                progress.advance(task)
    rows = {}
    for row, s in samples.items():
        s.sort()
        rows[row] = {"rtt_med": statistics.median(s) / 1e3, "rtt_p99": s[int(0.99 * (len(s) - 1))] / 1e3,
                     "n": len(s), "rep_meds": rep_meds[row]}
    return {"rows": rows, "pinned": cpus != (None, None),
            "call_over_zmq": rows[ROWS[0]]["rtt_med"] / rows[ROWS[2]]["rtt_med"],
            "call_over_raw": rows[ROWS[0]]["rtt_med"] / rows[ROWS[1]]["rtt_med"]}


def section(add, res):
    """Section 1d of BENCHMARKS.md from bench_calls' result."""
    add("## 1d. A call's round trip: call/reply against a raw ping-pong and pyzmq REQ/REP (64 B)")
    add("")
    add("Two processes, a client and a service, one request and one reply per sample, timed at the client; "
        "the three rows interleaved repetition by repetition in the same run"
        f"{', pinned to two CPUs' if res['pinned'] else ', unpinned'}. `call/reply` is `peer.call(h, p)` against "
        "a service looping `m = peer.recv(node=svc); m.reply(m.payload)`: a reply node, a tag and the "
        "capability's release on top of the raw ping-pong's `send` + `recv` each way.")
    add("")
    add("| row | median us | p99 us | samples | each repetition's median us |")
    add("|---|---:|---:|---:|---|")
    for row, r in res["rows"].items():
        add(f"| {row} | {r['rtt_med']:.1f} | {r['rtt_p99']:.1f} | {r['n']:,} | "
            f"{', '.join(f'{m:.1f}' for m in r['rep_meds'])} |")
    add("")
    add(f"The call's median is {res['call_over_zmq']:.2f} of pyzmq REQ/REP's (target: at most 1/3) and "
        f"{res['call_over_raw']:.2f}x the raw ping-pong's.")
    add("")
