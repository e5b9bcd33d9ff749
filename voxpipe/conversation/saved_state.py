"""A call's ids, and what it saves so that another worker can carry it on.

A session id is what a reconnect presents, so it is random enough that knowing one tells
nothing about another; each call's record has its own id, since a session id may be reused.
The saved state says where the caller's audio is accounted for (:class:`AnsweredAudio`):
a restore asks the client to resend from the end of the last answered turn, and the
restored history is evaluated on the new worker's LLM at once (:class:`ContextRebuild`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

from voxpipe.conversation.services import CallRecord, Services
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage, ToolSpec
from voxpipe.engines.runner import JobClock

log = logging.getLogger("voxpipe.session")

REMEMBERED_TURN_ENDS = 128  # turns in flight whose end is remembered until they are answered


def new_session_id() -> str:
    """A server-issued session id: 128 random bits, so knowing one call's id tells nothing
    about another's (a session id is what a reconnect presents)."""
    return secrets.token_hex(16)


def new_call_id() -> str:
    """The key of one call's record; a session id may be reused by a later call."""
    return secrets.token_hex(8)


def continued_record(state: dict[str, Any], session_id: str) -> CallRecord:
    """The record of a call restored from its saved ``state``: the same call, one epoch on,
    so the copy it was saved from can no longer overwrite it."""
    return CallRecord(
        str(state.get("call_id") or new_call_id()),
        session_id,
        state_owner(state),
        int(state.get("epoch", 0)) + 1,
    )


def state_owner(state: dict[str, Any]) -> str:
    """Who started the call a saved state belongs to (states saved before owners were
    recorded belong to the anonymous principal of a server without keys)."""
    return str(state.get("owner") or "anonymous")


class AnsweredAudio:
    """Where the caller's audio is accounted for, for a restore on another worker: the end
    (16 kHz sample, from the start of the call) of the last turn whose reply finished."""

    def __init__(self) -> None:
        self.offset = 0  # 16 kHz samples of the call before this worker's first
        self.until = 0
        self._turn_ends: dict[int, int] = {}

    def turn_ended(self, turn_id: int, sample: int) -> None:
        """Turn ``turn_id`` ended at ``sample`` of this worker's audio."""
        self._turn_ends[turn_id] = self.offset + sample
        while len(self._turn_ends) > REMEMBERED_TURN_ENDS:
            del self._turn_ends[next(iter(self._turn_ends))]

    def answered(self, turn_id: int) -> None:
        end = self._turn_ends.pop(turn_id, None)
        if end is not None:
            self.until = max(self.until, end)

    def restored(self, offset: int) -> None:
        """This worker's audio starts ``offset`` samples into the call, all answered."""
        self.offset = self.until = offset


class ContextRebuild:
    """The restored history, evaluated on this worker's LLM now, while the caller's audio is
    still being resent, so the next turn pays only for its own tokens. The seconds it takes
    (``counts["context_rebuild_ms"]``) are the cost of losing the worker that held the
    context; if it fails, the next turn prefills it itself, only slower."""

    def __init__(
        self,
        session_id: str,
        services: Services,
        messages: Callable[[], list[ChatMessage]],
        counts: Counter[str],
        tools: Callable[[], list[ToolSpec] | None] = lambda: None,
    ) -> None:
        """``tools``: what the next reply will be offered (part of its prompt)."""
        self._id = session_id
        self._tools = tools
        self._services = services
        self._messages = messages  # read once the task runs
        self._counts = counts
        self._cancel = CancelToken()
        self.task = asyncio.create_task(self._run(), name=f"rebuild-{session_id}")

    async def _run(self) -> LlmUsage:
        messages, clock = self._messages(), JobClock()
        try:
            usage = await self._services.llm.prefill(
                self._id, messages, self._cancel, clock, tools=self._tools()
            )
        except Exception as exc:  # the next turn prefills it itself, only slower
            log.warning("session %s: context rebuild failed: %s", self._id, exc)
            return LlmUsage()
        self._counts["context_rebuild_ms"] = round(clock.compute_s * 1000)
        self._counts["context_rebuild_tokens"] = usage.prefill_tokens
        self._services.metrics.context_rebuild.observe(clock.compute_s)
        log.info(
            "session %s: rebuilt %d tokens of context in %.0f ms",
            self._id,
            usage.prefill_tokens,
            clock.compute_s * 1000,
        )
        return usage

    async def close(self) -> None:
        """Stop the prefill (between its batches) and wait for it."""
        self._cancel.cancel()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
