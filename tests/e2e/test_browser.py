"""The browser page end to end: headless Chromium hears a real speech clip through its fake
microphone, streams it to the real server, plays the reply, and shows both transcripts and
the latency waterfall.

Chromium's fake capture device plays a WAV file as the microphone; the page is driven by
Playwright on Debian's /usr/bin/chromium (never a downloaded browser), with no network but
the server on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest
from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import Page, Route, WebSocket, sync_playwright

from tests.support import RunningServer, librivox_clips, tracebacks
from voxpipe.audio.pcm import float_to_pcm16, read_wav, write_wav

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TOKEN = "browser-test-token"  # auth is off on the shared server: the page must still pass it on
REPLY_TIMEOUT_MS = 240_000  # two shared cores: the first turn may wait behind other tests
# No network but loopback: no component updates, sync, field trials or metrics uploads.
NO_NETWORK = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-sync",
    "--metrics-recording-only",
    "--no-first-run",
    "--no-pings",
    "--no-default-browser-check",
    "--disable-features=MediaRouter,OptimizationHints,Translate",
]


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing on CI: run `make sysdeps` (Debian's chromium)")
        pytest.skip(f"{CHROMIUM} is missing: `make sysdeps` installs Debian's chromium")
    return CHROMIUM


def speech_wav(folder: Path) -> tuple[Path, str]:
    """A caller's turn as the fake microphone plays it: a breath of silence, one clip, then
    a minute of silence so the turn ends and the reply plays before the file could loop."""
    clip = librivox_clips()[1]  # "he was not an ill disposed young man"
    audio, rate = read_wav(clip.path)
    silence = np.zeros(int(rate * 0.5), np.float32)
    tail = np.zeros(rate * 60, np.float32)
    path = folder / "caller.wav"
    write_wav(path, float_to_pcm16(np.concatenate([silence, audio, tail])), rate)
    return path, clip.text


@dataclass
class Browser:
    chromium: PlaywrightBrowser
    said: str  # what the fake microphone says


@pytest.fixture(scope="module")
def browser(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """Headless Chromium whose microphone plays a real speech clip once (``%noloop``)."""
    wav, said = speech_wav(tmp_path_factory.mktemp("browser"))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium),
            headless=True,
            args=[
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}%noloop",
                "--autoplay-policy=no-user-gesture-required",
                *NO_NETWORK,
            ],
        )
        try:
            yield Browser(launched, said)
        finally:
            launched.close()


def open_page(
    browser: Browser, server: RunningServer, problems: list[str], origin: str | None = None
) -> Page:
    """A page that may reach only the server (at ``origin`` when it is reached through a
    proxy), and reports its errors into ``problems``."""
    allowed = origin or server.http

    def only_loopback(route: Route) -> None:
        if route.request.url.startswith(allowed):
            route.continue_()
        else:
            problems.append(f"request off loopback: {route.request.url}")
            route.abort()

    page = browser.chromium.new_page()
    page.route("**/*", only_loopback)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
    )
    return page


def _normalise(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


def test_a_spoken_turn_in_the_browser(
    server: RunningServer, browser: Browser, tmp_path: Path
) -> None:
    sockets: list[str] = []
    sent: list[str | bytes] = []
    problems: list[str] = []

    def on_socket(ws: WebSocket) -> None:
        sockets.append(ws.url)
        ws.on("framesent", lambda payload: sent.append(payload))

    page = open_page(browser, server, problems)
    try:
        page.on("websocket", on_socket)
        page.goto(f"{server.http}/?token={TOKEN}")
        page.click("#start")
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'live'", timeout=30_000
        )
        # The caller's words, then the agent's reply as heard, then its turn's chart.
        page.wait_for_function(
            "document.querySelector('#transcript .caller')?.textContent.trim().length > 0",
            timeout=REPLY_TIMEOUT_MS,
        )
        page.wait_for_function(
            "document.querySelector('#transcript .agent[data-status]')"
            "?.textContent.trim().length > 0",
            timeout=REPLY_TIMEOUT_MS,
        )
        page.wait_for_selector("#charts svg rect.bar", timeout=30_000)
        # The reply played through the worklet and the server was told, frame by frame.
        page.wait_for_function(
            "Number(document.querySelector('#counters').dataset.played) > 0 && "
            "Number(document.querySelector('#counters').dataset.acksSent) > 0 && "
            "Number(document.querySelector('#counters').dataset.queuedMs) === 0",
            timeout=60_000,
        )
        caller = page.inner_text("#transcript .caller")
        agent = page.inner_text("#transcript .agent")
        status = page.get_attribute("#transcript .agent", "data-status")
        widths = page.eval_on_selector_all(
            "#charts svg rect.bar", "rects => rects.map(r => r.width.baseVal.value)"
        )
        v2v: dict[str, Any] = page.eval_on_selector("#v2v", "e => ({...e.dataset})")
        counters: dict[str, Any] = page.eval_on_selector("#counters", "e => ({...e.dataset})")
        shot = tmp_path / "browser.png"
        page.screenshot(path=str(shot), full_page=True)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(shot, ARTIFACTS / "browser.png")
        page.click("#start")  # hang up
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'ended'", timeout=10_000
        )
    finally:
        page.close()

    assert problems == []
    # The page connected to the native endpoint next to it, carrying its token on, and the
    # session id it chose (128 random bits), which a load balancer routes the call on.
    assert len(sockets) == 1, sockets
    assert sockets[0].startswith(server.ws + f"?token={TOKEN}&session_id="), sockets

    # What the page sent: session.start first, then 20 ms PCM16 frames at the declared rate.
    texts = [json.loads(m) for m in sent if isinstance(m, str)]
    start = texts[0]
    assert start["type"] == "session.start"
    assert start["session_id"] == sockets[0].split("session_id=")[1] and "resume" not in start
    rate = start["input_sample_rate"]
    assert 8000 <= rate <= 48000
    frames = [m for m in sent if isinstance(m, bytes)]
    assert {len(f) for f in frames} == {2 * round(rate * 0.02)}
    assert len(frames) * 0.02 > 3.0, "the clip was not all sent"
    acks = [t["seq"] for t in texts if t["type"] == "playback.ack"]
    assert acks and acks == sorted(acks) and len(set(acks)) == len(acks)
    assert texts[-1] == {"type": "session.end"}

    said = browser.said
    wer = jiwer.wer(_normalise(said), _normalise(caller))
    assert wer <= 0.35, f"WER {wer:.2f}: the page showed {caller!r} for {said!r}"
    assert status == "completed" and agent.strip()
    assert widths and all(w > 0 for w in widths), widths
    assert float(v2v["p50"]) > 0 and float(v2v["p99"]) >= float(v2v["p50"])
    # Every reply frame received was played, none dropped, and the last one acked.
    assert int(counters["played"]) == int(counters["framesReceived"]) > 10, counters
    assert int(counters["dropped"]) == 0, counters
    assert acks[-1] == int(counters["lastSeq"]), (acks, counters)


def test_the_player_plays_back_to_back_and_flushes_at_once(
    server: RunningServer, browser: Browser
) -> None:
    """Barge-in on the page: playback.clear drops every buffered frame in the same render
    quantum, and the next reply plays at once after it."""
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        page.goto(server.http)
        result: dict[str, Any] = page.evaluate(PLAYER_PROBE)
    finally:
        page.close()
    assert problems == []
    before, after, resumed = result["before"], result["after"], result["resumed"]
    assert before["played"] >= 5 and before["underruns"] == 0, before
    assert before["queuedMs"] > 500, before  # most of the 2 s still queued
    assert after["queuedMs"] == 0 and after["played"] < 80, after  # all of it gone at once
    assert after["played"] + after["cleared"] == 100, after  # each frame played or dropped
    assert resumed["lastSeq"] == 105 and resumed["queuedMs"] == 0, resumed  # turn 2 plays
    acks = result["acks"]
    assert acks == sorted(set(acks)) and acks[-1] == 105, acks


# Runs in the page: 2 s of reply frames, clear once a few have played, then a second reply.
# It waits on the player's reports, not on fixed sleeps: the machine's load varies.
PLAYER_PROBE = """async () => {
  const { openAudio } = await import("/web/audio.js");
  const { Player } = await import("/web/player.js");
  const context = await openAudio();
  const acks = [];
  const player = new Player(context, (seq) => acks.push(seq));
  const n = Math.round(context.sampleRate * 0.02);
  const frame = (seq, turnId) => ({ seq, turnId, pcm: new Int16Array(n).fill(1000) });
  const until = async (probe) => {
    const deadline = performance.now() + 10000;
    while (!probe() && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    return { ...player.stats };
  };
  // Queue the whole reply with the clock stopped, as the server's lead would have it, so a
  // busy page thread posting frames late cannot pass for a gap in playback.
  await context.suspend();
  for (let seq = 1; seq <= 100; seq++) player.push(frame(seq, 1));
  player.report();
  await until(() => player.stats.queuedMs >= 1999);
  await context.resume();
  const before = await until(() => player.stats.played >= 5);
  player.clear();
  const after = await until(() => player.stats.cleared > 0);
  for (let seq = 101; seq <= 105; seq++) player.push(frame(seq, 2));
  const resumed = await until(() => player.stats.lastSeq === 105);
  await context.close();
  return { before, after, resumed, acks };
}"""


def test_page_helpers(server: RunningServer, browser: Browser) -> None:
    """The page's pure functions, in the browser that runs them."""
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        page.goto(server.http)
        result: dict[str, Any] = page.evaluate(HELPERS_PROBE)
    finally:
        page.close()
    assert problems == []
    assert result["url"] == "wss://example.test/app/v1/voice?token=a+b%26c"
    assert result["plainUrl"] == "ws://127.0.0.1:8765/v1/voice"
    assert result["frame"] == {"seq": 258, "turnId": 3, "pcm": [1, -2]}
    assert result["p"] == [50, 99, 100, None, 7]
    # A preempted turn: STT ran from 220 ms (its measured time), before the end of turn.
    assert result["stt"] == ["stt", "stt", 220, 700]
    assert [s[0] for s in result["segments"]][:2] == ["end of turn", "stt"]


HELPERS_PROBE = """async () => {
  const { voiceUrl, decodeAudioFrame } = await import("/web/protocol.js");
  const { percentile, segments } = await import("/web/waterfall.js");
  const buffer = new ArrayBuffer(12);
  const view = new DataView(buffer);
  view.setUint32(0, 258, true); view.setUint32(4, 3, true);
  view.setInt16(8, 1, true); view.setInt16(10, -2, true);
  const f = decodeAudioFrame(buffer);
  const values = Array.from({ length: 100 }, (_, i) => i + 1);
  const metrics = { stages_ms: { speech_end: 0, eot: 500, stt_done: 700, llm_request: 701 },
                    compute_ms: { stt: 470 }, queue_ms: { stt: 10 } };
  const bars = segments(metrics);
  return {
    url: voiceUrl("https://example.test/app/?token=a b%26c&x=1"),
    plainUrl: voiceUrl("http://127.0.0.1:8765/"),
    frame: { seq: f.seq, turnId: f.turnId, pcm: Array.from(f.pcm) },
    p: [percentile(values, 50), percentile(values, 99), percentile(values, 100),
        percentile([], 50), percentile([7], 99)],
    stt: bars.find((b) => b[0] === "stt"),
    segments: bars,
  };
}"""


class CuttableLine:
    """The network path between the page and the server, as a TCP proxy the test can cut the
    way a network fails: both ends get a reset (no close frame, no ``session.end``), and for
    ``down_s`` after a cut every new connection is reset too. ``close`` leaves nothing
    listening on the page's port, as a stopped server does."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.down = False
        self.cuts = 0
        self._links: list[asyncio.StreamWriter] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # closed now, with linger 0: the peer gets an RST

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            self._reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            self._reset(writer)
            return
        self._links += [writer, up_writer]
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            if not writer.is_closing():
                writer.close()

    def cut(self, down_s: float) -> None:
        async def cut() -> None:
            self.down = True
            self.cuts += 1
            for writer in self._links:
                self._reset(writer)
            self._links.clear()
            self._loop.call_later(down_s, setattr, self, "down", False)

        self._call(cut())

    def close(self) -> None:
        async def close() -> None:
            self._server.close()
            for writer in self._links:
                self._reset(writer)
            self._links.clear()

        if self._loop.is_running():
            self._call(close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


@pytest.fixture
def line(server: RunningServer) -> Iterator[CuttableLine]:
    proxy = CuttableLine(server.port)
    try:
        yield proxy
    finally:
        proxy.close()


def unexpected(problems: list[str]) -> list[str]:
    """Problems other than the browser logging a connection that failed: the page's own
    errors and requests off loopback remain."""
    network = ("WebSocket connection to", "net::ERR_", "Failed to load resource")
    return [p for p in problems if not (p.startswith("console: ") and any(n in p for n in network))]


# Every text the status line shows, in order (the reconnecting one may last a second).
WATCH_STATUS = """() => {
  const status = document.querySelector('#status');
  window.statusSeen = [status.textContent];
  new MutationObserver(() => window.statusSeen.push(status.textContent))
    .observe(status, { childList: true, characterData: true, subtree: true });
}"""


@dataclass
class SocketLog:
    url: str
    sent: list[str | bytes]
    received: list[str | bytes]


def test_the_page_reconnects_when_the_line_drops_mid_turn(
    server: RunningServer, browser: Browser, line: CuttableLine, tmp_path: Path
) -> None:
    """The line drops while the caller is speaking: the page says so, reconnects with the
    same session and its resume position, resends the words the server missed, and the
    call goes on: the whole sentence is heard and answered, and the reply plays."""
    sockets: list[SocketLog] = []
    problems: list[str] = []

    def on_socket(ws: WebSocket) -> None:
        log = SocketLog(ws.url, [], [])
        sockets.append(log)
        ws.on("framesent", lambda payload: log.sent.append(payload))
        ws.on("framereceived", lambda payload: log.received.append(payload))

    ARTIFACTS.mkdir(exist_ok=True)
    page = open_page(browser, server, problems, origin=line.http)
    try:
        page.on("websocket", on_socket)
        page.goto(f"{line.http}/?token={TOKEN}")
        page.evaluate(WATCH_STATUS)
        page.click("#start")
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'live'", timeout=30_000
        )
        # The caller has started the sentence: the line drops in the middle of it.
        page.wait_for_function(
            "!document.querySelector('#listening').hidden", timeout=REPLY_TIMEOUT_MS
        )
        line.cut(down_s=1.0)
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'reconnecting'",
            timeout=10_000,
        )
        page.screenshot(path=str(ARTIFACTS / "browser-reconnecting.png"), full_page=True)
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'live'", timeout=30_000
        )
        # The call goes on: the caller's words, the agent's reply, played to the end.
        page.wait_for_function(
            "document.querySelector('#transcript .agent[data-status]')"
            "?.textContent.trim().length > 0",
            timeout=REPLY_TIMEOUT_MS,
        )
        page.wait_for_function(
            "Number(document.querySelector('#counters').dataset.played) > 0 && "
            "Number(document.querySelector('#counters').dataset.queuedMs) === 0",
            timeout=60_000,
        )
        caller = page.inner_text("#transcript .caller")
        status = page.get_attribute("#transcript .agent", "data-status")
        seen: list[str] = page.evaluate("window.statusSeen")
        counters: dict[str, Any] = page.eval_on_selector("#counters", "e => ({...e.dataset})")
        page.screenshot(path=str(ARTIFACTS / "browser-reconnected.png"), full_page=True)
        page.click("#start")  # hang up
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'ended'", timeout=10_000
        )
    finally:
        page.close()

    assert unexpected(problems) == []
    assert line.cuts == 1
    # The page said what happened, in plain words and in order.
    lost = next(i for i, t in enumerate(seen) if t.startswith("Connection lost, reconnecting"))
    back = next(i for i, t in enumerate(seen) if t.startswith("Reconnected"))
    assert 0 < lost < back, seen
    # Every connection carried the page's token and the call's one session id; refused
    # attempts while the line was down may come between the first and the last.
    first, last = sockets[0], sockets[-1]
    session_id = first.url.split("session_id=")[1]
    assert len(session_id) == 32
    assert all(
        s.url == f"{line.http.replace('http', 'ws')}/v1/voice?token={TOKEN}&session_id={session_id}"
        for s in sockets
    ), [s.url for s in sockets]
    texts = [json.loads(m) for m in first.sent if isinstance(m, str)]
    assert texts[0]["type"] == "session.start" and "resume" not in texts[0]
    got = [json.loads(m) for m in first.received if isinstance(m, str)]
    last_event_id = max(e.get("event_id", 0) for e in got)
    last_seq = max(
        (struct.unpack_from("<I", m)[0] for m in first.received if isinstance(m, bytes)), default=0
    )
    # The last connection resumed where the first left off, and the server took it back.
    start = json.loads(next(m for m in last.sent if isinstance(m, str)))
    assert start["session_id"] == session_id
    assert start["resume"] == {"last_event_id": last_event_id, "last_audio_seq": last_seq}
    started = json.loads(next(m for m in last.received if isinstance(m, str)))
    assert started["type"] == "session.started" and started["resumed"] is True, started
    assert started["input_samples"] > 0
    # The words said while the line was down were resent, ahead of the live audio: the
    # server heard the whole sentence.
    assert int(counters["reconnects"]) == 1 and int(counters["resentFrames"]) > 0, counters
    assert int(counters["audioLostMs"]) == 0, counters
    wer = jiwer.wer(_normalise(browser.said), _normalise(caller))
    assert wer <= 0.35, f"WER {wer:.2f}: the page showed {caller!r} for {browser.said!r}"
    assert status == "completed"
    assert int(counters["played"]) == int(counters["framesReceived"]) > 10, counters
    assert int(counters["duplicates"]) == 0, counters
    assert tracebacks(server.log_path.read_text()) == []


def test_start_with_no_server_says_the_server_is_unreachable(
    server: RunningServer, browser: Browser, line: CuttableLine
) -> None:
    """The page is open, the server is gone (nothing listens on its port), the caller
    presses Start: the page says the server is unreachable, not that a worklet failed."""
    problems: list[str] = []
    page = open_page(browser, server, problems, origin=line.http)
    try:
        page.goto(line.http)
        line.close()
        page.click("#start")
        page.wait_for_function(
            "document.querySelector('#status').dataset.state === 'error'", timeout=30_000
        )
        text = page.inner_text("#status")
        button = page.inner_text("#start")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser-unreachable.png"), full_page=True)
    finally:
        page.close()
    assert unexpected(problems) == []
    assert "server unreachable" in text.lower(), text
    assert f"127.0.0.1:{line.port}" in text and "worklet" not in text.lower(), text
    assert button == "Start"


def test_reconnect_helpers(server: RunningServer, browser: Browser) -> None:
    """resume.js's pure parts: the resend log's offsets, the backoff, and the plain words."""
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        page.goto(server.http)
        result: dict[str, Any] = page.evaluate(RESUME_PROBE)
    finally:
        page.close()
    assert problems == []
    assert result["url"] == "ws://127.0.0.1:8765/v1/voice?token=t&session_id=abc"
    # A server with 50 samples gets the rest: the frame it has in part comes cut.
    assert result["cut"] == [[10, 3], [20, 4], [20, 5]]
    # Past the bound the oldest audio goes; a server missing it gets what is left, and the
    # offsets move back to match the server's count.
    assert result["gap"] == {"frames": 5, "first": 4, "lost": 40, "offset": 20, "end": 120}
    assert result["backoff"] == [0, 250, 500, 1000, 2000, 4000, 4000, 4000]
    assert result["jitter"] == [375, 625]
    closes = result["closes"]
    assert closes["4003"] == "This call continued in another tab or window."
    assert "maximum length" in closes["4001"] and "silence" in closes["4000"]
    assert "reload the page" in closes["1008"] and "busy" in closes["1013"]
    assert closes["4999"] == "The call ended (close 4999: bye)."
    verdicts = result["verdicts"]
    assert (
        verdicts["1008"]
        == verdicts["unauthorized"]
        == ("Session expired: reload the page to call again.")
    )
    assert verdicts["1006"] is None and verdicts["server_not_ready"] is None  # try again
    assert verdicts["resume_failed"] == verdicts["session_not_found"]
    assert "press Start for a new call" in verdicts["resume_failed"]
    assert result["refused"].startswith("Not authorized (token expired)")
    # A line that stops answering pings is given up (its close says "dropped", not "hung
    # up") and the call reconnects.
    heartbeat = result["heartbeat"]
    assert heartbeat["calls"] == ["ping", "ping", "ping", "abandon", "reconnect"], heartbeat
    assert heartbeat["live"] is False and heartbeat["lastEventId"] == 7
    chosen, given = result["ids"]
    assert len(chosen) == 32 and int(chosen, 16) >= 0 and given == "mine"


RESUME_PROBE = """async () => {
  const quiet = { onEvent() {}, onAudio() {}, onState() {} };
  // A line that stops answering: pinged, answered once, then silent past the dead bound.
  const heartbeat = (r) => {
    const link = new r.ResumingConnection("http://127.0.0.1:8765/", quiet);
    const calls = [];
    link.connection = { send: (e) => calls.push(e.type), abandon: () => calls.push("abandon"),
                        close() {} };
    link.live = true;
    link.state = "live";
    link.reconnect = () => calls.push("reconnect");
    link.checkLine();
    link.onEvent(link.connection, { type: "pong", event_id: 7 });
    link.checkLine();
    link.checkLine();  // still within the bound: waits
    link.awaiting -= 16000;
    link.checkLine();
    link.close();
    return { calls, live: link.live, lastEventId: link.lastEventId };
  };
  const r = await import("/web/resume.js");
  const { voiceUrl, OpenFailed } = await import("/web/protocol.js");
  const frame = (n, value) => new Int16Array(n).fill(value).buffer;
  const samples = (buffer) => { const a = new Int16Array(buffer); return [a.length, a[0]]; };
  const log = new r.ResendLog(100);
  for (let i = 1; i <= 5; i++) log.add(frame(20, i));
  const cut = log.since(50).map(samples);
  for (let i = 6; i <= 8; i++) log.add(frame(20, i));
  const again = log.since(20);
  const error = (code, message = "x") => new OpenFailed(message, 0, { code, message });
  return {
    url: voiceUrl("http://127.0.0.1:8765/?token=t", "abc"),
    cut,
    gap: { frames: again.length, first: samples(again[0])[1], lost: log.lostSamples,
           offset: log.frames[0].offset, end: log.end },
    backoff: [1, 2, 3, 4, 5, 6, 7, 8].map((a) => r.backoffMs(a, () => 0.5)),
    jitter: [r.backoffMs(3, () => 0), r.backoffMs(3, () => 1)],
    closes: Object.fromEntries(
      [1008, 1013, 4000, 4001, 4003].map((c) => [c, r.closeMessage(c, null)])
        .concat([[4999, r.closeMessage(4999, { code: "x", message: "bye" })]])),
    verdicts: {
      1008: r.reconnectVerdict(new OpenFailed("closed", 1008, null)),
      1006: r.reconnectVerdict(new OpenFailed("closed", 1006, null)),
      unauthorized: r.reconnectVerdict(error("unauthorized")),
      server_not_ready: r.reconnectVerdict(error("server_not_ready")),
      resume_failed: r.reconnectVerdict(error("resume_failed")),
      session_not_found: r.reconnectVerdict(error("session_not_found")),
    },
    refused: r.refusalMessage({ code: "unauthorized", message: "token expired" }),
    heartbeat: heartbeat(r),
    ids: [new r.ResumingConnection("http://127.0.0.1:8765/", quiet).sessionId,
          new r.ResumingConnection("http://127.0.0.1:8765/?session_id=mine", quiet).sessionId],
  };
}"""
