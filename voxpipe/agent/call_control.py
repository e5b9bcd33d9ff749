"""What a phone agent does besides talking, as tools any agent can offer.

``end_call``: the model calls it once the conversation is over; the call ends after the
reply in progress (the goodbye) has been heard, not when the tool runs, so the caller is
never cut off mid-word. Over Twilio the server closes the media stream, and the call hangs
up unless the TwiML goes on after ``<Connect>``; a native client gets ``call.ended`` and
closes itself. OpenAI Realtime has no such event, and its clients hang up themselves. A
reply the caller talks over is not the last: the end is called off (they had more to say).
It runs only when the caller's words close the call ("goodbye", "that's all":
``closing.py``); otherwise the call is dropped and the model answers without tools. When
they do and the model says goodbye in words without calling it, the goodbye it said stands
for the call (``ToolPolicy.implied_by_reply``): the call ends after it has played.

``transfer_call_to(target)``: hands the call to a person at ``target`` after saying so
(``transfer_to`` in an agent file), when the caller asks for one.

Add ``end_call`` to an agent like any tool: ``Agent(..., tools=[end_call])``, or in an agent file
``call_control: [end_call]``. It says "Thank you for calling. Goodbye!" as written;
``end_call_saying("...")`` makes one with the agent's own words.
"""

from __future__ import annotations

from voxpipe.agent.call_context import CallContext
from voxpipe.agent.closing import asks_for_a_person, closes_the_call, says_goodbye
from voxpipe.agent.python_tools import PythonTool, python_tool
from voxpipe.agent.tools import ToolDefinitionError, ToolFailed, ToolPolicy

DEFAULT_GOODBYE = "Thank you for calling. Goodbye!"
DESCRIPTION = (
    "End the phone call. Call it only when the caller has said goodbye or asked to hang up."
)


def end_call_saying(goodbye: str = DEFAULT_GOODBYE) -> PythonTool:
    """``end_call`` whose goodbye is ``goodbye``: the reply says it as written, with no
    second model request (a small model asked to say goodbye read the tool's result out)."""

    async def end_call(call: CallContext) -> dict[str, str]:
        if call.end is None or not call.end("the agent ended the call"):
            raise ToolFailed("this call cannot be ended by the server")
        return {"goodbye": goodbye}

    return python_tool(
        end_call,
        description=DESCRIPTION,
        policy=ToolPolicy(
            idempotent=True,
            says="goodbye",
            only_if_caller_said=closes_the_call,
            implied_by_reply=says_goodbye,
        ),
    )


end_call = end_call_saying()
CALL_CONTROL = {"end_call": end_call}  # by the names an agent file uses

DEFAULT_TRANSFER_SAYS = "Let me put you through to a colleague. One moment, please."


def transfer_call_to(target: str, says: str = DEFAULT_TRANSFER_SAYS) -> PythonTool:
    """``transfer_call``: hands the call to ``target`` (a phone number or SIP URI the agent
    is configured with; the model never chooses where a call goes) after saying ``says``.
    Over a phone provider the stream asks its REST API to move the call (Twilio, Telnyx,
    Plivo, Vonage: ``telephony.*``, ``docs/telephony.md``). It runs only when the caller
    asks for a person."""
    if not target.strip() or any(c in target for c in "<>&\"'"):
        raise ToolDefinitionError(f"transfer_call: {target!r} is no number or SIP URI")

    async def transfer_call(call: CallContext) -> dict[str, str]:
        if call.transfer is None or not call.transfer(target):
            raise ToolFailed("this call cannot be transferred by the server")
        return {"says": says}

    return python_tool(
        transfer_call,
        description="Put the caller through to a person. Call it only when the caller asks "
        "to speak to a person.",
        policy=ToolPolicy(idempotent=True, says="says", only_if_caller_said=asks_for_a_person),
    )
