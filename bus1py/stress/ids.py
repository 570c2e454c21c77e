"""Ids in a stress trace, shared by every worker.

Invariants: message and signal ids are `index << ID_SHIFT | counter` (one counter per
process for both, so ids are unique); node ids are `owner << NODE_SHIFT | k << 1 |
destroyable` (primary nodes: `owner << NODE_SHIFT`); destruction notifications are
`DESTROY_BIT | node id`.  Every id fits an int64 below 2**62 + 2**46.
"""
ID_SHIFT = 40
DESTROY_BIT = 1 << 62  # destruction notification ids: DESTROY_BIT | node id
NODE_SHIFT = 32        # node ids: owner index << NODE_SHIFT | owner's node counter


def node_id(owner: int, k: int) -> int:
    return owner << NODE_SHIFT | k
