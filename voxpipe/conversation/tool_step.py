"""Tool calls inside a reply: what the caller hears and what is recorded, in which order.

When the model calls a tool, the reply (``reply.py``) hands the call to a
:class:`ToolRound`. The round waits until a held reply is confirmed (nothing runs on a
turn the caller may still be speaking), puts the caller's words and the call into the
history and the store, tells the client (``tool.started``), runs each call through the
session's :class:`~voxpipe.conversation.tool_ledger.ToolLedger`, and tells the client
again (``tool.finished``) once the result is recorded; then the reply asks the model
again, with the results. A call of the client's own tools (Realtime) is not run: the
reply ends there and the client answers it.

Meanwhile a :class:`SilenceGuard` keeps the line alive: from the first sign of a call
(the model writing one) until the answer's first words, it says the tool's phrase once
the call has run about 300 ms (a beat after a filler, never on top of it), and a short
follow-up whenever the silence would otherwise pass a second, which a caller takes for a
line gone quiet. Silence is counted as the caller hears it, from the end of their words: a
call the model began writing a second after them gets its phrase at once, not 300 ms later
(``bench tool-turns`` found callers talking into such phrases). So does a call still being
written once the caller has waited 600 ms: the embedded model names a call about a second
after the words and writes its arguments for most of a second more, so the answer is far
off and 300 ms more would only be more silence. A call already written waits its 300 ms: a
quick tool's answer may come first.

A call of a tool that asks first (``ToolPolicy.confirm``) is not run when the model makes
it: the round asks for what the caller never said, or reads the call back and ends the
reply (ASK); the caller's yes in the next turn runs it (``confirmation.py``). A call of any
other tool, a lookup too, is asked about, not run, when a value of it was made up whole (no
word or number of it said or returned in the call): a small model takes a read sentence for
a request and checks a table for "20 October 2023", and its answer ("That day has already
passed.") would be a fact about a question nobody asked.

A barge-in stops the round: the ledger cancels a read-only tool and lets any other run to
its end (``tool_ledger.py``).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from voxpipe.agent import InvalidArguments, Tool, ToolCall, ToolEffect, ToolResult, ToolStatus
from voxpipe.conversation.confirmation import (
    PendingAction,
    as_said,
    leave_out,
    question_for,
    readback,
    unheard_fields,
)
from voxpipe.conversation.events import Event, ToolArgumentsDelta, ToolStarted
from voxpipe.conversation.reply_audio import ReplyAudio
from voxpipe.conversation.tool_ledger import ToolLedger, ToolRun
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
    new_tool_call_id,
)
from voxpipe.observability.timeline import StageTimer, TurnTimeline

PHRASE_AFTER_S = 0.3  # a call running this long gets its phrase
PHRASE_QUIET_S = 0.6  # ... and so does one still being written, past this much silence
AFTER_FILLER_S = 0.3  # ... but not within this long after other words (the filler)
MAX_SILENCE_S = 1.0  # the longest silence the caller hears while a tool runs
SPEAK_AHEAD_S = 0.3  # a phrase is queued this long before that: pacing and the line's delay
TICK_S = 0.05
FOLLOW_UPS = ("Still working on it.", "Almost there.", "Thanks for waiting.")
NOT_RUN = "not run: the caller spoke first"
MAX_TOOL_ROUNDS = 3  # requests with tools in one turn; the next one answers without


def phrases_of(toolbox: Iterable[Tool]) -> set[str]:
    """Everything a :class:`SilenceGuard` or a timeout may say for these tools (the
    follow-ups with none: a guard also holds the line after the filler): the server
    synthesizes them at start-up (``Services.phrases``)."""
    said = {text for t in toolbox for text in (t.policy.phrase, t.policy.timeout_phrase)}
    return {text for text in (*said, *FOLLOW_UPS) if text.strip()}


class ToolOutcome(enum.Enum):
    ANSWER = "answer"  # the results are in the history: ask the model again
    CONFIRM = "confirm"  # a tool changed something: the model says so, with no tools
    REPEATED = "repeated"  # it asked again for what it has: it answers, with no tools
    CLIENT = "client"  # the client runs a call: the reply ends here
    ASK = "ask"  # a call waits for the caller: the reply says the question and ends
    STOPPED = "stopped"  # the reply was stopped (a barge-in, the call closing)

    @property
    def asks_again(self) -> bool:
        return self in (ToolOutcome.ANSWER, ToolOutcome.CONFIRM, ToolOutcome.REPEATED)


class ReplyVoice(Protocol):
    """What a tool round asks of its reply's rounds
    (:class:`~voxpipe.conversation.reply_rounds.ReplyRounds` is the one; it imports this
    module, so it is named here by what it does)."""

    turn_id: int
    cancel: CancelToken
    stages: StageTimer
    audio: ReplyAudio  # its voice: a timeout's phrase is spoken, but not part of the answer

    async def emit(self, event: Event) -> None:
        """The reply's events to the client (held back while the reply is held)."""

    def keep_talking(self, phrase: str, writing: bool = False) -> None:
        """Start a :class:`SilenceGuard`, if none runs, and give it ``phrase`` to say first;
        ``writing``: the model is still writing the call (:attr:`SilenceGuard.writing`)."""

    async def confirmed(self) -> bool:
        """Until a held reply is released: False if it was thrown away, or stopped."""

    def commit_turn(self) -> None:
        """The caller's words join the history, ahead of a call."""

    def caller_said(self) -> str:
        """The caller's words this reply answers."""


