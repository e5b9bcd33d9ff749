"""Who a connection is, as the layers below the server see it.

The server's ``auth`` module turns credentials (an API key, a token) into a
:class:`Principal`; everything under it (a call, the ownership of its session) only
compares principals and asks what their token opens, so the type lives here, below
both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """Who a connection is. Sessions belong to the principal that started them: only the
    same ``id`` may resume one, read its history or take its id.

    ``id`` is stable across restarts and key rotation of *other* keys: ``key:<name>`` for an
    API key, ``key:<name>/<subject>`` for a token minted by that key for a subject.
    A token may narrow what it opens: some transports only, one session id only.
    """

    id: str
    transports: frozenset[str] | None = None  # None: every transport
    session_id: str | None = None  # None: any session of this principal
    jti: str | None = None  # a single-use token's id, consumed by Authenticator.admit
    expires_at: int | None = None  # a token's expiry, Unix seconds

    def may_use(self, transport: str) -> bool:
        return self.transports is None or transport in self.transports

    def may_open(self, session_id: str) -> bool:
        return self.session_id is None or self.session_id == session_id


ANONYMOUS = Principal("anonymous")  # authentication off: every caller is one principal
