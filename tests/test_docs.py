"""Every Python block of README.md and docs/*.md runs as written (tests/docs_examples.py says
how each kind of block is run), so that no example can rot.

A document's services are stopped with SIGTERM and started again before their programs run
a second time: the README's service must take any number of clients and come back at once
after a kill, without `bus1py gc`.
"""
import ast
import os
import signal
import time

import pytest

from tests.docs_examples import DOCUMENTS, ROOT, blocks, private_names, run, start

ALL = {doc: blocks(doc) for doc in DOCUMENTS}
RUN = [doc for doc, bs in ALL.items() if any(b.kind != "listing" for b in bs)]


def test_the_documents_have_blocks_and_every_mark_is_understood():
    assert ALL[ROOT / "README.md"], "README.md has no python block"
    for doc, bs in ALL.items():
        services = {b.name for b in bs if b.kind == "service"}
        for b in bs:
            assert b.kind != "service" or b.name, f"{b}: a service needs a name"
            assert b.service is None or b.service in services, \
                f"{b}: runs with {b.service!r}, which is no service of {doc.name}"


@pytest.mark.parametrize("block", [b for bs in ALL.values() for b in bs if b.kind == "listing"],
                         ids=str)
def test_a_listing_is_python(block):
    # a listing may show `await` and `async for` as a coroutine's body would use them
    compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _ok(block, cp):
    assert cp.returncode == 0, f"{block} exited {cp.returncode}:\n{cp.stderr[-3000:]}"
    assert "Traceback" not in cp.stderr, f"{block}:\n{cp.stderr[-3000:]}"


def _serving(services, running):
    for name, p in running.items():
        assert p.poll() is None, \
            f"{services[name]} stopped while serving:\n{p.communicate()[1][-3000:]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc", RUN, ids=lambda d: d.name)
def test_the_programs_of(doc, tmp_path):
    bs = ALL[doc]
    names = private_names(bs)
    services = {b.name: b for b in bs if b.kind == "service"}
    running = {}
    try:
        for b in bs:
            if b.kind == "program" and b.service is None:
                _ok(b, run(b, names, tmp_path))
        clients = [b for b in bs if b.service]
        for life in range(2):        # the second after each service was killed and restarted
            for name, b in services.items():
                running[name] = start(b, names, tmp_path)
            for b in clients:
                for _ in range(2 - life):   # first one client after another
                    cp = run(b, names, tmp_path, until=time.monotonic() + 20)
                    _serving(services, running)
                    _ok(b, cp)
            _serving(services, running)
            for p in running.values():
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)
            running.clear()
    finally:
        for p in running.values():
            p.kill()
            p.communicate()
        for name in names.values():     # what the killed services left, as a user's would
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass


def test_the_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().splitlines()[:12]
    assert any(line.startswith("make run ") for line in head), head
    assert any(line.startswith("make test ") for line in head), head
