"""HTTP digest authentication as SIP uses it (RFC 3261, 22.4; RFC 2617; RFC 7616's SHA-256):
a registrar's or a proxy's challenge (``401`` with ``WWW-Authenticate``, ``407`` with
``Proxy-Authenticate``) read, and the ``Authorization`` (or ``Proxy-Authorization``) that
answers it written.

Algorithms ``MD5`` (the default and what trunks use), ``MD5-sess``, ``SHA-256`` and
``SHA-256-sess``; quality of protection ``auth`` when offered, else none (RFC 2069's
form, which older registrars still send). ``auth-int`` alone is refused: a REGISTER has no
body worth protecting, and no trunk asks for it.

Why by hand: the computation is a few hashes; ``httpx.DigestAuth`` does it only inside an
HTTP request flow, and no SIP library on PyPI that fits (``message.py`` says why) offers it
apart from its own stack.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

HASHES = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}
_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)\s*,?')


class DigestError(ValueError):
    """A challenge this client cannot answer; the message says why."""


@dataclass(frozen=True)
class Challenge:
    """One ``Digest`` challenge's parameters."""

    realm: str
    nonce: str
    algorithm: str = "MD5"
    qop: tuple[str, ...] = ()  # what the server offers: "auth", "auth-int"
    opaque: str | None = None
    stale: bool = False


def parse_challenge(value: str) -> Challenge:
    """A ``WWW-Authenticate``/``Proxy-Authenticate`` value: ``Digest realm="...", ...``."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise DigestError(f"not a Digest challenge: {scheme[:20]!r}")
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        raw = match[2]
        params[match[1].lower()] = (
            raw[1:-1].replace('\\"', '"').replace("\\\\", "\\") if raw.startswith('"') else raw
        )
    if "realm" not in params or "nonce" not in params:
        raise DigestError("the challenge has no realm or no nonce")
    algorithm = params.get("algorithm", "MD5").upper()
    if algorithm.removesuffix("-SESS") not in HASHES:
        raise DigestError(f"algorithm {algorithm[:20]} is not supported (MD5, SHA-256)")
    qop = tuple(q.strip().lower() for q in params.get("qop", "").split(",") if q.strip())
    if qop and "auth" not in qop:
        raise DigestError(f"qop {','.join(qop)[:40]} is not supported (auth)")
    return Challenge(
        params["realm"],
        params["nonce"],
        algorithm,
        qop,
        params.get("opaque"),
        params.get("stale", "").lower() == "true",
    )


def response(
    challenge: Challenge,
    username: str,
    password: str,
    method: str,
    uri: str,
    cnonce: str | None = None,
    nc: int = 1,
) -> str:
    """The digest itself (RFC 2617, 3.2.2.1; RFC 7616, 3.4.1): hex of
    H(H(A1) : nonce [: nc : cnonce : qop] : H(A2))."""
    algorithm = challenge.algorithm.upper()
    digest = HASHES[algorithm.removesuffix("-SESS")]

    def h(text: str) -> str:
        return digest(text.encode()).hexdigest()

    a1 = h(f"{username}:{challenge.realm}:{password}")
    if algorithm.endswith("-SESS"):
        a1 = h(f"{a1}:{challenge.nonce}:{cnonce}")
    a2 = h(f"{method}:{uri}")
    if "auth" in challenge.qop:
        return h(f"{a1}:{challenge.nonce}:{nc:08x}:{cnonce}:auth:{a2}")
    return h(f"{a1}:{challenge.nonce}:{a2}")


def authorization(
    challenge: Challenge, username: str, password: str, method: str, uri: str, nc: int = 1
) -> str:
    """The ``Authorization``/``Proxy-Authorization`` value that answers ``challenge``."""
    cnonce = secrets.token_hex(8)
    digest = response(challenge, username, password, method, uri, cnonce, nc)
    fields = [
        f'username="{_quoted(username)}"',
        f'realm="{_quoted(challenge.realm)}"',
        f'nonce="{_quoted(challenge.nonce)}"',
        f'uri="{_quoted(uri)}"',
        f'response="{digest}"',
        f"algorithm={challenge.algorithm}",
    ]
    if "auth" in challenge.qop:
        fields += ["qop=auth", f"nc={nc:08x}", f'cnonce="{cnonce}"']
    if challenge.opaque is not None:
        fields.append(f'opaque="{_quoted(challenge.opaque)}"')
    return "Digest " + ", ".join(fields)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
