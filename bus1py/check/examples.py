# Invariants: a counterexample is data, never prose: events as {process, seq, kind, msg,
# message} where `msg` is the raw id from the trace and `message` names the message by its
# origin event ("p6:757": sent by process 6 at seq 757; signals likewise by their
# signal_send), plus the fields its property's explainer (explain.py) reads. Builders here
# take plain values (ints from collected rows); nothing here runs a Spark job.
from __future__ import annotations


def message_name(process, seq) -> str | None:
    """A message's name for people: its origin event, "p<process>:<seq>"."""
    if process is None or seq is None:
        return None
    return f"p{int(process)}:{int(seq)}"


def event(process, seq, kind, msg, origin=None, **extra):
    """One event of a counterexample; `origin` = (process, seq) of its message's origin."""
    d = {"process": int(process), "seq": int(seq), "kind": kind,
         "msg": None if msg is None else int(msg)}
    if origin is not None:
        d["message"] = message_name(*origin)
    elif kind in ("send", "destroy", "signal_send"):
        d["message"] = message_name(process, seq)
    d.update({k: v for k, v in extra.items() if v is not None})
    return d


def origin_kind(is_destroy) -> str:
    return "destroy" if is_destroy else "send"


def inversion(first, second, process):
    """A delivery-order counterexample: `process` delivered `second` before `first`.

    `first` and `second` are mappings with the message's msg, sender_process, send_seq,
    is_destroy and the delivering seq deliver_seq at `process`."""
    def origin(r):
        return event(r["sender_process"], r["send_seq"], origin_kind(r["is_destroy"]), r["msg"])

    def delivery(r):
        return event(process, r["deliver_seq"], "deliver", r["msg"],
                     origin=(r["sender_process"], r["send_seq"]))

    return {"process": int(process), "earlier": origin(first), "later": origin(second),
            "events": [origin(first), origin(second), delivery(second), delivery(first)],
            "highlight": [int(first["msg"]), int(second["msg"])]}
