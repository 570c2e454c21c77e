"""`bus1py ls`, `bus1py rm`, `bus1py gc`: what ipcs and ipcrm are for System V IPC.

Invariants:
  - Listing and collecting only read or act through the bus's own calls (peer queries,
    Bus.gc), so they are safe while the bus is in use.
  - `gc` removes a bus only when no process that could use it is left: its creator is
    gone and no peer has a live process.
  - They see only this user's regular files (Bus.list_names) and open them only through
    Bus.open: a symbolic link, a FIFO or another user's segment in /dev/shm is skipped,
    or refused when named, never followed, waited on or removed (docs/RELIABILITY.md,
    "Trust model").  This user's buses are opened whatever their mode (ADMIN_MODE): the
    mode check guards what a caller sends, and these only inspect and collect.
  - A bus that does not exist or cannot be opened is named on stderr and makes the exit
    code 2 (outcome.EXIT_CODES); the other buses are still shown or collected.
"""
from __future__ import annotations

import errno
import re
import sys

import posix_ipc
import psutil

from ..bus import Bus
from ..segment import reclaim
from .options import output_file
from .outcome import BAD_INPUT, OK, PROBLEM, CommandError, add_json_option, write_json

ADMIN_MODE = 0o777  # Bus.open's widest mode: the owner check alone applies


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _procs(pids) -> str:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid} {psutil.Process(pid).name()}")
        except (psutil.Error, ValueError):  # gone, or a scribbled pid that names no process
            out.append(f"{pid} (gone)")
    return ", ".join(out) or "-"


def _alive(pid: int) -> bool:
    if pid <= 0:  # read from the segment: a scribbled pid names no process
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def holders(info: dict, peers: list) -> list:
    """The live processes that can use a bus: its creator and the holders of its
    connected peers."""
    pids = [info["creator_pid"]] if info["creator_alive"] else []
    pids += [pid for p in peers if p["state"] == "connected" for pid in p["pids"]]
    return sorted({pid for pid in pids if _alive(pid)})


def _read(name):
    bus = Bus.open(name, mode=ADMIN_MODE, watch=False)  # looking collects nothing
    try:
        # well-known names (Peer.publish) ride in the info: {name: owner peer id}
        return {**bus.info(), "names": bus.names()}, bus.peers()
    finally:
        bus.close()


def _error(args, message):
    print(f"bus1py {args.command}: {message}", file=sys.stderr)


def _entries(args) -> tuple[list, int]:
    """Each bus `ls` shows, read once: its info and peers, or the error that kept it from
    being read; and the exit code (BAD_INPUT when a bus could not be read)."""
    out, status = [], OK
    for name in args.names or Bus.list_names():
        try:
            info, peers = _read(name)
        except OSError as e:
            _error(args, f"{name}: {e}")
            out.append({"name": name, "error": str(e)})
            status = max(status, BAD_INPUT)
            continue
        if not args.all:
            peers = [p for p in peers if p["state"] not in ("disconnected", "free")]
        out.append({"name": name, **info, "peers": peers})
    return out, status


def cmd_ls(args, console=None) -> int:
    """`ls`: a table per bus; `--json FILE|-`: {"ok", "buses": [...]} as well (alone on
    stdout with `-`)."""
    problem = output_file("--json", args.json)
    if problem:
        raise CommandError(problem)
    buses, status = _entries(args)
    if args.json:
        write_json(args.json, {"ok": status == OK, "buses": buses})
        if args.json == "-":
            return status
    from .term import console as make_console
    from rich.table import Table
    console = console or make_console()
    if not buses:
        console.print("no bus1py buses")
    for info in buses:
        if "error" in info:
            continue
        title = (f"{info['name']}  segment {_fmt_bytes(info['segment_size'])}, pool "
                 f"{_fmt_bytes(info['pool_used'])} / {_fmt_bytes(info['pool_size'])} used, "
                 f"creator {_procs([info['creator_pid']])}")
        if info["inject"]:
            title += f"  [red]FAULT INJECTION {info['inject']}[/red]"
        table = Table(title=title, title_justify="left")
        for col in ("peer", "state", "processes", "queued", "quota msgs", "bytes", "handles", "fds", "sent", "received"):
            table.add_column(col, justify="right" if col not in ("state", "processes") else "left")
        for p in info["peers"]:
            table.add_row(str(p["id"]), p["state"], _procs(p["pids"]) + (" (pinned)" if p["pinned"] else ""),
                          str(p["queued_entries"]), f"{p['queued_messages']}/{p['quota_messages']}",
                          f"{_fmt_bytes(p['queued_bytes'])}/{_fmt_bytes(p['quota_bytes'])}",
                          f"{p['held_handles']}/{p['quota_handles']}", f"{p['n_fds']}/{p['quota_fds']}",
                          str(p["sent"]), str(p["received"]))
        console.print(table)
        if info["names"]:
            console.print("names: " + ", ".join(f"{n} (peer {o})" for n, o in sorted(info["names"].items())),
                          markup=False, highlight=False)
    return status


