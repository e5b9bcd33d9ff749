"""The LLM stage on a remote OpenAI-compatible server (vLLM, SGLang, llama-server, Ollama).

It streams ``/chat/completions`` over pooled keep-alive connections, so a turn
pays no TCP or TLS handshake. A cancel (barge-in, hang-up) closes the response
from the cancelling thread: the blocked read ends at once, and the server sees
the client go and stops generating, which frees its GPU for the other calls.
Each request carries the session id (``user`` and a header), so servers with
prefix caching, and routers with session affinity, keep a call's context warm. A reply's
request also carries the trace context of its LLM stage (``traceparent``) when tracing is
on, so a traced server's spans join the call's trace.

Retries only where nothing can have been generated yet: a failed connect, or a
429/502/503 answer before the stream began. Once a token arrived, a failure is
the turn's (``EngineError``): resending would make the server say it twice.

Every refusal (an error status, retried or not, a timeout, a failed connect) is reported to
``on_refusal`` when one is given: the server counts them in
``voxpipe_upstream_refusals_total``, which an alert watches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from voxpipe.config import Config, LlmConfig, RemoteLlmConfig
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    LlmEngine,
    LlmOutput,
    LlmRequest,
    LlmUsage,
    ToolSpec,
)
from voxpipe.engines.factory import BuildContext, ModelInfo
from voxpipe.engines.openai_tools import ToolCallAssembler, openai_message

RETRY_STATUSES = frozenset({429, 502, 503})
MAX_RETRY_WAIT_S = 1.0  # a voice turn cannot wait long for a busy server
WARMUP_SESSION = "__warmup__"


class OpenAiCompatibleLlm(LlmEngine):
    def __init__(
        self,
        remote: RemoteLlmConfig,
        llm: LlmConfig,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        self.name = f"openai-compatible {remote.model} at {remote.base_url}"
        self.max_sequences = remote.max_connections  # requests in flight: the server batches
        self.remote = remote
        self.max_tokens = llm.max_tokens
        self.sampling = {"temperature": llm.temperature, "top_p": llm.top_p, "seed": llm.seed}
        self._warmup_prompt = llm.system_prompt
        self._on_refusal = on_refusal
        self.url = remote.base_url.rstrip("/") + "/chat/completions"
        headers = {"accept": "application/json, text/event-stream"}
        if remote.api_key:
            headers["authorization"] = f"Bearer {remote.api_key}"
        pool = httpx.Limits(
            max_connections=remote.max_connections,
            max_keepalive_connections=remote.max_connections,
        )
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(
                connect=remote.connect_timeout_s,
                read=remote.read_timeout_s,
                write=remote.write_timeout_s,
                pool=remote.pool_timeout_s,
            ),
            # httpx retries a connect that failed (nothing was sent), and only that.
            transport=httpx.HTTPTransport(retries=remote.retries, limits=pool),
        )

    # -- requests -----------------------------------------------------------

    def _body(
        self, session_id: str, messages: Sequence[ChatMessage], **fields: Any
    ) -> dict[str, Any]:
        return {
            **self.remote.extra_body,
            "model": self.remote.model,
            "messages": [openai_message(m) for m in messages],
            "user": session_id,
            **self.sampling,
            **fields,
        }

    def _headers(self, session_id: str, trace_headers: Mapping[str, str] | None) -> dict[str, str]:
        header = self.remote.session_header
        return {**(trace_headers or {}), **({header: session_id} if header else {})}

    def _open(
        self,
        body: dict[str, Any],
        session_id: str,
        cancel: CancelToken,
        usage: LlmUsage,
        trace_headers: Mapping[str, str] | None = None,
    ) -> httpx.Response | None:
        """The response with its status checked, after safe retries; None if cancelled."""
        usage.extra.setdefault("retries", 0)
        for attempt in range(self.remote.retries + 1):
            request = self._client.build_request(
                "POST", self.url, json=body, headers=self._headers(session_id, trace_headers)
            )
            try:
                response = self._client.send(request, stream=body.get("stream", False))
            except httpx.TimeoutException as exc:
                self._refused("timeout")
                raise EngineError(f"LLM server {self.url} timed out: {type(exc).__name__}") from exc
            except httpx.HTTPError as exc:
                self._refused("unreachable")
                raise EngineError(f"LLM server {self.url} unreachable: {exc}") from exc
            if cancel.cancelled:
                response.close()
                return None
            if response.status_code >= 400:
                self._refused(str(response.status_code))
            if response.status_code in RETRY_STATUSES and attempt < self.remote.retries:
                response.close()
                usage.extra["retries"] += 1
                time.sleep(_retry_wait_s(response, attempt))
                continue
            if response.status_code >= 400:
                excerpt = response.read()[:300].decode(errors="replace")
                response.close()
                raise EngineError(
                    f"LLM server {self.url} answered {response.status_code}: {excerpt}"
                )
            return response
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _refused(self, reason: str) -> None:
        if self._on_refusal is not None:
            self._on_refusal(reason)

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        session_id, messages, cancel, usage = (
            request.session_id, request.messages, request.cancel, request.usage,
        )  # fmt: skip
        tools = request.tools
        started = time.monotonic()
        body = self._body(
            session_id,
            messages,
            max_tokens=self.max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            **_offered(tools, request.tool_choice),
        )
        response = self._open(body, session_id, cancel, usage, request.trace_headers)
        if response is None:
            usage.finish_reason = "cancelled"
            return
        unregister = cancel.on_cancel(response.close)  # ends a blocked read at once
        deltas = 0
        calls = ToolCallAssembler()
        try:
            for line in response.iter_lines():
                if cancel.cancelled:
                    break
                if not line.startswith("data:"):
                    continue  # SSE comments, keep-alives, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # read on to the end of the body: the connection goes back to the pool
                chunk = json.loads(data)
                _read_usage(chunk.get("usage"), usage)
                for choice in chunk.get("choices") or []:
                    usage.finish_reason = choice.get("finish_reason") or usage.finish_reason
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    pieces = calls.push(delta.get("tool_calls") or []) if tools else []
                    for item in [text, *pieces] if text else pieces:
                        if deltas == 0:
                            usage.extra["ttft_s"] = time.monotonic() - started
                        deltas += 1
                        yield item
        except (httpx.HTTPError, httpx.StreamError, ValueError) as exc:
            if not cancel.cancelled:
                what = (
                    "no data for read_timeout_s" if isinstance(exc, httpx.TimeoutException) else exc
                )
                raise EngineError(f"LLM stream from {self.url} failed: {what}") from exc
        finally:
            unregister()
            response.close()
        if cancel.cancelled:
            usage.finish_reason = "cancelled"
        usage.completion_tokens = usage.completion_tokens or deltas
        if calls and not cancel.cancelled:
            yield from calls.calls(tools)

    def prefill(self, request: LlmRequest) -> None:
        """A one-token request: the server evaluates (and caches) the prompt's prefix."""
        if not self.remote.prefill:
            return
        session_id, usage = request.session_id, request.usage
        body = self._body(
            session_id, request.messages, max_tokens=1, stream=False, **_offered(request.tools)
        )
        response = self._open(body, session_id, request.cancel, usage)
        if response is None:
            return
        try:
            _read_usage(response.json().get("usage"), usage)
        except ValueError as exc:
            raise EngineError(f"LLM server {self.url} sent a body that is not JSON") from exc
        finally:
            response.close()
        usage.completion_tokens = 0

    def forget(self, session_id: str) -> None:
        """Nothing is kept here; the server's prefix cache ages out by itself."""

    def warmup(self) -> None:
        """The server must answer before this worker says it is ready."""
        messages = [ChatMessage("system", self._warmup_prompt), ChatMessage("user", "Hi")]
        for _ in self.stream(WARMUP_SESSION, messages, CancelToken(), LlmUsage()):
            pass

    def close(self) -> None:
        self._client.close()


