"""Call control over Telnyx, Plivo and Vonage against a local stand-in for each REST API
(``tests/rest_recorder.py``), which records the method, path, headers and body: a transfer
and an outbound call each make exactly the documented request (docs/telephony.md cites the
pages), Plivo's XML is served only for the URLs this server signed, and every way a
request can fail (an unset field, an error status, no answer in time) is one clear
``ProviderRefused``. Through the telephony base: a ``CallTransfer`` makes one request, and
a refused one is logged and counted (``transfer_failed``) while the call goes on."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import jwt
import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from tests.rest_recorder import RestRecorder
from tests.support import metric_value
from tests.unit.conversation.tools_support import called
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.test_telephony_providers import SPECS, Wire
from voxpipe.agent import Agent
from voxpipe.agent.call_control import transfer_call_to
from voxpipe.config import Config, TelephonyConfig
from voxpipe.conversation.events import AudioOut, CallTransfer
from voxpipe.engines.base import Engines
from voxpipe.transports import plivo_rest, telnyx_rest, vonage_rest
from voxpipe.transports.provider_rest import NotDialable, ProviderRefused
from voxpipe.transports.telephony.base import Provider, Started, TransferUnsupported
from voxpipe.transports.telephony.exotel import Exotel
from voxpipe.transports.telephony.plivo import Plivo
from voxpipe.transports.telephony.telnyx import Telnyx
from voxpipe.transports.telephony.vonage import Vonage

PUBLIC = "wss://voice.example.com"
PLIVO_ID, PLIVO_TOKEN = "MAXXXXXXXXXXXXXXXXXX", "plivo-token"
VONAGE_APP = "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"
_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PRIVATE_PEM = _KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
PUBLIC_PEM = (
    _KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


@pytest.fixture
def api() -> Iterator[RestRecorder]:
    with RestRecorder().running() as recorder:
        yield recorder


def configured(api: RestRecorder, **more: Any) -> TelephonyConfig:
    """Every provider configured, each API at the recorder."""
    return TelephonyConfig(
        telnyx_api_base=api.url,
        telnyx_api_key=SecretStr("KEY-telnyx"),
        telnyx_connection_id="1494404757140276705",
        telnyx_from="+15550100",
        plivo_api_base=api.url,
        plivo_auth_id=PLIVO_ID,
        plivo_auth_token=SecretStr(PLIVO_TOKEN),
        plivo_from="+15550100",
        vonage_api_base=api.url,
        vonage_application_id=VONAGE_APP,
        vonage_private_key=SecretStr(PRIVATE_PEM),
        vonage_from="+15550100",
        public_url=PUBLIC,
        rest_timeout_s=1.0,
        **more,
    )


def settings(api: RestRecorder) -> dict[str, Any]:
    """:func:`configured` as the telephony section of a ``Config``, secrets in clear."""
    cfg = configured(api)
    values = cfg.model_dump(mode="json")
    for secret in ("telnyx_api_key", "plivo_auth_token", "vonage_private_key"):
        values[secret] = getattr(cfg, secret).get_secret_value()
    return values


def basic(headers: dict[str, str]) -> str:
    scheme, _, value = headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    return base64.b64decode(value).decode()


def vonage_claims(headers: dict[str, str]) -> dict[str, Any]:
    scheme, _, token = headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims: dict[str, Any] = jwt.decode(token, PUBLIC_PEM, algorithms=["RS256"])
    return claims


def plivo_xml(cfg: TelephonyConfig, url: str) -> Response:
    """What this server's /v1/plivo/xml answers to ``url``."""

    async def endpoint(request: Request) -> Response:
        return await plivo_rest.xml_endpoint(request, cfg)

    app = Starlette(routes=[Route(plivo_rest.XML_PATH, endpoint, methods=["GET", "POST"])])
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == "https://voice.example.com"
    return TestClient(app).get(f"{parts.path}?{parts.query}")  # type: ignore[return-value]


# -- Telnyx --------------------------------------------------------------------------------


