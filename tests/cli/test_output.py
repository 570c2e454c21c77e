"""Output for programs and logs: `--json -` is JSON alone on stdout, tables are whole in a
pipe, progress off a terminal is timestamped lines, and --properties judges what is promised."""
import json
import re

import pytest

import bus1py
from tests.cli.conftest import bus1py as run_cli

pytestmark = pytest.mark.timeout(120)


def test_check_json_to_stdout_is_only_json(small_trace):
    cp = run_cli("check", small_trace, "--json", "-")
    assert cp.returncode == 0, cp.stderr
    summary = json.loads(cp.stdout)
    assert summary["ok"] and summary["judged"] == list(summary["properties"])
    assert "OK:" in cp.stderr          # the verdict, for the person watching


def test_stress_json_to_stdout_is_only_json(tmp_path):
    cp = run_cli("stress", "-n", "2", "--messages", "50", "-q", "--no-trace", "--json", "-",
                 cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["processes"] == 2
    assert not (tmp_path / "-").exists()


def test_ls_json_and_whole_tables_in_a_pipe(shm_name, tmp_path):
    with bus1py.Bus.create(name=shm_name("cli")) as bus:
        peer = bus.peer()
        peer.create_node()
        cp = run_cli("ls", "--json", "-", bus.name)
        assert cp.returncode == 0, cp.stderr
        out = json.loads(cp.stdout)
        (entry,) = out["buses"]
        assert out["ok"] and entry["name"] == bus.name
        assert [p["state"] for p in entry["peers"]] == ["connected"]
        # --json FILE means the same as in check and stress: the object there, the table here
        cp = run_cli("ls", "--json", str(tmp_path / "ls.json"), bus.name,
                     env={**__import__("os").environ, "COLUMNS": "300"})
        assert cp.returncode == 0 and "connected" in cp.stdout, cp.stderr
        written = json.loads((tmp_path / "ls.json").read_text())
        assert [(b["name"], [p["id"] for p in b["peers"]]) for b in written["buses"]] == \
            [(bus.name, [p["id"] for p in entry["peers"]])]
        env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
        cp = run_cli("ls", bus.name, env=env)
        assert cp.returncode == 0, cp.stderr
        assert "connected" in cp.stdout and "…" not in cp.stdout, cp.stdout


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    cp = run_cli("stress", "-n", "2", "--duration", "11", "--rate", "50", "--no-trace")
    assert cp.returncode == 0, cp.stderr
    stamps = [line[:8] for line in cp.stderr.splitlines()
              if re.match(r"^\d\d:\d\d:\d\dZ bus1py stress: ", line)]
    assert len(stamps) >= 2, cp.stderr
    secs = [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in (t.split(":") for t in stamps)]
    # a line is due every 10 s; the rest is slack for a loaded machine
    assert all(0 <= b - a <= 14 for a, b in zip(secs, secs[1:])), stamps


def test_properties_judge_only_what_is_promised(tmp_path):
    # pipes keep FIFO order but not causal order: judged on FIFO alone the run passes,
    # and the causal violations are still reported
    trace = str(tmp_path / "t")
    cp = run_cli("stress", "-n", "8", "--messages", "300", "--seed", "2", "-q", "--trace",
                 trace, "--transport", "pipe")
    assert cp.returncode == 0, cp.stderr
    # the run says which properties its transport promises
    (line,) = [x for x in cp.stdout.splitlines() if x.startswith("check what this run promises")]
    assert "--properties exactly_once,fifo " in line, line
    full = run_cli("check", trace, "--json", "-")
    assert full.returncode == 1, full.stderr
    assert not json.loads(full.stdout)["properties"]["causal"]["ok"]
    promised = run_cli("check", trace, "--json", "-", "--properties", "exactly_once,fifo")
    assert promised.returncode == 0, promised.stderr
    summary = json.loads(promised.stdout)
    assert summary["ok"] and summary["judged"] == ["exactly_once", "fifo"]
    assert summary["properties"]["causal"]["violations"] > 0
    assert re.search(r"^info causal ", promised.stderr, re.M), promised.stderr


@pytest.mark.timeout(300)
def test_demo_in_a_log_shows_the_checker_working(tmp_path):
    cp = run_cli("demo", "-n", "3", "--duration", "3", "--seed", "1", "--out", str(tmp_path))
    assert cp.returncode == 0, cp.stderr
    assert re.search(r"^\d\d:\d\d:\d\dZ bus1py stress: run: ", cp.stderr, re.M), cp.stderr
    assert re.search(r"^\d\d:\d\d:\d\dZ bus1py check: checking ", cp.stderr, re.M), cp.stderr
    assert "no violations" in cp.stdout
