"""What has been said in a call, in the order the LLM should see it, what of it is kept, and
its summary.

:class:`History` holds the messages. :class:`TurnHistory` decides what each turn adds, and
when: the caller's words join when their reply finishes, or earlier, just before the reply
records a tool call (the call must follow the words it answers); the answer joins as the
words the caller heard. A false interruption's reply says the rest of the answer it stopped:
the history then holds the two as the one answer the caller heard, and no turn of the
caller's. Each answered turn moves where a restore resends the caller's audio from
(:class:`AnsweredAudio`, which the saved state carries:
:class:`~voxpipe.conversation.saved_state.SavedCall`).

**Edits.** A client that plays the audio itself knows better than the server what the caller
heard (OpenAI ``conversation.item.truncate``), and may delete items; messages are found by
identity, so each finished turn keeps the very messages it added and the words its audio
spoke (:class:`FinishedTurns`).

**The store.** The session and its replies record the call as it goes (its start, every
message, every finished turn, the state another worker would need, its end) through the
call's :class:`CallRecorder`, the one path to its
:class:`~voxpipe.conversation.services.CallStore`, so what is kept of a call, and under
which record, is decided in one place. Without a store every write is a no-op.

**Long calls stay fast** (:class:`Summarizer`): after a reply whose conversation passed
``llm.summarize_after_tokens`` (the prompt less its system message and tools, which no
summary shortens), the LLM condenses all but the last ``llm.keep_recent_messages`` messages
(and any earlier summary) into a few sentences, then pre-fills the new, shorter prompt into
the call's KV cache, so the next turn adds only its own tokens. A turn can leave the KV cache
behind the history without any summary: a tool's call, its result and an answer the tool
said were never generated in the call's context, and an answer cut short by a barge-in is
kept only as far as the caller heard it. The next prompt would prefill all that (``bench
tool-turns`` measured 158 tokens at p50 after tool turns, against about 20 after plain
ones), so such a turn's history is pre-filled right away, while the caller listens. All of
it runs on the LLM's thread between turns and is cancellable: when the next reply starts
(the caller paused or finished), the work stops within one prefill batch and is retried
after that reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from voxpipe.conversation.reply_audio import PlaybackTracker
from voxpipe.conversation.services import CallRecord, CallStore, Services
from voxpipe.conversation.spoken import result_for_model
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    JobClock,
    LlmRequest,
    LlmUsage,
    Role,
    ToolSpec,
    Urgency,
)
from voxpipe.engines.runner import EngineBusy


@dataclass
class History:
    system_prompt: str
    turns: list[ChatMessage] = field(default_factory=list)
    max_messages: int = 400  # bound: the LLM engine trims to its context long before this
    summary: str = ""  # older turns, condensed (:class:`Summarizer`)
    summarized_messages: int = 0

    def add_user(self, text: str) -> ChatMessage:
        return self._append(ChatMessage("user", text))

    def add_assistant(self, text: str) -> ChatMessage:
        return self._append(ChatMessage("assistant", text))

    def add(self, role: Role, text: str) -> ChatMessage:
        """A message a client wrote into the conversation itself (any role)."""
        return self._append(ChatMessage(role, text))

    def append(self, message: ChatMessage) -> ChatMessage:
        """Any message as it is: a tool call the assistant made, or a tool's result."""
        return self._append(message)

    def _append(self, message: ChatMessage) -> ChatMessage:
        self.turns.append(message)
        if len(self.turns) > self.max_messages:
            del self.turns[: len(self.turns) - self.max_messages]
        return message

    def replace_oldest(self, count: int, summary: str) -> None:
        """The first ``count`` turns are now told by ``summary``."""
        del self.turns[:count]
        self.summary = summary
        self.summarized_messages += count

    def messages(self) -> list[ChatMessage]:
        """The conversation as the model is shown it: a tool's result comes with a request
        to tell the caller its outcome in words (``spoken.result_for_model``); shown bare,
        a small model may read it out as JSON. Every result is shown so, not only the last, so
        that the prompt of the next turn begins as this one's did (its KV cache holds)."""
        system = self.system_prompt
        if self.summary:
            system += f"\n\nSummary of the call so far: {self.summary}"
        shown = [
            dataclasses.replace(m, content=result_for_model(m.content)) if m.role == "tool" else m
            for m in self.turns
        ]
        return [ChatMessage("system", system), *shown]

    # -- saved with the call, so that another worker can carry it on ----------------

    def saved(self) -> dict[str, Any]:
        return {
            "messages": [m.to_dict() for m in self.turns],  # tool calls and results too
            "summary": self.summary,
            "summarized_messages": self.summarized_messages,
            "system_prompt": self.system_prompt,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take up what :meth:`saved` wrote (the system prompt only if it had one)."""
        self.turns = [ChatMessage.from_dict(m) for m in state.get("messages", [])]
        self.summary = str(state.get("summary", ""))
        self.summarized_messages = int(state.get("summarized_messages", 0))
        if state.get("system_prompt"):
            self.system_prompt = str(state["system_prompt"])

    # -- edits by a client (messages are found by identity: equal texts stay distinct) ----

    def _index(self, message: ChatMessage) -> int | None:
        return next((i for i, m in enumerate(self.turns) if m is message), None)

    def remove(self, message: ChatMessage) -> bool:
        """Take ``message`` out; False if it is no longer there (trimmed or summarized)."""
        i = self._index(message)
        if i is None:
            return False
        del self.turns[i]
        return True

    def replace(self, message: ChatMessage, text: str) -> ChatMessage | None:
        """Give ``message`` new text in place; returns the new message, None if it is gone."""
        i = self._index(message)
        if i is None:
            return None
        self.turns[i] = dataclasses.replace(message, content=text)
        return self.turns[i]

    def insert_after(self, anchor: ChatMessage, message: ChatMessage) -> bool:
        """Put ``message`` right after ``anchor``; False if the anchor is gone."""
        i = self._index(anchor)
        if i is None:
            return False
        self.turns.insert(i + 1, message)
        return True


class CallRecorder:
    """Writes one call's record. Every write only queues (the store's contract), so none
    waits on a disk or a network from the event loop."""

    def __init__(self, store: CallStore | None, call: CallRecord) -> None:
        self._store = store
        self.call = call

    def started(self, info: dict[str, Any]) -> None:
        """The call began here, or was taken back here by a restore."""
        if self._store is not None:
            self._store.call_started(self.call, info)

    def message(self, turn_id: int, role: str, text: str, status: str | None = None) -> None:
        if self._store is not None:
            self._store.message(self.call, turn_id, role, text, status)

    def turn_finished(self, record: dict[str, Any]) -> None:
        """A reply's end: its timeline, as ``turn.metrics`` and the turn log carry it."""
        if self._store is not None:
            self._store.turn_finished(self.call, record)

    def save(self, state: dict[str, Any]) -> None:
        """What a new worker needs to carry the call on (``Session.state``)."""
        if self._store is not None:
            self._store.save_state(self.call, state)

    def ended(self, reason: str, counts: dict[str, Any]) -> None:
        if self._store is not None:
            self._store.call_ended(self.call, reason, counts)


