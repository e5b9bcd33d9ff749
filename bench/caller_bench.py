"""``python -m bench caller``: what a caller hears, over Twilio and the native protocol.

A fresh server with a one-line restaurant-assistant prompt, the LLM at
temperature 0 and 60 tokens at most. Calls alternate between the transports
(Twilio Media Streams: μ-law 8 kHz in 20 ms frames at real-time pace; the
native protocol: PCM16). Each call is a conversation of real recorded speech,
long read sentences (LibriVox) and short answers (card names, the alsa-utils
voice samples) in turn, said by a :class:`~bench.person.Person`: it
listens to an answer to the end and then speaks, but talks into any 1.5 s of
silence, as people do, so an answer that comes late is talked over.

Everything is measured at the client: when the frame holding the caller's last
loud sample left it, and when each reply frame arrived. The server's turn log,
followed as it grows, says which frames are the filler ("One moment.") and
which the answer (:mod:`bench.caller_turns`). After the calls the
server stops and the bench loads the same engines itself, warms them and runs
each alone on the same inputs: the isolated floor beside each stage's
in-server compute. Report: :mod:`bench.caller_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.caller_report import render_markdown, summarize_all
from bench.caller_turns import (
    ReplyFrame,
    Sentence,
    answer_start,
    estimated_speech_end_ns,
    filler_frames_of,
    heard_turn,
    sentence_turns,
)
from bench.first_call import first_call_summary, render_first_call
from bench.person import Person, Speak, Why
from bench.tracing_cost import OtlpSink, render_tracing, traced, tracing_summary
from bench.transport_callers import NativeCaller, TwilioCaller, voiced
from voxpipe.audio.pcm import read_wav, ulaw_decode
from voxpipe.clients.native_client import speech_end_sample, speech_start_sample
from voxpipe.config import Config

PROMPT = (
    "You are the phone assistant of Bella Napoli, an Italian restaurant; answer every caller "
    "in one short sentence."
)
LLM_SETTINGS = {"system_prompt": PROMPT, "temperature": 0.0, "max_tokens": 60}
SPEECH = Path("/usr/share/pocketsphinx/test/data")
ALSA = Path("/usr/share/sounds/alsa")
TRANSPORTS = ("twilio", "native")
TICK_S = 0.01  # how often the caller's ear is checked
LOG_POLL_S = 0.05  # how often the turn log is read
SAY_TIMEOUT_S = 60.0
TURN_TIMEOUT_S = 90.0  # the longest the caller listens to one reply
OPEN_TIMEOUT_S = 60.0


# -- the conversation -----------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray
    rate: int
    start_s: float  # its first loud 20 ms frame
    end_s: float  # after its last loud 20 ms frame: where the caller's speech ends


def speech_clips() -> tuple[list[Clip], list[Clip]]:
    """Long read sentences and short answers of the Debian test data (``make sysdeps``)."""
    long_paths = sorted((SPEECH / "librivox").glob("*.wav"))
    short_paths = sorted((SPEECH / "cards").glob("*.wav")) + sorted(
        p for p in ALSA.glob("*.wav") if p.name != "Noise.wav"
    )
    if not long_paths or not short_paths:
        raise SystemExit(f"missing speech clips in {SPEECH}: install pocketsphinx-testdata")

    def clip(path: Path) -> Clip:
        audio, rate = read_wav(path)
        start, end = speech_start_sample(audio, rate), speech_end_sample(audio, rate)
        return Clip(path.name, audio, rate, start / rate, end / rate)

    return [clip(p) for p in long_paths], [clip(p) for p in short_paths]


def conversation(long: Sequence[Clip], short: Sequence[Clip], turns: int, call: int) -> list[Clip]:
    """``turns`` sentences, long and short in turn; each call starts elsewhere in the lists."""
    return [
        long[(i // 2 + call) % len(long)] if i % 2 == 0 else short[(i // 2 + 3 * call) % len(short)]
        for i in range(turns)
    ]


# -- the server's turn log, followed --------------------------------------------------------


class TurnLogFollower:
    """The turn log as the server appends to it, each record stamped with when it was first
    seen (the server writes it at the turn's ``response_done``). Holds the records of this
    run's calls only: a few hundred small dicts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self._offset = 0
        self._partial = b""
        self._lock = threading.Lock()  # polled from worker threads, maybe two at once

    def poll(self) -> None:
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        now = time.monotonic_ns()
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("turn_id", 0) > 0:
                self.seen.setdefault(record.get("session_id", ""), []).append((now, record))

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.poll)
            await asyncio.sleep(LOG_POLL_S)

    def done_after(self, session_id: str, start_ns: int, end_ns: int) -> bool:
        """Whether the server has finished a turn on the sentence said from ``start_ns`` to
        ``end_ns``: a record of speech that ended after the sentence began, seen after it
        ended (a first half the server answered while the caller went on does not count)."""
        for seen_ns, record in self.seen.get(session_id, []):
            end = estimated_speech_end_ns(seen_ns, record)
            if end is not None and end >= start_ns and seen_ns > end_ns:
                return True
        return False


