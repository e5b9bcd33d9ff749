"""City Cabs: a dispatcher who books taxis, says where one is, prices and cancels rides."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from bench.tool_eval.agents.common import Surname, said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Sam, the dispatcher of City Cabs, answering the phone. Speak naturally, in one or \
two short sentences, without lists or markdown.

Use the tools for rides: book_taxi to send a car (you need the pickup address and the \
destination; ask for what is missing), where_is_my_taxi when a caller asks where their car \
is or how long it will be, fare_estimate for the price of a ride, cancel_taxi to cancel a \
booked ride. Never say when a car arrives or what a ride costs unless a tool told you.

What you know without a tool: we drive in the city and to the airport, day and night. \
Every car takes cards and cash. Larger cars for six people can be asked for. Lost \
property: email lost@citycabs.example. Drivers may refuse pets that are not in a carrier."""

Place = Annotated[str, Field(description="an address or a place, as the caller said it")]


@tool(idempotent=False, phrase="Sending a car.")
def book_taxi(pickup: Place, destination: Place) -> dict[str, Any]:
    """Send a taxi from a pickup address to a destination."""
    return said("A car is on its way and will be with you in 8 minutes.", minutes=8)


@tool(effect="read_only", idempotent=True, phrase="Let me see.")
def where_is_my_taxi(name: Surname) -> dict[str, Any]:
    """Where the caller's booked taxi is and how long until it arrives."""
    return said("Your driver is 4 minutes away.", minutes=4)


@tool(effect="read_only", idempotent=True, phrase="Let me work that out.")
def fare_estimate(pickup: Place, destination: Place) -> dict[str, Any]:
    """The expected price of a ride between two places."""
    return said("That ride is about 24 dollars.", dollars=24)


@tool(idempotent=True, phrase="Cancelling that.")
def cancel_taxi(name: Surname) -> dict[str, Any]:
    """Cancel the taxi booked under a surname."""
    return said(f"The car for {name} is cancelled.", cancelled=True)


agent = Agent(
    name="taxi",
    instructions=INSTRUCTIONS,
    greeting="City Cabs, Sam speaking. Where can we take you?",
    tools=[book_taxi, where_is_my_taxi, fare_estimate, cancel_taxi],
)
