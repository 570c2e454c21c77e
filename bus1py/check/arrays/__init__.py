"""The array engine: a check by numpy, pyarrow and the compiled kernels of
bus1py.check._walk (csrc/check/walk.c), in one process.

Invariants: nothing in this package imports pyspark, directly or through what it imports
at module level (tests/check/test_layers.py enforces it): it runs on the driver without a
JVM, and inside a Spark task. events.py reads and validates the rows, properties.py
decides exactly_once, fifo and node_rules, layout.py lays the rows out by position and
walk.py is the one exact walk (causal and consistent), rounds.py decides causal where a
causality cycle stops the walk (the streamed walk's rounds, streamed.py, over the layout),
relax.py relaxes every event's clock (ShiViz), whole.py is the driver's whole check of a trace,
overview.py the run's overview; buckets.py reads a trace too large for one Events into buckets by message id,
linked_files.py writes and reads the linked events as files (the walk's tasks on a
cluster read them), and memory.py hands freed pages back between the phases of a large
check.
"""