# -- one transport's line, as the person's ear and mouth -------------------------------------


class Line:
    """A transport's caller plus what the person needs from it: when its speaker will have
    played everything received, whether new reply audio came, and afterwards every reply
    frame with its arrival."""

    def __init__(self, transport: str, port: int, instructions: str | None) -> None:
        ws = f"ws://127.0.0.1:{port}"
        self.transport = transport
        self.caller: NativeCaller | TwilioCaller
        if transport == "native":
            self.caller = NativeCaller(ws, instructions)
        elif transport == "twilio":
            self.caller = TwilioCaller(ws, instructions)
        else:
            raise ValueError(f"bench caller speaks {', '.join(TRANSPORTS)}, not {transport!r}")

    @property
    def session_id(self) -> str:
        return self.caller.session_id

    async def open(self) -> None:
        await self.caller.open()

    async def say(self, clip: Clip) -> tuple[int, int]:
        """Say ``clip``; return once its last loud frame has left: (first, last) loud frame
        left, monotonic ns."""
        start, end = await self.caller.say(clip.audio, clip.rate, [clip.start_s, clip.end_s])
        return start, end

    def audio_mark(self) -> object:
        """Changes whenever reply audio arrives."""
        if isinstance(self.caller, TwilioCaller):
            return self.caller.line.received_s
        chunks = self.caller.client.chunks
        return (len(chunks), chunks[-1][0] if chunks else 0)

    def playing_until_ns(self, now_ns: int) -> int:
        if isinstance(self.caller, TwilioCaller):
            buffered = self.caller.line.buffered_s
        else:
            buffered = self.caller.client.playback.buffered_s
        return now_ns + round(buffered * 1e9)

    def frames(self) -> list[ReplyFrame]:
        if isinstance(self.caller, TwilioCaller):
            rate = TwilioCaller.rate
            media = self.caller.line.of("media")
            pcm = [(round(r.at * 1e9), ulaw_decode(base64.b64decode(r.message["media"]["payload"])))
                   for r in media]  # fmt: skip
        else:
            rate = self.caller.client.output_rate
            pcm = list(self.caller.client.chunks)
        return [ReplyFrame(at, round(len(p) / 2 / rate * 1e9), voiced(p, rate)) for at, p in pcm]

    async def close(self) -> None:
        await self.caller.close()


# -- one call ---------------------------------------------------------------------------


@dataclass
class CallLog:
    transport: str
    call: int
    session_id: str
    sentences: list[Sentence]
    frames: list[ReplyFrame]
    seen: list[tuple[int, dict[str, Any]]]
    start: int = 0  # which fresh server (``--starts``)
    order: int = 0  # the call's place in that server's life: 0 is its first call
    conversation: int = 0  # which sentences (:func:`conversation`)


def timeline_json(log: CallLog) -> dict[str, Any]:
    """One call as recorded, for analysing it again or turning it into a test: the
    sentences, the server's records with when each was seen, and every reply frame."""
    return {
        "transport": log.transport,
        "call": log.call,
        "session_id": log.session_id,
        "start": log.start,
        "order": log.order,
        "conversation": log.conversation,
        "sentences": [dataclasses.asdict(s) for s in log.sentences],
        "records": [[seen_ns, record] for seen_ns, record in log.seen],
        "frames": {
            "at_ns": [f.at_ns for f in log.frames],
            "duration_ns": [f.duration_ns for f in log.frames],
            "voiced": [int(f.voiced) for f in log.frames],
        },
    }


