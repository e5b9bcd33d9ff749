"""Riverside Family Clinic: a receptionist who books, finds and cancels appointments."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from bench.tool_eval.agents.common import Clock, Day, Surname, said
from voxpipe.agent import Agent, tool

INSTRUCTIONS = """\
You are Maya, the receptionist of Riverside Family Clinic, 40 Mill Road, answering the \
phone. Speak naturally, in one or two short sentences, without lists or markdown.

Use the tools for anything about appointments: free_slots to see which times are free on \
a day, book_appointment to book one (you need the patient's surname, a day and a time; ask \
for what is missing), cancel_appointment to cancel one, next_appointment to tell a patient \
when their next appointment is. Never say a time is free or booked unless a tool told you.

What you know without a tool: the clinic sees adults and children; bring your health card \
and a list of your medicines. For an emergency, call 911. Prescriptions are renewed at an \
appointment. Parking is behind the building. We do not do X-rays here."""

Doctor = Annotated[str | None, Field(description="the doctor's surname, if the caller named one")]


@tool(effect="read_only", idempotent=True, phrase="Let me look at the diary.")
def free_slots(day: Day, doctor: Doctor = None) -> dict[str, Any]:
    """The free appointment times on a day, for any doctor or the one named."""
    return said("On that day I have 9:30 am and 2 pm free.", times=["09:30", "14:00"])


@tool(idempotent=False, phrase="Booking that for you.")
def book_appointment(name: Surname, day: Day, time: Clock) -> dict[str, Any]:
    """Book an appointment for a patient on a day at a time."""
    return said(f"You are booked in, {name}, {day} at {time}.", booked=True)


@tool(idempotent=True, phrase="Let me find it.")
def cancel_appointment(name: Surname, day: Day) -> dict[str, Any]:
    """Cancel a patient's appointment on a day."""
    return said(f"I have cancelled the appointment for {name} on {day}.", cancelled=True)


@tool(effect="read_only", idempotent=True, phrase="Let me check.")
def next_appointment(name: Surname) -> dict[str, Any]:
    """When a patient's next appointment is."""
    return said(f"{name}, your next appointment is Thursday at 10 am.", day="thursday")


agent = Agent(
    name="clinic",
    instructions=INSTRUCTIONS,
    greeting="Riverside Family Clinic, this is Maya. How can I help?",
    tools=[free_slots, book_appointment, cancel_appointment, next_appointment],
)
