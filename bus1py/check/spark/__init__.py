"""The Spark engine: the one path for traces the driver does not check alone (engine.py).

Invariants: happened-before and every property come from the trace's rows alone, decided
by the array engine (bus1py.check.arrays) inside tasks that each hold a bounded part of the
trace: by_message.py links the rows in tasks by message id, and the streamed walk split
by column blocks over tasks reading each process's linked events from a file of its own
(walk_blocks.py; what a task gives out: walk_task.py) decides causal, consistent, fifo and
node_rules. checker.py holds one
check's state, malformed.py names the first broken row of a malformed trace, session.py
starts and sizes the session, overview.py counts the run's overview.
"""