def call_log_from_json(data: dict[str, Any]) -> CallLog:
    """A call saved by :func:`timeline_json`."""
    frames = data["frames"]
    return CallLog(
        data["transport"],
        data["call"],
        data["session_id"],
        [Sentence(**s) for s in data["sentences"]],
        [
            ReplyFrame(at, duration, bool(v))
            for at, duration, v in zip(
                frames["at_ns"], frames["duration_ns"], frames["voiced"], strict=True
            )
        ],
        [(seen_ns, record) for seen_ns, record in data["records"]],
        data.get("start", 0),
        data.get("order", data["call"]),
        data.get("conversation", data["call"]),
    )


async def _listen(
    line: Line, person: Person, follower: TurnLogFollower, start_ns: int, end_ns: int, last: bool
) -> Speak | None:
    """Until the person speaks again; after the last sentence, until its answer has played
    out (None). Bounded: a reply still playing after :data:`TURN_TIMEOUT_S` is talked over."""
    mark = line.audio_mark()
    deadline = time.monotonic() + TURN_TIMEOUT_S
    while True:
        now = time.monotonic_ns()
        new_mark = line.audio_mark()
        person.hear(now, line.playing_until_ns(now), new_mark != mark)
        mark = new_mark
        done = follower.done_after(line.session_id, start_ns, end_ns)
        if done:
            person.reply_done()
        speak = person.due(now)
        if time.monotonic() > deadline:
            return None if last else Speak(now, Why.QUIET, True)
        if speak is not None and not last:
            return speak
        if last and speak is not None and (done or speak.why is Why.ANSWERED):
            return None
        await asyncio.sleep(TICK_S)


async def hold_call(
    line: Line, clips: Sequence[Clip], follower: TurnLogFollower, call: int, person: Person
) -> CallLog:
    await asyncio.wait_for(line.open(), OPEN_TIMEOUT_S)
    said: list[tuple[Clip, int, int, Speak | None]] = []
    try:
        for index, clip in enumerate(clips):
            person.speaking()
            start_ns, end_ns = await asyncio.wait_for(line.say(clip), SAY_TIMEOUT_S)
            person.spoke(end_ns)
            last = index == len(clips) - 1
            speak = await _listen(line, person, follower, start_ns, end_ns, last)
            said.append((clip, start_ns, end_ns, speak))
            why = "-" if speak is None else speak.why.value
            print(f"  {line.transport:<7} call {call + 1} sentence {index + 1:>2} {clip.name:<45} "
                  f"then: {why}", flush=True)  # fmt: skip
        await asyncio.sleep(0.5)  # the last record, if it is still on its way
        await asyncio.to_thread(follower.poll)
    finally:
        await line.close()
    sentences = [
        Sentence(
            index=i,
            clip=clip.name,
            start_ns=start,
            end_ns=end,
            why_next=None if speak is None else speak.why.value,
            next_start_ns=said[i + 1][1] if i + 1 < len(said) else None,
            next_decided_ns=None if speak is None else speak.at_ns,
        )
        for i, (clip, start, end, speak) in enumerate(said)
    ]
    seen = list(follower.seen.get(line.session_id, []))
    return CallLog(line.transport, call, line.session_id, sentences, line.frames(), seen)


async def hold_calls(
    port: int,
    turn_log: Path,
    transports: Sequence[str],
    calls: int,
    turns: int,
    gap_ms: int,
    pause_ms: int,
    start: int = 0,
) -> tuple[list[CallLog], list[dict[str, Any]]]:
    """Every transport's calls, interleaved (the order alternating per round), one at a time;
    the ``start``-th fresh server's call ``c`` says conversation ``start + c``."""
    long, short = speech_clips()
    follower = TurnLogFollower(turn_log)
    reader = asyncio.create_task(follower.run(), name="turn-log")
    logs: list[CallLog] = []
    failures: list[dict[str, Any]] = []
    try:
        for call in range(calls):
            order = transports if call % 2 == 0 else list(reversed(transports))
            for transport in order:
                clips = conversation(long, short, turns, start + call)
                line = Line(transport, port, PROMPT)
                place = len(logs) + len(failures)
                try:
                    log = await hold_call(line, clips, follower, call, Person(gap_ms, pause_ms))
                    logs.append(
                        dataclasses.replace(
                            log, start=start, order=place, conversation=start + call
                        )
                    )
                except Exception as exc:  # one failed call is reported, the bench goes on
                    print(f"  {transport} call {call + 1} failed: {exc!r}", flush=True)
                    failures.append({"transport": transport, "call": call, "error": repr(exc)})
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return logs, failures


