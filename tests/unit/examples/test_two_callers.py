"""Finding 1 of issue 29 as it was found: two API keys, one server serving Luigi's, over
the native protocol on fake engines. Key one books a table under Smith; key two asks to
cancel "the booking under Smith" and to have it read back, and says yes. The server's
own knowledge of who is calling (the key's principal, in the tools' call context) decides:
key two hears the same "cannot find" as for a name nobody booked, and the booking stays.
The model's words are scripted (``Host``); everything after them is the real path: the
key's check, the session's owner, the readback, the caller's yes, the tool, the book."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.unit.conversation.tools_support import called
from tests.unit.examples.conftest import RESTAURANT
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.native_wire import App, Line
from voxpipe.agent import load_agent
from voxpipe.config import Config
from voxpipe.engines.base import Engines, LlmOutput, LlmRequest

KEYS = [{"name": "one", "key": "key-one-secret"}, {"name": "two", "key": "key-two-secret"}]
SMITH = {"name": "Smith", "date": "Saturday", "time": "1 pm", "party_size": 4}
HEARD = (
    "a table for four on Saturday at 1 pm under Smith",
    "yes please",
    "cancel the booking under Smith for Saturday",
    "yes",
)


class Host(FakeLlm):
    """A model that books when the caller asks to book and cancels when they ask to cancel
    (the warm-up and anything else get words)."""

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        said = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        if "cancel" in said:
            self.replies = [[called("cancel_booking", "call_2", name="Smith", date="Saturday")]]
        elif "table" in said:
            self.replies = [[called("book_table", "call_1", **SMITH)]]
        else:
            self.replies = [["Of course."]]
        return super().generate(request)


async def turn(line: Line) -> str:
    """One spoken turn; what the agent answered."""
    await line.speak()
    return str([e for e in line.events if e["type"] == "response.done"][-1]["text"])


async def test_another_key_cannot_cancel_a_booking_by_its_name(book: Path) -> None:
    agent = load_agent(f"{RESTAURANT / 'agent.py'}:agent")
    config = quiet_config(auth={"api_keys": KEYS})

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt(*HEARD), Host(), FakeTts())

    said: list[str] = []
    async with serving(config, engines, 20, agent=agent) as (port, http):
        for key in ("key-one-secret", "key-two-secret"):
            async with App(port, http).connect(api_key=key) as line:
                await line.start()
                await line.until("turn.metrics")  # the greeting
                said += [await turn(line), await turn(line)]
    import db

    [booking] = db.database().bookings()
    assert (booking.name, booking.made_by) == ("Smith", "key:one")
    assert (
        said[0] == "A table for 4 Saturday the 14th of March at 1 pm, under Smith. Shall I book it?"
    )
    assert said[1].startswith("Done: a table for 4"), said
    assert said[2].startswith("Shall I cancel the booking under Smith"), said
    assert said[3] == (
        "I cannot find a booking under Smith for Saturday the 14th of March made from this "
        "line. If you have the booking reference, tell me and I will cancel it."
    ), said
    assert "1 pm" not in said[3]  # nor its time
