"""The client's edits to the conversation: ``conversation.item.create``, ``retrieve``,
``delete`` and ``truncate``, applied to the session's history.

A client may add text messages at the end, read an item back, delete one, and cut
an assistant audio item at the point its listener stopped hearing it. It answers the
model's calls of its own tools with ``function_call_output`` items, and may write
calls into the conversation (``function_call`` items) as if the model had made them;
a function item, once added, is the model's record of what was done, so it cannot
be deleted. Neither kind may name the server's own tools: the session refuses such a
forged record (``tool_ledger.py``). The history is the session's: a deletion or a
truncation is asked of it, and what it keeps is what the item then says. Only the
items the connection still remembers can be named
(:class:`~voxpipe.transports.realtime_items.Items` keeps the latest).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voxpipe.conversation.session import Session
from voxpipe.conversation.tool_ledger import ToolRefused
from voxpipe.engines.base import TOOL_NAME, new_tool_call_id
from voxpipe.transports.realtime_client_events import (
    TEXT_CONTENT,
    ItemCreate,
    ItemIn,
    ItemRef,
    ItemTruncate,
)
from voxpipe.transports.realtime_items import AnyItem, FunctionItem, Item, Items
from voxpipe.transports.realtime_responses import Responses
from voxpipe.transports.realtime_wire import RealtimeError, ServerEvents, new_id


@dataclass(eq=False)
class ItemEdits:
    """The ``conversation.item.*`` client events of one connection."""

    out: ServerEvents
    items: Items
    responses: Responses
    session: Session

    async def create(self, payload: dict[str, Any]) -> None:
        create = ItemCreate.model_validate(payload)
        spec = create.item
        if create.previous_item_id not in (None, self.items.last_id):
            raise RealtimeError(
                "invalid_value",
                "items can only be added at the end of the conversation",
                "previous_item_id",
            )
        if spec.id is not None and spec.id in self.items:
            raise RealtimeError("invalid_value", f"item '{spec.id}' already exists", "item.id")
        item = self._message(spec) if spec.type == "message" else self._function_item(spec)
        previous = self.items.add(item)
        wire = item.wire(self.out.dialect)
        self.out.emit("conversation.item.added", previous_item_id=previous, item=wire)
        self.out.emit("conversation.item.done", previous_item_id=previous, item=wire)

    def _message(self, spec: ItemIn) -> Item:
        if spec.role is None:
            raise RealtimeError(
                "missing_required_parameter",
                "Missing required parameter: 'item.role'.",
                "item.role",
            )
        for i, part in enumerate(spec.content):
            if part.type not in TEXT_CONTENT:
                raise RealtimeError(
                    "invalid_value",
                    f"content of type '{part.type}' is not supported in conversation.item.create;"
                    " send text, or append audio to the input audio buffer",
                    f"item.content.{i}.type",
                )
        text = "\n".join(part.text or "" for part in spec.content)
        message = self.session.commands.add_message(spec.role, text)
        item = Item(spec.id or new_id("item"), spec.role, False, text, message=message)
        item.finished = True
        return item

    def _function_item(self, spec: ItemIn) -> FunctionItem:
        """A tool call's result from the client, or a call the client writes itself."""
        for field, given in (("role", spec.role is not None), ("content", bool(spec.content))):
            if given:
                raise RealtimeError(
                    "invalid_value", f"a {spec.type} item has no {field}", f"item.{field}"
                )
        item_id = spec.id or new_id("item")
        if spec.type == "function_call_output":
            call_id, output = _required(spec.call_id, "call_id"), _required(spec.output, "output")
            if not self._refusing(self.session.commands.add_tool_output, call_id, output):
                raise RealtimeError(
                    "invalid_value",
                    f"no function call with call_id '{call_id[:64]}' is waiting for its output",
                    "item.call_id",
                )
            return FunctionItem(item_id, "function_call_output", call_id, output=output)
        name, arguments = _required(spec.name, "name"), _required(spec.arguments, "arguments")
        if not TOOL_NAME.match(name):
            raise RealtimeError(
                "invalid_value", f"a function name must match {TOOL_NAME.pattern}", "item.name"
            )
        if not _json_object(arguments):
            raise RealtimeError(
                "invalid_value", "arguments must be a JSON object, as a string", "item.arguments"
            )
        call_id = spec.call_id or new_tool_call_id()
        if not self._refusing(self.session.commands.add_tool_call, call_id, name, arguments):
            raise RealtimeError(
                "invalid_value", f"call_id '{call_id[:64]}' is already used", "item.call_id"
            )
        return FunctionItem(item_id, "function_call", call_id, name, arguments)

    @staticmethod
    def _refusing(add: Callable[..., bool], *args: str) -> bool:
        """``add(*args)``, with the session's refusal of a record that names a server tool
        as the client's error (logged once a connection)."""
        try:
            return add(*args)
        except ToolRefused as exc:
            raise RealtimeError("invalid_value", str(exc), f"item.{exc.where}", warn=True) from None

    def _item(self, item_id: str) -> AnyItem:
        item = self.items.get(item_id)
        if item is None:
            raise RealtimeError(
                "item_not_found", f"Item with item_id '{item_id[:64]}' not found.", "item_id"
            )
        return item

    async def retrieve(self, payload: dict[str, Any]) -> None:
        item = self._item(ItemRef.model_validate(payload).item_id)
        self.out.emit("conversation.item.retrieved", item=item.wire(self.out.dialect))

    async def delete(self, payload: dict[str, Any]) -> None:
        item = self._item(ItemRef.model_validate(payload).item_id)
        if isinstance(item, FunctionItem):
            raise RealtimeError(
                "invalid_value",
                "a function call or its output cannot be deleted: the model keeps the record "
                "of what was done",
                "item_id",
            )
        if item.message is not None:
            self.session.commands.delete_message(item.message)
        elif item.turn_id is not None:
            turn = self.session.commands.turn_messages(item.turn_id)
            if turn is None and not item.finished:
                raise RealtimeError(
                    "invalid_value", "the item's turn is still in progress", "item_id"
                )
            message = None if turn is None else turn.user if item.role == "user" else turn.assistant
            if message is not None:
                self.session.commands.delete_message(message)
        self.items.remove(item.id)
        self.out.emit("conversation.item.deleted", item_id=item.id)

    async def truncate(self, payload: dict[str, Any]) -> None:
        truncate = ItemTruncate.model_validate(payload)
        item = self._item(truncate.item_id)
        if (
            not isinstance(item, Item)
            or item.role != "assistant"
            or not item.audio
            or item.turn_id is None
        ):
            raise RealtimeError(
                "invalid_value", "only an assistant audio item can be truncated", "item_id"
            )
        if truncate.content_index != 0:
            raise RealtimeError(
                "invalid_value", "the item has one content part, index 0", "content_index"
            )
        self.responses.stopped_by_client(item.turn_id)
        text = await self.session.commands.truncate_reply(item.turn_id, truncate.audio_end_ms)
        if text is None:
            raise RealtimeError("invalid_value", "the item's audio is no longer known", "item_id")
        item.text = text
        self.out.emit(
            "conversation.item.truncated",
            item_id=item.id,
            content_index=0,
            audio_end_ms=truncate.audio_end_ms,
        )


def _required(value: str | None, field: str) -> str:
    if value is None:
        raise RealtimeError(
            "missing_required_parameter",
            f"Missing required parameter: 'item.{field}'.",
            f"item.{field}",
        )
    return value


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):  # not JSON, or nested past what the parser descends
        return False
