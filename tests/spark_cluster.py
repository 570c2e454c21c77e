"""A real Spark standalone cluster on 127.0.0.1 for tests of the `--master` paths.

The installed pyspark ships the master and worker (`spark-class`); the fixture starts one
master and one worker on free loopback ports, waits until the worker has registered, yields
the master URL, and kills both process groups afterwards. Nothing listens beyond 127.0.0.1.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path, text, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    with open(path, errors="replace") as f:
        tail = f.read()[-2000:]
    raise RuntimeError(f"Spark {os.path.basename(path)} did not report {text!r}:\n{tail}")


def start_cluster(logdir, cores=2, memory="2g", timeout=120, workers=1):
    """Start a master and `workers` workers of `cores` cores and `memory` each; return
    (master URL, stop function)."""
    import pyspark
    home = os.path.dirname(pyspark.__file__)
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1",
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
    cls = os.path.join(home, "bin", "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def launch(name, *args):
        log = os.path.join(logdir, f"{name}.log")
        p = subprocess.Popen([cls, *args], env=env, stdout=open(log, "w"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p, log

    def stop():
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)

    try:
        m, mlog = launch("master", "org.apache.spark.deploy.master.Master", "--host",
                         "127.0.0.1", "--port", str(port), "--webui-port", "0")
        _wait_for(mlog, "I have been elected leader", m, timeout)
        for i in range(workers):
            w, wlog = launch(f"worker{i or ''}", "org.apache.spark.deploy.worker.Worker",
                             url, "--host", "127.0.0.1", "--cores", str(cores), "--memory",
                             memory, "--webui-port", "0")
            _wait_for(wlog, "Successfully registered with master", w, timeout)
    except BaseException:
        stop()
        raise
    return url, stop
