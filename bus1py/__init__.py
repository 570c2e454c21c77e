"""bus1py: the Linux bus1 IPC design as real IPC between OS processes.

    import bus1py
    with bus1py.Bus.create() as bus:
        a, b = bus.peer(), bus.peer()
        node = b.create_node()                # b owns a node ...
        handle = b.transfer(node, a)          # ... and gives a a handle to it
        a.send([handle], b"hello")
        print(b.recv().payload)

The contract (semantics, API, trace format) is docs/SPEC.md; the ordering algorithm is bus1's:
Lamport clocks with a global tie-break, blocks staged before a message is stamped, so that
every receiver sees multicasts in one order and causes before their effects.
"""
from .bus import INJECT_KINDS, Bus, Limits
from .errors import bus_error
from .message import HANDLE_INVALID, Message, MessageType, Request
from .peer import Peer, PeerInfo, send
from .transaction import Transaction

__all__ = [
    "Bus", "Limits", "Peer", "PeerInfo", "Message", "MessageType", "Request", "HANDLE_INVALID",
    "Transaction", "send", "bus_error", "INJECT_KINDS",
]
__version__ = "0.1.0"
