"""Instructions per 64 B message, counted by callgrind in one process: repeatable whatever
else the machine runs, so two builds can be compared where timing is too noisy.

    python tools/bench/instructions.py [--tree DIR] [--modes one,batch,zc,mc,mcbatch]

Each mode runs its loop for 3,200 and 19,200 messages under `valgrind --tool=callgrind`
(PYTHONHASHSEED=0) and prints the difference per message: in all, and in the C helper
(csrc/).  The multicast modes send each message to 4 receivers and count its 4 receives
with it: `mc` through Peer.send and Peer.recv, `mcbatch` through send_many and recv_many
of 64, the bench's best-API multicast row.  --tree runs the bus1py of another checkout (its C helper built in place:
`python bus1py/_build.py` there), e.g. a worktree of the commit to compare with.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
LOOP = """
import sys
import bus1py
n, mode = int(sys.argv[1]), sys.argv[2]
with bus1py.Bus.create() as bus:
    a, b = bus.peer(), bus.peer()
    h = b.transfer(b.create_node(), a)
    rx = [b] + [bus.peer() for _ in range(3)]
    hs = [h] + [r.transfer(r.create_node(), a) for r in rx[1:]]
    p = b"x" * 64
    if mode == "mc":
        for _ in range(n):
            a.send(hs, p)
            for r in rx:
                r.recv(timeout=0)
    elif mode == "mcbatch":
        ps = [p] * 64
        for _ in range(n // 64):
            a.send_many(hs, ps)
            for r in rx:
                r.recv_many(64, timeout=0)
    elif mode == "one":
        for _ in range(n):
            a.send([h], p)
            b.recv(timeout=0)
    elif mode == "batch":
        ps = [p] * 32
        for _ in range(n // 32):
            a.send_many([h], ps)
            b.recv_many(32, timeout=0)
    else:
        for _ in range(n):
            a.send([h], p)
            b.recv(timeout=0, copy=False).release()
"""


def counts(tree: Path, mode: str, n: int) -> tuple:
    """(all instructions, those in csrc/) of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        "-c", LOOP, str(n), mode], env=env, cwd=tmp, check=True, capture_output=True)
        text = subprocess.run(["callgrind_annotate", "--threshold=100", str(out)], capture_output=True,
                              text=True, check=True).stdout
    total = int(re.search(r"^([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
    c = sum(int(m.group(1).replace(",", "")) for m in re.finditer(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*csrc/(?!.*=>)", text, re.M))
    return total, c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose bus1py runs")
    ap.add_argument("--modes", default="one,batch,zc,mc,mcbatch")
    a = ap.parse_args(argv)
    for mode in a.modes.split(","):
        (t0, c0), (t1, c1) = counts(a.tree, mode, 3200), counts(a.tree, mode, 19200)
        print(f"{mode:6s} {(t1 - t0) / 16000:8.0f} instructions a message, {(c1 - c0) / 16000:6.0f} in csrc/")


if __name__ == "__main__":
    main()
