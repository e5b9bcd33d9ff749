"""Who a tool call is for: the caller as the server knows them, never as the model says.

A tool that books, cancels or reads someone's records has to know whose they are. The
model's arguments cannot tell it: the model writes whatever the caller (or a misheard
caller) put in its mouth, so a name in the arguments is a claim, not an identity. The
:class:`CallContext` is what the server itself established about the call (the principal
that authenticated the connection, the call's ids, the transport, and the caller's number
or SIP URI where the transport carries one) and it reaches each kind of tool by a path the
model does not write:

- a Python tool declares a parameter typed :class:`CallContext` (any name); it is left out
  of the schema the model sees and filled in by the toolbox;
- an HTTP tool gets it as ``X-Voxpipe-*`` request headers (:meth:`CallContext.headers`);
- an MCP tool gets it in the request's ``_meta`` under ``voxpipe/call``
  (:meth:`CallContext.meta`);
- a client's own tool (Realtime ``session.tools``) runs in the client, which knows its own
  session.

``caller`` is as trustworthy as the connection that reported it: over Twilio it is the
``From`` custom parameter of the TwiML that the operator's own webhook wrote, on a stream
the server authenticated (Telnyx and Exotel put it in their start message; Plivo and Vonage
carry it as a stream parameter too); over SIP it is the INVITE's ``From`` URI, which the
calling side writes. A tool should treat it as "the number this call says it is from" and
ask for a booking reference when that is not enough.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from voxpipe.observability.logs import check_id

MAX_CALLER_CHARS = 256
"""A phone number or SIP URI longer than this is not one: it is dropped, not truncated."""


@dataclass(frozen=True)
class CallContext:
    """The call a tool runs for (module docstring)."""

    principal: str
    """Who authenticated the connection: ``key:<name>`` or ``key:<name>/<subject>`` for a
    token, ``anonymous`` with authentication off."""
    call_id: str
    """This phone call, across reconnects and failover (the call record's id)."""
    session_id: str
    """The session the transport named (a Twilio ``streamSid``, a native session id)."""
    transport: str
    """``native``, ``openai-realtime``, ``twilio``, ``webrtc``, ..."""
    caller: str | None = None
    """The caller's number (E.164) or SIP URI, where the transport carries one."""
    end: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)
    """Ends the call once the reply in progress has been heard (``agent/call_control.py``);
    False where this call cannot be ended by the server (None: no call behind it)."""
    transfer: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)
    """Hands the call to a number or SIP URI once the reply in progress has been heard;
    False where this call cannot be transferred (None: no call behind it)."""

    @property
    def identity(self) -> str:
        """Who the caller is for a tool that keeps records per caller: their number where
        the line gives one (two calls from one phone are one customer), else the principal
        (two callers on one API key without numbers are one customer too: a tool that must
        tell them apart asks for a reference)."""
        return f"tel:{self.caller}" if self.caller else self.principal

    def headers(self) -> dict[str, str]:
        """The context as HTTP request headers (an HTTP tool's webhook reads these)."""
        headers = {
            "X-Voxpipe-Principal": self.principal,
            "X-Voxpipe-Call-Id": self.call_id,
            "X-Voxpipe-Session-Id": self.session_id,
            "X-Voxpipe-Transport": self.transport,
        }
        if self.caller:
            headers["X-Voxpipe-Caller"] = self.caller
        return headers

    def meta(self) -> dict[str, object]:
        """The context as an MCP request's ``_meta`` entry."""
        return {
            "voxpipe/call": {
                "principal": self.principal,
                "call_id": self.call_id,
                "session_id": self.session_id,
                "transport": self.transport,
                "caller": self.caller,
            }
        }


def checked_caller(value: object) -> str | None:
    """A caller number or URI a transport may pass on, or None: printable ASCII with no
    spaces, at most :data:`MAX_CALLER_CHARS` long (anything else would reach a tool's
    records, the logs and an operator's terminal as it was sent)."""
    if not isinstance(value, str) or not value.isascii():
        return None
    try:
        return check_id(value, MAX_CALLER_CHARS)  # the ids' rule: printable, no whitespace
    except ValueError:
        return None


NO_CALL = CallContext("anonymous", "", "", "none")
"""The context of a tool run outside any call (``voxpipe agent --call``, a unit test)."""
