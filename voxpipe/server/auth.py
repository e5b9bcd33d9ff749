"""Who may connect: named API keys, and short-lived, scoped HMAC-signed tokens for browsers.

A browser cannot set headers on a WebSocket and must not hold an API key, so a
backend that holds the key asks ``POST /v1/tokens`` for a token valid a few
minutes and hands that to the page. A token can be narrowed further: to a subject
(an end user of the backend), to some transports, to one session id, to a single
connection. Credentials are checked at connect, before any audio is read. With no
API key configured, authentication is off (a local development server); ``voxpipe
serve`` says so at start.

Tokens are signed with ``auth.token_secret`` alone, never with a key, so keys rotate
without breaking the tokens in flight and rotating the secret revokes every token.
``docs/security.md`` is the threat model behind these choices.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field

from voxpipe.config import AuthConfig
from voxpipe.conversation.principal import ANONYMOUS, Principal
from voxpipe.observability.logs import PrintableId, check_id
from voxpipe.server.token_replay import MemoryReplayGuard, ReplayGuard, ReplayUnavailable

TOKEN_PREFIX = "vxt1."
OPENAI_KEY_SUBPROTOCOL = "openai-insecure-api-key."
QUERY_PARAMS = ("api_key", "token")  # the query parameters a credential may come in
HEADER = "the Authorization header"  # where a Bearer credential was found, as refusals say
TransportName = Literal[  # each transport's ``name``
    "native", "realtime", "webrtc", "twilio", "telnyx", "plivo", "vonage", "exotel"
]
TRANSPORTS: tuple[str, ...] = get_args(TransportName)
SUBJECT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
MAX_TOKEN_CHARS = 4096  # a token is a few hundred characters; anything longer is not ours


class AuthError(Exception):
    """The credentials are missing, unknown, expired or out of scope; the message says which."""


class TokenRequestError(ValueError):
    """A token request asks for more than the server grants (``invalid_event``, 400)."""


class TokenRequest(BaseModel):
    """The body of ``POST /v1/tokens``: every field narrows the token, none widens it.
    Strict JSON types: a backend that sends ``"60"`` or ``"yes"`` has a bug worth hearing
    about, not a guess at what it meant."""

    model_config = ConfigDict(extra="forbid", strict=True)

    subject: str | None = Field(
        None,
        pattern=SUBJECT_PATTERN,
        description="Who the token is for (the backend's user id): the principal becomes "
        "key:<name>/<subject>, so two users of one backend never share a session.",
    )
    transports: list[TransportName] | None = Field(
        None, min_length=1, max_length=len(TRANSPORTS), description="Transports it may open."
    )
    session_id: PrintableId | None = Field(None, description="The one session id it may open.")
    single_use: bool = Field(False, description="Open one connection only; a replay is refused.")
    ttl_s: int | None = Field(
        None, ge=1, description="Lifetime in seconds, at most auth.token_ttl_s (its default)."
    )


@dataclass(frozen=True)
class IssuedToken:
    token: str
    principal: Principal
    expires_in: int


class MultiMapping(Protocol):
    """Headers or a query string, every value of a repeated name (Starlette's both)."""

    def getlist(self, key: str) -> list[str]: ...


@dataclass(frozen=True)
class Presented:
    where: str  # as a refusal names it: "the Authorization header", "?api_key="
    secret: str


@dataclass(frozen=True)
class Credentials:
    """Every secret a connection presented, each with where it came from. A connection may
    carry several (a header and a query parameter, a parameter twice, two key
    subprotocols); each one must hold, and all must name the same caller, so a wrong
    credential is never outvoted by a right one beside it."""

    presented: tuple[Presented, ...] = ()

    @classmethod
    def of(
        cls,
        headers: MultiMapping | Mapping[str, str],
        query: MultiMapping | Mapping[str, str],
        subprotocols: Iterable[str],
    ) -> Credentials:
        found: list[Presented] = []
        for header in _every(headers, "authorization"):
            scheme, _, value = header.strip().partition(" ")
            if scheme.lower() == "bearer":  # another scheme (a proxy's Basic) is not ours
                found.append(Presented(HEADER, value.strip()))
        for name in QUERY_PARAMS:
            found += [Presented(f"?{name}=", value) for value in _every(query, name)]
        prefix = OPENAI_KEY_SUBPROTOCOL
        found += [
            Presented(f"the {prefix}<key> subprotocol", p[len(prefix) :])
            for p in subprotocols
            if p.startswith(prefix)
        ]
        return cls(tuple(found))

    @classmethod
    def bearer(cls, secret: str) -> Credentials:
        """Credentials of one ``Authorization: Bearer`` secret."""
        return cls((Presented(HEADER, secret),))

    @classmethod
    def query(cls, secret: str) -> Credentials:
        """Credentials of one ``?token=`` (or ``?api_key=``) secret."""
        return cls((Presented("?token=", secret),))


def _every(values: MultiMapping | Mapping[str, str], name: str) -> list[str]:
    """Every value of ``name``: a repeated header or parameter is not read once (the first,
    or the last, as ``get`` would), since the one not read could be the wrong one."""
    getlist = getattr(values, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    assert isinstance(values, Mapping)
    return [values[name]] if name in values else []


class Authenticator:
    def __init__(self, config: AuthConfig, replay: ReplayGuard | None = None) -> None:
        self.keys = [(f"key:{k.name}", k.key.get_secret_value().encode()) for k in config.api_keys]
        secret = config.token_secret.get_secret_value() if config.token_secret else None
        self._secret = (
            hashlib.sha256(b"voxpipe-token:" + secret.encode()).digest() if secret else None
        )
        self.ttl_s = config.token_ttl_s
        self.replay: ReplayGuard = replay if replay is not None else MemoryReplayGuard()

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    @property
    def tokens_enabled(self) -> bool:
        """Tokens need ``auth.token_secret``: without it none is minted or accepted."""
        return self.enabled and self._secret is not None

    async def admit(self, credentials: Credentials, transport: str) -> Principal:
        """What every door calls: :meth:`check`, then the token's transport scope, then its
        single use (recorded here, so a token refused for its scope is not spent)."""
        principal = self.check(credentials)
        if not principal.may_use(transport):
            allowed = ", ".join(sorted(principal.transports or ()))
            raise AuthError(f"this token does not open {transport} (it allows: {allowed})")
        if principal.jti is not None:
            expires_at = principal.expires_at or time.time() + self.ttl_s
            try:
                first = await self.replay.first_use(principal.jti, expires_at)
            except ReplayUnavailable as exc:
                raise AuthError(str(exc)) from exc
            if not first:
                raise AuthError("this single-use token was already used")
        return principal

    def check(self, credentials: Credentials) -> Principal:
        """Who the credentials name; raises :class:`AuthError`. Every credential presented
        is checked, and all must name the same principal (scope included): a wrong one
        anywhere refuses the connection, whatever else is right. A single-use token is not
        spent here: connections go through :meth:`admit`."""
        if not self.enabled:
            return ANONYMOUS
        if not credentials.presented:
            raise AuthError(
                "missing credentials: send Authorization: Bearer <key or token>, ?token=, "
                "or the openai-insecure-api-key.<key> subprotocol"
            )
        principals = [self._check_one(p) for p in credentials.presented]
        if any(p != principals[0] for p in principals[1:]):
            places = ", ".join(p.where for p in credentials.presented)
            raise AuthError(
                f"the credentials name different callers or scopes ({places}); send one"
            )
        return principals[0]

    def _check_one(self, credential: Presented) -> Principal:
        secret, where = credential.secret, credential.where
        if not secret:
            raise AuthError(f"empty credential in {where}")
        if secret.startswith(TOKEN_PREFIX):
            try:
                return self._check_token(secret)
            except AuthError as exc:
                raise AuthError(f"{exc} (in {where})") from None
        key_id = self._key_id(secret)
        if key_id is None:
            raise AuthError(f"invalid API key (in {where})")
        return Principal(key_id)

    def check_issuer(self, credentials: Credentials) -> str:
        """The ``key:<name>`` of the API key that asks for a token: every credential presented
        is that one key, in the Authorization header (a token mints no token; a credential
        in the query string is refused, not ignored, so a wrong one is never outvoted)."""
        if not credentials.presented:
            raise AuthError("missing credentials: send Authorization: Bearer <API key>")
        elsewhere = [p.where for p in credentials.presented if p.where != HEADER]
        if elsewhere:
            raise AuthError(
                f"a token is minted with Authorization: Bearer <API key> only; found a "
                f"credential in {', '.join(elsewhere)}"
            )
        issuers = {self.check_key(p.secret) for p in credentials.presented}
        if len(issuers) > 1:
            raise AuthError("the Authorization headers name different keys; send one")
        return issuers.pop()

    def check_key(self, key: str) -> str:
        """An API key only (token minting must not accept a token): the key's ``key:<name>``."""
        key_id = self._key_id(key)
        if key_id is None:
            raise AuthError("invalid API key")
        return key_id

    def _key_id(self, secret: str) -> str | None:
        found = None
        for key_id, key in self.keys:  # every key compared, so timing says nothing of which
            if hmac.compare_digest(secret.encode(), key):
                found = key_id
        return found

    def issue(
        self, issuer: str, request: TokenRequest | None = None, now: float | None = None
    ) -> IssuedToken:
        """A token for ``issuer`` (a key's ``key:<name>``), narrowed by ``request``."""
        if self._secret is None:
            raise AuthError("tokens are disabled: set auth.token_secret")
        request = request or TokenRequest()
        ttl_s = request.ttl_s or self.ttl_s
        if ttl_s > self.ttl_s:
            raise TokenRequestError(f"ttl_s {ttl_s} exceeds auth.token_ttl_s ({self.ttl_s})")
        claims: dict[str, Any] = {"iss": issuer, "exp": int((now or time.time()) + ttl_s)}
        if request.subject is not None:
            claims["sub"] = request.subject
        if request.transports is not None:
            claims["tr"] = sorted(set(request.transports))
        if request.session_id is not None:
            claims["sid"] = request.session_id
        if request.single_use:
            claims["jti"] = secrets.token_urlsafe(16)
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        token = f"{TOKEN_PREFIX}{body}.{self._sign(body)}"
        return IssuedToken(token, _principal(claims), ttl_s)

    def _check_token(self, token: str, now: float | None = None) -> Principal:
        if self._secret is None:
            raise AuthError("tokens are not accepted: auth.token_secret is not set on this server")
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError("malformed token")
        body, _, signature = token[len(TOKEN_PREFIX) :].partition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            raise AuthError("invalid token signature")
        try:
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            principal = _principal(claims)
        except (ValueError, KeyError, TypeError) as exc:
            raise AuthError("malformed token") from exc
        assert principal.expires_at is not None
        if (now or time.time()) >= principal.expires_at:
            raise AuthError("token expired")
        return principal

    def _sign(self, body: str) -> str:
        assert self._secret is not None
        return _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())

    async def aclose(self) -> None:
        await self.replay.aclose()


def _principal(claims: dict[str, Any]) -> Principal:
    """The principal a token's (signed, so trusted in content, checked in shape) claims name."""
    issuer, subject = claims["iss"], claims.get("sub")
    transports, session_id, jti = claims.get("tr"), claims.get("sid"), claims.get("jti")
    if not isinstance(issuer, str) or not issuer.startswith("key:"):
        raise ValueError("iss")
    if not all(v is None or isinstance(v, str) for v in (subject, session_id, jti)):
        raise ValueError("sub, sid, jti")
    if subject is not None and re.fullmatch(SUBJECT_PATTERN, subject) is None:
        raise ValueError("sub")  # an older version's token, minted before these rules
    if session_id is not None:
        check_id(session_id)
    if transports is not None and not (
        isinstance(transports, list) and all(isinstance(t, str) for t in transports)
    ):
        raise ValueError("tr")
    expires = claims["exp"]
    if not isinstance(expires, int) or isinstance(expires, bool):
        raise ValueError("exp")
    return Principal(
        f"{issuer}/{subject}" if subject else issuer,
        frozenset(transports) if transports is not None else None,
        session_id,
        jti,
        expires,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
