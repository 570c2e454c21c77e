# Invariants: Hypothesis draws, gathered up front. The checker's tests pay seconds per Spark
# run, so they draw a whole batch of examples first and check them in as few runs as they
# can; this is the one place that turns a strategy into such a list.
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus1py.check.simulate import mutate, simulate

# the simulated traces the agreement tests draw: up to 5 processes, 70 steps
params = st.fixed_dictionaries({
    "seed": st.integers(0, 2 ** 32 - 1),
    "nprocs": st.integers(1, 5),
    "steps": st.integers(0, 70),
    "p_multicast": st.sampled_from([0.0, 0.3, 0.7]),
    "p_signal": st.sampled_from([0.0, 0.15, 0.3]),
    "p_destroy": st.sampled_from([0.0, 0.05, 0.15]),
})


def make_trace(p, mutation=None):
    """The rows simulate() draws for p, with the mutation planted when one is named."""
    rng = random.Random(p["seed"])
    rows = simulate(rng, nprocs=p["nprocs"], steps=p["steps"], p_multicast=p["p_multicast"],
                    p_signal=p["p_signal"], p_destroy=p["p_destroy"])
    return mutate(rows, mutation, rng) if mutation else rows


def gather(n, strategy):
    """Up to n examples drawn from `strategy` (no example database: every run draws anew)."""
    out = []

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out
