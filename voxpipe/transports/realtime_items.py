"""Conversation items as a Realtime client knows them, and where each lives in voxpipe.

Items are voxpipe turns and messages seen from the client: a committed user turn is
a user audio item, a reply is an assistant audio (or text) item, a message the
client wrote is a text item, and a tool call is a ``function_call`` item with its
result in a ``function_call_output`` item. Ids (``item_…``) are made by the
transport; the history itself is the session's, so an item only points at its turn
or message, and a function item at its call (``call_id``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from voxpipe.engines.base import ChatMessage, Role
from voxpipe.transports.realtime_wire import Dialect


@dataclass
class Item:
    """One conversation item as the client knows it, and where it lives in voxpipe: a
    turn (``turn_id``, audio items) or a message the client wrote (``message``)."""

    id: str
    role: Role
    audio: bool  # audio with a transcript; else text
    text: str | None = None  # the transcript or the text; None until known
    status: str = "completed"
    turn_id: int | None = None
    message: ChatMessage | None = None
    finished: bool = False  # its turn is over: the history holds what it will hold

    def content(self, dialect: Dialect) -> list[dict[str, Any]]:
        if self.text is None and self.role == "assistant":
            return []  # still being generated
        if self.role == "assistant":
            if self.audio:
                kind = "output_audio" if dialect is Dialect.GA else "audio"
                return [{"type": kind, "transcript": self.text}]
            kind = "output_text" if dialect is Dialect.GA else "text"
            return [{"type": kind, "text": self.text}]
        if self.audio:
            return [{"type": "input_audio", "transcript": self.text}]
        return [{"type": "input_text", "text": self.text}]

    def wire(self, dialect: Dialect) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "status": self.status,
            "role": self.role,
            "content": self.content(dialect),
        }


@dataclass
class FunctionItem:
    """A tool call (``function_call``: what the model asked, arguments as it wrote them)
    or its result (``function_call_output``), tied together by ``call_id``."""

    id: str
    type: Literal["function_call", "function_call_output"]
    call_id: str
    name: str = ""
    arguments: str = ""  # function_call: the JSON as written so far, then all of it
    output: str = ""  # function_call_output
    status: str = "completed"
    executor: str = "client"  # function_call: who runs it (server | client)

    def wire(self, dialect: Dialect) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "realtime.item",
            "type": self.type,
            "status": self.status,
            "call_id": self.call_id,
        }
        if self.type == "function_call":
            return {**body, "name": self.name, "arguments": self.arguments}
        return {**body, "output": self.output}


AnyItem = Item | FunctionItem


class Items:
    """The conversation's items in order, at most ``limit`` (the oldest are forgotten)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[str, AnyItem] = {}

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._items

    def get(self, item_id: str) -> AnyItem | None:
        return self._items.get(item_id)

    @property
    def last_id(self) -> str | None:
        return next(reversed(self._items), None)

    def add(self, item: AnyItem) -> str | None:
        """Append; returns the id of the item before it."""
        previous = self.last_id
        self._items[item.id] = item
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]
        return previous

    def remove(self, item_id: str) -> None:
        self._items.pop(item_id, None)

    def function_call(self, call_id: str) -> FunctionItem | None:
        for item in self._items.values():
            if isinstance(item, FunctionItem) and item.type == "function_call":
                if item.call_id == call_id:
                    return item
        return None

    def of_turn(self, turn_id: int) -> list[Item]:
        return [i for i in self._items.values() if isinstance(i, Item) and i.turn_id == turn_id]
