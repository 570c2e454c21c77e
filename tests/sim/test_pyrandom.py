"""csrc/sim/pyrandom.c draws exactly what CPython's random.Random draws.

The simulator's C loop must reproduce the Python loop's figures bit for bit, so its
generator is held to random.Random itself: the same seed (any size, sign or zero) gives
the same 32-bit words, the same `random()` doubles, the same `getrandbits`, `_randbelow`
and `sample` results, interleaved in any order (each method consumes the same words).
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus1py.sim import fast

pytestmark = pytest.mark.skipif(fast.lib is None or not hasattr(fast.lib, "pyr_new"),
                                reason="bus1py.sim._fast is not built")

seeds = st.one_of(st.integers(-2**32, 2**32), st.integers(-2**200, 2**200))


def pair(seed):
    ffi, lib = fast.ffi, fast.lib
    words = fast.seed_words(seed)
    c = ffi.gc(lib.pyr_new(ffi.new("uint32_t[]", words), len(words)), lib.pyr_free)
    return random.Random(seed), c


def test_seed_words():
    assert fast.seed_words(0) == [0]
    assert fast.seed_words(-5) == [5]
    assert fast.seed_words(2**32) == [0, 1]
    assert fast.seed_words(2**32 - 1) == [2**32 - 1]


@settings(max_examples=200, deadline=None)
@given(seed=seeds)
def test_random_and_getrandbits(seed):
    py, c = pair(seed)
    lib = fast.lib
    # past 624 words, so the state is regenerated at least once
    for i in range(400):
        assert lib.pyr_random(c) == py.random()
        k = i % 33
        assert lib.pyr_getrandbits(c, k) == py.getrandbits(k)


@settings(max_examples=200, deadline=None)
@given(seed=seeds, bounds=st.lists(st.integers(1, 2**32 - 1), min_size=1, max_size=50))
def test_randbelow(seed, bounds):
    py, c = pair(seed)
    for b in bounds + [1, 2, 3, 2**31, 2**31 + 1, 2**32 - 1]:
        assert fast.lib.pyr_randbelow(c, b) == py._randbelow(b)


# both of sample's branches: the pool (n <= setsize) and the set (n > setsize, e.g. small k
# of a population over 21, or k = 6 of one over 85)
sizes = st.integers(0, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))


@settings(max_examples=300, deadline=None)
@given(seed=seeds, cases=st.lists(sizes, min_size=1, max_size=20))
def test_sample(seed, cases):
    ffi, lib = fast.ffi, fast.lib
    py, c = pair(seed)
    for n, k in cases:
        out = ffi.new("uint32_t[]", max(k, 1))
        scratch = ffi.new("uint32_t[]", max(n, 1))
        assert lib.pyr_sample(c, n, k, out, scratch) == 0
        assert list(out)[:k] == py.sample(range(n), k)
        assert lib.pyr_random(c) == py.random()      # and the same words consumed


def test_sample_large_population_and_refusal():
    ffi, lib = fast.ffi, fast.lib
    py, c = pair(12345)
    n = 100_000
    scratch = ffi.new("uint32_t[]", n)
    for k in (1, 5, 6, 40, 1000, 30_000):
        out = ffi.new("uint32_t[]", k)
        assert lib.pyr_sample(c, n, k, out, scratch) == 0
        assert list(out) == py.sample(range(n), k)
    assert lib.pyr_sample(c, 3, 4, ffi.new("uint32_t[]", 4), ffi.new("uint32_t[]", 3)) == -1
