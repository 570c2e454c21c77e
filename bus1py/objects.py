"""Python objects as messages, zero-copy: pickle protocol 5 with its out-of-band buffers
written straight into the pool record (`Peer.send_obj`) and viewed there by the receiver
(`Message.obj`).

A record's payload (integers little-endian):

    "B1OB" | u32 buffers n | u64 pickle length p | n x (u64 offset, u64 length) | pickle | buffers

Offsets count from the payload's first byte; the bytes between the pickle and the buffers,
and after the last, are padding.

Invariants:
  - The object is pickled before anything is taken in the pool: an object that cannot be
    pickled raises TypeError with nothing sent and nothing reserved.
  - Each out-of-band buffer (numpy arrays, bytearrays, PickleBuffers) is copied once, from
    the object's memory into the reserved record; the send is `Peer.reserve`'s, so it is
    committed when `send_obj` returns, exactly as `send` of those bytes would be.
  - Every buffer starts at an address that is a multiple of ALIGN.  The pool lies at the
    same page-aligned offset in every mapping, so the receiver's views are aligned too.
  - `obj()` of a zero-copy message (`recv(copy=False)`) gives out-of-band buffers that are
    read-only views of the pool and hold an export of `msg.payload`: while any object built
    on one is alive, `msg.release()` raises BufferError and changes nothing (the zero-copy
    contract of receive.py), so no object can read a record after it went back; a message
    collected while one is alive leaves its record charged (ResourceWarning), for the same
    reason.  Buffers nothing kept (a bytearray is rebuilt as a copy) are dropped before
    `obj()` returns.
  - `obj()` of a copied message views the payload's bytes; nothing is charged.
  - A payload that is not such a record raises ValueError saying what is wrong with it.
"""
from __future__ import annotations

import pickle
import struct

from ._lib import ffi, lib

ALIGN = 64
_MAGIC = b"B1OB"
_HEAD = struct.Struct("<4sIQ")
_BUF = struct.Struct("<QQ")


def _pickled(obj) -> tuple:
    """(in-band pickle, [contiguous byte views of the out-of-band buffers])."""
    bufs: list[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        return data, [b.raw() for b in bufs]
    except Exception as e:  # noqa: BLE001 - pickle's errors are of every kind; one says which
        raise TypeError(f"cannot send {type(obj).__name__} object: pickling failed: {e}") from e


def _address(view) -> int:
    ptr = ffi.from_buffer(view)
    try:
        return int(ffi.cast("uintptr_t", ptr))
    finally:
        ffi.release(ptr)


def send_obj(peer, destinations, obj, handles=(), unreachable_error=False) -> tuple:
    """Peer.send_obj: returns the stamp, as `send` does."""
    data, raws = _pickled(obj)
    try:
        lens = [r.nbytes for r in raws]
        start = _HEAD.size + _BUF.size * len(lens) + len(data)
        # room for the worst padding: where the record lies is known only once it is taken
        r = peer.reserve(destinations, start + sum(lens) + (ALIGN - 1) * len(lens), handles,
                         unreachable_error=unreachable_error)
        try:
            view = r.payload
            addr, pos = _address(view), start
            _HEAD.pack_into(view, 0, _MAGIC, len(lens), len(data))
            for i, (raw, n) in enumerate(zip(raws, lens)):
                pos += -(addr + pos) % ALIGN
                _BUF.pack_into(view, _HEAD.size + _BUF.size * i, pos, n)
                view[pos:pos + n] = raw
                pos += n
            view[start - len(data):start] = data
        except BaseException:
            r.abort()
            raise
        return r.commit()
    finally:
        for raw in raws:
            raw.release()


def loads(msg):
    """Message.obj: the object of a send_obj record (see the invariants for its buffers)."""
    if msg.type != lib.B1_MSG_DATA:
        raise ValueError(f"a {msg.type.name} message carries no object")
    payload = msg.payload
    size = len(payload)
    if size < _HEAD.size:
        raise ValueError(f"payload of {size} B is too short for send_obj's header")
    magic, n, plen = _HEAD.unpack_from(payload, 0)
    if magic != _MAGIC:
        raise ValueError(f"payload starts with {bytes(magic)!r}, not send_obj's {_MAGIC!r}")
    start = _HEAD.size + _BUF.size * n + plen
    if start > size:
        raise ValueError(f"payload of {size} B is shorter than its header says ({start} B)")
    spans = [_BUF.unpack_from(payload, _HEAD.size + _BUF.size * i) for i in range(n)]
    for off, length in spans:
        if off < start or off + length > size:
            raise ValueError(f"buffer at {off} of {length} B lies outside the payload's {start}..{size}")
    # a memoryview of a PickleBuffer holds a real export of the payload, and every slice of
    # it shares that export: msg.release() fails while an object still uses one
    whole = memoryview(pickle.PickleBuffer(payload))
    try:
        bufs = [whole[off:off + length] for off, length in spans]
        with whole[start - plen:start] as data:
            return pickle.loads(data, buffers=bufs)
    finally:
        whole.release()
