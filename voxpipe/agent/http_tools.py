"""HTTP webhook tools: the arguments are POSTed as JSON to a URL, the response is the result.

Declared, not programmed (:class:`HttpToolConfig`, also the ``http_tools`` entries of a
YAML agent), so a tool can live in any language behind any URL. ``${NAME}`` in the URL or
a header is replaced by the environment variable ``NAME`` when the agent loads, so a key
need not be written in the agent file. Every tool of an agent shares one pooled
``httpx.AsyncClient`` (``runtime.py``), and a response is read to at most
``MAX_RESPONSE_BYTES``: a webhook cannot fill the server's memory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from voxpipe.agent import schema
from voxpipe.agent.call_context import CallContext
from voxpipe.agent.tools import (
    DEFAULT_PHRASE,
    DEFAULT_TIMEOUT_PHRASE,
    DEFAULT_TIMEOUT_S,
    Tool,
    ToolEffect,
    ToolFailed,
    ToolOutput,
    ToolPolicy,
    tool_spec,
)
from voxpipe.engines.base import TOOL_NAME

MAX_RESPONSE_BYTES = 256 * 1024
MAX_ERROR_TEXT = 200  # characters of a failed response's body passed on to the model
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str) -> str:
    """``text`` with each ``${NAME}`` replaced by the environment variable; ValueError if
    one is not set (the name is said, never a value)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]

    return _ENV_REFERENCE.sub(value, text)


def http_url(url: str) -> str:
    """``url`` with ``${NAME}`` expanded, if it is an http(s) URL; else ValueError (which a
    pydantic validator reports under the field's name)."""
    url = expand_env(url)
    try:
        scheme = httpx.URL(url).scheme
    except httpx.InvalidURL as exc:  # not a ValueError: pydantic would let it escape raw
        raise ValueError(f"not a valid URL: {exc}") from None
    if scheme not in ("http", "https"):
        raise ValueError("an http:// or https:// URL")
    return url


class ToolPolicyConfig(BaseModel):
    """The voice behaviour of a declared tool (``ToolPolicy``), as configuration."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="Seconds before it times out.")
    phrase: str = Field(DEFAULT_PHRASE, description="Said while it runs past about 300 ms.")
    timeout_phrase: str = Field(DEFAULT_TIMEOUT_PHRASE, description="Said when it times out.")
    effect: ToolEffect = Field(
        ToolEffect.MUTATING, description="read_only: cancelled on barge-in; mutating: runs on."
    )
    idempotent: bool = Field(False, description="May run again after a worker died mid-call.")
    says: str = Field(
        "",
        description="A field of the result that is the answer, said as it is, without "
        "asking the model again ('' = the model words the answer).",
    )

    confirm: bool | str = Field(
        False,
        description="Read the call back and run it only on the caller's yes: true, or the "
        "readback as a template over the arguments ('A table for {party_size}. Shall I?').",
    )

    def policy(self) -> ToolPolicy:
        return ToolPolicy(
            self.timeout_s,
            self.phrase,
            self.timeout_phrase,
            self.effect,
            self.idempotent,
            self.says,
            self.confirm,
        )


class HttpToolConfig(ToolPolicyConfig):
    """One webhook tool: what the model is told, and where its calls go."""

    name: str = Field(pattern=TOOL_NAME.pattern, description="The tool's name for the model.")
    description: str = Field(description="What it does and when to use it, for the model.")
    url: str = Field(description="Where the arguments are POSTed; ${ENV} is expanded.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema of the arguments (an object).",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="${ENV} is expanded.")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return http_url(url)

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        return {name: expand_env(value) for name, value in headers.items()}

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, parameters: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return schema.checked(str(info.data.get("name", "http tool")), parameters)


class HttpTool(Tool):
    """A webhook: POST the arguments, a 2xx response's JSON (or text) is the result; any
    other status is the call's error, with the status and the start of the body."""

    kind = "http"

    def __init__(self, config: HttpToolConfig, client: httpx.AsyncClient) -> None:
        super().__init__(
            tool_spec(config.name, config.description, config.parameters), config.policy()
        )
        self.config = config
        self._client = client

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return schema.validate_arguments(self.name, self.spec.parameters, arguments)

    async def invoke(self, arguments: dict[str, Any], context: CallContext) -> ToolOutput:
        config = self.config
        try:
            async with self._client.stream(
                "POST",
                config.url,
                json=arguments,
                headers={**config.headers, **context.headers()},  # the server's say wins
                timeout=config.timeout_s + 1,  # the toolbox's deadline comes first
            ) as response:
                body = await _read_bounded(response)
        except httpx.HTTPError as exc:
            raise ToolFailed(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        text = body.decode(response.encoding or "utf-8", errors="replace")
        if not response.is_success:
            raise ToolFailed(f"HTTP {response.status_code}: {text[:MAX_ERROR_TEXT]}")
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text


async def _read_bounded(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise ToolFailed(f"the response is larger than {MAX_RESPONSE_BYTES} bytes")
    return bytes(body)