# -- from the calls to rows ------------------------------------------------------------------


def turn_rows(logs: Sequence[CallLog]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per sentence said, and how the filler was told from the answer per transport."""
    prepared = sentence_turns(logs)
    split: dict[str, Any] = {}
    for transport in dict.fromkeys(log.transport for log in logs):
        mine = [(f, g[-1]) for log, _, f, g in prepared if log.transport == transport and g]
        count = filler_frames_of(mine)
        fillers = [(f, r["stages_ms"]) for f, r in mine if "filler_sent" in r.get("stages_ms", {})]
        agree = sum(
            count is not None
            and (by_time := answer_start(f, s["filler_sent"], s.get("first_audio_sent")))
            is not None
            and abs(by_time - count) <= 1
            for f, s in fillers
        )
        split[transport] = {
            "filler_frames": count,
            "method": "count" if count is not None else "time",
            "filler_turns": len(fillers),
            "time_agrees_with_count": agree if count is not None else None,
        }
    rows = []
    for log, sentence, frames, records in prepared:
        row = heard_turn(sentence, frames, records, split[log.transport]["filler_frames"])
        record = records[-1] if records else {}
        row.update(
            transport=log.transport,
            call=log.call,
            start=log.start,
            order=log.order,
            conversation=log.conversation,
            session_id=log.session_id,
            server={
                "stages_ms": record.get("stages_ms", {}),
                "compute_ms": record.get("compute_ms", {}),
                "queue_ms": record.get("queue_ms", {}),
                "prefill_tokens": record.get("llm", {}).get("prefill_tokens"),
                "first_clause": record.get("first_clause"),
                "first_clause_tokens": record.get("first_clause_tokens"),
                "preempted": record.get("preempted"),
                "split_ms": record.get("split_ms", {}),
            },
        )
        rows.append(row)
    return rows, split


# -- the isolated floor ----------------------------------------------------------------------


def heard_utterance(vad: Any, config: Config, audio16: np.ndarray) -> np.ndarray:
    """The audio the server's STT gets for a clip: run through the same VAD and turn
    detector, with line silence around it; the last turn it makes (a sentence with a long
    pause is two turns, and the sentence's answer is the last one's)."""
    from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind

    window = vad.window_samples
    lead = np.zeros(window * round(16000 / window), np.float32)
    tail = np.zeros(round((config.turn.silence_ms / 1000 + 1.0) * 16000), np.float32)
    audio = np.concatenate([lead, audio16.astype(np.float32, copy=False), tail])
    detector = TurnDetector(config.turn, window)
    found = audio16
    for i, prob in enumerate(vad.new_stream().process(audio)):
        event = detector.push(audio[i * window : (i + 1) * window], prob)
        if event is not None and event.kind is TurnEventKind.SPEECH_STOPPED:
            found = event.audio if event.audio is not None else found
    return found


def _close(items: Iterator[Any]) -> None:
    """Close an engine's generator now rather than when it is collected."""
    close = getattr(items, "close", None)
    if callable(close):
        close()


def _since_ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 1)


