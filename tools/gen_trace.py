#!/usr/bin/env python3
"""Generate a large synthetic bus1py trace (SPEC section 7) fast, with numpy and pyarrow.

Invariants: the trace is that of a correct bus -- every message gets a global time g, its
stamp is (2(g+1), sender, sender's tx count), each destination d delivers it at time
g + lag[d] (a fixed lag per destination, so every process delivers in stamp order), side
signals arrive after they are sent, and every event's seq is its rank in its process's time
order. So all five properties hold, and the stamps agree with happened-before (a send's
time exceeds all times its process has heard of). It is generated in time segments, each sorted and written
on its own, so memory stays bounded whatever --events is (deliveries that fall past a
segment's end are carried into the next one).

    tools/gen_trace.py OUT_DIR --events 10000000 --procs 64 [--no-stamps] [--signals 0.02]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bus1py.schema import DELIVER, SEND, SIGNAL_RECV, SIGNAL_SEND, schema  # noqa: E402

# the kinds this generator writes, indexed by its int8 kind codes below
KIND = np.array([SEND, DELIVER, SIGNAL_SEND, SIGNAL_RECV], dtype=object)
K_SEND, K_DELIVER, K_SIGS, K_SIGR = 0, 1, 2, 3


def generate(out, events, procs, multicast=0.1, signals=0.02, stamps=True, seed=1,
             segment_events=4_000_000, max_lag=256, quiet=False):
    rng = np.random.default_rng(seed)
    _TX_BY_MSG.clear()  # message ids restart at 1 in every trace
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    lag = rng.integers(1, max_lag, procs)            # per-destination delivery lag
    # expected events per message: 1 send + mean dests + 2 * signals
    mean_dests = (1 - multicast) + multicast * 3.0
    per_msg = 1 + mean_dests + 2 * signals
    n_msgs = max(1, int(events / per_msg))
    seg_msgs = max(1, int(segment_events / per_msg))
    seq_off = np.zeros(procs, dtype=np.int64)
    tx_off = np.zeros(procs, dtype=np.int64)
    carry = None                                     # (process, time, kind, msg, sender, g)
    written = 0
    nfile = 0
    sch = schema()
    t0 = time.perf_counter()
    g0 = 0
    while g0 < n_msgs or (carry is not None and len(carry[0])):
        g1 = min(n_msgs, g0 + seg_msgs)
        m = g1 - g0
        g = np.arange(g0, g1, dtype=np.int64)
        sender = rng.integers(0, procs, m).astype(np.int32)
        # destinations: unicast or a multicast to 2..4 distinct processes
        k = np.where(rng.random(m) < multicast, rng.integers(2, 5, m), 1)
        k = np.minimum(k, procs)
        rep = np.repeat(np.arange(m), k)
        # distinct dests per message: a random start plus distinct offsets mod procs
        within = np.arange(len(rep)) - np.repeat(np.cumsum(k) - k, k)
        start = rng.integers(0, procs, m)
        dest = ((start[rep] + within) % procs).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int32)
        # events of this batch of messages (time unit: 4 per message, so kinds interleave)
        s_time = g * 4
        d_time = g[rep] * 4 + lag[dest] * 4 + 1
        nsig = int(m * signals)
        sg = rng.integers(g0, g1, nsig).astype(np.int64) if nsig else np.zeros(0, np.int64)
        sig_from = rng.integers(0, procs, nsig).astype(np.int32)
        sig_to = rng.integers(0, procs, nsig).astype(np.int32)
        sig_id = np.arange(nsig, dtype=np.int64) + g0 * 4 + 1
        sig_lag = rng.integers(1, max_lag, nsig)
        proc = np.concatenate([sender, dest, sig_from, sig_to])
        tim = np.concatenate([s_time, d_time, sg * 4 + 2, sg * 4 + sig_lag * 4 + 3])
        kind = np.concatenate([np.full(m, K_SEND, np.int8), np.full(len(rep), K_DELIVER, np.int8),
                               np.full(nsig, K_SIGS, np.int8), np.full(nsig, K_SIGR, np.int8)])
        msg = np.concatenate([g + 1, g[rep] + 1, sig_id, sig_id])
        snd = np.concatenate([sender, sender[rep], sig_from, sig_from])
        gg = np.concatenate([g, g[rep], sg, sg])
        # per-send dests, kept by message index for the send rows
        send_dest_of = (offsets, dest)
        idx_in_batch = np.concatenate([np.arange(m), rep, np.full(2 * nsig, -1)])
        cur = (proc, tim, kind, msg, snd, gg, idx_in_batch)
        if carry is not None:
            cur = tuple(np.concatenate([a, b]) for a, b in zip(carry, cur))
        end_time = g1 * 4 if g1 < n_msgs else np.iinfo(np.int64).max
        now = cur[1] < end_time
        carry = tuple(a[~now] for a in cur)
        carry_dests = send_dest_of  # sends are never carried (their time < end_time)
        proc, tim, kind, msg, snd, gg, idx_in_batch = (a[now] for a in cur)
        order = np.lexsort((tim, proc))
        proc, tim, kind, msg, snd, gg, idx_in_batch = (a[order] for a in
                                                       (proc, tim, kind, msg, snd, gg,
                                                        idx_in_batch))
        n = len(proc)
        # seq: rank within process in this segment + what earlier segments used
        first = np.searchsorted(proc, np.arange(procs), side="left")
        counts = np.bincount(proc, minlength=procs)
        seq = np.arange(n, dtype=np.int64) - np.repeat(first, counts) + np.repeat(seq_off, counts)
        seq_off += counts
        is_send = kind == K_SEND
        is_msg = is_send | (kind == K_DELIVER)
        # stamps: ts = 2(g+1), peer = sender, tx = the sender's running count of sends
        send_rows = np.flatnonzero(is_send)
        tx = np.full(n, -1, dtype=np.int64)
        if len(send_rows):
            sp = proc[send_rows]
            o = np.lexsort((gg[send_rows], sp))
            sps = sp[o]
            f2 = np.searchsorted(sps, np.arange(procs), side="left")
            c2 = np.bincount(sps, minlength=procs)
            rank = np.arange(len(sps)) - np.repeat(f2, c2) + np.repeat(tx_off, c2)
            tx_off += c2
            tx_sorted = np.empty(len(sps), dtype=np.int64)
            tx_sorted[o] = rank
            tx[send_rows] = tx_sorted
        # dests lists for send rows (sends always belong to the current batch)
        lst_off = np.zeros(n + 1, dtype=np.int32)
        lens = np.zeros(n, dtype=np.int32)
        bi = idx_in_batch[send_rows]
        lens[send_rows] = carry_dests[0][bi + 1] - carry_dests[0][bi]
        lst_off[1:] = np.cumsum(lens)
        flat = _gather_dests(carry_dests, bi)
        dests = pa.ListArray.from_arrays(pa.array(lst_off),
                                         pa.array(flat, pa.int32()),
                                         mask=pa.array(~is_send))
        # data is addressed to each receiver's node 1000+p; a unicast send names it
        uni_dest = np.full(n, -1, dtype=np.int64)
        if len(send_rows):
            firstd = carry_dests[1][carry_dests[0][bi]]
            uni_dest[send_rows] = np.where(lens[send_rows] == 1, firstd, -1)
        node = np.where(kind == K_DELIVER, 1000 + proc.astype(np.int64),
                        np.where(uni_dest >= 0, 1000 + uni_dest, -1))
        node_mask = node < 0
        ts = 2 * (gg + 1)
        cols = {
            "process": pa.array(proc, pa.int32()),
            "seq": pa.array(seq, pa.int64()),
            "kind": pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)),
                                                   pa.array(list(KIND))).cast(pa.string()),
            "msg": pa.array(msg, pa.int64()),
            "dests": dests,
            "node": pa.array(node, pa.int64(), mask=node_mask),
            "wall_ns": pa.array(tim, pa.int64()),
            "stamp_ts": pa.array(ts, pa.int64(), mask=~is_msg | (not stamps)),
            "stamp_peer": pa.array(snd.astype(np.int64), pa.int64(),
                                   mask=~is_msg | (not stamps)),
            "stamp_tx": pa.array(np.where(is_send, tx, 0), pa.int64(),
                                 mask=~is_send | (not stamps)),
        }
        # deliver rows carry the message's stamp: its tx comes from the send row
        if stamps:
            cols["stamp_tx"] = _deliver_tx(cols, is_send, kind, msg, tx)
        table = pa.table(cols, schema=sch)
        per_file = 1_000_000
        for i in range(0, n, per_file):
            pq.write_table(table.slice(i, per_file),
                           os.path.join(out, f"part-{nfile:05d}.parquet"),
                           compression="snappy")
            nfile += 1
        written += n
        if not quiet:
            rate = written / (time.perf_counter() - t0)
            print(f"\r{written:,} events, {nfile} files ({rate:,.0f} events/s)", end="",
                  file=sys.stderr)
        g0 = g1
        if g0 >= n_msgs and not len(carry[0]):
            break
    if not quiet:
        print(file=sys.stderr)
    return written, nfile


_TX_BY_MSG = {}


def _deliver_tx(cols, is_send, kind, msg, tx):
    # The tx of a message is known where it is sent; deliveries may land in a later segment,
    # so remember send tx by message id across segments (a sorted array per segment).
    global _TX_BY_MSG
    send_msgs = msg[is_send]
    send_tx = tx[is_send]
    o = np.argsort(send_msgs)
    _TX_BY_MSG["msgs"] = np.concatenate([_TX_BY_MSG.get("msgs", np.zeros(0, np.int64))[-4_000_000:],
                                         send_msgs[o]])
    _TX_BY_MSG["tx"] = np.concatenate([_TX_BY_MSG.get("tx", np.zeros(0, np.int64))[-4_000_000:],
                                       send_tx[o]])
    ms, tt = _TX_BY_MSG["msgs"], _TX_BY_MSG["tx"]
    o2 = np.argsort(ms, kind="stable")
    ms, tt = ms[o2], tt[o2]
    _TX_BY_MSG["msgs"], _TX_BY_MSG["tx"] = ms, tt
    is_del = kind == K_DELIVER
    out = np.where(is_send, tx, 0)
    pos = np.searchsorted(ms, msg[is_del])
    pos = np.minimum(pos, len(ms) - 1)
    out[is_del] = tt[pos]
    return pa.array(out, pa.int64(), mask=~(is_send | is_del))


def _gather_dests(dests_of, bi):
    offsets, flat = dests_of
    if len(bi) == 0:
        return np.zeros(0, np.int32)
    lens = offsets[bi + 1] - offsets[bi]
    starts = np.repeat(offsets[bi], lens)
    within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
    return flat[starts + within]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=float, default=1e6)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--multicast", type=float, default=0.1)
    ap.add_argument("--signals", type=float, default=0.02)
    ap.add_argument("--no-stamps", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment", type=float, default=4e6, help="events per generated segment")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    n, files = generate(a.out, int(a.events), a.procs, a.multicast, a.signals,
                        not a.no_stamps, a.seed, int(a.segment))
    print(f"wrote {n:,} events in {files} files to {a.out} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
