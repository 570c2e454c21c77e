"""jpcy: Jang-Park-Cho-Yoon causal multicast (FTDCS 1997), steps S1-S5 and R1-R9.

Source: seed 001 sections 3-4 (Jang, Park, Cho, Yoon, "An efficient causal order algorithm
for message delivery in distributed system", FTDCS'97); the garbled steps are read as in
docs/PROTOCOL_RULES.md section 7. Two readings are ours: p_i's own tuple is added to CI_i *after* the
copies are built (S4/S5 order), and R5 marks first, then deletes.

Delivery condition (R1): a copy m from j is delivered at i iff every (k, tau) in DC_m, the
delivery constraints built for this copy, has tau <= DLV_i[k].

Wire (u16 ids, u32 timestamps, little-endian), columnar so it packs in a few struct calls:
    header  = j | tau_m | |D| | |CI| | |DC| | D ids | |D| of each CI tuple      12+2|D|+2|CI|
    control = CI senders | CI taus | CI dest ids (concatenated) | DC ids | DC taus
            = sum over CI tuples of (6 + 2|D|) + 6|DC|          (docs/PROTOCOL_RULES.md section 10)
    payload
The header holds what seed 001 leaves out of its cost (sender, own tau, m.D) and the section
lengths; the control bytes are exactly the formula, with explicit sender ids (the CI vector
is sparse). Dependents per copy = |CI_m| + |DC_m[d]| (docs/PROTOCOL_RULES.md P4).

State at p_i: tau (sends so far); CI: sender k -> {tau: D bitmask} (bit l set = l is a
remaining destination of m_k^tau); DLV[k]; the hold-back buffer.

Invariants (kept after every send and every receive; tests assert them):
  - CI never lists i in any D (S2 strips m.D from every tuple, R4 strips i, and a wire whose
    CI lists one of its own destinations is refused).
  - Per sender, at most one tuple lists a given destination l: the newest one (S2, R8).
  - Per known sender, the newest tuple is kept even when its D is empty, and every other
    tuple has a non-empty D (S3, R9: "keep the latest message for each sender"). One
    exception, from the paper's order: S3 runs before S5, so i's own previous tuple may sit
    empty until the next S3 or R9 (both always check sender i); it never reaches a wire.
  - Given these invariants at every sender, R8 never finds anything to strip (R5 and R6
    already leave at most one tuple per destination); it is kept as the paper's safety net
    and acts on wires from senders that break them.
  - DLV[j] is the tau of the last message from j delivered here; a held message is indexed
    under the sender of the first constraint it still waits for (DLV only grows, so the
    constraints already met stay met).
"""
from __future__ import annotations

import struct

from .base import (U32_MAX, Step, WireCost, WireError, mask_ids, pack_columns, read_columns,
                   read_entries, read_head)
from .holdback import HoldBack, HoldBackProtocol

_HEAD = struct.Struct("<HIHHH")


