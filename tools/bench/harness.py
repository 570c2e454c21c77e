"""Running one measurement across processes: a one-way stream from one sender to k
receivers, and a ping-pong.  Cross-process times are time.perf_counter_ns (CLOCK_MONOTONIC,
comparable across processes); each process also reports its own CPU time and context
switches for the timed part."""
from __future__ import annotations

import gc
import resource
import time
from array import array

from .common import CTX, payload_of, pin, set_comm
from .transports import RETRY


def _usage():
    """(process CPU ns, involuntary context switches, voluntary ones) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time_ns(), ru.ru_nivcsw, ru.ru_nvcsw


def _put_usage(acct, j, before):
    after = _usage()
    for x in range(3):
        acct[3 * j + x] = after[x] - before[x]


def resend(send, payload, err):
    """bus1py's send never blocks: it refuses with EXFULL/EDQUOT while the receiver is full.
    The harness stands in for a blocking send by retrying (counted in send.retries); any
    other error is raised."""
    while True:
        if err.errno not in RETRY:
            raise err
        send.retries[0] += 1
        try:
            send(payload)
            return
        except OSError as e:
            err = e


def _send_n(send, payload, n, batch):
    if batch:
        chunk = [payload] * batch
        full, rest = divmod(n, batch)
        for _ in range(full):
            send(chunk)
        if rest:
            send(chunk[:rest])
        return
    for _ in range(n):
        try:
            send(payload)
        except OSError as e:
            resend(send, payload, e)


def _recv_n(recv, n, batch):
    """Receive exactly n messages; returns the last one."""
    if batch:
        got, last = 0, None
        while got < n:
            msgs = recv(min(batch, n - got))
            got += len(msgs)
            last = msgs[-1]
        return last
    for _ in range(n - 1):
        recv()
    return recv()


def _sender_proc(ch, payload, n, warm, cpu, warm_done, ts, acct):
    set_comm("b1b-sender")
    gc.disable()
    pin(cpu)
    send = ch.sender()
    _send_n(send, payload, warm, ch.send_batch)
    warm_done.wait()
    u0 = _usage()
    t0 = time.perf_counter_ns()
    _send_n(send, payload, n, ch.send_batch)
    t1 = time.perf_counter_ns()
    _put_usage(acct, 0, u0)
    ts[0] = t0
    ts[1] = t1
    ts[len(ts) - 1] = getattr(send, "retries", [0])[0]


def _receiver_proc(ch, i, n, warm, size, cpu, warm_left, warm_done, ts, errs, acct):
    set_comm("b1b-receiver")
    gc.disable()
    pin(cpu)
    recv = ch.receiver(i)
    if warm:
        _recv_n(recv, warm, ch.recv_batch)
    with warm_left.get_lock():
        warm_left.value -= 1
        if warm_left.value == 0:
            warm_done.set()
    u0 = _usage()
    last = _recv_n(recv, n, ch.recv_batch)
    ts[2 + i] = time.perf_counter_ns()
    _put_usage(acct, 1 + i, u0)
    # every message was counted; the last is checked whole (a zero-copy receiver hands back
    # only its length, its view released already)
    errs[i] = int(last != size if isinstance(last, int) else bytes(last) != payload_of(size))


def join(procs, timeout):
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    bad = [p for p in procs if p.exitcode != 0]
    if hung or bad:
        raise RuntimeError(f"benchmark worker failed (hung: {len(hung)}, exit codes: "
                           f"{[p.exitcode for p in procs]})")


def run_oneway(ch, size, n, warm, tx_cpu=0, rx_cpus=(1,), timeout=120.0):
    """One sender, ch.k receivers.  Returns the rate per receiver, the send-side rate and
    each side's CPU time and context switches per message."""
    k = ch.k
    payload = payload_of(size)
    ts = CTX.Array("q", 3 + k, lock=False)  # t0, sender done, k receivers done, retries
    errs = CTX.Array("i", k, lock=False)
    acct = CTX.Array("q", 3 * (k + 1), lock=False)  # per process: CPU ns, invol., vol. switches
    warm_left = CTX.Value("i", k)
    warm_done = CTX.Event()
    procs = [CTX.Process(target=_receiver_proc,
                         args=(ch, i, n, warm, size, rx_cpus[i % len(rx_cpus)] if rx_cpus else None,
                               warm_left, warm_done, ts, errs, acct), daemon=True) for i in range(k)]
    procs.append(CTX.Process(target=_sender_proc, args=(ch, payload, n, warm, tx_cpu, warm_done, ts, acct),
                             daemon=True))
    for p in procs:
        p.start()
    join(procs, timeout)
    if any(errs[:]):
        raise RuntimeError(f"{ch.name}: a receiver's last message is not the payload sent")
    t0, t_send = ts[0], ts[1]
    t_end = max(ts[2:2 + k])
    rx = range(1, k + 1)
    return {"rate": n / ((t_end - t0) / 1e9), "send_rate": n / ((t_send - t0) / 1e9),
            "retries": ts[2 + k], "wall_ns": (t_end - t0) / n,
            "tx_cpu_ns": acct[0] / n, "tx_invol": acct[1], "tx_vol": acct[2],
            "rx_cpu_ns": sum(acct[3 * j] for j in rx) / k / n,
            "rx_invol": sum(acct[3 * j + 1] for j in rx) / k, "rx_vol": sum(acct[3 * j + 2] for j in rx) / k}


def _echo_proc(fwd, back, total, cpu):
    set_comm("b1b-echo")
    gc.disable()
    pin(cpu)
    recv = fwd.receiver(0)
    send = back.sender()
    for _ in range(total):
        send(recv())


def _ping_proc(fwd, back, payload, n, warm, cpu, out):
    set_comm("b1b-ping")
    gc.disable()
    pin(cpu)
    send = fwd.sender()
    recv = back.receiver(0)
    for _ in range(warm):
        send(payload)
        recv()
    lat = array("q", bytes(8 * n))
    pc = time.perf_counter_ns
    for i in range(n):
        t = pc()
        send(payload)
        recv()
        lat[i] = pc() - t
    out.send_bytes(lat.tobytes())


def run_pingpong(fwd, back, size, n, warm, cpus=(0, 1), timeout=120.0):
    """Round trips; returns the list of round-trip times in ns."""
    payload = bytes(size)
    r, w = CTX.Pipe(duplex=False)
    echo = CTX.Process(target=_echo_proc, args=(fwd, back, n + warm, cpus[1]), daemon=True)
    ping = CTX.Process(target=_ping_proc, args=(fwd, back, payload, n, warm, cpus[0], w), daemon=True)
    echo.start()
    ping.start()
    w.close()
    if not r.poll(timeout):
        join([echo, ping], 0.1)
        raise RuntimeError(f"{fwd.name}: ping-pong timed out")
    lat = array("q")
    lat.frombytes(r.recv_bytes())
    r.close()
    join([echo, ping], timeout)
    return list(lat)
