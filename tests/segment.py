"""A bus's shared segment mapped by a test, to leave in it what a kill at an exact store
would: the tables' offsets come from the bus (b1_bus_info), the fields' offsets below from
csrc/bus/layout.h (x86-64 glibc), checked where a peer's id confirms them."""
from __future__ import annotations

import mmap
import struct

from bus1py._lib import ffi, lib

# csrc/bus/layout.h: struct b1_peer (x86-64 glibc: a 40-byte mutex first), struct b1_entry,
# struct b1_msg
PEER_ID, PEER_ROOT, PEER_FRONT, PEER_PIDS = 40, 52, 56, None
PEER_WAKE_SEQ, PEER_WAITERS, PEER_NODE_WAITERS = 108, 120, 124
PEER_N_HANDLES = 484  # u32
PEER_SHARES = 512  # shares[16], 16 bytes each: messages, fds (u32), bytes (u64)
PEER_SHARE_HANDLES = 768  # share_handles[16], u32 each
ENTRY_MSG = 40
HANDLE_REFS, HANDLE_PENDING = 24, 28
MSG_REFS, MSG_LEN, MSG_NEXT_FREE, MSG_TS, MSG_STAGER, MSG_CARVED = 0, 4, 20, 24, 32, 40
B1_MSG_CARVED = 0x62316D73  # in a record's carved word, xor its unit, once its header is written


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
        assert self.u64(base + PEER_ID) == p.id, "struct b1_peer moved: update PEER_* offsets"
        return base + field

    def entry(self, index, field):
        return self.offs[3] + index * self.sizes[3] + field

    def handle(self, handle_id, field):
        return self.offs[2] + (handle_id & 0xFFFFFF) * self.sizes[2] + field

    def record(self, unit, field):
        return self.offs[4] + unit * 64 + field
