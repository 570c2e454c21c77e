"""The stress tool: many OS processes, one bus, a seeded workload, a SPEC section 7 trace.

Invariants (each module states its own): a process's actions depend only on the seed and
its index; every process traces alone, into its own Parquet files; a run leaves no process
and no shared memory behind.  Entry points: `bus1py stress` (cli.py), `bus1py demo`
(demo.py), `run_stress(StressConfig(...))` (runner.py).  See docs/STRESS.md.
"""
from .runner import StressConfig, StressResult, run_stress

__all__ = ["StressConfig", "StressResult", "run_stress"]
