"""A peer's nodes and handles, and the well-known names of its nodes.

Invariants:
  - Handles are a peer's own ids for nodes; each call here is one C call on the segment
    (csrc/bus/node.c, handle.c, names.c) that either happens whole or changes nothing,
    and its failure is raised as OSError with the kernel's errno.
  - Every handle and name is checked here before C sees it: a bad one raises a one-line
    error naming it, with nothing changed.
"""
from __future__ import annotations

import errno

from . import args
from ._lib import ffi, lib
from .errors import bus_error
from .peerbase import PeerBase


class NodeOps(PeerBase):
    """Peer's calls on nodes, handles and names (bus1py.Peer is the API)."""

    __slots__ = ()

    def create_node(self) -> int:
        """A new node owned by this peer; returns the owner's handle id.  ENOSPC when the
        bus's node or handle table is full, EDQUOT past this peer's quota_handles,
        ESHUTDOWN (BrokenPipeError) once the peer is disconnected."""
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_node_create(self._bus.base(), self._slot, self._id, out)
        if r:
            raise bus_error(r, f"creating a node on peer {self._id}")
        return out[0]

    def transfer(self, handle: int, other: PeerBase) -> int:
        """Give `other` a handle to the node behind `handle`; returns other's handle id.

        A peer holds at most one handle per node: transferring again returns the same id
        and counts one more reference.  ENXIO when `handle` is not this peer's, ESTALE when
        its node is destroyed, EDQUOT past other's quota_handles, ENOSPC when the handle
        table is full, ESHUTDOWN when either peer is disconnected; ValueError for a peer of
        another bus, TypeError for a handle that is not an int.
        """
        if not isinstance(other, PeerBase) or other._bus.name != self._bus.name:
            raise ValueError(f"transfer target must be a Peer of bus {self._bus.name!r}, not {other!r}")
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_handle_transfer(self._bus.base(), self._slot, self._id, handle,
                                   other._slot, other._id, out)
        if r:
            raise bus_error(r, f"transferring handle {handle} of peer {self._id} to peer {other._id}")
        return out[0]

    def release(self, handle: int) -> None:
        """Drop one reference to `handle`.  The owner of the node gets NODE_RELEASE when
        the last reference other than its own goes; releasing the owner's last reference
        to a live node fails with EBUSY.  ENXIO when `handle` is not this peer's."""
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        r = lib.b1_handle_release(self._bus.base(), self._slot, self._id, handle)
        if r:
            raise bus_error(r, f"releasing handle {handle} of peer {self._id}")

    def destroy(self, *handles: int, release: bool = False) -> tuple[int, int, int]:
        """Destroy the nodes behind these owner handles, in one transaction with one
        destruction timestamp: the owner and every holder get NODE_DESTROY, each with its
        own handle id.  With release=True one reference of each owner handle is released
        as well (bus1's NODES_DESTROY_FLAG_RELEASE_HANDLES): an owner that holds more,
        e.g. from its handle carried back to it, releases the rest one by one.
        Returns the destruction's stamp (timestamp, owner id, sequence), like `send`."""
        if not handles:
            raise bus_error(errno.EINVAL, "destroy needs at least one handle")
        for h in handles:
            args.check_handle(h, "handle")
        if not self._attached:
            self._attach()
        arr, stamp = ffi.new("uint64_t[]", handles), ffi.new("uint64_t[2]")
        r = lib.b1_destroy(self._bus.base(), self._slot, self._id, arr, len(handles), bool(release), stamp)
        if r:
            raise bus_error(r, f"peer {self._id} destroying {handles!r}")
        return (stamp[0], self._id, stamp[1])

    # ---- well-known names ----

    def publish(self, name: str, handle: int) -> None:
        """Register the node behind `handle` (an owner handle of this peer) under `name`,
        for any process on the bus to find with `lookup`.  The name goes when it is
        unpublished, when the node is destroyed or when this peer disconnects.
        EEXIST if a live node has the name, EREMOTE if this peer does not own the node,
        ESTALE if it is destroyed, EINVAL for a bad name (empty, over 255 UTF-8 bytes, a
        NUL), ENOSPC when the bus's max_names are taken.  Names find services; they are
        no security boundary (anyone who may open the bus may use them)."""
        raw = _name_bytes(name)
        args.check_handle(handle, "handle")
        if not self._attached:
            self._attach()
        r = lib.b1_name_publish(self._bus.base(), self._slot, self._id, handle, raw, len(raw))
        if r:
            raise bus_error(r, f"peer {self._id} publishing {name!r} for handle {handle}")

    def lookup(self, name: str) -> int:
        """This peer's own handle to the node published as `name`, one more reference
        counted as `transfer` counts (release it when done).  ENOENT (FileNotFoundError)
        when no live node has the name."""
        raw = _name_bytes(name)
        if not self._attached:
            self._attach()
        out = ffi.new("uint64_t *")
        r = lib.b1_name_lookup(self._bus.base(), self._slot, self._id, raw, len(raw), out)
        if r == -errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, f"no live node is published as {name!r} on bus {self._bus.name!r}")
        if r:
            raise bus_error(r, f"peer {self._id} looking up {name!r}")
        return out[0]

    def unpublish(self, name: str) -> None:
        """Remove `name`, which must name a node this peer owns (EREMOTE otherwise,
        ENOENT if no live node has it)."""
        raw = _name_bytes(name)
        if not self._attached:
            self._attach()
        r = lib.b1_name_unpublish(self._bus.base(), self._slot, self._id, raw, len(raw))
        if r:
            raise bus_error(r, f"peer {self._id} unpublishing {name!r}")


def _name_bytes(name) -> bytes:
    """A well-known name as the C helper takes it: 1 to 255 UTF-8 bytes, no NUL; else
    OSError EINVAL with the reason."""
    if not isinstance(name, str):
        raise bus_error(errno.EINVAL, f"a name is a str, not {type(name).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise bus_error(errno.EINVAL, f"name {name!r} is not valid UTF-8 text") from None
    if not 1 <= len(raw) <= lib.B1_NAME_MAX or b"\0" in raw:
        raise bus_error(errno.EINVAL, f"name {name!r} must be 1 to {lib.B1_NAME_MAX} UTF-8 bytes "
                                      "without NUL")
    return raw
