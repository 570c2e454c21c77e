"""The two-process sections (1: unicast rows and round trips, 1b: the payload sweep,
2: multicast) and the memory section.  Repetitions are interleaved (rep 1 of every row, then
rep 2, ...) so a burst of load from elsewhere on the machine hits all rows alike."""
from __future__ import annotations

import statistics
from dataclasses import replace

import bus1py

from .common import NCPU, SIZES, cpus, pct
from .floor import bench_floor
from .harness import run_oneway, run_pingpong
from .rows import multicast_variants, object_variants, unicast_transports

RUN_KEYS = ("wall_ns", "tx_cpu_ns", "rx_cpu_ns", "tx_invol", "rx_invol", "tx_vol", "rx_vol")


def placed(cfg):
    """The two-process transports, each with the placements this run measures."""
    ts = unicast_transports(cfg.batch)
    if not cfg.pin or NCPU < 2:  # nothing to pin to: every row runs once, placed by the scheduler
        ts = [replace(t, placements=("unpinned",)) for t in ts]
    return ts


def _summarise(acc, n, with_rtt):
    out = {"rate": statistics.median(acc["rates"]), "rates": acc["rates"],
           "send_rate": statistics.median(acc["srates"]), "retries": acc["retries"] / len(acc["rates"]) / n,
           "n": n, **{k: statistics.median(x[k] for x in acc["runs"]) for k in RUN_KEYS}}
    if with_rtt:
        lat = sorted(acc["lat"])
        out.update(rtt_med=pct(lat, 0.5) / 1e3, rtt_p99=pct(lat, 0.99) / 1e3,
                   rtt_p999=pct(lat, 0.999) / 1e3, rtt_n=len(lat))
    return out


