"""The targets against pyzmq and iceoryx2, judged from one run: bus1py against each peer, each side at
its best row (placement, and API where the target says so)."""
from __future__ import annotations

from .common import fmt_rate, fmt_ratio
from .prose import _vs, label
from .sections import OBJ_KS, best


def _fanout_vs(target, thr, mine, theirs):
    """A fan-out target (sections 2 and 2b): (name, rate) of each side, per receiver."""
    (bn, b), (pn, p) = mine, theirs
    x = b["rate"] / p["rate"]
    return (target, f"{fmt_ratio(x)}: {bn} {fmt_rate(b['rate'])}msg/s vs {pn} {fmt_rate(p['rate'])}msg/s "
                    f"per receiver", x >= thr)


def peer_targets(uni, sweep, mc, ob):
    """[(target, measured, ok)] for the targets whose rows ran."""
    t = []
    rows = (uni or {}).get("rows", {})
    srows = (sweep or {}).get("rows", rows)
    bm = best(rows, 64, peer="bus1py", api="per-message")
    zm = best(rows, 64, peer="pyzmq", api="per-message")
    if bm and zm:
        t.append(_vs("64 B one-way, per-message API >= pyzmq's", bm[1]["rate"] / zm[1]["rate"], 1,
                     bm[1], zm[1], bm[0], zm[0]))
    bb, pp, zb = best(rows, 64, peer="bus1py", api="batch"), best(rows, 64, peer="os.pipe"), best(rows, 64, peer="pyzmq")
    for thr, other, what in ((1.5, pp, "os.pipe at its best"), (2, zb, "pyzmq's best 64 B row")):
        if bb and other:
            t.append(_vs(f"64 B batch >= {thr}x {what}", bb[1]["rate"] / other[1]["rate"], thr,
                         bb[1], other[1], bb[0], other[0]))
    bz = best(srows, 65536, peer="bus1py", api="zero-copy")
    iz = best(srows, 65536, name="iceoryx2 read in place")
    if bz and iz:
        t.append(_vs("64 KiB zero-copy >= iceoryx2 read in place", bz[1]["rate"] / iz[1]["rate"], 1,
                     bz[1], iz[1], bz[0], iz[0]))
    br, ir = best(rows, 64, name="bus1py", key="rtt_med"), best(rows, 64, peer="iceoryx2", key="rtt_med")
    if br and ir:
        x = br[1]["rtt_med"] / ir[1]["rtt_med"]
        t.append(("64 B round-trip median <= 1/2 iceoryx2's", f"{x:.2f} of it: {br[1]['rtt_med']:.1f} us "
                  f"({label(br[0])}) vs {ir[1]['rtt_med']:.1f} us ({label(ir[0])})", x <= 0.5))
    zs = (mc or {}).get(("pyzmq PUB/SUB", 4))
    if zs:
        mine = [(n, r) for (n, k), r in mc.items() if k == 4 and n.startswith("bus1py")]
        if mine:
            t.append(_fanout_vs("multicast to 4, each at its best API >= 1.5x pyzmq PUB/SUB", 1.5,
                                max(mine, key=lambda nr: nr[1]["rate"]), ("pyzmq PUB/SUB", zs)))
        if ("bus1py multicast", 4) in mc:
            t.append(_fanout_vs("multicast to 4, per-message API >= 0.5x pyzmq PUB/SUB", 0.5,
                                ("bus1py multicast", mc[("bus1py multicast", 4)]), ("pyzmq PUB/SUB", zs)))
    k = OBJ_KS[-1]
    so, zo = (ob or {}).get(("bus1py send_obj + obj()", k)), (ob or {}).get(("pyzmq send(copy=False)", k))
    if so and zo:
        t.append(_fanout_vs(f"send_obj of a 1 MiB array to {k} >= 3x pyzmq copy=False multicast", 3,
                            ("bus1py send_obj + obj()", so), ("pyzmq send(copy=False)", zo)))
    return t