async def test_telnyx_transfer_is_call_control_s_transfer(api: RestRecorder) -> None:
    await telnyx_rest.transfer(configured(api), "v3:abc-DEF_1", "+15550199")
    (made,) = api.requests
    assert (made.method, made.path) == ("POST", "/v2/calls/v3:abc-DEF_1/actions/transfer")
    assert made.headers["Authorization"] == "Bearer KEY-telnyx"
    assert made.headers["Content-Type"] == "application/json"
    assert made.json == {"to": "+15550199"}


async def test_telnyx_dial_streams_both_ways_to_our_route(api: RestRecorder) -> None:
    call = await Telnyx.dial(configured(api), "+15550123", f"{PUBLIC}/v1/telnyx", {})
    (made,) = api.requests
    assert (made.method, made.path) == ("POST", "/v2/calls")
    assert made.headers["Authorization"] == "Bearer KEY-telnyx"
    assert made.json == {
        "connection_id": "1494404757140276705",
        "to": "+15550123",
        "from": "+15550100",
        "stream_url": "wss://voice.example.com/v1/telnyx",
        "stream_track": "inbound_track",
        "stream_bidirectional_mode": "rtp",
        "stream_bidirectional_codec": "PCMU",
    }
    assert call.startswith("v3:")


# -- Plivo ---------------------------------------------------------------------------------


async def test_plivo_transfer_points_the_a_leg_at_signed_dial_xml(api: RestRecorder) -> None:
    cfg = configured(api)
    await plivo_rest.transfer(cfg, "1ed7fd89-df77-4ebf-8196-d5cf7222c918", "+15550199")
    (made,) = api.requests
    assert made.method == "POST"
    assert made.path == f"/v1/Account/{PLIVO_ID}/Call/1ed7fd89-df77-4ebf-8196-d5cf7222c918/"
    assert basic(made.headers) == f"{PLIVO_ID}:{PLIVO_TOKEN}"
    body = made.json
    assert set(body) == {"legs", "aleg_url", "aleg_method"}
    assert (body["legs"], body["aleg_method"]) == ("aleg", "GET")
    served = plivo_xml(cfg, body["aleg_url"])
    assert served.status_code == 200 and served.headers["content-type"] == "application/xml"
    assert served.text == "<Response><Dial><Number>15550199</Number></Dial></Response>"

    await plivo_rest.transfer(cfg, "c2", "sip:desk@pbx.example.com")
    sip = plivo_xml(cfg, api.requests[-1].json["aleg_url"]).text
    assert sip == "<Response><Dial><User>sip:desk@pbx.example.com</User></Dial></Response>"


async def test_plivo_dial_answers_with_stream_xml(api: RestRecorder) -> None:
    cfg = configured(api)
    call = await Plivo.dial(cfg, "+15550123", f"{PUBLIC}/v1/plivo", {})
    (made,) = api.requests
    assert (made.method, made.path) == ("POST", f"/v1/Account/{PLIVO_ID}/Call/")
    assert basic(made.headers) == f"{PLIVO_ID}:{PLIVO_TOKEN}"
    body = made.json
    assert set(body) == {"from", "to", "answer_url", "answer_method"}
    assert (body["from"], body["to"], body["answer_method"]) == ("15550100", "15550123", "GET")
    xml = ElementTree.fromstring(plivo_xml(cfg, body["answer_url"]).text)
    assert [e.tag for e in xml] == ["Stream", "Hangup"]
    stream = xml[0]
    assert stream.text == "wss://voice.example.com/v1/plivo"
    assert stream.attrib == {
        "bidirectional": "true",
        "keepCallAlive": "true",
        "audioTrack": "inbound",
        "contentType": "audio/x-mulaw;rate=8000",
    }
    assert call and call != "request_uuid"


def test_plivo_xml_is_served_only_for_urls_this_server_signed() -> None:
    cfg = TelephonyConfig(plivo_auth_token=SecretStr(PLIVO_TOKEN), public_url=PUBLIC)
    good = plivo_rest.xml_url(cfg, "dial", "+15550199")
    assert plivo_xml(cfg, good).status_code == 200
    query = parse_qs(urlsplit(good).query)
    forged = good.replace("15550199", "19005550000")
    other_key = plivo_rest.xml_url(
        cfg.model_copy(update={"plivo_auth_token": SecretStr("x")}), "dial", "+1900"
    )
    for url in (forged, other_key, good.replace(query["sig"][0], ""), good.split("?")[0] + "?"):
        assert plivo_xml(cfg, url).status_code == 403, url


