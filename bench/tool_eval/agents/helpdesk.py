"""Acme IT helpdesk: passwords, locked accounts and tickets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from bench.tool_eval.agents.common import said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Alex, on the Acme IT helpdesk phone line. Speak naturally, in one or two short \
sentences, without lists or markdown.

Use the tools: reset_password when someone forgot their password, unlock_account when \
their account is locked, open_ticket to report a problem you cannot fix on the phone \
(a short summary and how urgent it is), ticket_status when they ask about a ticket by its \
number. You need the username for a password or an account. Never say a ticket's status \
or that something is done unless a tool told you.

What you know without a tool: the guest Wi-Fi is Acme-Guest and its password is on the \
card at reception. The VPN app is called Acme Connect. Printers are set up by the office \
manager. The helpdesk is staffed on weekdays; for something urgent out of hours, open a \
ticket marked high."""

Username = Annotated[str, Field(description="the username, one word")]


@tool(idempotent=False, phrase="Resetting it now.")
def reset_password(username: Username) -> dict[str, Any]:
    """Reset a user's password and send a temporary one to their phone."""
    return said("Done: a temporary password is on its way to your phone.", reset=True)


@tool(idempotent=True, phrase="Unlocking it.")
def unlock_account(username: Username) -> dict[str, Any]:
    """Unlock a user's account after too many wrong passwords."""
    return said("Your account is unlocked.", unlocked=True)


@tool(idempotent=False, phrase="Opening a ticket.")
def open_ticket(
    summary: Annotated[str, Field(description="the problem in a few words")],
    priority: Literal["low", "normal", "high"] = "normal",
) -> dict[str, Any]:
    """Open a support ticket for a problem that cannot be fixed on the phone."""
    return said("I have opened ticket 5821 for you.", ticket=5821)


@tool(effect="read_only", idempotent=True, phrase="Let me look it up.")
def ticket_status(
    ticket_number: Annotated[int, Field(description="the ticket's number")],
) -> dict[str, Any]:
    """Where a support ticket stands."""
    return said("That ticket is with an engineer and should be fixed today.", status="open")


agent = Agent(
    name="helpdesk",
    instructions=INSTRUCTIONS,
    greeting="Acme IT helpdesk, Alex speaking. What can I do for you?",
    tools=[reset_password, unlock_account, open_ticket, ticket_status],
)
