"""``python -m bench caller``'s plumbing without a server: the conversation's order, the turn
log followed as it grows, the server config it writes, and a recorded call saved and read back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from bench.caller_bench import (
    LLM_SETTINGS,
    CallLog,
    Clip,
    TurnLogFollower,
    bench_config,
    call_log_from_json,
    conversation,
    timeline_json,
)
from bench.caller_turns import ReplyFrame, Sentence
from voxpipe.config import Config

MS = 1_000_000


def clip(name: str) -> Clip:
    return Clip(name, np.zeros(160, np.float32), 16000, 0.0, 0.01)


def test_the_conversation_alternates_long_and_short_and_each_call_starts_elsewhere() -> None:
    long, short = [clip(f"L{i}") for i in range(5)], [clip(f"S{i}") for i in range(13)]
    first = [c.name for c in conversation(long, short, 6, call=0)]
    assert first == ["L0", "S0", "L1", "S1", "L2", "S2"]
    second = [c.name for c in conversation(long, short, 4, call=1)]
    assert second == ["L1", "S3", "L2", "S4"]


def test_the_follower_reads_whole_lines_as_they_are_appended(tmp_path: Path) -> None:
    log = tmp_path / "turns.jsonl"
    follower = TurnLogFollower(log)
    follower.poll()  # no file yet
    record = {"turn_id": 1, "session_id": "s", "stages_ms": {"response_done": 2000.0}}
    line = json.dumps(record) + "\n"
    log.write_text(json.dumps({"turn_id": 0, "session_id": "s"}) + "\n" + line[:20])
    follower.poll()
    assert follower.seen == {}, "turn 0 is no turn; half a line waits for its end"
    with log.open("a") as f:
        f.write(line[20:])
    follower.poll()
    (seen_ns, got), = follower.seen["s"]  # fmt: skip
    assert got == record and abs(seen_ns - time.monotonic_ns()) < 5_000 * MS
    speech_end = seen_ns - 2000 * MS
    assert follower.done_after("s", speech_end - 3000 * MS, speech_end - 100 * MS)
    assert not follower.done_after("s", speech_end + 1, speech_end + 10), "a later sentence"
    assert not follower.done_after("s", 0, seen_ns + 1), "seen before the sentence ended"
    assert not follower.done_after("other", 0, 0)


def test_the_server_config_carries_the_prompt_and_decoding(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"turn": {"silence_ms": 400}, "llm": {"threads": 1}}))
    config = Config.load(bench_config(base, tmp_path, no_filler=True))
    assert config.llm.system_prompt == LLM_SETTINGS["system_prompt"]
    assert (config.llm.temperature, config.llm.max_tokens, config.llm.threads) == (0.0, 60, 1)
    assert config.turn.silence_ms == 400 and config.deadlines.filler == ""
    assert Config.load(bench_config(None, tmp_path, no_filler=False)).deadlines.filler


def test_a_recorded_call_reads_back_the_same() -> None:
    call = CallLog(
        "twilio",
        1,
        "MZ1",
        [Sentence(0, "a.wav", 0, 3000 * MS, "quiet", 4600 * MS, 4500 * MS)],
        [ReplyFrame(3900 * MS, 20 * MS, True), ReplyFrame(3920 * MS, 20 * MS, False)],
        [(9000 * MS, {"turn_id": 1, "stages_ms": {"response_done": 5000.0}})],
    )
    assert call_log_from_json(json.loads(json.dumps(timeline_json(call)))) == call
