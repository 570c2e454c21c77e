"""The protocol side of a stress run's summary: what the live protocol cost, beside what the
simulator (`bus1py.sim.engine`) predicts for the same protocol, n and mode.

Invariants:
  - Live figures come only from the wires' measured costs (layers.Causal) summed over the
    processes; "per message" divides by the application's send actions (a multicast is
    one message, as in the simulator, even for a protocol that sends it as k sends).
  - Per-copy figures (control bytes on a data wire; control-only wires per data copy) are
    comparable across fanouts; per-message figures are not (the simulator's multicast goes
    to a uniform 1..n-1 processes, the stress workload's to 2..--fanout), so both are shown
    with each side's fanout.
  - The prediction is a short simulator run (seeded, deterministic); it never touches the
    live run's figures.
"""
from __future__ import annotations


def _pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q / 100 * len(v)))]


def live_figures(results) -> dict:
    rs = [r for r in results if "failed" not in r and "control_bytes" in r]
    if not rs:
        return {}
    msgs = sum(r["kinds"].get("unicast", 0) + r["kinds"].get("multicast", 0) for r in rs) or 1
    copies = sum(r["data_wires"] for r in rs) or 1
    hold = [x for r in rs for x in r.get("hold_ns", ())]
    p50, p99 = _pct(hold, 50), _pct(hold, 99)
    return {
        "messages": msgs, "copies": copies, "fanout": copies / msgs,
        "control_bytes_per_msg": sum(r["control_bytes"] for r in rs) / msgs,
        "control_msgs_per_msg": sum(r["control_wires"] for r in rs) / msgs,
        "control_bytes_per_copy": sum(r["data_control"] for r in rs) / copies,
        "control_msgs_per_copy": sum(r["control_wires"] for r in rs) / copies,
        "held_back": len(hold), "held_back_share": len(hold) / copies,
        "held_max": max(r["held_max"] for r in rs),
        "hold_p50_ms": None if p50 is None else p50 / 1e6,
        "hold_p99_ms": None if p99 is None else p99 / 1e6,
    }


def prediction(protocol: str, n: int, mix: dict) -> dict:
    """The simulator's figures for the same protocol and n; mode multicast when the
    workload multicasts at all."""
    from ..sim.engine import RunSpec, run
    mode = "multicast" if mix.get("multicast") else "unicast"
    measure = max(100, 4000 // n)
    r = run(RunSpec(protocol, n, mode, warmup=measure // 4, measure=measure))
    copies = r["copies"] or 1
    return {
        "mode": mode, "fanout": r["fanout"],
        "control_bytes_per_msg": r["bytes_per_msg"],
        "control_msgs_per_msg": r["control_msgs_per_msg"],
        "control_bytes_per_copy": r["bytes_per_copy"],
        "control_msgs_per_copy": r["control_msgs_per_msg"] * r["sends"] / copies,
        "held_max": r["buffered_max"],
        "delay_p50_net": r["delay_p50"] / r["net_delay"],
        "delay_p99_net": r["delay_p99"] / r["net_delay"],
    }


def protocol_table(cfg, live: dict, pred: dict | None):
    from rich.table import Table
    t = Table(title=f"protocol {cfg.protocol} over {cfg.transport}"
                    + (f", chaos delay ≤{cfg.chaos_delay * 1e3:g} ms" if cfg.chaos_delay else "")
                    + f": live vs simulator (n={cfg.processes}"
                    + (f", {pred['mode']})" if pred else ")"))
    t.add_column("figure")
    t.add_column("live", justify="right")
    t.add_column("simulator", justify="right")

    def f(x, fmt="{:,.1f}"):
        return "—" if x is None else fmt.format(x)

    p = pred or {}
    t.add_row("fanout (copies per message)", f(live.get("fanout"), "{:.2f}"), f(p.get("fanout"), "{:.2f}"))
    t.add_row("control bytes per message", f(live.get("control_bytes_per_msg")), f(p.get("control_bytes_per_msg")))
    t.add_row("control bytes per data copy", f(live.get("control_bytes_per_copy")), f(p.get("control_bytes_per_copy")))
    t.add_row("control-only wires per message", f(live.get("control_msgs_per_msg"), "{:.2f}"),
              f(p.get("control_msgs_per_msg"), "{:.2f}"))
    t.add_row("control-only wires per data copy", f(live.get("control_msgs_per_copy"), "{:.2f}"),
              f(p.get("control_msgs_per_copy"), "{:.2f}"))
    t.add_row("messages held back", f"{live.get('held_back', 0):,} ({100 * live.get('held_back_share', 0):.0f}% of copies)", "—")
    t.add_row("most held at once (one process)", f(live.get("held_max"), "{:,}"), f(p.get("held_max"), "{:,}"))
    t.add_row("delay added by holding, p50 / p99",
              f"{f(live.get('hold_p50_ms'), '{:.2f}')} / {f(live.get('hold_p99_ms'), '{:.2f}')} ms",
              f"delivery {f(p.get('delay_p50_net'), '{:.1f}')} / {f(p.get('delay_p99_net'), '{:.1f}')} × net delay")
    return t
