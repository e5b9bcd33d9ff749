"""What a client may ask of a session itself, beyond sending audio: who ends turns, replies
on request, edits of the conversation, and its own tools (the OpenAI Realtime API's
``input_audio_buffer.commit``, ``response.create``, ``conversation.item.*`` and
``session.tools``).

:class:`ClientCommands` is the session's ``commands``: it starts replies through the call's
:class:`~voxpipe.conversation.replies.Replies`, edits the history, and holds who ends the
caller's turns (``server_vad``, ``auto_respond``), which the session reads.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from voxpipe.config import LlmConfig
from voxpipe.conversation.history import FinishedTurns, History, TurnMessages
from voxpipe.conversation.inbound import Inbound, Uncommitted
from voxpipe.conversation.prompt_budget import PromptBudget
from voxpipe.conversation.replies import Replies
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.engines.base import STT_SAMPLE_RATE, ChatMessage, Role, ToolSpec
from voxpipe.observability.timeline import TurnTimeline

MIN_COMMIT_MS = 100  # less committed audio is not a turn (as the OpenAI Realtime API says)


class SpeechInProgress(Protocol):
    """Who listens to the caller's speech (the session; it imports this module, so it is
    named here by what it does)."""

    def forget_speech(self, always: bool) -> None:
        """Drop the speech in progress (``always``: even between turns)."""


class ClientCommands:
    """Client-driven turns (commit, response.create, item edits) and client tools."""

    def __init__(
        self,
        replies: Replies,
        history: History,
        finished: FinishedTurns,
        ledger: ToolLedger,
        inbound: Inbound,
        counts: Counter[str],
        llm: LlmConfig,
        listener: SpeechInProgress,
    ) -> None:
        """``listener``: the session, whose speech in progress is forgotten when the client
        takes the turns over or clears its input."""
        self._replies, self._turns = replies, replies.turns
        self._history, self._finished, self._ledger = history, finished, ledger
        self._inbound, self._counts, self._llm = inbound, counts, llm
        self._listener = listener
        self.server_vad = True  # False: the client ends turns itself (commit_input)
        self.auto_respond = True  # False: a turn's end starts no reply (respond asks)
        self.uncommitted = Uncommitted(inbound, counts)  # for commit_input

    def set_turn_taking(self, server_vad: bool, auto_respond: bool) -> None:
        """Who ends the caller's turns: the VAD (the default) or the client
        (:meth:`commit_input`); and whether a turn's end starts a reply, or the client
        asks for one (``Replies.respond``). Speech or audio in progress under the old mode
        is dropped."""
        if server_vad != self.server_vad:
            self._listener.forget_speech(True)  # even between turns
            self.uncommitted.take()
        if not auto_respond:
            self._replies.discard(self._turns.drop_held())
        self.server_vad, self.auto_respond = server_vad, auto_respond

    def set_system_prompt(self, text: str) -> None:
        """New instructions for the replies to come."""
        self._history.system_prompt = text

    def clear_input(self) -> None:
        """Forget the caller audio that is not part of a turn yet (unprocessed, buffered for
        a commit, or speech the VAD is in the middle of)."""
        self._inbound.clear()
        self.uncommitted.take()
        self._listener.forget_speech(False)  # the speech in progress, if any

    async def commit_input(self) -> int | None:
        """Manual turns: the audio received since the last commit is one caller turn. It is
        transcribed and joins the history unanswered (``Replies.respond`` asks for a reply).
        Returns its turn id; None if under ``MIN_COMMIT_MS`` of audio was buffered."""
        await self._inbound.processed()  # what was sent before the commit belongs to it
        if self.uncommitted.samples < MIN_COMMIT_MS * STT_SAMPLE_RATE // 1000:
            return None
        self._replies.last_turn_id += 1
        timeline = TurnTimeline(self._replies.last_turn_id)
        timeline.mark("speech_end")
        timeline.mark("eot")
        audio = self.uncommitted.take()
        self._turns.reply_started(self._replies.start(timeline, audio, held=False, respond=False))
        return self._replies.last_turn_id

    async def cancel_response(self) -> bool:
        """Stop the reply in flight; the history keeps what the caller heard of it.
        False if none is in flight."""
        reply = self._turns.speaking()
        if reply is None:
            return False
        await reply.cancel_by_client(time.monotonic_ns())
        return True

    async def truncate_reply(self, turn_id: int, audio_end_ms: float) -> str | None:
        """The client played reply ``turn_id`` only up to ``audio_end_ms`` of its audio
        (its own report, e.g. OpenAI ``conversation.item.truncate``): the history keeps
        just the words spoken until then. A reply still in flight stops there. Returns the
        text kept; None if that reply is unknown (never finished here, or too old)."""
        reply = self._turns.reply
        if reply is not None and reply.turn_id == turn_id and not reply.task.done():
            reply.tracker.ack_ms(audio_end_ms)
            if not reply.cancel.cancelled:
                await reply.interrupt(time.monotonic_ns())
                self._counts["truncations"] += 1
            await reply.wait()
        return self._finished.truncate(turn_id, audio_end_ms)

    def add_message(self, role: Role, text: str) -> ChatMessage:
        """A message the client writes into the conversation (text, no audio)."""
        return self._history.add(role, text)

    def delete_message(self, message: ChatMessage) -> bool:
        """Take a message out of the history; False if it is already gone."""
        return self._finished.delete(message)

    def turn_messages(self, turn_id: int) -> TurnMessages | None:
        """What finished turn ``turn_id`` left in the history; None while it is in flight
        (or when it is too old to be remembered)."""
        return self._finished.get(turn_id)

    # -- a client's own tools (Realtime ``session.tools``) ------------------------------

    def set_client_tools(self, specs: Sequence[ToolSpec], tool_choice: str = "auto") -> None:
        """The client's own tools, and its ``tool_choice`` ("auto", "none", "required" or a
        tool's name, which the engine forces: every tool stays in the prompt, so its cached
        prefix holds). The model is offered the agent's tools and these; a call to one of these
        ends the reply (``ToolStarted`` executor "client") and waits for
        :meth:`add_tool_output`. A tool named as one of the agent's is refused
        (:class:`~voxpipe.conversation.tool_ledger.ToolRefused`), and nothing changes."""
        self._ledger.set_client_tools(specs, tool_choice)

    def prompt_overflow(self, instructions: str, specs: Sequence[ToolSpec]) -> str | None:
        """Why ``instructions`` with the agent's tools and the client's ``specs`` would leave
        the model too little room for the conversation (``prompt_budget.py``); None if they
        fit. Asked before either is set, so that a refusal changes nothing."""
        budget = PromptBudget(self._llm.n_ctx, self._llm.max_tokens)
        return budget.overflow(instructions, self._ledger.toolbox.specs(), specs)

    def add_tool_output(self, call_id: str, output: str) -> bool:
        """The client's result of call ``call_id`` (``function_call_output``), for the next
        reply (``Replies.respond``); False if no call of that id waits for a result,
        ToolRefused if it is a call of an agent's tool."""
        return self._ledger.add_output(self._replies.last_turn_id, call_id, output)

    def add_tool_call(self, call_id: str, name: str, arguments_json: str) -> bool:
        """A tool call the client writes into the conversation (a ``function_call`` item);
        False if that call id is already there, ToolRefused if it names an agent's tool."""
        return self._ledger.add_client_call(
            self._replies.last_turn_id, call_id, name, arguments_json
        )
