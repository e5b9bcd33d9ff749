"""Who may connect: API keys, and short-lived HMAC-signed tokens for browsers.

A browser cannot set headers on a WebSocket and must not hold an API key, so a
backend that holds the key asks ``POST /v1/tokens`` for a token valid a few
minutes and hands that to the page. Credentials are checked at connect, before
any audio is read. With no API key configured, authentication is off (a local
development server); ``voxpipe serve`` says so at start.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from voxpipe.config import AuthConfig

TOKEN_PREFIX = "vxt1."
OPENAI_KEY_SUBPROTOCOL = "openai-insecure-api-key."


class AuthError(Exception):
    """The credentials are missing, unknown or expired; the message says which."""


@dataclass(frozen=True)
class Credentials:
    """Everything a connection can carry a secret in."""

    bearer: str | None = None
    query: str | None = None
    subprotocol_key: str | None = None

    @classmethod
    def of(
        cls, headers: Mapping[str, str], query: Mapping[str, str], subprotocols: Iterable[str]
    ) -> Credentials:
        bearer = None
        header = headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            bearer = header[7:].strip()
        prefix = OPENAI_KEY_SUBPROTOCOL
        sub = next((p[len(prefix) :] for p in subprotocols if p.startswith(prefix)), None)
        return cls(bearer, query.get("api_key") or query.get("token"), sub)

    def secrets(self) -> list[str]:
        return [s for s in (self.bearer, self.query, self.subprotocol_key) if s]


class Authenticator:
    def __init__(self, config: AuthConfig) -> None:
        self.keys = [k.encode() for k in config.api_keys]
        secret = config.token_secret or (config.api_keys[0] if config.api_keys else "")
        self._secret = hashlib.sha256(b"voxpipe-token:" + secret.encode()).digest()
        self.ttl_s = config.token_ttl_s

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def check(self, credentials: Credentials) -> str | None:
        """The principal ("key:N" or the token's subject); raises :class:`AuthError`."""
        if not self.enabled:
            return None
        secrets = credentials.secrets()
        if not secrets:
            raise AuthError(
                "missing credentials: send Authorization: Bearer <key or token>, ?token=, "
                "or the openai-insecure-api-key.<key> subprotocol"
            )
        for secret in secrets:
            if secret.startswith(TOKEN_PREFIX):
                return self._check_token(secret)
            for i, key in enumerate(self.keys):
                if hmac.compare_digest(secret.encode(), key):
                    return f"key:{i}"
        raise AuthError("invalid API key")

    def check_key(self, key: str) -> str:
        """An API key only (token minting must not accept a token)."""
        for i, known in enumerate(self.keys):
            if hmac.compare_digest(key.encode(), known):
                return f"key:{i}"
        raise AuthError("invalid API key")

    def issue(self, subject: str, ttl_s: int | None = None, now: float | None = None) -> str:
        expires = int((now or time.time()) + (ttl_s or self.ttl_s))
        body = _b64(json.dumps({"sub": subject, "exp": expires}, separators=(",", ":")).encode())
        return f"{TOKEN_PREFIX}{body}.{self._sign(body)}"

    def _check_token(self, token: str, now: float | None = None) -> str:
        body, _, signature = token[len(TOKEN_PREFIX) :].partition(".")
        if not hmac.compare_digest(signature, self._sign(body)):
            raise AuthError("invalid token signature")
        try:
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            subject, expires = str(claims["sub"]), int(claims["exp"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AuthError("malformed token") from exc
        if (now or time.time()) >= expires:
            raise AuthError("token expired")
        return f"token:{subject}"

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
