"""One typed configuration object for the whole server.

Every knob has a default that serves on a 2-core machine with the embedded
models. Values come from (lowest to highest priority) the defaults here,
environment variables ``VOXPIPE_<SECTION>__<FIELD>`` (for example
``VOXPIPE_TURN__SILENCE_MS=400``), a JSON file named by ``--config`` or
``VOXPIPE_CONFIG``, and command-line flags.
``docs/configuration.md`` lists every field; ``voxpipe config`` prints the
values in force.

The sections live by concern (``engines``, ``turn``, ``server``, ``auth``, ``store``,
``observability``, ``telephony``, ``sip``); ``settings`` gathers them into :class:`Config`.
Import them from here. The engines a stage may run are registered in ``engine_registry``.
"""

from voxpipe.config.auth import KEY_NAME_PATTERN, ApiKey, AuthConfig
from voxpipe.config.engines import LlmConfig, RemoteLlmConfig, SttConfig, TtsConfig, VadConfig
from voxpipe.config.observability import TracingConfig
from voxpipe.config.reference import markdown_reference
from voxpipe.config.server import DeadlineConfig, LimitsConfig, ServerConfig
from voxpipe.config.settings import Config
from voxpipe.config.sip import SipConfig
from voxpipe.config.store import StoreConfig
from voxpipe.config.telephony import TelephonyConfig
from voxpipe.config.turn import AudioConfig, ChunkerConfig, TurnConfig

__all__ = [
    "KEY_NAME_PATTERN",
    "ApiKey",
    "AudioConfig",
    "AuthConfig",
    "ChunkerConfig",
    "Config",
    "DeadlineConfig",
    "LimitsConfig",
    "LlmConfig",
    "RemoteLlmConfig",
    "ServerConfig",
    "SipConfig",
    "StoreConfig",
    "SttConfig",
    "TelephonyConfig",
    "TracingConfig",
    "TtsConfig",
    "TurnConfig",
    "VadConfig",
    "markdown_reference",
]
