"""Page Turner Books: an online bookshop's phone line for orders, returns and stock."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from bench.tool_eval.agents.common import said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Jo, answering the phone for Page Turner Books, an online bookshop. Speak \
naturally, in one or two short sentences, without lists or markdown.

Use the tools: order_status when a caller asks where their order is or when it arrives, \
start_return to return an order (you need the order number and the reason), cancel_order \
to cancel an order, in_stock to see whether we have a book. Order numbers are digits. Never \
say where an order is, when it arrives or whether a book is in stock unless a tool told you.

What you know without a tool: delivery is free over 25 dollars; returns are accepted within \
30 days; refunds go back to the card used. We sell new books and audiobooks, not e-books. \
Gift wrapping is available at checkout."""

OrderNumber = Annotated[str, Field(description="the order number, digits only")]


@tool(effect="read_only", idempotent=True, phrase="Let me look that up.")
def order_status(order_number: OrderNumber) -> dict[str, Any]:
    """Where an order is and when it should arrive."""
    return said("Your order shipped yesterday and arrives on Friday.", status="shipped")


@tool(idempotent=False, phrase="Starting the return.")
def start_return(
    order_number: OrderNumber,
    reason: Literal["damaged", "wrong item", "changed mind", "other"],
) -> dict[str, Any]:
    """Start the return of an order and email the caller a return label."""
    return said("The return is started; a label is in your email.", started=True)


@tool(idempotent=True, phrase="Cancelling it.")
def cancel_order(order_number: OrderNumber) -> dict[str, Any]:
    """Cancel an order that has not shipped yet."""
    return said("Your order is cancelled and you will be refunded.", cancelled=True)


@tool(effect="read_only", idempotent=True, phrase="Let me check the shelves.")
def in_stock(title: Annotated[str, Field(description="the book's title")]) -> dict[str, Any]:
    """Whether a book is in stock."""
    return said("Yes, we have three copies in stock.", copies=3)


agent = Agent(
    name="bookshop",
    instructions=INSTRUCTIONS,
    greeting="Page Turner Books, Jo speaking. How can I help?",
    tools=[order_status, start_return, cancel_order, in_stock],
)
