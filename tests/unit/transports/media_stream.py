"""A provider's media stream into the telephony base on fake engines: what each provider's
unit tests drive (``test_twilio.py``, ``test_telephony_providers.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import numpy as np
from starlette.websockets import WebSocket

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.config import Config
from voxpipe.conversation.services import Services
from voxpipe.engines.base import Engines
from voxpipe.engines.queued import Runners
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.turn_log import TurnLog
from voxpipe.server.calls import CallRegistry
from voxpipe.transports.call import Call
from voxpipe.transports.telephony.base import Provider
from voxpipe.transports.telephony.media_stream import MediaStream

LOUD_PCM = np.full(160, 16384, dtype="<i2").tobytes()  # 20 ms at 8 kHz the fake VAD hears
QUIET_PCM = bytes(320)


class FakeSocket:
    """What the transport uses of a Starlette WebSocket: receive, send_text/bytes, close."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []  # JSON text messages, decoded
        self.binary: list[bytes] = []  # binary messages
        self.close_code: int | None = None
        self.close_reason: str | None = None

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def send_bytes(self, data: bytes) -> None:
        self.binary.append(data)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.close_code, self.close_reason = code, reason

    def text(self, message: dict[str, Any] | str) -> None:
        text = message if isinstance(message, str) else json.dumps(message)
        self.inbox.put_nowait({"type": "websocket.receive", "text": text})

    def bytes(self, data: bytes) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "bytes": data})

    def of(self, event: str, key: str = "event") -> list[dict[str, Any]]:
        return [m for m in self.sent if m.get(key) == event]


class StreamLine:
    """One provider stream into a :class:`MediaStream` on fake engines."""

    def __init__(self, provider: type[Provider], **config: dict[str, Any]) -> None:
        self.config = Config.load(audio={"playback_lead_ms": 50}, **config)
        self.metrics = Metrics()
        runners = Runners(
            *(EngineRunner(name, observer=self.metrics) for name in ("vad", "stt", "llm", "tts"))
        )
        engines = Engines(fake_vad(), FakeStt(), FakeLlm(), FakeTts(samples_per_clause=8000))
        self.services = Services(self.config, engines, runners, self.metrics, TurnLog(None))
        self.ws = FakeSocket()
        self.call = Call(provider.name, self.services, CallRegistry(4, self.metrics))
        self.conn = MediaStream(cast(WebSocket, self.ws), self.call, provider())
        self.task = asyncio.create_task(self.conn.run())

    def errors(self, code: str) -> float:
        value = self.metrics.registry.get_sample_value("voxpipe_errors_total", {"code": code})
        return value or 0.0

    async def until(self, condition: Any, within_s: float = 5.0) -> None:
        async with asyncio.timeout(within_s):
            while not condition():  # noqa: ASYNC110  # polls the transport's state
                await asyncio.sleep(0.005)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.services.runners.close()


def fake_vad() -> FakeVad:
    """The VAD a line is built with (a test may patch this for a slow one)."""
    return FakeVad()
