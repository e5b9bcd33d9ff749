"""The browser page end to end: headless Chromium hears a real speech clip through its fake
microphone, streams it to the real server, plays the reply, and shows both transcripts and
the latency waterfall.

Chromium's fake capture device plays a WAV file as the microphone; the page is driven by
Playwright on Debian's /usr/bin/chromium (never a downloaded browser), with no network but
the server on loopback.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest
from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import Page, Route, WebSocket, sync_playwright

from tests.support import RunningServer, librivox_clips
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


def open_page(browser: Browser, server: RunningServer, problems: list[str]) -> Page:
    """A page that may reach only the server, and reports its errors into ``problems``."""

    def only_loopback(route: Route) -> None:
        if route.request.url.startswith(server.http):
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
    # The page connected to the native endpoint next to it, carrying its token on.
    assert sockets == [server.ws + f"?token={TOKEN}"]

    # What the page sent: session.start first, then 20 ms PCM16 frames at the declared rate.
    texts = [json.loads(m) for m in sent if isinstance(m, str)]
    start = texts[0]
    assert start["type"] == "session.start"
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
  for (let seq = 1; seq <= 100; seq++) player.push(frame(seq, 1));
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
