"""The columnar codec prs, ks and jpcy share: round trips, entries against a plain model, cuts."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py.causal.base import (WireError, mask_ids, pack_columns, read_columns, read_entries,
                                read_head)

N = 12
BITS = [1 << x for x in range(N)]
_HEAD = struct.Struct("<HIHH")

entries = st.lists(st.tuples(st.integers(0, N - 1), st.integers(1, 2**32 - 1),
                             st.sets(st.integers(0, N - 1), max_size=4)), max_size=8)


def wire(es):
    senders = [s for s, _, _ in es]
    counters = [t for _, t, _ in es]
    lens = [len(d) for _, _, d in es]
    ids = [x for _, _, d in es for x in sorted(d)]
    return _HEAD.pack(3, 7, 0, len(es)) + pack_columns("HHIH", lens, senders, counters, ids)


def model(es, forbidden):
    rows, masks = {}, []
    for s, t, d in es:
        mask = sum(1 << x for x in d)
        if mask & (forbidden | 1 << s):
            return None
        masks.append(mask)
        rows.setdefault(s, {})[t] = mask
    return rows, masks


def decode(data, forbidden=0):
    _, _, _, count = read_head(data, 3, _HEAD, "clock")
    (lens, senders, counters), pos = read_columns(data, _HEAD.size, "HHI", (count,) * 3)
    return read_entries(data, pos, senders, counters, lens, BITS, forbidden, "entry")


@settings(max_examples=50)
@given(entries, st.integers(0, 2**N - 1))
def test_entries_match_the_model_and_every_cut_raises(es, forbidden):
    data = wire(es)
    assert read_head(data, 3, _HEAD, "clock") == (3, 7, 0, len(es))
    want = model(es, forbidden)
    if want is None:
        with pytest.raises(WireError):
            decode(data, forbidden)
        return
    rows, masks, end = decode(data, forbidden)
    assert (rows, masks, end) == (*want, len(data))
    assert [list(mask_ids(m)) for m in masks] == [sorted(d) for _, _, d in es]
    for cut in range(len(data)):                 # every byte belongs to a section
        with pytest.raises(WireError):
            decode(data[:cut], forbidden)


@pytest.mark.parametrize("lens, ids, forbidden, why", [
    ([2], [2, 2], 0, "twice"),
    ([1], [1], 0, "bad entry"),                  # names its own sender
    ([1], [N], 0, "out of range"),
    ([1], [2], 1 << 2, "bad entry"),             # names a forbidden process
])
def test_bad_entries_raise(lens, ids, forbidden, why):
    data = _HEAD.pack(3, 7, 0, 1) + pack_columns("HHIH", lens, [1], [5], ids)
    with pytest.raises(WireError, match=why):
        decode(data, forbidden)


def test_bad_heads_raise():
    with pytest.raises(WireError, match="sender 3"):
        read_head(_HEAD.pack(3, 7, 0, 0), 4, _HEAD, "clock")
    with pytest.raises(WireError, match="clock 0"):
        read_head(_HEAD.pack(3, 0, 0, 0), 3, _HEAD, "clock")
    with pytest.raises(WireError, match="truncated"):
        read_head(b"\x03\x00", 3, _HEAD, "clock")