# -- Vonage --------------------------------------------------------------------------------


async def test_vonage_transfer_puts_an_ncco_connect_with_a_signed_jwt(api: RestRecorder) -> None:
    call = "63f61863-4a51-4f6b-86e1-46edebcf9356"
    await vonage_rest.transfer(configured(api), call, "+15550199")
    await vonage_rest.transfer(configured(api), call, "sip:desk@pbx.example.com")
    number, sip = api.requests
    assert (number.method, number.path) == ("PUT", f"/v1/calls/{call}")
    assert number.json == {
        "action": "transfer",
        "destination": {
            "type": "ncco",
            "ncco": [
                {
                    "action": "connect",
                    "endpoint": [{"type": "phone", "number": "15550199"}],
                    "from": "15550100",
                }
            ],
        },
    }
    ncco = sip.json["destination"]["ncco"]
    assert ncco[0]["endpoint"] == [{"type": "sip", "uri": "sip:desk@pbx.example.com"}]
    first, second = vonage_claims(number.headers), vonage_claims(sip.headers)
    assert set(first) == {"application_id", "iat", "exp", "jti"}
    assert first["application_id"] == VONAGE_APP and first["exp"] > first["iat"]
    assert first["jti"] != second["jti"], "a token per request"


async def test_vonage_dial_connects_the_callee_to_our_websocket(api: RestRecorder) -> None:
    instructions = {"instructions": "You are calling to confirm a table."}
    call = await Vonage.dial(configured(api), "+15550123", f"{PUBLIC}/v1/vonage", instructions)
    (made,) = api.requests
    assert (made.method, made.path) == ("POST", "/v1/calls")
    assert vonage_claims(made.headers)["application_id"] == VONAGE_APP
    assert made.json == {
        "to": [{"type": "phone", "number": "15550123"}],
        "from": {"type": "phone", "number": "15550100"},
        "ncco": [
            {
                "action": "connect",
                "endpoint": [
                    {
                        "type": "websocket",
                        "uri": "wss://voice.example.com/v1/vonage",
                        "content-type": "audio/l16;rate=16000",
                        "headers": instructions,
                    }
                ],
            }
        ],
    }
    assert call and call != "uuid"


# -- every way a request fails -------------------------------------------------------------

TRANSFERS = [
    ("Telnyx", lambda cfg: telnyx_rest.transfer(cfg, "v3:c", "+15550199")),
    ("Plivo", lambda cfg: plivo_rest.transfer(cfg, "c", "+15550199")),
    ("Vonage", lambda cfg: vonage_rest.transfer(cfg, "c", "+15550199")),
]
DIALS: list[tuple[str, type[Provider]]] = [("Telnyx", Telnyx), ("Plivo", Plivo), ("Vonage", Vonage)]


@pytest.mark.parametrize(("title", "transfer"), TRANSFERS, ids=[t for t, _ in TRANSFERS])
async def test_a_refusal_or_no_answer_is_a_clear_error(
    api: RestRecorder, title: str, transfer: Any
) -> None:
    cfg = configured(api)
    api.answer(404, '{"errors": [{"title": "Call not found"}]}')
    with pytest.raises(ProviderRefused, match=f"^{title} answered 404: .*not found"):
        await transfer(cfg)
    api.answer(503, "busy")
    with pytest.raises(ProviderRefused, match=f"^{title} answered 503: busy"):
        await transfer(cfg)
    api.answer(200, delay_s=1.5)  # past rest_timeout_s
    with pytest.raises(ProviderRefused, match=f"^{title}: ReadTimeout"):
        await transfer(cfg)
    assert len(api.requests) == 3


@pytest.mark.parametrize(("title", "transfer"), TRANSFERS, ids=[t for t, _ in TRANSFERS])
async def test_an_unconfigured_provider_names_what_is_missing(title: str, transfer: Any) -> None:
    with pytest.raises(ProviderRefused, match=r"telephony\.\w+"):
        await transfer(TelephonyConfig())


