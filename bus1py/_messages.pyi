# Types of bus1py._messages (csrc/py/messages.c, peer.c, slice.c, topic.c): the hot calls in C.
# PeerCore.send and PeerCore.recv are Peer's public send and recv; their texts are the C
# docstrings (help(bus1py.Peer.send)).  The module functions are the private calls of
# sending.py, receiving.py and receive.py, typed as the C code parses them.
from collections.abc import Iterable
from typing import Any, Literal, overload

from typing_extensions import Buffer

from .message import Message
from .receive import SliceMessage

class PeerCore:
    @property
    def _bus(self) -> Any: ...
    @property
    def _slot(self) -> int: ...
    @property
    def _id(self) -> int: ...
    _ready: Any
    _attached: bool | None  # None once closed
    def __init__(self, bus: Any, slot: int, peer_id: int, /) -> None: ...
    def send(self, destinations: int | Iterable[int], payload: Buffer, handles: Iterable[int] = (), *,
             fds: Iterable[int] = (), unreachable_error: bool = False) -> tuple[int, int, int]:
        """Send `payload` to every node in `destinations` in one transaction; returns the stamp."""
    # node=h (issue 36's per-node receive) copies: it has no copy=False form
    @overload
    def recv(self, timeout: float | None = None, copy: Literal[True] = True, *, node: int | None = None) -> Message:
        """The next message (a copy); with node=h the first one addressed to handle h."""
    @overload
    def recv(self, timeout: float | None, copy: Literal[False], *, node: None = None) -> SliceMessage:
        """The next message, its payload a read-only view into the pool."""
    @overload
    def recv(self, timeout: float | None = None, *, copy: Literal[False], node: None = None) -> SliceMessage:
        """The next message, its payload a read-only view into the pool."""
    @overload
    def recv(self, timeout: float | None = None, copy: bool = True, *, node: int | None = None) -> Message:
        """The next message."""

# topic.c: a topic's send and a subscription's receive as single C calls (bus1py/topic.py)
class PartialSender:
    def __init__(self, peer: PeerCore, dests: list[int], flags: int, slow: Any, /) -> None: ...
    def __call__(self, payload: Buffer, *, handles: Iterable[int] = (), fds: Iterable[int] = ()) -> int: ...

class NodeReader:
    last: int
    def __init__(self, peer: PeerCore, node: int, other: Any, slow: Any, /) -> None: ...
    def __call__(self, timeout: float | None = None) -> Message: ...

class Slice:
    token: int
    held: int
    def release(self) -> None: ...

def exported(view: memoryview, /) -> bool: ...
def setup(message: type, slice_message: type, types: tuple[Any, ...], recv_many: int, recv: int,
          send: int, slice_release: int, send_iov: int, /) -> None: ...
# a Message (a list of them), or a negative errno: Any, as the callers tell them apart by type()
def setup_partial(send_partial: int, /) -> None: ...
# a negative errno, a count of destinations that took it, or None (the errors array is filled)
def partial_send(frame: int, slot: int, peer_id: int, dests: Any, payload: Buffer, flags: int, errors: int,
                 cap: int, /) -> Any: ...
def setup_calls(request: type, recv_node: int, handle_release: int, /) -> None: ...
def recv(frame: int, slot: int, peer_id: int, timeout_ns: int, peer: Any, /) -> Any: ...
# a Message, a negative errno, or 1 (the watched handle's node is gone)
def recv_node(frame: int, slot: int, peer_id: int, node: int, watch: int, timeout_ns: int, tag: int,
              peer: Any, /) -> Any: ...
# the stamp's timestamp, or a negative errno
def tagged_send(frame: int, slot: int, peer_id: int, dest: int, payload: bytes, n_handles: int, flags: int,
                tag: int, release: int, /) -> int: ...
def recv_many(frame: int, slot: int, peer_id: int, max_messages: int, timeout_ns: int, flags: int,
              held: Any, peer: Any, /) -> Any: ...
def send_many(frame: int, slot: int, peer_id: int, dest: int, n: int, payloads: list[Any] | tuple[Any, ...],
              n_handles: int, flags: int, /) -> int | None: ...
