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
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest

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


def _normalise(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


def test_a_spoken_turn_in_the_browser(
    server: RunningServer, chromium: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import Route, WebSocket, sync_playwright

    wav, said = speech_wav(tmp_path)
    sockets: list[str] = []
    sent: list[str | bytes] = []
    problems: list[str] = []

    def on_socket(ws: WebSocket) -> None:
        sockets.append(ws.url)
        ws.on("framesent", lambda payload: sent.append(payload))

    def only_loopback(route: Route) -> None:
        if route.request.url.startswith(server.http):
            route.continue_()
        else:
            problems.append(f"request off loopback: {route.request.url}")
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
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
            page = browser.new_page()
            page.route("**/*", only_loopback)
            page.on("websocket", on_socket)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on(
                "console",
                lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
            )
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
                "Number(document.querySelector('#counters').dataset.acksSent) > 0",
                timeout=30_000,
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
            browser.close()

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

    wer = jiwer.wer(_normalise(said), _normalise(caller))
    assert wer <= 0.35, f"WER {wer:.2f}: the page showed {caller!r} for {said!r}"
    assert status == "completed" and agent.strip()
    assert widths and all(w > 0 for w in widths), widths
    assert float(v2v["p50"]) > 0 and float(v2v["p99"]) >= float(v2v["p50"])
    assert int(counters["played"]) > 10, counters  # over 200 ms of the reply played
    assert int(counters["underruns"]) >= 0
