"""The array engine's sorts (arrays/events.py) against numpy's own: stable_order is
np.argsort(kind="stable") and lex_order np.lexsort, ties included, whatever the keys'
range (packed into one sorted key when it fits, numpy's otherwise)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from bus1py.check.arrays.events import lex_order, stable_order

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
