"""The client's edits to the conversation: ``conversation.item.create``, ``retrieve``,
``delete`` and ``truncate``, applied to the session's history.

A client may add text messages at the end, read an item back, delete one, and cut
an assistant audio item at the point its listener stopped hearing it. The history
is the session's: a deletion or a truncation is asked of it, and what it keeps is
what the item then says. Only the items the connection still remembers can be
named (:class:`~voxpipe.transports.realtime_items.Items` keeps the latest).
"""

from __future__ import annotations

from typing import Any

from voxpipe.conversation.session import Session
from voxpipe.transports.realtime_client_events import (
    TEXT_CONTENT,
    ItemCreate,
    ItemRef,
    ItemTruncate,
)
from voxpipe.transports.realtime_items import Item, Items
from voxpipe.transports.realtime_responses import Responses
from voxpipe.transports.realtime_wire import RealtimeError, ServerEvents, new_id


class ItemEdits:
    """The ``conversation.item.*`` client events of one connection."""

    def __init__(
        self, out: ServerEvents, items: Items, responses: Responses, session: Session
    ) -> None:
        self.out = out
        self.items = items
        self.responses = responses
        self.session = session

    async def create(self, payload: dict[str, Any]) -> None:
        create = ItemCreate.model_validate(payload)
        spec = create.item
        if spec.type != "message":
            raise RealtimeError(
                "invalid_value",
                f"items of type '{spec.type}' are not supported: voxpipe's LLM has no tools",
                "item.type",
            )
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
        if create.previous_item_id not in (None, self.items.last_id):
            raise RealtimeError(
                "invalid_value",
                "items can only be added at the end of the conversation",
                "previous_item_id",
            )
        if spec.id is not None and spec.id in self.items:
            raise RealtimeError("invalid_value", f"item '{spec.id}' already exists", "item.id")
        text = "\n".join(part.text or "" for part in spec.content)
        message = self.session.add_message(spec.role, text)
        item = Item(spec.id or new_id("item"), spec.role, False, text, message=message)
        item.finished = True
        previous = self.items.add(item)
        self.out.emit(
            "conversation.item.added", previous_item_id=previous, item=item.wire(self.out.dialect)
        )
        self.out.emit(
            "conversation.item.done", previous_item_id=previous, item=item.wire(self.out.dialect)
        )

    def _item(self, item_id: str) -> Item:
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
        if item.message is not None:
            self.session.delete_message(item.message)
        elif item.turn_id is not None:
            turn = self.session.turn_messages(item.turn_id)
            if turn is None and not item.finished:
                raise RealtimeError(
                    "invalid_value", "the item's turn is still in progress", "item_id"
                )
            message = None if turn is None else turn.user if item.role == "user" else turn.assistant
            if message is not None:
                self.session.delete_message(message)
        self.items.remove(item.id)
        self.out.emit("conversation.item.deleted", item_id=item.id)

    async def truncate(self, payload: dict[str, Any]) -> None:
        truncate = ItemTruncate.model_validate(payload)
        item = self._item(truncate.item_id)
        if item.role != "assistant" or not item.audio or item.turn_id is None:
            raise RealtimeError(
                "invalid_value", "only an assistant audio item can be truncated", "item_id"
            )
        if truncate.content_index != 0:
            raise RealtimeError(
                "invalid_value", "the item has one content part, index 0", "content_index"
            )
        self.responses.stopped_by_client(item.turn_id)
        text = await self.session.truncate_reply(item.turn_id, truncate.audio_end_ms)
        if text is None:
            raise RealtimeError("invalid_value", "the item's audio is no longer known", "item_id")
        item.text = text
        self.out.emit(
            "conversation.item.truncated",
            item_id=item.id,
            content_index=0,
            audio_end_ms=truncate.audio_end_ms,
        )