REMEMBERED_TURN_ENDS = 128  # turns in flight whose end is remembered until they are answered


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


class FinishedReply(Protocol):
    """What the history reads of a reply that is done (a
    :class:`~voxpipe.conversation.reply.Reply`, which holds the history: named here by what
    is read of it, so that the two modules do not import each other)."""

    transcript: str
    audio: np.ndarray | None  # None: the reply answered no new words of the caller's
    user_message: ChatMessage | None
    continues: int
    repeats: int
    answers_unanswered: bool  # it answers the turn before, whose reply had no word yet
    tracker: PlaybackTracker

    @property
    def turn_id(self) -> int: ...

    @property
    def answer_text(self) -> str: ...


class OfferedTools(Protocol):
    """The tools every prompt of the call offers (the session's
    :class:`~voxpipe.conversation.tool_ledger.ToolLedger`, which holds the history)."""

    def offered(self) -> list[ToolSpec] | None: ...


class TurnHistory:
    def __init__(
        self,
        history: History,
        finished: FinishedTurns,
        answered: AnsweredAudio,
        counts: Counter[str],
    ) -> None:
        self._history = history
        self._finished = finished
        self._answered = answered
        self._counts = counts

    def commit_turn(self, turn_id: int, transcript: str) -> ChatMessage | None:
        """A reply is about to record a tool call: the caller's words of its turn go into
        the history first, and the turn counts as answered (its audio is not resent to
        another worker, which answers from the recorded call instead)."""
        self._answered.answered(turn_id)
        if any(c.isalnum() for c in transcript):
            return self._history.add_user(transcript)
        return None

    def turn_ended(self, turn_id: int, sample: int) -> None:
        """The caller's turn ``turn_id`` ended at ``sample`` of this worker's audio: once it
        is answered, a restore resends the caller's audio from there."""
        self._answered.turn_ended(turn_id, sample)

    def reply_finished(self, reply: FinishedReply) -> None:
        """``reply`` is done: its turn's words and answer join the history (those not there
        yet), and the turn is answered."""
        user, assistant = reply.user_message, None
        if reply.continues:
            assistant = self._carry_on(reply)  # a second backchannel joins it again
        else:
            if user is None and any(ch.isalnum() for ch in reply.transcript):
                user = self._history.add_user(reply.transcript)
            answers = user is not None or reply.audio is None or reply.answers_unanswered
            if reply.answer_text and answers:
                assistant = self._history.add_assistant(reply.answer_text)
        self._finished.remember(reply.turn_id, TurnMessages(user, assistant, reply.tracker))
        self._answered.answered(reply.turn_id)  # a restore resends no audio of it

    def _carry_on(self, reply: FinishedReply) -> ChatMessage | None:
        """A false interruption's reply said the rest of the one it stopped: the history
        holds the two as the one answer the caller heard, and no turn of the caller's.
        Returns the message that now holds the answer."""
        self._counts["false_interruptions"] += 1
        said, stopped = reply.answer_text, self._finished.get(reply.continues)
        held = stopped.assistant if stopped is not None else None
        if not said:
            return held
        if stopped is not None and held is not None:
            kept = held.content.split()
            kept = kept[: len(kept) - reply.repeats]  # the cut sentence is said again whole
            joined = self._history.replace(held, " ".join([*kept, said]))
            if joined is not None:
                stopped.assistant = joined
                return joined
        return self._history.add_assistant(said)


