"""What a client may ask of a session itself, beyond sending audio: who ends turns, replies
on request, edits of the conversation, and its own tools (the OpenAI Realtime API's
``input_audio_buffer.commit``, ``response.create``, ``conversation.item.*`` and
``session.tools``).

:class:`ClientCommands` is a part of :class:`~voxpipe.conversation.session.Session`, kept
in its own module; :class:`SessionParts` lists what of the session it uses.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from voxpipe.config import Config
from voxpipe.conversation.history import History
from voxpipe.conversation.inbound import Inbound, Uncommitted
from voxpipe.conversation.prompt_budget import PromptBudget
from voxpipe.conversation.reply import Reply
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.conversation.turn_detector import TurnDetector
from voxpipe.conversation.turn_messages import FinishedTurns, TurnMessages
from voxpipe.conversation.turn_taking import TurnTaking
from voxpipe.engines.base import STT_SAMPLE_RATE, ChatMessage, Role, ToolSpec
from voxpipe.observability.timeline import TurnTimeline

MIN_COMMIT_MS = 100  # less committed audio is not a turn (as the OpenAI Realtime API says)


class SessionParts(Protocol):
    """What the client's commands use of their session."""

    cfg: Config
    history: History
    ledger: ToolLedger
    counts: Counter[str]
    server_vad: bool
    auto_respond: bool
    _turns: TurnTaking[Reply]
    _turn_ids: int
    _inbound: Inbound
    _uncommitted: Uncommitted
    _detector: TurnDetector
    _finished: FinishedTurns

    def _reset_detector(self) -> None: ...

    def _discard(self, held: Reply | None) -> None: ...

    def _new_reply(
        self,
        timeline: TurnTimeline,
        audio: np.ndarray | None,
        held: bool,
        respond: bool = True,
        text: str | None = None,
        tool_choice: str | None = None,
    ) -> Reply: ...


