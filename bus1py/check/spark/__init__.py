"""The Spark engine: one check's plan of Spark jobs (checker.py) and the phases it runs.

Invariants: happened-before and every property come from the trace's rows alone; Spark
does what needs the rows spread out (the screen, the main pass's validation and joins,
the witness, the rounds for cyclic histories), and wherever the rows fit one task the
array engine (bus1py.check.arrays) does the deciding inside it: the whole check as one
task (one_task.py), the exact walk as one task (walk_task.py), the walk on the collected
main pass (Checker._on_driver), and past one task the linking in tasks by message and
the walk with fifo and node_rules (by_message.py); on a cluster every walk is split by
column blocks over tasks that read the events from files (walk_blocks.py). session.py starts and sizes the session; overview.py
counts the run's overview.
"""
