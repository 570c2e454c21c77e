"""The facts about each protocol live on its class (bus1py.causal): its name, the cost
weight the sweep orders runs by and the style the report plots it in."""
from __future__ import annotations

from bus1py import causal


def test_each_protocol_class_states_its_own_facts():
    """Name, cost weight and plot style live on each class (the sweep and the report read
    them there): the name is the module's, every weight is positive, no two styles alike."""
    classes = [causal.protocol_class(p) for p in causal.PROTOCOLS]
    assert [c.name for c in classes] == list(causal.PROTOCOLS)
    assert all(c.weight > 0 for c in classes)
    assert len({c.style for c in classes}) == len(classes)