REMEMBERED_TURNS = 128  # finished turns whose messages a client may still edit


@dataclass
class TurnMessages:
    """What a finished turn left in the history, so a client can edit it later."""

    user: ChatMessage | None
    assistant: ChatMessage | None
    tracker: PlaybackTracker  # which reply audio spoke which words


class FinishedTurns:
    """The last :data:`REMEMBERED_TURNS` finished turns, by turn id, oldest first."""

    def __init__(self, history: History) -> None:
        self._history = history
        self._turns: dict[int, TurnMessages] = {}

    def remember(self, turn_id: int, messages: TurnMessages) -> None:
        self._turns[turn_id] = messages
        while len(self._turns) > REMEMBERED_TURNS:
            del self._turns[next(iter(self._turns))]

    def get(self, turn_id: int) -> TurnMessages | None:
        return self._turns.get(turn_id)

    def delete(self, message: ChatMessage) -> bool:
        """Take a message out of the history; False if it is already gone."""
        for turn in self._turns.values():
            if turn.user is message:
                turn.user = None
            if turn.assistant is message:
                turn.assistant = None
        return self._history.remove(message)

    def truncate(self, turn_id: int, audio_end_ms: float) -> str | None:
        """Reply ``turn_id`` was played only up to ``audio_end_ms`` of its audio: the history
        keeps just the words spoken until then (and may grow back to more of them). Returns
        the text kept; None if the turn is unknown (never finished, or too old)."""
        turn = self._turns.get(turn_id)
        if turn is None:
            return None
        tracker = turn.tracker
        heard = min(tracker.sent_samples, int(audio_end_ms * tracker.rate / 1000))
        text = tracker.text_until(heard)
        if turn.assistant is not None:
            if text:
                turn.assistant = self._history.replace(turn.assistant, text)
            else:
                self._history.remove(turn.assistant)
                turn.assistant = None
        elif text and turn.user is not None:
            message = ChatMessage("assistant", text)
            if self._history.insert_after(turn.user, message):
                turn.assistant = message
        return text