class ClientCommands:
    """Client-driven turns (commit, response.create, item edits) and client tools."""

    def set_turn_taking(self: SessionParts, server_vad: bool, auto_respond: bool) -> None:
        """Who ends the caller's turns: the VAD (the default) or the client
        (:meth:`commit_input`); and whether a turn's end starts a reply, or the client
        asks for one (:meth:`respond`). Speech or audio in progress under the old mode
        is dropped."""
        if server_vad != self.server_vad:
            self._reset_detector()
            self._uncommitted.take()
        if not auto_respond:
            self._discard(self._turns.drop_held())
        self.server_vad, self.auto_respond = server_vad, auto_respond

    def set_system_prompt(self: SessionParts, text: str) -> None:
        """New instructions for the replies to come."""
        self.history.system_prompt = text

    def clear_input(self: SessionParts) -> None:
        """Forget the caller audio that is not part of a turn yet (unprocessed, buffered for
        a commit, or speech the VAD is in the middle of)."""
        self._inbound.clear()
        self._uncommitted.take()
        if self._detector.in_speech:
            self._reset_detector()

    async def commit_input(self: SessionParts) -> int | None:
        """Manual turns: the audio received since the last commit is one caller turn. It is
        transcribed and joins the history unanswered (:meth:`respond` asks for a reply).
        Returns its turn id; None if under ``MIN_COMMIT_MS`` of audio was buffered."""
        await self._inbound.processed()  # what was sent before the commit belongs to it
        if self._uncommitted.samples < MIN_COMMIT_MS * STT_SAMPLE_RATE // 1000:
            return None
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end")
        timeline.mark("eot")
        audio = self._uncommitted.take()
        self._turns.reply_started(self._new_reply(timeline, audio, held=False, respond=False))
        return self._turn_ids

    @property
    def responding(self: SessionParts) -> bool:
        """A reply is being prepared or spoken."""
        return self._turns.speaking() is not None

    def respond(self: SessionParts, say: str | None = None, tool_choice: str | None = None) -> int:
        """Answer the conversation as it stands, with no new caller audio (a client asked,
        e.g. OpenAI ``response.create``; ``say``: these words, not the LLM's, as for a
        greeting; ``tool_choice``: this reply's, in place of the session's). It starts once
        the turn before it is done. Returns its turn id."""
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end")  # the request: voice-to-voice runs from here
        timeline.mark("eot")
        reply = self._new_reply(timeline, None, held=False, text=say, tool_choice=tool_choice)
        self._turns.reply_started(reply)
        return self._turn_ids

    async def cancel_response(self: SessionParts) -> bool:
        """Stop the reply in flight; the history keeps what the caller heard of it.
        False if none is in flight."""
        reply = self._turns.speaking()
        if reply is None:
            return False
        await reply.cancel_by_client(time.monotonic_ns())
        return True

    async def truncate_reply(self: SessionParts, turn_id: int, audio_end_ms: float) -> str | None:
        """The client played reply ``turn_id`` only up to ``audio_end_ms`` of its audio
        (its own report, e.g. OpenAI ``conversation.item.truncate``): the history keeps
        just the words spoken until then. A reply still in flight stops there. Returns the
        text kept; None if that reply is unknown (never finished here, or too old)."""
        reply = self._turns.reply
        if reply is not None and reply.turn_id == turn_id and not reply.task.done():
            reply.tracker.ack_ms(audio_end_ms)
            if not reply.cancel.cancelled:
                await reply.interrupt(time.monotonic_ns())
                self.counts["truncations"] += 1
            await reply.wait()
        return self._finished.truncate(turn_id, audio_end_ms)

    def add_message(self: SessionParts, role: Role, text: str) -> ChatMessage:
        """A message the client writes into the conversation (text, no audio)."""
        return self.history.add(role, text)

    def delete_message(self: SessionParts, message: ChatMessage) -> bool:
        """Take a message out of the history; False if it is already gone."""
        return self._finished.delete(message)

    def turn_messages(self: SessionParts, turn_id: int) -> TurnMessages | None:
        """What finished turn ``turn_id`` left in the history; None while it is in flight
        (or when it is too old to be remembered)."""
        return self._finished.get(turn_id)

    # -- a client's own tools (Realtime ``session.tools``) ------------------------------

    def set_client_tools(
        self: SessionParts, specs: Sequence[ToolSpec], tool_choice: str = "auto"
    ) -> None:
        """The client's own tools, and its ``tool_choice`` ("auto", "none", "required" or a
        tool's name, which the engine forces: every tool stays in the prompt, so its cached
        prefix holds). The model is offered the agent's tools and these; a call to one of these
        ends the reply (``ToolStarted`` executor "client") and waits for
        :meth:`add_tool_output`. A tool named as one of the agent's is refused
        (:class:`~voxpipe.conversation.tool_ledger.ToolRefused`), and nothing changes."""
        self.ledger.set_client_tools(specs, tool_choice)

    def prompt_overflow(
        self: SessionParts, instructions: str, specs: Sequence[ToolSpec]
    ) -> str | None:
        """Why ``instructions`` with the agent's tools and the client's ``specs`` would leave
        the model too little room for the conversation (``prompt_budget.py``); None if they
        fit. Asked before either is set, so that a refusal changes nothing."""
        budget = PromptBudget(self.cfg.llm.n_ctx, self.cfg.llm.max_tokens)
        return budget.overflow(instructions, self.ledger.toolbox.specs(), specs)

    def add_tool_output(self: SessionParts, call_id: str, output: str) -> bool:
        """The client's result of call ``call_id`` (``function_call_output``), for the next
        reply (:meth:`respond`); False if no call of that id waits for a result,
        ToolRefused if it is a call of an agent's tool."""
        return self.ledger.add_output(self._turn_ids, call_id, output)

    def add_tool_call(self: SessionParts, call_id: str, name: str, arguments_json: str) -> bool:
        """A tool call the client writes into the conversation (a ``function_call`` item);
        False if that call id is already there, ToolRefused if it names an agent's tool."""
        return self.ledger.add_client_call(self._turn_ids, call_id, name, arguments_json)
