"""Who may call: API keys and the tokens signed for browsers."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import ConfigDict, Field, SecretStr, field_validator

from voxpipe.config.section import Section

KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ApiKey(Section):
    """One API key and the name it is known by. The name, not the secret and not its place in
    the list, is the identity calls are owned by (``key:<name>``), so reordering, adding or
    rotating other keys never moves a call to another owner."""

    model_config = ConfigDict(hide_input_in_errors=True)

    name: str = Field(pattern=KEY_NAME_PATTERN)
    """Stable identity of the key's callers (letters, digits, _ . -; no /)."""

    key: SecretStr = Field(min_length=1)
    """The secret the client sends; never printed or logged."""

    @staticmethod
    def anonymous_name(key: str) -> str:
        """The name of a key given as a bare string: a digest, never an index, so it stays
        the same wherever the key sits in the list."""
        return hashlib.sha256(key.encode()).hexdigest()[:8]


class AuthConfig(Section):
    """Authentication at connect; off while no API key is configured."""

    model_config = ConfigDict(hide_input_in_errors=True)  # alone too, its errors name no key

    api_keys: list[ApiKey] = Field(default_factory=list)
    """Accepted API keys (Authorization: Bearer KEY, ?api_key=KEY, or the
    openai-insecure-api-key.KEY subprotocol): a list of `{"name": N, "key": K}`, a mapping name
    -> key, or bare key strings (named by the first 8 hex digits of their SHA-256). A caller's
    identity is `key:<name>`; names and keys must be unique. Empty = no authentication."""

    token_secret: SecretStr | None = Field(None, min_length=32)
    """HMAC secret (32+ characters) that signs and checks browser tokens (POST /v1/tokens); its own
    value, so API keys rotate without breaking tokens. Unset while keys are set: no token is
    minted or accepted. Every worker needs the same one; changing it revokes every token."""

    token_ttl_s: int = Field(300, ge=10, le=86400)
    """Lifetime of an issued token, and the most a POST /v1/tokens request may ask for (ttl_s)."""

    @field_validator("api_keys", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, dict):  # {"name": "key", ...}
            return [{"name": name, "key": key} for name, key in value.items()]
        if isinstance(value, list):
            return [
                {"name": ApiKey.anonymous_name(item), "key": item}
                if isinstance(item, str)
                else item
                for item in value
            ]
        return value

    @field_validator("api_keys")
    @classmethod
    def _unique(cls, keys: list[ApiKey]) -> list[ApiKey]:
        names = [k.name for k in keys]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"API key names must be unique; repeated: {', '.join(twice)}")
        secrets = [k.key.get_secret_value() for k in keys]
        if len(set(secrets)) != len(secrets):
            raise ValueError("the same API key is listed twice (under two names)")
        return keys
