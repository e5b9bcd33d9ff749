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
from starlette.datastructures import Headers, QueryParams
from starlette.websockets import WebSocketDisconnect

from voxpipe.config import AuthConfig
from voxpipe.conversation.principal import ANONYMOUS
from voxpipe.server.auth import Authenticator, AuthError, Credentials, Presented, TokenRequest

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
    found = presented(
        [("Authorization", "bEaReR  k-web ")],
        "api_key=k-query&token=vxt1.x",
        ["realtime", "openai-insecure-api-key.k-sub"],
    )
    assert [(p.where, p.secret) for p in found.presented] == [
        ("the Authorization header", "k-web"),
        ("?api_key=", "k-query"),
        ("?token=", "vxt1.x"),
        ("the openai-insecure-api-key.<key> subprotocol", "k-sub"),
    ]
    assert Credentials.of({"authorization": "Bearer k"}, {"token": "t"}, []) == Credentials(
        (Presented("the Authorization header", "k"), Presented("?token=", "t"))
    ), "plain mappings are read too"
    basic = presented([("Authorization", "Basic k-web")], subprotocols=["realtime"])
    assert basic == Credentials(), "only a bearer credential counts"


async def test_with_no_key_configured_everyone_is_the_one_anonymous_principal() -> None:
    off = auth(keys=[], secret=None)
    assert not off.enabled and not off.tokens_enabled
    for credentials in (Credentials(), Credentials.bearer("anything"), Credentials.query("vxt1.x")):
        assert off.check(credentials) is ANONYMOUS
        assert await off.admit(credentials, "twilio") is ANONYMOUS


def test_missing_credentials_say_where_to_put_them() -> None:
    with pytest.raises(AuthError, match="missing credentials: send Authorization: Bearer"):
        auth().check(Credentials())


def test_a_key_or_a_token_alone_is_enough_and_says_where_it_was_wrong() -> None:
    a = auth()
    assert a.check(Credentials.bearer("k-phone")).id == "key:phone"
    assert a.check(Credentials.query(a.issue("key:web").token)).id == "key:web"
    with pytest.raises(AuthError, match=r"invalid API key \(in the Authorization header\)"):
        a.check(Credentials.bearer("wrong"))
    with pytest.raises(AuthError, match=r"signature \(in \?token=\)"):
        a.check(Credentials.query("vxt1.e30.forged"))


def test_a_token_cannot_stand_in_for_the_key_that_mints() -> None:
    a = auth()
    token = a.issue("key:web").token
    assert a.check(Credentials.bearer(token)).id == "key:web"
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
    assert auth().check(Credentials.bearer(signed(good))).id == "key:web", "the forgery works"
    with pytest.raises(AuthError, match="malformed token"):
        auth().check(Credentials.bearer(signed(good | claims)))


@pytest.mark.parametrize("body", [[1, 2], "key:web", None], ids=repr)
def test_a_signed_token_whose_claims_are_not_an_object_is_malformed(body: Any) -> None:
    with pytest.raises(AuthError, match="malformed token"):
        auth().check(Credentials.bearer(signed(body)))


# -- every credential presented must hold (issue 29, 8d) ---------------------------------


def presented(
    headers: list[tuple[str, str]] = [],  # noqa: B006  # read only
    query: str = "",
    subprotocols: list[str] = [],  # noqa: B006
) -> Credentials:
    """What a connection carries, read as the server reads it (repeats kept)."""
    raw = [(k.lower().encode(), v.encode()) for k, v in headers]
    return Credentials.of(Headers(raw=raw), QueryParams(query), subprotocols)