class ToolRound:
    """The tool calls of one LLM request of a reply."""

    def __init__(self, voice: ReplyVoice, ledger: ToolLedger) -> None:
        self._voice = voice
        self._ledger = ledger
        self._said: list[str | None] = []  # per server call run: what its result says
        self._asked: str | None = None  # ASK: the question or readback to say

    def answer(self) -> str | None:
        """The words of the results, when every call run has a result that says its
        answer (``ToolPolicy.says``): the reply speaks them and asks the model nothing.
        After ASK, the question or readback."""
        if self._asked is not None:
            return self._asked
        if not self._said or None in self._said:
            return None
        return " ".join(s for s in self._said if s)

    async def writing(self, delta: ToolCallDelta) -> None:
        """The model is writing a call's arguments: a client sees its own tool's arguments
        come; a server tool's phrase is due from now."""
        if delta.name:  # what a phrase can fit: the arguments may still be coming
            self._voice.stages.timeline.mark("tool_named")
        if self._ledger.runs_on_client(delta.name):
            if not delta.arguments_delta:
                return
            await self._voice.emit(
                ToolArgumentsDelta(
                    self._voice.turn_id, delta.call_id, delta.name, delta.arguments_delta
                )
            )
        elif delta.name:
            self._voice.keep_talking(self._phrase(delta.name, running=False), writing=True)

    def _phrase(self, name: str, running: bool = True) -> str:
        """The tool's phrase; none while the model writes a call that will be read back
        first ("Booking that for you." before "Shall I book it?" says it happened)."""
        tool = self._ledger.tool(name)
        if tool is None or (tool.policy.confirm and not running):
            return ""
        return tool.policy.phrase

    async def run(self, calls: Sequence[ToolCallRequest], text: str = "") -> ToolOutcome:
        """Record ``calls`` (made after saying ``text``) and run the server's; the results
        are in the history when this returns ANSWER or CONFIRM.

        A small model, shown a result, often makes the same call again: a call this turn
        already made (same tool, same arguments) is dropped, not run, and the model answers
        without tools (REPEATED). Once a tool has changed something, the model's next words
        confirm it, without tools (CONFIRM): a second booking is never a mistake away."""
        voice, ledger = self._voice, self._ledger
        voice.stages.timeline.mark("tool_named")  # an engine that writes no deltas, here
        answer = voice.caller_said()
        calls = [ledger.confirmation.completed(voice.turn_id, c, answer) for c in calls]
        calls = [
            c for c in calls if not ledger.made_before(voice.turn_id, c) and self._allowed(c.name)
        ]
        if not calls:
            return ToolOutcome.REPEATED
        if not await voice.confirmed():
            return ToolOutcome.STOPPED
        voice.commit_turn()
        calls = [self._without_made_up_options(self._as_said(c, answer)) for c in calls]
        if (asked := self._ask_first(calls)) is not None:
            self._asked = asked
            return ToolOutcome.ASK
        ledger.record_calls(voice.turn_id, calls, text)
        outcome = ToolOutcome.ANSWER
        for call in calls:
            client = ledger.runs_on_client(call.name)
            if client or outcome is not ToolOutcome.STOPPED:
                await voice.emit(
                    ToolStarted(
                        voice.turn_id,
                        call.call_id,
                        call.name,
                        dict(call.arguments),
                        call.arguments_json,
                        "client" if client else "server",
                    )
                )
            if client:
                outcome = ToolOutcome.CLIENT if outcome is ToolOutcome.ANSWER else outcome
            elif outcome is ToolOutcome.STOPPED or voice.cancel.cancelled:
                outcome = ToolOutcome.STOPPED
                self._skip(call)
            elif not await self._run_one(call):
                outcome = ToolOutcome.STOPPED
            elif outcome is ToolOutcome.ANSWER and self._changed_something(call):
                outcome = ToolOutcome.CONFIRM
        return outcome

    def implied(self, tools: Sequence[ToolSpec] | None, said: str) -> list[ToolCallRequest]:
        """The calls the model's words ``said`` stand for, when it answered without one: a
        tool whose ``ToolPolicy.implied_by_reply`` the words pass and whose gate the
        caller's words pass (a goodbye said back to one: ``end_call``). Run with no words of
        their own, they go into the history ahead of the answer, which keeps what was heard
        of ``said``."""
        implied = []
        for spec in tools or ():
            tool = self._ledger.tool(spec.name)
            stands_for = tool.policy.implied_by_reply if tool is not None else None
            if stands_for is not None and stands_for(said) and self._allowed(spec.name):
                implied.append(ToolCallRequest(new_tool_call_id(), spec.name, {}, "{}"))
        return implied

    def _allowed(self, name: str) -> bool:
        """False for a call to a tool that gates on the caller's words of this turn when
        they fail it (``ToolPolicy.only_if_caller_said``): dropped like a repeated call."""
        tool = self._ledger.tool(name)
        gate = tool.policy.only_if_caller_said if tool is not None else None
        return gate is None or gate(self._voice.caller_said())

    def _ask_first(self, calls: Sequence[ToolCallRequest]) -> str | None:
        """What to say instead of running ``calls``: a question for a value the caller
        never gave, or the readback of a call that waits for their yes; None: run them.
        Arguments the tool refuses are not asked about, unless made up: the call runs and
        fails, and the model reads why (a date made up in the past would have it say "That
        day has already passed." to a caller who named no day)."""
        turn_id, confirmation = self._voice.turn_id, self._ledger.confirmation
        for call in calls:
            tool = self._ledger.tool(call.name)
            if tool is None or call.error:
                continue
            if confirmation.take_approved(turn_id, call):
                continue
            try:
                valid = tool.validate(call.arguments)
            except InvalidArguments:  # runs and fails, unless a value of it was made up
                valid = None
            if unheard := self._unheard(tool, call):
                confirmation.ask(turn_id, unheard, call)
                return question_for(unheard)
            if valid is None:
                continue
            if tool.policy.confirm:
                confirmation.hold(PendingAction(turn_id, call))
                return readback(tool, call.arguments, valid)
        return None

    def _as_said(self, call: ToolCallRequest, answer: str) -> ToolCallRequest:
        """``call`` with a time or day it would be asked about written as the caller said
        it in ``answer`` (``confirmation.as_said``); a call read back is the caller's to
        approve as it was read."""
        tool = self._ledger.tool(call.name)
        if tool is None or call.error or self._ledger.confirmation.read_back(call):
            return call
        return as_said(tool, call, answer, self._unheard(tool, call))

    def _without_made_up_options(self, call: ToolCallRequest) -> ToolCallRequest:
        """``call`` without the optional values it would be asked about: an argument the
        caller need not give is left out, not asked for (a booking reference nobody said,
        written by the model to a cancellation by name)."""
        tool = self._ledger.tool(call.name)
        if tool is None or call.error:
            return call
        return leave_out(call, tool.spec, self._unheard(tool, call))[0]

    def _unheard(self, tool: Tool, call: ToolCallRequest) -> list[str]:
        """The values of ``call`` to ask for: for a tool that asks first, any the caller
        never said; for any other (a lookup too: its answer is to a question nobody asked),
        any made up whole."""
        turn_id, confirmation = self._voice.turn_id, self._ledger.confirmation
        answering = any(confirmation.answers(turn_id, name) for name in call.arguments)
        answer = self._voice.caller_said() if answering else ""  # to our question
        own = confirmation.own_names()
        if tool.policy.confirm:
            return unheard_fields(tool, call.arguments, confirmation.caller_words(), own, answer)
        backed, caller = confirmation.backed_words(), confirmation.caller_words()
        return unheard_fields(tool, call.arguments, backed, own, answer, True, caller)

    def _changed_something(self, call: ToolCallRequest) -> bool:
        tool = self._ledger.tool(call.name)
        return (
            tool is not None
            and tool.policy.effect is ToolEffect.MUTATING
            and self._ledger.answered_ok(call.call_id)
        )

    def _skip(self, request: ToolCallRequest) -> None:
        """A call the reply never got to: answered as cancelled, so none waits forever."""
        call = ToolCall(request.call_id, request.name, dict(request.arguments))
        run = ToolRun(self._voice.turn_id, request, self._ledger.tool(request.name))
        self._ledger.settle(run, ToolResult.failed(call, ToolStatus.CANCELLED, NOT_RUN))

    async def _run_one(self, call: ToolCallRequest) -> bool:
        """Run one call; False if the reply was stopped before its result."""
        voice = self._voice
        voice.keep_talking(self._phrase(call.name))
        run = self._ledger.start(voice.turn_id, call)
        with voice.stages.tool(call.name, call.call_id) as timing:
            try:
                finished = await self._wait(run)
            finally:
                timing.status = str(run.result.status) if run.result is not None else "running"
        if not finished or run.result is None:
            if run.result is not None:  # cancelled with the reply (a read-only tool)
                await voice.emit(run.finished())
            return False
        if run.result.status is ToolStatus.TIMEOUT and run.tool is not None:
            await voice.audio.phrase(run.tool.policy.timeout_phrase)
        said = None
        if run.result.ok and run.tool is not None:
            said = run.tool.policy.says_in(run.result.output)
        self._said.append(said)
        await voice.emit(run.finished())
        return True

    async def _wait(self, run: ToolRun) -> bool:
        """Until the run ends or the reply is stopped (then the ledger decides what becomes
        of the run); True if it ended first."""
        stopped = asyncio.Event()
        unregister = self._voice.cancel.on_cancel(stopped.set)
        waiter = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait((run.task, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            unregister()
            if not run.task.done():
                self._ledger.stop(run)
        return not stopped.is_set()


class SilenceGuard:
    """Says something whenever the caller would sit in silence before the answer (module
    docstring), in the reply's voice (``audio``: it says when the caller's audio runs out,
    and whether the filler played). A reply's guard starts at the first sign of a call, or
    once the filler has played with no words behind it (a plain answer that is slow, or a
    call not yet begun): then it says follow-ups only, until a call gives it a phrase
    (:meth:`expect`). ``timeline`` marks the end of the caller's words, once known (a held
    reply's, when it is confirmed). ``writing``: the model is still writing the call, so
    its answer is far off; the round clears it once the call runs."""

    def __init__(
        self, audio: ReplyAudio, timeline: TurnTimeline, name: str = "silence-guard"
    ) -> None:
        self._audio = audio
        self._timeline = timeline
        self._phrase = ""
        self._phrase_since = 0  # the first sign of the call, monotonic ns
        self._phrase_said = False
        self.said: list[str] = []
        self.writing = False
        self._task = asyncio.create_task(self._run(), name=name)

    def expect(self, phrase: str, writing: bool) -> None:
        """A sign of a call: its ``phrase`` is said when due (the first call's, once)."""
        if phrase and not self._phrase:
            self._phrase, self._phrase_since = phrase, time.monotonic_ns()
        self.writing = writing

    async def _run(self) -> None:
        started = time.monotonic_ns()
        follow_ups = 0
        while True:
            await asyncio.sleep(TICK_S)
            quiet_since = self._audio.quiet_since_ns()
            if quiet_since is None:
                continue
            now = time.monotonic_ns()
            caller_done = self._timeline.marks_ns.get("speech_end")  # held: once confirmed
            silent_from = started if caller_done is None else min(caller_done, started)
            quiet_s = (now - max(quiet_since, silent_from)) / 1e9
            due = quiet_s >= MAX_SILENCE_S - SPEAK_AHEAD_S
            if self._phrase and not self._phrase_said:
                waited = (self.writing and quiet_s >= PHRASE_QUIET_S) or due
                if (now - self._phrase_since) / 1e9 < PHRASE_AFTER_S and not waited:
                    continue
                if self._audio.filler_queued and (now - quiet_since) / 1e9 < AFTER_FILLER_S:
                    continue
                text, self._phrase_said = self._phrase, True
            elif due:
                text = FOLLOW_UPS[follow_ups % len(FOLLOW_UPS)]
                follow_ups += 1
            else:
                continue
            self.said.append(text)
            await self._audio.phrase(text)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def ends_on_result(messages: Sequence[ChatMessage]) -> bool:
    """The conversation ends on a tool's result: a client ran its tool, sent the output and
    asked for a response. That response answers it in words: a small model shown a result
    otherwise calls the same tool again, as it would after a server tool."""
    return bool(messages) and messages[-1].role == "tool"
