# Invariants: Hypothesis draws, gathered up front. The checker's tests pay seconds per Spark
# run, so they draw a whole batch of examples first and check them in as few runs as they
# can; this is the one place that turns a strategy into such a list.
from hypothesis import HealthCheck, given, settings


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
