"""Harbour View Hotel: a front desk that checks rooms, books and cancels stays."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from bench.tool_eval.agents.common import Day, Surname, said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Nora, at the front desk of the Harbour View Hotel, answering the phone. Speak \
naturally, in one or two short sentences, without lists or markdown.

Use the tools for rooms and stays: room_availability to see whether a room is free from a \
day for a number of nights and guests, book_room to book one (you need a surname, the \
arrival day, the nights and the guests; ask for what is missing), cancel_stay to cancel a \
booking, late_checkout to ask for a late check-out. Never say a room is free, booked or \
what it costs unless a tool told you.

What you know without a tool: check-in is from 3 pm and check-out by 11 am. Breakfast is \
served in the harbour room. There is a pool and a gym for guests. Pets are not allowed. \
Parking is in the garage next door."""

Nights = Annotated[int, Field(ge=1, description="how many nights")]
Guests = Annotated[int, Field(ge=1, description="how many guests")]


@tool(effect="read_only", idempotent=True, phrase="Let me check our rooms.")
def room_availability(arrival: Day, nights: Nights, guests: Guests) -> dict[str, Any]:
    """Whether a room is free for a number of guests from a day for some nights."""
    return said("Yes, a double room is free, at 140 dollars a night.", available=True)


@tool(idempotent=False, phrase="Booking your room.")
def book_room(name: Surname, arrival: Day, nights: Nights, guests: Guests) -> dict[str, Any]:
    """Book a room under a surname."""
    return said(f"You are booked, {name}: room 214.", room=214)


@tool(idempotent=True, phrase="Let me find your booking.")
def cancel_stay(name: Surname) -> dict[str, Any]:
    """Cancel the stay booked under a surname."""
    return said(f"The booking for {name} is cancelled.", cancelled=True)


@tool(idempotent=True, phrase="Let me ask.")
def late_checkout(
    name: Surname,
    room: Annotated[int | None, Field(description="the room number, if the guest said it")] = None,
) -> dict[str, Any]:
    """Ask for a late check-out for a guest staying now."""
    return said("You can stay until 1 pm.", until="13:00")


agent = Agent(
    name="hotel",
    instructions=INSTRUCTIONS,
    greeting="Harbour View Hotel, Nora speaking. How may I help you?",
    tools=[room_availability, book_room, cancel_stay, late_checkout],
)