def cmd_rm(args, console=None) -> int:
    from .term import console as make_console
    console = console or make_console()
    status = OK
    ours = set(Bus.list_names())  # bus1py segments of any layout version
    for name in args.names:
        shm_name = "/" + name.lstrip("/")
        if shm_name not in ours:
            _error(args, f"{name}: no bus1py bus of that name")
            status = max(status, BAD_INPUT)
            continue
        try:
            live, readable = holders(*_read(name)), True
        except OSError:
            live, readable = [], False  # a layout this version cannot read: nothing to ask it
        if live and not args.force:
            _error(args, f"{name}: in use by {_procs(live)}; not removed "
                         f"(--force removes it all the same)")
            status = max(status, PROBLEM)
            continue
        problem = _remove(shm_name, bool(live)) if readable else _unlink(shm_name)
        if problem:
            _error(args, f"{name}: {problem}")
            status = max(status, BAD_INPUT)
        else:
            console.print(f"removed {shm_name}")
    return status


def _remove(shm_name: str, live: bool) -> str | None:
    """Unlink a bus with what it made outside the segment: None, or why not.  One no live
    process holds is reclaimed (segment.reclaim: its name, its mover directory and its
    peers' descriptor stores); one still in use loses its name and its mover directory as
    by Bus.unlink, its live peers' stores going with their holders."""
    if not live:
        return reclaim(shm_name, ADMIN_MODE)
    try:
        bus = Bus.open(shm_name, mode=ADMIN_MODE, watch=False)
    except OSError as e:
        return str(e)
    try:
        bus.unlink()
    except OSError as e:
        return str(e)
    finally:
        bus.close()
    return None


def _unlink(shm_name: str) -> str | None:
    """The name alone, of a segment whose layout this version cannot read."""
    try:
        posix_ipc.unlink_shared_memory(shm_name)
    except posix_ipc.Error as e:
        return str(e)
    return None


_AUTO_NAME = re.compile(r"^/bus1py-(\d+)-[0-9a-f]+$")


def collect(name: str) -> dict:
    """Reap one bus; unlink it if no process is left that could use it.  A segment of
    another layout version cannot be read: an automatically named one (bus1py-PID-...) is
    removed when its creator is gone, any other is left for `bus1py rm`."""
    try:
        bus = Bus.open(name, mode=ADMIN_MODE)
    except OSError as e:
        match = _AUTO_NAME.match("/" + name.lstrip("/"))
        if e.errno != errno.EPROTO or not match or psutil.pid_exists(int(match.group(1))):
            raise
        posix_ipc.unlink_shared_memory("/" + name.lstrip("/"))
        return {"peers_reaped": 0, "blocks_completed": 0, "blocks_removed": 0, "removed": True}
    try:
        stats = bus.gc()
        live = bool(holders(bus.info(), bus.peers()))
    finally:
        bus.close()
    if not live:
        bus.unlink()
    return {**stats, "removed": not live}


def cmd_gc(args, console=None) -> int:
    from .term import console as make_console
    from rich.table import Table
    console = console or make_console()
    table = Table(title="bus1py gc")
    for col in ("bus", "peers reaped", "blocks completed", "blocks removed", "bus removed"):
        table.add_column(col)
    status = OK
    for name in args.names or Bus.list_names():
        try:
            s = collect(name)
        except OSError as e:
            _error(args, f"{name}: {e}")
            status = max(status, BAD_INPUT)
            continue
        table.add_row(name, str(s["peers_reaped"]), str(s["blocks_completed"]),
                      str(s["blocks_removed"]), "yes" if s["removed"] else "no")
    if table.row_count:
        console.print(table)
    return status


def register(sub):
    p = sub.add_parser("ls", help="list buses, peers, owning processes, queue depths and quota use")
    p.add_argument("names", nargs="*", help="buses to show (default: every bus in /dev/shm)")
    p.add_argument("--all", action="store_true", help="also show disconnected peers")
    add_json_option(p, "the buses")
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser("rm", help="remove buses by name (processes that mapped them keep them)")
    p.add_argument("names", nargs="+")
    p.add_argument("--force", action="store_true",
                   help="remove a bus even while live processes use it")
    p.set_defaults(func=cmd_rm)
    p = sub.add_parser("gc", help="reap peers of dead processes; remove buses nobody can use")
    p.add_argument("names", nargs="*", help="buses to collect (default: every bus)")
    p.set_defaults(func=cmd_gc)