log = logging.getLogger("voxpipe.summarizer")

INSTRUCTIONS = (
    "Summarize this phone call in at most three sentences for the assistant's memory. Keep "
    "names, numbers, requests and promises. Write plain sentences, no lists."
)


class Summarizer:
    def __init__(
        self,
        session_id: str,
        services: Services,
        history: History,
        ledger: OfferedTools | None = None,
    ) -> None:
        """``ledger``: the tools the next reply will be offered (its prompt holds them, so
        the prefill after a summary must too, or the cached prefix would not match)."""
        self.session_id = session_id
        self.services = services
        self.history = history
        self._ledger = ledger
        self._task: asyncio.Task[None] | None = None
        self._cancel = CancelToken()
        self.summaries = 0
        self.prefilled_tokens = 0  # by prefills after stale turns (not after summaries)
        self.last: dict[str, Any] = {}

    def _offered(self) -> list[ToolSpec] | None:
        return self._ledger.offered() if self._ledger is not None else None

    def after_turn(self, llm: dict[str, Any], stale: bool = False) -> None:
        """``llm``: the turn's LLM counters; ``stale``: the turn's history is not what its
        generation left in the KV cache (a tool ran, or the answer was cut short)."""
        if self.busy:
            return
        self._cancel = CancelToken()
        if self._due(llm):
            self._task = asyncio.create_task(
                self._run(self._cancel), name=f"summary-{self.session_id}"
            )
        elif stale and self.services.llm.idle:  # optional work never delays another call
            self._task = asyncio.create_task(
                self._prefill(self._cancel), name=f"prefill-{self.session_id}"
            )

    def _due(self, llm: dict[str, Any]) -> bool:
        cfg = self.services.config.llm
        return (
            bool(cfg.summarize_after_tokens)
            and llm.get("prompt_tokens", 0) - llm.get("instruction_tokens", 0)
            >= cfg.summarize_after_tokens
            and len(self.history.turns) > cfg.keep_recent_messages
        )

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def pause(self) -> None:
        """A reply is starting and will need the LLM after its STT: stop; retry later."""
        self._cancel.cancel()

    async def _run(self, cancel: CancelToken) -> None:
        cfg = self.services.config.llm
        turns = self.history.turns
        keep = len(turns) - cfg.keep_recent_messages
        while 0 < keep < len(turns) and turns[keep].role == "tool":
            keep += 1  # a call's results stay with their call
        older = turns[:keep]
        text = "\n".join(f"{m.role}: {m.content}" for m in older)
        if self.history.summary:
            text = f"Earlier: {self.history.summary}\n{text}"
        messages = [ChatMessage("system", INSTRUCTIONS), ChatMessage("user", text)]
        llm = self.services.llm
        usage, clock = LlmUsage(), JobClock()
        parts: list[str] = []
        try:
            background = Urgency(held=True)  # never ahead of a caller's turn in the batch
            request = LlmRequest(
                f"{self.session_id}#summary", messages, cancel, usage, urgency=background
            )
            stream = llm.stream(request, clock)
            async with contextlib.aclosing(stream):
                async for delta in stream:
                    if isinstance(delta, str):  # offered no tools, it can call none
                        parts.append(delta)
            summary = "".join(parts).strip()
            if cancel.cancelled or not summary:
                return
            self.history.replace_oldest(len(older), summary)
            self.summaries += 1
            warm = await llm.prefill(
                self.session_id, self.history.messages(), cancel, tools=self._offered()
            )
            self.last = {
                "summarized_messages": len(older),
                "summary_tokens": usage.completion_tokens,
                "summary_s": round(clock.compute_s, 3),
                "prewarmed_tokens": warm.prefill_tokens,
            }
            log.info("session %s: summarized %d messages", self.session_id, len(older))
        except EngineBusy:
            return
        finally:
            llm.forget(f"{self.session_id}#summary")

    async def _prefill(self, cancel: CancelToken) -> None:
        with contextlib.suppress(EngineBusy):
            warm = await self.services.llm.prefill(
                self.session_id, self.history.messages(), cancel, tools=self._offered()
            )
            self.prefilled_tokens += warm.prefill_tokens

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        self._cancel.cancel()
        await self.wait()
