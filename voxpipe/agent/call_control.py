"""What a phone agent does besides talking, as tools any agent can offer.

``end_call``: the model calls it once the conversation is over; the call ends after the
reply in progress (the goodbye) has been heard, not when the tool runs, so the caller is
never cut off mid-word. Over Twilio the server closes the media stream, and the call hangs
up unless the TwiML goes on after ``<Connect>``; a native client gets ``call.ended`` and
closes itself. OpenAI Realtime has no such event, and its clients hang up themselves. A
reply the caller talks over is not the last: the end is called off (they had more to say).

Add it to an agent like any tool: ``Agent(..., tools=[end_call])``, or in an agent file
``call_control: [end_call]``.
"""

from __future__ import annotations

from voxpipe.agent.call_context import CallContext
from voxpipe.agent.python_tools import tool
from voxpipe.agent.tools import ToolFailed


@tool(
    description="End the phone call. Call it only when the caller has said goodbye or "
    "asked to hang up, together with your own short goodbye.",
    idempotent=True,
)
async def end_call(call: CallContext) -> str:
    if call.end is None or not call.end("the agent ended the call"):
        raise ToolFailed("this call cannot be ended by the server")
    return "The call will end after your goodbye. Say a short goodbye now."


CALL_CONTROL = {"end_call": end_call}  # by the names an agent file uses
