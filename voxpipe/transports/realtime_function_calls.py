"""The model's tool calls as Realtime ``function_call`` items of a response.

A call the model makes becomes a ``function_call`` output item of the response it is
part of: ``response.output_item.added`` (and the conversation item) when it begins,
``response.function_call_arguments.delta`` as the arguments are written,
``response.function_call_arguments.done`` and ``response.output_item.done`` when they
are complete. Who runs it is the session's decision, and the client sees it so:

- a tool the client declared (``session.tools``): the reply ends with the call, and the
  client sends the result back as a ``function_call_output`` item
  (``realtime_item_edits.py``) before asking for the next response;
- a tool of the server's own agent: the server runs it while the response goes on, and
  when it is over adds the result as a ``function_call_output`` conversation item of its
  own (``conversation.item.added``/``done``; it is not an output of the response, the
  model did not write it). The model's answer after the result continues the response.

A response that ends while a call is still being written (barge-in, cancel) closes it
``incomplete`` with the arguments written so far, as OpenAI does.
"""

from __future__ import annotations

from typing import Any

from voxpipe.conversation.events import ToolArgumentsDelta, ToolFinished, ToolStarted
from voxpipe.transports.realtime_items import AnyItem, FunctionItem, Items
from voxpipe.transports.realtime_wire import Dialect, ServerEvents, new_id


class FunctionCalls:
    """Writes the function items of one connection's responses. A response's items are
    in its ``outputs`` (in output_index order), which the responses own."""

    def __init__(self, out: ServerEvents, items: Items) -> None:
        self.out = out
        self.items = items

    def arguments_delta(
        self, response_id: str, outputs: list[AnyItem], event: ToolArgumentsDelta
    ) -> None:
        call = self._open(response_id, outputs, event.call_id, event.name)
        if call.status != "in_progress" or not event.delta:
            return
        call.arguments += event.delta
        self._delta(response_id, outputs, call, event.delta)

    def started(self, response_id: str, outputs: list[AnyItem], event: ToolStarted) -> None:
        call = self._open(response_id, outputs, event.call_id, event.name)
        call.executor = event.executor
        if call.status != "in_progress":
            return
        if not call.arguments:  # no deltas came (a server tool): the arguments in one
            self._delta(response_id, outputs, call, event.arguments_json)
        self._close(response_id, outputs, call, event.arguments_json, "completed")

    def finished(self, event: ToolFinished) -> None:
        """A server tool's result joins the conversation as the server's own item."""
        call = self.items.function_call(event.call_id)
        if call is not None and call.executor == "client":
            return  # the client runs it and sends the result itself
        item = FunctionItem(
            new_id("item"), "function_call_output", event.call_id, output=event.output
        )
        previous = self.items.add(item)
        wire = item.wire(self.out.dialect)
        self.out.emit("conversation.item.added", previous_item_id=previous, item=wire)
        self.out.emit("conversation.item.done", previous_item_id=previous, item=wire)

    def cut(self, response_id: str, outputs: list[AnyItem]) -> None:
        """The response is over: calls still being written end ``incomplete``."""
        for call in outputs:
            if isinstance(call, FunctionItem) and call.status == "in_progress":
                self._close(response_id, outputs, call, call.arguments, "incomplete")

    # -- one call's events ---------------------------------------------------------

    def _open(
        self, response_id: str, outputs: list[AnyItem], call_id: str, name: str
    ) -> FunctionItem:
        """The response's item for ``call_id``, added (and announced) on first use."""
        for item in outputs:
            if isinstance(item, FunctionItem) and item.call_id == call_id:
                return item
        call = FunctionItem(new_id("item"), "function_call", call_id, name, status="in_progress")
        outputs.append(call)
        previous = self.items.add(call)
        wire = call.wire(self.out.dialect)
        index = len(outputs) - 1
        self.out.emit(
            "response.output_item.added", response_id=response_id, output_index=index, item=wire
        )
        self.out.emit("conversation.item.added", previous_item_id=previous, item=wire)
        return call

    def _delta(
        self, response_id: str, outputs: list[AnyItem], call: FunctionItem, delta: str
    ) -> None:
        self.out.emit(
            "response.function_call_arguments.delta",
            **_where(response_id, outputs, call),
            delta=delta,
        )

    def _close(
        self,
        response_id: str,
        outputs: list[AnyItem],
        call: FunctionItem,
        arguments: str,
        status: str,
    ) -> None:
        call.arguments, call.status = arguments, status
        where = _where(response_id, outputs, call)
        named: dict[str, Any] = {"name": call.name} if self.out.dialect is Dialect.GA else {}
        self.out.emit(
            "response.function_call_arguments.done", **where, **named, arguments=arguments
        )
        wire = call.wire(self.out.dialect)
        self.out.emit(
            "response.output_item.done",
            response_id=response_id,
            output_index=where["output_index"],
            item=wire,
        )
        self.out.emit("conversation.item.done", previous_item_id=None, item=wire)


def _where(response_id: str, outputs: list[AnyItem], call: FunctionItem) -> dict[str, Any]:
    return {
        "response_id": response_id,
        "item_id": call.id,
        "output_index": outputs.index(call),
        "call_id": call.call_id,
    }