# Good on every Authenticator with SECRET, for a day: minted when the module is collected,
# it must outlive a whole test run (a 300 s token expired under `make test`).
TOKEN = (
    Authenticator(AuthConfig(api_keys=KEYS, token_secret=SECRET, token_ttl_s=86400))
    .issue("key:web")
    .token
)
WRONG_BESIDE_RIGHT = {
    "wrong header, good ?api_key=": presented([("Authorization", "Bearer nope")], "api_key=k-web"),
    "good header, wrong ?api_key=": presented([("Authorization", "Bearer k-web")], "api_key=nope"),
    "wrong ?api_key=, good ?token=": presented(query=f"api_key=nope&token={TOKEN}"),
    "good ?api_key=, wrong ?token=": presented(query="api_key=k-web&token=nope"),
    "?api_key= twice, the first wrong": presented(query="api_key=nope&api_key=k-web"),
    "?api_key= twice, the last wrong": presented(query="api_key=k-web&api_key=nope"),
    "two Authorization headers": presented(
        [("Authorization", "Bearer nope"), ("Authorization", "Bearer k-web")]
    ),
    "two key subprotocols": presented(
        subprotocols=["realtime", "openai-insecure-api-key.nope", "openai-insecure-api-key.k-web"]
    ),
    "wrong subprotocol, good header": presented(
        [("Authorization", "Bearer k-web")], subprotocols=["openai-insecure-api-key.nope"]
    ),
    "an empty bearer beside a good key": presented([("Authorization", "Bearer ")], "api_key=k-web"),
    "an empty ?token= beside a good key": presented(query="api_key=k-web&token="),
    "a forged token beside a good key": presented(
        [("Authorization", "Bearer vxt1.e30.forged")], "api_key=k-web"
    ),
}


@pytest.mark.parametrize("credentials", WRONG_BESIDE_RIGHT.values(), ids=WRONG_BESIDE_RIGHT.keys())
def test_a_wrong_credential_is_refused_even_beside_a_right_one(credentials: Credentials) -> None:
    with pytest.raises(AuthError):
        auth().check(credentials)


def test_the_same_caller_named_twice_is_one_caller_and_two_callers_are_refused() -> None:
    a, token = auth(), TOKEN
    same = presented([("Authorization", "Bearer k-web")], "api_key=k-web")
    assert a.check(same).id == "key:web"
    twice = presented([("Authorization", f"Bearer {token}")], f"token={token}")
    assert a.check(twice).id == "key:web"
    with pytest.raises(AuthError, match="name different callers"):
        a.check(presented([("Authorization", "Bearer k-web")], "api_key=k-phone"))
    with pytest.raises(AuthError, match="name different callers"):  # a key and its own token:
        a.check(presented([("Authorization", "Bearer k-web")], f"token={token}"))  # which scope?


def test_a_wrong_credential_beside_a_right_one_is_refused_at_every_door() -> None:
    """Through the app: the WebSocket doors close with 1008, WebRTC and minting answer 401."""
    from tests.unit.server.test_auth import app, refusal, wait_ready

    wrong = {"Authorization": "Bearer nope"}
    with app() as client:
        wait_ready(client)
        for path in ("/v1/voice", "/v1/realtime", "/v1/twilio"):
            with (
                client.websocket_connect(f"{path}?api_key=k-web", headers=wrong) as ws,
                pytest.raises(WebSocketDisconnect) as closed,
            ):
                ws.receive_json()
                ws.receive_json()
            assert closed.value.code == 1008, path
        event, code = refusal(client, "/v1/voice?api_key=k-web&api_key=nope")
        assert code == 1008 and event is not None and event["code"] == "unauthorized", event
        offer = client.post(
            "/v1/webrtc/offer?api_key=k-web", json={"sdp": "v=0", "type": "offer"}, headers=wrong
        )
        assert offer.status_code == 401 and offer.json()["code"] == "unauthorized", offer.text
        minted = client.post(
            "/v1/tokens",
            headers=[("Authorization", "Bearer k-web"), ("Authorization", "Bearer nope")],
        )
        assert minted.status_code == 401 and minted.json()["code"] == "unauthorized", minted.text
        minted = client.post("/v1/tokens?api_key=nope", headers={"Authorization": "Bearer k-web"})
        assert minted.status_code == 401 and "found a credential in ?api_key=" in minted.text