def _offered(tools: tuple[ToolSpec, ...], tool_choice: str = "auto") -> dict[str, Any]:
    """The request fields that offer ``tools`` (none without any: the request as before)."""
    if not tools:
        return {}
    choice: str | dict[str, Any] = tool_choice
    if tool_choice not in ("auto", "none", "required"):
        choice = {"type": "function", "function": {"name": tool_choice}}
    return {"tools": [tool.openai() for tool in tools], "tool_choice": choice}


def _read_usage(reported: dict[str, Any] | None, usage: LlmUsage) -> None:
    if not reported:
        return
    usage.prompt_tokens = int(reported.get("prompt_tokens") or 0)
    usage.completion_tokens = int(reported.get("completion_tokens") or 0)
    cached = (reported.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:  # vLLM, SGLang, OpenAI: the prefix-cache hit
        usage.reused_tokens = int(cached)
    usage.prefill_tokens = usage.prompt_tokens - usage.reused_tokens


def _retry_wait_s(response: httpx.Response, attempt: int) -> float:
    try:
        wait = float(response.headers.get("retry-after", ""))
    except ValueError:
        wait = 0.1 * 2**attempt
    return max(0.0, min(MAX_RETRY_WAIT_S, wait))


class OpenAiFactory:
    """The client of a remote model (``llm.engine: openai``), set up in ``remote_llm``."""

    def build(self, config: Config, context: BuildContext) -> OpenAiCompatibleLlm:
        return OpenAiCompatibleLlm(config.remote_llm, config.llm, context.on_refusal)

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        address = Path(config.remote_llm.base_url)
        model = config.remote_llm.model
        return ModelInfo("llm", "openai-compatible", address, 0, True, "openai", model)


FACTORY = OpenAiFactory()
