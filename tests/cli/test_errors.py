"""Bad input, as a user gives it: one line on stderr naming what was wrong, exit 2, nothing
done (no trace written, no report half made, no JVM started)."""
import json
import os
import re
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from bus1py import Bus
from bus1py.cli.main import main
from tests.cli.conftest import bus1py, one_line_error

pytestmark = pytest.mark.timeout(120)

STRESS = ("stress", "-n", "2", "--messages", "20", "-q")


def test_stress_trace_in_unwritable_place():
    one_line_error(bus1py(*STRESS, "--trace", "/proc/nope"), 2, "--trace /proc/nope")


def test_stress_trace_naming_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    one_line_error(bus1py(*STRESS, "--trace", str(f)), 2, "not a directory")
    assert f.read_text() == "x"


def test_stress_trace_non_empty_dir_needs_force(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    (d / "old.parquet").write_bytes(b"PAR1")
    one_line_error(bus1py(*STRESS, "--trace", str(d)), 2, "not empty", "--force")
    assert sorted(os.listdir(d)) == ["notes.txt", "old.parquet"]
    cp = bus1py(*STRESS, "--trace", str(d), "--force")
    assert cp.returncode == 0, cp.stderr
    files = os.listdir(d)
    assert "notes.txt" in files and "old.parquet" not in files
    assert any(f.endswith(".parquet") for f in files)


@pytest.mark.parametrize("args, words", [
    (["--payload", "fixed:-5"], "--payload fixed:-5"),
    (["--fanout", "0"], "--fanout"),
    (["--processes", "0"], "--processes"),
    (["--rate", "-1"], "--rate"),
    (["--duration", "0"], "--duration"),
])
def test_stress_numbers_bounded(tmp_path, args, words):
    cp = bus1py(*STRESS[:1], *args, "--trace", str(tmp_path / "t"))
    one_line_error(cp, 2, words)
    assert not (tmp_path / "t").exists()


def test_stress_json_to_missing_dir_refused_before_the_run(tmp_path):
    cp = bus1py(*STRESS, "--trace", str(tmp_path / "t"), "--json", "/nonexistent/dir/s.json")
    one_line_error(cp, 2, "--json", "/nonexistent/dir")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("option", ["--report", "--json", "--shiviz"])
def test_check_output_paths_checked_first(small_trace, option):
    t = time.monotonic()
    cp = bus1py("check", small_trace, option, "/nonexistent/dir/out")
    one_line_error(cp, 2, option, "/nonexistent/dir")
    assert time.monotonic() - t < 20


@pytest.mark.parametrize("args, words", [
    (["--examples", "-3"], "--examples"),
    (["--partitions", "-1"], "--partitions"),
    (["--driver-memory", "lots"], "--driver-memory"),
    (["--properties", "fifo,bogus"], "bogus"),
])
def test_check_options_bounded(small_trace, args, words):
    one_line_error(bus1py("check", small_trace, *args), 2, words)


def test_check_unreachable_master_says_so_at_once(small_trace):
    with socket.socket() as s:   # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.monotonic()
    cp = bus1py("check", small_trace, "--master", f"spark://127.0.0.1:{port}")
    one_line_error(cp, 2, f"spark://127.0.0.1:{port}")
    assert time.monotonic() - t < 15


def in_process(capsys, *args):
    """`bus1py ARGS` run by its entry point in this process (the command's own code is what
    a subprocess would run): its exit code and output, as a CompletedProcess has them."""
    code = main(list(args))
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


@pytest.mark.parametrize("command", ["ls", "gc", "rm", "fsck"])
def test_a_missing_bus_is_exit_2_in_every_command(command, capsys):
    cp = in_process(capsys, command, "nosuchbus-cli-test")
    one_line_error(cp, 2, f"bus1py {command}: nosuchbus-cli-test")
    assert cp.stdout == ""


@pytest.mark.parametrize("args", [
    ["check", "/nonexistent/trace", "--json", "-"],
    ["stress", "--no-trace", "--messages", "1", "--fanout", "0", "--json", "-"],
    ["stress", "--no-trace", "--messages", "1", "--json=-", "--json-typo"],
    ["ls", "--json", "-", "--all", "--bogus"],
])
def test_json_to_stdout_on_an_error_is_a_json_object(args, capsys):
    """`--json -` on a refusal still gives a program reading stdout one object, the error
    in it, beside the one line on stderr."""
    cp = in_process(capsys, *args)
    line = one_line_error(cp, 2)
    out = json.loads(cp.stdout)
    assert out["ok"] is False and out["exit"] == 2 and out["command"] == args[0]
    assert out["error"] and out["error"] in line


def test_ls_json_of_a_missing_bus_names_it_in_the_object(capsys):
    cp = in_process(capsys, "ls", "--json", "-", "nosuchbus-cli-test")
    one_line_error(cp, 2, "nosuchbus-cli-test")
    out = json.loads(cp.stdout)
    assert out["ok"] is False and [b["name"] for b in out["buses"]] == ["nosuchbus-cli-test"]
    assert "no bus named" in out["buses"][0]["error"]


def test_demo_out_with_an_earlier_trace_refused(tmp_path):
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "old.parquet").write_bytes(b"PAR1")
    one_line_error(bus1py("demo", "--out", str(tmp_path)), 2, "not empty")
    assert os.listdir(tmp_path / "trace") == ["old.parquet"]
    one_line_error(bus1py("demo", "--duration", "-1"), 2, "--duration", "> 0")


def test_rm_of_a_bus_with_a_live_peer_names_its_holder(shm_name):
    name = shm_name("rm")
    made = subprocess.run([sys.executable, "-c", "import bus1py; print(bus1py.Bus.create("
                           f"{name!r}, persistent=True).name)"],
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr     # its creator is gone now
    bus = Bus.open(name)
    try:
        bus.peer().query()                       # this process holds a connected peer
        one_line_error(bus1py("rm", name), 1, "in use by", str(os.getpid()), "--force")
        assert os.path.exists("/dev/shm/" + name.lstrip("/"))
        cp = bus1py("rm", "--force", name)
        assert cp.returncode == 0 and not os.path.exists("/dev/shm/" + name.lstrip("/"))
    finally:
        bus.close()
        if os.path.exists("/dev/shm/" + name.lstrip("/")):
            os.unlink("/dev/shm/" + name.lstrip("/"))


def test_the_readme_states_the_one_exit_code_table():
    from bus1py.cli.outcome import EXIT_CODES
    from tests.docs_examples import ROOT
    readme = (ROOT / "README.md").read_text()
    rows = {int(code): meaning.replace("\\|", "|").replace("`", "")
            for code, meaning in re.findall(r"^\| (\d+) \| (.+) \|$", readme, re.M)}
    assert rows == {code: meaning.replace("`", "") for code, meaning in EXIT_CODES.items()}
