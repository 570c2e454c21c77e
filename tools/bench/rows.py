"""The rows the two-process sections run: which transport, in which placements, through
which API."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .bus_channels import FANOUT_QUOTAS, BusBatchChannel, BusChannel, BusReserveChannel, BusTopicChannel, BusZeroCopyChannel
from .transports import FasterFifoChannel, MPPipeChannel, MPQueueChannel, MQChannel, OsPipeChannel, SocketChannel
from .transports import faster_fifo, posix_ipc
from .peer_libs import IceoryxChannel, ZmqChannel, iox2, zmq


@dataclass(frozen=True)
class Transport:
    """One row family of the two-process sections.

    `peer` groups the rows judged together (a target compares bus1py's best row with each
    peer's best row); `api` is "per-message", "batch" or "zero-copy"."""
    name: str
    peer: str
    make: Callable
    api: str = "per-message"
    rtt: bool = True
    placements: tuple = ("pinned", "unpinned")


def unicast_transports(batch=64):

    """Every two-process row, bus1py's first.  Peers run pinned and unpinned: helper threads
    (mp.Queue's feeder) or a receiver that should move away from another job do better
    unpinned, so each peer is judged at its better placement."""
    out = [
        Transport("bus1py", "bus1py", lambda s: BusChannel(s)),
        Transport("bus1py spin_ns=0", "bus1py", lambda s: BusChannel(s, spin_ns=0), placements=("pinned",)),
        Transport("bus1py send_many/recv_many", "bus1py", lambda s: BusBatchChannel(s, batch), api="batch",
                  rtt=False),
        Transport("bus1py recv(copy=False)", "bus1py", lambda s: BusZeroCopyChannel(s), api="zero-copy", rtt=False),
        Transport("bus1py reserve/commit + recv(copy=False)", "bus1py", lambda s: BusReserveChannel(s),
                  api="zero-copy", rtt=False),
        Transport("mp.Queue", "mp.Queue", MPQueueChannel),
        Transport("mp.Pipe", "mp.Pipe", MPPipeChannel),
        Transport("os.pipe", "os.pipe", OsPipeChannel),
        Transport("socketpair", "socketpair", SocketChannel),
    ]
    if posix_ipc is not None:
        out.append(Transport("posix_ipc MQ", "posix_ipc MQ", lambda s: MQChannel(s)))
    if faster_fifo is not None:
        out += [Transport("faster_fifo", "faster_fifo", FasterFifoChannel),
                Transport("faster_fifo get_many", "faster_fifo", lambda s: FasterFifoChannel(s, 0, batch),
                          api="batch", rtt=False),
                Transport("faster_fifo put_many/get_many", "faster_fifo",
                          lambda s: FasterFifoChannel(s, batch, batch), api="batch", rtt=False)]
    if zmq is not None:
        out += [Transport("pyzmq PUSH/PULL", "pyzmq", ZmqChannel, rtt=False),
                Transport("pyzmq PUSH/PULL copy=False", "pyzmq", lambda s: ZmqChannel(s, copy=False),
                          api="zero-copy", rtt=False),
                Transport("pyzmq PAIR", "pyzmq", lambda s: ZmqChannel(s, kind="pair"))]
    if iox2 is not None:
        out += [Transport("iceoryx2", "iceoryx2", IceoryxChannel),
                Transport("iceoryx2 read in place", "iceoryx2", lambda s: IceoryxChannel(s, in_place=True),
                          api="zero-copy", rtt=False)]
    return out


def multicast_variants(batch=64):
    """Every multicast row.  bus1py's rows all run on a bus of FANOUT_QUOTAS, placed alike
    (nothing pinned, as every row of the section): no receiver's quota holds a sender back
    nor makes a topic's subscriber miss a message, as pyzmq's rows run at high-water mark 0
    (no limit)."""
    q = FANOUT_QUOTAS
    out = {"bus1py multicast": lambda s, k: BusChannel(s, k, multicast=True, **q),
           "bus1py multicast spin_ns=0": lambda s, k: BusChannel(s, k, multicast=True, spin_ns=0, **q),
           "bus1py k x unicast": lambda s, k: BusChannel(s, k, multicast=False, **q),
           "bus1py multicast send_many/recv_many": lambda s, k: BusBatchChannel(s, batch, k=k, multicast=True,
                                                                                **q),
           "bus1py topic": lambda s, k: BusTopicChannel(s, k, **q)}
    if posix_ipc is not None:
        out["posix_ipc MQ k x unicast"] = lambda s, k: MQChannel(s, k)
    if zmq is not None:
        out["pyzmq PUB/SUB"] = lambda s, k: ZmqChannel(s, k, kind="pub")
    if iox2 is not None:
        out["iceoryx2"] = lambda s, k: IceoryxChannel(s, k)
    return out


def object_variants():
    """The object rows (obj_channels.py): make(size, k) of each, sending a numpy array."""
    from .obj_channels import BusObjChannel, ShmNamesChannel, ZmqObjChannel
    out = {"bus1py send_obj + obj()": BusObjChannel}
    if zmq is not None:
        out["pyzmq send(copy=False)"] = ZmqObjChannel
    out["shared_memory + queue of names"] = ShmNamesChannel
    return out