@pytest.mark.parametrize(("title", "provider"), DIALS, ids=[t for t, _ in DIALS])
async def test_a_dial_without_a_call_id_in_the_answer_is_refused(
    api: RestRecorder, title: str, provider: type[Provider]
) -> None:
    api.answer(201, "{}")
    with pytest.raises(ProviderRefused, match=f"^{title}'s answer has no"):
        await provider.dial(configured(api), "+15550123", f"{PUBLIC}/v1/x", {})


async def test_what_a_provider_cannot_dial_is_not_dialable(api: RestRecorder) -> None:
    cfg = configured(api)
    for provider in (Telnyx, Plivo):  # no stream parameters in their dial requests
        with pytest.raises(NotDialable, match="instructions"):
            await provider.dial(cfg, "+15550123", PUBLIC, {"instructions": "Be brief."})
    with pytest.raises(NotDialable):
        await Exotel.dial(cfg, "+15550123", PUBLIC, {})
    assert api.requests == []


def test_a_bad_vonage_key_is_a_clear_error() -> None:
    cfg = TelephonyConfig(vonage_application_id=VONAGE_APP, vonage_private_key=SecretStr("x"))
    with pytest.raises(ProviderRefused, match=r"telephony\.vonage_private_key"):
        vonage_rest.token(cfg)


# -- through the telephony base ------------------------------------------------------------

BY_PROVIDER = {spec.provider: spec for spec in SPECS}


def expected_path(provider: type[Provider], call: str) -> str:
    return {
        Telnyx: f"/v2/calls/{call}/actions/transfer",
        Plivo: f"/v1/Account/{PLIVO_ID}/Call/{call}/",
        Vonage: f"/v1/calls/{call}",
    }[provider]


@pytest.mark.parametrize("provider", [Telnyx, Plivo, Vonage], ids=lambda p: p.name)
async def test_a_transfer_event_makes_one_request_for_the_stream_s_call(
    api: RestRecorder, provider: type[Provider]
) -> None:
    cfg = settings(api)
    wire = Wire(BY_PROVIDER[provider], telephony=cfg)
    try:
        await wire.start()
        await wire.conn.send_event(CallTransfer("+15550199"))
        (made,) = api.requests
        assert made.path == expected_path(provider, wire.line.call_sid)
        assert wire.stream.errors("transfer_failed") == 0
    finally:
        await wire.stream.close()


