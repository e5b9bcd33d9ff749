"""A reply's requests to the model: what each asks, with which tools, and where its words go.

A reply (``reply.py``) asks the model once, or with tools once per tool round (up to
``MAX_TOOL_ROUNDS`` with tools offered, then once without). What the model writes passes the
speech filter (``spoken.py``), and what passes is the answer: the client's transcript
(``ResponseTextDelta``), the clause chunker and the reply's voice (``reply_audio.py``). A
tool call ends the words before it and goes to a
:class:`~voxpipe.conversation.tool_step.ToolRound`; from the first sign of one until the
answer's first words a :class:`~voxpipe.conversation.tool_step.SilenceGuard` says the tool's
phrase. A reply given its words (a greeting, the rest of an interrupted reply) makes the same
one round with those words in place of the model's.

Until a tool has answered, the first request's words also pass a claim gate
(``claims.py``): a sentence that states what a tool owns, with nothing behind it, is not said,
and the model is asked once more, for a call.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from voxpipe.agent.closing import closes_the_call
from voxpipe.conversation.claims import ClaimGate, ClaimRules, forced_calls, known_words
from voxpipe.conversation.events import Event, ResponseTextDelta
from voxpipe.conversation.reply_audio import ReplyAudio
from voxpipe.conversation.reply_context import ReplyContext
from voxpipe.conversation.spoken import ClauseChunker, SpeechFilter, instead_of_markup
from voxpipe.conversation.tool_step import (
    MAX_TOOL_ROUNDS,
    SilenceGuard,
    ToolOutcome,
    ToolRound,
    ends_on_result,
)
from voxpipe.engines.base import ChatMessage, JobClock, LlmRequest, LlmUsage, ToolCallDelta
from voxpipe.observability.timeline import StageTimer

if TYPE_CHECKING:  # names in annotations only
    from voxpipe.engines.base import CancelToken, LlmOutput, ToolCallRequest, ToolSpec, Urgency


@dataclass(frozen=True)
class Asked:
    """What one reply answers, as its requests need it."""

    turn_id: int
    transcript: str | None  # the caller's words; None: a client asked (the history as it is)
    say: str | None  # words to say as they are (a greeting, a rest): no LLM
    tool_choice: str | None  # this reply's own (a Realtime response's); None: the session's


class AnsweringReply(Protocol):
    """What the rounds write back into their reply, for the session to read, and what they
    ask of it (:class:`~voxpipe.conversation.reply.Reply` is the one)."""

    generated: str  # every word of the answer so far
    user_message: ChatMessage | None  # the caller's words, put in the history early
    words_before: int  # words said before a tool call: that call's message holds them

    async def emit(self, event: Event) -> None:
        """The reply's events to the client: held back while the reply is held."""

    async def confirmed(self) -> bool:
        """Until a held reply is released: False if it was thrown away, or stopped."""


