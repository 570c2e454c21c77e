"""Peer.arecv and Peer.messages under asyncio: waiting on the loop's reader, timeouts,
cancellation that loses nothing, and an exchange between two processes each running a loop."""
from __future__ import annotations

import asyncio
import multiprocessing as mp

import pytest

import bus1py


@pytest.fixture
def pair(make_bus):
    bus = make_bus(spin_ns=0)
    a, b = bus.peer(), bus.peer()
    return bus, a, b, b.transfer(b.create_node(), a)


def run(coro, timeout=20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_cancelled_arecv_leaves_the_message_for_the_next_receive(pair):
    bus, a, b, h = pair

    async def main():
        waiting = asyncio.create_task(b.arecv())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        waiting.cancel()
        a.send(h, b"after the cancel")  # lands while the cancellation is being delivered
        with pytest.raises(asyncio.CancelledError):
            await waiting
    run(main())
    assert b.recv(timeout=0).payload == b"after the cancel"


def test_arecv_timeouts(pair):
    bus, a, b, h = pair

    async def main():
        with pytest.raises(BlockingIOError):
            await b.arecv(timeout=0)
        t = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await b.arecv(timeout=0.1)
        assert asyncio.get_running_loop().time() - t >= 0.1
        with pytest.raises(ValueError):
            await b.arecv(timeout=-1)
        asyncio.get_running_loop().call_later(0.05, a.send, h, b"late")
        return (await b.arecv(timeout=5)).payload
    assert run(main()) == b"late"


def test_concurrent_arecvs_on_one_peer_each_get_one(pair):
    bus, a, b, h = pair

    async def main():
        tasks = [asyncio.create_task(b.arecv(timeout=5)) for _ in range(3)]
        await asyncio.sleep(0.02)
        a.send_many(h, [b"1", b"2", b"3"])
        return sorted(m.payload for m in await asyncio.gather(*tasks))
    assert run(main()) == [b"1", b"2", b"3"]


def test_messages_until_disconnect(pair):
    bus, a, b, h = pair

    async def main():
        asyncio.get_running_loop().call_later(0.05, a.send_many, h, [b"x", b"y"])
        got = []
        async for m in b.messages():
            got.append(bytes(m.payload))
            if len(got) == 2:
                asyncio.get_running_loop().call_soon(b.disconnect)
        return got
    assert run(main()) == [b"x", b"y"]


async def _echo(peer, back, n):
    """Answer each of n messages with its payload reversed, zero-copy on the way in."""
    count = 0
    async for m in peer.messages(copy=False):
        peer.send(back, bytes(m.payload)[::-1])
        m.release()
        count += 1
        if count == n:
            return count


def _echo_child(peer, back, n):
    return asyncio.run(asyncio.wait_for(_echo(peer, back, n), 30))


@pytest.mark.timeout(60)
def test_asyncio_exchange_between_processes(pair):
    bus, a, b, h = pair
    back = a.transfer(a.create_node(), b)
    n = 300

    async def main():
        for i in range(n):
            a.send(h, b"ping %d" % i)
            m = await a.arecv(timeout=10)
            assert m.payload == (b"ping %d" % i)[::-1]
        return n
    with mp.get_context("spawn").Pool(1) as pool:
        child = pool.apply_async(_echo_child, (b, back, n))
        assert run(main(), 45) == n
        assert child.get(timeout=15) == n
