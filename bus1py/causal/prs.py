"""prs: Prakash-Raynal-Singhal causal multicast, direct dependencies only (a RECONSTRUCTION).

Source: Prakash, Raynal, Singhal, "An adaptive causal ordering algorithm suited to mobile
computing environments", JPDC 41(2):190-204, 1997 (ICDCS'96 pp. 744-751). Only the principle
is from the paper (its abstract, and seed 001 sections 1 and 6.3): a message carries, per
destination process, only its direct (maximal) causal predecessors addressed to that process.
The state, piggyback and update rules below are reconstructed in docs/PROTOCOL_RULES.md section 5 and
are ours, not the paper's text, which we could not read.

Known discrepancy with the paper: seed 001 says PRS costs more bytes than RST in unicast only
beyond about 25 processes; this reconstruction (6 B per dependent) already exceeds RST's 4n^2
at n = 10 (about 0.72 n^2 dependents per copy), so the real PRS prunes more, or counts
bytes differently.

Delivery condition: a copy M from j is delivered at i iff every (k, y) in CB_M[i], the
barrier M carries for i, has y <= Deliv_i[k].

Wire (u16 ids, u32 sequence numbers, little-endian), columnar; the whole CB vector is sent,
one list per destination k, the same to every copy, in a canonical order: the lists by k,
the entries of each list by sender, both strictly increasing (a decoder refuses any other
order, so every CB has exactly one encoding, which an n x n counter matrix reproduces):
    header  = j | sn | |Dests| | #lists | Dests ids | k of each list | length of each list
            = 10 + 2|Dests| + 4 * #non-empty lists
    control = entry senders | entry sns = 6 * sum_k |CB_M[k]|            (docs/PROTOCOL_RULES.md section 10)
    payload
The header holds what seed 001 leaves out (sender, own sn, Dests) and the bookkeeping of
which destination each list belongs to, which seed 001's "without any bookkeeping overhead"
also leaves out. Dependents per copy = sum_k |CB_M[k]| (docs/PROTOCOL_RULES.md P4).

State at i: sn (sends so far); Deliv[j] (sn of the last message from j delivered here; since
messages from j to i are delivered in sn order, (j, x) addressed to i is delivered iff
Deliv[j] >= x); CB[k]: sender -> sn, the direct predecessors of i's next message to k. A
held message waits for the entries of CB_M[i] in sender order; that order decides the order
in which the messages one receive releases are delivered, and so (the multicast merge is
order-sensitive) which CB entries survive: the canonical order is part of the protocol.

Invariants:
  - CB[i] is always empty, and no CB[k] lists k itself as a sender (no self-sends).
  - At most one entry per sender in each CB[k], the largest sn known. The dicts' insertion
    order means nothing: the wire sorts them.
  - A held message is indexed under the sender of the first entry it still waits for.
"""
from __future__ import annotations

import struct
from itertools import islice
from operator import lt

from .base import U32_MAX, Step, WireCost, WireError, pack_columns, read_columns, read_head
from .holdback import HoldBack, HoldBackProtocol

_HEAD = struct.Struct("<HIHH")


class Prs(HoldBackProtocol):
    name = "prs"
    label = "prs (reconstructed)"
    weight = 3.0
    style = ("#d62728", "^", "--")
    rule = "deliver M at i iff every (k, y) in CB_M[i] has y <= Deliv_i[k]"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.sn = 0
        self.deliv = [0] * n
        self.cb: list[dict[int, int]] = [dict() for _ in range(n)]         # k -> {sender: sn}
        self._hold = HoldBack(self.deliv)


    # ---- send ----

    def _send(self, dests, payload):
        if self.sn >= U32_MAX:
            raise ValueError(f"process {self.me} exhausted its 32-bit sequence numbers")
        me = self.me
        sn = self.sn = self.sn + 1
        cb = self.cb
        ks, lens, senders, sns = [], [], [], []
        for k, row in enumerate(cb):
            if row:
                ks.append(k)
                lens.append(len(row))
                ids = sorted(row)
                senders.extend(ids)
                sns.extend(map(row.__getitem__, ids))
        head = _HEAD.pack(me, sn, len(dests), len(ks)) + pack_columns("HHH", dests, ks, lens)
        ctl = pack_columns("HI", senders, sns)
        wire = b"".join((head, ctl, payload))
        cost = WireCost(len(head), len(ctl), len(senders), True)
        step = Step()
        for d in dests:
            step.emit(d, wire, cost)
        # M is now the only direct predecessor of our next message to each destination.
        for d in dests:
            cb[d] = {me: sn}
        return step

    # ---- receive ----

    def _decode(self, src, data):
        """Every check happens here, before any state changes."""
        n, me = self.n, self.me
        j, sn, nd, nk = read_head(data, src, _HEAD, "sequence number")
        (dests, ks, lens), pos = read_columns(data, _HEAD.size, "HHH", (nd, nk, nk))
        total = sum(lens)
        (senders, sns), pos = read_columns(data, pos, "HI", (total, total))
        payload = data[pos:]
        ds = set(dests)
        if nd == 0 or len(ds) != nd or me not in ds or j in ds or max(dests) >= n:
            raise WireError(f"bad destination list {dests} for a copy {j} -> {me}")
        if total and (max(senders) >= n or min(sns) == 0):
            raise WireError("CB entry with a bad process id or sequence number 0")
        if nk and (ks[-1] >= n or j in ks or not all(map(lt, ks, ks[1:])) or min(lens) == 0):
            raise WireError(f"bad CB list keys {ks} (strictly increasing, below n, not the "
                            "sender's)")
        at = 0
        for ln in lens:
            ids = senders[at:at + ln]
            at += ln
            if not all(map(lt, ids, ids[1:])):
                raise WireError("a CB list's senders are not strictly increasing")
        pairs = zip(senders, sns)
        cbm = {k: dict(islice(pairs, ln)) for k, ln in zip(ks, lens)}
        mysn = self.sn
        for k, row in cbm.items():
            if k in row or row.get(j, 0) >= sn or row.get(me, 0) > mysn:
                raise WireError(f"bad CB list for process {k}")
        mine = cbm.get(me)
        wk = list(mine) if mine else []
        wt = list(mine.values()) if mine else []
        # record: [wait senders, wait sns, next wait, sn, sender, Dests, CB_M, payload]
        return [wk, wt, 0, sn, j, ds, cbm, payload]

    def _deliver(self, rec, step):
        step.delivered.append((rec[4], rec[7]))
        self._merge(rec[4], rec[3], rec[5], rec[6])

    def _merge(self, j, x, dests, cbm):
        me = self.me
        cb = self.cb
        self.deliv[j] = x
        for k in dests:
            if k == me:
                continue
            # k is a destination of M: M becomes a direct predecessor of our next message
            # to k, and everything M itself waits for at k is no longer direct.
            row = cb[k]
            mk = cbm.get(k)
            if mk:
                for s in row.keys() & mk.keys():
                    if row[s] <= mk[s]:
                        del row[s]
            if row.get(j, 0) < x:
                row[j] = x
        for k, mk in cbm.items():
            if k == me or k in dests:
                continue
            # k is not a destination of M: M's barrier for k is inherited, largest sn per
            # sender.
            row = cb[k]
            if not row:
                cb[k] = mk                       # owned by the delivered record
                continue
            if row == mk:
                continue
            # Mostly the two barriers agree; only the differing pairs need a look.
            for s, z in mk.items() - row.items():
                if row.get(s, 0) < z:
                    row[s] = z


PROTOCOL = Prs