class ReplyRounds:
    """The model's side of one reply: :meth:`run` asks, round after round, and speaks. It
    is the :class:`~voxpipe.conversation.tool_step.ReplyVoice` of its tool rounds."""

    def __init__(
        self,
        reply: AnsweringReply,
        ctx: ReplyContext,
        asked: Asked,
        cancel: CancelToken,
        stages: StageTimer,
        urgency: Urgency,
        audio: ReplyAudio,
    ) -> None:
        self._reply, self._ctx, self._asked = reply, ctx, asked
        self.turn_id, self.cancel, self.stages = asked.turn_id, cancel, stages
        self._urgency, self.audio = urgency, audio
        self._chunker = ClauseChunker(ctx.services.config.chunker)
        self._speech = SpeechFilter()  # between the model's text and all that it goes to
        self._guard: SilenceGuard | None = None
        self._tools_closed = False  # the next request is offered no tools
        self._claims: ClaimGate | None = None  # the request's claim gate (claims.py), if any

    async def run(self, usage: LlmUsage, clock: JobClock) -> None:
        """Every request of the reply, until one ends it: no call, a client's call, a
        question for the caller, the results' own words, or the rounds spent. ``usage`` and
        ``clock`` are the first request's."""
        messages, cancel = self._prompt(), self.cancel
        try:
            for round_no in itertools.count():
                tools, choice = self._offered(round_no)
                used, timed = (usage, clock) if round_no == 0 else (LlmUsage(), JobClock())
                ledger = self._ctx.ledger
                tools_round = None
                if ledger is not None and tools and choice != "none":
                    tools_round = ToolRound(self, ledger)
                self._claims = self._claim_gate(round_no, messages, tools, choice)
                with self.stages.llm(timed, used):
                    text, calls, wrote = await self._request(
                        round_no, messages, (tools, choice), (timed, used), tools_round
                    )
                if not cancel.cancelled:
                    text += await self._say(self._passed(self._speech.flush(), final=True))
                    if self._claims is not None and self._claims.stopped is not None:
                        more, calls = await self._instead_of_claim(messages, tools, tools_round)
                        text += more
                    elif wrote and not text.strip() and not calls:  # only markup
                        text += await self._say(instead_of_markup(messages))
                if round_no:
                    self.stages.llm_again(timed, used)
                if not calls and not cancel.cancelled and tools_round is not None:
                    if choice == "auto" and (implied := tools_round.implied(tools, text)):
                        await tools_round.run(implied)  # the words stay the answer, as heard
                    break
                if cancel.cancelled or not calls or tools_round is None:
                    break
                outcome = await tools_round.run(calls, text.strip())
                if outcome not in (ToolOutcome.REPEATED, ToolOutcome.ASK):
                    self._reply.words_before += len(text.split())  # the calls' message has them
                says = outcome.asks_again or outcome is ToolOutcome.ASK
                if not says:
                    break
                if (said := tools_round.answer()) is not None and not cancel.cancelled:
                    await self._say(said)  # the tools said the answer (or ask): no model round
                    break
                if not outcome.asks_again:
                    break
                self._tools_closed = outcome is not ToolOutcome.ANSWER
                messages = self._prompt()
            if not cancel.cancelled:
                await self._flush_clauses()
        finally:
            await self._stop_guard()
            await self.audio.end()  # done or failed: no filler from here on

    async def _request(
        self,
        round_no: int,
        messages: list[ChatMessage],
        offer: tuple[Sequence[ToolSpec] | None, str],
        timing: tuple[JobClock, LlmUsage],
        tools_round: ToolRound | None,
    ) -> tuple[str, list[ToolCallRequest], bool]:
        """One request: its words said as they come, its calls collected. Returns the
        words, the calls, and whether the model wrote text (all of it maybe markup)."""
        cancel, stages, speech = self.cancel, self.stages, self._speech
        counters = stages.timeline.counters
        calls: list[ToolCallRequest] = []
        text = ""  # this request's words
        wrote = False  # the model wrote text, which may all have been markup
        approved = self._approved(round_no, tools_round)
        stream = self._stream(messages, offer, *timing) if approved is None else _called(approved)
        async with contextlib.aclosing(stream):
            async for item in stream:
                if cancel.cancelled:
                    break
                if isinstance(item, str):
                    stages.token()
                    if self._urgency.late and "late" not in counters:
                        self._chunker.hurry()  # shed work: past capacity
                        counters["late"] = True
                    wrote = True
                    text += await self._say(self._passed(speech.push(item)))
                    if self._claims is not None and self._claims.stopped is not None:
                        break  # an unbacked claim: no more of these words (run asks again)
                elif tools_round is not None:  # a call: say what came before
                    text += await self._say(self._passed(speech.flush(), final=True))
                    await self._flush_clauses()
                    if isinstance(item, ToolCallDelta):
                        await tools_round.writing(item)
                    else:
                        calls.append(item)
        return text, calls, wrote

    def _passed(self, words: str, final: bool = False) -> str:
        """What of ``words`` the claim gate lets through now (all of them without one)."""
        gate = self._claims
        if gate is None:
            return words
        passed = gate.push(words)
        return passed + gate.flush() if final else passed

    def _claim_gate(
        self,
        round_no: int,
        messages: list[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        choice: str,
    ) -> ClaimGate | None:
        """A gate for the model's words when they may state what a tool owns with no result
        behind them: the reply's first request, with tools the model may call or not."""
        if round_no or not tools or choice != "auto" or self._asked.say is not None:
            return None
        if not self._ctx.services.config.llm.hold_claims:
            return None
        return ClaimGate(ClaimRules(tools), known_words(messages))

    async def _instead_of_claim(
        self,
        messages: list[ChatMessage],
        tools: Sequence[ToolSpec] | None,
        tools_round: ToolRound | None,
    ) -> tuple[str, list[ToolCallRequest]]:
        """The model's words stated a claim no tool backs: ask it again, for a call (the
        words said before the claim stay). The calls it writes run as
        :func:`~voxpipe.conversation.claims.forced_calls` keeps them, or the caller hears
        what it says instead. A model that answers in words again (a remote one may) is
        gated again, and an unbacked claim then gives way to the apology."""
        gate = self._claims
        assert gate is not None and gate.stopped is not None
        self.stages.unbacked_claim(gate.stopped.kind, gate.stopped.text)
        self._claims = ClaimGate(gate.rules, gate.known)
        timed, used = JobClock(), LlmUsage()
        with self.stages.llm(timed, used):
            text, calls, _ = await self._request(
                1, messages, (tools, "required"), (timed, used), tools_round
            )
        self.stages.llm_again(timed, used)
        if not self.cancel.cancelled:
            text += await self._say(self._passed(self._speech.flush(), final=True))
        words_again = self._claims.stopped is None and not calls  # said: none a claim
        self._claims = None
        ledger = self._ctx.ledger
        if self.cancel.cancelled or words_again or ledger is None:
            return text, []
        own = {s.name: t for s in tools or () if (t := ledger.tool(s.name)) is not None}
        forced = forced_calls(calls, own, self.caller_said())
        if forced.ask:
            ledger.confirmation.ask(self.turn_id, forced.ask)
        if (instead := forced.instead) is not None:
            text += await self._say(instead)
        return text, forced.run

    async def _say(self, words: str) -> str:
        """Words the caller may hear (``speech``'s): sent, chunked and spoken. The guard
        stops at the first clause, when the answer's audio is on its way: under load its
        first words may take most of a second more to make a clause."""
        if words:
            self.audio.first_words.set()
            self._reply.generated += words
            await self.emit(ResponseTextDelta(self.turn_id, words))
            for clause in self._chunker.push(words):
                await self._stop_guard()
                await self.audio.clause(clause)
        return words

    async def _flush_clauses(self) -> None:
        for clause in self._chunker.flush():
            await self._stop_guard()
            await self.audio.clause(clause)

    async def emit(self, event: Event) -> None:
        """The reply's events (:meth:`Reply.emit`: held back while it is held)."""
        await self._reply.emit(event)

    async def confirmed(self) -> bool:
        """Until a held reply is released (:meth:`Reply.confirmed`); False: thrown away."""
        return await self._reply.confirmed()

    def keep_talking(self, phrase: str, writing: bool = False) -> None:
        """A tool round's sign of a call: the guard says ``phrase`` if the silence goes on
        (one guard a reply, started by the first sign or the filler); ``writing``: the call
        is still being written (``SilenceGuard.writing``), as of this sign."""
        guard = self._start_guard()
        if guard is not None:
            guard.expect(phrase, writing)

    def hold_the_line(self) -> None:
        """The filler has been said and no words follow yet: from now on the caller hears
        a follow-up rather than a silence of over a second (``SilenceGuard``)."""
        if not self.audio.first_words.is_set():
            self._start_guard()

    def _start_guard(self) -> SilenceGuard | None:
        if self._guard is None and not self.cancel.cancelled:
            name = f"guard-{self._ctx.session_id}-{self.turn_id}"
            self._guard = SilenceGuard(self.audio, self.stages.timeline, name)
        return self._guard

    async def _stop_guard(self) -> None:
        if self._guard is not None:
            await self._guard.stop()
            self._guard = None

    # -- what the model is asked, and with which tools ---------------------------

    def _prompt(self) -> list[ChatMessage]:
        messages = self._ctx.history.messages()
        transcript = self._asked.transcript
        if transcript is not None and self._reply.user_message is None:
            messages.append(ChatMessage("user", transcript))  # not in the history yet
        return messages if self._ctx.ledger is None else self._ctx.ledger.prompt(messages)

    def may_call(self) -> bool:
        """Whether the reply's first request is offered tools: its words then wait for the
        decision on a call (``deadlines.filler_ms``). Not when the caller takes their leave:
        "One moment." is no answer to a goodbye, and a farewell's reply (its ``end_call``
        included) is quick."""
        transcript = self._asked.transcript
        return self._tools() is not None and not (transcript and closes_the_call(transcript))

    def _tools(self) -> list[ToolSpec] | None:
        """The tools every request of this reply is offered (None: none, or words to say)."""
        ledger = self._ctx.ledger
        return ledger.offered() if ledger is not None and self._asked.say is None else None

    def _offered(self, round_no: int) -> tuple[list[ToolSpec] | None, str]:
        """The tools of request ``round_no`` and the tool choice. Every request of a call
        has the same tools in its prompt (its cached prefix holds); a request that may not
        call (the fourth, after a tool changed something, or asked for on a client tool's
        output) is told "none"."""
        ledger, asked, tools = self._ctx.ledger, self._asked, self._tools()
        if not tools or ledger is None:
            return None, "auto"
        self.stages.offer_tools()
        client_asked = asked.transcript is None
        answering = not round_no and client_asked and ends_on_result(self._ctx.history.messages())
        if round_no >= MAX_TOOL_ROUNDS or self._tools_closed or answering:
            return tools, "none"
        return tools, (asked.tool_choice or ledger.tool_choice) if round_no == 0 else "auto"

    def _stream(
        self,
        messages: list[ChatMessage],
        offer: tuple[Sequence[ToolSpec] | None, str],
        clock: JobClock,
        usage: LlmUsage,
    ) -> AsyncGenerator[LlmOutput, None]:
        if self._asked.say is not None:
            return _said(self._asked.say)
        tools, tool_choice = offer
        request = LlmRequest(
            self._ctx.session_id,
            messages,
            self.cancel,
            usage,
            tools=tuple(tools or ()),
            tool_choice=tool_choice,
            trace_headers=self.stages.trace_headers(),
            urgency=self._urgency,
        )
        return self._ctx.services.llm.stream(request, clock, self.audio.llm_gate)

    def _approved(self, round_no: int, tools: ToolRound | None) -> ToolCallRequest | None:
        """A caller's plain yes to the call read back last turn: that call is this
        request's, with no model asked (``confirmation.py``)."""
        ledger, transcript = self._ctx.ledger, self._asked.transcript
        if round_no or tools is None or ledger is None or transcript is None:
            return None
        return ledger.confirmation.approved(transcript)

    def caller_said(self) -> str:
        """The caller's words this reply answers: its transcript, or for a reply a client
        asked for, the history's latest user message."""
        if self._asked.transcript is not None:
            return self._asked.transcript
        users = [m.content for m in self._ctx.history.messages() if m.role == "user"]
        return users[-1] if users else ""

    def commit_turn(self) -> None:
        """A call is about to be recorded: the caller's words go into the history first."""
        transcript, reply = self._asked.transcript, self._reply
        if reply.user_message is None and transcript is not None:
            reply.user_message = self._ctx.turns.commit_turn(self.turn_id, transcript)


async def _called(call: ToolCallRequest) -> AsyncGenerator[LlmOutput, None]:
    """A call the caller approved, in place of the LLM's output."""
    yield call


async def _said(text: str) -> AsyncGenerator[LlmOutput, None]:
    """Words said as they are (a greeting), in place of the LLM's."""
    yield text
