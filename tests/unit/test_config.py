"""Config: defaults < environment < JSON file < overrides, and values are validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from voxpipe.config import Config


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_defaults() -> None:
    cfg = Config()
    assert cfg.turn.silence_ms == 500 and cfg.turn.release_threshold is None
    assert cfg.chunker.min_first_chars == 8
    assert Config.load() == cfg


def test_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXPIPE_TURN__SILENCE_MS", "400")
    monkeypatch.setenv("VOXPIPE_AUDIO__PLAYBACK_LEAD_MS", "50")
    assert Config().turn.silence_ms == 400
    cfg = Config.load()
    assert cfg.turn.silence_ms == 400 and cfg.audio.playback_lead_ms == 50
    assert cfg.turn.threshold == 0.5  # the rest of the section keeps its defaults


def test_json_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json", {"turn": {"silence_ms": 700}, "llm": {"max_tokens": 20}})
    cfg = Config.load(path)
    assert cfg.turn.silence_ms == 700 and cfg.llm.max_tokens == 20
    assert cfg.turn.threshold == 0.5


def test_json_file_named_by_voxpipe_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "VOXPIPE_CONFIG", str(write(tmp_path / "c.json", {"turn": {"silence_ms": 650}}))
    )
    assert Config.load().turn.silence_ms == 650


def test_file_wins_over_environment_field_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOXPIPE_TURN__SILENCE_MS", "400")
    monkeypatch.setenv("VOXPIPE_TURN__MIN_SPEECH_MS", "64")
    path = write(tmp_path / "c.json", {"turn": {"silence_ms": 700, "threshold": 0.6}})
    turn = Config.load(path).turn
    assert turn.silence_ms == 700  # the file wins
    assert turn.threshold == 0.6
    assert turn.min_speech_ms == 64  # an env value the file does not mention survives


def test_overrides_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXPIPE_TURN__SILENCE_MS", "400")
    path = write(tmp_path / "c.json", {"turn": {"silence_ms": 700, "threshold": 0.6}})
    cfg = Config.load(path, turn={"silence_ms": 900}, audio={"playback_lead_ms": 0})
    assert cfg.turn.silence_ms == 900
    assert cfg.turn.threshold == 0.6  # an override of one field keeps the file's others
    assert cfg.audio.playback_lead_ms == 0


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("turn", {"silence_ms": 10}),
        ("turn", {"silence_ms": 100_000}),
        ("turn", {"threshold": 1.5}),
        ("turn", {"threshold": 0.0}),
        ("turn", {"max_turn_s": 0.5}),
        ("turn", {"min_speech_ms": -1}),
        ("llm", {"n_ctx": 10}),
        ("llm", {"top_p": 0.0}),
        ("chunker", {"max_chars": 5}),
        ("audio", {"out_frame_ms": 1}),
        ("server", {"port": 70000}),
        ("server", {"log_level": "chatty"}),
        ("server", {"log_format": "yaml"}),
    ],
)
def test_absurd_values_are_rejected(section: str, values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Config.load(None, **{section: values})


def test_the_log_format_comes_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``voxpipe serve --workers`` and ``voxpipe cluster`` workers inherit the environment
    and the config file, so they log in the supervisor's format."""
    assert Config.load(None).server.log_format == "text"
    monkeypatch.setenv("VOXPIPE_SERVER__LOG_FORMAT", "json")
    assert Config.load(None).server.log_format == "json"


def test_absurd_environment_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXPIPE_TURN__SILENCE_MS", "a while")
    with pytest.raises(ValidationError):
        Config()


def test_bad_json_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        Config.load(path)


@pytest.mark.parametrize(
    "release", [-0.5, 1.5, 0.9], ids=["negative", "above-one", "above-threshold"]
)
def test_absurd_release_threshold_is_rejected(release: float) -> None:
    with pytest.raises(ValidationError):
        Config.load(turn={"threshold": 0.5, "release_threshold": release})
