# Mistakes a user makes that mypy --strict must flag (tests/test_typing.py): each line marked
# "# mistake:" is one error, and no other line has any.  Never run.
import bus1py

with bus1py.Bus.create() as bus:
    bus.no_such_call()  # mistake: the block's `bus` is a Bus, not Any
    a, b = bus.peer(), bus.peer()
    node = b.create_node()
    h = b.transfer(node, a)
    reply = a.create_node()
    a.send([h], b"request", reply)  # mistake: a handle where a list of handles goes
    a.send([h], "text")  # mistake: a str payload
    a.send_many([h], ["one", "two"])  # mistake: str payloads
    b.recv(timeout="5")  # mistake: a str timeout
    b.recv(node="reply")  # mistake: a str node to receive from
    msg = b.recv(timeout=5)
    print(msg.payload + "!")  # mistake: the payload is bytes, not str
    print(msg.obj(), msg.handles[0] + 1, msg.stamp[0])  # fine: obj() is typed (Any), ids are ints
    b.transfer("node", a)  # mistake: a str node to transfer
    b.destroy(str(node))  # mistake: a str handle to destroy
    view = b.recv(copy=False).payload
    text: bytes = view  # mistake: a zero-copy payload is a memoryview
    stamp: int = a.send(h, b"x")  # mistake: send returns the stamp, a tuple