class Jpcy(HoldBackProtocol):
    name = "jpcy"
    weight = 2.0
    style = ("#2ca02c", "o", "-")
    rule = "deliver m at i iff every (k, tau) in DC_m has tau <= DLV_i[k]"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.tau = 0
        self.ci: dict[int, dict[int, int]] = {}                 # k -> {tau: D mask}
        self.dlv = [0] * n
        self._bit = [1 << x for x in range(n)]
        self._hold = HoldBack(self.dlv)


    # ---- SEND ----

    def _send(self, dests, payload):
        if self.tau >= U32_MAX:
            raise ValueError(f"process {self.me} exhausted its 32-bit timestamps")
        if sum(map(len, self.ci.values())) > 0xFFFF:
            # Sends only shrink this count before encoding it as a u16; refuse up front.
            raise ValueError(f"{self.me} holds more than 65535 CI tuples, beyond the wire format")
        me = self.me
        dm = 0
        for d in dests:
            dm |= 1 << d
        # S1
        tau = self.tau = self.tau + 1
        dc = {}                      # d -> ([k], [tau]): DC_i[d]
        ci = self.ci
        for k, tuples in ci.items():
            touched = False
            for t, D in tuples.items():
                hit = D & dm
                if hit:
                    # S2: just replaced; m carries (k, t) to each destination in D, and m's
                    # own delivery then guarantees m_k^t's there, so D loses them.
                    tuples[t] = D ^ hit
                    touched = True
                    for d in mask_ids(hit):
                        pair = dc.get(d)
                        if pair is None:
                            dc[d] = ([k], [t])
                        else:
                            pair[0].append(k)
                            pair[1].append(t)
            # S3: keep the newest tuple per sender; older ones go once empty. Sender `me`
            # is always checked: its previous tuple may have become non-newest at our last
            # send while already empty.
            if (touched or k == me) and len(tuples) > 1:
                _drop_old_empty(tuples)
        # S4 (encoding): the same CI_i goes to every destination, only DC_i[d] differs.
        senders, taus, dlens, ids = [], [], [], []
        for k, tuples in ci.items():
            for t, D in tuples.items():
                senders.append(k)
                taus.append(t)
                if not D:
                    dlens.append(0)
                elif D & (D - 1):
                    b = mask_ids(D)
                    dlens.append(len(b))
                    ids.extend(b)
                else:
                    dlens.append(1)
                    ids.append(D.bit_length() - 1)
        nci = len(senders)
        ci_bytes = pack_columns("HIH", senders, taus, ids)
        ci_cost = len(ci_bytes)
        head_tail = pack_columns("HH", dests, dlens)
        step = Step()
        empty = ((), ())
        for d in dests:
            ks, ts = dc.get(d, empty)
            ndc = len(ks)
            head = _HEAD.pack(me, tau, len(dests), nci, ndc) + head_tail
            dcb = pack_columns("HI", ks, ts)
            step.emit(d, b"".join((head, ci_bytes, dcb, payload)),
                      WireCost(len(head), ci_cost + len(dcb), nci + ndc, True))
        # S5: the own tuple, after the copies (a copy must not carry m itself).
        own = self.ci.get(me)
        if own is None:
            self.ci[me] = {tau: dm}
        else:
            own[tau] = dm
        return step

    # ---- RECEIVE ----

    def _decode(self, src, data):
        """Every check happens here, before any state changes."""
        n, me = self.n, self.me
        j, tau, nd, nci, ndc = read_head(data, src, _HEAD, "timestamp")
        (dests, dlens, senders, taus), pos = read_columns(data, _HEAD.size, "HHHI",
                                                          (nd, nci, nci, nci))
        ids_at = pos
        pos += 2 * sum(dlens)
        (dc_ks, dc_ts), pos = read_columns(data, pos, "HI", (ndc, ndc))
        payload = data[pos:]
        if nd == 0 or max(dests) >= n or (nci and max(senders) >= n) \
                or (ndc and max(dc_ks) >= n):
            raise WireError(f"a process id is out of range 0..{n - 1}")
        bit = self._bit
        dm = 0
        for d in dests:
            dm |= bit[d]
        if dm.bit_count() != nd or not dm & bit[me] or dm & bit[j]:
            raise WireError(f"bad destination list {dests} for a copy {j} -> {me}")
        if (nci and min(taus) == 0) or (ndc and min(dc_ts) == 0):
            raise WireError("timestamp 0 is never sent")
        # S2 at the sender stripped every destination of m from every tuple.
        cim, _masks, _end = read_entries(data, ids_at, senders, taus, dlens, bit, dm, "CI tuple")
        if sum(map(len, cim.values())) != nci:
            raise WireError("CI lists a tuple twice")
        row = cim.get(j)
        if row is not None and max(row) >= tau:
            raise WireError(f"CI carries a tuple of {j} not older than m itself")
        row = cim.get(me)
        if row is not None and max(row) > self.tau:
            raise WireError(f"CI carries a tuple of {me} that {me} never sent")
        for k, t in zip(dc_ks, dc_ts):
            if k == me or (k == j and t >= tau):
                raise WireError(f"bad delivery constraint ({k}, {t})")
        # record: [dc senders, dc taus, next constraint, tau, sender, D, CI_m, payload]
        return [dc_ks, dc_ts, 0, tau, j, dm, cim, payload]

    def _deliver(self, rec, step):
        """R2-R9 for one message whose constraints are met (R1)."""
        step.delivered.append((rec[4], rec[7]))          # R2
        self._merge(rec[4], rec[3], rec[5], rec[6])

    def _merge(self, j, tau, dm, cim):
        me = self.me
        ci = self.ci
        self.dlv[j] = tau                               # R3
        # R4: just delivered; this process is no longer a remaining destination of m.
        own = dm & ~(1 << me)
        row = cim.get(j)
        if row is None:
            cim[j] = {tau: own}
        else:
            row[tau] = own
        for k, mt in cim.items():
            it = ci.get(k)
            if it is None:
                ci[k] = mt                              # R7 (nothing to compare with)
                if len(mt) > 1:
                    _r8_r9(mt)
                continue
            if it == mt:
                continue                                # R5-R9 would change nothing
            if len(it) == 1 and len(mt) == 1:
                # The common case, R5-R7 for one tuple on each side.
                (t, D), = it.items()
                (u, E), = mt.items()
                if t == u:
                    it[t] = D & E                       # R6
                elif t < u:
                    ci[k] = mt                          # R5 drops t, R7 adds u
                continue                                # (t > u: R5 drops u)
            # R5: already delivered / already replaced. A tuple one side lacks while the
            # other side holds a newer tuple of the same sender was pruned there, so it goes
            # (both sides are judged before anything is deleted). R6 keeps the destinations
            # common to both copies of a tuple; R7 takes the survivors of both sides. With
            # top = the newest tuple on either side, this is:
            mmax = max(mt)
            imax = max(it)
            if mmax > imax:         # every tuple of CI_i is older than mmax
                it = {u: (E & it[u] if u in it else E) for u, E in mt.items()
                      if u in it or u > imax}
                if len(it) > 1:
                    _r8_r9(it)
            else:
                if mmax < imax:     # every tuple of CI_m is older than imax
                    it = {t: (D & mt[t] if t in mt else D) for t, D in it.items()
                          if t in mt or t > mmax}
                else:
                    it = {t: D & mt[t] for t, D in it.items() if t in mt}
                # Every survivor is one of our tuples, perhaps with a smaller D, and our CI
                # already satisfies R8, so R8 finds nothing. R9: every empty tuple but the
                # newest (imax, always kept) goes.
                if len(it) > 1 and 0 in it.values():
                    it = {t: D for t, D in it.items() if D or t == imax}
            ci[k] = it
        if me not in cim:
            own_rows = ci.get(me)
            if own_rows is not None and len(own_rows) > 1:
                _drop_old_empty(own_rows)               # R9 for our own previous tuple


def _r8_r9(tuples: dict) -> None:
    """R8: per destination l, only the newest tuple of the sender lists l. R9: as S3."""
    seen = 0
    for t in sorted(tuples, reverse=True):
        D = tuples[t]
        if D & seen:
            tuples[t] = D & ~seen
        seen |= D
    _drop_old_empty(tuples)


def _drop_old_empty(tuples: dict) -> None:
    """S3/R9: delete every empty tuple but the newest of its sender."""
    newest = max(tuples)
    dead = [t for t, D in tuples.items() if not D and t != newest]
    for t in dead:
        del tuples[t]


PROTOCOL = Jpcy
