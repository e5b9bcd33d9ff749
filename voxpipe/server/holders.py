"""Which worker holds a call, and when a holder counts as dead: the crash detection both
call stores (SQLite and Redis) share.

Every live call names its holder, and every worker writes a heartbeat; a call whose
holder fell silent, or was started again under the same name, crashed. Both stores
import these from here, so neither imports the other for them.
"""

from __future__ import annotations

import secrets

HEARTBEAT_S = 5.0  # how often a worker says it is alive, and looks for crashed calls
STALE_S = 20.0  # a worker silent this long is dead: its live calls crashed


def new_holder(worker: str) -> str:
    """This process as the holder of its calls: its worker name and a per-start nonce, so
    a worker restarted under the same name knows the calls of its last life are dead."""
    return f"{worker}/{secrets.token_hex(4)}"
