# Invariants: hand-written traces with a known fault, shared by the checker's tests (each
# row has every SPEC column, the optional ones None).
_KEYS = dict.fromkeys(("dests", "node", "wall_ns", "stamp_ts", "stamp_peer", "stamp_tx"))


def row(p, s, kind, msg, dests=None):
    return dict(_KEYS, process=p, seq=s, kind=kind, msg=msg, dests=dests)


# p0 sends m1 and then m2 to p1 and p2; p2 delivers m2 first: one causal violation (and
# one fifo) whose example's path is p0's own order
INVERTED = [row(0, 0, "send", 1, [1, 2]), row(0, 1, "send", 2, [1, 2]),
            row(1, 0, "deliver", 1), row(1, 1, "deliver", 2),
            row(2, 0, "deliver", 2), row(2, 1, "deliver", 1)]

# 3 sends m1 to {2, 4} after receiving the signal that 2 sends only after delivering m1:
# a causality cycle, which no walk orders; 4 delivers m3 before m1, and send(m1)
# happened-before send(m3) through the cycle: one causal violation
CYCLE = [row(3, 0, "signal_recv", 100), row(3, 1, "send", 3, [4]),
         row(3, 2, "send", 1, [2, 4]), row(2, 0, "deliver", 1),
         row(2, 1, "signal_send", 100), row(4, 0, "deliver", 3), row(4, 1, "deliver", 1)]
