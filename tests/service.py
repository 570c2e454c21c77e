"""A service in its own interpreter, for the tests of calls and restarts.

`python -c SERVICE NAME create|open` makes (or opens) the bus NAME, publishes a node as
"svc", prints "ready" and answers every request with b"re:" + its payload -- but for
b"hold", which it keeps unanswered (a caller then waits until the service dies).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

SERVICE = textwrap.dedent("""
    import sys, bus1py
    from bus1py import Request
    name, how = sys.argv[1], sys.argv[2]
    bus = bus1py.Bus.create(name) if how == "create" else bus1py.Bus.open(name)
    peer = bus.peer()
    svc = peer.create_node()
    peer.publish("svc", svc)
    print("ready", flush=True)
    while True:
        msg = peer.recv(node=svc)
        if isinstance(msg, Request) and msg.payload != b"hold":
            msg.reply(b"re:" + msg.payload)
""")


def start(name: str, how: str) -> subprocess.Popen:
    """The service, started and ready."""
    s = subprocess.Popen([sys.executable, "-c", SERVICE, name, how], stdout=subprocess.PIPE, text=True)
    assert s.stdout.readline().strip() == "ready"
    return s