def _oneway_rows(cfg, transports, sizes, reps, lat_reps, progress=None, task=None):
    """{(name, placement, size): summary} and {(name, placement, size): why it failed}."""
    rows, failed = {}, {}
    for size in sizes:
        n = cfg.n_for(size)
        jobs = [(t, pl) for t in transports for pl in t.placements]
        acc = {(t.name, pl): {"rates": [], "srates": [], "retries": 0, "lat": [], "runs": []} for t, pl in jobs}
        for _ in range(reps):
            for t, pl in jobs:
                key = (t.name, pl, size)
                if key not in failed:
                    c = cpus(cfg, pl, 2)
                    try:
                        ch = t.make(size)
                        try:
                            r = run_oneway(ch, size, n, max(10, n // 20), c[0], (c[1],),
                                           timeout=120 + n * size / 50e6)
                        finally:
                            ch.close()
                    except Exception as e:  # noqa: BLE001 - a size a transport cannot carry
                        failed[key] = f"{type(e).__name__}: {e}"
                    else:
                        a = acc[(t.name, pl)]
                        a["rates"].append(r["rate"])
                        a["srates"].append(r["send_rate"])
                        a["retries"] += r["retries"]
                        a["runs"].append(r)
                if progress is not None:
                    progress.advance(task)
        for _ in range(lat_reps):
            for t, pl in jobs:
                key = (t.name, pl, size)
                if t.rtt and key not in failed:
                    c = cpus(cfg, pl, 2)
                    fwd = t.make(size)
                    back = fwd.reverse()
                    try:
                        acc[(t.name, pl)]["lat"] += run_pingpong(fwd, back, size, cfg.n_rtt,
                                                                max(20, cfg.n_rtt // 10), c)
                    finally:
                        back.close()
                        fwd.close()
                if progress is not None:
                    progress.advance(task)
        for t, pl in jobs:
            a = acc[(t.name, pl)]
            if a["rates"] and (t.name, pl, size) not in failed:
                rows[(t.name, pl, size)] = {"peer": t.peer, "api": t.api,
                                            **_summarise(a, n, t.rtt and lat_reps > 0)}
    return rows, failed


def unicast_jobs(cfg):
    ts = placed(cfg)
    per_size = sum(len(t.placements) for t in ts)
    return {"unicast": len(SIZES) * per_size * (cfg.reps + cfg.lat_reps),
            "sweep": len([s for s in cfg.sweep_sizes if s not in SIZES]) * per_size * cfg.sweep_reps}


def bench_unicast(cfg, progress=None, task=None):
    """Section 1: every transport at 64 B and 4 KiB, in each of its placements, one-way and
    round trip, and the one-CPU floor of bus1py's 64 B rows (floor.py).  Returns {"rows",
    "failed", "transports", "floor"}."""
    ts = placed(cfg)
    rows, failed = _oneway_rows(cfg, ts, SIZES, cfg.reps, cfg.lat_reps, progress, task)
    return {"rows": rows, "failed": failed, "transports": ts,
            "floor": bench_floor(ts, max(3, 3 * cfg.reps))}


def bench_sweep(cfg, uni=None, progress=None, task=None):
    """Section 1b: one-way msg/s and MB/s from 64 B to 1 MiB, every transport and placement,
    fewer messages as the payload grows (cfg.n_for).  Sizes section 1 measured come from it."""
    ts = placed(cfg)
    sizes = [s for s in cfg.sweep_sizes if not (uni and s in SIZES)]
    rows, failed = _oneway_rows(cfg, ts, sizes, cfg.sweep_reps, 0, progress, task)
    if uni:
        for key, r in uni["rows"].items():
            if key[2] in cfg.sweep_sizes:
                rows[key] = r
        failed.update({k: v for k, v in uni["failed"].items() if k[2] in cfg.sweep_sizes})
    return {"rows": rows, "failed": failed, "transports": ts,
            "sizes": sorted(cfg.sweep_sizes), "reused": sorted(s for s in SIZES if uni and s in cfg.sweep_sizes)}


def best(rows, size, *, peer=None, name=None, api=None, key="rate"):
    """The best (name, placement) row at `size` among those matching: the highest median rate,
    or for key="rtt_med" the shortest median round trip.  None if no row matches."""
    cand = [(k, r) for k, r in rows.items() if k[2] == size and (peer is None or r["peer"] == peer)
            and (name is None or k[0] == name) and (api is None or r["api"] == api) and key in r]
    if not cand:
        return None
    pick = min if key.startswith("rtt") else max
    return pick(cand, key=lambda kr: kr[1][key])


def fanout(cfg, variants, ks, size, n, reps, progress=None, task=None):
    """{(variant, k): {rate per receiver, aggregate, rates, CPU ns per message of each side}}:
    each variant to k receivers, repetitions interleaved across variants.  k + 1 processes
    on the machine's cores: nobody is pinned, the scheduler places them."""
    res = {}
    for k in ks:
        acc = {name: [] for name in variants}
        for _ in range(reps):
            for name, make in variants.items():
                ch = make(size, k)
                try:
                    acc[name].append(run_oneway(ch, size, n, max(10, n // 20), None, None, timeout=300))
                finally:
                    ch.close()
                if progress is not None:
                    progress.advance(task)
        for name, runs in acc.items():
            rate = statistics.median(r["rate"] for r in runs)
            res[(name, k)] = {"rate": rate, "aggregate": rate * k, "rates": [r["rate"] for r in runs],
                              **{key: statistics.median(r[key] for r in runs) for key in ("tx_cpu_ns", "rx_cpu_ns")}}
    return res


def bench_multicast(cfg, progress=None, task=None, size=64):
    """Section 2: 64 B messages to k receivers, each multicast variant."""
    return fanout(cfg, multicast_variants(cfg.batch), cfg.mc_ks, size, cfg.mc_n, cfg.mc_reps, progress, task)


OBJ_SIZE, OBJ_KS = 1 << 20, (1, 4)


def bench_objects(cfg, progress=None, task=None):
    """Section 2b: a 1 MiB numpy array to 1 and to 4 receivers, each object variant."""
    return fanout(cfg, object_variants(), OBJ_KS, OBJ_SIZE, cfg.n_for(OBJ_SIZE), cfg.mc_reps, progress, task)


def bench_memory():
    """Section 4: segment bytes per idle peer, from the layout (two max_peers, differenced)."""
    out = {}
    for peers in (256, 1024):
        with bus1py.Bus.create(max_peers=peers) as bus:
            out[peers] = bus.info()["segment_size"]
    return {"segments": out, "per_peer": (out[1024] - out[256]) / (1024 - 256)}
