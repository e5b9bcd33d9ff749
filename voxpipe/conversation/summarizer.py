"""Keep long calls fast: the next turn's prompt ready in the KV cache, off the critical path.

After a reply whose conversation passed ``llm.summarize_after_tokens`` (the prompt less its
system message and tools, which no summary shortens), the LLM
condenses all but the last ``llm.keep_recent_messages`` messages (and any
earlier summary) into a few sentences, then pre-fills the new, shorter
prompt into the call's KV cache, so the next turn adds only its own tokens.

A turn can leave the KV cache behind the history without any summary: a tool's call
(written in the router's prompt, ``llama_llm.py``), its result and an answer the tool said
were never generated in the call's context, and an answer cut short by a barge-in is kept
only as far as the caller heard it. The next prompt would prefill all that (``bench
tool-turns`` measured 158 tokens at p50 after tool turns, against about 20 after plain
ones), so such a turn's history is pre-filled right away, while the caller listens.

All of it runs on the LLM's thread between turns and is cancellable: when the next reply
starts (the caller paused or finished), the work stops within one prefill batch and is
retried after that reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from voxpipe.conversation.history import History
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.engines.base import CancelToken, ChatMessage, LlmRequest, LlmUsage, ToolSpec, Urgency
from voxpipe.engines.runner import EngineBusy, JobClock

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
        ledger: ToolLedger | None = None,
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