def isolated_floor(config: Config, rows: list[dict[str, Any]], logs: Sequence[CallLog]) -> None:
    """Each engine alone, on what the server's engines got in the calls; adds an
    ``isolated`` dict to each row (STT, LLM first token and first phrase, TTS first chunk).

    - STT: once per clip and transport, on the utterance as the server's turn detector cut
      it from the clip as the transport brought it (μ-law and resampling for Twilio);
    - LLM: each call replayed in order under its own session id, the message lists rebuilt
      from the records' transcripts and replies as the server's history keeps them; the
      replay stops at the first phrase, then the rest of the history is prefilled off the
      clock, so each turn's prefill finds the KV prefix warm, as the server's did;
    - TTS: each turn's first phrase, to its first chunk.
    """
    from bench.transport_callers import as_the_server_hears
    from voxpipe.conversation.spoken import ClauseChunker
    from voxpipe.engines.base import CancelToken, ChatMessage, LlmRequest, LlmUsage
    from voxpipe.engines.loader import load_engines

    engines = load_engines(config)
    long, short = speech_clips()
    clips = {c.name: c for c in (*long, *short)}

    stt: dict[tuple[str, str], float] = {}
    for transport, name in dict.fromkeys((r["transport"], r["clip"]) for r in rows):
        clip = clips[name]
        utterance = heard_utterance(
            engines.vad, config, as_the_server_hears(transport, clip.audio, clip.rate)
        )
        t = time.perf_counter()
        engines.stt.transcribe(utterance)
        stt[transport, name] = _since_ms(t)

    llm: dict[tuple[str, int], dict[str, Any]] = {}
    for log in logs:
        session = f"isolated-{log.transport}-{log.call}"
        history = [ChatMessage("system", config.llm.system_prompt)]
        for _, record in sorted(log.seen, key=lambda s: s[1]["turn_id"]):
            transcript = record.get("transcript", "")
            if record.get("compute_ms", {}).get("llm_ttft") is not None:
                usage, chunker = LlmUsage(), ClauseChunker(config.chunker)
                messages = [*history, ChatMessage("user", transcript)]
                ttft = first = None
                t = time.perf_counter()
                stream = engines.llm.stream(session, messages, CancelToken(), usage)
                try:
                    for delta in stream:
                        ttft = ttft if ttft is not None else _since_ms(t)
                        if isinstance(delta, str) and chunker.push(delta):  # words only
                            first = _since_ms(t)
                            break
                finally:
                    _close(stream)  # the engine's lock and KV are free again
                first = first if first is not None else _since_ms(t)
                llm[log.session_id, record["turn_id"]] = {
                    "llm_ttft": ttft if ttft is not None else first,
                    "llm_first_clause": first,
                    "prefill_tokens": usage.prefill_tokens,
                }
            user = any(ch.isalnum() for ch in transcript)
            if user:
                history.append(ChatMessage("user", transcript))
                if record.get("reply"):
                    history.append(ChatMessage("assistant", record["reply"]))
            if (log.session_id, record["turn_id"]) in llm:
                engines.llm.prefill(LlmRequest(session, history, CancelToken(), LlmUsage()))

    for row in rows:
        iso: dict[str, Any] = {}
        if row["server"]["compute_ms"].get("stt") is not None:
            iso["stt"] = stt.get((row["transport"], row["clip"]))
        iso.update(llm.get((row["session_id"], row["server_turn_id"]), {}))
        clause = row["server"].get("first_clause")
        if clause and row["server"]["compute_ms"].get("tts_first") is not None:
            t = time.perf_counter()
            chunks = engines.tts.synthesize(clause, CancelToken())
            try:
                next(chunks, None)
            finally:
                _close(chunks)
            iso["tts_first"] = _since_ms(t)
        row["isolated"] = iso


# -- the command -------------------------------------------------------------------------------


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def bench_config(base: Path | None, workdir: Path, no_filler: bool) -> Path:
    """The server's config file: the user's, with the bench's prompt and decoding (the
    warm-up then runs on that prompt too) and, if asked, no filler."""
    data: dict[str, Any] = json.loads(base.read_text()) if base else {}
    data.setdefault("llm", {}).update(LLM_SETTINGS)
    if no_filler:
        data.setdefault("deadlines", {})["filler"] = ""
    path = workdir / "config.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def traced_config(base: Path, endpoint: str) -> Path:
    """The bench's config with every span exported to ``endpoint``."""
    data = json.loads(base.read_text())
    data["tracing"] = {"enabled": True, "endpoint": endpoint}
    path = base.with_name("config-traced.json")
    path.write_text(json.dumps(data, indent=1))
    return path


