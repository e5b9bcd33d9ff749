"""What has been said in a call, in the order the LLM should see it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from voxpipe.conversation.spoken import result_for_model
from voxpipe.engines.base import ChatMessage, Role


@dataclass
class History:
    system_prompt: str
    turns: list[ChatMessage] = field(default_factory=list)
    max_messages: int = 400  # bound: the LLM engine trims to its context long before this
    summary: str = ""  # older turns, condensed (see summarizer.py)
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
