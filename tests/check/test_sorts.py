"""The array engine's sorts (arrays/events.py) against numpy's own: stable_order is
np.argsort(kind="stable") and lex_order np.lexsort, ties included, whatever the keys'
range (packed into one sorted key when it fits, numpy's otherwise); per_process.seq_order
is np.argsort of a numbering 0, 1, 2, ... and None for anything else."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from bus1py.check.arrays.events import lex_order, stable_order
from bus1py.check.arrays.per_process import seq_order

WIDTHS = st.sampled_from([1, 3, 2 ** 20, 2 ** 40, 2 ** 62])


@given(st.integers(0, 2000), WIDTHS, st.integers(0, 2 ** 32))
def test_stable_order_is_numpys_stable_argsort(n, width, seed):
    key = np.random.default_rng(seed).integers(-width, width, n)
    assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


@given(st.integers(0, 2000), WIDTHS, WIDTHS, st.integers(0, 2 ** 32))
def test_lex_order_is_numpys_lexsort(n, major_width, minor_width, seed):
    rng = np.random.default_rng(seed)
    major = rng.integers(-major_width, major_width, n)
    minor = rng.integers(-minor_width, minor_width, n)
    assert np.array_equal(lex_order(major, minor), np.lexsort((minor, major)))


@given(st.integers(0, 300), st.integers(0, 2 ** 32), st.sampled_from(
    ["numbered", "repeat", "gap", "negative"]))
def test_seq_order_sorts_a_numbering_and_refuses_anything_else(n, seed, how):
    rng = np.random.default_rng(seed)
    seq = rng.permutation(n).astype(np.int64)
    if how != "numbered" and n:
        i, j = rng.integers(0, n, 2)
        seq[i] = {"repeat": seq[j], "gap": n, "negative": -1}[how]
    numbered = np.array_equal(np.sort(seq), np.arange(n))
    got = seq_order(seq)
    if numbered:
        assert np.array_equal(got, np.argsort(seq))
    else:
        assert got is None
