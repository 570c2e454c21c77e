# Invariants: inside the checker a row's kind travels as one byte, its *kind code*, with the
# origins first so that ranges select families of kinds: `code <= DESTROY` the origins of
# messages (send, destroy), `code <= SIGNAL_SEND` every origin, and the receives are
# DELIVER and SIGNAL_RECV only: INTERNAL codes above them, so `code >= DELIVER` also takes
# internal events (RECEIVES names the receives). The names are bus1py/schema.py's kind names; any value not among them codes as
# INTERNAL (the per-row rules reject unknown kinds separately, naming the row).
from __future__ import annotations

from .. import schema as S

SEND, DESTROY, SIGNAL_SEND, DELIVER, SIGNAL_RECV, INTERNAL = range(6)
RECEIVES = (DELIVER, SIGNAL_RECV)
NAMES = {SEND: S.SEND, DESTROY: S.DESTROY, SIGNAL_SEND: S.SIGNAL_SEND, DELIVER: S.DELIVER,
         SIGNAL_RECV: S.SIGNAL_RECV, INTERNAL: S.INTERNAL}
SIGNALS = (SIGNAL_SEND, SIGNAL_RECV)


def kind_code(col="kind"):
    """The kind code (a byte) of the kind name in column `col`."""
    from pyspark.sql import functions as F
    k = F.col(col)
    e = None
    for code in (SEND, DESTROY, SIGNAL_SEND, DELIVER, SIGNAL_RECV):
        e = (F.when if e is None else e.when)(k == NAMES[code], code)
    return e.otherwise(INTERNAL).cast("byte")


def kind_name(code_col):
    """The kind name back from a kind-code column (INTERNAL reads as internal)."""
    from pyspark.sql import functions as F
    e = None
    for code in (SEND, DESTROY, SIGNAL_SEND, DELIVER, SIGNAL_RECV):
        e = (F.when if e is None else e.when)(code_col == code, NAMES[code])
    return e.otherwise(NAMES[INTERNAL])
