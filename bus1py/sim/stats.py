"""Intervals over a cell's runs, and where one protocol's curve crosses another's.

Invariants: pure functions of their arguments; no dependency beyond the standard library (the
t quantiles are a table, not scipy).
"""
from __future__ import annotations

import math

#: Student's t, two-sided 95% (the 0.975 quantile), for 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with df degrees of freedom (df >= 1); beyond the
    table 1.96 + 2.5/df, within 0.002 of the exact value."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.5 / df


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval) over independent runs; the half-width is 0
    for one run (no spread can be estimated) and for identical values."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("no values")
    m = sum(v) / len(v)
    if len(v) < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in v) / (len(v) - 1)
    return m, t975(len(v) - 1) * math.sqrt(var / len(v))


def _first_rise(xs, d):
    """The first x where d (sampled at xs, increasing) goes from <= 0 to > 0 for good:
    interpolated linearly between the samples around the last sign change. None when d is
    never positive at the last sample; -inf when it is positive at every sample."""
    if d[-1] <= 0:
        return None
    i = len(d) - 1
    while i > 0 and d[i - 1] > 0:
        i -= 1
    if i == 0:
        return -math.inf
    x0, x1, d0, d1 = xs[i - 1], xs[i], d[i - 1], d[i]
    return x0 + (x1 - x0) * (-d0) / (d1 - d0)


def crossover(xs, a, a_half, b, b_half) -> dict:
    """Where curve a rises above curve b for good, both sampled at xs (increasing) with 95%
    half-widths: `at` from the means, and an interval from the bounds: `lo` where a's upper
    bound rises above b's lower bound, `hi` where a's lower bound rises above b's upper bound.
    -inf: already above at xs[0]; None: not above at xs[-1]."""
    xs = list(xs)
    at = _first_rise(xs, [p - q for p, q in zip(a, b)])
    lo = _first_rise(xs, [p + ph - (q - qh) for p, ph, q, qh in zip(a, a_half, b, b_half)])
    hi = _first_rise(xs, [p - ph - (q + qh) for p, ph, q, qh in zip(a, a_half, b, b_half)])
    return {"at": at, "lo": lo, "hi": hi}