@pytest.mark.parametrize("provider", [Telnyx, Plivo, Vonage, Exotel], ids=lambda p: p.name)
async def test_a_refused_transfer_is_logged_counted_and_the_call_goes_on(
    api: RestRecorder, provider: type[Provider], caplog: pytest.LogCaptureFixture
) -> None:
    cfg = settings(api)
    api.answer(500, "internal error")
    wire = Wire(BY_PROVIDER[provider], telephony=cfg)
    try:
        await wire.start()
        with caplog.at_level(logging.ERROR):
            await wire.conn.send_event(CallTransfer("+15550199"))
        assert wire.stream.errors("transfer_failed") == 1
        (record,) = [r for r in caplog.records if "the transfer failed" in r.getMessage()]
        reason = "Exotel has no published API" if provider is Exotel else "answered 500"
        assert reason in record.getMessage()
        assert len(api.requests) == (0 if provider is Exotel else 1)
        # the call goes on: still open, and the agent's audio still reaches the line
        sent = len(wire.sent())
        await wire.conn.send_audio(AudioOut(1, 1, bytes(wire.spec.rate // 50 * 2)))
        await wire.stream.until(lambda: len(wire.sent()) > sent)
        assert not wire.stream.task.done() and wire.stream.ws.close_code is None
    finally:
        await wire.stream.close()


async def test_a_vonage_stream_without_call_uuid_cannot_be_transferred(api: RestRecorder) -> None:
    stream = Vonage().inbound(
        Vonage.messages["websocket:connected"].model_validate(
            {"event": "websocket:connected", "content-type": "audio/l16;rate=16000"}
        )
    )
    assert isinstance(stream, Started) and stream.call_id  # a random id: no call named
    with pytest.raises(TransferUnsupported, match="call_uuid"):
        await Vonage().transfer(configured(api), stream, "+15550199")
    assert api.requests == []


# -- one outbound call and its transfer per provider, through the real app -----------------

KEY = "provider-test-key-0123456789abcdef"
ASKS = "Can I speak to a person, please?"


@pytest.mark.parametrize("provider", [Telnyx, Plivo, Vonage], ids=lambda p: p.name)
async def test_dial_then_transfer_through_the_app(
    api: RestRecorder, provider: type[Provider]
) -> None:
    telephony = settings(api)
    config = quiet_config(auth={"api_keys": [KEY]}, telephony=telephony)
    agent = Agent(instructions="Put callers through.", tools=[transfer_call_to("+15550199")])

    def engines(config: Config) -> Engines:
        llm = FakeLlm([called("transfer_call")])
        return Engines(FakeVad(), FakeStt(ASKS), llm, FakeTts(samples_per_clause=3200))

    async with serving(config, engines, 10.0, agent) as (port, http):
        auth = {"Authorization": f"Bearer {KEY}"}
        placed = await http.post(
            "/v1/calls", json={"to": "+15550123", "provider": provider.name}, headers=auth
        )
        assert placed.status_code == 201, placed.text
        (dialed,) = api.requests
        assert placed.json()["provider"] == provider.name and placed.json()["call_id"]
        assert dialed.path in ("/v2/calls", f"/v1/Account/{PLIVO_ID}/Call/", "/v1/calls")
        if provider is Plivo:  # the app serves the answer XML it signed
            answer = urlsplit(dialed.json["answer_url"])
            xml = await http.get(f"{answer.path}?{answer.query}")
            assert xml.status_code == 200 and "<Stream " in xml.text

        spec = BY_PROVIDER[provider]
        url = f"ws://127.0.0.1:{port}/v1/{provider.name}?api_key={KEY}"
        async with spec.line(url, {"From": "+15550100"}) as line:
            await line.connect()
            said = line.say(np.full(line.rate // 2, 0.5), line.rate)  # heard by the fake VAD
            await asyncio.wait_for(said.sent.wait(), 10)
            async with asyncio.timeout(15):
                while len(api.requests) < 2:  # noqa: ASYNC110  # the transfer's request
                    await asyncio.sleep(0.05)
            await line.hang_up()
        transferred = api.requests[1]
        assert transferred.path == expected_path(provider, line.call_sid)
        assert len(api.requests) == 2, "one transfer"
        metrics = (await http.get("/metrics")).text
        assert (metric_value(metrics, 'voxpipe_errors_total{code="transfer_failed"}') or 0) == 0


async def test_outbound_requests_name_a_known_provider_and_twilio_stays_the_default(
    api: RestRecorder,
) -> None:
    twilio = {"twilio_api_base": api.url, "twilio_auth_token": "t", "twilio_from": "+15550100"}
    telephony = {**twilio, "twilio_account_sid": "AC" + "0" * 32, "public_url": PUBLIC}
    config = quiet_config(auth={"api_keys": [KEY]}, telephony=telephony)

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts())

    async with serving(config, engines, 10.0) as (_, http):
        auth = {"Authorization": f"Bearer {KEY}"}
        placed = await http.post("/v1/calls", json={"to": "+15550123"}, headers=auth)
        assert placed.status_code == 201 and placed.json()["call_sid"].startswith("CA")
        assert api.requests[0].path.endswith("/Calls.json")
        for body, code in [
            ({"to": "+15550123", "provider": "skype"}, "invalid_event"),
            ({"to": "+15550123", "provider": "exotel"}, "invalid_event"),
            ({"to": "+15550123", "provider": "telnyx", "instructions": "Hi."}, "invalid_event"),
        ]:
            refused = await http.post("/v1/calls", json=body, headers=auth)
            assert (refused.status_code, refused.json()["code"]) == (400, code), refused.text
        unset = await http.post(
            "/v1/calls", json={"to": "+15550123", "provider": "vonage"}, headers=auth
        )
        assert (unset.status_code, unset.json()["code"]) == (502, "call_failed")
        assert "telephony.vonage_application_id" in unset.json()["message"]
        assert len(api.requests) == 1, "nothing else was dialed"
