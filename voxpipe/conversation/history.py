"""What has been said in a call, in the order the LLM should see it."""

from __future__ import annotations

from dataclasses import dataclass, field

from voxpipe.engines.base import ChatMessage


@dataclass
class History:
    system_prompt: str
    turns: list[ChatMessage] = field(default_factory=list)
    max_messages: int = 400  # bound: the LLM engine trims to its context long before this
    summary: str = ""  # older turns, condensed (see summarizer.py)
    summarized_messages: int = 0

    def add_user(self, text: str) -> None:
        self._append(ChatMessage("user", text))

    def add_assistant(self, text: str) -> None:
        self._append(ChatMessage("assistant", text))

    def _append(self, message: ChatMessage) -> None:
        self.turns.append(message)
        if len(self.turns) > self.max_messages:
            del self.turns[: len(self.turns) - self.max_messages]

    def replace_oldest(self, count: int, summary: str) -> None:
        """The first ``count`` turns are now told by ``summary``."""
        del self.turns[:count]
        self.summary = summary
        self.summarized_messages += count

    def messages(self) -> list[ChatMessage]:
        system = self.system_prompt
        if self.summary:
            system += f"\n\nSummary of the call so far: {self.summary}"
        return [ChatMessage("system", system), *self.turns]
