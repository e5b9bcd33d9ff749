"""Keys and tokens: named key identities, token claims and scope, single use (in memory and
through a real redis-server), expiry, the token secret apart from the keys, and the
``POST /v1/tokens`` and connect-time refusals of the real app on fake engines."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import time
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.unit.fakes import fake_engines
from voxpipe.config import AuthConfig, Config, StoreConfig
from voxpipe.loadtest.server_process import free_port
from voxpipe.server.app import create_app
from voxpipe.server.auth import (
    TRANSPORTS,
    Authenticator,
    AuthError,
    Credentials,
    TokenRequest,
    TokenRequestError,
)
from voxpipe.server.token_replay import MemoryReplayGuard, RedisReplayGuard, ReplayUnavailable
from voxpipe.transports.native import NativeTransport
from voxpipe.transports.openai_realtime import RealtimeTransport
from voxpipe.transports.telephony import PROVIDERS

SECRET = "s" * 40
OTHER_SECRET = "t" * 40
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def auth(keys: Any = None, secret: str | None = SECRET, **more: Any) -> Authenticator:
    keys = [{"name": "web", "key": "web-key-1"}] if keys is None else keys
    return Authenticator(AuthConfig(api_keys=keys, token_secret=secret, **more))


def bearer(secret: str) -> Credentials:
    return Credentials.bearer(secret)


def mint(a: Authenticator, issuer: str = "key:web", **request: Any) -> str:
    return a.issue(issuer, TokenRequest(**request)).token


# -- key identities ---------------------------------------------------------------------


def test_every_key_form_gets_its_name_as_identity() -> None:
    listed = auth([{"name": "web", "key": "k-web"}, {"name": "phone", "key": "k-phone"}])
    mapped = auth({"web": "k-web", "phone": "k-phone"})
    for a in (listed, mapped):
        assert a.check(bearer("k-web")).id == "key:web"
        assert a.check(bearer("k-phone")).id == "key:phone"
        assert a.check_key("k-phone") == "key:phone"


def test_a_bare_key_is_named_by_its_digest_wherever_it_sits_in_the_list() -> None:
    digest = hashlib.sha256(b"a-long-random-key").hexdigest()[:8]
    first = auth(["a-long-random-key", "another-key"])
    second = auth(["another-key", "a-long-random-key"])
    for a in (first, second):
        assert a.check(bearer("a-long-random-key")).id == f"key:{digest}"
    assert auth(["another-key"]).check(bearer("another-key")).id != f"key:{digest}"


def test_the_environment_form_of_the_readme_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXPIPE_AUTH__API_KEYS", '["a-long-random-key"]')
    monkeypatch.setenv("VOXPIPE_AUTH__TOKEN_SECRET", SECRET)
    config = Config.load().auth
    assert [k.key.get_secret_value() for k in config.api_keys] == ["a-long-random-key"]
    assert "a-long-random-key" not in repr(config) and SECRET not in repr(config)
    assert "a-long-random-key" not in json.dumps(config.model_dump(mode="json"))


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        ([{"name": "web", "key": "k1"}, {"name": "web", "key": "k2"}], "unique; repeated: web"),
        ([{"name": "a", "key": "same"}, {"name": "b", "key": "same"}], "listed twice"),
        ([{"name": "a/b", "key": "k1"}], "pattern"),
        ([{"name": "", "key": "k1"}], "pattern"),
        ([{"name": "web", "key": ""}], "at least 1"),
        ([{"name": "web"}], "key"),
    ],
)
def test_bad_key_lists_are_refused_at_load(keys: Any, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        AuthConfig(api_keys=keys)


def test_a_short_token_secret_is_refused_at_load() -> None:
    with pytest.raises(ValidationError, match="at least 32"):
        AuthConfig(api_keys=["k1"], token_secret="short")


@pytest.mark.parametrize(
    "auth_config",
    [
        {"api_keys": {"a": "key-in-two-places", "b": "key-in-two-places"}},
        {"api_keys": [{"name": "a/b", "key": "key-with-a-bad-name"}]},
        {"api_keys": ["k1"], "token_secret": "short-secret"},
    ],
)
@pytest.mark.parametrize("whole", [True, False])
def test_a_config_error_names_the_field_not_the_secret(
    auth_config: dict[str, Any], whole: bool
) -> None:
    with pytest.raises(ValidationError) as refused:
        Config.load(auth=auth_config) if whole else AuthConfig(**auth_config)
    assert "api_keys" in str(refused.value) or "token_secret" in str(refused.value)
    for secret in ("key-in-two-places", "key-with-a-bad-name", "short-secret"):
        assert secret not in str(refused.value)


# -- token claims -----------------------------------------------------------------------


def test_a_tokens_principal_is_its_key_and_subject() -> None:
    a = auth({"web": "k-web", "phone": "k-phone"})
    assert a.check(bearer(mint(a))).id == "key:web"
    assert a.check(bearer(mint(a, subject="alice"))).id == "key:web/alice"
    # The same subject minted by another key is another principal.
    assert a.check(bearer(mint(a, "key:phone", subject="alice"))).id == "key:phone/alice"


def test_a_token_carries_its_scope() -> None:
    a = auth()
    issued = a.issue(
        "key:web",
        TokenRequest(transports=["webrtc", "native"], session_id="call-1", single_use=True),
    )
    principal = a.check(Credentials.query(issued.token))
    assert principal.transports == frozenset({"native", "webrtc"})
    assert principal.session_id == "call-1" and principal.may_open("call-1")
    assert not principal.may_open("call-2")
    assert principal.jti is not None and principal.expires_at is not None
    assert issued.principal == principal
    unscoped = a.check(bearer(mint(a)))
    assert unscoped.transports is None and unscoped.session_id is None and unscoped.jti is None
    assert all(unscoped.may_use(t) for t in TRANSPORTS)


def test_the_token_request_is_validated() -> None:
    for bad in [
        {"subject": "a b"},
        {"subject": "x" * 200},
        {"transports": []},
        {"transports": ["sip"]},
        {"session_id": ""},
        {"ttl_s": 0},
        {"scope": "all"},  # unknown fields are an error, not ignored
    ]:
        with pytest.raises(ValidationError):
            TokenRequest.model_validate(bad)
    with pytest.raises(TokenRequestError, match=r"exceeds auth\.token_ttl_s"):
        auth().issue("key:web", TokenRequest(ttl_s=301))


def test_transport_names_are_the_transports_own() -> None:
    names = {NativeTransport.name, RealtimeTransport.name, "webrtc", *(p.name for p in PROVIDERS)}
    assert set(TRANSPORTS) == names


# -- scope and single use at connect ----------------------------------------------------


async def test_a_token_opens_only_its_transports() -> None:
    a = auth()
    token = Credentials.query(mint(a, transports=["native"]))
    assert (await a.admit(token, "native")).id == "key:web"
    for other in ("twilio", "realtime", "webrtc"):
        with pytest.raises(AuthError, match=f"does not open {other} .it allows: native"):
            await a.admit(token, other)


async def test_a_single_use_token_opens_one_connection() -> None:
    a = auth()
    token = Credentials.query(mint(a, single_use=True, transports=["native"]))
    with pytest.raises(AuthError, match="does not open twilio"):
        await a.admit(token, "twilio")  # refused for its scope: not spent
    await a.admit(token, "native")
    with pytest.raises(AuthError, match="already used"):
        await a.admit(token, "native")
    reusable = Credentials.query(mint(a))
    for _ in range(3):
        await a.admit(reusable, "native")


async def test_the_memory_guard_forgets_expired_ids_and_fails_closed_when_full() -> None:
    now = [1000.0]
    guard = MemoryReplayGuard(capacity=2, clock=lambda: now[0])
    assert await guard.first_use("a", 1010) and await guard.first_use("b", 1020)
    assert not await guard.first_use("a", 1010)
    with pytest.raises(ReplayUnavailable):
        await guard.first_use("c", 1030)  # full of live ids: refused, none forgotten
    now[0] = 1010.0  # "a" expired: its slot is free, and its token is refused as expired
    assert await guard.first_use("c", 1030)
    assert len(guard) == 2


async def test_with_redis_a_replay_to_another_worker_is_refused(redis_url: str) -> None:
    store = StoreConfig(backend="redis", redis_url=redis_url, key_prefix="t-auth:")
    one, two = RedisReplayGuard(store), RedisReplayGuard(store)
    worker1 = Authenticator(AuthConfig(api_keys=["k-web"], token_secret=SECRET), one)
    worker2 = Authenticator(AuthConfig(api_keys=["k-web"], token_secret=SECRET), two)
    try:
        token = Credentials.query(mint(worker1, worker1.check_key("k-web"), single_use=True))
        await worker1.admit(token, "native")
        with pytest.raises(AuthError, match="already used"):
            await worker2.admit(token, "native")
        jti = worker1.check(token).jti
        assert jti is not None
        ttl = redis.Redis.from_url(redis_url).ttl(f"t-auth:token-jti:{jti}")
        assert 0 < ttl <= 300  # remembered until the token expires, no longer
    finally:
        await worker1.aclose()
        await worker2.aclose()


async def test_with_redis_down_a_single_use_token_is_refused_not_let_through() -> None:
    store = StoreConfig(backend="redis", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    a = Authenticator(AuthConfig(api_keys=["k-web"], token_secret=SECRET), RedisReplayGuard(store))
    try:
        token = Credentials.query(mint(a, a.check_key("k-web"), single_use=True))
        with pytest.raises(AuthError, match="cannot check the single-use token"):
            await a.admit(token, "native")
        await a.admit(Credentials.query(mint(a, a.check_key("k-web"))), "native")
    finally:
        await a.aclose()


# -- expiry, tampering, the separate secret ---------------------------------------------


def test_an_expired_token_is_refused() -> None:
    a = auth()
    old = a.issue("key:web", TokenRequest(ttl_s=10), now=time.time() - 11).token
    with pytest.raises(AuthError, match="expired"):
        a.check(bearer(old))
    fresh = a.issue("key:web", TokenRequest(ttl_s=10), now=time.time() - 5).token
    assert a.check(bearer(fresh)).id == "key:web"


def _reclaim(token: str, **changes: Any) -> str:
    """The token with its claims changed and its old signature kept."""
    body, signature = token.removeprefix("vxt1.").split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps(claims | changes).encode()).rstrip(b"=")
    return f"vxt1.{forged.decode()}.{signature}"


def test_a_tampered_token_is_refused() -> None:
    a = auth()
    token = mint(a, transports=["native"], subject="alice")
    for forged in [
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"),  # signature
        _reclaim(token, tr=["native", "twilio"]),  # widened scope
        _reclaim(token, sub="bob"),  # another subject
        _reclaim(token, exp=int(time.time()) + 10**6),  # longer life
        "vxt1.e30.forged",
        "vxt1.",
        "vxt1." + "a" * 5000,
    ]:
        with pytest.raises(AuthError, match=r"signature|malformed"):
            a.check(bearer(forged))


def test_keys_rotate_without_breaking_tokens_and_the_secret_revokes_them() -> None:
    before = auth({"web": "old-web-key"})
    token = bearer(mint(before, subject="alice"))
    rotated = auth({"web": "new-web-key"})  # same name, new key, same secret
    assert rotated.check(token).id == "key:web/alice"
    with pytest.raises(AuthError, match="invalid API key"):
        rotated.check(bearer("old-web-key"))
    with pytest.raises(AuthError, match="signature"):
        auth({"web": "old-web-key"}, secret=OTHER_SECRET).check(token)


def test_without_a_token_secret_keys_work_and_tokens_do_not() -> None:
    a = auth({"web": "k-web"}, secret=None)
    assert a.enabled and not a.tokens_enabled
    assert a.check(bearer("k-web")).id == "key:web"
    with pytest.raises(AuthError, match="token_secret"):
        a.issue("key:web")
    token = bearer(mint(auth({"web": "k-web"})))  # minted where a secret was set
    with pytest.raises(AuthError, match="token_secret is not set"):
        a.check(token)


# -- the app: POST /v1/tokens and refusals at connect -----------------------------------


def app(**auth_config: Any) -> TestClient:
    config = Config.load(
        server={"turn_log_path": None}, store={"path": None}, deadlines={"filler": ""},
        auth={"api_keys": {"web": "k-web", "phone": "k-phone"}, "token_secret": SECRET}
        | auth_config,
    )  # fmt: skip
    return TestClient(create_app(config, fake_engines))


def post_token(client: TestClient, key: str = "k-web", **kwargs: Any) -> Any:
    return client.post("/v1/tokens", headers={"Authorization": f"Bearer {key}"}, **kwargs)


def test_minting_answers_the_scope_it_granted() -> None:
    with app() as client:
        plain = post_token(client)
        assert plain.status_code == 200, plain.text
        assert plain.json()["principal"] == "key:web" and plain.json()["expires_in"] == 300
        scoped = post_token(
            client,
            json={"subject": "alice", "transports": ["native"], "single_use": True, "ttl_s": 60},
        )
        assert scoped.status_code == 200, scoped.text
        body = scoped.json()
        assert body["principal"] == "key:web/alice" and body["expires_in"] == 60
        assert body["transports"] == ["native"] and body["single_use"] is True
        assert body["session_id"] is None


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{", 400, "invalid_json"),
        (b"[]", 400, "invalid_event"),
        (b'{"transports": ["sip"]}', 400, "invalid_event"),
        (b'{"subject": "two words"}', 400, "invalid_event"),
        (b'{"ttl_s": 3600}', 400, "invalid_event"),
        (b'{"admin": true}', 400, "invalid_event"),
        (b"{" + b" " * 5000 + b"}", 413, "message_too_large"),
    ],
)
def test_a_bad_token_request_gets_a_typed_error(content: bytes, status: int, code: str) -> None:
    with app() as client:
        refused = post_token(client, content=content)
    assert refused.status_code == status, refused.text
    assert refused.json()["type"] == "error" and refused.json()["code"] == code
    assert refused.json()["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ttl_s", "60"),
        ("ttl_s", 60.0),
        ("ttl_s", True),
        ("single_use", "yes"),
        ("single_use", 1),
        ("subject", 42),
        ("session_id", 7),
        ("transports", "native"),
    ],
)
def test_a_token_request_field_of_the_wrong_json_type_is_refused_by_name(
    field: str, value: Any
) -> None:
    """Strict types: "60" is not 60 and "yes" is not true (issue 29, 8c)."""
    with app() as client:
        refused = post_token(client, json={field: value})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_event"
    assert refused.json()["message"].startswith(f"token request: {field}"), refused.json()


def test_minting_needs_a_key_and_a_secret() -> None:
    with app() as client:
        assert post_token(client, "wrong").json()["code"] == "unauthorized"
        token = post_token(client).json()["token"]
        assert post_token(client, token).status_code == 401  # a token mints no token
    with app(token_secret=None) as client:
        refused = post_token(client)
        assert refused.status_code == 503
        assert refused.json()["code"] == "tokens_disabled"
        assert "auth.token_secret" in refused.json()["message"]
    with app(api_keys=[]) as client:
        assert post_token(client).status_code == 404


def wait_ready(client: TestClient) -> None:
    deadline = time.monotonic() + 20
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, "fake engines did not load"
        time.sleep(0.02)


def refusal(client: TestClient, path: str) -> tuple[dict[str, Any] | None, int]:
    """The error event (None on Twilio, whose protocol has none) and the close code."""
    event = None
    with client.websocket_connect(path) as ws, pytest.raises(WebSocketDisconnect) as closed:
        event = ws.receive_json()
        ws.receive_json()
    return event, closed.value.code


def test_every_phone_route_takes_the_same_credentials_as_twilio_s() -> None:
    with app() as client:
        wait_ready(client)
        native_only = post_token(client, json={"transports": ["native"]}).json()["token"]
        for provider in PROVIDERS:
            path = f"/v1/{provider.name}"
            assert refusal(client, path) == (None, 1008), path  # no credentials
            assert refusal(client, f"{path}?token={native_only}") == (None, 1008), path
            token = post_token(client, json={"transports": [provider.name]}).json()["token"]
            with client.websocket_connect(f"{path}?token={token}") as ws:
                ws.close()  # admitted: its start would open the call


def test_a_token_for_native_is_refused_by_every_other_door() -> None:
    with app() as client:
        wait_ready(client)
        token = post_token(client, json={"transports": ["native"]}).json()["token"]
        assert refusal(client, f"/v1/twilio?token={token}") == (None, 1008)
        event, code = refusal(client, f"/v1/realtime?token={token}")
        assert code == 1008 and event is not None
        assert event["error"]["code"] == "unauthorized", event
        assert "does not open realtime (it allows: native)" in event["error"]["message"]
        offer = client.post(
            "/v1/webrtc/offer",
            json={"sdp": "v=0", "type": "offer"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert offer.status_code == 401 and offer.json()["code"] == "unauthorized"
        assert "does not open webrtc" in offer.json()["message"]
        with client.websocket_connect(f"/v1/voice?token={token}") as ws:
            ws.send_json({"type": "session.start"})
            assert ws.receive_json()["type"] == "session.started"


def test_a_token_scoped_to_one_session_opens_only_that_one_over_realtime() -> None:
    """A Realtime session was named by the server whatever the token's scope: a token for
    one session opened any number of others."""
    with app() as client:
        wait_ready(client)
        token = post_token(client, json={"session_id": "sess_desk42"}).json()["token"]
        with client.websocket_connect(f"/v1/realtime?token={token}") as ws:
            created = ws.receive_json()
        assert created["type"] == "session.created"
        assert created["session"]["id"] == "sess_desk42", created


def test_a_single_use_token_is_refused_at_its_second_connect() -> None:
    with app() as client:
        wait_ready(client)
        token = post_token(client, json={"single_use": True}).json()["token"]
        with client.websocket_connect(f"/v1/voice?token={token}") as ws:
            ws.send_json({"type": "session.start"})
            assert ws.receive_json()["type"] == "session.started"
        event, code = refusal(client, f"/v1/voice?token={token}")
        assert event is not None and (event["code"], code) == ("unauthorized", 1008)
        assert "already used" in event["message"]
