"""A call's ids, and what it saves so that another worker can carry it on.

A session id is what a reconnect presents, so it is random enough that knowing one tells
nothing about another; each call's record has its own id, since a session id may be reused.
:class:`SavedCall` is the session's ``saved``: what it saves after each turn, and how it
carries on from another worker's save. The saved state says where the caller's audio is
accounted for (:class:`~voxpipe.conversation.history.AnsweredAudio`, which moves as the
turns are answered): a restore asks the client to resend from the end of the last answered
turn, and the restored history is evaluated on the new worker's LLM at once
(:class:`ContextRebuild`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from typing import Any

from voxpipe.conversation.events import HistorySnapshot
from voxpipe.conversation.history import AnsweredAudio, CallRecorder, History
from voxpipe.conversation.replies import Replies
from voxpipe.conversation.services import CallRecord, Services
from voxpipe.conversation.tool_ledger import UNKNOWN_SAID, ToolLedger, ToolRun
from voxpipe.engines.base import STT_SAMPLE_RATE, CancelToken, JobClock, LlmUsage

log = logging.getLogger("voxpipe.session")


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


class ContextRebuild:
    """The restored history, evaluated on this worker's LLM now, while the caller's audio is
    still being resent, so the next turn pays only for its own tokens. The seconds it takes
    (``counts["context_rebuild_ms"]``) are the cost of losing the worker that held the
    context; if it fails, the next turn prefills it itself, only slower."""

    def __init__(
        self,
        session_id: str,
        services: Services,
        history: History,
        counts: Counter[str],
        ledger: ToolLedger,
    ) -> None:
        """``ledger``: the tools the next reply will be offered (part of its prompt)."""
        self._id = session_id
        self._ledger = ledger
        self._services = services
        self._history = history  # read once the task runs
        self._counts = counts
        self._cancel = CancelToken()
        self.task = asyncio.create_task(self._run(), name=f"rebuild-{session_id}")

    async def _run(self) -> LlmUsage:
        messages, clock = self._history.messages(), JobClock()
        try:
            usage = await self._services.llm.prefill(
                self._id, messages, self._cancel, clock, tools=self._ledger.offered()
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


class SavedCall:
    """What a call saves after each turn (:meth:`state`, :meth:`persist`), and how it carries
    on from another worker's save (:meth:`restore`): the history and the tools' calls, the
    numbering of turns and reply frames, and where the caller's audio is accounted for."""

    def __init__(
        self,
        recorder: CallRecorder,
        services: Services,
        history: History,
        ledger: ToolLedger,
        replies: Replies,
        answered: AnsweredAudio,
        counts: Counter[str],
        input_sample_rate: int,
    ) -> None:
        self._recorder, self._services = recorder, services
        self._history, self._ledger, self._replies = history, ledger, replies
        self._answered, self._counts, self._rate = answered, counts, input_sample_rate
        self._rebuild: ContextRebuild | None = None
        self._restored_answer: asyncio.Task[None] | None = None

    def state(self) -> dict[str, Any]:
        """What a new server needs to carry this conversation on (persistence, restore)."""
        record = self._recorder.call
        return {
            **self._history.saved(),
            **self._ledger.saved(),
            "turns": self._replies.last_turn_id,
            "audio_seq": self._replies.ctx.frames.last,
            # caller audio to resend on a restore starts here (the session's input rate)
            "input_samples": self._answered.until * self._rate // STT_SAMPLE_RATE,
            "input_sample_rate": self._rate,
            "counts": dict(self._counts),
            "epoch": record.epoch,
            "owner": record.owner,
            "call_id": record.call_id,
        }

    def persist(self) -> None:
        """Save :meth:`state` to the store (queued; a no-op without one)."""
        self._recorder.save(self.state())

    def restore(self, state: dict[str, Any], audio_seq: int = 0) -> int:
        """Carry on a conversation another worker saved: its history, turn numbering and
        reply sequence numbers (past ``audio_seq`` too, the last frame the client has, so no
        frame number is used twice). Returns the input sample from which this session needs
        the caller's audio again: the end of the last answered turn."""
        history, ledger, replies, counts = self._history, self._ledger, self._replies, self._counts
        rate = int(state.get("input_sample_rate") or self._rate)
        input_samples = int(state.get("input_samples", 0)) * self._rate // rate
        history.restore(state)
        replies.last_turn_id = int(state.get("turns", 0))
        replies.ctx.frames.last = max(int(state.get("audio_seq", 0)), audio_seq)
        counts.update({k: v for k, v in state.get("counts", {}).items() if isinstance(v, int)})
        counts["restores"] += 1
        self._answered.restored(input_samples * STT_SAMPLE_RATE // self._rate)
        reruns = ledger.restore(state, replies.last_turn_id)
        if history.turns or history.summary:
            session_id = self._recorder.call.session_id
            self._rebuild = ContextRebuild(session_id, self._services, history, counts, ledger)
        if reruns or (history.turns and history.turns[-1].role == "tool"):
            # A tool's result (or its unknown outcome) comes after the last word: answer it.
            said = None if reruns or not ledger.unknown_after_restore else UNKNOWN_SAID
            self._restored_answer = asyncio.create_task(self._answer_restored(reruns, said))
        return input_samples

    async def _answer_restored(self, reruns: list[ToolRun], said: str | None) -> None:
        """``said``: the words for calls whose outcome is unknown, rather than the model's."""
        await asyncio.gather(*(run.task for run in reruns), return_exceptions=True)
        if not self._replies.ctx.outbox.closed:
            self._replies.respond(say=said)

    def history_snapshot(self) -> HistorySnapshot:
        """The conversation as the client may show it (a native client's ``history.get``)."""
        history = self._history
        return HistorySnapshot(
            [{"role": m.role, "content": m.content} for m in history.turns],
            history.summary,
            history.summarized_messages,
        )

    async def close(self) -> None:
        """Stop the context rebuild and the restored answer, and wait for them."""
        if self._rebuild is not None:
            await self._rebuild.close()
        task = self._restored_answer
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
