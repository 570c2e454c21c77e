"""ks: Kshemkalyani-Singhal optimal causal multicast (Algorithm 6.3 of the textbook).

Source: Kshemkalyani & Singhal, "Necessary and sufficient conditions on information for
causal message ordering and their optimal implementation", Distrib. Comput. 11(2):91-111,
1998; as Algorithm 6.3 in their "Distributed Computing: Principles, Algorithms, and Systems",
CUP 2008, ch. 6; docs/PROTOCOL_RULES.md section 6 for the transcription followed here.

Delivery condition: a copy M from k is delivered at j iff every entry o_{m,t} of O_M that
still lists j in o.Dests has t <= SR_j[m].

Wire (u16 ids, u32 clocks, little-endian), columnar:
    header  = k | t_k | |Dests| | |O_M| | Dests ids | |o.Dests| of each entry    10+2|Dests|+2|O_M|
    control = entry senders | entry clocks | entry dest ids (concatenated)
            = sum over o in O_M of (6 + 2|o.Dests|)                      (docs/PROTOCOL_RULES.md section 10)
    payload
The header holds what seed 001 leaves out of its cost (sender, own clock, Dests) and the
section lengths. Dependents per copy = |O_M| (docs/PROTOCOL_RULES.md P4). O_M differs per copy.

State at j: clock (sends so far); SR[m] (clock of the last message from m delivered here);
LOG: sender s -> {t: Dests bitmask}, initialised to (s, 0, {}) for every s as in the book
(so early copies carry those n entries, 6 B each, until a sender's first message is known);
the hold-back buffer.

Invariants:
  - No LOG entry lists j itself (a wire's O_M names no destination of M other than j, and
    RCV removes j from every entry).
  - Per sender, the newest entry is kept even with empty Dests; older entries have non-empty
    Dests (PURGE_NULL_ENTRIES after SND and RCV; `me` is always purged, since its previous
    entry may have become non-newest at our own last send).
  - A held message is indexed under the sender of the first entry it still waits for.
"""
from __future__ import annotations

import struct
from itertools import compress, repeat
from operator import and_, not_

from .base import (U32_MAX, Step, WireCost, WireError, mask_ids, pack_columns, read_columns,
                   read_entries, read_head)
from .holdback import HoldBack, HoldBackProtocol

_HEAD = struct.Struct("<HIHH")


def _purge(entries: dict) -> None:
    """PURGE_NULL_ENTRIES for one sender: delete empty entries but the newest."""
    newest = max(entries)
    dead = [t for t, D in entries.items() if not D and t != newest]
    for t in dead:
        del entries[t]


