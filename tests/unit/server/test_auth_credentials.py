"""What test_auth.py leaves out of ``server/auth.py``: where a connection's secret is read
from, authentication turned off, which of several secrets decides, and tokens whose signature
is good but whose claims are not the shape the server writes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import pytest

from voxpipe.config import AuthConfig
from voxpipe.conversation.principal import ANONYMOUS
from voxpipe.server.auth import Authenticator, AuthError, Credentials, TokenRequest

SECRET = "s" * 40
KEYS = {"web": "k-web", "phone": "k-phone"}


def auth(keys: Any = KEYS, secret: str | None = SECRET) -> Authenticator:
    return Authenticator(AuthConfig(api_keys=keys, token_secret=secret))


def signed(claims: Any) -> str:
    """A token with these claims, signed as the server signs (so only its shape is wrong)."""
    key = hashlib.sha256(b"voxpipe-token:" + SECRET.encode()).digest()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    mac = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"vxt1.{body}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_credentials_are_read_from_the_header_the_query_and_the_subprotocol() -> None:
    found = Credentials.of(
        {"authorization": "bEaReR  k-web "},
        {"api_key": "k-query", "token": "ignored: api_key comes first"},
        ["realtime", "openai-insecure-api-key.k-sub"],
    )
    assert (found.bearer, found.query, found.subprotocol_key) == ("k-web", "k-query", "k-sub")
    assert found.secrets() == ["k-web", "k-query", "k-sub"]
    assert Credentials.of({}, {"token": "vxt1.x"}, []).query == "vxt1.x"
    basic = Credentials.of({"authorization": "Basic k-web"}, {}, ["realtime"])
    assert basic == Credentials() and basic.secrets() == [], "only a bearer credential counts"


async def test_with_no_key_configured_everyone_is_the_one_anonymous_principal() -> None:
    off = auth(keys=[], secret=None)
    assert not off.enabled and not off.tokens_enabled
    for credentials in (Credentials(), Credentials(bearer="anything"), Credentials(query="vxt1.x")):
        assert off.check(credentials) is ANONYMOUS
        assert await off.admit(credentials, "twilio") is ANONYMOUS


def test_missing_credentials_say_where_to_put_them() -> None:
    with pytest.raises(AuthError, match="missing credentials: send Authorization: Bearer"):
        auth().check(Credentials())


def test_any_one_good_key_is_enough_but_a_token_decides_alone() -> None:
    a = auth()
    assert a.check(Credentials(bearer="wrong", query="k-phone")).id == "key:phone"
    assert a.check(Credentials(bearer="k-web", subprotocol_key="k-phone")).id == "key:web"
    with pytest.raises(AuthError, match="invalid API key"):
        a.check(Credentials(bearer="wrong", query="also-wrong"))
    bad_token = "vxt1.e30.forged"
    with pytest.raises(AuthError, match="signature"):  # a good key beside it does not help
        a.check(Credentials(bearer=bad_token, query="k-web"))


def test_a_token_cannot_stand_in_for_the_key_that_mints() -> None:
    a = auth()
    token = a.issue("key:web").token
    assert a.check(Credentials(bearer=token)).id == "key:web"
    with pytest.raises(AuthError, match="invalid API key"):
        a.check_key(token)
    assert a.check_key("k-phone") == "key:phone"


def test_issue_dedupes_transports_and_defaults_the_lifetime() -> None:
    a = auth()
    issued = a.issue("key:web", TokenRequest(transports=["twilio", "native", "twilio"]))
    assert issued.expires_in == 300 and issued.principal.transports == {"native", "twilio"}
    claims = issued.token.split(".")[1]
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert decoded["tr"] == ["native", "twilio"] and "jti" not in decoded
    assert a.issue("key:web", TokenRequest(ttl_s=60)).expires_in == 60


GOOD = {"iss": "key:web", "exp": 0}  # exp set at test time


@pytest.mark.parametrize(
    "claims",
    [
        {"iss": "admin"},  # not minted by a key
        {"iss": 5},
        {"exp": "soon"},
        {"exp": True},
        {"exp": 1.5e12},
        {"sub": 42},
        {"sid": ["call-1"]},
        {"tr": "native"},
        {"tr": ["native", 1]},
        {"exp": None},
    ],
    ids=lambda claims: json.dumps(claims),
)
def test_a_signed_token_of_the_wrong_shape_is_malformed(claims: dict[str, Any]) -> None:
    good = GOOD | {"exp": int(time.time()) + 60}
    assert auth().check(Credentials(bearer=signed(good))).id == "key:web", "the forgery works"
    with pytest.raises(AuthError, match="malformed token"):
        auth().check(Credentials(bearer=signed(good | claims)))


@pytest.mark.parametrize("body", [[1, 2], "key:web", None], ids=repr)
def test_a_signed_token_whose_claims_are_not_an_object_is_malformed(body: Any) -> None:
    with pytest.raises(AuthError, match="malformed token"):
        auth().check(Credentials(bearer=signed(body)))
