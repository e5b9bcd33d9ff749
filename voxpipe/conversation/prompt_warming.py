"""The caller's words so far, evaluated into the call's KV while the caller still speaks.

A reply's prompt is the conversation plus the caller's last turn. Evaluating that turn's
words is most of the work before the reply's first token (a long read sentence is 30
tokens, 200-300 ms on two cores), and it is done when the turn ends, exactly when the
caller is waiting and other callers' turns may be ending too. Each partial transcript
already holds most of those words, so the conversation and the words so far go into the
call's own KV sequence as speculative work (``llm.warm_while_speaking``). When the turn
ends, the reply's prompt shares that prefix and evaluates only what the final words add.

Only what costs nothing when it is wrong is done here: a warm runs after every other
request, a few tokens a step (``llm.warm_chunk``), and gives way to the call's own next
request; a partial the final transcript contradicts only wastes the tokens past the first
difference. A call offered tools is warmed with them on the context its requests run on
(``llama_solo.py``), a chunk at a time between other work.
"""

from __future__ import annotations

import asyncio
import logging

from voxpipe.conversation.history import History
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.conversation.turn_words import open_words
from voxpipe.engines.base import CancelToken, ChatMessage, ToolSpec

log = logging.getLogger("voxpipe.warming")


class PromptWarming:
    """One call's warms: at most one started at a time, the newest words winning."""

    def __init__(
        self, session_id: str, services: Services, history: History, ledger: ToolLedger
    ) -> None:
        self._id = session_id
        self._services = services
        self._history = history
        self._ledger = ledger
        self._enabled = services.config.llm.warm_while_speaking
        self._cancel = CancelToken()  # the call's: a newer warm ends an older in the engine
        self._task: asyncio.Task[None] | None = None

    def words_so_far(self, words: str) -> None:
        """A partial transcript of the turn in progress: warm the prompt it would make."""
        words = open_words(words)  # the final words go on past a partial's stop
        if not self._enabled or not any(ch.isalnum() for ch in words):
            return
        if self._task is not None and not self._task.done():
            return  # the engine has not taken the last one yet: the next partial will do
        tools = self._ledger.offered()
        messages = self._ledger.prompt([*self._history.messages(), ChatMessage("user", words)])
        self._task = asyncio.get_running_loop().create_task(
            self._warm(messages, tools), name=f"warm-{self._id}"
        )

    async def _warm(self, messages: list[ChatMessage], tools: list[ToolSpec] | None) -> None:
        try:
            await self._services.llm.warm(self._id, messages, self._cancel, tools=tools)
        except Exception as error:  # a warm is a head start: the reply evaluates it anyway
            log.warning("session %s: warming the prompt failed: %s", self._id, error)

    async def close(self) -> None:
        self._cancel.cancel()
        if self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)
