"""``semantic_vad`` maps to the turn model where the server loads it, its silences chosen by
the eagerness; ``server_vad`` stays a fixed silence; both spellings (GA and beta) agree."""

from __future__ import annotations

import pytest

from voxpipe.config import TurnConfig
from voxpipe.transports.realtime_client_events import TurnDetectionIn
from voxpipe.transports.realtime_session import VadSettings


def _in_force(update: dict[str, object], base: TurnConfig | None = None) -> TurnConfig:
    base = base or TurnConfig()
    return VadSettings.of(base).merged(TurnDetectionIn.model_validate(update)).turn_config(base)


@pytest.mark.parametrize(
    ("eagerness", "complete_ms", "longest_ms"),
    [("low", 500, 2500), ("medium", 200, 1300), ("auto", 200, 1300), ("high", 100, 700)],
)
def test_semantic_vad_ends_turns_by_the_turn_model(
    eagerness: str, complete_ms: int, longest_ms: int
) -> None:
    turn = _in_force({"type": "semantic_vad", "eagerness": eagerness})
    assert turn.end_of_turn == "smart_turn"
    assert (turn.smart_turn_complete_ms, turn.smart_turn_max_silence_ms) == (
        complete_ms,
        longest_ms,
    )


def test_semantic_vad_without_eagerness_is_auto() -> None:
    turn = _in_force({"type": "semantic_vad"})
    assert (turn.end_of_turn, turn.smart_turn_max_silence_ms) == ("smart_turn", 1300)


def test_server_vad_is_the_fixed_silence() -> None:
    turn = _in_force({"type": "server_vad", "silence_duration_ms": 700})
    assert (turn.end_of_turn, turn.silence_ms) == ("silence", 700)


def test_without_the_model_semantic_vad_is_an_eagerness_silence() -> None:
    turn = _in_force({"type": "semantic_vad", "eagerness": "high"}, TurnConfig(semantic_vad=False))
    assert (turn.end_of_turn, turn.silence_ms) == ("silence", 300)


def test_back_to_server_vad_drops_the_model() -> None:
    base = TurnConfig()
    semantic = VadSettings.of(base).merged(
        TurnDetectionIn.model_validate({"type": "semantic_vad", "eagerness": "low"})
    )
    back = semantic.merged(
        TurnDetectionIn.model_validate({"type": "server_vad", "silence_duration_ms": 500})
    )
    assert back.turn_config(base).end_of_turn == "silence"
