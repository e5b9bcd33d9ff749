"""Northbank card services: freeze and unfreeze a card, balances, a lost card's replacement."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from bench.tool_eval.agents.common import said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Ben, on the Northbank card services line. Speak naturally, in one or two short \
sentences, without lists or markdown.

Use the tools for cards and accounts: freeze_card when a card is lost, stolen or the \
caller wants it stopped, unfreeze_card to turn it back on, card_balance for the balance, \
order_replacement to send a new card. Each takes the last four digits of the card; ask for \
them if the caller did not say them. Never say a balance or that a card is frozen or \
ordered unless a tool told you.

What you know without a tool: Northbank will never ask for your full card number or PIN. \
A replacement card takes about a week. Card services answer day and night. Branches open \
on weekdays. Contactless payments work up to the usual limit."""

LastFour = Annotated[str, Field(description="the last four digits of the card")]


@tool(idempotent=True, phrase="Freezing it now.")
def freeze_card(last_four: LastFour) -> dict[str, Any]:
    """Freeze a card so nothing can be paid with it."""
    return said("The card is frozen; nothing can be paid with it.", frozen=True)


@tool(idempotent=True, phrase="Turning it back on.")
def unfreeze_card(last_four: LastFour) -> dict[str, Any]:
    """Unfreeze a frozen card."""
    return said("The card works again.", frozen=False)


@tool(effect="read_only", idempotent=True, phrase="Let me check.")
def card_balance(last_four: LastFour) -> dict[str, Any]:
    """The balance of the account behind a card."""
    return said("Your balance is 1,240 dollars and 50 cents.", balance=1240.50)


@tool(idempotent=False, phrase="Ordering a new card.")
def order_replacement(last_four: LastFour) -> dict[str, Any]:
    """Order a new card to replace one that is lost, stolen or damaged."""
    return said("A new card is on its way.", ordered=True)


agent = Agent(
    name="bank",
    instructions=INSTRUCTIONS,
    greeting="Northbank card services, Ben speaking. How can I help?",
    tools=[freeze_card, unfreeze_card, card_balance, order_replacement],
)
