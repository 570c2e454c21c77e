"""--transport, --protocol, --chaos-delay without the checker: every transport's trace is
well-formed (every message delivered exactly once to each destination, signals matched),
the protocol figures are filled in, and bad options are refused with exit status 2.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from bus1py.stress.analyze import wellformed
from bus1py.stress.protocol_stats import live_figures
from bus1py.stress.runner import StressConfig, run_stress
from bus1py.stress.transports import TRANSPORTS


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_delivers_everything_once(tmp_path, transport):
    trace = str(tmp_path / "t")
    res = run_stress(StressConfig(processes=4, messages=80, seed=3, trace_dir=trace,
                                  transport=transport))
    assert res.ok, res.failures
    assert wellformed(trace) == []
    rs = res.results
    assert sum(r["signals_sent"] for r in rs) > 0


@pytest.mark.timeout(120)
def test_protocol_run_counts_control_and_hold_back(tmp_path):
    trace = str(tmp_path / "t")
    res = run_stress(StressConfig(processes=4, messages=80, seed=3, trace_dir=trace,
                                  transport="unix", protocol="bus1", chaos_delay=0.001))
    assert res.ok, res.failures
    assert wellformed(trace) == []
    live = live_figures(res.results)
    # bus1: 10 control bytes on every data copy; every message waits for its commit
    assert live["control_bytes_per_copy"] == 10.0
    assert live["control_msgs_per_copy"] >= 3
    assert live["held_back"] > 0 and live["hold_p50_ms"] > 0


def test_non_bus1_protocol_drops_signals():
    from bus1py.stress.workload import DEFAULT_MIX, transport_mix
    mix, why = transport_mix(DEFAULT_MIX, "rst")
    assert mix["signal"] == mix["recv_signal"] == 0 and "signal" in why
    mix, why = transport_mix(DEFAULT_MIX, "bus1")
    assert mix["signal"] > 0 and "signal" not in why


@pytest.mark.parametrize("args, words", [
    (["--transport", "carrier-pigeon"], "carrier-pigeon"),
    (["--protocol", "nope"], "nope"),
    (["--chaos-delay", "-1", "--transport", "pipe"], "chaos delay"),
    (["--inject", "fifo", "--transport", "pipe"], "--inject"),
    (["--protocol", "bss", "-n", "1"], "at least 2"),
    (["--churn", "--churn-slots", "15"], "--churn-slots"),
    (["--churn", "--churn-life", "0"], "--churn-life"),
    (["--churn", "--churn-kill", "1.5"], "--churn-kill"),
    (["--churn", "--transport", "pipe"], "--churn"),
    (["--churn-life", "5"], "--churn"),
    (["--sample-every", "0"], "--sample-every"),
])
def test_bad_options_exit_2(tmp_path, args, words):
    cp = subprocess.run([sys.executable, "-m", "bus1py.cli", "stress", "--messages", "1", "-q",
                         "--trace", str(tmp_path / "t"), *args], capture_output=True, text=True,
                        timeout=60)
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    assert words in cp.stdout + cp.stderr