def hold_on_a_fresh_server(
    args: argparse.Namespace,
    config_path: Path,
    workdir: Path,
    transports: Sequence[str],
    start: int = 0,
) -> tuple[list[CallLog], list[dict[str, Any]], float]:
    from voxpipe.loadtest.server_process import ServerProcess

    (workdir / "turns.jsonl").unlink(missing_ok=True)
    print(f"starting a fresh server (load average {load_average()}) ...", flush=True)
    server = ServerProcess.start(workdir, port=args.port, config=config_path)
    try:
        ready_s = server.wait_ready()
        print(
            f"ready after {ready_s:.1f} s; {args.calls} calls x {args.turns} turns through "
            f"{', '.join(transports)}, interleaved",
            flush=True,
        )
        logs, failures = asyncio.run(
            hold_calls(
                server.port, server.turn_log, transports, args.calls, args.turns,
                args.gap_ms, args.pause_ms, start,
            )
        )  # fmt: skip
    finally:
        server.stop()
    return logs, failures, ready_s


def main(args: argparse.Namespace) -> int:
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    out: Path = args.out
    workdir = out.parent / "caller-server"
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = bench_config(args.config, workdir, args.no_filler)
    config = Config.load(config_path)
    load_before = load_average()
    if args.timelines is not None:  # calls recorded by an earlier run, analysed again
        logs = [call_log_from_json(c) for c in json.loads(args.timelines.read_text())]
        transports = [t for t in transports if any(log.transport == t for log in logs)]
        failures: list[dict[str, Any]] = []
        ready_s = None
    else:
        logs, failures, ready_s = [], [], 0.0
        sink = OtlpSink() if args.tracing_compare else None
        traced_path = traced_config(config_path, sink.url) if sink else config_path
        try:
            for start in range(args.starts):
                path = traced_path if sink and traced(start) else config_path
                more, failed, ready_s = hold_on_a_fresh_server(
                    args, path, workdir, transports, start
                )
                logs, failures = logs + more, failures + failed
        finally:
            if sink is not None:
                sink.close()
    load_calls = load_average()
    rows, split = turn_rows(logs)
    if args.isolated:
        print("the same engines alone on the same inputs ...", flush=True)
        isolated_floor(config, rows, logs)
    silence = config.turn.silence_ms
    summary = summarize_all(rows, transports, silence)
    for transport, stats in summary.items():
        stats["filler_split"] = split.get(transport)
    filler = repr(config.deadlines.filler) if config.deadlines.filler else "off"
    servers = "one server" if args.starts == 1 else f"{args.starts} fresh servers in turn"
    header = (
        f"bench caller: {len(logs)} calls of {len(rows)} sentences of real speech "
        f"in all ({', '.join(transports)} in turn), {servers}; LLM temperature 0, "
        f"max_tokens 60, prompt {PROMPT!r}; "
        f"end-of-turn silence {silence} ms; filler {filler} when the first token is later "
        f"than {config.deadlines.llm_first_token_ms} ms; the caller talks after "
        f"{args.gap_ms} ms of quiet. Load average {load_before} before, {load_calls} after "
        "the calls."
    )
    first = first_call_summary(rows)
    tracing = tracing_summary(rows, sink.spans) if sink is not None else None
    sections = [*render_first_call(first), *render_tracing(tracing)]
    text = "\n".join([render_markdown(summary, header, silence), *sections])
    print("\n" + text)
    report = {
        "summary": summary,
        "filler_split": split,
        "first_call": first,
        "tracing": tracing,
        "turns": rows,
        "failures": failures,
        "ready_after_s": None if ready_s is None else round(ready_s, 1),
        "load_average": {"before": load_before, "after_calls": load_calls},
        "settings": {
            "prompt": PROMPT,
            "gap_ms": args.gap_ms,
            "pause_ms": args.pause_ms,
            "silence_ms": silence,
            "filler": config.deadlines.filler,
            "llm_first_token_deadline_ms": config.deadlines.llm_first_token_ms,
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    timelines = out.with_name(f"{out.stem}-timelines.json")
    if args.timelines is None:
        timelines.write_text(json.dumps([timeline_json(log) for log in logs]))
    print(f"\nwrote {out}, {out.with_suffix('.md')} and {timelines}")
    return 0 if not failures else 1
