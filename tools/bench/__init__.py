"""bus1py's benchmark: bus1py against the usual local IPC, every number from one run.

    .venv/bin/python tools/bench            # full run (make bench), writes docs/BENCHMARKS.md and plots
    .venv/bin/python tools/bench --quick    # toy sizes
    .venv/bin/python tools/bench --only unicast,sweep --no-perf --out /tmp/b

Parts: transports (the peers' channels), bus_channels (bus1py's), rows (what the sections
run), harness (one run across processes), sections (two-process sections), inproc
(in-process sections), perfprof (perf and futex traces), prose (targets and summary computed
from the results), report and report_more (the markdown), plots, cli (progress, tables,
entry point)."""