class Ks(HoldBackProtocol):
    name = "ks"
    weight = 2.0
    style = ("#9467bd", "D", "--")
    rule = "deliver M at j iff every o(m,t) in O_M listing j has t <= SR_j[m]"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.clock = 0
        self.sr = [0] * n
        self._bit = [1 << x for x in range(n)]
        self.log = {s: {0: 0} for s in range(n)}    # s -> {t: Dests mask}
        self._hold = HoldBack(self.sr)

    # ---- SND ----

    def _send(self, dests, payload):
        if self.clock >= U32_MAX:
            raise ValueError(f"process {self.me} exhausted its 32-bit clock")
        if sum(map(len, self.log.values())) > 0xFFFF:
            # Sends only shrink this count before encoding it as a u16; refuse up front.
            raise ValueError(f"{self.me} holds more than 65535 log entries, beyond the wire")
        me = self.me
        dm = 0
        for d in dests:
            dm |= 1 << d
        clock = self.clock = self.clock + 1
        # Step 2, in one pass over LOG: the columns every copy shares (each entry with what
        # survives for all copies, Dests minus M's destinations, kept if that is non-empty or
        # the entry is its sender's newest), and `hits`, the entries that also name some
        # destinations of M, which only the copies to those destinations get (step 2.3).
        # Step 3 in the same pass: once read, an entry forgets M's destinations.
        senders, clocks, dlens, ids = [], [], [], []
        hits = []                    # (column index, id index, s, t, hit mask, in columns)
        for s, entries in self.log.items():
            newest = max(entries) if len(entries) > 1 else None
            touched = False
            for t, D in entries.items():
                hit = D & dm
                rest = D ^ hit
                if hit:
                    entries[t] = rest
                    touched = True
                keep = rest or newest is None or t == newest
                if hit:
                    hits.append((len(senders), len(ids) + (rest.bit_count() if keep else 0),
                                 s, t, hit, keep))
                if keep:
                    senders.append(s)
                    clocks.append(t)
                    if rest:
                        b = mask_ids(rest)
                        dlens.append(len(b))
                        ids.extend(b)
                    else:
                        dlens.append(0)
            if (touched or s == me) and len(entries) > 1:
                _purge(entries)
        step = Step()
        head_dests = pack_columns("H", dests)
        shared = None
        for d in dests:
            bd = 1 << d
            mine = [h for h in hits if h[4] & bd]
            if mine:
                cs, ct, cl, ci = list(senders), list(clocks), list(dlens), list(ids)
                for at, at_id, s, t, _hit, kept in reversed(mine):
                    ci.insert(at_id, d)
                    if kept:
                        cl[at] += 1
                    else:
                        cs.insert(at, s)
                        ct.insert(at, t)
                        cl.insert(at, 1)
                wire_head = pack_columns("H", cl)
                ctl = pack_columns("HIH", cs, ct, ci)
                no = len(cs)
            else:
                if shared is None:
                    shared = (pack_columns("H", dlens),
                              pack_columns("HIH", senders, clocks, ids))
                wire_head, ctl = shared
                no = len(senders)
            head = _HEAD.pack(me, clock, len(dests), no) + head_dests + wire_head
            step.emit(d, b"".join((head, ctl, payload)), WireCost(len(head), len(ctl), no, True))
        # Step 4: the own entry, after the copies.
        self.log[me][clock] = dm
        return step

    # ---- RCV ----

    def _decode(self, src, data):
        """Every check happens here, before any state changes."""
        n, me = self.n, self.me
        k, tk, nd, no = read_head(data, src, _HEAD, "clock")
        (dests, dlens, senders, clocks), pos = read_columns(data, _HEAD.size, "HHHI",
                                                            (nd, no, no, no))
        if nd == 0 or max(dests) >= n or (no and max(senders) >= n):
            raise WireError(f"a process id is out of range 0..{n - 1}")
        bit = self._bit
        dm = 0
        for d in dests:
            dm |= bit[d]
        mebit = bit[me]
        if dm.bit_count() != nd or not dm & mebit or dm & bit[k]:
            raise WireError(f"bad destination list {dests} for a copy {k} -> {me}")
        # SND step 2 leaves no destination of M but the copy's own in any o.Dests, and
        # nobody sends to itself.
        bad = (dm & ~mebit)
        om, masks, pos = read_entries(data, pos, senders, clocks, dlens, bit, bad, "O_M entry")
        payload = data[pos:]
        if any(compress(map(not_, clocks), masks)):
            raise WireError("bad O_M entry: clock 0 with destinations")
        mine = list(map(and_, masks, repeat(mebit)))
        wk = list(compress(senders, mine))              # the entries this copy waits for
        wt = list(compress(clocks, mine))
        if sum(map(len, om.values())) != no:
            raise WireError("O_M lists an entry twice")
        row = om.get(k)
        if row is not None and max(row) >= tk:
            raise WireError(f"O_M carries an entry of {k} not older than M itself")
        row = om.get(me)
        if row is not None and max(row) > self.clock:
            raise WireError(f"O_M carries an entry of {me} that {me} never sent")
        # record: [wait senders, wait clocks, next wait, t_k, k, Dests, O_M, payload]
        return [wk, wt, 0, tk, k, dm, om, payload]

    def _deliver(self, rec, step):
        step.delivered.append((rec[4], rec[7]))
        self._merge(rec[4], rec[3], rec[5], rec[6], rec[0], rec[1])

    def _merge(self, k, tk, dm, om, wk, wt):
        me = self.me
        log = self.log
        self.sr[k] = tk                                  # step 2
        # Step 3: M itself joins O_M; j is no longer a remaining destination of anything
        # (only the entries this copy waited for listed j).
        keep = ~(1 << me)
        for s, t in zip(wk, wt):
            om[s][t] &= keep
        row = om.get(k)
        if row is None:
            om[k] = {tk: dm & keep}
        else:
            row[tk] = dm & keep
        for s, ot in om.items():
            lt = log[s]
            if lt == ot:
                continue                                 # step 4 would change nothing
            # Step 4: an entry one side lacks while the other holds a newer entry of the same
            # sender was pruned there, so it goes (both sides are judged before anything is
            # deleted); for the same (s, t) the Dests common to both survive; then
            # LOG := LOG u O_M. With top = the newest entry on either side, this is:
            omax = max(ot)
            lmax = max(lt)
            if omax > lmax:
                top = omax
                lt = {t: (D & lt[t] if t in lt else D) for t, D in ot.items()
                      if t in lt or t > lmax}
            elif omax < lmax:
                top = lmax
                lt = {t: (D & ot[t] if t in ot else D) for t, D in lt.items()
                      if t in ot or t > omax}
            else:
                top = lmax
                lt = {t: D & ot[t] for t, D in lt.items() if t in ot}
            if len(lt) > 1:
                dead = [t for t, D in lt.items() if not D and t != top]
                for t in dead:                           # step 5, PURGE_NULL_ENTRIES
                    del lt[t]
            log[s] = lt
        if me not in om:
            own = log[me]
            if len(own) > 1:
                _purge(own)


PROTOCOL = Ks
