"""A bus's shared segment mapped by a test, to leave in it what a kill at an exact store
would: the tables' offsets come from the bus (b1_bus_info), the fields' offsets from the
compiled layout (b1_layout_offset, by name), so the bytes read and written are the fields
csrc/bus/layout.h declares wherever a change of it moves them."""
from __future__ import annotations

import mmap
import struct

from bus1py._lib import ffi, lib


def offset(name: str) -> int:
    """offsetof(struct record, field) for "record.field", sizeof(struct record) for "record"."""
    at = lib.b1_layout_offset(name.encode())
    assert at >= 0, f"{name} is not in csrc/bus/bus.c's layout_names"
    return at


PEER_ID, PEER_ROOT, PEER_FRONT, PEER_WAKE_SEQ, PEER_WAITERS, PEER_N_HANDLES, PEER_SHARES, PEER_SHARE_HANDLES = (
    offset("b1_peer." + f)
    for f in ("id", "root", "front", "wake_seq", "waiters", "n_handles", "shares", "share_handles"))
SHARE_SIZE = offset("b1_share")  # shares[i] is at PEER_SHARES + i * SHARE_SIZE: messages, fds (u32), bytes (u64)
ENTRY_MSG = offset("b1_entry.msg")
HANDLE_REFS, HANDLE_PENDING = offset("b1_handle.refs"), offset("b1_handle.pending")
MSG_REFS, MSG_NEXT_FREE, MSG_TS, MSG_STAGER, MSG_CARVED = (
    offset("b1_msg." + f) for f in ("refs", "next_free", "ts", "stager", "carved"))
B1_MSG_CARVED = 0x62316D73  # layout.h: a record's carved word is this xor its unit once its header is written


class Segment:
    """A bus's segment mapped by the test, with the tables' offsets."""

    def __init__(self, bus):
        info = ffi.new("struct b1_bus_info *")
        lib.b1_bus_info(bus.base(), info)
        self.offs, self.sizes = list(info.table_offsets), list(info.slot_sizes)
        self.f = open("/dev/shm" + bus.name, "r+b")
        self.mm = mmap.mmap(self.f.fileno(), 0)

    def close(self):
        self.mm.close()
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def u32(self, off, value=None):
        if value is not None:
            self.mm[off:off + 4] = struct.pack("<I", value)
        return struct.unpack_from("<I", self.mm, off)[0]

    def u64(self, off, value=None):
        if value is not None:
            self.mm[off:off + 8] = struct.pack("<Q", value)
        return struct.unpack_from("<Q", self.mm, off)[0]

    def peer(self, p, field):
        base = self.offs[0] + p._slot * self.sizes[0]
        assert self.u64(base + PEER_ID) == p.id, f"peer slot {p._slot} does not hold peer {p.id}"
        return base + field

    def entry(self, index, field):
        return self.offs[3] + index * self.sizes[3] + field

    def handle(self, handle_id, field):
        return self.offs[2] + (handle_id & 0xFFFFFF) * self.sizes[2] + field

    def record(self, unit, field):
        return self.offs[4] + unit * 64 + field
