"""The whole configuration: one section per concern, and where its values come from."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from voxpipe.config.auth import AuthConfig
from voxpipe.config.engines import (
    LlmConfig,
    RemoteLlmConfig,
    SttConfig,
    TtsConfig,
    TurnModelConfig,
    VadConfig,
)
from voxpipe.config.observability import TracingConfig
from voxpipe.config.server import DeadlineConfig, LimitsConfig, ServerConfig
from voxpipe.config.sip import SipConfig
from voxpipe.config.store import StoreConfig
from voxpipe.config.telephony import TelephonyConfig
from voxpipe.config.turn import AudioConfig, ChunkerConfig, TurnConfig


class Config(BaseSettings):
    """The whole server configuration."""

    # Errors name the field and the rule, never the value: it may be a key or a secret.
    model_config = SettingsConfigDict(
        env_prefix="VOXPIPE_",
        env_nested_delimiter="__",
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    vad: VadConfig = Field(default_factory=VadConfig)
    turn: TurnConfig = Field(default_factory=TurnConfig)
    turn_model: TurnModelConfig = Field(default_factory=TurnModelConfig)
    stt: SttConfig = Field(default_factory=SttConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    remote_llm: RemoteLlmConfig = Field(default_factory=RemoteLlmConfig)
    tts: TtsConfig = Field(default_factory=TtsConfig)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    audio: AudioConfig = Field(default_factory=AudioConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    deadlines: DeadlineConfig = Field(default_factory=DeadlineConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    telephony: TelephonyConfig = Field(default_factory=TelephonyConfig)
    sip: SipConfig = Field(default_factory=SipConfig)
    agent: str | None = None
    """The agent to serve: `module:attr`, `path/file.py:attr` or an agent file (`.yaml`/`.json`),
    as `voxpipe serve --agent` takes it (docs/agents.md). Default: the plain assistant of
    `llm.system_prompt`, with no tools."""

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Config:
        """Defaults < env < the JSON file (``path`` or ``$VOXPIPE_CONFIG``) < ``overrides``
        (a section's dict of fields, or a top-level field's value)."""
        file = path or (
            Path(os.environ["VOXPIPE_CONFIG"]) if os.environ.get("VOXPIPE_CONFIG") else None
        )
        data: dict[str, Any] = json.loads(file.read_text()) if file else {}
        for section, values in overrides.items():
            if isinstance(values, dict):
                data.setdefault(section, {}).update(values)
            else:  # a top-level field (``agent``)
                data[section] = values
        return cls(**data)
