"""Python objects as messages (`Peer.send_obj` / `Message.obj`, bus1py/objects.py): random
nested objects round-trip equal, a child process gets a 1 MiB array, a zero-copy message's
arrays are views of the pool that hold it until released, and bad input sends nothing."""
from __future__ import annotations

import gc
import multiprocessing as mp
import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import bus1py
from bus1py._lib import ffi
from bus1py.objects import ALIGN

_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def pair(make_bus):
    bus = make_bus(spin_ns=0, max_payload=4 << 20, pool_size=32 << 20)
    a, b = bus.peer(), bus.peer(quota_bytes=16 << 20)
    return bus, a, b, b.transfer(b.create_node(), a)


arrays = hnp.arrays(st.sampled_from([np.uint8, np.int32, np.float64, np.complex64]),
                    hnp.array_shapes(min_dims=0, max_dims=3, max_side=40),
                    elements={"allow_nan": False})
leaves = (st.integers() | st.text(max_size=20) | st.binary(max_size=300)
          | st.binary(max_size=3000).map(bytearray) | arrays)
objects = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=4)
                       | st.tuples(inner, inner), max_leaves=12)


def _same(x, y):
    """Equal, down to type, dtype and shape (numpy's == compares element-wise)."""
    if isinstance(x, np.ndarray):
        return type(y) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
    if type(x) is not type(y):
        return False
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return x == y


@_settings
@given(obj=objects, copy=st.booleans())
def test_random_objects_round_trip_equal(pair, obj, copy):
    bus, a, b, h = pair
    used = bus.info()["pool_used"]
    stamp = a.send_obj([h], obj)
    m = b.recv(0, copy=copy)
    assert m.stamp == stamp
    got = m.obj()
    assert _same(obj, got)
    del got
    m.release()
    assert bus.info()["pool_used"] == used


def test_out_of_band_buffers_are_aligned_views_of_the_pool(pair):
    bus, a, b, h = pair
    arrs = [np.arange(n, dtype=np.float64) for n in (1, 7, 1000)]
    a.send_obj(h, {"arrays": arrs, "tag": "x"})
    m = b.recv(0, copy=False)
    got = m.obj()["arrays"]
    base = int(ffi.cast("uintptr_t", bus.base()))
    end = base + bus.info()["segment_size"]
    for x, y in zip(arrs, got):
        addr = y.__array_interface__["data"][0]
        assert base <= addr < addr + y.nbytes <= end  # in the pool: not a copy
        assert addr % ALIGN == 0 and y.flags.aligned and not y.flags.writeable
        assert np.array_equal(x, y)


def test_release_waits_for_the_arrays_then_the_views_are_gone(pair):
    bus, a, b, h = pair
    used = bus.info()["pool_used"]
    a.send_obj(h, [np.ones(4096, np.uint8), bytearray(b"copied on load")])
    m = b.recv(0, copy=False)
    arr, ba = m.obj()
    assert bus.info()["pool_used"] > used
    with pytest.raises(BufferError):
        m.release()  # the array still views the record: nothing changes
    assert arr.sum() == 4096 and bus.info()["pool_used"] > used
    view = memoryview(arr)
    del arr
    with pytest.raises(BufferError):
        m.release()  # a buffer taken from the array holds it as well
    view.release()
    m.release()
    assert bus.info()["pool_used"] == used and ba == bytearray(b"copied on load")
    with pytest.raises(ValueError):
        m.obj()  # the payload view is released


def test_a_message_collected_under_a_live_array_keeps_its_record(pair):
    bus, a, b, h = pair
    used = bus.info()["pool_used"]
    a.send_obj(h, np.arange(1000))
    m = b.recv(0, copy=False)
    arr = m.obj()
    with pytest.warns(ResourceWarning, match="stays charged"):
        del m
        gc.collect()
    assert bus.info()["pool_used"] > used and arr[-1] == 999  # bytes in use never go back


def test_a_copied_message_keeps_its_objects_after_release(pair):
    bus, a, b, h = pair
    a.send_obj(h, np.arange(100))
    m = b.recv(0)
    arr = m.obj()
    m.release()
    assert np.array_equal(arr, np.arange(100))


def test_multicast_receivers_see_one_record(make_bus):
    bus = make_bus(spin_ns=0, max_payload=4 << 20, pool_size=32 << 20)
    a = bus.peer()
    rx = [bus.peer(quota_bytes=8 << 20) for _ in range(3)]
    hs = [p.transfer(p.create_node(), a) for p in rx]
    a.send_obj(hs, np.arange(1 << 17, dtype=np.int64))
    ms = [p.recv(0, copy=False) for p in rx]
    got = [m.obj() for m in ms]
    assert len({g.__array_interface__["data"][0] for g in got}) == 1
    assert all(np.array_equal(g, np.arange(1 << 17)) for g in got)


def test_unpicklable_object_raises_one_error_and_sends_nothing(pair):
    bus, a, b, h = pair
    before = (bus.info()["pool_used"], bus.info()["entries_in_use"])
    with pytest.raises(TypeError, match=r"cannot send list object: pickling failed: .*lock"):
        a.send_obj(h, [np.zeros(10), threading.Lock()])
    with pytest.raises(TypeError, match="non-contiguous"):
        a.send_obj(h, pickle.PickleBuffer(memoryview(bytearray(100))[::2]))
    assert (bus.info()["pool_used"], bus.info()["entries_in_use"]) == before
    with pytest.raises(BlockingIOError):
        b.recv(0)


def test_a_payload_not_sent_by_send_obj_is_refused(pair):
    bus, a, b, h = pair
    for payload, what in ((b"ab", "too short"), (b"NOPE" + bytes(20), "not send_obj's"),
                          (b"B1OB" + (1).to_bytes(4, "little") + (5).to_bytes(8, "little"), "shorter than")):
        a.send(h, payload)
        with pytest.raises(ValueError, match=what):
            b.recv(0).obj()


def test_send_obj_refuses_what_send_refuses(pair):
    bus, a, b, h = pair
    with pytest.raises(OSError) as e:
        a.send_obj(h, np.zeros(5 << 20, np.uint8))  # over max_payload
    assert e.value.errno == 90  # EMSGSIZE
    with pytest.raises(BlockingIOError):
        b.recv(0)


def _child_checks(peer, out):
    m = peer.recv(timeout=30, copy=False)
    arr = m.obj()
    ok = arr.shape == (1 << 17,) and arr.dtype == np.float64 and bool(np.array_equal(arr, np.arange(1 << 17) * 0.5))
    del arr
    m.release()
    out.send(ok)


@pytest.mark.timeout(60)
def test_a_child_process_receives_a_1mib_array(pair):
    bus, a, b, h = pair
    ctx = mp.get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child_checks, args=(b, w), daemon=True)
    p.start()
    try:
        a.send_obj([h], np.arange(1 << 17) * 0.5)
        assert r.poll(30), "child did not answer"
        assert r.recv() is True
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    assert p.exitcode == 0
